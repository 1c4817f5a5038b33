//! `ib_cm_listen()`.

use std::sync::Arc;

use super::id::CmIdPriv;
use super::tables::tables;
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
