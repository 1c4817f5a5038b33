//! `ib_send_cm_req()`: the request's parameters checked, the id set up, the
//! REQ formatted (`cm_format_req`) and sent.

use std::sync::Arc;

use super::{av_from_path, port_of_path};
use crate::abi::ib_cm_state::*;
use crate::abi::{data_size, ib_qp_type};
use crate::cm::id::CmIdPriv;
use crate::cm::path::{LID_PERMISSIVE, Path, ack_timeout, iba_time, req_timeout_ms};
use crate::cm::pd_array;
use crate::cm::send::{form_tid, send_tracked};
use crate::errno::CmResult;
use crate::refusal::{Rule, above, invalid, wrong_state};
use crate::wire::{Req, ReqPath, TransportType};

/// `IB_QPT_RC`, `IB_QPT_UC`, `IB_QPT_XRC_INI` as C passes them.
const QPT_RC: i32 = ib_qp_type::IB_QPT_RC as i32;
const QPT_UC: i32 = ib_qp_type::IB_QPT_UC as i32;
const QPT_XRC_INI: i32 = ib_qp_type::IB_QPT_XRC_INI as i32;

/// `struct ib_cm_req_param`, checked and copied out of C memory.
#[derive(Debug, Clone, Default)]
pub struct ReqParams {
    pub primary_path: Path,
    pub alternate_path: Option<Path>,
    pub service_id: u64,
    pub qp_num: u32,
    pub qp_type: i32,
    pub starting_psn: u32,
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub remote_cm_response_timeout: u8,
    pub flow_control: bool,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub ece: (u32, u32),
}

/// `cm_validate_req_param()` (a missing primary path is caught by `ffi`).
fn validate_req_param(p: &ReqParams) -> CmResult {
    if !matches!(p.qp_type, QPT_RC | QPT_UC | QPT_XRC_INI) {
        let rule = "is not RC, UC or XRC_INI";
        return Err(invalid(Rule::value("qp_type", p.qp_type, rule)));
    }
    let (len, max) = (p.private_data.len(), data_size::REQ_PRIVATE_DATA_SIZE);
    if len > max {
        return Err(above("private_data_len", len, max));
    }
    if let Some(alt) = &p.alternate_path
        && (alt.pkey != p.primary_path.pkey || alt.mtu != p.primary_path.mtu)
    {
        let rule = "alternate_path has another pkey or mtu than primary_path";
        return Err(invalid(Rule::Text(rule)));
    }
    Ok(())
}

/// The REQ's description of one path (`cm_format_req`).
pub(super) fn format_req_path(path: &Path, ack_delay: u8) -> ReqPath {
    let subnet_local = path.hop_limit <= 1;
    let (local_lid, remote_lid) = if subnet_local {
        (path.slid, path.dlid)
    } else {
        // The kernel's work-around until there is a way to learn remote LIDs.
        (LID_PERMISSIVE, LID_PERMISSIVE)
    };
    ReqPath {
        local_lid,
        remote_lid,
        local_gid: path.sgid,
        remote_gid: path.dgid,
        flow_label: path.flow_label,
        packet_rate: path.rate,
        traffic_class: path.traffic_class,
        hop_limit: path.hop_limit,
        sl: path.sl,
        subnet_local,
        local_ack_timeout: ack_timeout(ack_delay, path.packet_life_time),
    }
}

fn transport_type(qp_type: i32) -> (TransportType, u8) {
    match qp_type {
        QPT_UC => (TransportType::Uc, 0),
        QPT_XRC_INI => (TransportType::Xrc, 1),
        _ => (TransportType::Rc, 0),
    }
}

/// `ib_send_cm_req()`.
pub fn send_req(id: &Arc<CmIdPriv>, p: &ReqParams) -> CmResult {
    validate_req_param(p)?;
    let port = port_of_path(&id.device, &p.primary_path)?;
    // `cm_init_av_by_path(alternate_path)`: its source GID must be ours too.
    let alt_av = match &p.alternate_path {
        Some(alt) => Some(av_from_path(port_of_path(&id.device, alt)?, alt)),
        None => None,
    };
    let mut l = id.lock_live()?;
    if l.state() != IB_CM_IDLE || l.inner.has_timewait_info {
        return Err(wrong_state(l.state(), "IDLE, out of timewait"));
    }
    crate::cm::renew_identity(&mut l)?;
    let device = &id.device;
    l.inner.av = av_from_path(port, &p.primary_path);
    // Without an alternate path the kernel leaves `alt_av` as it was.
    if let Some(alt_av) = alt_av {
        l.inner.alt_av = alt_av;
    }
    l.set_service_id(p.service_id);
    l.inner.timeout_ms = req_timeout_ms(
        p.primary_path.packet_life_time,
        p.remote_cm_response_timeout,
    );
    l.inner.max_cm_retries = p.max_cm_retries;
    // The peer resends its REP after our local response timeout.
    l.inner.peer_response_timeout = iba_time(p.local_cm_response_timeout);
    l.inner.initiator_depth = p.initiator_depth;
    l.inner.responder_resources = p.responder_resources;
    l.inner.retry_count = p.retry_count;
    l.inner.path_mtu = p.primary_path.mtu;
    l.inner.pkey = p.primary_path.pkey;
    l.inner.qp_type = p.qp_type;

    let (transport, extended) = transport_type(p.qp_type);
    let xrc = p.qp_type == QPT_XRC_INI;
    let req = Req {
        attr_mod: p.ece.1,
        local_comm_id: l.inner.local_id,
        vendor_id: p.ece.0 & 0x00ff_ffff,
        service_id: p.service_id,
        local_ca_guid: device.node_guid,
        local_qpn: p.qp_num & 0x00ff_ffff,
        responder_resources: if xrc { 0 } else { p.responder_resources },
        initiator_depth: p.initiator_depth,
        // Above 31: 31, the value the interval above counts, not the low bits.
        remote_cm_response_timeout: iba_time(p.remote_cm_response_timeout),
        transport_service_type: transport,
        end_to_end_flow_control: p.flow_control,
        starting_psn: p.starting_psn & 0x00ff_ffff,
        local_cm_response_timeout: iba_time(p.local_cm_response_timeout),
        retry_count: if xrc { 0 } else { p.retry_count & 0x7 },
        pkey: p.primary_path.pkey,
        path_mtu: p.primary_path.mtu & 0xf,
        rnr_retry_count: if xrc { 0 } else { p.rnr_retry_count & 0x7 },
        max_cm_retries: p.max_cm_retries & 0xf,
        srq: !xrc && p.srq,
        extended_transport_type: extended,
        primary_path: format_req_path(&p.primary_path, device.ack_delay),
        alternate_path: p
            .alternate_path
            .as_ref()
            .map(|alt| format_req_path(alt, device.ack_delay))
            .unwrap_or_default(),
        private_data: pd_array(&p.private_data),
        ..Req::default()
    };
    let tid = form_tid(device.hi_tid, l.inner.local_id);
    l.inner.tid = tid;
    l.inner.local_qpn = req.local_qpn;
    l.inner.rq_psn = req.starting_psn;
    // The id commits to the connection (timewait info) only once the REQ
    // is out and tracked: a failed send, or a panic on the way, leaves it
    // IDLE and able to send a REQ again.
    if let Err(e) = send_tracked(&mut l, req.encode(tid), IB_CM_REQ_SENT, "REQ sent") {
        l.set_state(IB_CM_IDLE, "REQ not sent");
        return Err(e);
    }
    l.inner.has_timewait_info = true;
    l.inner.used = true;
    Ok(())
}
