//! Hostile peers: what a peer can make the CM do, and what it cannot.

use std::time::Duration;

use super::*;
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_INVALID_SERVICE_ID;
use crate::wire::{Drep, Dreq, Rej, Req, attr, parse_header};

#[test]
fn a_flood_of_unknown_dreqs_gets_one_stateless_drep_each_and_keeps_nothing() {
    let pair = Pair::new();
    let raw = Raw::open();
    let ids_before = pair.b.id_count(); // the listener
    const FLOOD: u32 = 2000;
    for i in 0..FLOOD {
        let dreq = Dreq {
            local_comm_id: 0x4000_0000 + i,
            remote_comm_id: 0x5000_0000 + i, // no such connection
            remote_qpn: i & 0xff_ffff,
            ..Dreq::default()
        };
        raw.send_to(&pair.b, &dreq.encode(u64::from(i)));
    }
    let last = raw.wait_for(FLOOD as usize);
    assert_eq!(
        raw.received_after(Duration::from_millis(50)),
        FLOOD as usize
    );
    let (header, _) = parse_header(&last).unwrap();
    assert_eq!(header.tid, u64::from(FLOOD - 1));
    assert_eq!(
        Drep::decode(&last).unwrap().remote_comm_id,
        0x4000_0000 + FLOOD - 1
    );
    // Nothing outlives the answers: no new id on the device, and its only
    // id (the listener) is untouched.
    assert_eq!(pair.b.id_count(), ids_before);
    assert_eq!(pair.listener.state(), IB_CM_LISTEN);
    pair.finish(&[]);
}

#[test]
fn no_remote_input_makes_a_listener_accept_another_service_id() {
    let pair = Pair::new();
    let raw = Raw::open();
    let mut sent = 0;
    for service_id in [
        0,
        SERVICE_ID - 1,
        SERVICE_ID + 1,
        !SERVICE_ID,
        SERVICE_ID << 8,
        u64::MAX,
    ] {
        let req = Req {
            local_comm_id: 0x900 + sent,
            service_id,
            local_ca_guid: 0x1234,
            local_qpn: 0x77 + sent,
            ..Req::default()
        };
        raw.send_to(&pair.b, &req.encode(1));
        sent += 1;
        let rej = Rej::decode(&raw.wait_for(sent as usize)).unwrap();
        assert_eq!(rej.reason, IB_CM_REJ_INVALID_SERVICE_ID as u16);
    }
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 0);
    pair.finish(&[]);
}

#[test]
fn a_peer_that_never_answers_costs_bounded_time_and_nothing_after() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::REQ, u32::MAX).unwrap();
    super::super::send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    // 1 + max_cm_retries REQs, then nothing: the id is IDLE with no timer.
    assert_eq!(pair.loop_a().sent(attr::REQ), 4);
    assert!(pair.active.lock().inner.msg.is_none());
    assert!(pair.active.lock().inner.timewait_timer.is_none());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(pair.loop_a().sent(attr::REQ), 4);
    pair.finish(&[]);
}
