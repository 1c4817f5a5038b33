//! `ib_cm_listen()`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::destroy::destroy_id;
use super::device::Device;
use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Handler};
use super::recv::Received;
use super::rej::send_rej_locked;
use super::sidr::answer_sidr_req_locked;
use super::tables::{addresses, tables};
use super::{forget_unfinalized, new_id};
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_INVALID_SERVICE_ID;
use crate::abi::ib_cm_sidr_status::IB_SIDR_UNSUPPORTED;
use crate::abi::ib_cm_state::{
    self, IB_CM_IDLE, IB_CM_LISTEN, IB_CM_MRA_REQ_SENT, IB_CM_REQ_RCVD, IB_CM_SIDR_REQ_RCVD,
};
use crate::errno::{CmResult, EBUSY, EINVAL};

/// `IB_SERVICE_ID_AGN_MASK` (host order).
const SERVICE_ID_AGN_MASK: u64 = 0xff00_0000_0000_0000;
/// `IB_CM_ASSIGN_SERVICE_ID` (host order): "pick one for me".
pub const CM_ASSIGN_SERVICE_ID: u64 = 0x0200_0000_0000_0000;

/// `ib_cm_listen()`: `id` receives REQs for `service_id` (host order) on its
/// device, exact match only.
pub fn listen(id: &Arc<CmIdPriv>, service_id: u64) -> CmResult {
    if service_id & SERVICE_ID_AGN_MASK == CM_ASSIGN_SERVICE_ID
        && service_id != CM_ASSIGN_SERVICE_ID
    {
        return Err(EINVAL);
    }
    let mut l = id.lock_live()?;
    if l.state() != IB_CM_IDLE {
        return Err(EINVAL);
    }
    let mut t = tables();
    let service_id = if service_id == CM_ASSIGN_SERVICE_ID {
        let assigned = t.listen_service_id;
        t.listen_service_id += 1;
        assigned
    } else {
        service_id
    };
    let key = (Arc::as_ptr(&id.device) as usize, service_id);
    if t.listen.contains_key(&key) {
        return Err(EBUSY);
    }
    t.listen.insert(key, id.clone());
    drop(t);
    l.set_service_id(service_id);
    l.inner.listen_sharecount = 1;
    l.set_state(IB_CM_LISTEN);
    Ok(())
}

/// `ib_cm_insert_listen()`: the listener for `service_id` on `device` whose
/// handler is `handler_key` and that has no context (shared, counted: each
/// caller destroys it once), or a new one. `-EINVAL` for a NULL handler (0),
/// and, as `cm_insert_listen`, when the listener there has another handler
/// or a context: that one is its owner's alone.
///
/// Like the kernel's, such a listener is not findable by comm ID: it never
/// receives a MAD addressed to it.
pub fn insert_listen(
    device: &Arc<Device>,
    handler: Handler,
    handler_key: usize,
    service_id: u64,
) -> CmResult<Arc<CmIdPriv>> {
    if handler_key == 0 {
        return Err(EINVAL); // the kernel's WARN_ON(!cm_handler)
    }
    let key = (Arc::as_ptr(device) as usize, service_id);
    loop {
        let existing = tables().listen.get(&key).cloned();
        if let Some(cur) = existing {
            let mut l = cur.lock();
            if l.state() != IB_CM_LISTEN || cur.is_destroyed() || l.inner.service_id != service_id {
                continue; // it is going away: look again
            }
            if !shareable(&cur, handler_key) {
                return Err(EINVAL);
            }
            l.inner.listen_sharecount += 1;
            return Ok(cur.clone());
        }
        let id = new_id(device.clone(), handler.clone())?;
        id.public.cm_handler.store(handler_key, Ordering::Release);
        let mut l = id.lock();
        let mut t = tables();
        if t.listen.contains_key(&key) {
            drop((t, l));
            forget_unfinalized(&id);
            continue;
        }
        t.listen.insert(key, id.clone());
        addresses(id.addr()).insert(id.addr(), id.clone());
        drop(t);
        l.set_service_id(service_id);
        l.inner.listen_sharecount = 1;
        l.set_state(IB_CM_LISTEN);
        drop(l);
        return Ok(id);
    }
}

