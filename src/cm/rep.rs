//! REP: `ib_send_cm_rep()`, `cm_rep_handler()` and `cm_dup_rep_handler()`.

use std::sync::Arc;

use super::event::{CmEvent, EventParam, RepRcvd};
use super::id::CmIdPriv;
use super::mra::{PeerMsg, auto_mra, format_mra};
use super::path::{ack_timeout, iba_time};
use super::recv::Received;
use super::rej::issue_rej;
use super::send::{cancel_msg, send_tracked};
use super::timewait::remove_remote;
use super::worker::queue_event;
use super::{dreq, pd_array};
use crate::abi::data_size;
use crate::abi::ib_cm_event_type::IB_CM_REP_RECEIVED;
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_STALE_CONN;
use crate::abi::ib_cm_state::*;
use crate::abi::ib_qp_type::{IB_QPT_XRC_INI, IB_QPT_XRC_TGT};
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::rep::CM_REP_PRIVATE_DATA;
use crate::wire::{MsgResponse, Rep, Rtu, attr};

/// `struct ib_cm_rep_param`, copied out of C memory.
#[derive(Debug, Clone, Default)]
pub struct RepParams {
    pub qp_num: u32,
    pub starting_psn: u32,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub failover_accepted: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub ece: (u32, u32),
}

/// `ib_send_cm_rep()`.
pub fn send_rep(id: &Arc<CmIdPriv>, p: &RepParams) -> CmResult {
    let (len, max) = (p.private_data.len(), data_size::REP_PRIVATE_DATA_SIZE);
    if len > max {
        return Err(above("private_data_len", len, max));
    }
    let mut l = id.lock_live()?;
    if !matches!(l.state(), IB_CM_REQ_RCVD | IB_CM_MRA_REQ_SENT) {
        return Err(wrong_state(l.state(), "REQ_RCVD or MRA_REQ_SENT"));
    }
    let qp_num = p.qp_num & 0x00ff_ffff;
    let rep = Rep {
        attr_mod: p.ece.1,
        local_comm_id: l.inner.local_id,
        remote_comm_id: l.inner.remote_id,
        vendor_id: p.ece.0 & 0x00ff_ffff,
        starting_psn: p.starting_psn & 0x00ff_ffff,
        responder_resources: p.responder_resources,
        target_ack_delay: iba_time(id.device.ack_delay),
        failover_accepted: p.failover_accepted & 0x3,
        rnr_retry_count: p.rnr_retry_count & 0x7,
        local_ca_guid: id.device.node_guid,
        private_data: pd_array(&p.private_data),
        ..qp_fields(l.inner.qp_type, qp_num, p)
    };
    let mad = rep.encode(l.inner.tid);
    let answering = l.state();
    if let Err(e) = send_tracked(&mut l, mad, IB_CM_REP_SENT, "REP sent") {
        l.set_state(answering, "REP not sent");
        return Err(e);
    }
    l.inner.initiator_depth = p.initiator_depth;
    l.inner.responder_resources = p.responder_resources;
    l.inner.rq_psn = rep.starting_psn;
    l.inner.local_qpn = qp_num;
    // Unlike the RTU, DREP and MRA, the REP's private data is not kept: a
    // DREP re-sent from timewait never carries it (`ib_send_cm_rep`).
    Ok(())
}

/// The REP's QP fields (`cm_format_rep`): an XRC target's QPN goes in the
/// Local EE Context Number, with SRQ set and no initiator depth or flow
/// control (an XRC target has no send queue); every other QP type has them
/// in the Local QPN and its own fields.
fn qp_fields(qp_type: i32, qp_num: u32, p: &RepParams) -> Rep {
    if qp_type == IB_QPT_XRC_TGT as i32 {
        Rep {
            local_eecn: qp_num,
            srq: true,
            ..Rep::default()
        }
    } else {
        Rep {
            local_qpn: qp_num,
            initiator_depth: p.initiator_depth,
            end_to_end_flow_control: p.flow_control,
            srq: p.srq,
            ..Rep::default()
        }
    }
}

/// The peer's QPN in a REP (`cm_rep_get_qpn`): an XRC initiator's peer is an
/// XRC target, whose QPN is in the Local EE Context Number.
fn rep_qpn(rep: &Rep, qp_type: i32) -> u32 {
    if qp_type == IB_QPT_XRC_INI as i32 {
        rep.local_eecn
    } else {
        rep.local_qpn
    }
}

