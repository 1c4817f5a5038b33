//! Issue 31, point 1: an id back in `IB_CM_IDLE` may be used again
//! (ib_create_cm_id(3)). Each test takes one way back to IDLE, then sends a
//! REQ on the same id and checks that the new connection is ESTABLISHED on
//! both sides and carries a DREQ and a DREP with private data.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::abi::ib_cm_lap_state::IB_CM_LAP_UNINIT;
use crate::abi::ib_cm_rej_reason::*;
use crate::abi::ib_cm_sidr_status::IB_SIDR_SUCCESS;
use crate::abi::{data_size, ib_event_type};
use crate::cm::qp_attr::{QPS_RTR, QPS_RTS, mask};
use crate::cm::{
    SidrRepParams, SidrReqParams, create_id, init_qp_attr, listen, notify, prepare_mra, send_drep,
    send_dreq, send_rej, send_req, send_rtu, send_sidr_rep, send_sidr_req, set_disconnect_timeout,
};
use crate::wire::{MsgResponse, Rej, Rep, attr};

/// Sends `params` as a REQ on `id` (back in IDLE), which the test's
/// `n`th REQ_RECEIVED answers; waits until both sides are ESTABLISHED and
/// returns the peer's new id.
fn connect_again(
    rec: &Recorder,
    id: &Arc<CmIdPriv>,
    params: &ReqParams,
    n: usize,
) -> Arc<CmIdPriv> {
    assert_eq!(id.state(), IB_CM_IDLE);
    send_req(id, params).unwrap();
    let passive = rec.nth_new_id(n);
    rec.wait_nth(&passive, IB_CM_RTU_RECEIVED, 1);
    assert_eq!(id.state(), IB_CM_ESTABLISHED);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    passive
}

/// `active` disconnects with 220 bytes of private data, `passive` answers
/// with 224; each side gets the other's bytes. Then both are in timewait.
fn disconnect_with_private_data(rec: &Recorder, active: &Arc<CmIdPriv>, passive: &Arc<CmIdPriv>) {
    let dreq_pd = pattern(data_size::DREQ_PRIVATE_DATA_SIZE, 0x31);
    let drep_pd = pattern(data_size::DREP_PRIVATE_DATA_SIZE, 0x13);
    let dreqs = rec
        .events_of(passive)
        .iter()
        .filter(|e| **e == IB_CM_DREQ_RECEIVED)
        .count();
    let dreps = rec
        .events_of(active)
        .iter()
        .filter(|e| **e == IB_CM_DREP_RECEIVED)
        .count();
    send_dreq(active, Some(&dreq_pd)).unwrap();
    let got = rec.wait_nth(passive, IB_CM_DREQ_RECEIVED, dreqs + 1);
    assert_eq!(got.private_data.unwrap(), dreq_pd);
    send_drep(passive, Some(&drep_pd)).unwrap();
    let got = rec.wait_nth(active, IB_CM_DREP_RECEIVED, dreps + 1);
    assert_eq!(got.state, IB_CM_TIMEWAIT);
    assert_eq!(got.private_data.unwrap(), drep_pd);
}

