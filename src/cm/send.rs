//! Sending MADs for a cm_id: the one tracked, retransmitted MAD
//! (`cm_id_priv->msg`) and untracked replies; and what happens when the tracked
//! one runs out of retries (`cm_process_send_error`).

use std::sync::Arc;
use std::time::Duration;

use super::counters::Counter;
use super::event::{CmEvent, EventParam};
use super::id::{Av, CmIdPriv, Locked, TrackedMsg};
use super::timewait::{enter_timewait, reset_to_idle};
use super::trace;
use super::worker::{TimerWork, arm_timer, cancel_timer, queue_event};
use crate::abi::ib_cm_event_type::*;
use crate::abi::ib_cm_state::{self, *};
use crate::abi::ib_wc_status;
use crate::errno::CmResult;
use crate::timer::TimerId;
use crate::wire::Mad;

/// `cm_form_tid()`: the device's `hi_tid` above the local comm ID's raw
/// big-endian bits (so on x86 the low word on the wire is byte-reversed, as the
/// kernel's).
pub fn form_tid(hi_tid: u32, local_id: u32) -> u64 {
    (u64::from(hi_tid) << 32) | u64::from(local_id.to_be())
}

/// Sends `mad` on the id's address without retries (RTU, REJ, DREP, …).
pub fn send_untracked(l: &Locked, mad: &Mad) -> CmResult {
    let av = &l.inner.av;
    l.id.device.send(av.port_num, &av.addr, mad)
}

/// Sends `mad` as the id's tracked MAD and moves the id to `sent_in` (`why`
/// for the log): the MAD is resent every `timeout_ms` up to
/// `max_cm_retries` times while the id stays there, then reported as an
/// error event. Replaces (cancels) any earlier tracked MAD.
///
/// The id is tracked and in `sent_in` before the MAD goes to the transport:
/// the peer may answer (and log) at once, and the log must tell the state
/// change first. The timer is armed before anything changes, so a panic
/// there leaves the id as it was. If the transport refuses the MAD it is
/// forgotten and the error returned, the id still in `sent_in`: the caller
/// moves it back, or on (a DREQ to timewait).
pub fn send_tracked(l: &mut Locked, mad: Mad, sent_in: ib_cm_state, why: &'static str) -> CmResult {
    cancel_msg(l);
    let av = l.inner.av;
    let mad = Arc::new(mad);
    let (timeout_ms, retries) = match (sent_in, l.inner.disconnect_timeout) {
        (IB_CM_DREQ_SENT, Some(bound)) => bound,
        _ => (l.inner.timeout_ms, l.inner.max_cm_retries),
    };
    let timer = arm_retransmit(l, timeout_ms);
    l.inner.msg = Some(Box::new(TrackedMsg {
        mad: mad.clone(),
        av,
        sent_in,
        retries_left: retries,
        timeout_ms,
        timer,
    }));
    l.set_state(sent_in, why);
    let sent = l.id.device.send_shared(av.port_num, &av.addr, &mad);
    if sent.is_err() {
        cancel_msg(l);
    }
    sent
}

fn arm_retransmit(l: &Locked, timeout_ms: u32) -> TimerId {
    arm_timer(
        &l.id.device.cm,
        Duration::from_millis(u64::from(timeout_ms)),
        TimerWork::Retransmit(l.id.me.clone()),
    )
}

/// `ib_cancel_mad(cm_id_priv->msg)`: stops retransmitting the tracked MAD.
pub fn cancel_msg(l: &mut Locked) {
    if let Some(msg) = l.inner.msg.take() {
        cancel_timer(&l.id.device.cm, msg.timer);
    }
}

/// Whether a MAD sent in `sent_in` is still wanted in `now`: an MRA moves the
/// state without cancelling the MAD it answers.
fn still_wanted(sent_in: ib_cm_state, now: ib_cm_state) -> bool {
    sent_in == now
        || matches!(
            (sent_in, now),
            (IB_CM_REQ_SENT, IB_CM_MRA_REQ_RCVD) | (IB_CM_REP_SENT, IB_CM_MRA_REP_RCVD)
        )
}