/// `cm_dup_rep_handler()`: our RTU was lost, so the peer resent its REP.
fn dup_rep_handler(work: &Received, rep: &Rep) {
    let Some(id) = work.acquire_id(rep.remote_comm_id, rep.local_comm_id) else {
        work.unmatched();
        return;
    };
    work.duplicate(attr::REP);
    let l = id.lock();
    match l.state() {
        IB_CM_ESTABLISHED => {
            let rtu = Rtu {
                local_comm_id: l.inner.local_id,
                remote_comm_id: l.inner.remote_id,
                private_data: pd_array(&l.inner.private_data),
            };
            work.reply_to_retry(&rtu.encode(l.inner.tid));
        }
        IB_CM_MRA_REP_SENT => {
            work.reply_to_retry(&format_mra(&l, MsgResponse::Rep));
        }
        // The user has not sent its RTU yet: as a duplicate REQ in REQ_RCVD
        // (beyond the kernel, which drops it).
        IB_CM_REP_RCVD => auto_mra(work, &l, MsgResponse::Rep),
        _ => {}
    }
}

/// `cm_rep_handler()`: the active side learns the peer's comm ID and QP.
pub fn rep_handler(work: Received) {
    let Ok(rep) = Rep::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(rep.remote_comm_id, 0) else {
        dup_rep_handler(&work, &rep);
        return;
    };
    let mut l = id.lock();
    if !matches!(l.state(), IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD) {
        work.unmatched();
        return;
    }
    let guid = rep.local_ca_guid;
    let remote_qpn = rep_qpn(&rep, l.inner.qp_type);
    l.inner.remote_ca_guid = guid;
    l.inner.remote_id = rep.local_comm_id;
    l.inner.remote_qpn = remote_qpn;
    {
        let mut t = work.device.cm.tables();
        if t.remote_id.contains_key(&(rep.local_comm_id, guid)) {
            l.inner.remote_id = 0;
            work.unmatched();
            return; // the peer's comm ID is in use by another connection
        }
        t.remote_id
            .insert((rep.local_comm_id, guid), Arc::downgrade(&id));
        l.inner.remote_id_linked = true;
        let stale = t
            .remote_qpn
            .get(&(remote_qpn, guid))
            .and_then(std::sync::Weak::upgrade);
        if let Some(stale) = stale {
            drop(t);
            remove_remote(&mut l);
            l.inner.remote_id = 0;
            drop(l);
            issue_rej(&work, IB_CM_REJ_STALE_CONN as u16, MsgResponse::Rep);
            let _ = dreq::send_dreq(&stale, None);
            return;
        }
        t.remote_qpn.insert((remote_qpn, guid), Arc::downgrade(&id));
        l.inner.remote_qpn_linked = true;
    }
    l.set_remote_id(rep.local_comm_id);
    l.set_state(IB_CM_REP_RCVD, "REP received");
    l.inner.peer_msg = Some(PeerMsg::of(&work));
    l.inner.initiator_depth = rep.responder_resources;
    l.inner.responder_resources = rep.initiator_depth;
    l.inner.sq_psn = rep.starting_psn;
    l.inner.rnr_retry_count = rep.rnr_retry_count;
    l.inner.target_ack_delay = rep.target_ack_delay;
    l.inner.av.timeout = ack_timeout(rep.target_ack_delay, l.inner.av.timeout.saturating_sub(1));
    // The kernel does the same to `alt_av` whether or not there is an
    // alternate path; its `timeout - 1` of an unset 0 wraps (to 255), which
    // gives 31. That only shows after `IB_EVENT_PATH_MIG` without one.
    let alt_timeout = l.inner.alt_av.timeout.wrapping_sub(1);
    l.inner.alt_av.timeout = ack_timeout(rep.target_ack_delay, alt_timeout);
    cancel_msg(&mut l);
    drop(l);
    let event = RepRcvd {
        remote_ca_guid: guid,
        remote_qkey: rep.local_qkey,
        remote_qpn,
        starting_psn: rep.starting_psn,
        responder_resources: rep.initiator_depth,
        initiator_depth: rep.responder_resources,
        target_ack_delay: rep.target_ack_delay,
        failover_accepted: rep.failover_accepted,
        flow_control: rep.end_to_end_flow_control,
        rnr_retry_count: rep.rnr_retry_count,
        srq: rep.srq,
        ece: (rep.vendor_id, rep.attr_mod),
    };
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_REP_RECEIVED,
            EventParam::RepRcvd(event),
            work.mad,
            CM_REP_PRIVATE_DATA.mad_range(),
        ),
    );
}
