//! SA queries on the in-process fabric. Loop ports send their queries to
//! `LoopIdentity::SM_LID`, where nobody answers unless a test opens a fake SA
//! there; so every test here holds [`SA_TESTS`] (one fabric per process).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::client;
use super::pathrec::PathQuery;
use super::query::{self, Completion, Timing};
use super::{EINTR, ETIMEDOUT};
use crate::cm::device::Device;
use crate::cm::path::Path;
use crate::cm::tests::loop_name;
use crate::cm::worker;
use crate::errno::{CmResult, EINVAL, ENODEV};
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{MadTransport, RecvFn};

/// Serialises the tests that use the fabric's SM LID.
pub static SA_TESTS: Mutex<()> = Mutex::new(());

pub(super) const WAIT: Duration = Duration::from_secs(10);
const PATH_RECORD: u16 = 0x0035;
/// Short tries: the timeout tests end in milliseconds, whatever the load
/// (nothing asserts how long they took).
const QUICK: Timing = Timing {
    per_try: Duration::from_millis(5),
    retries: 2,
};

/// What the fake SA answers.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// The queried record with `dlid` and `slid` filled in.
    Record,
    /// The queried record with the number of the query (from 1) as `dlid`:
    /// which query an answer came from.
    Numbered,
    /// An error status (0x0300: no records).
    NoRecords,
}

/// How the fake SA behaves, and what it saw.
struct Script {
    answer: Answer,
    /// The next this many queries are answered Busy.
    busy: AtomicU32,
    /// Each answer waits for a message here first (or 10 s).
    hold: Option<std::sync::Mutex<Receiver<()>>>,
    /// PathRecord queries received.
    queries: AtomicU64,
}

/// The MAD status bit Busy.
const STATUS_BUSY: u16 = 0x0001;

/// A fake SA at the SM LID, answering every SubnAdmGet(PathRecord).
pub(crate) struct FakeSa {
    transport: Arc<LoopTransport>,
    script: Arc<Script>,
}

impl FakeSa {
    pub(crate) fn open(answer: Answer) -> Self {
        Self::scripted(answer, 0, None)
    }

    /// An SA that answers the first `busy` queries Busy, and each answer
    /// only once `hold` (if any) gives a message.
    pub(super) fn scripted(answer: Answer, busy: u32, hold: Option<Receiver<()>>) -> Self {
        Self::scripted_at(LoopIdentity::SM_LID, answer, busy, hold)
    }

    /// An SA at `lid` instead of the fabric's SM LID (an SM that moved).
    pub(super) fn open_at(lid: u16, answer: Answer) -> Self {
        Self::scripted_at(lid, answer, 0, None)
    }

    fn scripted_at(lid: u16, answer: Answer, busy: u32, hold: Option<Receiver<()>>) -> Self {
        let me = LoopIdentity::from_lid(lid).unwrap();
        let this: Arc<OnceLock<Arc<LoopTransport>>> = Arc::default();
        let script = Arc::new(Script {
            answer,
            busy: AtomicU32::new(busy),
            hold: hold.map(std::sync::Mutex::new),
            queries: AtomicU64::new(0),
        });
        let (inner, seen) = (this.clone(), script.clone());
        let recv: RecvFn = Arc::new(move |_port, from, mad| {
            if u16::from_be_bytes([mad[16], mad[17]]) != PATH_RECORD {
                return;
            }
            let number = seen.queries.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(hold) = &seen.hold {
                let _ = hold.lock().unwrap().recv_timeout(WAIT);
            }
            let mut resp = *mad;
            resp[3] = 0x81;
            let busy = seen
                .busy
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            match seen.answer {
                _ if busy => resp[4..6].copy_from_slice(&STATUS_BUSY.to_be_bytes()),
                Answer::Record => {
                    resp[56 + 40..56 + 42].copy_from_slice(&7u16.to_be_bytes());
                    resp[56 + 42..56 + 44].copy_from_slice(&2u16.to_be_bytes());
                }
                Answer::Numbered => {
                    resp[56 + 40..56 + 42].copy_from_slice(&(number as u16).to_be_bytes());
                }
                Answer::NoRecords => resp[4..6].copy_from_slice(&0x0300u16.to_be_bytes()),
            }
            if let Some(t) = inner.get() {
                let _ = t.send(1, &from, &resp);
            }
        });
        let transport = LoopTransport::open(me, recv).unwrap();
        let _ = this.set(transport.clone());
        FakeSa { transport, script }
    }

