//! Timers on a virtual clock: two engines of their own in this process, on
//! one [`VirtualClock`] that moves only when the test says so. A REQ or DREQ
//! is resent exactly when its timeout has passed on the engines' clock,
//! never before; `IB_CM_DREQ_ERROR` comes after the last retry's timeout,
//! timewait ends when its computed time is over, an MRA stretches the
//! REQ's timeout. Nothing here sleeps: `settle` waits for the engines to
//! finish what is due, and time passes by `advance` alone.
//!
//! The timer wheel fires a deadline at its tick, never before it and at most
//! one tick ([`TICK`]) after: "just before" is a millisecond early, "just
//! after" a millisecond and a tick late.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::cm::engine::settle;
use crate::cm::path::convert_to_ms;
use crate::cm::{
    Clock, Cm, VirtualClock, open_device_in, send_drep, send_dreq, send_mra, send_req,
};
use crate::timer::TICK;
use crate::wire::attr;

/// How long `settle` may take on a loaded machine: work, not time.
const SETTLE: Duration = Duration::from_secs(30);
const MS: Duration = Duration::from_millis(1);
/// From a millisecond before a deadline to past the tick it fires at.
const PAST_IT: Duration = MS.saturating_add(TICK);

/// Two engines on one virtual clock, a device in each and a listener on B.
struct Fabric {
    clock: Arc<VirtualClock>,
    a_cm: Arc<Cm>,
    b_cm: Arc<Cm>,
    pair: Pair,
}

impl Fabric {
    fn new() -> Fabric {
        let clock = VirtualClock::new();
        let a_cm = Cm::with_clock(Clock::Virtual(clock.clone()));
        let b_cm = Cm::with_clock(Clock::Virtual(clock.clone()));
        let a = open_device_in(&a_cm, &loop_name()).unwrap();
        let b = open_device_in(&b_cm, &loop_name()).unwrap();
        let pair = Pair::open_both(a, b);
        pair.rec.on(
            IB_CM_DREQ_RECEIVED,
            Arc::new(|id, _| {
                send_drep(id, None).unwrap();
                0
            }),
        );
        Fabric {
            clock,
            a_cm,
            b_cm,
            pair,
        }
    }

    /// Lets both engines run what is due now.
    fn settle(&self) {
        assert!(
            settle(&[&self.a_cm, &self.b_cm], SETTLE),
            "engines did not settle"
        );
    }

    /// Moves the clock by `by` and lets what fell due run.
    fn advance(&self, by: Duration) {
        self.clock.advance(by);
        self.settle();
    }

    /// The timeout of the MAD `id` keeps for retransmission.
    fn msg_timeout(id: &Arc<CmIdPriv>) -> Duration {
        let l = id.lock();
        let ms = l.inner.msg.as_ref().expect("a tracked MAD").timeout_ms;
        Duration::from_millis(u64::from(ms))
    }

    /// Connects A's id to B's listener (no timer needs to fire for it).
    fn connect(&self) -> Arc<CmIdPriv> {
        send_req(&self.pair.active, &self.pair.req_params()).unwrap();
        self.settle();
        let passive = self.pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
        assert_eq!(self.pair.active.state(), IB_CM_ESTABLISHED);
        assert_eq!(passive.state(), IB_CM_ESTABLISHED);
        passive
    }

    fn finish(self, ids: &[&Arc<CmIdPriv>]) {
        self.pair.finish(ids);
        assert_eq!(self.a_cm.id_count(), 0);
        assert_eq!(self.b_cm.id_count(), 0);
    }
}

