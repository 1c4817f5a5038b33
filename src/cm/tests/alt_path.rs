//! Alternate paths from the REQ on both sides (`ib_send_cm_req`,
//! `cm_req_handler`), what `ib_cm_init_qp_attr` makes of them, and
//! `ib_cm_notify(IB_EVENT_PATH_MIG)` (`cm_migrate`).

use std::sync::Arc;

use super::*;
use crate::abi::ib_cm_event_type::*;
use crate::abi::ib_cm_lap_state::*;
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_INVALID_ALT_GID;
use crate::abi::ib_event_type::{IB_EVENT_COMM_EST, IB_EVENT_PATH_MIG};
use crate::cm::counters::attr_index;
use crate::cm::path::{REC_TYPE_IB, ack_timeout};
use crate::cm::qp_attr::{MIG_REARM, QPS_RTR, QPS_RTS, mask};
use crate::cm::{init_qp_attr, notify, send_drep, send_dreq, send_req};
use crate::errno::EINVAL;
use crate::transport::loopback::LoopIdentity;
use crate::wire::attr;

const PATH_MIG: i32 = IB_EVENT_PATH_MIG as i32;

fn lap_state(id: &Arc<CmIdPriv>) -> i32 {
    id.lock().lap_state()
}

/// Connects A to B with `pair.alt_path()` in the REQ; returns the passive id.
fn connect_with_alt(pair: &Pair) -> Arc<CmIdPriv> {
    let p = ReqParams {
        alternate_path: Some(pair.alt_path()),
        ..pair.req_params()
    };
    send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    passive
}

fn answer_dreqs(pair: &Pair) {
    pair.rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(|id, _| {
            send_drep(id, None).unwrap();
            0
        }),
    );
}

