//! REQ: `ib_send_cm_req()` and `cm_req_handler()`.

use std::sync::Arc;

use super::device::{Device, Port};
use super::event::{CmEvent, EventParam, ReqRcvd};
use super::id::{Av, CmIdPriv, Locked};
use super::lap::on_roce_port;
use super::mra::{PeerMsg, auto_mra, format_mra};
use super::path::{
    LID_PERMISSIVE, Path, REC_TYPE_IB, ack_timeout, av_timeout, convert_to_ms, iba_time,
    req_timeout_ms,
};
use super::recv::Received;
use super::rej::{format_rej, issue_rej, send_rej_locked};
use super::send::{form_tid, send_tracked};
use super::tables::tables;
use super::worker::queue_event;
use super::{create_child_id, dreq, listen, pd_array};
use crate::abi::ib_cm_event_type::IB_CM_REQ_RECEIVED;
use crate::abi::ib_cm_rej_reason::*;
use crate::abi::ib_cm_state::*;
use crate::abi::{data_size, ib_qp_type};
use crate::errno::{CmResult, ENOENT};
use crate::refusal::{Rule, above, invalid, refuse, wrong_state};
use crate::transport::MadAddr;
use crate::wire::req::CM_REQ_PRIVATE_DATA;
use crate::wire::{MsgResponse, Req, ReqPath, TransportType, attr};

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

/// Whether `pkey` is in `port`'s P_Key table, as `ib_find_cached_pkey()`
/// compares: without the membership bit (a port whose table could not be
/// read has its one P_Key).
pub(super) fn pkey_is_on_port(port: &Port, pkey: u16) -> bool {
    if port.pkeys.is_empty() {
        return port.pkey & 0x7fff == pkey & 0x7fff;
    }
    port.pkey_index(pkey).is_some()
}

/// The port a path we send on leaves from (`cm_init_av_by_path`): the one
/// with its source GID (`-EINVAL` if none), which must have its P_Key
/// (`ib_find_cached_pkey`: `-ENOENT`).
pub(super) fn port_of_path<'d>(device: &'d Device, path: &Path) -> CmResult<&'d Port> {
    let port = device.port_by_gid(&path.sgid).ok_or_else(|| {
        let rule = "is not a GID of the device";
        invalid(Rule::gid("path sgid", path.sgid, rule))
    })?;
    if !pkey_is_on_port(port, path.pkey) {
        let rule = "is not in the port's P_Key table";
        return Err(refuse(ENOENT, Rule::hex("path pkey", path.pkey, rule)));
    }
    Ok(port)
}

/// The address of a path (`cm_init_av_by_path`): RoCE and routed paths need
/// a GRH, sent from the path's source GID. A RoCE address has no LID (the
/// kernel's `sa_path_get_dlid()` is 0 for RoCE records), which is also why
/// an alternate path never reaches a RoCE QP (`ib_cm_init_qp_attr`). On
/// InfiniBand the MADs go LID-routed with the path's SL and the P_Key index
/// of its partition (index 0 if the table lacks it, where the kernel's
/// `ib_find_cached_pkey` fails); a GRH as soon as the hop limit is not 0
/// (`ib_init_ah_attr_from_path`: `rec->hop_limit > 0`), even where the REQ
/// still calls the path subnet local (hop limit 1).
pub(super) fn av_from_path(port: &Port, path: &Path) -> Av {
    Av {
        port_num: port.port_num,
        addr: MadAddr {
            dlid: if port.is_roce() { 0 } else { path.dlid },
            sl: path.sl,
            pkey_index: port.pkey_index(path.pkey).unwrap_or(0),
            grh: port.is_roce() || path.hop_limit > 0,
            dgid: path.dgid,
            sgid_index: port.gid_index(&path.sgid).unwrap_or(0),
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            flow_label: path.flow_label,
        },
        timeout: av_timeout(path.packet_life_time),
        rate: path.rate,
    }
}

