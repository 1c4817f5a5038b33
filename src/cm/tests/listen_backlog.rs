//! Listeners inside a long-running daemon (issue 10): the listen backlog
//! bounds and counts requests, a request after its listener is destroyed is
//! forgotten, a listen racing destroy never revives the id.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use super::*;
use crate::abi::ib_cm_sidr_status::IB_SIDR_UNSUPPORTED;
use crate::cm::counters::attr_index;
use crate::cm::listen::LISTEN_BACKLOG;
use crate::cm::worker::{process_device_events, queue_checked};
use crate::cm::{SidrRepParams, SidrReqParams, destroy_id, send_req, send_sidr_rep, send_sidr_req};
use crate::wire::attr;

/// Keeps the worker busy: each event for the gate's id blocks its handler
/// until the test has released that many.
#[derive(Default)]
struct Gate {
    entered: AtomicUsize,
    released: Mutex<usize>,
    changed: Condvar,
}

impl Gate {
    fn handler(self: &Arc<Self>) -> Handler {
        let gate = self.clone();
        Arc::new(move |_, _| {
            let n = gate.entered.fetch_add(1, Ordering::AcqRel) + 1;
            let mut released = gate.released.lock();
            while *released < n {
                gate.changed.wait(&mut released);
            }
            0
        })
    }

    /// Queues one more blocking event for `id` (which has `handler()`), in
    /// order with received MADs: a checked event (as `ib_cm_notify`'s) is
    /// decided and delivered in its place in the queue, where a plain one
    /// would run before any MAD still queued.
    fn block(&self, id: &Arc<CmIdPriv>) {
        queue_checked(id, |_| Some(CmEvent::bare(IB_CM_USER_ESTABLISHED)));
    }

    fn wait_entered(&self, n: usize) {
        wait_until("the worker blocks", || {
            self.entered.load(Ordering::Acquire) >= n
        });
    }

    fn release(&self, n: usize) {
        *self.released.lock() = n;
        self.changed.notify_all();
    }
}

