//! Connection setup: `ib_cm_listen`, `ib_send_cm_req/rep/rtu/rej`,
//! `cm_req_handler`, `cm_rep_handler`, `cm_rtu_handler`, `cm_rej_handler`,
//! `ib_cm_notify`.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::abi::ib_cm_rej_reason::*;
use crate::abi::ib_event_type::IB_EVENT_COMM_EST;
use crate::cm::{CM_ASSIGN_SERVICE_ID, listen, notify, send_rej, send_req, send_rtu};
use crate::errno::{EBUSY, EINVAL, EISCONN};
use crate::wire::{Req, attr};

#[test]
fn connect_establishes_both_sides_with_matching_comm_ids() {
    let pair = Pair::new();
    let passive = pair.connect();
    let (a, b) = (pair.active.lock(), passive.lock());
    assert_eq!(a.inner.remote_id, b.inner.local_id);
    assert_eq!(b.inner.remote_id, a.inner.local_id);
    assert_eq!(b.inner.remote_qpn, ACTIVE_QPN);
    assert_eq!(a.inner.remote_qpn, PASSIVE_QPN);
    assert_eq!(b.inner.local_qpn, PASSIVE_QPN);
    // The kernel's swaps: our initiator depth is the peer's responder resources.
    assert_eq!(b.inner.initiator_depth, 4);
    assert_eq!(b.inner.responder_resources, 2);
    drop((a, b));
    assert_eq!(pair.rec.events_of(&pair.active), vec![IB_CM_REP_RECEIVED]);
    assert_eq!(
        pair.rec.events_of(&passive),
        vec![IB_CM_REQ_RECEIVED, IB_CM_RTU_RECEIVED]
    );
    pair.finish(&[&passive]);
}

#[test]
fn cm_req_handler_delivers_req_private_data_and_a_new_id_in_req_rcvd() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    let mut p = pair.req_params();
    p.private_data = pattern(92, 3);
    send_req(&pair.active, &p).unwrap();
    let got = pair.rec.wait(None, IB_CM_REQ_RECEIVED);
    assert_eq!(got.state, IB_CM_REQ_RCVD);
    assert_eq!(got.private_data.unwrap(), pattern(92, 3));
    let passive = got.new_id.unwrap();
    assert_ne!(passive.addr(), pair.listener.addr());
    pair.finish(&[&passive]);
}

#[test]
fn send_req_checks_params_and_state() {
    let pair = Pair::new();
    let mut p = pair.req_params();
    p.qp_type = ib_qp_type::IB_QPT_UD as i32;
    assert_eq!(send_req(&pair.active, &p), Err(EINVAL));
    let mut p = pair.req_params();
    p.private_data = vec![0; 93];
    assert_eq!(send_req(&pair.active, &p), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(send_req(&pair.listener, &pair.req_params()), Err(EINVAL));
    let passive = pair.connect();
    assert_eq!(send_req(&pair.active, &pair.req_params()), Err(EINVAL));
    pair.finish(&[&passive]);
}

#[test]
fn cm_process_send_error_req_sent_gives_req_error_and_idle() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::REQ, 100).unwrap();
    send_req(&pair.active, &pair.req_params()).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(pair.loop_a().sent(attr::REQ), 4);
    pair.finish(&[]);
}

#[test]
fn lost_rep_is_retransmitted_and_the_connection_completes() {
    let pair = Pair::new();
    pair.loop_b().drop_next(attr::REP, 1).unwrap();
    let passive = pair.connect();
    assert_eq!(pair.loop_b().sent(attr::REP), 2);
    pair.finish(&[&passive]);
}

#[test]
fn cm_dup_rep_handler_established_resends_rtu() {
    let pair = Pair::new();
    // The RTU is lost: B resends its REP, A (ESTABLISHED) answers with an RTU.
    pair.loop_a().drop_next(attr::RTU, 1).unwrap();
    let passive = pair.connect();
    assert_eq!(pair.loop_a().sent(attr::RTU), 2);
    assert_eq!(pair.rec.count(IB_CM_REP_RECEIVED), 1);
    pair.finish(&[&passive]);
}

