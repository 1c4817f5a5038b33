//! `ib_cm_notify()`: the user tells the CM what its QP saw.

use std::sync::Arc;

use super::event::CmEvent;
use super::id::CmIdPriv;
use super::send::cancel_msg;
use super::worker::queue_event;
use crate::abi::ib_cm_event_type::IB_CM_USER_ESTABLISHED;
use crate::abi::ib_cm_state::*;
use crate::abi::ib_event_type;
use crate::errno::{CmResult, EINVAL, EISCONN};

/// `ib_cm_notify()`. Only `IB_EVENT_COMM_EST` is handled here: the passive side
/// saw traffic before the RTU, so the connection is established now.
/// `IB_EVENT_PATH_MIG` needs alternate paths (not supported yet): `-EINVAL`.
pub fn notify(id: &Arc<CmIdPriv>, event: i32) -> CmResult {
    if event == ib_event_type::IB_EVENT_COMM_EST as i32 {
        establish(id)
    } else {
        Err(EINVAL)
    }
}

/// `cm_establish()` and its work item `cm_establish_handler()`.
fn establish(id: &Arc<CmIdPriv>) -> CmResult {
    let mut l = id.lock();
    match l.state() {
        IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD => l.set_state(IB_CM_ESTABLISHED),
        IB_CM_ESTABLISHED => return Err(EISCONN),
        _ => return Err(EINVAL),
    }
    // The REP needs no more retransmissions; the RTU, when it comes, is a
    // duplicate.
    cancel_msg(&mut l);
    drop(l);
    queue_event(id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    Ok(())
}