/// A listener on A for the same service, so that B's ids can send REQs too.
fn listener_on_a(pair: &Pair) -> Arc<CmIdPriv> {
    let listener = create_id(&pair.a, pair.rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    listener
}

/// A REQ from B to A's listener.
fn req_from_b(pair: &Pair) -> ReqParams {
    ReqParams {
        primary_path: pair.b.init_path(1, &pair.a.ports[0].gids[0].gid).unwrap(),
        qp_num: PASSIVE_QPN,
        ..pair.req_params()
    }
}

/// `event`'s handler does `first` the first time, and the pair's usual
/// answer (`then`) every time after.
fn first_time(
    rec: &Recorder,
    event: ib_cm_event_type,
    first: impl Fn(&Arc<CmIdPriv>) -> i32 + Send + Sync + 'static,
    then: impl Fn(&Arc<CmIdPriv>) -> i32 + Send + Sync + 'static,
) {
    let calls = AtomicUsize::new(0);
    rec.on(
        event,
        Arc::new(move |id, _| {
            if calls.fetch_add(1, Ordering::Relaxed) == 0 {
                first(id)
            } else {
                then(id)
            }
        }),
    );
}

fn answer_rep(id: &Arc<CmIdPriv>) -> i32 {
    crate::cm::send_rep(id, &rep_params(&[])).unwrap();
    0
}

fn answer_rtu(id: &Arc<CmIdPriv>) -> i32 {
    send_rtu(id, &[]).unwrap();
    0
}

fn reject(id: &Arc<CmIdPriv>) -> i32 {
    send_rej(id, IB_CM_REJ_CONSUMER_DEFINED as u16, &[], &[]).unwrap();
    0
}

#[test]
fn reuse_after_timewait_exit_on_the_active_side() {
    let pair = Pair::new();
    let first = pair.connect();
    let old_local_id = pair.active.lock().inner.local_id;
    disconnect_with_private_data(&pair.rec, &pair.active, &first);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);

    let second = connect_again(&pair.rec, &pair.active, &pair.req_params(), 2);
    // A new connection identity: a comm ID of its own, the new peer's.
    let (local_id, remote_id) = {
        let l = pair.active.lock();
        (l.inner.local_id, l.inner.remote_id)
    };
    assert_ne!(local_id, old_local_id);
    assert_eq!(
        u32::from_be(pair.active.public.local_id.load(Ordering::Relaxed)),
        local_id
    );
    assert_eq!(remote_id, second.lock().inner.local_id);
    disconnect_with_private_data(&pair.rec, &pair.active, &second);
    pair.finish(&[&first, &second]);
}

#[test]
fn reuse_after_timewait_exit_on_the_passive_side() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    let first = pair.connect();
    disconnect_with_private_data(&pair.rec, &pair.active, &first);
    pair.rec.wait(Some(&first), IB_CM_TIMEWAIT_EXIT);

    let second = connect_again(&pair.rec, &first, &req_from_b(&pair), 2);
    disconnect_with_private_data(&pair.rec, &first, &second);
    pair.finish(&[&first, &second, &listener_a]);
}

#[test]
fn reuse_after_rej_received_in_req_sent() {
    let pair = Pair::new();
    // B's user rejects the first REQ (and lets the new id go).
    first_time(
        &pair.rec,
        IB_CM_REQ_RECEIVED,
        |id| reject(id) | 1,
        answer_rep,
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);

    let passive = connect_again(&pair.rec, &pair.active, &pair.req_params(), 2);
    disconnect_with_private_data(&pair.rec, &pair.active, &passive);
    pair.finish(&[&passive]);
}

#[test]
fn reuse_after_rej_sent_in_rep_rcvd_and_received_in_rep_sent() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    // A's user rejects the first REP: A goes IDLE by the REJ it sends, B's
    // id by the REJ it receives in REP_SENT.
    first_time(&pair.rec, IB_CM_REP_RECEIVED, reject, answer_rtu);
    send_req(&pair.active, &pair.req_params()).unwrap();
    let first = pair.rec.nth_new_id(1);
    pair.rec.wait(Some(&first), IB_CM_REJ_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(first.state(), IB_CM_IDLE);

    let second = connect_again(&pair.rec, &pair.active, &pair.req_params(), 2);
    disconnect_with_private_data(&pair.rec, &pair.active, &second);
    let third = connect_again(&pair.rec, &first, &req_from_b(&pair), 3);
    disconnect_with_private_data(&pair.rec, &first, &third);
    pair.finish(&[&first, &second, &third, &listener_a]);
}

#[test]
fn reuse_after_rej_sent_in_req_rcvd() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    // B's user rejects the first REQ and keeps the id.
    first_time(&pair.rec, IB_CM_REQ_RECEIVED, reject, answer_rep);
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    let first = pair.rec.nth_new_id(1);
    assert_eq!(first.state(), IB_CM_IDLE);

    let second = connect_again(&pair.rec, &first, &req_from_b(&pair), 2);
    disconnect_with_private_data(&pair.rec, &first, &second);
    pair.finish(&[&first, &second, &listener_a]);
}

