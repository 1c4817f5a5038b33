//! Kernel fidelity (against Linux 6.12's drivers/infiniband/core/cm.c) of
//! the P_Key checks, the listen backlog, a failed SIDR_REP or resend, an
//! orphaned REQ, and peers that lie. Each test states what the kernel does,
//! and the library must do the same.

use std::sync::Arc;

use super::*;
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_INVALID_GID;
use crate::abi::ib_cm_sidr_status::IB_SIDR_REJECT;
use crate::cm::counters::attr_index;
use crate::cm::event::CmEvent;
use crate::cm::worker::{process_device_events, queue_checked};
use crate::cm::{SidrReqParams, send_req, send_sidr_req};
use crate::wire::{Rej, Req, SidrRep, SidrReq, attr, parse_header};

/// A P_Key that no loop port has (they all have 0xffff only); it differs
/// from it also without the membership bit, as `ib_find_cached_pkey`
/// compares.
const FOREIGN_PKEY: u16 = 0x1234;

fn tx(device: &Device, attr_id: u16) -> (u64, u64) {
    let c = device.counters(1).unwrap().snapshot();
    let i = attr_index(attr_id).unwrap();
    (c.tx_msgs[i], c.tx_retries[i])
}

/// `cm_req_handler()` → `cm_init_av_by_path(&work->path[0])` →
/// `ib_find_cached_pkey(port, path->pkey)`: a REQ whose P_Key is not in the
/// receiving port's table fails there, and the kernel answers REJ
/// INVALID_GID (ARI: the port's GID 0) without a REQ_RECEIVED. Here a peer
/// sends a REQ that names B's GID correctly but carries a P_Key B's port
/// does not have. (Kernels before Jason Gunthorpe's June 2026 fix "IB/cm:
/// Fix av cm device leak on an error path in cm_init_av_by_path()", which
/// dropped the `cm_destroy_av()` before the call, send nothing at all: the
/// REJ's `cm_alloc_msg` finds `av.port` NULL. Either way: no REP, no
/// REQ_RECEIVED.)
#[test]
fn req_with_pkey_not_on_the_port_is_rejected_invalid_gid() {
    let pair = Pair::new();
    let raw = Raw::open();
    let mut req = Req {
        local_comm_id: 0x0bad_0001,
        service_id: SERVICE_ID,
        local_ca_guid: 0x5151,
        local_qpn: 0x4242,
        pkey: FOREIGN_PKEY,
        path_mtu: 3,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 3,
        ..Req::default()
    };
    raw.address_req(&mut req, &pair.b);
    raw.send_to(&pair.b, &req.encode(7));
    let answer = raw.wait_for(1);
    let (hdr, _) = parse_header(&answer).unwrap();
    assert_eq!(
        attr::name(hdr.attr_id),
        attr::name(attr::REJ),
        "the kernel rejects a REQ whose P_Key is not on the port"
    );
    let rej = Rej::decode(&answer).unwrap();
    assert_eq!(rej.reason, IB_CM_REJ_INVALID_GID as u16);
    assert_eq!(rej.ari[..16], pair.b.ports[0].gids[0].gid);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 0);
    // The id that sent the REJ goes right after it.
    wait_until("no id but the listener", || pair.b.id_count() == 1);
    pair.finish(&[]);
}

/// `ib_send_cm_req()` → `cm_init_av_by_path(param->primary_path)` →
/// `ib_find_cached_pkey()`: a path whose P_Key the port does not have is
/// refused (`-ENOENT`) before anything is sent; so is a SIDR_REQ
/// (`ib_send_cm_sidr_req`, same call).
#[test]
fn send_req_and_sidr_req_with_pkey_not_on_the_port_fail() {
    let pair = Pair::new();
    let mut p = pair.req_params();
    p.primary_path.pkey = FOREIGN_PKEY;
    let req = send_req(&pair.active, &p);
    let sidr = {
        let id = crate::cm::create_id(&pair.a, pair.rec.handler()).unwrap();
        let sp = SidrReqParams {
            path: p.primary_path,
            service_id: SERVICE_ID,
            timeout_ms: 5000,
            private_data: Vec::new(),
            max_cm_retries: 3,
        };
        let r = send_sidr_req(&id, &sp);
        crate::cm::destroy_id(&id, 0);
        r
    };
    let sent = (
        pair.loop_a().sent(attr::REQ),
        pair.loop_a().sent(attr::SIDR_REQ),
    );
    assert_eq!(
        (req, sidr, sent),
        (Err(crate::errno::ENOENT), Err(crate::errno::ENOENT), (0, 0)),
        "(REQ, SIDR_REQ, MADs sent): the kernel: -ENOENT for both, before sending"
    );
    pair.finish(&[]);
}