/// Whether `listener` may be shared with a caller of `ib_cm_insert_listen`
/// whose handler is `handler_key`: only with the same handler, and no
/// context (a context belongs to the user of ib_cm_listen, who frees it
/// after destroying the listener while it would go on listening).
fn shareable(listener: &CmIdPriv, handler_key: usize) -> bool {
    listener.public.cm_handler.load(Ordering::Relaxed) == handler_key
        && listener.public.context.load(Ordering::Relaxed) == 0
}

/// The listener that made the new id an event is for (REQ_RECEIVED,
/// SIDR_REQ_RECEIVED).
pub(super) fn listener_of(event: &CmEvent) -> Option<&Arc<CmIdPriv>> {
    match &event.param {
        EventParam::ReqRcvd(r) => Some(&r.listen_id),
        EventParam::SidrReqRcvd(r) => Some(&r.listen_id),
        _ => None,
    }
}

/// A new id whose listener was destroyed before its REQ_RECEIVED (or
/// SIDR_REQ_RECEIVED) ran: the peer gets what a request that matches no
/// listener gets (`cm_req_handler`: REJ with INVALID_SERVICE_ID;
/// `cm_sidr_req_handler`: SIDR_REP with UNSUPPORTED), and the id goes without
/// an event, since its user never learnt of it.
pub(super) fn refuse_orphan(child: &Arc<CmIdPriv>) {
    {
        let mut l = child.lock();
        match l.state() {
            IB_CM_REQ_RCVD => {
                let reason = IB_CM_REJ_INVALID_SERVICE_ID as u16;
                let _ = send_rej_locked(&mut l, reason, &[], &[]);
            }
            IB_CM_SIDR_REQ_RCVD => {
                answer_sidr_req_locked(&mut l, IB_SIDR_UNSUPPORTED);
            }
            // The peer gave up first (a REJ, or a REQ timeout): nothing to say.
            _ => {}
        }
    }
    destroy_id(child, 0);
}

/// How many new ids a listener holds unanswered (REQ_RCVD, MRA_REQ_SENT,
/// SIDR_REQ_RCVD: its user has not sent a REP, REJ or SIDR_REP, nor
/// destroyed them) before it takes no more requests. The kernel has no such
/// bound; rdma_cm's ucma has one (`max_backlog`, 1024 by default), and drops
/// a request beyond it silently, so that the peer's retransmission gets
/// another chance. So does this; see docs/kernel-differences.md.
pub const LISTEN_BACKLOG: usize = 1024;

/// A new id's place in its listener's backlog: held while the id waits for
/// its user's answer (dropped by `Locked::set_state` when it leaves those
/// states, or with the id), so the count is exact whatever path the id takes.
pub struct BacklogSlot(Weak<CmIdPriv>);

impl BacklogSlot {
    fn take(listener: &Arc<CmIdPriv>) -> Self {
        listener.backlog.fetch_add(1, Ordering::AcqRel);
        Self(Arc::downgrade(listener))
    }
}

impl Drop for BacklogSlot {
    fn drop(&mut self) {
        if let Some(listener) = self.0.upgrade() {
            listener.backlog.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// True while an id in `state` waits for its user's answer to a request.
pub(super) fn waits_for_answer(state: ib_cm_state) -> bool {
    matches!(
        state,
        IB_CM_REQ_RCVD | IB_CM_MRA_REQ_SENT | IB_CM_SIDR_REQ_RCVD
    )
}

/// A place in `listener`'s backlog for the new id of `work`, a request; or,
/// when the backlog is full, `None`: the request is counted
/// (`rx_listen_overflows`) and dropped. Requests are taken on the worker
/// thread only, so nothing fills the backlog between the check and the take.
pub(super) fn backlog_slot(listener: &Arc<CmIdPriv>, work: &Received) -> Option<BacklogSlot> {
    if listener.backlog.load(Ordering::Acquire) >= LISTEN_BACKLOG {
        work.listen_overflow();
        return None;
    }
    Some(BacklogSlot::take(listener))
}