/// The tracked MAD's timer fired: resend it, or, out of retries or unable to
/// resend, report the timeout (`cm_process_send_error` with
/// `IB_WC_RESP_TIMEOUT_ERR`).
pub fn retransmit_handler(id: &Arc<CmIdPriv>, timer: TimerId) {
    let mut l = id.lock();
    let Some(msg) = timed_msg(&mut l, timer) else {
        return;
    };
    if id.device.is_lost() {
        // The MAD switch went away: the flush queued with the news
        // (`lost::device_lost_handler`) completes this MAD, with
        // IB_WC_WR_FLUSH_ERR like every other id's, and only once.
        return;
    }
    if msg.retries_left > 0 {
        msg.retries_left -= 1;
        let (av, timeout_ms): (Av, u32) = (msg.av, msg.timeout_ms);
        let (mad, left) = (msg.mad.clone(), msg.retries_left);
        let attr_id = super::device::mad_attr_id(&mad);
        id.device.count(av.port_num, Counter::TxRetries, attr_id);
        // Logged before the hand-over, as the first send.
        trace::retry(&l, attr_id, left);
        // `timeout_sends()`: a retry that cannot be posted completes the MAD
        // at once, as if it had run out of retries.
        if id.device.send_shared(av.port_num, &av.addr, &mad).is_ok() {
            let timer = arm_retransmit(&l, timeout_ms);
            if let Some(msg) = l.inner.msg.as_mut() {
                msg.timer = timer;
            }
            return;
        }
        // `retry_send()` counted the retry before posting it, and
        // `cm_send_handler` books it as sent with the failed MAD: the
        // totals are the kernel's (1 + retries messages, retries retries).
        id.device.count(av.port_num, Counter::TxMsgs, attr_id);
    }
    if let Some(msg) = l.inner.msg.take() {
        trace::timeout(&l, &msg.mad);
    }
    report_timeout(id, l);
}

/// A panic dropped the tracked MAD's timer `timer` (while it resent the MAD
/// or armed the next retransmission): nothing would ever resend or complete
/// it, so it completes now as if out of retries, unless a later MAD or timer
/// replaced it, or the id moved on.
pub fn retransmit_lost(id: &Arc<CmIdPriv>, timer: TimerId) {
    let mut l = id.lock();
    if timed_msg(&mut l, timer).is_some() {
        report_timeout(id, l);
    }
}

/// The tracked MAD whose timer `timer` is, if it is still wanted (one that
/// is not is forgotten); `None` as well for a timer of an earlier, replaced
/// MAD.
fn timed_msg<'l>(l: &'l mut Locked, timer: TimerId) -> Option<&'l mut TrackedMsg> {
    let state = l.state();
    let msg = l.inner.msg.as_ref().filter(|msg| msg.timer == timer)?;
    if !still_wanted(msg.sent_in, state) {
        l.inner.msg = None;
        return None;
    }
    l.inner.msg.as_deref_mut()
}

/// The tracked MAD is done without an answer (`cm_process_send_error` with
/// `IB_WC_RESP_TIMEOUT_ERR`): the id leaves the state it was sent in and its
/// user gets the matching error event.
fn report_timeout(id: &Arc<CmIdPriv>, mut l: Locked) {
    let state = l.state();
    l.inner.msg = None;
    let event = match state {
        IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD => {
            // Its path may be stale: the next ibcm_init_path asks the SA.
            let (port_num, dgid) = (l.inner.av.port_num, l.inner.av.addr.dgid);
            reset_to_idle(&mut l, "REQ timed out");
            id.device.req_timed_out(port_num, &dgid);
            IB_CM_REQ_ERROR
        }
        IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD => {
            reset_to_idle(&mut l, "REP timed out");
            IB_CM_REP_ERROR
        }
        IB_CM_DREQ_SENT => {
            enter_timewait(&mut l, "DREQ timed out");
            IB_CM_DREQ_ERROR
        }
        IB_CM_SIDR_REQ_SENT => {
            l.set_state(IB_CM_IDLE, "SIDR_REQ timed out");
            IB_CM_SIDR_REQ_ERROR
        }
        _ => return,
    };
    drop(l);
    queue_event(
        id,
        CmEvent {
            event,
            param: EventParam::SendStatus(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR),
            mad: None,
            private_data: None,
        },
    );
}