/// `cm_sidr_req_handler()`, no listener: `ib_send_cm_sidr_rep(UNSUPPORTED)`;
/// when that post fails the id is still SIDR_REQ_RCVD and `goto out` →
/// `ib_destroy_cm_id` → `cm_destroy_id()` case SIDR_REQ_RCVD →
/// `cm_reject_sidr_req(IB_SIDR_REJECT)`: a second SIDR_REP, status REJECT,
/// is sent. The library's `answer_sidr_req_locked` must do the same, not
/// forget the request after the first failure and say nothing.
#[test]
fn sidr_req_no_listener_failed_unsupported_is_followed_by_a_reject() {
    let pair = Pair::new();
    let raw = Raw::open();
    pair.loop_b().fail_next(attr::SIDR_REP, 1);
    let req = SidrReq {
        request_id: 0x0bad_5151,
        pkey: 0xffff,
        service_id: SERVICE_ID + 1, // nobody listens
        ..SidrReq::default()
    };
    raw.send_to(&pair.b, &req.encode(9));
    let answer = raw.wait_for(1);
    let rep = SidrRep::decode(&answer).unwrap();
    assert_eq!(rep.request_id, 0x0bad_5151);
    assert_eq!(rep.status, IB_SIDR_REJECT as u8);
    // The id that answered goes right after it.
    wait_until("no id but the listener", || pair.b.id_count() == 1);
    pair.finish(&[]);
}

/// `timeout_sends()` → `retry_send()` increments `send_buf.retries` before
/// `ib_send_mad()`; a post that fails completes the MAD, and
/// `cm_send_handler` books `1 + retries` messages and `retries` retries. So
/// a REQ lost once whose first retry cannot be posted ends, in the kernel,
/// with cm_tx_msgs/req 2 and cm_tx_retries/req 1. README (the counter row of
/// the differences table) promises "the totals once nothing is outstanding
/// are the kernel's".
#[test]
fn failed_resend_books_the_kernels_totals() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::REQ, 1).unwrap();
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.loop_a().fail_next(attr::REQ, 1);
    pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert!(pair.active.lock().inner.msg.is_none()); // nothing outstanding
    assert_eq!(
        tx(&pair.a, attr::REQ),
        (2, 1),
        "(cm_tx_msgs, cm_tx_retries) of REQ"
    );
    pair.finish(&[]);
}

/// A daemon restarts its listener (destroy, listen again on the same
/// service ID) while a REQ that matched the old one waits for the worker.
/// The kernel never answers such a REQ INVALID_SERVICE_ID: `cm_req_handler`
/// dropped its listener reference once the work was queued, and the event
/// still goes to the handler (and rdma_cm's handler, finding its listener
/// gone, returns -ECONNABORTED: REJ CONSUMER_DEFINED). Answering
/// INVALID_SERVICE_ID would tell the peer the service does not exist while a
/// listener serves it, and the peer would give up. A silent drop (as the
/// backlog does) lets the peer's REQ retransmission reach the new listener:
/// the orphan is forgotten silently, and the retransmitted REQ is connected
/// by the new listener.
#[test]
fn an_orphan_req_goes_unanswered_and_the_new_listener_takes_its_retransmission() {
    let pair = Pair::new();
    let first = HeldWorker::hold(&pair.b);
    // The loop fabric delivers at once: the REQ now waits behind `first`,
    // and `second` behind the REQ, so the REQ handler runs (making the new
    // id and queueing its REQ_RECEIVED behind `second`) before `second`
    // holds the worker again.
    send_req(&pair.active, &pair.req_params()).unwrap();
    let second = HeldWorker::queue(&pair.b);
    drop(first);
    second.wait_entered();
    assert_eq!(pair.b.id_count(), 3); // listener, new id, `second`
    crate::cm::destroy_id(&pair.listener, 0);
    let relisten = crate::cm::create_id(&pair.b, pair.rec.handler()).unwrap();
    crate::cm::listen(&relisten, SERVICE_ID).unwrap();
    drop(second);
    wait_until("the active side got an answer", || {
        pair.rec.count(IB_CM_REJ_RECEIVED) + pair.rec.count(IB_CM_REP_RECEIVED) > 0
    });
    let rejected = pair.rec.count(IB_CM_REJ_RECEIVED);
    let reason = (rejected > 0)
        .then(|| {
            pair.rec
                .wait(Some(&pair.active), IB_CM_REJ_RECEIVED)
                .rej_reason
        })
        .flatten();
    assert_eq!(
        (rejected, reason),
        (0, None),
        "rejected (reason 8 = INVALID_SERVICE_ID) while a listener serves the service ID"
    );
    // The new listener took the retransmission; the orphan went unanswered.
    let child = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 1);
    assert!(tx(&pair.a, attr::REQ).1 >= 1, "the REQ was retransmitted");
    assert_eq!(pair.loop_b().sent(attr::REJ), 0);
    pair.rec.wait(Some(&child), IB_CM_RTU_RECEIVED);
    crate::cm::destroy_id(&relisten, 0);
    pair.finish(&[&child]);
}

