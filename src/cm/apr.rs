//! APR: `cm_apr_handler()`. The peer's answer to a LAP we sent.
//!
//! Only an ESTABLISHED connection in lap_state LAP_SENT or MRA_LAP_RCVD takes
//! an APR. Nothing reaches those states since the kernel removed
//! `ib_send_cm_lap()` in 2019 (this library has no LAP sender either), so in
//! practice every APR is dropped; the delivery below is kept, as in cm.c, for
//! the day a LAP sender returns.

use super::event::{CmEvent, EventParam};
use super::lap::on_roce_port;
use super::recv::Received;
use super::send::cancel_msg;
use super::worker::queue_event;
use crate::abi::ib_cm_event_type::IB_CM_APR_RECEIVED;
use crate::abi::ib_cm_lap_state::{IB_CM_LAP_IDLE, IB_CM_LAP_SENT, IB_CM_MRA_LAP_RCVD};
use crate::abi::ib_cm_state::IB_CM_ESTABLISHED;
use crate::wire::Apr;
use crate::wire::apr::{CM_APR_ADDITIONAL_INFORMATION, CM_APR_PRIVATE_DATA};

/// `cm_apr_handler()`.
pub fn apr_handler(work: Received) {
    if on_roce_port(&work) {
        work.unmatched();
        return;
    }
    let Ok(apr) = Apr::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(apr.remote_comm_id, apr.local_comm_id) else {
        work.unmatched(); // an unmatched reply
        return;
    };
    let mut l = id.lock();
    let lap = l.lap_state();
    if l.state() != IB_CM_ESTABLISHED
        || (lap != IB_CM_LAP_SENT as i32 && lap != IB_CM_MRA_LAP_RCVD as i32)
    {
        work.unmatched();
        return;
    }
    // Unreachable through the API (see above): the LAP is answered.
    l.set_lap_state(IB_CM_LAP_IDLE);
    cancel_msg(&mut l);
    drop(l);
    let info_start = CM_APR_ADDITIONAL_INFORMATION.mad_range().start;
    let param = EventParam::AprRcvd {
        ap_status: apr.ap_status,
        info: info_start..info_start + usize::from(apr.info_length),
    };
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_APR_RECEIVED,
            param,
            work.mad,
            CM_APR_PRIVATE_DATA.mad_range(),
        ),
    );
}
