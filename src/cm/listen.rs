//! `ib_cm_listen()`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::destroy::{destroy_id, forget_req_locked};
use super::device::Device;
use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Handler};
use super::recv::Received;
use super::sidr::forget_sidr_request;
use super::tables::addresses;
use super::{forget_unfinalized, new_id};
use crate::abi::ib_cm_state::{IB_CM_IDLE, IB_CM_LISTEN, IB_CM_REQ_RCVD, IB_CM_SIDR_REQ_RCVD};
use crate::errno::{CmResult, EBUSY, EINVAL};
use crate::refusal::{Rule, null, refuse, wrong_state};

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
        let rule = "is in the range IB_CM_ASSIGN_SERVICE_ID assigns from";
        return Err(service_id_refused(EINVAL, service_id, rule));
    }
    let mut l = id.lock_live()?;
    if l.state() != IB_CM_IDLE {
        return Err(wrong_state(l.state(), "IDLE"));
    }
    // Through the MAD switch, other processes listen on the device too: it
    // decides (and assigns), before the table lock.
    let switched = id.device.switch_listen(service_id).map_err(|e| match e {
        EBUSY => service_id_refused(e, service_id, "has a listener in another process"),
        e => e,
    })?;
    let mut t = id.device.cm.tables();
    let service_id = match switched {
        Some(service_id) => service_id,
        None if service_id == CM_ASSIGN_SERVICE_ID => {
            let assigned = t.listen_service_id;
            t.listen_service_id += 1;
            assigned
        }
        None => service_id,
    };
    let key = (Arc::as_ptr(&id.device) as usize, service_id);
    if t.listen.contains_key(&key) {
        // Another listener of this process holds it: give back the grant
        // (a round trip to the daemon) without the table lock, which every
        // received MAD takes.
        drop((t, l));
        if switched.is_some() {
            id.device.switch_unlisten(service_id);
        }
        return Err(service_id_refused(EBUSY, service_id, "has a listener"));
    }
    t.listen.insert(key, id.clone());
    drop(t);
    l.set_service_id(service_id);
    l.inner.listen_sharecount = 1;
    l.set_state(IB_CM_LISTEN, "listen");
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
        return Err(null("cm_handler")); // the kernel's WARN_ON(!cm_handler)
    }
    let key = (Arc::as_ptr(device) as usize, service_id);
    loop {
        let existing = device.cm.tables().listen.get(&key).cloned();
        if let Some(cur) = existing {
            let mut l = cur.lock();
            if l.state() != IB_CM_LISTEN || cur.is_destroyed() || l.inner.service_id != service_id {
                continue; // it is going away: look again
            }
            if !shareable(&cur, handler_key) {
                let rule = "has a listener with another handler or a context";
                return Err(service_id_refused(EINVAL, service_id, rule));
            }
            l.inner.listen_sharecount += 1;
            return Ok(cur.clone());
        }
        let id = new_id(device.clone(), handler.clone())?;
        id.public.cm_handler.store(handler_key, Ordering::Release);
        if let Err(e) = device.switch_listen(service_id) {
            forget_unfinalized(&id);
            return Err(e);
        }
        let mut l = id.lock();
        let mut t = device.cm.tables();
        if t.listen.contains_key(&key) {
            // Another caller inserted it first: share theirs, and give
            // back the daemon's grant to this one (it counts them per
            // process), or the service ID stays held after the last user.
            drop((t, l));
            device.switch_unlisten(service_id);
            forget_unfinalized(&id);
            continue;
        }
        t.listen.insert(key, id.clone());
        addresses(id.addr()).insert(id.addr(), id.clone());
        drop(t);
        l.set_service_id(service_id);
        l.inner.listen_sharecount = 1;
        l.set_state(IB_CM_LISTEN, "listen");
        drop(l);
        return Ok(id);
    }
}

/// `errno`, for a rule about `service_id` (shown in hex, host order).
fn service_id_refused(
    errno: crate::errno::Errno,
    service_id: u64,
    rule: &'static str,
) -> crate::errno::Errno {
    refuse(errno, Rule::hex("service_id", service_id, rule))
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
/// SIDR_REQ_RECEIVED) ran is forgotten silently: no REJ (SIDR_REP), no
/// event, out of the remote tables, as `cm_destroy_id` forgets a REQ whose
/// handler returned `-ENOMEM`. The kernel has no such id (its REQ handler
/// runs under the listener's reference, see docs/kernel-differences.md);
/// answering INVALID_SERVICE_ID would be wrong once a new listener took the
/// service ID, so the peer's retransmission decides: it finds the new
/// listener, or gets the answer to a request nobody serves.
pub(super) fn forget_orphan(child: &Arc<CmIdPriv>) {
    {
        let mut l = child.lock();
        match l.state() {
            IB_CM_REQ_RCVD => forget_req_locked(&mut l),
            IB_CM_SIDR_REQ_RCVD => forget_sidr_request(&mut l, "listener gone: request forgotten"),
            // The peer gave up first (a REJ, or a REQ timeout): nothing to say.
            _ => {}
        }
    }
    destroy_id(child, 0);
}

/// How many new ids of a listener may wait for their REQ_RECEIVED (or
/// SIDR_REQ_RECEIVED) to be handled before it takes no more requests. The
/// kernel has no such bound; rdma_cm's ucma has one (`max_backlog`, 1024 by
/// default), whose place a request holds until userspace reads its event.
/// A REQ beyond it is dropped silently, so that the peer's retransmission
/// gets another chance, and a SIDR_REQ answered SIDR_REP REJECT, as ucma's
/// `-ENOMEM` makes `cm_destroy_id` do. So does this; see
/// docs/kernel-differences.md.
pub const LISTEN_BACKLOG: usize = 1024;

/// A new id's place in its listener's backlog: held until its REQ_RECEIVED
/// (SIDR_REQ_RECEIVED) handler has run ([`request_taken`]), or the id is
/// destroyed or forgotten first; dropped with the id in any case, so the
/// count is exact whatever path the id takes.
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

/// The user has taken the new id's request event (its handler ran): room for
/// another request, as ucma gives the place back when the event is read.
pub(super) fn request_taken(id: &CmIdPriv) {
    id.lock().inner.backlog_slot = None;
}

/// A place in `listener`'s backlog for the new id of `work`, a request; or,
/// when the backlog is full, `None`: the request is counted
/// (`rx_listen_overflows`), and not taken. Requests are taken on the worker
/// thread only, so nothing fills the backlog between the check and the take.
pub(super) fn backlog_slot(listener: &Arc<CmIdPriv>, work: &Received) -> Option<BacklogSlot> {
    if listener.backlog.load(Ordering::Acquire) >= LISTEN_BACKLOG {
        work.listen_overflow();
        return None;
    }
    Some(BacklogSlot::take(listener))
}