/// The orphan SIDR_REQ is forgotten silently (its listener was destroyed
/// before its SIDR_REQ_RECEIVED ran); the retransmission finds no listener
/// and gets the usual UNSUPPORTED.
#[test]
fn sidr_req_after_listener_destroyed_is_forgotten_and_its_retry_gets_unsupported() {
    let pair = Pair::new();
    let gate = Arc::new(Gate::default());
    let blocker = super::super::create_id(&pair.b, gate.handler()).unwrap();
    gate.block(&blocker);
    gate.wait_entered(1);
    let params = SidrReqParams {
        path: pair.a.init_path(1, &pair.b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        // Retransmitted soon; timers run on the worker, so not before the
        // orphan's event has been handled.
        timeout_ms: 50,
        private_data: Vec::new(),
        max_cm_retries: 5,
    };
    send_sidr_req(&pair.active, &params).unwrap();
    // Queued behind the SIDR_REQ: its new id is made before this runs, and
    // the new id's event waits behind it.
    gate.block(&blocker);
    gate.release(1);
    gate.wait_entered(2);
    assert_eq!(pair.b.id_count(), 3); // listener, blocker, new id

    destroy_id(&pair.listener, 0);
    gate.release(2);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    assert_eq!(got.sidr_status, Some(IB_SIDR_UNSUPPORTED as u8));
    assert_eq!(pair.rec.count(IB_CM_SIDR_REQ_RECEIVED), 0);
    // Answered once, to the retransmission: the orphan said nothing.
    assert_eq!(pair.loop_b().sent(attr::SIDR_REP), 1);
    let retries = pair.a.counters(1).unwrap().snapshot().tx_retries;
    assert!(retries[attr_index(attr::SIDR_REQ).unwrap()] >= 1);
    wait_until("the refused id is gone", || pair.b.id_count() == 1);
    destroy_id(&blocker, 0);
    pair.finish(&[]);
}

/// The new ids the listener's handler was given so far.
fn new_ids(rec: &Recorder) -> Vec<Arc<CmIdPriv>> {
    rec.seen
        .lock()
        .iter()
        .filter_map(|s| s.new_id.clone())
        .collect()
}

/// The backlog counts new ids whose request event waits to be handled:
/// REQs that arrive while the user takes no events (B in FD mode, a busy
/// daemon) fill it, the one beyond is dropped and counted; once the events
/// are taken, its retransmission gets in. (In worker mode a new id's event
/// runs before the worker takes another batch of MADs, so a burst never
/// fills it there.)
#[test]
fn listen_backlog_drops_and_counts_requests_beyond_it() {
    let pair = Pair::with_b_in_fd_mode();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // never answered
    let mut params = pair.req_params();
    params.remote_cm_response_timeout = 31; // no retransmission in this test
    let full: Vec<_> = (0..LISTEN_BACKLOG)
        .map(|i| {
            let id = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
            params.qp_num = 0x10_0000 + i as u32;
            send_req(&id, &params).unwrap();
            id
        })
        .collect();
    wait_until("the backlog is full", || {
        pair.b.id_count() == 1 + LISTEN_BACKLOG
    });
    let extra = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
    params.qp_num = 0x20_0000;
    // Retransmitted every second, for 15 s: longer than any wait here.
    params.remote_cm_response_timeout = 18;
    params.max_cm_retries = 15;
    send_req(&extra, &params).unwrap();
    wait_until("the REQ beyond the backlog is counted", || {
        counters(&pair.b).rx_listen_overflows == 1
    });
    assert_eq!(extra.state(), IB_CM_REQ_SENT);
    assert_eq!(pair.b.id_count(), 1 + LISTEN_BACKLOG);

    // Their events are taken (none answered): the retransmission gets in.
    let taken = process_device_events(&pair.b, LISTEN_BACKLOG as i32).unwrap();
    assert_eq!(taken, LISTEN_BACKLOG);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), LISTEN_BACKLOG);
    wait_until("the retransmitted REQ is taken", || {
        let _ = process_device_events(&pair.b, 1);
        pair.rec.count(IB_CM_REQ_RECEIVED) == LISTEN_BACKLOG + 1
    });
    assert_eq!(counters(&pair.b).rx_listen_overflows, 1);
    let last = new_ids(&pair.rec).pop().unwrap();
    assert_eq!(last.state(), IB_CM_REQ_RCVD);
    assert_eq!(
        u32::from_be(last.public.remote_id.load(Ordering::Relaxed)),
        { u32::from_be(extra.public.local_id.load(Ordering::Relaxed)) }
    );

    for id in new_ids(&pair.rec).iter().chain(&full) {
        destroy_id(id, 0);
    }
    pair.finish(&[&extra]);
}

/// A burst of REQs in worker mode never fills the backlog: each new id's
/// REQ_RECEIVED runs before the worker takes more MADs, as the kernel's
/// `cm_req_handler` calls the handler inside the work item that took the
/// REQ. (Before, 10,000 REQs queued at once made `ibcm-cmtime` connect 487
/// per second: all but 1,024 overflowed and waited for a retransmission.)
#[test]
fn a_burst_of_requests_in_worker_mode_never_overflows() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // never answered
    let first = Arc::new(Gate::default());
    let blocker = super::super::create_id(&pair.b, first.handler()).unwrap();
    first.block(&blocker); // every REQ below is queued before one is taken
    first.wait_entered(1);
    let mut params = pair.req_params();
    params.remote_cm_response_timeout = 31; // no retransmission in this test
    let n = 2 * LISTEN_BACKLOG;
    let sent: Vec<_> = (0..n)
        .map(|i| {
            let id = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
            params.qp_num = 0x30_0000 + i as u32;
            send_req(&id, &params).unwrap();
            id
        })
        .collect();
    first.release(1);
    wait_until("every REQ's event is handled", || {
        pair.rec.count(IB_CM_REQ_RECEIVED) == n
    });
    assert_eq!(counters(&pair.b).rx_listen_overflows, 0);
    for id in new_ids(&pair.rec).iter().chain(&sent) {
        destroy_id(id, 0);
    }
    destroy_id(&blocker, 0);
    pair.finish(&[]);
}

fn counters(device: &Device) -> crate::cm::counters::Snapshot {
    device.counters(1).unwrap().snapshot()
}

