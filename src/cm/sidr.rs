//! SIDR, service ID resolution for UD QPs: `ib_send_cm_sidr_req()`,
//! `cm_sidr_req_handler()`, `ib_send_cm_sidr_rep()`, `cm_sidr_rep_handler()`.

use std::sync::Arc;

use super::event::{CmEvent, EventParam, SidrRepRcvd, SidrReqRcvd};
use super::id::{Av, CmIdPriv, Locked};
use super::path::Path;
use super::recv::Received;
use super::req::{av_from_path, port_of_path};
use super::send::{cancel_msg, form_tid, send_tracked, send_untracked};
use super::worker::queue_event;
use super::{create_child_id, listen, new_id, pd_array};
use crate::abi::data_size;
use crate::abi::ib_cm_event_type::{IB_CM_SIDR_REP_RECEIVED, IB_CM_SIDR_REQ_RECEIVED};
use crate::abi::ib_cm_sidr_status::{self, IB_SIDR_REJECT, IB_SIDR_UNSUPPORTED};
use crate::abi::ib_cm_state::*;
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::sidr_rep::{CM_SIDR_REP_ADDITIONAL_INFORMATION, CM_SIDR_REP_PRIVATE_DATA};
use crate::wire::sidr_req::CM_SIDR_REQ_PRIVATE_DATA;
use crate::wire::{SidrRep, SidrReq, attr};

/// `struct ib_cm_sidr_req_param`, copied out of C memory.
#[derive(Debug, Clone, Default)]
pub struct SidrReqParams {
    pub path: Path,
    pub service_id: u64,
    pub timeout_ms: u32,
    pub private_data: Vec<u8>,
    pub max_cm_retries: u8,
}

/// `struct ib_cm_sidr_rep_param`, copied out of C memory.
#[derive(Debug, Clone, Default)]
pub struct SidrRepParams {
    pub qp_num: u32,
    pub qkey: u32,
    pub status: u8,
    pub info: Vec<u8>,
    pub private_data: Vec<u8>,
    pub ece: (u32, u32),
}

/// `ib_send_cm_sidr_req()`: asks the peer which QP serves `service_id`.
/// Retransmitted every `timeout_ms` up to `max_cm_retries` times.
pub fn send_sidr_req(id: &Arc<CmIdPriv>, p: &SidrReqParams) -> CmResult {
    let (len, max) = (p.private_data.len(), data_size::SIDR_REQ_PRIVATE_DATA_SIZE);
    if len > max {
        return Err(above("private_data_len", len, max));
    }
    let port = port_of_path(&id.device, &p.path)?;
    let mut l = id.lock_live()?;
    if l.state() != IB_CM_IDLE {
        return Err(wrong_state(l.state(), "IDLE"));
    }
    super::renew_identity(&mut l)?;
    l.inner.av = av_from_path(port, &p.path);
    l.set_service_id(p.service_id);
    l.inner.timeout_ms = p.timeout_ms;
    l.inner.max_cm_retries = p.max_cm_retries;
    let req = SidrReq {
        request_id: l.inner.local_id,
        pkey: p.path.pkey,
        service_id: p.service_id,
        private_data: pd_array(&p.private_data),
    };
    let mad = req.encode(form_tid(id.device.hi_tid, l.inner.local_id));
    if let Err(e) = send_tracked(&mut l, mad, IB_CM_SIDR_REQ_SENT, "SIDR_REQ sent") {
        l.set_state(IB_CM_IDLE, "SIDR_REQ not sent");
        return Err(e);
    }
    l.inner.used = true;
    Ok(())
}

/// The key of a SIDR request in the duplicate table: its ID and its sender.
fn sidr_key(request_id: u32, av: &Av) -> (u32, [u8; 16], u16) {
    (request_id, av.addr.dgid, av.addr.dlid)
}

