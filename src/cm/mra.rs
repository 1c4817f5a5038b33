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
//!
//! Beyond the kernel's ib_cm (issue 33): the *automatic MRA*. A duplicate REQ
//! (or REP) for an id whose user has not answered yet (REQ_RCVD, REP_RCVD) is
//! dropped by the kernel, so a user slower than the peer's retransmissions
//! lets the peer time out. Here it gets an MRA ([`AutoMra`], `IBCM_AUTO_MRA`),
//! as the kernel's rdma_cm has its CM send for its users
//! (`cma_ib_req_handler`: `ib_prepare_cm_mra`, formerly `ib_send_cm_mra(
//! CMA_CM_MRA_SETTING)`). The MRA is stateless: the id stays where it is, so
//! every call the user makes afterwards behaves as in the kernel.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::engine::Cm;
use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Locked};
use super::path::{convert_to_ms, iba_time};
use super::recv::Received;
use super::send::send_untracked;
use super::trace::CommIds;
use super::worker::{TimerWork, arm_timer, cancel_timer, queue_event};
use crate::abi::ib_cm_event_type::IB_CM_MRA_RECEIVED;
use crate::abi::ib_cm_lap_state::{
    IB_CM_LAP_RCVD, IB_CM_LAP_SENT, IB_CM_MRA_LAP_RCVD, IB_CM_MRA_LAP_SENT,
};
use crate::abi::ib_cm_state::{self, *};
use crate::abi::{IB_CM_MRA_FLAG_DELAY, data_size};
use crate::errno::CmResult;
use crate::ibcm_log;
use crate::refusal::{above, wrong_state};
use crate::transport::MadAddr;
use crate::wire::mra::CM_MRA_PRIVATE_DATA;
use crate::wire::{Mad, Mra, MsgResponse, attr};

/// `CM_MRA_SETTING`: the service timeout every MRA of the kernel carries.
pub const CM_MRA_SETTING: u8 = 24;

/// What a duplicate REQ or REP gets while the user has not answered
/// (`IBCM_AUTO_MRA`, per device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoMra {
    /// Nothing: the kernel's drop (`IBCM_AUTO_MRA=off` or `0`).
    Off,
    /// An MRA of this service timeout exponent (`IBCM_AUTO_MRA=1` … `31`),
    /// but at least one above the peer's own response timeout: an MRA
    /// never shortens the peer's wait (`cm_mra_handler` sets its
    /// retransmission interval to the MRA's timeout, shorter or not).
    Fixed(u8),
    /// An MRA of the peer's response timeout plus this (the default).
    AbovePeer(u8),
}

/// The default: the peer's own response timeout + 4, 16 times the interval
/// the peer chose. At rdma_cm's response timeout (20, 4.3 s) that is
/// rdma_cm's own `CMA_CM_MRA_SETTING` (24, 68.7 s), so a peer waits for
/// this library as it waits for a Linux rdma_cm passive side; a peer that
/// chose a short timeout is slowed in proportion, not to 68.7 s a retry.
/// Only a live CM sends it, so the longer wait applies only where the
/// connection can still be made: a dead peer times out as before, and a
/// user that never answers keeps the peer about 16 times its own total
/// (1 + 16·retries intervals instead of 1 + retries) before REQ_ERROR.
pub const AUTO_MRA_DEFAULT: AutoMra = AutoMra::AbovePeer(4);

impl AutoMra {
    /// The setting `IBCM_AUTO_MRA` gives, read once per process: `off` or
    /// `0` (none), `1` … `31` (that exponent); unset or empty: the default;
    /// anything else: the default, with a warning.
    pub fn from_env() -> AutoMra {
        static SETTING: OnceLock<AutoMra> = OnceLock::new();
        *SETTING.get_or_init(|| {
            let value = crate::os::sys::secure_var_os(c"IBCM_AUTO_MRA");
            let text = value.as_deref().map(|v| v.to_str().unwrap_or("\u{fffd}"));
            Self::parse(text).unwrap_or_else(|| {
                ibcm_log!(
                    Warn,
                    "IBCM_AUTO_MRA={value:?} is none of off, 0 … 31: using the default \
                     (the peer's response timeout + 4)"
                );
                AUTO_MRA_DEFAULT
            })
        })
    }

    /// A value of `IBCM_AUTO_MRA`; `None` if it is not one.
    pub fn parse(value: Option<&str>) -> Option<AutoMra> {
        let value = value.map(str::trim).unwrap_or_default();
        if value.is_empty() {
            return Some(AUTO_MRA_DEFAULT);
        }
        if value.eq_ignore_ascii_case("off") {
            return Some(AutoMra::Off);
        }
        match value.parse::<u8>().ok()? {
            0 => Some(AutoMra::Off),
            t @ 1..=31 => Some(AutoMra::Fixed(t)),
            _ => None,
        }
    }

    /// The service timeout of the MRA for a peer whose response timeout is
    /// `peer`; `None`: no MRA.
    pub fn service_timeout(self, peer: u8) -> Option<u8> {
        let peer = iba_time(peer);
        match self {
            AutoMra::Off => None,
            AutoMra::Fixed(t) => Some(iba_time(t.max(peer + 1))),
            AutoMra::AbovePeer(k) => Some(iba_time(peer.saturating_add(k))),
        }
    }

