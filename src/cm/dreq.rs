//! DREQ: `ib_send_cm_dreq()`, `cm_dreq_handler()` and the destroy-time
//! `cm_issue_dreq()`.

use std::sync::Arc;

use super::drep::issue_drep;
use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Locked};
use super::pd_array;
use super::recv::Received;
use super::send::{cancel_msg, form_tid, send_tracked, send_untracked};
use super::timewait::enter_timewait;
use super::worker::queue_event;
use crate::abi::ib_cm_event_type::IB_CM_DREQ_RECEIVED;
use crate::abi::ib_cm_lap_state::{IB_CM_LAP_SENT, IB_CM_MRA_LAP_RCVD};
use crate::abi::ib_cm_state::*;
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::dreq::CM_DREQ_PRIVATE_DATA;
use crate::wire::{Drep, Dreq, Mad, attr};

/// `cm_format_dreq()`. The TID is formed anew (`cm_form_tid`), not the stored one.
fn format_dreq(l: &Locked, private_data: &[u8]) -> Mad {
    let dreq = Dreq {
        local_comm_id: l.inner.local_id,
        remote_comm_id: l.inner.remote_id,
        remote_qpn: l.inner.remote_qpn,
        private_data: pd_array(private_data),
    };
    dreq.encode(form_tid(l.id.device.hi_tid, l.inner.local_id))
}

/// An outstanding LAP is cancelled by a disconnect. Nothing sends a LAP since
/// the kernel removed `ib_send_cm_lap()`; kept so the states read as in cm.c.
fn cancel_outstanding_lap(l: &mut Locked) {
    let lap = l.lap_state();
    if lap == IB_CM_LAP_SENT as i32 || lap == IB_CM_MRA_LAP_RCVD as i32 {
        cancel_msg(l);
    }
}

/// The body of `ib_send_cm_dreq()` under the id lock. The length check is the
/// caller's (it comes before the lock in the kernel).
pub fn send_dreq_locked(l: &mut Locked, private_data: &[u8]) -> CmResult {
    if l.state() != IB_CM_ESTABLISHED {
        return Err(wrong_state(l.state(), "ESTABLISHED"));
    }
    cancel_outstanding_lap(l);
    let mad = format_dreq(l, private_data);
    if let Err(e) = send_tracked(l, mad, IB_CM_DREQ_SENT, "DREQ sent") {
        // The kernel's contract: a DREQ that cannot be sent still ends the
        // connection.
        enter_timewait(l, "DREQ not sent");
        return Err(e);
    }
    Ok(())
}

/// `ib_send_cm_dreq()`. `private_data` is `None` for a NULL pointer.
pub fn send_dreq(id: &Arc<CmIdPriv>, private_data: Option<&[u8]>) -> CmResult {
    let pd = private_data.unwrap_or_default();
    let max = crate::abi::data_size::DREQ_PRIVATE_DATA_SIZE;
    if pd.len() > max {
        return Err(above("private_data_len", pd.len(), max));
    }
    send_dreq_locked(&mut id.lock_live()?, pd)
}

/// `cm_issue_dreq()`: one DREQ without private data, untracked, errors
/// ignored; destroying an established id sends it and enters timewait.
pub fn issue_dreq(l: &Locked) {
    let _ = send_untracked(l, &format_dreq(l, &[]));
}

/// `cm_dreq_handler()`.
pub fn dreq_handler(work: Received) {
    let Ok(dreq) = Dreq::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(dreq.remote_comm_id, dreq.local_comm_id) else {
        // Unknown, destroyed, or another connection's: answer statelessly.
        work.duplicate(attr::DREQ);
        issue_drep(&work, &dreq);
        return;
    };
    let mut l = id.lock();
    if l.inner.local_qpn != dreq.remote_qpn {
        work.wrong_qpn(); // not for our QP: dropped (silently in the kernel)
        return;
    }
    match l.state() {
        IB_CM_REP_SENT | IB_CM_DREQ_SENT | IB_CM_MRA_REP_RCVD => cancel_msg(&mut l),
        IB_CM_ESTABLISHED => cancel_outstanding_lap(&mut l),
        IB_CM_TIMEWAIT => {
            // Our DREP was lost: send it again, with the stored TID and data.
            work.duplicate(attr::DREQ);
            let drep = Drep {
                local_comm_id: l.inner.local_id,
                remote_comm_id: l.inner.remote_id,
                private_data: pd_array(&l.inner.private_data),
            };
            work.reply_to_retry(&drep.encode(l.inner.tid));
            return;
        }
        IB_CM_DREQ_RCVD => {
            work.duplicate(attr::DREQ); // the user has not answered yet
            return;
        }
        _ => {
            work.unmatched(); // no connection to disconnect
            return;
        }
    }
    l.set_state(IB_CM_DREQ_RCVD, "DREQ received");
    l.inner.tid = work.tid;
    drop(l);
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_DREQ_RECEIVED,
            EventParam::None,
            work.mad,
            CM_DREQ_PRIVATE_DATA.mad_range(),
        ),
    );
}
