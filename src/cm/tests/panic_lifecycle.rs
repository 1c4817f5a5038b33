//! A panic contained in the worker (issue 10) must not strand what it
//! interrupted: a new id whose REQ_RECEIVED was dropped, a REQ whose
//! retransmission timer was dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::cm::worker::panicked;

/// docs/threads.md: "a panic while handling one received MAD, one event or
/// one timer drops that item ... (a dropped MAD is as if the fabric had lost
/// it: the sender retransmits)". For IB_CM_REQ_RECEIVED the dropped item is
/// the only thing that tells the user of the new id: were the id kept, it
/// would stay in REQ_RCVD, unreachable, holding a backlog slot and a device
/// id for ever, and the peer's retransmitted REQ would be taken for a
/// duplicate of it and ignored, so the connection would never come up and
/// the device could never be closed. The retransmitted REQ must get through.
///
/// The panic is the handler's (a Rust closure: the only way to make the
/// library's delivery path panic from a test); any panic of the library while
/// it builds or delivers the event (ffi/event.rs) has the same effect.
#[test]
fn a_panic_delivering_req_received_lets_the_retransmitted_req_through() {
    let pair = Pair::new();
    let before = panicked();
    let panicked_once = Arc::new(AtomicBool::new(false));
    let first = panicked_once.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |id, _| {
            if !first.swap(true, Ordering::SeqCst) {
                // Quietly: a backtrace printed on the worker takes seconds
                // under ThreadSanitizer, and other tests' REQs time out.
                crate::cm::worker::fault::panic_now();
            }
            super::super::send_rep(id, &rep_params(&[])).unwrap();
            0
        }),
    );
    // 268 ms response timeouts, 15 retries: the REQ is retransmitted for
    // about 4 s, as in a_panicking_work_item_is_dropped_and_the_worker_goes_on.
    let params = ReqParams {
        remote_cm_response_timeout: 16,
        local_cm_response_timeout: 16,
        max_cm_retries: 15,
        ..pair.req_params()
    };
    super::super::send_req(&pair.active, &params).unwrap();
    wait_until("the panic is contained", || panicked() > before);

    // As with a lost MAD, the retransmitted REQ must get through.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pair.rec.count(IB_CM_REQ_RECEIVED) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let events_a = pair.rec.events_of(&pair.active);
    assert_eq!(
        pair.rec.count(IB_CM_REQ_RECEIVED),
        1,
        "the REQ never reached the listener again; A's events: {events_a:?}, A's state {:?}, \
         B's ids {} (listener + leaked child), listener backlog {}",
        pair.active.state(),
        pair.b.id_count(),
        pair.listener.backlog.load(Ordering::Acquire),
    );
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    pair.finish(&[&passive]);
}

/// The same containment for a timer: a panic while the REQ's retransmission
/// timer is handled (here: while the next retransmission is armed) drops the
/// timer. Were that all, the id would keep its tracked REQ with no timer: it
/// would stay in REQ_SENT for ever, with no IB_CM_REQ_ERROR, no further
/// retransmission and nothing that would ever end it. The kernel's MAD layer
/// always completes a send (a response, a timeout or an error): the REQ must
/// still end with IB_CM_REQ_ERROR.
#[test]
fn a_panic_in_a_retransmission_timer_still_ends_the_req_with_req_error() {
    let pair = Pair::new();
    // No REQ reaches B: only the retransmissions and their timeout matter.
    pair.a.drop_next(crate::wire::attr::REQ, 1000).unwrap();
    // 268 ms response timeouts, 3 retries: the fault is set long before the
    // first retransmission, and the REQ times out after about 1 s.
    let params = ReqParams {
        remote_cm_response_timeout: 16,
        ..pair.req_params()
    };
    super::super::send_req(&pair.active, &params).unwrap();
    let before = panicked();
    crate::cm::worker::fault::panic_on_next_timer_of(&pair.active);
    wait_until("the panic is contained", || panicked() > before);

    let deadline = Instant::now() + Duration::from_secs(10);
    while pair.rec.count(IB_CM_REQ_ERROR) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        pair.rec.count(IB_CM_REQ_ERROR),
        1,
        "10 s after a REQ with a 268 ms timeout and 3 retries: no REQ_ERROR; A's state {:?}, \
         timers armed {}",
        pair.active.state(),
        crate::cm::pending().1,
    );
    pair.finish(&[]);
}
