//! `ib_destroy_cm_id` per state (`cm_destroy_id`), handler return values, and
//! devices.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::abi::ib_cm_rej_reason::*;
use crate::cm::{destroy_id, send_drep, send_dreq, send_req};
use crate::errno::EBUSY;
use crate::wire::attr;

#[test]
fn cm_destroy_id_established_sends_one_dreq_and_the_peer_sees_dreq_received() {
    let pair = Pair::new();
    let passive = pair.connect();
    destroy_id(&passive, 0);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREQ_RECEIVED);
    assert_eq!(got.private_data.unwrap(), vec![0; 220]);
    assert_eq!(pair.loop_b().sent(attr::DREQ), 1);
    // The peer's DREP finds no connection; a DREQ answered after destroy gets
    // a stateless DREP, so A completes.
    send_drep(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    assert!(pair.rec.events_of(&passive).len() == 2); // REQ_RECEIVED, RTU_RECEIVED
    pair.finish(&[]);
}

#[test]
fn dreq_for_a_destroyed_connection_gets_a_stateless_drep() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.loop_b().drop_next(attr::DREQ, 1).unwrap();
    destroy_id(&passive, 0);
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.finish(&[]);
}

#[test]
fn cm_destroy_id_dreq_sent_enters_timewait_and_delivers_nothing_more() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    destroy_id(&pair.active, 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pair.rec.events_of(&pair.active), vec![IB_CM_REP_RECEIVED]);
    assert_eq!(pair.loop_a().sent(attr::DREQ), 1);
    pair.finish(&[&passive]);
}

#[test]
fn cm_destroy_id_dreq_rcvd_sends_a_drep() {
    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, Some(&[5; 10])).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    destroy_id(&passive, 0);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), vec![0; 224]);
    pair.finish(&[]);
}

#[test]
fn cm_destroy_id_req_sent_sends_rej_timeout_with_node_guid() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    destroy_id(&pair.active, 0);
    // The passive side finds its id through the ARI (A's node GUID).
    let got = pair.rec.wait(Some(&passive), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_TIMEOUT as u16));
    assert_eq!(passive.state(), IB_CM_IDLE);
    pair.finish(&[&passive]);
}

#[test]
fn cm_destroy_id_rep_sent_rejects_and_the_peer_enters_timewait() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0));
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    destroy_id(&passive, 0);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_CONSUMER_DEFINED as u16));
    assert_eq!(got.state, IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.finish(&[]);
}

#[test]
fn handler_nonzero_return_on_req_received_destroys_the_new_id_with_rej_consumer_defined() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| -1));
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_CONSUMER_DEFINED as u16));
    assert!(passive.is_destroyed());
    assert!(crate::cm::lookup_id(passive.addr()).is_none());
    pair.finish(&[]);
}

#[test]
fn handler_nonzero_return_enomem_on_req_received_lets_the_peer_retry() {
    let pair = Pair::new();
    pair.rec
        .on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| -libc::ENOMEM));
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(None, IB_CM_REQ_RECEIVED);
    // No REJ: A's REQ retry creates a new id on B.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pair.rec.count(IB_CM_REQ_RECEIVED) < 2 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(pair.rec.count(IB_CM_REJ_RECEIVED), 0);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| -1));
    pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    pair.finish(&[]);
}

#[test]
fn destroy_from_inside_its_own_handler_does_not_deadlock() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(|id, _| {
            destroy_id(id, 0);
            0
        }),
    );
    send_dreq(&pair.active, None).unwrap();
    // The destroy answered the DREQ with a DREP.
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert!(passive.is_destroyed());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        pair.rec.events_of(&passive).last(),
        Some(&IB_CM_DREQ_RECEIVED)
    );
    pair.finish(&[]);
}

#[test]
fn close_device_is_ebusy_while_ids_remain() {
    let pair = Pair::new();
    assert_eq!(crate::cm::close_device(&pair.a), Err(EBUSY));
    pair.finish(&[]);
}

#[test]
fn a_loop_device_name_is_open_once() {
    let name = loop_name();
    let dev = crate::cm::open_device(&name).unwrap();
    assert_eq!(
        crate::cm::open_device(&name).err(),
        Some(crate::errno::EBUSY)
    );
    crate::cm::close_device(&dev).unwrap();
    let again = crate::cm::open_device(&name).unwrap();
    crate::cm::close_device(&again).unwrap();
    assert_eq!(
        crate::cm::open_device("mlx5_0").err(),
        Some(crate::errno::ENODEV)
    );
}
