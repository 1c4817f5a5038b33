//! `ib_cm_notify()`: the user tells the CM what its QP saw.

use std::sync::Arc;

use super::event::CmEvent;
use super::id::CmIdPriv;
use super::send::cancel_msg;
use super::worker::queue_checked;
use crate::abi::ib_cm_event_type::IB_CM_USER_ESTABLISHED;
use crate::abi::ib_cm_lap_state::{IB_CM_LAP_IDLE, IB_CM_LAP_UNINIT};
use crate::abi::ib_cm_state::*;
use crate::abi::ib_event_type;
use crate::errno::{CmResult, EISCONN};
use crate::refusal::{Rule, invalid, refuse, wrong_state};

/// `ib_cm_notify()`: `IB_EVENT_COMM_EST` (the passive side saw traffic before
/// the RTU) and `IB_EVENT_PATH_MIG` (the QP moved to its alternate path);
/// any other event is `-EINVAL`.
pub fn notify(id: &Arc<CmIdPriv>, event: i32) -> CmResult {
    if event == ib_event_type::IB_EVENT_COMM_EST as i32 {
        establish(id)
    } else if event == ib_event_type::IB_EVENT_PATH_MIG as i32 {
        migrate(id)
    } else {
        let rule = "is not IB_EVENT_COMM_EST or IB_EVENT_PATH_MIG";
        Err(invalid(Rule::value("event", event, rule)))
    }
}

/// `cm_establish()`: ESTABLISHED now, the event from a work item.
fn establish(id: &Arc<CmIdPriv>) -> CmResult {
    let mut l = id.lock_live()?;
    match l.state() {
        IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD => l.set_state(IB_CM_ESTABLISHED, "user established"),
        IB_CM_ESTABLISHED => return Err(refuse(EISCONN, Rule::Text("already ESTABLISHED"))),
        state => return Err(wrong_state(state, "REP_SENT or MRA_REP_RCVD")),
    }
    drop(l);
    queue_checked(id, establish_handler);
    Ok(())
}

/// `cm_establish_handler()`, on the worker when the work's turn comes:
/// `IB_CM_USER_ESTABLISHED` only if the id is still ESTABLISHED (the user may
/// have sent a DREQ meanwhile, or the peer's DREQ may have been handled).
fn establish_handler(id: &Arc<CmIdPriv>) -> Option<CmEvent> {
    let mut l = id.lock();
    if l.state() != IB_CM_ESTABLISHED {
        return None;
    }
    // The REP needs no more retransmissions; the RTU, when it comes, is a
    // duplicate.
    cancel_msg(&mut l);
    Some(CmEvent::bare(IB_CM_USER_ESTABLISHED))
}

/// `cm_migrate()`: the QP now uses its alternate path, so the CM's MADs
/// follow it: `av` becomes a copy of `alt_av` (which stays, so the next RTS
/// attributes re-arm the same path). Only on an ESTABLISHED connection with no
/// LAP in progress (lap_state UNINIT or IDLE). As in the kernel nothing checks
/// that an alternate path exists: without one `av` becomes an address with no
/// port, and later MADs of the connection fail to send.
fn migrate(id: &Arc<CmIdPriv>) -> CmResult {
    let mut l = id.lock_live()?;
    let lap = l.lap_state();
    if l.state() != IB_CM_ESTABLISHED {
        return Err(wrong_state(l.state(), "ESTABLISHED"));
    }
    if lap != IB_CM_LAP_UNINIT as i32 && lap != IB_CM_LAP_IDLE as i32 {
        let rule = "is a LAP in progress";
        return Err(invalid(Rule::value("lap_state", lap, rule)));
    }
    l.set_lap_state(IB_CM_LAP_IDLE);
    l.inner.av = l.inner.alt_av;
    Ok(())
}
