//! DREP: `ib_send_cm_drep()`, `cm_drep_handler()` and the stateless
//! `cm_issue_drep()`.

use std::sync::Arc;

use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Locked};
use super::pd_array;
use super::recv::Received;
use super::send::{cancel_msg, send_untracked};
use super::timewait::enter_timewait;
use super::worker::queue_event;
use crate::abi::data_size;
use crate::abi::ib_cm_event_type::IB_CM_DREP_RECEIVED;
use crate::abi::ib_cm_state::*;
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::drep::CM_DREP_PRIVATE_DATA;
use crate::wire::{Drep, Dreq};

/// `cm_send_drep_locked()`: timewait is entered *before* the DREP is sent, so
/// the connection ends even if the send fails. The private data is kept to
/// answer a retransmitted DREQ.
pub fn send_drep_locked(l: &mut Locked, private_data: &[u8]) -> CmResult {
    let max = data_size::DREP_PRIVATE_DATA_SIZE;
    if private_data.len() > max {
        return Err(above("private_data_len", private_data.len(), max));
    }
    if l.state() != IB_CM_DREQ_RCVD {
        return Err(wrong_state(l.state(), "DREQ_RCVD"));
    }
    l.inner.private_data = private_data.into();
    enter_timewait(l, "DREP sent");
    let drep = Drep {
        local_comm_id: l.inner.local_id,
        remote_comm_id: l.inner.remote_id,
        private_data: pd_array(private_data),
    };
    // The TID is the DREQ's, stored by the DREQ handler.
    send_untracked(l, &drep.encode(l.inner.tid))
}

/// `ib_send_cm_drep()`. `private_data` is `None` for a NULL pointer.
pub fn send_drep(id: &Arc<CmIdPriv>, private_data: Option<&[u8]>) -> CmResult {
    send_drep_locked(&mut id.lock_live()?, private_data.unwrap_or_default())
}

/// `cm_issue_drep()`: a DREQ for a connection we do not have gets a DREP with
/// the comm IDs swapped and the DREQ's TID.
pub fn issue_drep(work: &Received, dreq: &Dreq) {
    let drep = Drep {
        local_comm_id: dreq.remote_comm_id,
        remote_comm_id: dreq.local_comm_id,
        ..Drep::default()
    };
    work.reply_to_retry(&drep.encode(work.tid));
}

/// `cm_drep_handler()`.
pub fn drep_handler(work: Received) {
    let Ok(drep) = Drep::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(drep.remote_comm_id, drep.local_comm_id) else {
        work.unmatched();
        return;
    };
    let mut l = id.lock();
    if !matches!(l.state(), IB_CM_DREQ_SENT | IB_CM_DREQ_RCVD) {
        work.unmatched();
        return;
    }
    enter_timewait(&mut l, "DREP received");
    cancel_msg(&mut l);
    drop(l);
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_DREP_RECEIVED,
            EventParam::None,
            work.mad,
            CM_DREP_PRIVATE_DATA.mad_range(),
        ),
    );
}
