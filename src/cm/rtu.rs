//! RTU: `ib_send_cm_rtu()` and `cm_rtu_handler()`.

use std::sync::Arc;

use super::event::{CmEvent, EventParam};
use super::id::CmIdPriv;
use super::pd_array;
use super::recv::Received;
use super::send::{cancel_msg, send_untracked};
use super::worker::queue_event;
use crate::abi::data_size;
use crate::abi::ib_cm_event_type::IB_CM_RTU_RECEIVED;
use crate::abi::ib_cm_state::*;
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::rtu::CM_RTU_PRIVATE_DATA;
use crate::wire::{Rtu, attr};

/// `ib_send_cm_rtu()`: the active side completes the connection. The private
/// data is kept to answer a duplicate REP.
pub fn send_rtu(id: &Arc<CmIdPriv>, private_data: &[u8]) -> CmResult {
    let max = data_size::RTU_PRIVATE_DATA_SIZE;
    if private_data.len() > max {
        return Err(above("private_data_len", private_data.len(), max));
    }
    let mut l = id.lock_live()?;
    if !matches!(l.state(), IB_CM_REP_RCVD | IB_CM_MRA_REP_SENT) {
        return Err(wrong_state(l.state(), "REP_RCVD or MRA_REP_SENT"));
    }
    let rtu = Rtu {
        local_comm_id: l.inner.local_id,
        remote_comm_id: l.inner.remote_id,
        private_data: pd_array(private_data),
    };
    // ESTABLISHED before the peer may have the RTU (the log's order); back
    // if it cannot be sent.
    let answering = l.state();
    l.set_state(IB_CM_ESTABLISHED, "RTU sent");
    if let Err(e) = send_untracked(&l, &rtu.encode(l.inner.tid)) {
        l.set_state(answering, "RTU not sent");
        return Err(e);
    }
    l.inner.private_data = private_data.into();
    Ok(())
}

/// `cm_rtu_handler()`: the passive side's connection is established.
pub fn rtu_handler(work: Received) {
    let Ok(rtu) = Rtu::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(rtu.remote_comm_id, rtu.local_comm_id) else {
        work.unmatched();
        return;
    };
    let mut l = id.lock();
    if !matches!(l.state(), IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD) {
        work.duplicate(attr::RTU);
        return;
    }
    l.set_state(IB_CM_ESTABLISHED, "RTU received");
    cancel_msg(&mut l);
    drop(l);
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_RTU_RECEIVED,
            EventParam::None,
            work.mad,
            CM_RTU_PRIVATE_DATA.mad_range(),
        ),
    );
}
