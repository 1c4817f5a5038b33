//! The event-fd mode with close's barrier, the orphan path and logging
//! (issue 10): close after destroying every known id, a panicking or
//! device-closing handler in `ibcm_process_events`, and the log line of a
//! forgotten orphan SIDR_REQ.

use std::sync::Arc;

use super::*;
use crate::abi::ibcm_event_mode::IBCM_EVENTS_FD;
use crate::cm::worker::process_device_events;
use crate::cm::{
    close_device, create_id, destroy_id, listen, open_device, send_req, set_event_mode,
};
use crate::errno::EINVAL;

/// Closing an FD-mode device after destroying every id one knows is not
/// `-EBUSY`: `ibcm_close_device` lets the worker finish its queue before it
/// counts ids, but an FD-mode device's REQ_RECEIVED waits in the device's
/// own queue, which nobody drains during close. A daemon that destroys every
/// id it knows (its listener), takes the fd out of its epoll set as
/// docs/threads.md says, and closes, must not get `-EBUSY` for an id it
/// never saw; the docs promise so.
#[test]
fn fd_mode_close_after_listener_destroyed_is_not_ebusy() {
    let (a, b, rec) = fd_pair();
    let listener = create_id(&b, rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    let active = create_id(&a, rec.handler()).unwrap();
    send_req(&active, &req_params(&a, &b)).unwrap();
    // The new id is made on the worker; its REQ_RECEIVED waits in B's queue.
    wait_until("the new id and its event exist", || {
        b.id_count() == 2 && b.events.queued() == 1
    });
    destroy_id(&listener, 0);
    destroy_id(&active, 0);
    close_device(&a).unwrap();
    let closed = close_device(&b);
    // Clean up whatever the result (drain, then close for real).
    let drained = process_device_events(&b, 64);
    let closed_after_drain = close_device(&b);
    assert_eq!(
        (closed, drained, closed_after_drain),
        (Ok(()), Err(EINVAL), Err(EINVAL)),
        "close after destroying every known id (then: drain, close again)"
    );
}

/// A (worker-mode) device A and an FD-mode device B, one recorder.
fn fd_pair() -> (Arc<Device>, Arc<Device>, Arc<Recorder>) {
    let a = open_device(&loop_name()).unwrap();
    let b = open_device(&loop_name()).unwrap();
    set_event_mode(&b, IBCM_EVENTS_FD).unwrap();
    (a, b, Arc::new(Recorder::default()))
}

fn req_params(a: &Device, b: &Device) -> ReqParams {
    let path = a.init_path(1, &b.ports[0].gids[0].gid).unwrap();
    ReqParams {
        primary_path: path,
        service_id: SERVICE_ID,
        qp_num: ACTIVE_QPN,
        qp_type: ib_qp_type::IB_QPT_RC as i32,
        starting_psn: 0x1000,
        responder_resources: 4,
        initiator_depth: 2,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        retry_count: 7,
        rnr_retry_count: 6,
        max_cm_retries: 3,
        ..ReqParams::default()
    }
}

/// A panic while `ibcm_process_events` runs a new id's REQ_RECEIVED on the
/// caller's thread is contained there, the new id is forgotten (-ENOMEM
/// way) and its backlog place is given back; the listener takes the peer's
/// retransmission.
#[test]
fn fd_mode_panicking_req_received_frees_its_id_and_backlog_place() {
    let (a, b, rec) = fd_pair();
    let panics = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let panics = panics.clone();
        rec.on(
            IB_CM_REQ_RECEIVED,
            Arc::new(move |_, _| {
                if panics.fetch_add(1, Ordering::SeqCst) == 0 {
                    crate::cm::worker::fault::panic_now();
                }
                -libc::ENOMEM // forget the retransmission too, quietly
            }),
        );
    }
    let listener = create_id(&b, rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    let active = create_id(&a, rec.handler()).unwrap();
    let mut params = req_params(&a, &b);
    params.remote_cm_response_timeout = 8; // retransmitted after ~1 ms
    params.max_cm_retries = 15;
    send_req(&active, &params).unwrap();
    wait_until("the new id and its event exist", || {
        b.id_count() == 2 && b.events.queued() == 1
    });
    assert_eq!(process_device_events(&b, 1), Ok(1));
    assert_eq!(panics.load(Ordering::SeqCst), 1);
    assert_eq!(b.id_count(), 1, "the panicked request's id is forgotten");
    assert_eq!(listener.backlog.load(Ordering::SeqCst), 0);
    // Its retransmission is a new request, not a duplicate of the lost one.
    // The new id is in the tables before its event is queued: wait for both.
    wait_until("the retransmitted REQ made a new id and its event", || {
        b.id_count() == 2 && b.events.queued() == 1
    });
    assert_eq!(process_device_events(&b, 1), Ok(1));
    assert_eq!(panics.load(Ordering::SeqCst), 2);
    assert_eq!(b.id_count(), 1);
    destroy_id(&listener, 0);
    destroy_id(&active, 0);
    close_device(&a).unwrap();
    // A retransmission may have made another new id meanwhile: drain it.
    wait_until("B's ids are gone", || {
        let _ = process_device_events(&b, 64);
        b.id_count() == 0
    });
    close_device(&b).unwrap();
}

/// A handler running in `ibcm_process_events` may destroy its listener and
/// its own id and close its device: close waits for the worker's queue (not
/// for this thread), the device's queue is dropped, and the drain loop ends.
#[test]
fn fd_mode_handler_closes_its_own_device() {
    let (a, b, rec) = fd_pair();
    let closed = Arc::new(Mutex::new(None));
    let listener = create_id(&b, rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    {
        let (closed, b, listener) = (closed.clone(), b.clone(), listener.clone());
        rec.on(
            IB_CM_REQ_RECEIVED,
            Arc::new(move |id, _| {
                destroy_id(&listener, 0);
                destroy_id(id, 0);
                *closed.lock() = Some(close_device(&b));
                0
            }),
        );
    }
    let active = create_id(&a, rec.handler()).unwrap();
    send_req(&active, &req_params(&a, &b)).unwrap();
    wait_until("the new id and its event exist", || {
        b.id_count() == 2 && b.events.queued() == 1
    });
    assert_eq!(process_device_events(&b, 64), Ok(1));
    assert_eq!(*closed.lock(), Some(Ok(())));
    assert_eq!(process_device_events(&b, 1), Err(EINVAL));
    destroy_id(&active, 0);
    close_device(&a).unwrap();
}

/// IBCM_LOG tells the truth about the orphan SIDR_REQ path: a SIDR_REQ_RCVD
/// id whose listener was destroyed before its SIDR_REQ_RECEIVED ran is
/// forgotten without any SIDR_REP (`forget_orphan` -> `forget_sidr_request`),
/// so its state line must not say `SIDR_REQ_RCVD -> IDLE (SIDR_REP sent)`:
/// someone grepping the log for why a client got no answer would be told it
/// got one.
#[test]
fn log_orphan_sidr_req_forgotten_does_not_claim_a_sidr_rep_was_sent() {
    use crate::cm::{SidrReqParams, send_sidr_req};
    use crate::log::capture::Capture;
    use crate::wire::attr;

    let (a, b, rec) = fd_pair();
    let capture = Capture::of(&[&b.name]);
    let listener = create_id(&b, rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    let active = create_id(&a, rec.handler()).unwrap();
    let params = SidrReqParams {
        path: a.init_path(1, &b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        timeout_ms: 10_000, // no retransmission in this test
        private_data: Vec::new(),
        max_cm_retries: 0,
    };
    send_sidr_req(&active, &params).unwrap();
    wait_until("the new id and its event exist", || {
        b.id_count() == 2 && b.events.queued() == 1
    });
    destroy_id(&listener, 0);
    assert_eq!(process_device_events(&b, 64), Ok(1));
    assert_eq!(b.id_count(), 0);
    let sent = b.as_loop().unwrap().sent(attr::SIDR_REP);
    let claims = capture.lines_with(&["SIDR_REQ_RCVD -> IDLE (SIDR_REP sent)"]);
    destroy_id(&active, 0);
    close_device(&a).unwrap();
    close_device(&b).unwrap();
    assert_eq!(
        (sent, claims),
        (0, Vec::<String>::new()),
        "(SIDR_REPs sent, log lines claiming one)"
    );
}