/// The REQ's description of one path (`cm_format_req`).
fn format_req_path(path: &Path, ack_delay: u8) -> ReqPath {
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
    super::renew_identity(&mut l)?;
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

/// `cm_req_has_alt_path()`: a REQ carries an alternate path when its
/// alternate local LID is set (OPA GIDs aside).
fn req_has_alt_path(req: &Req) -> bool {
    req.alternate_path.local_lid != 0
}

/// The passive side's view of the REQ's alternate path
/// (`cm_format_paths_from_req`): the primary's partition, MTU and record
/// type, the peer's side as destination.
fn alt_path_from_req(req: &Req, primary: &Path) -> Path {
    path_from_wire(&req.alternate_path, primary)
}

/// A path of a REQ or LAP as the receiver sees it (the message's "local" side
/// is the peer), with what the message does not carry taken from `base`.
pub(super) fn path_from_wire(ap: &ReqPath, base: &Path) -> Path {
    Path {
        dgid: ap.local_gid,
        sgid: ap.remote_gid,
        dlid: ap.local_lid,
        slid: ap.remote_lid,
        flow_label: ap.flow_label,
        hop_limit: ap.hop_limit,
        traffic_class: ap.traffic_class,
        rate: ap.packet_rate,
        sl: ap.sl,
        packet_life_time: ap.local_ack_timeout - u8::from(ap.local_ack_timeout > 0),
        ..*base
    }
}

/// What `cm_req_handler` takes from the REQ's arrival on InfiniBand: the
/// DLID is the LID it came from (`cm_format_path_lid_from_req`: `wc->slid`,
/// the router's for a routed path, whose REQ has the permissive LID), and
/// the hop limit that of the answer's GRH (0 without one).
fn path_on_arrival(path: Path, work: &Received) -> Path {
    if on_roce_port(work) {
        return path;
    }
    Path {
        dlid: work.addr.dlid,
        hop_limit: if work.addr.grh {
            work.addr.hop_limit
        } else {
            0
        },
        ..path
    }
}

/// The passive side's view of the REQ's primary path (`cm_format_paths_from_req`).
fn path_from_req(req: &Req) -> Path {
    let pp = &req.primary_path;
    Path {
        dgid: pp.local_gid,
        sgid: pp.remote_gid,
        dlid: pp.local_lid,
        slid: pp.remote_lid,
        service_id: req.service_id,
        flow_label: pp.flow_label,
        hop_limit: pp.hop_limit,
        traffic_class: pp.traffic_class,
        reversible: 1,
        numb_path: 1,
        pkey: req.pkey,
        sl: pp.sl,
        mtu: req.path_mtu,
        rate: pp.packet_rate,
        packet_life_time: pp.local_ack_timeout - u8::from(pp.local_ack_timeout > 0),
        rec_type: REC_TYPE_IB,
    }
}

fn qp_type_from_req(req: &Req) -> ib_qp_type {
    match req.transport_service_type {
        TransportType::Rc => ib_qp_type::IB_QPT_RC,
        TransportType::Uc => ib_qp_type::IB_QPT_UC,
        TransportType::Xrc => ib_qp_type::IB_QPT_XRC_TGT,
    }
}

/// `cm_dup_req_handler()`: a REQ for a connection we already have.
fn dup_req_handler(work: &Received, cur: &Arc<CmIdPriv>) {
    work.duplicate(attr::REQ);
    let l = cur.lock();
    match l.state() {
        // The user asked for more time (ib_prepare_cm_mra): say so.
        IB_CM_MRA_REQ_SENT => {
            work.reply_to_retry(&format_mra(&l, MsgResponse::Req));
        }
        IB_CM_TIMEWAIT => {
            let rej = format_rej(&l, IB_CM_REJ_STALE_CONN as u16, &[], &[], IB_CM_TIMEWAIT);
            work.reply_to_retry(&rej);
        }
        // The user has not answered yet: the kernel drops it, and a user
        // slower than the peer's retries lets the peer time out; an
        // automatic MRA makes it wait instead (beyond the kernel).
        IB_CM_REQ_RCVD => auto_mra(work, &l, MsgResponse::Req),
        // REP_SENT: the REP's own retransmission answers it.
        _ => {}
    }
}

/// `cm_req_handler()`: a new connection request.
pub fn req_handler(work: Received) {
    let Ok(req) = Req::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let guid = req.local_ca_guid;
    let listener = {
        let t = tables();
        // cm_match_req(): a duplicate, a stale connection, or no listener.
        if let Some(cur) = t.find_remote_id(guid, req.local_comm_id) {
            drop(t);
            dup_req_handler(&work, &cur);
            return;
        }
        if let Some(stale) = t
            .remote_qpn
            .get(&(req.local_qpn, guid))
            .and_then(std::sync::Weak::upgrade)
        {
            drop(t);
            issue_rej(&work, IB_CM_REJ_STALE_CONN as u16, MsgResponse::Req);
            let _ = dreq::send_dreq(&stale, None);
            return;
        }
        let key = (Arc::as_ptr(&work.device) as usize, req.service_id);
        match t.listen.get(&key) {
            Some(listener) => listener.clone(),
            None => {
                drop(t);
                issue_rej(&work, IB_CM_REJ_INVALID_SERVICE_ID as u16, MsgResponse::Req);
                return;
            }
        }
    };

    let Some(slot) = listen::backlog_slot(&listener, &work) else {
        return;
    };
    let primary_path = path_on_arrival(path_from_req(&req), &work);
    let Ok(new_id) = create_child_id(&listener) else {
        return; // the device is closing
    };
    let mut l = new_id.lock();
    l.inherit_user_fields(&listener);
    l.inner.used = true;
    l.set_service_id(req.service_id);
    l.set_remote_id(req.local_comm_id);
    l.inner.remote_ca_guid = guid;
    l.inner.remote_qpn = req.local_qpn;
    l.inner.tid = work.tid;
    l.inner.timeout_ms = convert_to_ms(req.local_cm_response_timeout);
    l.inner.max_cm_retries = req.max_cm_retries;
    l.inner.peer_response_timeout = req.remote_cm_response_timeout;
    l.inner.peer_msg = Some(PeerMsg::of(&work));
    l.inner.initiator_depth = req.responder_resources;
    l.inner.responder_resources = req.initiator_depth;
    l.inner.path_mtu = req.path_mtu;
    l.inner.pkey = req.pkey;
    l.inner.sq_psn = req.starting_psn;
    l.inner.retry_count = req.retry_count;
    l.inner.rnr_retry_count = req.rnr_retry_count;
    l.inner.srq = req.srq;
    l.inner.qp_type = qp_type_from_req(&req) as i32;
    l.inner.av = Av {
        port_num: work.port,
        addr: work.addr,
        timeout: av_timeout(primary_path.packet_life_time),
        rate: primary_path.rate,
    };
    // Once the id knows its peer and port (for the log line).
    l.set_state(IB_CM_REQ_RCVD, "REQ received");
    if !primary_gid_is_ours(&work, &primary_path) || !pkey_is_ours(&work, req.pkey) {
        reject_invalid_gid(&work, &mut l);
        drop(l);
        super::forget_unfinalized(&new_id);
        return;
    }
    let alternate_path = req_has_alt_path(&req).then(|| alt_path_from_req(&req, &primary_path));
    if let Some(alt) = &alternate_path {
        // `cm_init_av_by_path(&work->path[1])`: the alternate path must leave
        // from one of our GIDs, or the REQ is rejected (ARI: our primary GID).
        let Some(port) = work.device.port_by_gid(&alt.sgid) else {
            let reason = IB_CM_REJ_INVALID_ALT_GID as u16;
            let _ = send_rej_locked(&mut l, reason, &primary_path.sgid, &[]);
            drop(l);
            super::forget_unfinalized(&new_id);
            return;
        };
        l.inner.alt_av = av_from_path(port, alt);
    }
    l.inner.backlog_slot = Some(slot);
    link_remote(&mut l, &new_id);
    drop(l);
    super::finalize_id(&new_id);

    let event = ReqRcvd {
        listen_id: listener,
        // cm_format_req_event(): the packet's P_Key, not the REQ's field.
        bth_pkey: work.bth_pkey().unwrap_or(req.pkey),
        port: work.port,
        primary_path,
        alternate_path,
        remote_ca_guid: guid,
        remote_qkey: req.local_qkey,
        remote_qpn: req.local_qpn,
        qp_type: qp_type_from_req(&req),
        starting_psn: req.starting_psn,
        responder_resources: req.initiator_depth,
        initiator_depth: req.responder_resources,
        local_cm_response_timeout: req.remote_cm_response_timeout,
        flow_control: req.end_to_end_flow_control,
        remote_cm_response_timeout: req.local_cm_response_timeout,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: req.srq,
        ece: (req.vendor_id, req.attr_mod),
    };
    let pd = CM_REQ_PRIVATE_DATA.mad_range();
    queue_event(
        &new_id,
        CmEvent::with_private_data(
            IB_CM_REQ_RECEIVED,
            EventParam::ReqRcvd(Box::new(event)),
            work.mad,
            pd,
        ),
    );
}

/// `cm_init_av_by_path(&work->path[0])` for a REQ that came without a GRH
/// finds the port by the primary path's source GID (the REQ's remote port
/// GID, our side): it must be one of this device's GIDs. With a GRH the
/// kernel takes the port the REQ arrived on.
fn primary_gid_is_ours(work: &Received, primary_path: &Path) -> bool {
    work.addr.grh || work.device.port_by_gid(&primary_path.sgid).is_some()
}

/// `cm_init_av_by_path(&work->path[0])` then looks the REQ's P_Key up in
/// the port's table (`ib_find_cached_pkey`); a REQ in a partition the
/// receiving port is not in fails there.
fn pkey_is_ours(work: &Received, pkey: u16) -> bool {
    work.device
        .port(work.port)
        .is_ok_and(|port| pkey_is_on_port(port, pkey))
}

/// The REQ's primary GID or P_Key is not ours: REJ INVALID_GID with the receiving
/// port's GID 0 as ARI (without an ARI if the port has none), from the new
/// id, which then goes away.
fn reject_invalid_gid(work: &Received, l: &mut Locked) {
    let gid0 = work.device.port(work.port).ok().and_then(|p| p.gid(0));
    let ari = gid0.as_ref().map_or(&[][..], |gid| &gid[..]);
    let _ = send_rej_locked(l, IB_CM_REJ_INVALID_GID as u16, ari, &[]);
}

/// Enters a passive connection in the remote-id and remote-QPN tables.
fn link_remote(l: &mut Locked, id: &Arc<CmIdPriv>) {
    let mut t = tables();
    let guid = l.inner.remote_ca_guid;
    t.remote_id
        .insert((l.inner.remote_id, guid), Arc::downgrade(id));
    t.remote_qpn
        .insert((l.inner.remote_qpn, guid), Arc::downgrade(id));
    l.inner.remote_id_linked = true;
    l.inner.remote_qpn_linked = true;
    l.inner.has_timewait_info = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::sysfs::{GidEntry, GidType, LinkLayer};
    use crate::wire::Req;

    fn ib_gid(port_guid: u64) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&port_guid.to_be_bytes());
        gid
    }

    /// Port 1 of Hca1 in c-tests/ibfabric/net.ibcm, with a second partition.
    fn hca1_port() -> Port {
        Port {
            port_num: 1,
            lid: 2,
            pkey: 0xffff,
            pkeys: vec![0xffff, 0x0001, 0x8001],
            sm_lid: 1,
            sm_sl: 0,
            link_layer: LinkLayer::InfiniBand,
            mtu: 5,
            gids: vec![GidEntry {
                index: 0,
                gid: ib_gid(0x10_0001),
                gid_type: GidType::Ib,
            }],
        }
    }

    /// The path OpenSM's SA gives from Hca1 (LID 2) to Hca2 (LID 7) there
    /// (`saquery -p`: mtu 0x84, rate 0x83, pkt_life 0x92), on SL 5.
    fn hca1_to_hca2() -> Path {
        Path {
            sgid: ib_gid(0x10_0001),
            dgid: ib_gid(0x10_0004),
            slid: 2,
            dlid: 7,
            pkey: 0x8001,
            sl: 5,
            mtu: 4,
            rate: 3,
            packet_life_time: 18,
            reversible: 1,
            rec_type: REC_TYPE_IB,
            ..Path::default()
        }
    }

    #[test]
    fn an_infiniband_path_is_lid_routed_without_grh_in_its_partition() {
        let av = av_from_path(&hca1_port(), &hca1_to_hca2());
        assert_eq!(av.addr.dlid, 7);
        assert_eq!(av.addr.sl, 5);
        assert!(!av.addr.grh, "no GRH inside the subnet");
        assert_eq!(av.addr.pkey_index, 2, "the full member of partition 1");
        let limited = Path {
            pkey: 0x0001,
            ..hca1_to_hca2()
        };
        assert_eq!(av_from_path(&hca1_port(), &limited).addr.pkey_index, 2);
    }

    /// Bytes 0x4c..0x78 of a REQ (IBA table 106: primary local/remote LID,
    /// GIDs, flow label, rate, traffic class, hop limit, SL, subnet local,
    /// local ACK timeout) as the kernel's `cm_format_req` writes them for
    /// an IB path inside the subnet.
    const GOLDEN_IB_PRIMARY_PATH: [u8; 44] = [
        0x00, 0x02, 0x00, 0x07, // local LID 2, remote LID 7
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x01, // local GID
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x04, // remote GID
        0x00, 0x00, 0x00, 0x03, // flow label 0, packet rate 3 (10 Gb/s)
        0x00, // traffic class
        0x00, // hop limit 0
        0x58, // SL 5, subnet local
        0x98, // local ACK timeout 19: cm_ack_timeout(15, 18)
    ];

    /// Hca1's port with a second GID (index 1) in a global subnet prefix, as
    /// a port behind an IB router has.
    fn routed_port() -> Port {
        let mut port = hca1_port();
        port.gids.push(GidEntry {
            index: 1,
            gid: routed_gid(0x10_0001),
            gid_type: GidType::Ib,
        });
        port
    }

    fn routed_gid(port_guid: u64) -> [u8; 16] {
        let mut gid = ib_gid(port_guid);
        gid[..8].copy_from_slice(&[0xfe, 0xc0, 0, 0, 0, 0, 0, 0x02]);
        gid
    }

    /// A path through an IB router, as an SA gives it: DLID the router's
    /// (LID 12), hop limit 64, a DGID in another subnet, a flow label and a
    /// traffic class.
    fn routed_path() -> Path {
        Path {
            sgid: routed_gid(0x10_0001),
            dgid: [
                0xfe, 0xc0, 0, 0, 0, 0, 0, 0x09, 0, 0, 0, 0, 0, 0x20, 0, 0x05,
            ],
            dlid: 12,
            hop_limit: 64,
            traffic_class: 0x28,
            flow_label: 0x12345,
            ..hca1_to_hca2()
        }
    }

    #[test]
    fn a_routed_path_is_addressed_with_a_grh() {
        let av = av_from_path(&routed_port(), &routed_path());
        let want = MadAddr {
            dlid: 12, // the router's LID: the GRH carries the rest of the way
            sl: 5,
            pkey_index: 2,
            grh: true,
            dgid: routed_path().dgid,
            sgid_index: 1, // the index of the path's SGID in the GID table
            hop_limit: 64,
            traffic_class: 0x28,
            flow_label: 0x12345,
        };
        assert_eq!(av.addr, want);
    }

    #[test]
    fn a_path_with_hop_limit_one_gets_a_grh_as_in_the_kernel() {
        // ib_init_ah_attr_from_path: a GRH for any hop limit above 0; the
        // REQ still says "subnet local" (cm_format_req: hop_limit <= 1).
        let one = Path {
            hop_limit: 1,
            ..hca1_to_hca2()
        };
        let av = av_from_path(&hca1_port(), &one);
        assert!(av.addr.grh);
        assert_eq!(
            (av.addr.dlid, av.addr.hop_limit, av.addr.sgid_index),
            (7, 1, 0)
        );
        assert!(format_req_path(&one, 15).subnet_local);
        assert!(!av_from_path(&hca1_port(), &hca1_to_hca2()).addr.grh);
    }

    /// The same bytes for the routed path: both LIDs permissive (the
    /// kernel's "work-around until there's a way to obtain remote LID
    /// info"), the flow label above the rate, the traffic class, hop limit
    /// 64, SL 5 and subnet local 0.
    const GOLDEN_ROUTED_PRIMARY_PATH: [u8; 44] = [
        0xff, 0xff, 0xff, 0xff, // local and remote LID: permissive
        0xfe, 0xc0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x01, // local GID
        0xfe, 0xc0, 0, 0, 0, 0, 0, 0x09, 0, 0, 0, 0, 0x00, 0x20, 0x00, 0x05, // remote GID
        0x12, 0x34, 0x50, 0x03, // flow label 0x12345 (20 bits), packet rate 3
        0x28, // traffic class
        0x40, // hop limit 64
        0x50, // SL 5, not subnet local
        0x98, // local ACK timeout 19
    ];

    #[test]
    fn a_routed_path_formats_the_req_as_the_kernel() {
        let req = Req {
            primary_path: format_req_path(&routed_path(), 15),
            ..Req::default()
        };
        let mad = req.encode(1);
        assert_eq!(mad[0x4c..0x78], GOLDEN_ROUTED_PRIMARY_PATH);
    }

    #[test]
    fn an_infiniband_path_formats_the_req_as_the_kernel() {
        let req = Req {
            primary_path: format_req_path(&hca1_to_hca2(), 15),
            ..Req::default()
        };
        let mad = req.encode(1);
        assert_eq!(mad[0x4c..0x78], GOLDEN_IB_PRIMARY_PATH);
    }
}