    /// How many PathRecord queries reached this SA.
    pub(crate) fn queries(&self) -> u64 {
        self.script.queries.load(Ordering::SeqCst)
    }
}

impl Drop for FakeSa {
    fn drop(&mut self) {
        self.transport.close();
    }
}

/// A device, and the outcomes of its queries' callbacks as they run.
struct Fixture {
    _serial: MutexGuard<'static, ()>,
    device: Arc<Device>,
}

impl Fixture {
    fn new() -> Self {
        let serial = SA_TESTS.lock();
        Fixture {
            _serial: serial,
            device: crate::cm::open_device(&loop_name()).unwrap(),
        }
    }

    fn query(&self) -> PathQuery {
        let dgid = LoopIdentity::from_name("loop1").unwrap().gid;
        PathQuery::between(self.device.ports[0].gids[0].gid, dgid, 0xffff)
    }

    /// Starts a query whose callback reports to the receiver returned.
    fn start(&self, timing: Timing) -> (i32, usize, Receiver<CmResult<Path>>) {
        let (tx, rx) = channel();
        let done = Completion::Callback(Box::new(move |outcome| {
            assert!(worker::on_worker(), "SA callbacks run on the worker");
            tx.send(outcome).unwrap();
        }));
        let (id, handle) = self
            .device
            .start_path_query(1, self.query(), timing, done, None)
            .unwrap();
        (id, handle, rx)
    }

    fn queries_sent(&self) -> u64 {
        self.device.as_loop().unwrap().sent(PATH_RECORD)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = crate::cm::close_device(&self.device);
    }
}

/// Everything queued so far ran: a second callback would have by now.
fn settle() {
    assert!(worker::wait_for_queued_work(crate::cm::Cm::process(), WAIT));
}

#[test]
fn no_answer_calls_back_once_with_etimedout_after_every_retry() {
    let f = Fixture::new();
    let (_, _, outcomes) = f.start(QUICK);
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap(), Err(ETIMEDOUT));
    assert_eq!(f.queries_sent(), 3, "the first try and 2 retries");
    settle();
    assert!(outcomes.try_recv().is_err(), "one callback only");
    assert_eq!(query::outstanding(crate::cm::Cm::process()), 0);
}

#[test]
fn an_answer_completes_the_query_with_its_record() {
    let f = Fixture::new();
    let _sa = FakeSa::open(Answer::Record);
    let long = Timing {
        per_try: WAIT,
        retries: 0,
    };
    let (_, _, outcomes) = f.start(long);
    let path = outcomes.recv_timeout(WAIT).unwrap().unwrap();
    assert_eq!((path.dlid, path.slid), (7, 2));
    assert_eq!(path.dgid, f.query().rec.dgid);
    assert_eq!(f.queries_sent(), 1);
    assert_eq!(query::outstanding(crate::cm::Cm::process()), 0);
}

#[test]
fn an_error_status_calls_back_with_einval() {
    let f = Fixture::new();
    let _sa = FakeSa::open(Answer::NoRecords);
    let (_, _, outcomes) = f.start(Timing {
        per_try: WAIT,
        retries: 0,
    });
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap(), Err(EINVAL));
}

#[test]
fn cancel_calls_back_once_with_eintr_and_never_again() {
    let f = Fixture::new();
    let (id, handle, outcomes) = f.start(QUICK);
    query::cancel(crate::cm::Cm::process(), id, handle);
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap(), Err(EINTR));
    query::cancel(crate::cm::Cm::process(), id, handle);
    // Past the query's own timeout: its timer was cancelled with it.
    std::thread::sleep(QUICK.per_try * 4);
    settle();
    assert!(outcomes.try_recv().is_err(), "one callback only");
    assert_eq!(f.queries_sent(), 1);
}

