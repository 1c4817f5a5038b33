//! MRA: `ib_prepare_cm_mra()` (Linux ≥ 6.16), `ib_send_cm_mra()` (Linux ≤ 6.15)
//! and `cm_mra_handler()`.
//!
//! Since Linux 6.16 the kernel sends no MRA when the user asks for one: the user
//! only marks the id (`ib_prepare_cm_mra`), and the CM answers the peer's next
//! *duplicate* REQ or REP with an MRA of service timeout 24 (about 68 s). The
//! peer then stretches the timeout of the MAD it is retransmitting. Before
//! that, `ib_send_cm_mra` sent the MRA at once, with the caller's service
//! timeout and private data, unless the timeout had `IB_CM_MRA_FLAG_DELAY`
//! set; code written for kernels ≤ 6.15 still calls it.

use std::sync::Arc;
use std::time::Duration;

use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Locked};
use super::path::{convert_to_ms, iba_time};
use super::recv::Received;
use super::send::send_untracked;
use super::tables::tables;
use super::worker::{TimerWork, arm_timer, cancel_timer, queue_event};
use crate::abi::ib_cm_event_type::IB_CM_MRA_RECEIVED;
use crate::abi::ib_cm_lap_state::{
    IB_CM_LAP_RCVD, IB_CM_LAP_SENT, IB_CM_MRA_LAP_RCVD, IB_CM_MRA_LAP_SENT,
};
use crate::abi::ib_cm_state::{self, *};
use crate::abi::{IB_CM_MRA_FLAG_DELAY, data_size};
use crate::errno::CmResult;
use crate::refusal::{above, wrong_state};
use crate::wire::mra::CM_MRA_PRIVATE_DATA;
use crate::wire::{Mad, Mra, MsgResponse, attr};

/// `CM_MRA_SETTING`: the service timeout every MRA of the kernel carries.
pub const CM_MRA_SETTING: u8 = 24;

/// Where an MRA moves the id: its new state (or, for a LAP, lap_state
/// MRA_LAP_SENT) and the message the MRA acknowledges.
#[derive(Clone, Copy)]
enum MraSent {
    State(ib_cm_state, MsgResponse),
    Lap,
}

impl MraSent {
    fn mraed(self) -> MsgResponse {
        match self {
            MraSent::State(_, mraed) => mraed,
            MraSent::Lap => MsgResponse::Other,
        }
    }
}

/// The states an MRA may be sent from (both calls): REQ_RCVD, REP_RCVD, and
/// ESTABLISHED with a LAP received; `-EINVAL` otherwise.
fn mra_sent_from(l: &Locked) -> CmResult<MraSent> {
    match l.state() {
        IB_CM_REQ_RCVD => Ok(MraSent::State(IB_CM_MRA_REQ_SENT, MsgResponse::Req)),
        IB_CM_REP_RCVD => Ok(MraSent::State(IB_CM_MRA_REP_SENT, MsgResponse::Rep)),
        IB_CM_ESTABLISHED if l.lap_state() == IB_CM_LAP_RCVD as i32 => Ok(MraSent::Lap),
        state => {
            let needs = "REQ_RCVD, REP_RCVD, or ESTABLISHED with a LAP received";
            Err(wrong_state(state, needs))
        }
    }
}

/// The id enters its MRA state (or lap_state).
fn enter_mra_state(l: &mut Locked, to: MraSent) {
    match to {
        MraSent::State(state, _) => l.set_state(state, "MRA sent"),
        MraSent::Lap => l.set_lap_state(IB_CM_MRA_LAP_SENT),
    }
}

/// The id enters its MRA state and keeps what a duplicate's MRA re-sends.
fn enter_mra_sent(l: &mut Locked, to: MraSent, service_timeout: u8, private_data: &[u8]) {
    enter_mra_state(l, to);
    l.inner.mra_service_timeout = service_timeout;
    l.inner.private_data = private_data.into();
}

/// `ib_prepare_cm_mra()`: the next duplicate of the peer's REQ (or REP, or
/// LAP) gets an MRA, service timeout `CM_MRA_SETTING`, no private data. No
/// MAD is sent now.
pub fn prepare_mra(id: &Arc<CmIdPriv>) -> CmResult {
    let mut l = id.lock_live()?;
    let to = mra_sent_from(&l)?;
    enter_mra_sent(&mut l, to, CM_MRA_SETTING, &[]);
    Ok(())
}

/// `ib_send_cm_mra()` of Linux ≤ 6.15: the MRA goes out now, with
/// `service_timeout` and `private_data`, unless `IB_CM_MRA_FLAG_DELAY` is set
/// in `service_timeout`; either way a duplicate gets it again. If it cannot
/// be sent, the error and nothing changes. `private_data` is `None` for NULL.
pub fn send_mra(id: &Arc<CmIdPriv>, service_timeout: u8, private_data: Option<&[u8]>) -> CmResult {
    let pd = private_data.unwrap_or_default();
    let max = data_size::MRA_PRIVATE_DATA_SIZE;
    if pd.len() > max {
        return Err(above("private_data_len", pd.len(), max));
    }
    let mut l = id.lock_live()?;
    let to = mra_sent_from(&l)?;
    if service_timeout & IB_CM_MRA_FLAG_DELAY == 0 {
        // In the MRA state before the peer may have the MRA (the log's
        // order); back if it cannot be sent.
        let was = l.state();
        enter_mra_state(&mut l, to);
        if let Err(e) = send_untracked(&l, &format_mra_with(&l, to.mraed(), service_timeout, pd)) {
            match to {
                MraSent::State(..) => l.set_state(was, "MRA not sent"),
                MraSent::Lap => l.set_lap_state(IB_CM_LAP_RCVD),
            }
            return Err(e);
        }
    }
    // The flag stays in the stored timeout; the wire field keeps 5 bits.
    enter_mra_sent(&mut l, to, service_timeout, pd);
    Ok(())
}