#[test]
fn reuse_after_rej_timeout_sent_in_req_sent_and_received_in_req_rcvd() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    // B's user does not answer the first REQ; A's user gives up on it with a
    // REJ "timeout" (its node GUID as ARI), which finds B's id by A's comm ID.
    first_time(&pair.rec, IB_CM_REQ_RECEIVED, |_| 0, answer_rep);
    send_req(&pair.active, &pair.req_params()).unwrap();
    let first = pair.rec.nth_new_id(1);
    let guid = pair.a.node_guid.to_be_bytes();
    send_rej(&pair.active, IB_CM_REJ_TIMEOUT as u16, &guid, &[]).unwrap();
    pair.rec.wait(Some(&first), IB_CM_REJ_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(first.state(), IB_CM_IDLE);

    let second = connect_again(&pair.rec, &pair.active, &pair.req_params(), 2);
    disconnect_with_private_data(&pair.rec, &pair.active, &second);
    let third = connect_again(&pair.rec, &first, &req_from_b(&pair), 3);
    disconnect_with_private_data(&pair.rec, &first, &third);
    pair.finish(&[&first, &second, &third, &listener_a]);
}

#[test]
fn reuse_after_req_error() {
    let pair = Pair::new();
    // The REQ and its 3 retries are lost: REQ_ERROR after about 4 × 67 ms.
    pair.loop_a().drop_next(attr::REQ, 4).unwrap();
    let quick = ReqParams {
        remote_cm_response_timeout: 14,
        ..pair.req_params()
    };
    send_req(&pair.active, &quick).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);

    let passive = connect_again(&pair.rec, &pair.active, &pair.req_params(), 1);
    disconnect_with_private_data(&pair.rec, &pair.active, &passive);
    pair.finish(&[&passive]);
}

#[test]
fn reuse_after_rep_error_on_the_passive_side() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    // B's REP and its 3 retries are lost: REP_ERROR on B, REQ_ERROR on A.
    pair.loop_b().drop_next(attr::REP, 4).unwrap();
    let quick = ReqParams {
        remote_cm_response_timeout: 14,
        local_cm_response_timeout: 14,
        ..pair.req_params()
    };
    send_req(&pair.active, &quick).unwrap();
    let first = pair.rec.nth_new_id(1);
    pair.rec.wait(Some(&first), IB_CM_REP_ERROR);
    pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(first.state(), IB_CM_IDLE);

    let second = connect_again(&pair.rec, &first, &req_from_b(&pair), 2);
    disconnect_with_private_data(&pair.rec, &first, &second);
    pair.finish(&[&first, &second, &listener_a]);
}

#[test]
fn reuse_a_rep_for_the_request_before_does_not_match_the_new_one() {
    let pair = Pair::new();
    // Both REQs are lost (the first one and its 3 retries: REQ_ERROR).
    pair.loop_a().drop_next(attr::REQ, 5).unwrap();
    let quick = ReqParams {
        remote_cm_response_timeout: 14,
        ..pair.req_params()
    };
    send_req(&pair.active, &quick).unwrap();
    let old_local_id = pair.active.lock().inner.local_id;
    pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    send_req(&pair.active, &pair.req_params()).unwrap();

    // A peer's late REP to the first REQ names its comm ID: dropped, where
    // under the old comm ID it would complete the second REQ with a peer
    // that never saw it.
    let late = Rep {
        local_comm_id: 0x3131_0003,
        remote_comm_id: old_local_id,
        local_qpn: PASSIVE_QPN,
        local_ca_guid: pair.b.node_guid,
        ..Rep::default()
    };
    let counters = pair.a.counters(1).unwrap();
    let unmatched = counters.rx_unmatched.load(Ordering::Relaxed);
    Raw::open().send_to(&pair.a, &late.encode(0x3131));
    wait_until("the late REP is dropped", || {
        counters.rx_unmatched.load(Ordering::Relaxed) > unmatched
    });
    assert_eq!(pair.active.state(), IB_CM_REQ_SENT);
    assert!(
        !pair
            .rec
            .events_of(&pair.active)
            .contains(&IB_CM_REP_RECEIVED)
    );
    pair.finish(&[]);
}

