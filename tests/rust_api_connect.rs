//! Connection setup through the Rust API: the fields and private data of
//! REQ, REP and RTU, REJ, MRA, COMM_EST, and the errors' shape.

mod rust_api_support;

use std::thread;
use std::time::Duration;

use ib_cm::{ConnectRequest, Device, Error, Event, QpType, RejectReason, Reply, Side, State};
use rust_api_support::*;

/// `connect` on one thread, `accept` on another: the REQ's fields (swapped
/// for the passive side) and all three private data, at their sizes.
#[test]
fn connect_and_accept_carry_fields_and_private_data() {
    let pair = Pair::new();
    let path = pair.a.path_to(1, pair.b.gid(1, 0).unwrap()).unwrap();
    let (qpn_a, qpn_b) = (next_qpn(), next_qpn());
    let request = ConnectRequest::builder(path, SERVICE_ID, qpn_a)
        .starting_psn(0x00a1a1a1)
        .responder_resources(4)
        .initiator_depth(2)
        .private_data(&pattern(92, 1))
        .rtu_private_data(&pattern(224, 3))
        .build();
    thread::scope(|s| {
        let passive = s.spawn(|| {
            let incoming = pair.listener.accept_timeout(WAIT).unwrap();
            let req = incoming.req().clone();
            assert_eq!(req.service_id, SERVICE_ID);
            assert_eq!(req.remote_qpn, qpn_a);
            assert_eq!(req.starting_psn, 0x00a1a1a1);
            assert_eq!(req.qp_type, QpType::Rc);
            assert_eq!((req.responder_resources, req.initiator_depth), (2, 4));
            assert_eq!(req.remote_ca_guid, pair.a.node_guid());
            assert_eq!(req.primary_path.dgid(), pair.a.gid(1, 0).unwrap());
            assert_eq!(incoming.private_data(), pattern(92, 1));
            let reply = Reply {
                starting_psn: 0x00b2b2b2,
                private_data: pattern(196, 2),
                ..Reply::new(qpn_b)
            };
            let conn = incoming.accept(reply).unwrap();
            assert_eq!(conn.side(), Side::Passive);
            assert_eq!(conn.remote_qpn(), qpn_a);
            assert_eq!(conn.rtu_private_data().unwrap(), pattern(224, 3));
            conn
        });
        let a = pair.a.connect(request).unwrap();
        let b = passive.join().unwrap();
        assert_eq!(a.side(), Side::Active);
        let rep = a.rep().unwrap();
        assert_eq!(rep.remote_qpn, qpn_b);
        assert_eq!(rep.starting_psn, 0x00b2b2b2);
        assert_eq!(rep.remote_ca_guid, pair.b.node_guid());
        assert_eq!(rep.private_data, pattern(196, 2));
        assert_eq!(a.remote_comm_id(), b.local_comm_id());
        assert_eq!(b.remote_comm_id(), a.local_comm_id());
    });
}

/// A REJ with a reason, ARI and private data reaches the requester whole;
/// too much of either is EINVAL and leaves the request to answer.
#[test]
fn reject_reaches_the_requester_with_reason_ari_and_private_data() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Default);
    let reason = RejectReason::NO_RESOURCES;
    assert_einval(incoming.reject(reason, &[0; 73], &[]), "ari_length 73 > 72");
    assert_einval(
        incoming.reject(reason, &[], &[0; 149]),
        "private_data_len 149 > 148",
    );
    assert_eq!(incoming.state(), State::ReqRcvd);
    incoming.reject(reason, b"why", &pattern(148, 9)).unwrap();
    assert_eq!(incoming.state(), State::Idle);
    match pending.wait_reply() {
        Err(e @ Error::Rejected { .. }) => {
            let io = std::io::Error::from(e);
            assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
            let e = io.get_ref().unwrap().downcast_ref::<Error>().unwrap();
            let Error::Rejected {
                reason: got,
                ari,
                private_data,
                ..
            } = e
            else {
                unreachable!()
            };
            assert_eq!(*got, reason);
            assert_eq!(ari, b"why");
            assert_eq!(*private_data, pattern(148, 9));
        }
        other => panic!("{other:?}"),
    }
    drop(incoming); // IDLE: nothing more is sent
}

#[test]
fn connect_to_a_service_nobody_listens_to_is_rejected_invalid_service_id() {
    let (a, b) = devices();
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let request = ConnectRequest::builder(path, 0x777, next_qpn()).build();
    match a.connect(request) {
        Err(Error::Rejected { reason, .. }) => {
            assert_eq!(reason, RejectReason::INVALID_SERVICE_ID);
        }
        other => panic!("{other:?}"),
    }
}

/// The requests and devices the CM refuses say why, as the C API's log
/// lines do, with the C API's errno.
#[test]
fn refusals_name_their_rule_and_errno() {
    let pair = Pair::new();
    assert_refused(pair.b.listen(SERVICE_ID), libc::EBUSY, "has a listener");
    assert_refused(
        Device::open(pair.a.name()),
        libc::EBUSY,
        "already open in this process",
    );
    let path = pair.a.path_to(1, pair.b.gid(1, 0).unwrap()).unwrap();
    let long = ConnectRequest::builder(path, SERVICE_ID, 1)
        .private_data(&[0; 93])
        .build();
    assert_einval(pair.a.request(long), "private_data_len 93 > 92");
    let uc_ud = ConnectRequest::builder(path, SERVICE_ID, 1)
        .qp_type(QpType::Other(4))
        .build();
    assert_einval(pair.a.request(uc_ud), "qp_type 4 is not RC, UC or XRC_INI");
    assert_einval(pair.a.gid(1, 1), "index 1 is an empty slot");
    let e = pair.b.listen(SERVICE_ID).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("Device::listen: service_id {SERVICE_ID:#x} has a listener (EBUSY)")
    );
    assert_eq!(
        std::io::Error::from(e).kind(),
        std::io::ErrorKind::ResourceBusy
    );
}

/// An MRA lets an acceptor answer after the requester's REQ timeout (18 ms
/// × 6 sends here) would have expired.
#[test]
fn mra_gives_a_slow_acceptor_time() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Default);
    incoming.send_mra(20, &pattern(222, 4)).unwrap();
    assert_eq!(incoming.state(), State::MraReqSent);
    thread::sleep(Duration::from_millis(300));
    let sent = incoming.reply(Reply::new(next_qpn())).unwrap();
    let a = pending.wait_reply().unwrap().confirm(&[]).unwrap();
    let b = sent.wait_established().unwrap();
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
}

/// `notify_established` (COMM_EST: the QP saw traffic before the RTU):
/// established at once, the lost RTU no longer needed.
#[test]
fn notify_established_establishes_before_the_rtu() {
    let pair = Pair::new();
    pair.a.drop_next_sent(ATTR_RTU, 100).unwrap();
    let (pending, incoming) = pair.start(Timing::Slow);
    let sent = incoming.reply(Reply::new(next_qpn())).unwrap();
    let mut a = pending.wait_reply().unwrap().confirm(&[]).unwrap();
    assert_eq!(sent.state(), State::RepSent);
    sent.notify_established().unwrap();
    assert_refused(
        sent.notify_established(),
        libc::EISCONN,
        "already ESTABLISHED",
    );
    let b = sent.wait_established().unwrap();
    assert_eq!(b.state(), State::Established);
    assert_eq!(b.rtu_private_data(), None);
    pair.a.drop_next_sent(ATTR_RTU, 0).unwrap();
    // And it disconnects as any other.
    b.send_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut a), Event::DreqReceived { .. }));
}