#[test]
fn two_engines_in_one_process_keep_their_own_tables_and_timers() {
    let fabric = Fabric::new();
    let passive = fabric.connect();
    // Each engine holds its own ids: A the active one, B the listener and
    // the one the REQ made; the process's engine none of them.
    assert_eq!(fabric.a_cm.id_count(), 1);
    assert_eq!(fabric.b_cm.id_count(), 2);
    assert!(!Arc::ptr_eq(&fabric.pair.a.cm, &fabric.pair.b.cm));
    assert!(
        Cm::process()
            .tables()
            .devices
            .values()
            .all(|d| !Arc::ptr_eq(d, &fabric.pair.a) && !Arc::ptr_eq(d, &fabric.pair.b))
    );
    send_dreq(&fabric.pair.active, None).unwrap();
    fabric.settle();
    // Both sides in timewait: each engine has one timer, the other's not.
    assert_eq!(fabric.pair.active.state(), IB_CM_TIMEWAIT);
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    assert_eq!(fabric.a_cm.pending(), (0, 1));
    assert_eq!(fabric.b_cm.pending(), (0, 1));
    fabric.finish(&[&passive]);
}

#[test]
fn cm_send_handler_resends_a_lost_req_exactly_when_its_timeout_passes() {
    let fabric = Fabric::new();
    let pair = &fabric.pair;
    pair.loop_a().drop_next(attr::REQ, 2).unwrap();
    send_req(&pair.active, &pair.req_params()).unwrap();
    fabric.settle();
    let timeout = Fabric::msg_timeout(&pair.active);
    assert!(timeout > MS, "{timeout:?}");
    assert_eq!(pair.loop_a().sent(attr::REQ), 1);
    // Not a moment before the timeout: no retransmission.
    fabric.advance(timeout - MS);
    assert_eq!(pair.loop_a().sent(attr::REQ), 1);
    fabric.advance(PAST_IT);
    assert_eq!(pair.loop_a().sent(attr::REQ), 2);
    // The second is lost too; the third, one timeout later, connects.
    fabric.advance(timeout - MS);
    assert_eq!(pair.loop_a().sent(attr::REQ), 2);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 0);
    fabric.advance(PAST_IT);
    assert_eq!(pair.loop_a().sent(attr::REQ), 3);
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    fabric.finish(&[&passive]);
}

#[test]
fn cm_process_send_error_req_sent_gives_req_error_after_the_last_retry_times_out() {
    let fabric = Fabric::new();
    let pair = &fabric.pair;
    pair.loop_a().drop_next(attr::REQ, 100).unwrap();
    let params = pair.req_params();
    send_req(&pair.active, &params).unwrap();
    fabric.settle();
    let timeout = Fabric::msg_timeout(&pair.active);
    for sent in 1..=params.max_cm_retries as u64 {
        fabric.advance(timeout + TICK);
        assert_eq!(pair.loop_a().sent(attr::REQ), sent + 1);
        assert_eq!(pair.rec.count(IB_CM_REQ_ERROR), 0);
    }
    // The last try's timeout, but one millisecond: still waiting.
    fabric.advance(timeout - MS);
    assert_eq!(pair.rec.count(IB_CM_REQ_ERROR), 0);
    fabric.advance(PAST_IT);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(
        pair.loop_a().sent(attr::REQ),
        1 + u64::from(params.max_cm_retries)
    );
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    // Nothing left armed for it.
    assert_eq!(fabric.a_cm.pending(), (0, 0));
    fabric.finish(&[]);
}

#[test]
fn cm_process_send_error_dreq_sent_gives_dreq_error_after_the_last_retry_then_timewait() {
    let fabric = Fabric::new();
    let passive = fabric.connect();
    let pair = &fabric.pair;
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    fabric.settle();
    let timeout = Fabric::msg_timeout(&pair.active);
    let retries = pair.req_params().max_cm_retries as u64;
    for sent in 1..=retries {
        fabric.advance(timeout - MS);
        assert_eq!(pair.loop_a().sent(attr::DREQ), sent);
        fabric.advance(PAST_IT);
        assert_eq!(pair.loop_a().sent(attr::DREQ), sent + 1);
    }
    assert_eq!(pair.rec.count(IB_CM_DREQ_ERROR), 0);
    fabric.advance(timeout + TICK);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(got.state, IB_CM_TIMEWAIT);
    assert_eq!(pair.loop_a().sent(attr::DREQ), 1 + retries);
    // Timewait runs on the same clock: TIMEWAIT_EXIT only once it is over.
    let timewait = Duration::from_millis(u64::from(convert_to_ms(
        pair.active.lock().inner.av.timeout,
    )));
    fabric.advance(timewait - MS);
    assert_eq!(pair.rec.count(IB_CM_TIMEWAIT_EXIT), 0);
    assert_eq!(pair.active.state(), IB_CM_TIMEWAIT);
    fabric.advance(PAST_IT);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    fabric.finish(&[&passive]);
}