#[test]
fn cancel_of_a_finished_query_or_with_a_wrong_handle_does_nothing() {
    let f = Fixture::new();
    let (id, handle, outcomes) = f.start(QUICK);
    query::cancel(crate::cm::Cm::process(), id, handle + 1);
    query::cancel(crate::cm::Cm::process(), -1, handle);
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap(), Err(ETIMEDOUT));
    query::cancel(crate::cm::Cm::process(), id, handle);
    settle();
    assert!(outcomes.try_recv().is_err());
}

#[test]
fn closing_the_device_flushes_its_queries_with_eintr() {
    let f = Fixture::new();
    let (_, _, outcomes) = f.start(Timing {
        per_try: WAIT,
        retries: 0,
    });
    crate::cm::close_device(&f.device).unwrap();
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap(), Err(EINTR));
    let again = f.device.start_path_query(
        1,
        f.query(),
        QUICK,
        Completion::Callback(Box::new(|_| {})),
        None,
    );
    assert_eq!(again.err(), Some(ENODEV));
}

#[test]
fn a_waiting_query_gets_the_answer_or_etimedout() {
    let f = Fixture::new();
    let port = f.device.ports[0].clone();
    {
        let _sa = FakeSa::open(Answer::Record);
        assert_eq!(f.device.query_path(&port, &f.query()).unwrap().dlid, 7);
    }
    let alone = |done| {
        Ok(query::NewQuery {
            owner: 1,
            sa_lid: 0,
            query: f.query(),
            send: Arc::new(|_| Ok(())),
            timing: QUICK,
            done,
            client: None,
        })
    };
    assert_eq!(
        query::wait_for(crate::cm::Cm::process(), alone),
        Err(ETIMEDOUT)
    );
}

#[test]
fn a_failed_first_send_is_the_callers_error_and_a_failed_resend_eio() {
    let _serial = SA_TESTS.lock();
    let sends = Arc::new(AtomicU32::new(0));
    let new = |fail_from: u32, done| {
        let sends = sends.clone();
        query::NewQuery {
            owner: 1,
            sa_lid: 0,
            query: PathQuery::between([0; 16], [0; 16], 0xffff),
            send: Arc::new(move |_| {
                let n = sends.fetch_add(1, Ordering::SeqCst);
                if n >= fail_from { Err(ENODEV) } else { Ok(()) }
            }),
            timing: QUICK,
            done,
            client: None,
        }
    };
    let never = Completion::Callback(Box::new(|_| panic!("no callback")));
    assert_eq!(
        query::submit(crate::cm::Cm::process(), new(0, never)).err(),
        Some(ENODEV)
    );
    assert_eq!(query::outstanding(crate::cm::Cm::process()), 0);

    sends.store(0, Ordering::SeqCst);
    let (tx, outcomes) = channel();
    let done = Completion::Callback(Box::new(move |outcome| tx.send(outcome).unwrap()));
    query::submit(crate::cm::Cm::process(), new(1, done)).unwrap();
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap(), Err(crate::errno::EIO));
    assert_eq!(sends.load(Ordering::SeqCst), 2);
    settle();
    assert!(outcomes.try_recv().is_err(), "one callback only");
}

#[test]
fn a_roce_port_has_no_sa_eagain_as_without_an_sm() {
    let _serial = SA_TESTS.lock();
    let roce = Device::open_loop_as_roce(crate::cm::Cm::process(), &loop_name()).unwrap();
    let done = Completion::Callback(Box::new(|_| panic!("no callback")));
    let query = PathQuery::between([0; 16], [0; 16], 0xffff);
    let started = roce.start_path_query(1, query, QUICK, done, None);
    assert_eq!(started.err(), Some(crate::cm::worker::EAGAIN));
    assert_eq!(query::outstanding(crate::cm::Cm::process()), 0);
    roce.close();
}