/// Keeps the shared worker inside a handler until dropped.
struct HeldWorker {
    release: std::sync::mpsc::Sender<()>,
    entered: std::sync::mpsc::Receiver<()>,
    id: Arc<CmIdPriv>,
}

impl HeldWorker {
    /// Holds the worker now.
    fn hold(device: &Arc<Device>) -> Self {
        let held = Self::queue(device);
        held.wait_entered();
        held
    }

    /// Queues work that holds the worker when its turn comes.
    fn queue(device: &Arc<Device>) -> Self {
        use parking_lot::Mutex;
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Mutex::new(released);
        let entered_tx = Mutex::new(entered_tx);
        let id = crate::cm::create_id(
            device,
            Arc::new(move |_, _| {
                let _ = entered_tx.lock().send(());
                let _ = released.lock().recv_timeout(WAIT);
                0
            }),
        )
        .unwrap();
        // Checked: in order with received MADs (a plain event would run
        // before any MAD still queued).
        queue_checked(&id, |_| Some(CmEvent::bare(IB_CM_TIMEWAIT_EXIT)));
        Self {
            release,
            entered,
            id,
        }
    }

    fn wait_entered(&self) {
        self.entered
            .recv_timeout(WAIT)
            .expect("the worker never ran");
    }
}

impl Drop for HeldWorker {
    fn drop(&mut self) {
        let _ = self.release.send(());
        crate::cm::destroy_id(&self.id, 0);
    }
}

/// The backlog's model is rdma_cm's `max_backlog` (README: "as ... rdma_cm's
/// own `max_backlog` (1024) does"). For a SIDR_REQ beyond it, ucma's
/// `ucma_event_handler` returns -ENOMEM, `cma_ib_req_handler` returns it,
/// and `cm_sidr_req_handler` (which delivers synchronously) calls
/// `cm_destroy_id(-ENOMEM)`: case SIDR_REQ_RCVD → `cm_reject_sidr_req(
/// IB_SIDR_REJECT)`. Unlike a REQ (REQ_RCVD with -ENOMEM: reset, no REJ), a
/// SIDR_REQ beyond the backlog is answered SIDR_REP REJECT, not dropped.
#[test]
fn sidr_req_beyond_the_backlog_is_answered_reject_as_rdma_cm_does() {
    use crate::cm::listen::LISTEN_BACKLOG;
    let pair = Pair::with_b_in_fd_mode();
    pair.rec.on(IB_CM_SIDR_REQ_RECEIVED, Arc::new(|_, _| 0)); // never answered
    let raw = Raw::open();
    let sidr = |i: u32| SidrReq {
        request_id: 0x5000_0000 + i,
        pkey: 0xffff,
        service_id: SERVICE_ID,
        ..SidrReq::default()
    };
    // The backlog counts requests whose event waits: B in FD mode takes
    // none until the extra one was answered.
    for i in 0..LISTEN_BACKLOG as u32 {
        raw.send_to(&pair.b, &sidr(i).encode(u64::from(i)));
    }
    let extra = LISTEN_BACKLOG as u32;
    raw.send_to(&pair.b, &sidr(extra).encode(u64::from(extra)));
    wait_until("the extra SIDR_REQ was handled", || {
        let c = pair.b.counters(1).unwrap().snapshot();
        c.rx_listen_overflows == 1 || raw.received_after(std::time::Duration::ZERO) > 0
    });
    let answers = raw.received_after(std::time::Duration::from_millis(100));
    let reply = (answers > 0).then(|| SidrRep::decode(&raw.wait_for(1)).unwrap());
    assert_eq!(
        reply.map(|r| (r.request_id, r.status)),
        Some((0x5000_0000 + extra, IB_SIDR_REJECT as u8)),
        "dropped silently (rx_listen_overflows {})",
        pair.b.counters(1).unwrap().snapshot().rx_listen_overflows
    );
    // The backlog's events, taken now: one each, never the extra one's.
    let taken = process_device_events(&pair.b, LISTEN_BACKLOG as i32 + 1).unwrap();
    assert_eq!(taken, LISTEN_BACKLOG);
    assert_eq!(pair.rec.count(IB_CM_SIDR_REQ_RECEIVED), LISTEN_BACKLOG);
    let children: Vec<_> = pair
        .rec
        .seen
        .lock()
        .iter()
        .filter_map(|s| s.new_id.clone())
        .collect();
    pair.finish(&children.iter().collect::<Vec<_>>());
}