    /// One byte, for the device's atomic: 0 off, 1 … 31 fixed, 0x80 + k
    /// above the peer.
    pub fn to_bits(self) -> u8 {
        match self {
            AutoMra::Off => 0,
            AutoMra::Fixed(t) => iba_time(t).max(1),
            AutoMra::AbovePeer(k) => 0x80 | iba_time(k),
        }
    }

    pub fn from_bits(bits: u8) -> AutoMra {
        match bits {
            0 => AutoMra::Off,
            b if b & 0x80 != 0 => AutoMra::AbovePeer(b & 0x7f),
            t => AutoMra::Fixed(t),
        }
    }
}

/// The peer's REQ (passive side) or REP (active side) an id has not
/// answered yet: when it arrived and where it came from, what a duplicate
/// of it must match to be the peer's retransmission.
#[derive(Debug, Clone, Copy)]
pub struct PeerMsg {
    arrived: Instant,
    port: u8,
    from: MadAddr,
}

impl PeerMsg {
    pub fn of(work: &Received) -> Self {
        Self {
            arrived: work.arrived,
            port: work.port,
            from: work.addr,
        }
    }

    /// Whether it came with a GRH (RoCE, a routed path): then its GID is
    /// what a duplicate's must match.
    #[cfg(test)]
    pub fn came_with_grh(&self) -> bool {
        self.from.grh
    }

    /// Whether `dup` can be the peer's retransmission: it came from where
    /// the original did (the port it arrived on, the sender's LID, and its
    /// GID when it had a GRH: a retransmission is the same send buffer on
    /// the same address handle), and at least `resent_after` later. Both
    /// by arrival: a worker held by a handler takes a REQ and the
    /// retransmissions queued behind it microseconds apart.
    fn resent_as(&self, dup: &Received, resent_after: Duration) -> bool {
        let (a, b) = (&self.from, &dup.addr);
        self.port == dup.port
            && a.dlid == b.dlid
            && a.grh == b.grh
            && (!a.grh || a.dgid == b.dgid)
            && dup.arrived.saturating_duration_since(self.arrived) >= resent_after
    }
}

/// A duplicate of the peer's REQ or REP (`mraed`) while the user has not
/// answered it (the id in REQ_RCVD or REP_RCVD): an MRA back to where it
/// came from, if the device sends automatic ones, so the peer waits
/// instead of timing out. Nothing about the id changes. One MRA per
/// duplicate received: never more MADs out than came in.
///
/// Only for the peer's retransmission: a duplicate that comes less than
/// half the peer's response timeout after the original is a copy the
/// fabric made, not a sign that the peer's timer ran out; it is dropped as
/// the kernel drops it, and the peer keeps its short interval. So is one
/// from another address than the original's: the kernel answers nothing
/// in these states, and an MRA to whoever sent a copy of the REQ (its comm
/// ID and CA GUID) or REP (both comm IDs) would hand a third host our comm
/// ID, the half it lacks to forge what the connection takes, or send MRAs
/// wherever a spoofed source address says.
pub fn auto_mra(work: &Received, l: &Locked, mraed: MsgResponse) {
    let peer = l.inner.peer_response_timeout;
    let Some(service_timeout) = work.device.auto_mra().service_timeout(peer) else {
        return;
    };
    let resent_after = Duration::from_millis(u64::from(convert_to_ms(peer) / 2));
    if !l
        .inner
        .peer_msg
        .is_some_and(|original| original.resent_as(work, resent_after))
    {
        return;
    }
    let mra = format_mra_with(l, mraed, service_timeout, &[]);
    if !work.reply_to_retry(&mra) {
        return;
    }
    if let Ok(c) = work.device.counters(work.port) {
        c.tx_auto_mra.fetch_add(1, Ordering::Relaxed);
    }
    let answered = match mraed {
        MsgResponse::Req => "REQ",
        _ => "REP",
    };
    ibcm_log!(
        Debug,
        "{} {}:{} auto MRA of {answered} (service timeout {service_timeout}): a \
         duplicate, its user has not answered",
        CommIds(l.id),
        work.device.name,
        work.port
    );
}

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
fn acquire_mraed_id(cm: &Cm, mra: &Mra) -> Option<Arc<CmIdPriv>> {
    let remote_id = match mra.message_mraed {
        MsgResponse::Req => 0,
        _ => mra.local_comm_id,
    };
    cm.tables().acquire_id(mra.remote_comm_id, remote_id)
}

/// `ib_modify_mad()`: the outstanding MAD now waits `timeout_ms` (its retries
/// stay), and is reported in `state` if it times out.
fn modify_mad(l: &mut Locked, timeout_ms: u32, state: ib_cm_state) -> bool {
    let me = l.id.me.clone();
    let Some(msg) = l.inner.msg.as_mut() else {
        return false;
    };
    cancel_timer(&l.id.device.cm, msg.timer);
    msg.timeout_ms = timeout_ms;
    msg.sent_in = state;
    msg.timer = arm_timer(
        &l.id.device.cm,
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
    let Some(id) = acquire_mraed_id(&work.device.cm, &mra) else {
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