#[test]
fn a_waiter_on_the_worker_resends_by_itself() {
    let _serial = SA_TESTS.lock();
    let (tx, outcome) = channel();
    worker::queue_sa_callback(
        crate::cm::Cm::process(),
        Box::new(move || {
            let sends = Arc::new(AtomicU32::new(0));
            let counted = sends.clone();
            let waited = query::wait_for(crate::cm::Cm::process(), |done| {
                counted_query(counted, done)
            });
            tx.send((waited, sends.load(Ordering::SeqCst))).unwrap();
        }),
    );
    let (waited, sends) = outcome.recv_timeout(WAIT).unwrap();
    assert_eq!(waited, Err(ETIMEDOUT));
    assert_eq!(
        sends, 3,
        "the first try and 2 retries, with no timer firing"
    );
}

#[test]
fn unregister_waits_for_a_callback_in_progress() {
    let f = Fixture::new();
    let storage = [0u64; 4];
    let addr = &storage as *const [u64; 4] as usize;
    client::register(addr);
    let (entered_tx, entered) = channel();
    let (release, release_rx) = channel::<()>();
    let returned = Arc::new(AtomicBool::new(false));
    let flag = returned.clone();
    let done = Completion::Callback(Box::new(move |_| {
        entered_tx.send(()).unwrap();
        release_rx.recv_timeout(WAIT).unwrap();
        flag.store(true, Ordering::SeqCst);
    }));
    let hold = client::hold(addr).unwrap();
    let (id, handle) = f
        .device
        .start_path_query(1, f.query(), QUICK, done, Some(hold))
        .unwrap();
    query::cancel(crate::cm::Cm::process(), id, handle);
    entered.recv_timeout(WAIT).unwrap();
    let unregister = std::thread::spawn(move || {
        client::unregister(addr);
        returned.load(Ordering::SeqCst)
    });
    // Give a wrong unregister the chance to return early.
    std::thread::sleep(Duration::from_millis(50));
    release.send(()).unwrap();
    assert!(unregister.join().unwrap(), "returned after the callback");
    assert!(client::hold(addr).is_none(), "unregistered");
}

#[test]
fn a_device_closing_during_the_first_send_gives_one_outcome_only() {
    let _serial = SA_TESTS.lock();
    const OWNER: usize = 0x5a5a;
    let (tx, outcomes) = channel();
    let done = Completion::Callback(Box::new(move |outcome| tx.send(outcome).unwrap()));
    // close_device on another thread runs between the query's insertion and
    // its first send: the flush completes the query, then the send finds
    // the device closed.
    let submitted = query::submit(
        crate::cm::Cm::process(),
        query::NewQuery {
            owner: OWNER,
            sa_lid: 0,
            query: PathQuery::between([0; 16], [0; 16], 0xffff),
            send: Arc::new(|_| {
                query::flush(crate::cm::Cm::process(), OWNER);
                Err(ENODEV)
            }),
            timing: QUICK,
            done,
            client: None,
        },
    );
    settle();
    let callbacks: Vec<_> = outcomes.try_iter().collect();
    match submitted {
        Err(e) => assert!(
            callbacks.is_empty(),
            "the call failed with {e:?} and its callback ran too: {callbacks:?}"
        ),
        Ok(_) => assert_eq!(callbacks, vec![Err(EINTR)]),
    }
}

#[test]
fn an_answer_from_a_lid_that_is_not_the_sms_is_dropped() {
    let f = Fixture::new();
    let (id, handle, outcomes) = f.start(Timing {
        per_try: WAIT,
        retries: 0,
    });
    // Another node of the subnet (not the SM) guesses the TID: ids are
    // sequential. The kernel's MAD layer matches a response to its request
    // only if it comes from where the request went (`rcv_has_same_gid`).
    let liar = LoopTransport::open(
        LoopIdentity::from_name(&loop_name()).unwrap(),
        Arc::new(|_, _, _| {}),
    )
    .unwrap();
    let mut lie = f.query().encode(id as u32);
    lie[3] = 0x81;
    lie[56 + 40..56 + 42].copy_from_slice(&0x666u16.to_be_bytes());
    let victim = crate::transport::MadAddr {
        dgid: f.device.ports[0].gids[0].gid,
        ..Default::default()
    };
    liar.send(1, &victim, &lie).unwrap();
    liar.close();
    query::cancel(crate::cm::Cm::process(), id, handle);
    assert_eq!(
        outcomes.recv_timeout(WAIT).unwrap().map(|p| p.dlid),
        Err(EINTR),
        "the liar's record was taken"
    );
}

