//! Issue 31, point 3: the log tells what happened in the order it happened.
//! On the in-process fabric the peer handles a MAD on the worker while the
//! sender is still returning from the transport, so a MAD's `send` line and
//! the sender's state change must be written before the MAD is handed over.

use super::*;
use crate::cm::{create_id, send_drep, send_dreq, send_rep, send_req, send_rtu};
use crate::errno::ENETDOWN;
use crate::log::capture::Capture;
use crate::wire::attr;

/// Connections set up and torn down.
const ROUNDS: usize = 5;

/// The index of the first captured line holding all of `parts`.
fn first_line(lines: &[String], parts: &[&str]) -> usize {
    lines
        .iter()
        .position(|l| parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no line with {parts:?} in {lines:#?}"))
}

/// `<ATTR> tid … local … remote … port <n>` of a `send` or `recv` line.
fn mad_of(line: &str, verb: &str, to: &str) -> Option<String> {
    let rest = line.split_once(&format!(" debug: {verb} "))?.1;
    Some(rest.split_once(to)?.0.to_string())
}

/// Every MAD received was logged as sent first.
fn check_sends_come_first(lines: &[String]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(mad) = mad_of(line, "recv", " from ") else {
            continue;
        };
        let sent = lines
            .iter()
            .position(|l| mad_of(l, "send", " to ").as_deref() == Some(mad.as_str()));
        if sent.is_none_or(|sent| sent > at) {
            wrong.push(format!("recv before send: {mad}"));
        }
    }
    wrong
}

/// Each of the sender's state changes comes before the receiver's, for the
/// connection whose comm IDs are `a` (A's) and `b` (B's).
fn check_state_changes(
    lines: &[String],
    a: &str,
    b: &str,
    a_dev: &str,
    b_dev: &str,
) -> Vec<String> {
    let on_a = format!("id {a}/{b} {a_dev}:1 ");
    let on_b = format!("id {b}/{a} {b_dev}:1 ");
    // A's REQ line: A does not know B's comm ID yet.
    let req_on_a = format!("id {a}/0x00000000 {a_dev}:1 ");
    let pairs = [
        (
            (&req_on_a, "IDLE -> REQ_SENT (REQ sent)"),
            (&on_b, "IDLE -> REQ_RCVD"),
        ),
        (
            (&on_b, "REQ_RCVD -> REP_SENT (REP sent)"),
            (&on_a, "REQ_SENT -> REP_RCVD"),
        ),
        (
            (&on_a, "REP_RCVD -> ESTABLISHED (RTU sent)"),
            (&on_b, "REP_SENT -> ESTABLISHED"),
        ),
        (
            (&on_a, "ESTABLISHED -> DREQ_SENT (DREQ sent)"),
            (&on_b, "ESTABLISHED -> DREQ_RCVD"),
        ),
        (
            (&on_b, "DREQ_RCVD -> TIMEWAIT (DREP sent)"),
            (&on_a, "DREQ_SENT -> TIMEWAIT"),
        ),
    ];
    let mut wrong = Vec::new();
    for ((sender, sent), (receiver, received)) in pairs {
        if first_line(lines, &[sender, sent]) > first_line(lines, &[receiver, received]) {
            wrong.push(format!("{receiver}{received} before {sender}{sent}"));
        }
    }
    wrong
}

#[test]
fn log_order_each_mad_and_state_change_is_logged_by_its_sender_first() {
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name, &pair.b.name]);
    // Each send returns from the transport only after the peer's worker had
    // time to handle the MAD: a line written after the hand-over comes
    // after the peer's, every time.
    pair.loop_a().linger_after_send(Duration::from_millis(5));
    pair.loop_b().linger_after_send(Duration::from_millis(5));
    let mut wrong = Vec::new();
    for round in 1..=ROUNDS {
        let active = create_id(&pair.a, pair.rec.handler()).unwrap();
        send_req(&active, &pair.req_params()).unwrap();
        let passive = pair.rec.nth_new_id(round);
        pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
        send_dreq(&active, None).unwrap();
        pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
        send_drep(&passive, None).unwrap();
        pair.rec.wait(Some(&active), IB_CM_DREP_RECEIVED);

        let (a, b) = {
            let l = active.lock();
            (
                format!("{:#010x}", l.inner.local_id),
                format!("{:#010x}", l.inner.remote_id),
            )
        };
        let lines = capture.lines_with(&[]);
        wrong.extend(check_state_changes(
            &lines,
            &a,
            &b,
            &pair.a.name,
            &pair.b.name,
        ));
        crate::cm::destroy_id(&active, 0);
        crate::cm::destroy_id(&passive, 0);
    }
    wrong.extend(check_sends_come_first(&capture.lines_with(&[])));
    assert!(
        wrong.is_empty(),
        "{} out of order:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    pair.finish(&[]);
}