/// `cm_send_sidr_rep_locked()`: answers, then the id is IDLE and forgets the
/// request. If the MAD cannot be posted nothing changes: the id goes back to
/// SIDR_REQ_RCVD, so the caller can try again. (IDLE comes first, before
/// the answer may reach the peer, for the log's order.)
fn send_sidr_rep_locked(l: &mut Locked, p: &SidrRepParams) -> CmResult {
    let rep = SidrRep {
        request_id: l.inner.remote_id,
        status: p.status,
        info_length: p.info.len() as u8,
        vendor_id: SidrRep::vendor_id_as_linux_sends(p.ece.0),
        qpn: p.qp_num & 0x00ff_ffff,
        service_id: l.inner.service_id,
        qkey: p.qkey,
        info: pd_array(&p.info),
        private_data: pd_array(&p.private_data),
    };
    l.set_state(IB_CM_IDLE, "SIDR_REP sent");
    if let Err(e) = send_untracked(l, &rep.encode(l.inner.tid, p.ece.1)) {
        l.set_state(IB_CM_SIDR_REQ_RCVD, "SIDR_REP not sent");
        return Err(e);
    }
    forget_sidr_request(l, "SIDR_REP sent");
    Ok(())
}

/// The request is answered (or its id destroyed): IDLE, and out of the
/// table of requests in progress (`cm.remote_sidr_table`).
pub(super) fn forget_sidr_request(l: &mut Locked, why: &'static str) {
    l.set_state(IB_CM_IDLE, why);
    if l.inner.remote_id_linked {
        let key = sidr_key(l.inner.remote_id, &l.inner.av);
        l.id.device.cm.tables().remote_sidr.remove(&key);
        l.inner.remote_id_linked = false;
    }
}

/// `ib_send_cm_sidr_rep()`.
pub fn send_sidr_rep(id: &Arc<CmIdPriv>, p: &SidrRepParams) -> CmResult {
    if p.info.len() > data_size::SIDR_REP_INFO_LENGTH {
        return Err(above(
            "info_length",
            p.info.len(),
            data_size::SIDR_REP_INFO_LENGTH,
        ));
    }
    let (len, max) = (p.private_data.len(), data_size::SIDR_REP_PRIVATE_DATA_SIZE);
    if len > max {
        return Err(above("private_data_len", len, max));
    }
    let mut l = id.lock_live()?;
    if l.state() != IB_CM_SIDR_REQ_RCVD {
        return Err(wrong_state(l.state(), "SIDR_REQ_RCVD"));
    }
    send_sidr_rep_locked(&mut l, p)
}

/// What destroying an id in SIDR_REQ_RCVD sends: a SIDR_REP that rejects.
pub fn reject_sidr_req_locked(l: &mut Locked) {
    answer_sidr_req_locked(l, IB_SIDR_REJECT);
}

/// A SIDR_REP with `status` and nothing else; the request is forgotten
/// even if it cannot be sent, as `cm_reject_sidr_req()` in `cm_destroy_id`
/// forgets it. Callers that answer with another status first fall back to
/// that REJECT on failure themselves ([`refuse_sidr_req`]).
pub fn answer_sidr_req_locked(l: &mut Locked, status: ib_cm_sidr_status) {
    let _ = send_status_locked(l, status);
    forget_sidr_request(l, "SIDR_REP sent (or lost)");
}

/// `ib_send_cm_sidr_rep()` with `status` and nothing else.
fn send_status_locked(l: &mut Locked, status: ib_cm_sidr_status) -> CmResult {
    let p = SidrRepParams {
        status: status as u8,
        ..SidrRepParams::default()
    };
    send_sidr_rep_locked(l, &p)
}

