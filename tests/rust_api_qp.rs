//! QP attributes through the Rust API, as `c-tests/test_init_qp_attr.c`
//! checks them through the C one: typed, present exactly as the mask says.

mod rust_api_support;

use ib_cm::{QpState, Reply, State};
use rust_api_support::*;

const IBV_QP_STATE: u32 = 1 << 0;
const IBV_QP_AV: u32 = 1 << 7;
const IBV_QP_DEST_QPN: u32 = 1 << 20;
const IBV_QP_SQ_PSN: u32 = 1 << 16;
const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;

#[test]
fn qp_attributes_follow_the_connection_and_the_mask() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Default);

    // The active side may go to INIT as soon as its REQ is out, not further.
    let init = pending.qp_attributes(QpState::Init).unwrap();
    assert_eq!(init.state, Some(QpState::Init));
    assert_eq!(init.port_num, Some(1));
    let flags = init.access_flags.unwrap();
    assert_eq!(flags & IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
    assert_eq!(flags & IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_READ);
    assert!(init.address.is_none() && init.sq_psn.is_none());
    assert_einval(
        pending.qp_attributes(QpState::Rtr),
        "in REQ_SENT, needs the peer's REQ or REP received",
    );

    // The passive side, before its REP: RTR toward A's QP.
    let req = incoming.req().clone();
    let rtr = incoming.qp_attributes(QpState::Rtr).unwrap();
    assert_eq!(rtr.dest_qp_num, Some(req.remote_qpn));
    assert_eq!(rtr.max_dest_rd_atomic, Some(req.responder_resources));
    let address = rtr.address.unwrap();
    assert_eq!(
        address.dlid,
        pair.b.path_to(1, pair.a.gid(1, 0).unwrap()).unwrap().dlid()
    );
    assert_eq!(
        rtr.mask & (IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN),
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN
    );
    assert_eq!(rtr.mask & IBV_QP_SQ_PSN, 0);
    assert!(rtr.sq_psn.is_none());

    let reply = Reply {
        starting_psn: 0x00123456,
        ..Reply::new(next_qpn())
    };
    let qpn_b = reply.qp_num;
    let sent = incoming.reply(reply).unwrap();
    // As in the kernel: the REP's PSN is what B receives from, the REQ's
    // what it sends from (and the other way round on A).
    let rtr = sent.qp_attributes(QpState::Rtr).unwrap();
    assert_eq!(rtr.rq_psn, Some(0x00123456));
    let rts = sent.qp_attributes(QpState::Rts).unwrap();
    assert_eq!(rts.sq_psn, Some(req.starting_psn));
    assert_eq!(rts.mask & IBV_QP_SQ_PSN, IBV_QP_SQ_PSN);

    // The active side, between REP and RTU: RTR toward B's QP.
    let replied = pending.wait_reply().unwrap();
    let rtr = replied.qp_attributes(QpState::Rtr).unwrap();
    assert_eq!(rtr.dest_qp_num, Some(qpn_b));
    assert_eq!(rtr.rq_psn, Some(req.starting_psn));
    let rts = replied.qp_attributes(QpState::Rts).unwrap();
    assert_eq!(rts.sq_psn, Some(0x00123456));
    assert_eq!(rts.retry_cnt, Some(7));
    assert!(rts.timeout.is_some());
    assert!(rts.alternate.is_none() && !rts.rearm_path_migration);

    let mut a = replied.confirm(&[]).unwrap();
    let mut b = sent.wait_established().unwrap();
    assert!(a.qp_attributes(QpState::Rts).is_ok());

    // After timewait there is no connection to describe.
    a.send_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut b), ib_cm::Event::DreqReceived { .. }));
    b.reply_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut a), ib_cm::Event::DrepReceived { .. }));
    assert_closes(&mut a);
    assert_eq!(a.state(), State::Idle);
    assert_einval(
        a.qp_attributes(QpState::Init),
        "in IDLE, needs REQ_SENT to ESTABLISHED",
    );
}