/// `cm_format_mra()`: an MRA for the message `mraed`. The service timeout
/// field is 5 bits wide: the delay flag is dropped, and a timeout above 31
/// goes as 31 (the kernel sends its low 5 bits: 32 would be 0).
fn format_mra_with(l: &Locked, mraed: MsgResponse, service_timeout: u8, pd: &[u8]) -> Mad {
    let mra = Mra {
        local_comm_id: l.inner.local_id,
        remote_comm_id: l.inner.remote_id,
        message_mraed: mraed,
        service_timeout: iba_time(service_timeout & !IB_CM_MRA_FLAG_DELAY),
        private_data: super::pd_array(pd),
    };
    mra.encode(l.inner.tid)
}

/// The MRA for a duplicate of the message `mraed`: the service timeout and
/// private data stored when the user asked for it.
pub fn format_mra(l: &Locked, mraed: MsgResponse) -> Mad {
    format_mra_with(l, mraed, l.inner.mra_service_timeout, &l.inner.private_data)
}

/// `cm_acquire_mraed_id()`: an MRA for a REQ finds an id that does not know
/// the peer's comm ID yet.
fn acquire_mraed_id(mra: &Mra) -> Option<Arc<CmIdPriv>> {
    let remote_id = match mra.message_mraed {
        MsgResponse::Req => 0,
        _ => mra.local_comm_id,
    };
    tables().acquire_id(mra.remote_comm_id, remote_id)
}

/// `ib_modify_mad()`: the outstanding MAD now waits `timeout_ms` (its retries
/// stay), and is reported in `state` if it times out.
fn modify_mad(l: &mut Locked, timeout_ms: u32, state: ib_cm_state) -> bool {
    let me = l.id.me.clone();
    let Some(msg) = l.inner.msg.as_mut() else {
        return false;
    };
    cancel_timer(msg.timer);
    msg.timeout_ms = timeout_ms;
    msg.sent_in = state;
    msg.timer = arm_timer(
        Duration::from_millis(u64::from(timeout_ms)),
        TimerWork::Retransmit(me),
    );
    true
}

/// An MRA for the LAP we sent (`cm_mra_handler`, ESTABLISHED): the LAP now
/// waits `timeout_ms` and lap_state becomes MRA_LAP_RCVD. Needs lap_state
/// LAP_SENT, which nothing sets since the kernel removed `ib_send_cm_lap()`,
/// so this always answers `false` (drop) in practice.
fn mra_lap_locked(l: &mut Locked, mraed: MsgResponse, timeout_ms: u32) -> bool {
    if mraed != MsgResponse::Other
        || l.lap_state() != IB_CM_LAP_SENT as i32
        || !modify_mad(l, timeout_ms, IB_CM_ESTABLISHED)
    {
        return false;
    }
    l.set_lap_state(IB_CM_MRA_LAP_RCVD);
    true
}

/// `cm_mra_handler()`.
pub fn mra_handler(work: Received) {
    let Ok(mra) = Mra::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = acquire_mraed_id(&mra) else {
        work.unmatched();
        return;
    };
    let mut l = id.lock();
    let timeout =
        convert_to_ms(mra.service_timeout).saturating_add(convert_to_ms(l.inner.av.timeout));
    let next = match (l.state(), mra.message_mraed) {
        (IB_CM_REQ_SENT, MsgResponse::Req) => IB_CM_MRA_REQ_RCVD,
        (IB_CM_REP_SENT, MsgResponse::Rep) => IB_CM_MRA_REP_RCVD,
        (IB_CM_ESTABLISHED, mraed) => {
            if !mra_lap_locked(&mut l, mraed, timeout) {
                // A repeat of the MRA that already stretched our LAP.
                if l.lap_state() == IB_CM_MRA_LAP_RCVD as i32 {
                    work.duplicate(attr::MRA);
                } else {
                    work.unmatched();
                }
                return;
            }
            IB_CM_ESTABLISHED
        }
        (IB_CM_MRA_REQ_RCVD | IB_CM_MRA_REP_RCVD, _) => {
            work.duplicate(attr::MRA);
            return;
        }
        _ => {
            work.unmatched();
            return;
        }
    };
    if next != IB_CM_ESTABLISHED {
        if !modify_mad(&mut l, timeout, next) {
            work.unmatched();
            return;
        }
        l.set_state(next, "MRA received");
    }
    drop(l);
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_MRA_RECEIVED,
            EventParam::MraRcvd {
                service_timeout: mra.service_timeout,
            },
            work.mad,
            CM_MRA_PRIVATE_DATA.mad_range(),
        ),
    );
}
