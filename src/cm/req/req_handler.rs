//! `cm_req_handler()`: a received REQ matched (a duplicate, a stale
//! connection, a listener), the new id set up from it, its REQ_RECEIVED
//! queued.

use std::sync::Arc;

use super::{av_from_path, path_from_wire, pkey_is_on_port};
use crate::abi::ib_cm_event_type::IB_CM_REQ_RECEIVED;
use crate::abi::ib_cm_rej_reason::*;
use crate::abi::ib_cm_state::*;
use crate::abi::ib_qp_type;
use crate::cm::event::{CmEvent, EventParam, ReqRcvd};
use crate::cm::id::{Av, CmIdPriv, Locked};
use crate::cm::lap::on_roce_port;
use crate::cm::mra::{PeerMsg, auto_mra, format_mra};
use crate::cm::path::{Path, REC_TYPE_IB, av_timeout, convert_to_ms};
use crate::cm::recv::Received;
use crate::cm::rej::{format_rej, issue_rej, send_rej_locked};
use crate::cm::worker::queue_event;
use crate::cm::{create_child_id, dreq, listen};
use crate::wire::req::CM_REQ_PRIVATE_DATA;
use crate::wire::{MsgResponse, Req, TransportType, attr};

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
        let t = work.device.cm.tables();
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
        crate::cm::forget_unfinalized(&new_id);
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
            crate::cm::forget_unfinalized(&new_id);
            return;
        };
        l.inner.alt_av = av_from_path(port, alt);
    }
    l.inner.backlog_slot = Some(slot);
    link_remote(&mut l, &new_id);
    drop(l);
    crate::cm::finalize_id(&new_id);

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
    let mut t = l.id.device.cm.tables();
    let guid = l.inner.remote_ca_guid;
    t.remote_id
        .insert((l.inner.remote_id, guid), Arc::downgrade(id));
    t.remote_qpn
        .insert((l.inner.remote_qpn, guid), Arc::downgrade(id));
    l.inner.remote_id_linked = true;
    l.inner.remote_qpn_linked = true;
    l.inner.has_timewait_info = true;
}