#[test]
fn listen_racing_destroy_never_revives_the_id() {
    let device = super::super::open_device(&loop_name()).unwrap();
    let rec = Arc::new(Recorder::default());
    let barrier = std::sync::Barrier::new(2);
    for round in 0..500u64 {
        let service_id = SERVICE_ID + round;
        let victim = super::super::create_id(&device, rec.handler()).unwrap();
        let listened = std::thread::scope(|s| {
            let listener = s.spawn(|| {
                barrier.wait();
                (0..20)
                    .filter(|_| super::super::listen(&victim, service_id).is_ok())
                    .count()
            });
            barrier.wait();
            destroy_id(&victim, 0);
            listener.join().unwrap()
        });
        assert!(listened <= 1, "round {round}: listened {listened} times");
        let fresh = super::super::create_id(&device, rec.handler()).unwrap();
        assert_eq!(
            super::super::listen(&fresh, service_id),
            Ok(()),
            "round {round}"
        );
        destroy_id(&fresh, 0);
    }
    assert_eq!(device.id_count(), 0);
    super::super::close_device(&device).unwrap();
}

/// A new id holds its backlog place until its REQ_RECEIVED
/// (SIDR_REQ_RECEIVED) handler has run, answered or not, as ucma holds one
/// until userspace reads the event; or until it is destroyed first.
#[test]
fn backlog_counts_new_ids_until_their_request_event_is_handled() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    pair.rec.on(IB_CM_SIDR_REQ_RECEIVED, Arc::new(|_, _| 0));
    let backlog = || pair.listener.backlog.load(Ordering::Acquire);
    let gate = Arc::new(Gate::default());
    let blocker = super::super::create_id(&pair.b, gate.handler()).unwrap();
    let mut held = 0;
    // Runs `send` while the worker is held, and holds it again right behind
    // the request: its new id is made, its event waits.
    let mut queue_request = |send: &dyn Fn()| {
        gate.block(&blocker);
        held += 1;
        gate.wait_entered(held);
        send();
        gate.block(&blocker);
        gate.release(held);
        held += 1;
        gate.wait_entered(held);
        held
    };

    // Queued: counted; handled (and left unanswered): free.
    let mut params = pair.req_params();
    params.remote_cm_response_timeout = 31;
    let a1 = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
    params.qp_num = 0x100;
    let n = queue_request(&|| send_req(&a1, &params).unwrap());
    assert_eq!(backlog(), 1);
    gate.release(n);
    let taken = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    wait_until("the handled REQ's place is free", || backlog() == 0);
    assert_eq!(taken.state(), IB_CM_REQ_RCVD);

    // Destroyed before its event ran: free at once, and never delivered.
    let a2 = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
    params.qp_num = 0x200;
    let n = queue_request(&|| send_req(&a2, &params).unwrap());
    assert_eq!(backlog(), 1);
    let local_id = u32::from_be(a2.public.local_id.load(Ordering::Relaxed));
    let dropped = crate::cm::Cm::process()
        .tables()
        .find_remote_id(pair.a.node_guid, local_id)
        .unwrap();
    destroy_id(&dropped, 0);
    assert_eq!(backlog(), 0);
    gate.release(n);
    pair.rec.wait(Some(&a2), IB_CM_REJ_RECEIVED);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 1);

    // A SIDR_REQ's new id likewise.
    let sidr_params = SidrReqParams {
        path: pair.a.init_path(1, &pair.b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        timeout_ms: 60_000,
        private_data: Vec::new(),
        max_cm_retries: 1,
    };
    let n = queue_request(&|| send_sidr_req(&pair.active, &sidr_params).unwrap());
    assert_eq!(backlog(), 1);
    gate.release(n);
    let sidr = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    wait_until("the handled SIDR_REQ's place is free", || backlog() == 0);
    assert_eq!(sidr.state(), IB_CM_SIDR_REQ_RCVD);
    send_sidr_rep(&sidr, &SidrRepParams::default()).unwrap();

    for id in [&a1, &a2, &sidr, &blocker] {
        destroy_id(id, 0);
    }
    pair.finish(&[&taken]);
}