#[test]
fn cm_timewait_handler_ends_timewait_when_its_computed_time_is_over() {
    let fabric = Fabric::new();
    let passive = fabric.connect();
    let pair = &fabric.pair;
    send_dreq(&pair.active, None).unwrap();
    fabric.settle();
    // The DREP came back: both sides wait out their own timewait.
    for id in [&pair.active, &passive] {
        assert_eq!(id.state(), IB_CM_TIMEWAIT);
    }
    let wait_of = |id: &Arc<CmIdPriv>| {
        Duration::from_millis(u64::from(convert_to_ms(id.lock().inner.av.timeout)))
    };
    let (a_wait, b_wait) = (wait_of(&pair.active), wait_of(&passive));
    assert!(a_wait > MS && b_wait > MS, "{a_wait:?} {b_wait:?}");
    let first = a_wait.min(b_wait);
    fabric.advance(first - MS);
    assert_eq!(pair.rec.count(IB_CM_TIMEWAIT_EXIT), 0);
    fabric.advance(a_wait.max(b_wait) - first + PAST_IT);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    assert_eq!(fabric.a_cm.pending(), (0, 0));
    assert_eq!(fabric.b_cm.pending(), (0, 0));
    fabric.finish(&[&passive]);
}

#[test]
fn cm_mra_handler_stretches_the_req_timeout_by_the_service_timeout() {
    let fabric = Fabric::new();
    let pair = &fabric.pair;
    // B's user asks for time before it answers: an MRA with service timeout
    // 20 (about 4.3 s), and no REP yet.
    const SERVICE_TIMEOUT: u8 = 20;
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(|id, _| {
            send_mra(id, SERVICE_TIMEOUT, None).unwrap();
            0
        }),
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    fabric.settle();
    assert_eq!(pair.active.state(), IB_CM_MRA_REQ_RCVD);
    let req_timeout = {
        let l = pair.active.lock();
        Duration::from_millis(u64::from(l.inner.msg.as_ref().unwrap().timeout_ms))
    };
    let stretched = Duration::from_millis(u64::from(convert_to_ms(SERVICE_TIMEOUT)));
    assert!(req_timeout >= stretched, "{req_timeout:?} < {stretched:?}");
    // The REQ's first timeout alone would have resent it long ago.
    fabric.advance(stretched / 2);
    assert_eq!(pair.loop_a().sent(attr::REQ), 1);
    assert_eq!(pair.active.state(), IB_CM_MRA_REQ_RCVD);
    fabric.advance(req_timeout - stretched / 2 - MS);
    assert_eq!(pair.loop_a().sent(attr::REQ), 1);
    // Once the stretched timeout is over, the REQ goes again.
    fabric.advance(PAST_IT);
    assert_eq!(pair.loop_a().sent(attr::REQ), 2);
    let passive = pair.rec.nth_new_id(1);
    fabric.finish(&[&passive]);
}

#[test]
fn an_engine_dropped_with_nothing_left_ends_its_worker_thread() {
    let fabric = Fabric::new();
    let passive = fabric.connect();
    let workers = [
        Arc::downgrade(&fabric.a_cm.worker),
        Arc::downgrade(&fabric.b_cm.worker),
    ];
    let clock = fabric.clock.clone();
    let rec = fabric.pair.rec.clone();
    fabric.finish(&[&passive]);
    drop(passive);
    // The recorder keeps the ids it saw (and they its handler).
    rec.clear();
    drop(rec);
    // Both engines are gone with their last device and id; their threads
    // see it and end, letting go of their workers.
    wait_until("the workers' threads to end", || {
        workers.iter().all(|w| w.strong_count() == 0)
    });
    // A clock that outlives its engines wakes nobody.
    clock.advance(Duration::from_secs(1));
}

