//! REJ: `ib_send_cm_rej()`, `cm_rej_handler()` and the stateless `cm_issue_rej()`.

use std::sync::Arc;

use super::engine::Cm;
use super::event::{CmEvent, EventParam, RejRcvd};
use super::id::{CmIdPriv, Locked};
use super::pd_array;
use super::recv::Received;
use super::send::{cancel_msg, send_untracked};
use super::timewait::{enter_timewait, reset_to_idle};
use super::worker::queue_event;
use crate::abi::data_size;
use crate::abi::ib_cm_event_type::IB_CM_REJ_RECEIVED;
use crate::abi::ib_cm_lap_state::{IB_CM_LAP_SENT, IB_CM_LAP_UNINIT};
use crate::abi::ib_cm_rej_reason::{IB_CM_REJ_STALE_CONN, IB_CM_REJ_TIMEOUT};
use crate::abi::ib_cm_state::{self, *};
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::rej::{CM_REJ_ARI, CM_REJ_PRIVATE_DATA};
use crate::wire::{Mad, MsgResponse, Rej};

/// `cm_format_rej()`: a REJ from `l` as it was in `state`.
pub fn format_rej(l: &Locked, reason: u16, ari: &[u8], pd: &[u8], state: ib_cm_state) -> Mad {
    let (local_comm_id, message_rejected) = match state {
        // The kernel sends 0: the peer does not know our comm ID yet.
        IB_CM_REQ_RCVD => (0, MsgResponse::Req),
        IB_CM_MRA_REQ_SENT => (l.inner.local_id, MsgResponse::Req),
        IB_CM_REP_RCVD | IB_CM_MRA_REP_SENT => (l.inner.local_id, MsgResponse::Rep),
        _ => (l.inner.local_id, MsgResponse::Other),
    };
    let rej = Rej {
        local_comm_id,
        remote_comm_id: l.inner.remote_id,
        message_rejected,
        rejected_info_length: ari.len() as u8,
        reason,
        ari: pd_array(ari),
        private_data: pd_array(pd),
    };
    rej.encode(l.inner.tid)
}

/// `cm_send_rej_locked()`.
pub fn send_rej_locked(l: &mut Locked, reason: u16, ari: &[u8], pd: &[u8]) -> CmResult {
    let state = l.state();
    match state {
        IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD | IB_CM_REQ_RCVD | IB_CM_MRA_REQ_SENT
        | IB_CM_REP_RCVD | IB_CM_MRA_REP_SENT => reset_to_idle(l, "REJ sent"),
        IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD => enter_timewait(l, "REJ sent"),
        _ => {
            let needs = "REQ_SENT, REQ_RCVD, REP_SENT, REP_RCVD or an MRA state between";
            return Err(wrong_state(state, needs));
        }
    }
    cancel_msg(l);
    let mad = format_rej(l, reason, ari, pd, state);
    send_untracked(l, &mad)
}

/// `ib_send_cm_rej()`.
pub fn send_rej(id: &Arc<CmIdPriv>, reason: u16, ari: &[u8], pd: &[u8]) -> CmResult {
    let (pd_max, ari_max) = (data_size::REJ_PRIVATE_DATA_SIZE, data_size::REJ_ARI_LENGTH);
    if pd.len() > pd_max {
        return Err(above("private_data_len", pd.len(), pd_max));
    }
    if ari.len() > ari_max {
        return Err(above("ari_length", ari.len(), ari_max));
    }
    send_rej_locked(&mut id.lock_live()?, reason, ari, pd)
}

/// `cm_issue_rej()`: a stateless REJ answering `work`, comm IDs swapped.
pub fn issue_rej(work: &Received, reason: u16, message_rejected: MsgResponse) {
    let mad = &work.mad;
    let rej = Rej {
        // The received message's comm IDs, read at the REJ's offsets.
        remote_comm_id: u32::from_be_bytes([mad[24], mad[25], mad[26], mad[27]]),
        local_comm_id: u32::from_be_bytes([mad[28], mad[29], mad[30], mad[31]]),
        message_rejected,
        reason,
        ..Rej::default()
    };
    work.reply(&rej.encode(work.tid));
}

/// `cm_acquire_rejected_id()`.
fn acquire_rejected_id(cm: &Cm, rej: &Rej) -> Option<Arc<CmIdPriv>> {
    let t = cm.tables();
    if rej.reason == IB_CM_REJ_TIMEOUT as u16 {
        // The ARI carries the rejecting side's node GUID.
        let guid = u64::from_be_bytes(rej.ari[..8].try_into().ok()?);
        t.find_remote_id(guid, rej.local_comm_id)
    } else if rej.message_rejected == MsgResponse::Req {
        t.acquire_id(rej.remote_comm_id, 0)
    } else {
        t.acquire_id(rej.remote_comm_id, rej.local_comm_id)
    }
}

/// `cm_rej_handler()`.
pub fn rej_handler(work: Received) {
    let Ok(rej) = Rej::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = acquire_rejected_id(&work.device.cm, &rej) else {
        work.unmatched();
        return;
    };
    let mut l = id.lock();
    let stale = rej.reason == IB_CM_REJ_STALE_CONN as u16;
    match l.state() {
        IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD | IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD
        | IB_CM_REQ_RCVD | IB_CM_MRA_REQ_SENT => {
            cancel_msg(&mut l);
            if stale {
                enter_timewait(&mut l, "stale REJ received");
            } else {
                reset_to_idle(&mut l, "REJ received");
            }
        }
        IB_CM_DREQ_SENT | IB_CM_REP_RCVD | IB_CM_MRA_REP_SENT => {
            cancel_msg(&mut l);
            enter_timewait(&mut l, "REJ received");
        }
        IB_CM_ESTABLISHED if matches!(l.lap_state(), x if x == IB_CM_LAP_UNINIT as i32 || x == IB_CM_LAP_SENT as i32) =>
        {
            cancel_msg(&mut l);
            enter_timewait(&mut l, "REJ received");
        }
        _ => {
            work.unmatched();
            return;
        }
    }
    drop(l);
    let ari_len = usize::from(rej.rejected_info_length).min(data_size::REJ_ARI_LENGTH);
    let ari_start = CM_REJ_ARI.mad_range().start;
    let event = RejRcvd {
        reason: rej.reason,
        ari: ari_start..ari_start + ari_len,
    };
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_REJ_RECEIVED,
            EventParam::RejRcvd(event),
            work.mad,
            CM_REJ_PRIVATE_DATA.mad_range(),
        ),
    );
}