#[test]
fn reuse_after_dreq_error_and_timewait() {
    let pair = Pair::new();
    let first = pair.connect();
    // The DREQ and its one retry are lost: DREQ_ERROR, timewait, IDLE. B
    // still has the old connection, ESTABLISHED.
    set_disconnect_timeout(&pair.active, 20, 1).unwrap();
    pair.loop_a().drop_next(attr::DREQ, 2).unwrap();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREQ_ERROR);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    assert_eq!(first.state(), IB_CM_ESTABLISHED);

    // On a new QP (the old one's QPN is B's stale connection: REJ
    // STALE_CONN, as in the kernel). Under the old comm ID, B would take
    // the REQ for a duplicate of its established connection's.
    let new_qp = ReqParams {
        qp_num: ACTIVE_QPN + 1,
        ..pair.req_params()
    };
    let second = connect_again(&pair.rec, &pair.active, &new_qp, 2);
    assert_eq!(first.state(), IB_CM_ESTABLISHED);
    // The user's disconnect bound stays with the id: a roomier one, so that
    // the DREP this test's thread sends arrives in time.
    set_disconnect_timeout(&pair.active, 10_000, 1).unwrap();
    disconnect_with_private_data(&pair.rec, &pair.active, &second);
    pair.finish(&[&first, &second]);
}

#[test]
fn reuse_after_a_stale_rej_and_timewait() {
    let pair = Pair::new();
    // The REQ is lost; a REJ STALE_CONN for it sends A to timewait.
    pair.loop_a().drop_next(attr::REQ, 1).unwrap();
    send_req(&pair.active, &pair.req_params()).unwrap();
    let stale = Rej {
        local_comm_id: 0x3131_0001,
        remote_comm_id: pair.active.lock().inner.local_id,
        message_rejected: MsgResponse::Req,
        reason: IB_CM_REJ_STALE_CONN as u16,
        ..Rej::default()
    };
    let raw = Raw::open();
    raw.send_to(&pair.a, &stale.encode(0x3131));
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.state, IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);

    let passive = connect_again(&pair.rec, &pair.active, &pair.req_params(), 1);
    disconnect_with_private_data(&pair.rec, &pair.active, &passive);
    pair.finish(&[&passive]);
}

#[test]
fn reuse_after_rej_sent_in_rep_sent_and_timewait() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    // B's user answers the first REQ with a REP, A's user does not answer
    // the REP, and B's user rejects from REP_SENT: B's id enters timewait.
    first_time(&pair.rec, IB_CM_REP_RECEIVED, |_| 0, answer_rtu);
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    let first = pair.rec.nth_new_id(1);
    assert_eq!(first.state(), IB_CM_REP_SENT);
    reject(&first);
    assert_eq!(first.state(), IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&first), IB_CM_TIMEWAIT_EXIT);

    let second = connect_again(&pair.rec, &first, &req_from_b(&pair), 2);
    disconnect_with_private_data(&pair.rec, &first, &second);
    pair.finish(&[&first, &second, &listener_a]);
}

#[test]
fn reuse_after_an_mra_and_a_rej_on_both_sides() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    // B's user asks for more time (an MRA goes out at once, 6.x style), then
    // rejects from MRA_REQ_SENT; A receives both in REQ_SENT / MRA_REQ_RCVD.
    first_time(
        &pair.rec,
        IB_CM_REQ_RECEIVED,
        |id| {
            crate::cm::send_mra(id, 14, None).unwrap();
            reject(id)
        },
        answer_rep,
    );
    // A's user asks for more time for the REP (7.x style) and rejects it
    // from MRA_REP_SENT.
    first_time(
        &pair.rec,
        IB_CM_REP_RECEIVED,
        |id| {
            prepare_mra(id).unwrap();
            reject(id)
        },
        answer_rtu,
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    let first = pair.rec.nth_new_id(1);
    assert_eq!(first.state(), IB_CM_IDLE);

    // A connects again; its REP_RECEIVED now answers with an MRA and a REJ.
    send_req(&pair.active, &pair.req_params()).unwrap();
    let second = pair.rec.nth_new_id(2);
    pair.rec.wait(Some(&second), IB_CM_REJ_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_IDLE);

    let third = connect_again(&pair.rec, &pair.active, &pair.req_params(), 3);
    disconnect_with_private_data(&pair.rec, &pair.active, &third);
    let fourth = connect_again(&pair.rec, &first, &req_from_b(&pair), 4);
    disconnect_with_private_data(&pair.rec, &first, &fourth);
    pair.finish(&[&first, &second, &third, &fourth, &listener_a]);
}