#[test]
fn cm_req_handler_duplicate_req_in_req_rcvd_is_dropped() {
    let pair = Pair::new();
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    // A retransmits its REQ while B's user thinks: one new id only.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pair.loop_a().sent(attr::REQ) < 2 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 1);
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    pair.finish(&[&passive]);
}

#[test]
fn cm_match_req_stale_connection_rejects_and_disconnects_the_old_one() {
    let pair = Pair::new();
    let passive = pair.connect();
    // A REQ from the same CA with the same QPN (a restarted peer): REJ
    // STALE_CONN to it, and a DREQ on the old connection.
    let raw = Raw::open();
    let req = Req {
        local_comm_id: 0x7777,
        service_id: SERVICE_ID,
        local_ca_guid: pair.a.node_guid,
        local_qpn: ACTIVE_QPN,
        ..Req::default()
    };
    raw.send_to(&pair.b, &req.encode(5));
    let rej = crate::wire::Rej::decode(&raw.wait_for(1)).unwrap();
    assert_eq!(rej.reason, IB_CM_REJ_STALE_CONN as u16);
    assert_eq!(rej.remote_comm_id, 0x7777);
    pair.rec.wait(Some(&pair.active), IB_CM_DREQ_RECEIVED);
    assert_eq!(passive.state(), IB_CM_DREQ_SENT);
    pair.finish(&[&passive]);
}

#[test]
fn cm_req_handler_without_listener_rejects_invalid_service_id() {
    let pair = Pair::new();
    let mut p = pair.req_params();
    p.service_id = SERVICE_ID + 1;
    send_req(&pair.active, &p).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_INVALID_SERVICE_ID as u16));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    pair.finish(&[]);
}

#[test]
fn ib_send_cm_rej_from_req_rcvd_resets_both_sides_and_carries_private_data() {
    let pair = Pair::new();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(|id, _| {
            let reason = IB_CM_REJ_CONSUMER_DEFINED as u16;
            send_rej(id, reason, &[], &pattern(148, 4)).unwrap();
            0
        }),
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_CONSUMER_DEFINED as u16));
    assert_eq!(got.private_data.unwrap(), pattern(148, 4));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(passive.state(), IB_CM_IDLE);
    assert_eq!(send_rej(&passive, 28, &[], &[]), Err(EINVAL));
    assert_eq!(send_rej(&passive, 28, &[0; 73], &[]), Err(EINVAL));
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_listen_checks_state_duplicates_and_assigned_ids() {
    let pair = Pair::new();
    let other = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    assert_eq!(listen(&other, SERVICE_ID), Err(EBUSY));
    assert_eq!(other.state(), IB_CM_IDLE);
    assert_eq!(listen(&pair.listener, 99), Err(EINVAL));
    assert_eq!(listen(&other, CM_ASSIGN_SERVICE_ID | 1), Err(EINVAL));
    listen(&other, CM_ASSIGN_SERVICE_ID).unwrap();
    let first = other.lock().inner.service_id;
    assert_eq!(first & 0xff00_0000_0000_0000, CM_ASSIGN_SERVICE_ID);
    let third = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    listen(&third, CM_ASSIGN_SERVICE_ID).unwrap();
    assert_eq!(third.lock().inner.service_id, first + 1);
    // The same service on another device is another listener.
    let on_a = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
    listen(&on_a, SERVICE_ID).unwrap();
    pair.finish(&[&other, &third, &on_a]);
}

#[test]
fn ib_cm_notify_comm_est_establishes_rep_sent_and_rtu_then_is_duplicate() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::RTU, 100).unwrap();
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    wait_state(&passive, IB_CM_REP_SENT);
    assert_eq!(
        notify(&pair.listener, IB_EVENT_COMM_EST as i32),
        Err(EINVAL)
    );
    notify(&passive, IB_EVENT_COMM_EST as i32).unwrap();
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.rec.wait(Some(&passive), IB_CM_USER_ESTABLISHED);
    assert_eq!(notify(&passive, IB_EVENT_COMM_EST as i32), Err(EISCONN));
    assert_eq!(notify(&passive, 99), Err(EINVAL));
    pair.finish(&[&passive]);
}

