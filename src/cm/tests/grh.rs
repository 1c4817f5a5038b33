//! A routed InfiniBand path (hop limit above 1: the peer is behind an IB
//! router) on both sides: the active side's MADs and QP carry a GRH from the
//! path (`ib_init_ah_attr_from_path`), the passive side answers with a GRH
//! to the address the REQ came from (`cm_init_av_for_response`) and reports
//! the path as `cm_req_handler` formats it.

use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::cm::init_qp_attr;
use crate::cm::qp_attr::QPS_RTR;

const HOP_LIMIT: u8 = 64;
const TRAFFIC_CLASS: u8 = 0x28;
const FLOW_LABEL: u32 = 0x12345;

fn routed(pair: &Pair) -> ReqParams {
    let p = pair.req_params();
    ReqParams {
        primary_path: Path {
            hop_limit: HOP_LIMIT,
            traffic_class: TRAFFIC_CLASS,
            flow_label: FLOW_LABEL,
            ..p.primary_path
        },
        ..p
    }
}

#[test]
fn a_routed_path_connects_with_a_grh_both_ways() {
    let pair = Pair::new();
    let seen_path = Arc::new(Mutex::new(None));
    let keep = seen_path.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |id, ev| {
            if let EventParam::ReqRcvd(r) = &ev.param {
                *keep.lock() = Some(r.primary_path);
            }
            super::super::send_rep(id, &rep_params(&[])).unwrap();
            0
        }),
    );
    let req = routed(&pair);
    super::super::send_req(&pair.active, &req).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    let (a_gid, b_gid) = (pair.a.ports[0].gids[0].gid, pair.b.ports[0].gids[0].gid);

    // The active side: the path's GRH, LID-routed to the path's DLID.
    let ah = init_qp_attr(&pair.active, QPS_RTR).unwrap().ah_attr;
    assert!(ah.is_global);
    assert_eq!(ah.dgid, b_gid);
    assert_eq!(ah.dlid, req.primary_path.dlid);
    assert_eq!(
        (ah.hop_limit, ah.traffic_class, ah.flow_label, ah.sgid_index),
        (HOP_LIMIT, TRAFFIC_CLASS, FLOW_LABEL, 0)
    );

    // The passive side answers with a GRH to the REQ's sender, and reports
    // the sender's LID as the path's DLID where the REQ has the permissive
    // LID (cm_format_path_lid_from_req: wc->slid).
    let path = seen_path.lock().expect("REQ_RECEIVED's path");
    assert_eq!(path.dlid, pair.a.ports[0].lid);
    assert_eq!(path.dgid, a_gid);
    assert_eq!(
        (path.traffic_class, path.flow_label),
        (TRAFFIC_CLASS, FLOW_LABEL)
    );
    let ah = init_qp_attr(&passive, QPS_RTR).unwrap().ah_attr;
    assert!(ah.is_global, "the answers go back with a GRH");
    assert_eq!(ah.dgid, a_gid);
    assert_eq!(ah.dlid, pair.a.ports[0].lid);
    assert_eq!(
        (ah.hop_limit, ah.traffic_class, ah.flow_label),
        (HOP_LIMIT, TRAFFIC_CLASS, FLOW_LABEL)
    );
    pair.finish(&[&passive]);
}
