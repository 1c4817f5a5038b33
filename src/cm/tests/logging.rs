//! What `IBCM_LOG` says (issue 13, point 1) where the C suite cannot easily
//! provoke it: dropped MADs with their reason, retries and timeouts. The
//! lines are captured in-process (`log::capture`); tests run in parallel,
//! so each looks for its own TIDs, comm IDs and devices.

use crate::cm::send_dreq;
use crate::log::capture::Capture;
use crate::wire::{Drep, Dreq, Rtu, attr};

use super::*;

/// `Pair::connect` with 4 s CM response timeouts: the worker all the
/// engine's tests share may be held up by one of them for longer than
/// `Pair::connect`'s REQ and its retries last.
fn connect_slowly(pair: &Pair) -> Arc<CmIdPriv> {
    let p = ReqParams {
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        ..pair.req_params()
    };
    crate::cm::send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    passive
}

/// Waits until a captured line holds all of `parts`.
fn wait_line(capture: &Capture, parts: &[&str]) {
    wait_until(&format!("a log line with {parts:?}"), || {
        !capture.lines_with(parts).is_empty()
    });
}

#[test]
fn log_lines_drops_say_why() {
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name, &pair.b.name]);
    let passive = connect_slowly(&pair);
    let raw = Raw::open();
    let (a_id, b_id) = {
        let l = passive.lock();
        (l.inner.remote_id, l.inner.local_id)
    };
    let on_b = format!(" on {}: ", pair.b.name);
    let ids = format!(" local {a_id:#010x} remote {b_id:#010x} port 1 from ");

    let wrong_qpn = Dreq {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        remote_qpn: PASSIVE_QPN ^ 1,
        ..Dreq::default()
    };
    raw.send_to(&pair.b, &wrong_qpn.encode(0x1313_0000_0000_0001));
    let again = Rtu {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        ..Rtu::default()
    };
    raw.send_to(&pair.b, &again.encode(0x1313_0000_0000_0002));
    let nobody = Drep {
        local_comm_id: 0x1313_0003,
        remote_comm_id: 0x1313_0004,
        ..Drep::default()
    };
    raw.send_to(&pair.b, &nobody.encode(0x1313_0000_0000_0003));
    let mut bad_class = wrong_qpn.encode(0x1313_0000_0000_0004);
    bad_class[1] = 0x04;
    raw.send_to(&pair.b, &bad_class);

    let wrong_qpn = format!("{on_b}wrong QPN");
    wait_line(
        &capture,
        &["info: drop DREQ tid 0x1313000000000001", &ids, &wrong_qpn],
    );
    let duplicate = format!("{on_b}duplicate");
    wait_line(
        &capture,
        &["info: drop RTU tid 0x1313000000000002", &ids, &duplicate],
    );
    let unmatched = format!("{on_b}unmatched");
    let nobody = " local 0x13130003 remote 0x13130004 port 1 from ";
    wait_line(
        &capture,
        &["info: drop DREP tid 0x1313000000000003", nobody, &unmatched],
    );
    let malformed = format!("{on_b}malformed: management class 0x04, expected 0x07 (CM)");
    wait_line(
        &capture,
        &["info: drop DREQ tid 0x1313000000000004", &malformed],
    );
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn log_lines_retries_and_the_timeout() {
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name, &pair.b.name]);
    let passive = connect_slowly(&pair);
    let (a_id, b_id) = {
        let l = pair.active.lock();
        (l.inner.local_id, l.inner.remote_id)
    };
    // ibcm_set_disconnect_timeout(): 20 ms, 3 retries.
    pair.active.lock().inner.disconnect_timeout = Some((20, 3));
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREQ_ERROR);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);

    let id = format!("info: id {a_id:#010x}/{b_id:#010x} {}", pair.a.name);
    let line = |rest: &str| capture.lines_with(&[&id, rest]);
    // 1 + max_cm_retries (3) transmissions, then the timeout.
    assert_eq!(line(":1 ESTABLISHED -> DREQ_SENT (DREQ sent)").len(), 1);
    for left in 0..3 {
        assert_eq!(line(&format!(":1 retry DREQ ({left} left)")).len(), 1);
    }
    let sent = format!(" local {a_id:#010x} remote {b_id:#010x} port 1 to ");
    assert_eq!(
        capture.lines_with(&["debug: send DREQ tid ", &sent]).len(),
        4
    );
    assert_eq!(line(":1 timeout DREQ").len(), 1);
    assert_eq!(line(":1 DREQ_SENT -> TIMEWAIT (DREQ timed out)").len(), 1);
    assert_eq!(line(" event DREQ_ERROR (state TIMEWAIT)").len(), 1);
    assert_eq!(line(":1 TIMEWAIT -> IDLE (timewait over)").len(), 1);
    assert_eq!(line(" event TIMEWAIT_EXIT (state IDLE)").len(), 1);
    pair.finish(&[&passive]);
}
