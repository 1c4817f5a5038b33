//! A device and its transport inside a long-running daemon (issue 10): a
//! failed retry ends the send, the receive queue is bounded, a closed device
//! reaches its transport no more (the C tests cover device removal, a failed
//! open and the reader thread).

use super::*;
use crate::cm::send_req;
use crate::cm::worker::RX_QUEUE_CAP;
use crate::wire::attr;

/// `timeout_sends()` in mad.c: a tracked MAD whose retry cannot be posted
/// (`retry_send()` fails) completes at once with `IB_WC_RESP_TIMEOUT_ERR`,
/// exactly as one out of retries; no further retransmission follows.
#[test]
fn timeout_sends_failed_retry_send_completes_with_resp_timeout() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::REQ, 1).unwrap(); // the first REQ is lost
    send_req(&pair.active, &pair.req_params()).unwrap(); // max_cm_retries 3
    pair.loop_a().fail_next(attr::REQ, 1); // and its first retry cannot be sent
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    // Only the first (lost) REQ reached the fabric: nothing after the failed retry.
    assert_eq!(pair.loop_a().sent(attr::REQ), 1);
    // Booked as the kernel does: `retry_send()` counts the retry before it
    // fails to post it, and the failed MAD is counted as sent.
    let c = pair.a.counters(1).unwrap().snapshot();
    let req = crate::cm::counters::attr_index(attr::REQ).unwrap();
    assert_eq!((c.tx_msgs[req], c.tx_retries[req]), (2, 1));
    pair.finish(&[]);
}

/// Received MADs queued for the worker are bounded per device: while a
/// handler blocks the worker, what arrives beyond the bound is dropped and
/// counted (`rx_dropped`), and everything queued is handled once it unblocks.
/// (With the bound lowered to 256: 64 Ki MADs through the worker that every
/// test shares would hold up the others' exchanges.)
#[test]
fn receive_queue_is_bounded_per_device() {
    assert_eq!(RX_QUEUE_CAP, 65_536); // as documented
    let cap = 256;
    let pair = Pair::new();
    pair.b.set_rx_queue_cap(cap);
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Mutex::new(released);
    let entered_tx = Mutex::new(entered_tx);
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |_, _| {
            // Only the first REQ blocks (retransmissions may follow).
            if entered_tx.lock().send(()).is_ok() {
                let _ = released.lock().recv_timeout(WAIT);
            }
            -1 // destroy the new id: nothing to answer
        }),
    );
    let p = ReqParams {
        remote_cm_response_timeout: 22, // 17 s: no REQ retry joins the flood
        ..pair.req_params()
    };
    send_req(&pair.active, &p).unwrap();
    entered.recv_timeout(WAIT).unwrap(); // the worker is now blocked
    drop(entered);
    let over = 100;
    let garbage: Mad = [0; crate::wire::MAD_SIZE]; // malformed: class 0
    for _ in 0..cap + over {
        pair.send_from(&pair.a, &pair.b, &garbage);
    }
    release.send(()).unwrap();
    let counters = || pair.b.counters(1).unwrap().snapshot();
    wait_until("every MAD was handled or dropped", || {
        let c = counters();
        c.rx_malformed + c.rx_dropped == (cap + over) as u64
    });
    assert_eq!(counters().rx_malformed, cap as u64);
    assert_eq!(counters().rx_dropped, over as u64);
    pair.finish(&[]);
}

/// A closed device reaches its transport no more: sends fail with `-ENODEV`
/// (nothing reaches the fabric), and no id can be made on it.
#[test]
fn closed_device_refuses_sends_and_ids() {
    let pair = Pair::new();
    let garbage: Mad = [0; crate::wire::MAD_SIZE];
    let before = pair.loop_b().sent(0);
    let b = pair.b.clone();
    super::super::destroy_id(&pair.listener, 0);
    super::super::close_device(&b).unwrap();
    let to_a = MadAddr {
        dgid: pair.a.ports[0].gids[0].gid,
        ..MadAddr::default()
    };
    assert_eq!(b.send(1, &to_a, &garbage), Err(crate::errno::ENODEV));
    assert_eq!(pair.loop_b().sent(0), before);
    assert_eq!(
        super::super::create_id(&b, pair.rec.handler()).err(),
        Some(crate::errno::EINVAL)
    );
    super::super::destroy_id(&pair.active, 0);
    super::super::close_device(&pair.a).unwrap();
}