/// Answers a SIDR_REQ nobody takes with `status` from a short-lived id, as
/// `cm_sidr_req_handler` does. If a SIDR_REP of another status cannot be
/// sent the kernel's id is still SIDR_REQ_RCVD when it is destroyed, and
/// `cm_destroy_id` tries a SIDR_REP REJECT: so does this.
fn refuse_sidr_req(work: &Received, req: &SidrReq, av: Av, status: ib_cm_sidr_status) {
    let Ok(id) = new_id(work.device.clone(), Arc::new(|_, _| 0)) else {
        return; // the device is closing
    };
    let mut l = id.lock();
    l.set_remote_id(req.request_id);
    l.set_service_id(req.service_id);
    l.inner.tid = work.tid;
    l.inner.av = av;
    if send_status_locked(&mut l, status).is_err() && !matches!(status, IB_SIDR_REJECT) {
        reject_sidr_req_locked(&mut l);
    }
    drop(l);
    super::forget_unfinalized(&id);
}

/// `cm_sidr_req_handler()`.
pub fn sidr_req_handler(work: Received) {
    let Ok(req) = SidrReq::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let av = Av {
        port_num: work.port,
        addr: work.addr,
        timeout: 0,
        rate: 0,
    };
    let key = sidr_key(req.request_id, &av);
    let listener = {
        let t = work.device.cm.tables();
        if t.remote_sidr.contains_key(&key) {
            drop(t);
            work.duplicate(attr::SIDR_REQ);
            return;
        }
        t.listen
            .get(&(Arc::as_ptr(&work.device) as usize, req.service_id))
            .cloned()
    };
    let Some(listener) = listener else {
        refuse_sidr_req(&work, &req, av, IB_SIDR_UNSUPPORTED);
        return;
    };
    let Some(slot) = listen::backlog_slot(&listener, &work) else {
        // Beyond the backlog rdma_cm's handler returns -ENOMEM, and
        // `cm_destroy_id` of the SIDR_REQ_RCVD id rejects the request.
        refuse_sidr_req(&work, &req, av, IB_SIDR_REJECT);
        return;
    };
    let Ok(new_id) = create_child_id(&listener) else {
        return; // the device is closing
    };
    let mut l = new_id.lock();
    l.inherit_user_fields(&listener);
    l.inner.used = true;
    l.set_state(IB_CM_SIDR_REQ_RCVD, "SIDR_REQ received");
    l.inner.backlog_slot = Some(slot);
    l.set_remote_id(req.request_id);
    l.set_service_id(req.service_id);
    l.inner.tid = work.tid;
    l.inner.av = av;
    work.device
        .cm
        .tables()
        .remote_sidr
        .insert(key, Arc::downgrade(&new_id));
    l.inner.remote_id_linked = true;
    drop(l);
    super::finalize_id(&new_id);
    let event = SidrReqRcvd {
        listen_id: listener,
        service_id: req.service_id,
        port: work.port,
        bth_pkey: work.bth_pkey().unwrap_or(req.pkey),
        pkey: req.pkey,
    };
    queue_event(
        &new_id,
        CmEvent::with_private_data(
            IB_CM_SIDR_REQ_RECEIVED,
            EventParam::SidrReqRcvd(event),
            work.mad,
            CM_SIDR_REQ_PRIVATE_DATA.mad_range(),
        ),
    );
}

/// `cm_sidr_rep_handler()`.
pub fn sidr_rep_handler(work: Received) {
    let Ok(rep) = SidrRep::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(rep.request_id, 0) else {
        work.unmatched();
        return;
    };
    let mut l = id.lock();
    if l.state() != IB_CM_SIDR_REQ_SENT {
        work.unmatched();
        return;
    }
    l.set_state(IB_CM_IDLE, "SIDR_REP received");
    cancel_msg(&mut l);
    drop(l);
    let info_start = CM_SIDR_REP_ADDITIONAL_INFORMATION.mad_range().start;
    let event = SidrRepRcvd {
        status: rep.status,
        qkey: rep.qkey,
        qpn: rep.qpn,
        info: info_start..info_start + usize::from(rep.info_length),
    };
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_SIDR_REP_RECEIVED,
            EventParam::SidrRepRcvd(event),
            work.mad,
            CM_SIDR_REP_PRIVATE_DATA.mad_range(),
        ),
    );
}