fn sidr_params(pair: &Pair) -> SidrReqParams {
    SidrReqParams {
        path: pair.a.init_path(1, &pair.b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        timeout_ms: 20,
        private_data: Vec::new(),
        max_cm_retries: 1,
    }
}

fn answer_sidr(id: &Arc<CmIdPriv>) -> i32 {
    let p = SidrRepParams {
        qp_num: 0x55,
        status: IB_SIDR_SUCCESS as u8,
        ..SidrRepParams::default()
    };
    send_sidr_rep(id, &p).unwrap();
    0
}

#[test]
fn reuse_after_sidr_rep_received_and_sent() {
    let pair = Pair::new();
    let listener_a = listener_on_a(&pair);
    pair.rec
        .on(IB_CM_SIDR_REQ_RECEIVED, Arc::new(|id, _| answer_sidr(id)));
    send_sidr_req(&pair.active, &sidr_params(&pair)).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    let answered = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(answered.state(), IB_CM_IDLE);

    let second = connect_again(&pair.rec, &pair.active, &pair.req_params(), 1);
    disconnect_with_private_data(&pair.rec, &pair.active, &second);
    let third = connect_again(&pair.rec, &answered, &req_from_b(&pair), 2);
    disconnect_with_private_data(&pair.rec, &answered, &third);
    pair.finish(&[&answered, &second, &third, &listener_a]);
}

#[test]
fn reuse_after_sidr_req_error() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::SIDR_REQ, 2).unwrap();
    send_sidr_req(&pair.active, &sidr_params(&pair)).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REQ_ERROR);

    let passive = connect_again(&pair.rec, &pair.active, &pair.req_params(), 1);
    disconnect_with_private_data(&pair.rec, &pair.active, &passive);
    pair.finish(&[&passive]);
}

#[test]
fn reuse_forgets_the_old_alternate_path_and_lap_state() {
    let pair = Pair::new();
    // The first connection has an alternate path, and its QP migrated to it.
    let with_alt = ReqParams {
        alternate_path: Some(pair.alt_path()),
        ..pair.req_params()
    };
    send_req(&pair.active, &with_alt).unwrap();
    let first = pair.rec.nth_new_id(1);
    pair.rec.wait_nth(&first, IB_CM_RTU_RECEIVED, 1);
    notify(&pair.active, ib_event_type::IB_EVENT_PATH_MIG as i32).unwrap();
    assert_ne!(pair.active.lock().lap_state(), IB_CM_LAP_UNINIT as i32);
    disconnect_with_private_data(&pair.rec, &pair.active, &first);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);

    // The second has none: its QP attributes are those of a first
    // connection (no alternate path at RTR, RTR to RTS rather than the
    // RTS to RTS of a migrated one).
    let second = connect_again(&pair.rec, &pair.active, &pair.req_params(), 2);
    assert_eq!(pair.active.lock().lap_state(), IB_CM_LAP_UNINIT as i32);
    let rtr = init_qp_attr(&pair.active, QPS_RTR).unwrap();
    assert_eq!(rtr.mask & mask::ALT_PATH, 0, "{rtr:?}");
    assert_eq!(rtr.dest_qp_num, PASSIVE_QPN);
    let rts = init_qp_attr(&pair.active, QPS_RTS).unwrap();
    assert_ne!(rts.mask & mask::STATE, 0, "{rts:?}");
    assert_eq!(
        rts.mask & (mask::ALT_PATH | mask::PATH_MIG_STATE),
        0,
        "{rts:?}"
    );
    disconnect_with_private_data(&pair.rec, &pair.active, &second);
    pair.finish(&[&first, &second]);
}
