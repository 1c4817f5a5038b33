//! A panic inside the engine is contained (issue 10, point 6): the item that
//! panicked is dropped and the worker goes on.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::*;
use crate::cm::worker::{fault, panicked};
use crate::wire::attr;

#[test]
fn a_panicking_work_item_is_dropped_and_the_worker_goes_on() {
    let pair = Pair::new();
    let before = panicked();
    // The REQ's arrival at B panics: that MAD is lost, as if the fabric had
    // dropped it, and the REQ's retransmission sets the connection up.
    fault::panic_on_next_mad_to(&pair.b);
    // Response timeouts of 268 ms and 15 retries: slow sanitizer runs with
    // every test in parallel must not turn the lost REQ into a REQ_ERROR.
    let params = ReqParams {
        remote_cm_response_timeout: 16,
        local_cm_response_timeout: 16,
        max_cm_retries: 15,
        ..pair.req_params()
    };
    super::super::send_req(&pair.active, &params).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert!(panicked() > before);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 1);
    // And the worker still handles everything after it.
    super::super::send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    super::super::send_drep(&passive, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    pair.finish(&[&passive]);
}

#[test]
fn a_panic_inside_send_req_leaves_the_id_idle_and_reusable() {
    let pair = Pair::new();
    // The first REQ never reaches B (so B has no half-open connection), and
    // arming its retransmission panics, as the C entry point's guard sees it.
    pair.a.drop_next(attr::REQ, 1).unwrap();
    fault::panic_on_next_timer_of(&pair.active);
    let params = pair.req_params();
    let first = catch_unwind(AssertUnwindSafe(|| {
        super::super::send_req(&pair.active, &params)
    }));
    assert!(first.is_err(), "the injected panic did not happen");
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    // The same id sends its REQ again, and connects.
    let passive = pair.connect();
    pair.finish(&[&passive]);
}