#[test]
fn a_device_open_in_one_engine_is_ebusy_in_another_until_closed() {
    let (one, other) = (Cm::new(), Cm::new());
    let name = loop_name();
    let device = open_device_in(&one, &name).unwrap();
    assert_eq!(
        open_device_in(&other, &name).err(),
        Some(crate::errno::EBUSY)
    );
    assert_eq!(
        crate::cm::open_device(&name).err(),
        Some(crate::errno::EBUSY)
    );
    crate::cm::close_device(&device).unwrap();
    let again = open_device_in(&other, &name).unwrap();
    crate::cm::close_device(&again).unwrap();
}

#[test]
fn an_engine_dropped_with_an_sa_callback_queued_still_runs_it() {
    use crate::sa::PathQuery;
    use crate::sa::query::{self, Completion, NewQuery, Timing};
    use std::sync::mpsc::channel;

    let cm = Cm::new();
    let device = open_device_in(&cm, &loop_name()).unwrap();
    // The worker runs a first callback until the test lets it go.
    let (running_tx, running) = channel();
    let (release_tx, release) = channel::<()>();
    crate::cm::worker::queue_sa_callback(
        &cm,
        Box::new(move || {
            running_tx.send(()).unwrap();
            let _ = release.recv_timeout(WAIT);
        }),
    );
    running.recv_timeout(WAIT).unwrap();
    // A query of the device's, nowhere near its timeout: the close flushes
    // it, and its callback waits behind the first.
    let (tx, outcome) = channel();
    let new = NewQuery {
        owner: Arc::as_ptr(&device) as usize,
        sa_lid: 0,
        query: PathQuery::between([0; 16], [0; 16], 0xffff),
        send: Arc::new(|_| Ok(())),
        timing: Timing {
            per_try: WAIT,
            retries: 0,
        },
        done: Completion::Callback(Box::new(move |o| {
            let _ = tx.send(o);
        })),
        client: None,
    };
    query::submit(&cm, new).unwrap();
    crate::cm::close_device(&device).unwrap();
    // The engine goes with its last device while the callback is queued.
    drop(device);
    drop(cm);
    release_tx.send(()).unwrap();
    // Every query's callback runs once (the kernel's flush), engine or not.
    assert_eq!(
        outcome.recv_timeout(WAIT).map(|o| o.err()),
        Ok(Some(crate::sa::EINTR))
    );
}

#[test]
fn a_loop_device_open_in_another_engine_is_refused_with_the_reason() {
    let (a, b) = (Cm::new(), Cm::new());
    let name = loop_name();
    let device = open_device_in(&a, &name).unwrap();
    // The in-process fabric is the process's: `loopN` is one port of it,
    // whichever engine has it open.
    let refused = crate::refusal::for_call(|| open_device_in(&b, &name).map(drop));
    let (errno, rule) = refused.unwrap_err();
    assert_eq!(errno, crate::errno::EBUSY);
    let rule = rule.map(|r| r.to_string()).unwrap_or_default();
    assert!(rule.contains("already open in this process"), "{rule:?}");
    assert_eq!(b.tables().devices.len(), 0);
    crate::cm::close_device(&device).unwrap();
    // Closed there, it opens here.
    let device = open_device_in(&b, &name).unwrap();
    crate::cm::close_device(&device).unwrap();
}

#[test]
fn an_engine_reads_its_path_cache_settings_at_the_first_path_lookup_not_at_its_open() {
    // `IBCM_PATH_CACHE_TTL_MS` is read at the first call that uses the
    // cache (ib_cm(7)): opening a device, the C library's first call, must
    // not read it yet.
    let cm = Cm::new();
    let device = open_device_in(&cm, &loop_name()).unwrap();
    assert!(!cm.path_cache_made(), "made before any path lookup");
    let _ = device.path_cache().counters();
    assert!(cm.path_cache_made());
    crate::cm::close_device(&device).unwrap();
}
