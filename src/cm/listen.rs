//! `ib_cm_listen()`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::device::Device;
use super::id::{CmIdPriv, Handler};
use super::tables::{addresses, tables};
use super::{forget_unfinalized, new_id};
use crate::abi::ib_cm_state::{IB_CM_IDLE, IB_CM_LISTEN};
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
    let mut l = id.lock();
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
/// handler is `handler_key` (shared, counted: each caller destroys it once),
/// or a new one. `-EINVAL` when another handler listens there already.
///
/// Like the kernel's, such a listener is not findable by comm ID: it never
/// receives a MAD addressed to it.
pub fn insert_listen(
    device: &Arc<Device>,
    handler: Handler,
    handler_key: usize,
    service_id: u64,
) -> CmResult<Arc<CmIdPriv>> {
    let key = (Arc::as_ptr(device) as usize, service_id);
    loop {
        let existing = tables().listen.get(&key).cloned();
        if let Some(cur) = existing {
            let mut l = cur.lock();
            if l.state() != IB_CM_LISTEN || cur.is_destroyed() || l.inner.service_id != service_id {
                continue; // it is going away: look again
            }
            if cur.public.cm_handler.load(Ordering::Relaxed) != handler_key {
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