/// The lines of `lines` holding `parts`, in order: each found after the one
/// before.
fn in_order(lines: &[String], id: &str, parts: &[&str]) {
    let mut from = 0;
    for part in parts {
        let at = lines[from..]
            .iter()
            .position(|l| l.contains(id) && l.contains(part))
            .unwrap_or_else(|| panic!("no {part:?} of {id:?} after line {from} in {lines:#?}"));
        from += at + 1;
    }
}

#[test]
fn log_order_a_send_the_transport_refuses_is_logged_unsent_and_undone() {
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name, &pair.b.name]);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0));
    let unsent = format!("errno {}", libc::ENETDOWN);
    let a = format!("{:#010x}", pair.active.lock().inner.local_id);

    // The REQ: REQ_SENT before the hand-over, IDLE again when it fails.
    pair.loop_a().fail_next(attr::REQ, 1);
    assert_eq!(send_req(&pair.active, &pair.req_params()), Err(ENETDOWN));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    // A REQ that never left keeps the id's comm ID.
    send_req(&pair.active, &pair.req_params()).unwrap();
    assert_eq!(a, format!("{:#010x}", pair.active.lock().inner.local_id));

    // The REP: back to REQ_RCVD.
    let passive = pair.rec.nth_new_id(1);
    pair.loop_b().fail_next(attr::REP, 1);
    assert_eq!(send_rep(&passive, &rep_params(&[])), Err(ENETDOWN));
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    send_rep(&passive, &rep_params(&[])).unwrap();
    let b = format!("{:#010x}", passive.lock().inner.local_id);

    // The RTU: back to REP_RCVD.
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    pair.loop_a().fail_next(attr::RTU, 1);
    assert_eq!(send_rtu(&pair.active, &[]), Err(ENETDOWN));
    assert_eq!(pair.active.state(), IB_CM_REP_RCVD);
    send_rtu(&pair.active, &[]).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);

    let lines = capture.lines_with(&[]);
    let req = format!("local {a} remote 0x00000000 port 1 to ");
    in_order(
        &lines,
        "",
        &[
            &format!(
                "id {a}/0x00000000 {}:1 IDLE -> REQ_SENT (REQ sent)",
                pair.a.name
            ),
            "debug: send REQ tid",
            "info: unsent REQ tid",
            &format!(
                "id {a}/0x00000000 {}:1 REQ_SENT -> IDLE (REQ not sent)",
                pair.a.name
            ),
        ],
    );
    assert_eq!(
        capture
            .lines_with(&["info: unsent REQ tid", &req, &unsent])
            .len(),
        1
    );
    let on_b = format!("id {b}/{a} {}:1 ", pair.b.name);
    in_order(
        &lines,
        &on_b,
        &[
            "REQ_RCVD -> REP_SENT (REP sent)",
            "REP_SENT -> REQ_RCVD (REP not sent)",
        ],
    );
    assert_eq!(
        capture.lines_with(&["info: unsent REP tid", &unsent]).len(),
        1
    );
    let on_a = format!("id {a}/{b} {}:1 ", pair.a.name);
    in_order(
        &lines,
        &on_a,
        &[
            "REP_RCVD -> ESTABLISHED (RTU sent)",
            "ESTABLISHED -> REP_RCVD (RTU not sent)",
            "REP_RCVD -> ESTABLISHED (RTU sent)",
        ],
    );
    assert_eq!(
        capture.lines_with(&["info: unsent RTU tid", &unsent]).len(),
        1
    );
    pair.finish(&[&passive]);
}