#[test]
fn a_callback_may_start_the_next_query() {
    let f = Fixture::new();
    let _sa = FakeSa::open(Answer::Record);
    let device = f.device.clone();
    let query = f.query();
    let (tx, outcomes) = channel();
    let long = Timing {
        per_try: WAIT,
        retries: 0,
    };
    let second_tx = tx.clone();
    let done = Completion::Callback(Box::new(move |first| {
        tx.send(first).unwrap();
        let again = Completion::Callback(Box::new(move |o| second_tx.send(o).unwrap()));
        device
            .start_path_query(1, query, long, again, None)
            .unwrap();
    }));
    f.device
        .start_path_query(1, f.query(), long, done, None)
        .unwrap();
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap().unwrap().dlid, 7);
    assert_eq!(outcomes.recv_timeout(WAIT).unwrap().unwrap().dlid, 7);
    settle();
    assert!(outcomes.try_recv().is_err());
    assert_eq!(query::outstanding(crate::cm::Cm::process()), 0);
}

#[test]
fn init_paths_wait_ends_with_a_documented_errno_when_its_device_closes() {
    let f = Fixture::new();
    let port = f.device.ports[0].clone();
    let (device, query) = (f.device.clone(), f.query());
    // ibcm_init_path on an InfiniBand port: its thread waits for the SA.
    let waiter = std::thread::spawn(move || device.query_path(&port, &query));
    let until = std::time::Instant::now() + WAIT;
    while query::outstanding(crate::cm::Cm::process()) == 0 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
    crate::cm::close_device(&f.device).unwrap();
    let got = waiter.join().unwrap().map(|p| p.dlid);
    assert_eq!(got, Err(ENODEV), "ibcm_init_path(3): the device was closed");
}

#[test]
fn a_query_waited_for_on_another_engines_worker_is_resent_by_its_engines_timers() {
    use crate::cm::engine::settle;
    use crate::cm::{Clock, Cm, VirtualClock};
    use crate::timer::TICK;

    // The query's engine runs on a clock that moves only when told; the
    // waiter blocks on the worker of another engine, whose handler asked.
    let clock = VirtualClock::new();
    let engine = Cm::with_clock(Clock::Virtual(clock.clone()));
    let other = Cm::new();
    let sends = Arc::new(AtomicU32::new(0));
    let (tx, outcome) = channel();
    let (waiter_engine, counted) = (engine.clone(), sends.clone());
    worker::queue_sa_callback(
        &other,
        Box::new(move || {
            let alone = |done| counted_query(counted, done);
            tx.send(query::wait_for(&waiter_engine, alone)).unwrap();
        }),
    );
    crate::cm::tests::wait_until("the first send", || sends.load(Ordering::SeqCst) == 1);
    // Real time passes, the engine's does not: no try timed out on it.
    std::thread::sleep(QUICK.per_try * 10);
    assert_eq!(
        sends.load(Ordering::SeqCst),
        1,
        "resent with no time passed"
    );
    assert_eq!(query::outstanding(&engine), 1);
    // Each try's timeout on the engine's clock resends it; the last ends it.
    for sent in 2..=3 {
        clock.advance(QUICK.per_try + TICK);
        assert!(settle(&[&engine], WAIT));
        assert_eq!(sends.load(Ordering::SeqCst), sent);
    }
    clock.advance(QUICK.per_try + TICK);
    assert_eq!(outcome.recv_timeout(WAIT).unwrap().err(), Some(ETIMEDOUT));
    assert_eq!(sends.load(Ordering::SeqCst), 3);
}

/// A QUICK query of device 1 to LID 0 that counts its sends in `counted`.
fn counted_query(counted: Arc<AtomicU32>, done: Completion) -> CmResult<query::NewQuery> {
    Ok(query::NewQuery {
        owner: 1,
        sa_lid: 0,
        query: PathQuery::between([0; 16], [0; 16], 0xffff),
        send: Arc::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }),
        timing: QUICK,
        done,
        client: None,
    })
}