#[test]
fn send_rtu_outside_rep_rcvd_is_einval() {
    let pair = Pair::new();
    assert_eq!(send_rtu(&pair.active, &[]), Err(EINVAL));
    let passive = pair.connect();
    assert_eq!(send_rtu(&pair.active, &[]), Err(EINVAL));
    assert_eq!(send_rtu(&passive, &[]), Err(EINVAL));
    pair.finish(&[&passive]);
}

#[test]
fn local_comm_ids_are_distinct_and_never_zero() {
    let pair = Pair::new();
    let ids: Vec<_> = (0..1000)
        .map(|_| super::super::create_id(&pair.a, pair.rec.handler()).unwrap())
        .collect();
    let mut locals: Vec<u32> = ids.iter().map(|id| id.lock().inner.local_id).collect();
    assert!(locals.iter().all(|&l| l != 0));
    locals.sort_unstable();
    locals.dedup();
    assert_eq!(locals.len(), 1000);
    for id in &ids {
        super::super::destroy_id(id, 0);
    }
    pair.finish(&[]);
}

#[test]
fn ib_prepare_cm_mra_in_req_rcvd_answers_a_duplicate_req_with_mra_and_stretches_the_req() {
    let pair = Pair::new();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(|id, _| {
            crate::cm::prepare_mra(id).unwrap();
            0
        }),
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(passive.state(), IB_CM_MRA_REQ_SENT);
    // The REQ's retransmission (18 ms) is a duplicate: B answers with an MRA.
    let got = pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    assert_eq!(got.state, IB_CM_MRA_REQ_RCVD);
    assert_eq!(pair.loop_b().sent(attr::MRA), 1);
    // The REQ now waits 2^(24-8) ms + timewait: no more REQs for a while.
    let reqs = pair.loop_a().sent(attr::REQ);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(pair.loop_a().sent(attr::REQ), reqs);
    // The user answers after all: REP from MRA_REQ_SENT, RTU, established.
    crate::cm::send_rep(&passive, &rep_params(&[])).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert_eq!(crate::cm::prepare_mra(&pair.active), Err(EINVAL));
    pair.finish(&[&passive]);
}

