//! Dropping what owns a CM id does what `ib_destroy_cm_id` does in its
//! state, as `c-tests/test_destroy_setup.c` and
//! `test_destroy_established.c` check it through the C API.

mod rust_api_support;

use std::time::Instant;

use ib_cm::{Error, Event, RejectReason, Reply, State};
use rust_api_support::*;

fn assert_rejected<T: std::fmt::Debug>(result: Result<T, Error>, want: RejectReason) -> Vec<u8> {
    match result {
        Err(e @ Error::Rejected { .. }) => {
            assert_eq!(e.errno(), libc::ECONNREFUSED);
            let Error::Rejected { reason, ari, .. } = e else {
                unreachable!()
            };
            assert_eq!(reason, want);
            ari
        }
        other => panic!("expected a REJ {want}, got {other:?}"),
    }
}

/// REQ_SENT: REJ TIMEOUT with A's node GUID as ARI; B's request is gone.
#[test]
fn dropped_request_is_rejected_timeout_with_the_node_guid() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Slow);
    assert_eq!(pending.state(), State::ReqSent);
    drop(pending);
    // The REJ makes B's request IDLE; answering it then says why.
    let t0 = Instant::now();
    while incoming.state() != State::Idle {
        assert!(t0.elapsed() < WAIT, "no REJ came");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let reply = incoming.reply(Reply::new(next_qpn()));
    let ari = assert_rejected(reply, RejectReason::TIMEOUT);
    assert_eq!(ari, pair.a.node_guid().to_be_bytes());
}

/// REQ_RCVD: REJ CONSUMER_DEFINED; A's request ends.
#[test]
fn dropped_incoming_request_is_rejected_consumer_defined() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Slow);
    assert_eq!(incoming.state(), State::ReqRcvd);
    drop(incoming);
    assert_rejected(pending.wait_reply(), RejectReason::CONSUMER_DEFINED);
}

/// A listener dropped with a request nobody took rejects it.
#[test]
fn dropped_listener_rejects_the_requests_nobody_took() {
    let pair = Pair::new();
    let pending = pair
        .a
        .request(pair.request(Timing::Slow, next_qpn()))
        .unwrap();
    let t0 = Instant::now();
    while pair.listener.pending() == 0 {
        assert!(t0.elapsed() < WAIT, "the REQ never came");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(pair.listener);
    assert_rejected(pending.wait_reply(), RejectReason::CONSUMER_DEFINED);
}

/// REP_RCVD: A drops the REP it received: REJ CONSUMER_DEFINED to B.
#[test]
fn dropped_received_reply_is_rejected_consumer_defined() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Slow);
    let sent = incoming.reply(Reply::new(next_qpn())).unwrap();
    let replied = pending.wait_reply().unwrap();
    drop(replied);
    assert_rejected(sent.wait_established(), RejectReason::CONSUMER_DEFINED);
}

/// REP_SENT (A's RTU lost): REJ CONSUMER_DEFINED; A, established already,
/// gets it in timewait, then the end of timewait; no DREQ.
#[test]
fn dropped_sent_reply_is_rejected_and_the_established_peer_enters_timewait() {
    let pair = Pair::new();
    pair.a.drop_next_sent(ATTR_RTU, 100).unwrap();
    let (pending, incoming) = pair.start(Timing::Slow);
    let sent = incoming.reply(Reply::new(next_qpn())).unwrap();
    let mut a = pending.wait_reply().unwrap().confirm(&[]).unwrap();
    assert_eq!(a.state(), State::Established);
    assert_eq!(sent.state(), State::RepSent);
    drop(sent);
    match next(&mut a) {
        Event::RejReceived {
            reason,
            private_data,
            ..
        } => {
            assert_eq!(reason, RejectReason::CONSUMER_DEFINED);
            assert_eq!(private_data.len(), 148);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.state(), State::Timewait);
    assert_closes(&mut a);
    pair.a.drop_next_sent(ATTR_RTU, 0).unwrap();
}

/// ESTABLISHED: a DREQ without private data; the peer answers it and
/// reaches the end of timewait with no error and no DREP.
#[test]
fn dropped_connection_sends_a_dreq_the_peer_answers() {
    let pair = Pair::new();
    let (mut a, b) = pair.connect(Timing::Default);
    drop(b);
    assert_eq!(
        next(&mut a),
        Event::DreqReceived {
            private_data: vec![0; 220]
        }
    );
    assert_eq!(a.state(), State::DreqRcvd);
    a.reply_disconnect(&[]).unwrap();
    assert_closes(&mut a);
}

/// DREQ_SENT: the outstanding DREQ is cancelled; B's DREP finds nobody.
#[test]
fn dropped_connection_in_dreq_sent_sends_nothing_more() {
    let pair = Pair::new();
    let (a, mut b) = pair.connect(Timing::Slow);
    a.send_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut b), Event::DreqReceived { .. }));
    assert_eq!(a.state(), State::DreqSent);
    drop(a);
    b.reply_disconnect(&[]).unwrap();
    assert_closes(&mut b);
}

/// DREQ_RCVD: a DREP without private data; A gets it, then the end of
/// timewait.
#[test]
fn dropped_connection_in_dreq_rcvd_answers_with_an_empty_drep() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    a.send_disconnect(&pattern(220, 5)).unwrap();
    assert!(matches!(next(&mut b), Event::DreqReceived { .. }));
    drop(b);
    assert_eq!(
        next(&mut a),
        Event::DrepReceived {
            private_data: vec![0; 224]
        }
    );
    assert_closes(&mut a);
}

/// TIMEWAIT: dropping a connection in timewait sends nothing, and the
/// devices close once every owner is gone.
#[test]
fn dropped_connections_in_timewait_let_the_devices_close() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Slow);
    a.send_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut b), Event::DreqReceived { .. }));
    b.reply_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut a), Event::DrepReceived { .. }));
    assert_eq!(a.state(), State::Timewait);
    let names = [pair.a.name().to_owned(), pair.b.name().to_owned()];
    drop((a, b, pair));
    // Closed: the names open again.
    for name in names {
        ib_cm::Device::open(&name).unwrap();
    }
}