/// ucma's backlog, the model README cites, holds a connect request only
/// until userspace *takes its event*: `ucma_event_handler` decrements
/// `ctx->backlog` when it queues the event, `ucma_get_event` increments it
/// again when the user reads it. A user that took every REQ_RECEIVED and
/// answers later (asynchronously: resources, authentication) is never
/// refused by rdma_cm. The library's backlog must do the same: counting a
/// new id until it is *answered* would make such a user lose the 1025th
/// request although it consumed every event.
#[test]
fn backlog_counts_a_request_only_until_its_event_is_taken_as_ucma_does() {
    use crate::cm::listen::LISTEN_BACKLOG;
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // taken; answered later
    let raw = Raw::open();
    let req = |i: u32| {
        let mut req = Req {
            local_comm_id: 0x6000_0000 + i,
            service_id: SERVICE_ID,
            local_ca_guid: 0x6161,
            local_qpn: 0x1000 + i,
            pkey: 0xffff,
            path_mtu: 3,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 3,
            ..Req::default()
        };
        raw.address_req(&mut req, &pair.b);
        req.encode(u64::from(i))
    };
    let n = LISTEN_BACKLOG as u32 + 1;
    let overflows = || pair.b.counters(1).unwrap().snapshot().rx_listen_overflows;
    // A full backlog's worth, whose events are all taken before the last REQ
    // comes (in one burst their events would still wait behind it, and the
    // backlog would rightly be full).
    for i in 0..n - 1 {
        raw.send_to(&pair.b, &req(i));
    }
    wait_until("the first REQs were delivered or dropped", || {
        pair.rec.count(IB_CM_REQ_RECEIVED) as u64 + overflows() == u64::from(n - 1)
    });
    raw.send_to(&pair.b, &req(n - 1));
    wait_until("every REQ was delivered or dropped", || {
        pair.rec.count(IB_CM_REQ_RECEIVED) as u64 + overflows() == u64::from(n)
    });
    let children: Vec<_> = pair
        .rec
        .seen
        .lock()
        .iter()
        .filter_map(|s| s.new_id.clone())
        .collect();
    assert_eq!(
        (pair.rec.count(IB_CM_REQ_RECEIVED), overflows()),
        (n as usize, 0),
        "(REQ_RECEIVED delivered, rx_listen_overflows) with every event taken"
    );
    pair.finish(&children.iter().collect::<Vec<_>>());
}

/// `cm_format_req_event()`: `req_rcvd.bth_pkey` is `cm_get_bth_pkey(work)`,
/// the P_Key of the packet (the port's table at the index it came in at),
/// not the REQ's P_Key field. A REQ whose field is 0x7fff (limited member)
/// matches the port's 0xffff (`ib_find_cached_pkey` compares without the
/// membership bit) and arrives in a packet of P_Key 0xffff.
#[test]
fn req_received_bth_pkey_is_the_packets_not_the_reqs() {
    let pair = Pair::new();
    let seen: Arc<Mutex<Option<u16>>> = Arc::default();
    let store = seen.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |_, ev: &CmEvent| {
            if let crate::cm::event::EventParam::ReqRcvd(r) = &ev.param {
                *store.lock() = Some(r.bth_pkey);
            }
            0
        }),
    );
    let raw = Raw::open();
    let mut req = Req {
        local_comm_id: 0x0bad_7fff,
        service_id: SERVICE_ID,
        local_ca_guid: 0x7f7f,
        local_qpn: 0x7f7f,
        pkey: 0x7fff,
        path_mtu: 3,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 3,
        ..Req::default()
    };
    raw.address_req(&mut req, &pair.b);
    raw.send_to(&pair.b, &req.encode(7));
    pair.rec.wait(None, IB_CM_REQ_RECEIVED);
    assert_eq!(*seen.lock(), Some(0xffff), "the packet's P_Key");
    let new_id = pair.rec.nth_new_id(1);
    pair.finish(&[&new_id]);
}