#[test]
fn ib_prepare_cm_mra_in_rep_rcvd_answers_a_duplicate_rep_with_mra() {
    let pair = Pair::new();
    pair.rec.on(
        IB_CM_REP_RECEIVED,
        Arc::new(|id, _| {
            crate::cm::prepare_mra(id).unwrap();
            0
        }),
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let got = pair.rec.wait(Some(&passive), IB_CM_MRA_RECEIVED);
    assert_eq!(got.state, IB_CM_MRA_REP_RCVD);
    assert_eq!(pair.active.state(), IB_CM_MRA_REP_SENT);
    send_rtu(&pair.active, &[]).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn ib_prepare_cm_mra_outside_req_rcvd_rep_rcvd_is_einval() {
    let pair = Pair::new();
    assert_eq!(crate::cm::prepare_mra(&pair.active), Err(EINVAL));
    assert_eq!(crate::cm::prepare_mra(&pair.listener), Err(EINVAL));
    let passive = pair.connect();
    assert_eq!(crate::cm::prepare_mra(&passive), Err(EINVAL));
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_init_qp_attr_gives_init_rtr_rts_as_the_kernel() {
    use crate::cm::init_qp_attr;
    use crate::cm::qp_attr::{QPS_INIT, QPS_RTR, QPS_RTS, mask};
    let pair = Pair::new();
    assert_eq!(init_qp_attr(&pair.active, QPS_INIT), Err(EINVAL)); // IDLE
    let passive = pair.connect();
    let init = init_qp_attr(&pair.active, QPS_INIT).unwrap();
    assert_eq!(
        init.mask,
        mask::STATE | mask::ACCESS_FLAGS | mask::PKEY_INDEX | mask::PORT
    );
    assert_eq!(init.qp_access_flags, 0b1110); // remote write, read, atomic
    assert_eq!(init.port_num, 1);

    let rtr = init_qp_attr(&pair.active, QPS_RTR).unwrap();
    let want = mask::STATE
        | mask::AV
        | mask::PATH_MTU
        | mask::DEST_QPN
        | mask::RQ_PSN
        | mask::MAX_DEST_RD_ATOMIC
        | mask::MIN_RNR_TIMER;
    assert_eq!(rtr.mask, want);
    assert_eq!(rtr.dest_qp_num, PASSIVE_QPN);
    assert_eq!(rtr.rq_psn, 0x1000); // the kernel: the REQ's starting PSN
    assert_eq!(rtr.path_mtu, 5);
    assert_eq!(rtr.max_dest_rd_atomic, 4); // the REP's initiator depth
    assert_eq!(rtr.ah_attr.dlid, pair.b.ports[0].lid);
    assert_eq!(rtr.ah_attr.dgid, pair.b.ports[0].gids[0].gid);

    let rts = init_qp_attr(&pair.active, QPS_RTS).unwrap();
    let want = mask::STATE
        | mask::SQ_PSN
        | mask::RETRY_CNT
        | mask::RNR_RETRY
        | mask::MAX_QP_RD_ATOMIC
        | mask::TIMEOUT;
    assert_eq!(rts.mask, want);
    assert_eq!(rts.sq_psn, 0x2000); // the REP's starting PSN
    assert_eq!((rts.retry_cnt, rts.rnr_retry), (7, 5));
    assert_eq!(rts.max_rd_atomic, 2); // the REP's responder resources
    assert_eq!(rts.timeout, 15);

    let rtr = init_qp_attr(&passive, QPS_RTR).unwrap();
    assert_eq!(
        (rtr.dest_qp_num, rtr.rq_psn, rtr.max_dest_rd_atomic),
        (ACTIVE_QPN, 0x2000, 2)
    );
    assert_eq!(rtr.ah_attr.dlid, pair.a.ports[0].lid);
    let rts = init_qp_attr(&passive, QPS_RTS).unwrap();
    assert_eq!((rts.sq_psn, rts.retry_cnt, rts.rnr_retry), (0x1000, 7, 6));
    assert_eq!(rts.max_rd_atomic, 4);
    assert_eq!(init_qp_attr(&passive, 99), Err(EINVAL));
    assert_eq!(init_qp_attr(&pair.listener, QPS_INIT), Err(EINVAL));
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_insert_listen_shares_one_listener_per_handler_and_counts_its_users() {
    use crate::cm::insert_listen;
    let pair = Pair::new();
    const SHARED: u64 = 0x5ea1;
    let h = pair.rec.handler();
    let first = insert_listen(&pair.b, h.clone(), 0x1111, SHARED).unwrap();
    let second = insert_listen(&pair.b, h.clone(), 0x1111, SHARED).unwrap();
    assert_eq!(first.addr(), second.addr());
    assert_eq!(first.lock().inner.listen_sharecount, 2);
    assert_eq!(
        insert_listen(&pair.b, h.clone(), 0x2222, SHARED).err(),
        Some(EINVAL)
    );
    // ib_cm_listen cannot take a service a shared listener holds.
    let other = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    assert_eq!(listen(&other, SHARED), Err(EBUSY));
    // One user leaves: still listening, and REQs still reach it.
    super::super::destroy_id(&first, 0);
    assert_eq!(second.state(), IB_CM_LISTEN);
    let mut p = pair.req_params();
    p.service_id = SHARED;
    send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    // The last user leaves: gone.
    super::super::destroy_id(&second, 0);
    assert!(second.is_destroyed());
    listen(&other, SHARED).unwrap();
    pair.finish(&[&passive, &other]);
}
