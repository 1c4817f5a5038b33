//! A device whose way to the wire is gone for good while it is open: the
//! MAD switch daemon (`ibcmd`) died. The kernel's nearest case is a MAD agent
//! unregistered under its sends, which completes each with
//! `IB_WC_WR_FLUSH_ERR`; here every cm_id of the device with a connection or
//! a request in progress gets one such error event at once, so that a caller
//! learns it even for an idle ESTABLISHED id that has nothing outstanding
//! (userspace has no `ib_client` remove callback).

use std::sync::Arc;

use super::device::Device;
use super::event::{CmEvent, EventParam};
use super::id::CmIdPriv;
use super::send::cancel_msg;
use super::timewait::{enter_timewait, reset_to_idle};
use super::worker::queue_event;
use crate::abi::ib_cm_event_type::{self, *};
use crate::abi::ib_cm_state::*;
use crate::abi::ib_wc_status;

const WHY: &str = "the MAD switch went away";

/// Flushes every id of `device` (on the worker, after the MADs the device
/// received before the loss). Ids are found through the local comm ID
/// table: those without a local comm ID are `ib_cm_insert_listen`'s
/// listeners, which get nothing anyway.
pub fn device_lost_handler(device: &Arc<Device>) {
    if device.is_closed() {
        return;
    }
    let ids: Vec<Arc<CmIdPriv>> = device
        .cm
        .tables()
        .local
        .values()
        .filter(|id| Arc::ptr_eq(&id.device, device))
        .cloned()
        .collect();
    for id in &ids {
        flush_id(id);
    }
}

/// One id's flush: its tracked MAD is dropped (so no retransmission reports
/// it again), it leaves its state as after that MAD's timeout
/// (`report_timeout`; a connection enters timewait), and its user gets the
/// matching error event. An id being destroyed gets nothing (`lock_live`;
/// one destroyed after this is skipped by `deliver`), nor does one with
/// nothing in progress: IDLE, LISTEN (the kernel has no event for a
/// listener), TIMEWAIT (its TIMEWAIT_EXIT follows anyway) and SIDR_REQ_RCVD
/// (its `ib_send_cm_sidr_rep` fails with `-ENODEV`).
fn flush_id(id: &Arc<CmIdPriv>) {
    let Ok(mut l) = id.lock_live() else {
        return;
    };
    let event: ib_cm_event_type = match l.state() {
        IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD | IB_CM_REP_RCVD | IB_CM_MRA_REP_SENT => {
            reset_to_idle(&mut l, WHY);
            IB_CM_REQ_ERROR
        }
        IB_CM_REQ_RCVD | IB_CM_MRA_REQ_SENT | IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD => {
            reset_to_idle(&mut l, WHY);
            IB_CM_REP_ERROR
        }
        IB_CM_ESTABLISHED | IB_CM_DREQ_SENT | IB_CM_DREQ_RCVD => {
            enter_timewait(&mut l, WHY);
            IB_CM_DREQ_ERROR
        }
        IB_CM_SIDR_REQ_SENT => {
            l.set_state(IB_CM_IDLE, WHY);
            IB_CM_SIDR_REQ_ERROR
        }
        IB_CM_IDLE | IB_CM_LISTEN | IB_CM_TIMEWAIT | IB_CM_SIDR_REQ_RCVD => return,
    };
    cancel_msg(&mut l);
    drop(l);
    queue_event(
        id,
        CmEvent {
            event,
            param: EventParam::SendStatus(ib_wc_status::IB_WC_WR_FLUSH_ERR),
            mad: None,
            private_data: None,
        },
    );
}
