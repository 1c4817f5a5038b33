//! Leaving a connection: timewait (`cm_enter_timewait`, `cm_timewait_handler`)
//! and the return to idle (`cm_reset_to_idle`).

use std::sync::Arc;
use std::time::Duration;

use super::event::CmEvent;
use super::id::{CmIdPriv, Locked};
use super::path::convert_to_ms;
use super::worker::{TimerWork, arm_timer, cancel_timer, queue_event};
use crate::abi::ib_cm_event_type::IB_CM_TIMEWAIT_EXIT;
use crate::abi::ib_cm_state::{IB_CM_IDLE, IB_CM_TIMEWAIT};
use crate::timer::TimerId;

/// `cm_remove_remote()`: the connection leaves the remote-id and remote-QPN
/// tables, so stale-connection and duplicate-REQ checks no longer see it.
pub fn remove_remote(l: &mut Locked) {
    let guid = l.inner.remote_ca_guid;
    let mut t = l.id.device.cm.tables();
    if std::mem::take(&mut l.inner.remote_id_linked) {
        t.remote_id.remove(&(l.inner.remote_id, guid));
    }
    if std::mem::take(&mut l.inner.remote_qpn_linked) {
        t.remote_qpn.remove(&(l.inner.remote_qpn, guid));
    }
}

/// `cm_enter_timewait()`: state TIMEWAIT, and `IB_CM_TIMEWAIT_EXIT` after
/// `convert_to_ms(av.timeout)` unless the id is destroyed or leaves timewait
/// first.
pub fn enter_timewait(l: &mut Locked, why: &'static str) {
    remove_remote(l);
    l.inner.has_timewait_info = false;
    l.set_state(IB_CM_TIMEWAIT, why);
    if let Some(timer) = l.inner.timewait_timer.take() {
        cancel_timer(&l.id.device.cm, timer);
    }
    let wait = Duration::from_millis(u64::from(convert_to_ms(l.inner.av.timeout)));
    let work = TimerWork::TimewaitExit(l.id.me.clone());
    l.inner.timewait_timer = Some(arm_timer(&l.id.device.cm, wait, work));
}

/// `cm_reset_to_idle()`.
pub fn reset_to_idle(l: &mut Locked, why: &'static str) {
    l.set_state(IB_CM_IDLE, why);
    if std::mem::take(&mut l.inner.has_timewait_info) {
        remove_remote(l);
    }
}

/// Timewait is over (`cm_timewait_handler`): IDLE and `IB_CM_TIMEWAIT_EXIT`,
/// if the id is still in the timewait that armed `timer`.
pub fn timewait_handler(id: &Arc<CmIdPriv>, timer: TimerId) {
    let mut l = id.lock();
    if l.state() != IB_CM_TIMEWAIT || l.inner.timewait_timer != Some(timer) {
        return;
    }
    l.inner.timewait_timer = None;
    l.set_state(IB_CM_IDLE, "timewait over");
    drop(l);
    queue_event(id, CmEvent::bare(IB_CM_TIMEWAIT_EXIT));
}
