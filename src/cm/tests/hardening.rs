//! Issue 10 (hardening for long-running daemons): devices and their transport.

use super::*;
use crate::cm::send_req;
use crate::wire::attr;

/// `timeout_sends()` in mad.c: a tracked MAD whose retry cannot be posted
/// (`retry_send()` fails) completes at once with `IB_WC_RESP_TIMEOUT_ERR`,
/// exactly as one out of retries; no further retransmission follows.
#[test]
fn hardening_15b_timeout_sends_failed_retry_send_completes_with_resp_timeout() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::REQ, 1).unwrap(); // the first REQ is lost
    send_req(&pair.active, &pair.req_params()).unwrap(); // max_cm_retries 3
    pair.loop_a().fail_next(attr::REQ, 1); // and its first retry cannot be sent
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    // Only the first (lost) REQ reached the fabric: nothing after the failed retry.
    assert_eq!(pair.loop_a().sent(attr::REQ), 1);
    assert_eq!(pair.a.counters(1).unwrap().snapshot().tx_retries[0], 0);
    pair.finish(&[]);
}