#[test]
fn cm_req_handler_alternate_path_reaches_the_req_event_and_alt_av() {
    let pair = Pair::new();
    let passive = connect_with_alt(&pair);
    let (a, b) = (&pair.a.ports[0], &pair.b.ports[0]);
    let alt = pair
        .rec
        .wait(None, IB_CM_REQ_RECEIVED)
        .alternate_path
        .expect("REQ_RECEIVED carries the alternate path");
    // The passive side's view: the peer is the destination.
    assert_eq!((alt.dgid, alt.sgid), (a.gids[0].gid, b.gids[0].gid));
    assert_eq!((alt.dlid, alt.slid), (a.lid, b.lid));
    assert_eq!((alt.sl, alt.flow_label), (1, 0x777));
    // The REQ carries the ACK timeout; the kernel takes one off for the path.
    let ack = ack_timeout(pair.a.ack_delay, 3);
    assert_eq!(alt.packet_life_time, ack - 1);
    assert_eq!((alt.pkey, alt.mtu, alt.reversible), (0xffff, 5, 1));
    assert_eq!((alt.service_id, alt.rec_type), (SERVICE_ID, REC_TYPE_IB));

    let rtr = init_qp_attr(&passive, QPS_RTR).unwrap();
    assert_ne!(rtr.mask & mask::ALT_PATH, 0);
    assert_eq!((rtr.alt_ah_attr.dlid, rtr.alt_ah_attr.sl), (a.lid, 1));
    assert_eq!(rtr.alt_ah_attr.flow_label, 0x777);
    assert_eq!(rtr.alt_ah_attr.dgid, a.gids[0].gid);
    assert_eq!((rtr.alt_port_num, rtr.alt_pkey_index), (1, 0));
    assert_eq!(rtr.alt_timeout, ack); // packet lifetime + 1
    let rts = init_qp_attr(&passive, QPS_RTS).unwrap();
    assert_ne!(rts.mask & mask::PATH_MIG_STATE, 0);
    assert_eq!(rts.path_mig_state, MIG_REARM);
    assert_eq!(rts.mask & mask::ALT_PATH, 0);
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_init_qp_attr_alternate_path_adds_alt_path_at_rtr_and_rearms_at_rts() {
    let pair = Pair::new();
    let passive = connect_with_alt(&pair);
    let b = &pair.b.ports[0];
    let rtr = init_qp_attr(&pair.active, QPS_RTR).unwrap();
    let want = mask::STATE
        | mask::AV
        | mask::PATH_MTU
        | mask::DEST_QPN
        | mask::RQ_PSN
        | mask::MAX_DEST_RD_ATOMIC
        | mask::MIN_RNR_TIMER
        | mask::ALT_PATH;
    assert_eq!(rtr.mask, want);
    assert_eq!(rtr.ah_attr.sl, 0); // the primary is unchanged
    assert_eq!((rtr.alt_ah_attr.dlid, rtr.alt_ah_attr.sl), (b.lid, 1));
    assert_eq!(rtr.alt_ah_attr.dgid, b.gids[0].gid);
    assert_eq!(rtr.alt_ah_attr.port_num, 1);
    // packet lifetime 3 + 1, then stretched by the REP's target ACK delay as
    // the kernel's cm_rep_handler does for both addresses.
    assert_eq!(rtr.alt_timeout, ack_timeout(pair.b.ack_delay, 3));
    assert_eq!(rtr.alt_port_num, 1);

    let rts = init_qp_attr(&pair.active, QPS_RTS).unwrap();
    let want = mask::STATE
        | mask::SQ_PSN
        | mask::RETRY_CNT
        | mask::RNR_RETRY
        | mask::MAX_QP_RD_ATOMIC
        | mask::TIMEOUT
        | mask::PATH_MIG_STATE;
    assert_eq!(rts.mask, want);
    assert_eq!(rts.path_mig_state, MIG_REARM);
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_notify_path_mig_swaps_in_alternate_path() {
    let pair = Pair::new();
    let passive = connect_with_alt(&pair);
    let alt = init_qp_attr(&pair.active, QPS_RTR).unwrap().alt_ah_attr;
    assert_eq!(lap_state(&pair.active), IB_CM_LAP_UNINIT as i32);

    assert_eq!(notify(&pair.active, PATH_MIG), Ok(()));
    assert_eq!(lap_state(&pair.active), IB_CM_LAP_IDLE as i32);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    // The alternate path is now the primary, and stays the alternate.
    let rtr = init_qp_attr(&pair.active, QPS_RTR).unwrap();
    assert_eq!(rtr.ah_attr, alt);
    assert_eq!(rtr.alt_ah_attr, alt);
    // With lap_state no longer UNINIT, RTS is RTS-to-RTS: the alternate path
    // re-armed, and nothing else.
    let rts = init_qp_attr(&pair.active, QPS_RTS).unwrap();
    assert_eq!(rts.mask, mask::ALT_PATH | mask::PATH_MIG_STATE);
    assert_eq!((rts.alt_ah_attr, rts.path_mig_state), (alt, MIG_REARM));
    // IDLE may migrate again.
    assert_eq!(notify(&pair.active, PATH_MIG), Ok(()));

    // The CM's own MADs now take the alternate path: the disconnect works.
    answer_dreqs(&pair);
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(pair.active.lock().inner.av.addr.sl, 1);
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_notify_path_mig_not_established_is_einval() {
    let pair = Pair::new();
    assert_eq!(notify(&pair.active, PATH_MIG), Err(EINVAL)); // IDLE
    assert_eq!(notify(&pair.listener, PATH_MIG), Err(EINVAL)); // LISTEN
    pair.loop_a().drop_next(attr::REQ, 1).unwrap();
    let p = ReqParams {
        alternate_path: Some(pair.alt_path()),
        ..pair.req_params()
    };
    send_req(&pair.active, &p).unwrap();
    assert_eq!(notify(&pair.active, PATH_MIG), Err(EINVAL)); // REQ_SENT
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    // DREQ_SENT (nobody answers the DREQ yet), then DREQ_RCVD on the peer.
    send_dreq(&pair.active, None).unwrap();
    assert_eq!(notify(&pair.active, PATH_MIG), Err(EINVAL));
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(notify(&passive, PATH_MIG), Err(EINVAL));
    send_drep(&passive, None).unwrap();
    assert_eq!(notify(&passive, PATH_MIG), Err(EINVAL)); // TIMEWAIT
    for id in [&pair.active, &passive] {
        assert_eq!(lap_state(id), IB_CM_LAP_UNINIT as i32);
    }
    // Other QP events than COMM_EST and PATH_MIG.
    assert_eq!(
        notify(&pair.active, IB_EVENT_COMM_EST as i32 + 1),
        Err(EINVAL)
    );
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_notify_path_mig_without_alternate_path_leaves_no_address() {
    let pair = Pair::new();
    let passive = pair.connect();
    // Nothing checks that an alternate path exists (as in the kernel)...
    assert_eq!(notify(&passive, PATH_MIG), Ok(()));
    assert_eq!(lap_state(&passive), IB_CM_LAP_IDLE as i32);
    // ...so the connection's MADs have nowhere to go: the DREQ cannot be
    // sent, and the id enters timewait (timeout 0 on the passive side).
    assert_eq!(send_dreq(&passive, None), Err(EINVAL));
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    let tx = pair.b.counters(1).unwrap().snapshot().tx_msgs;
    assert_eq!(tx[attr_index(attr::DREQ).unwrap()], 0);
    assert_eq!(pair.rec.count(IB_CM_DREQ_RECEIVED), 0);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn cm_req_handler_alternate_gid_not_ours_rejects_invalid_alt_gid() {
    let pair = Pair::new();
    let nowhere = LoopIdentity::from_name("loop4000").unwrap();
    let alt = Path {
        dgid: nowhere.gid,
        dlid: nowhere.lid,
        ..pair.alt_path()
    };
    let p = ReqParams {
        alternate_path: Some(alt),
        ..pair.req_params()
    };
    send_req(&pair.active, &p).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_INVALID_ALT_GID as u16));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 0);
    assert_eq!(pair.b.id_count(), 1); // the listener only
    pair.finish(&[]);
}

#[test]
fn ib_send_cm_req_alternate_path_from_foreign_gid_is_einval() {
    let pair = Pair::new();
    let alt = Path {
        sgid: pair.b.ports[0].gids[0].gid, // not a GID of A
        ..pair.alt_path()
    };
    let p = ReqParams {
        alternate_path: Some(alt),
        ..pair.req_params()
    };
    assert_eq!(send_req(&pair.active, &p), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(pair.loop_a().sent(attr::REQ), 0);
    pair.finish(&[]);
}
