//! `ib_destroy_cm_id()` (`cm_destroy_id`): leave every state the way the
//! kernel does, then forget the id.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::drep::send_drep_locked;
use super::dreq::issue_dreq;
use super::id::{CmIdPriv, Locked};
use super::rej::send_rej_locked;
use super::send::cancel_msg;
use super::sidr::reject_sidr_req_locked;
use super::tables::{addresses, quarantine};
use super::timewait::{enter_timewait, remove_remote};
use super::worker::{cancel_timer, in_handler_of};
use crate::abi::ib_cm_rej_reason::{IB_CM_REJ_CONSUMER_DEFINED, IB_CM_REJ_TIMEOUT};
use crate::abi::ib_cm_state::*;
use crate::abi::ib_qp_type::IB_QPT_XRC_TGT;

/// Destroys `id`. `err` is what its handler returned (0 for a user call);
/// `-ENOMEM` from a REQ handler lets the peer retry instead of rejecting.
///
/// Waits for a running handler of this id (or of a new id it made as a
/// listener), unless called from inside it: then the handler finishes after
/// the id is gone and no further event is delivered.
pub fn destroy_id(id: &Arc<CmIdPriv>, err: i32) {
    if !begin_destroy(id) {
        return;
    }
    // No handler of this id starts now; wait for one that runs.
    if !in_handler_of(id.addr()) {
        drop(id.callback.lock());
    }
    let mut l = id.lock();
    loop {
        match l.state() {
            IB_CM_LISTEN => stop_listening(&mut l),
            IB_CM_SIDR_REQ_SENT => {
                cancel_msg(&mut l);
                l.set_state(IB_CM_IDLE, "destroyed");
            }
            IB_CM_SIDR_REQ_RCVD => reject_sidr_req_locked(&mut l),
            IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD => {
                cancel_msg(&mut l);
                let guid = id.device.node_guid.to_be_bytes();
                let _ = send_rej_locked(&mut l, IB_CM_REJ_TIMEOUT as u16, &guid, &[]);
            }
            IB_CM_REQ_RCVD if err == -libc::ENOMEM => forget_req_locked(&mut l),
            IB_CM_REQ_RCVD | IB_CM_REP_SENT | IB_CM_MRA_REP_RCVD | IB_CM_MRA_REQ_SENT
            | IB_CM_REP_RCVD | IB_CM_MRA_REP_SENT => {
                cancel_msg(&mut l);
                let reason = IB_CM_REJ_CONSUMER_DEFINED as u16;
                let _ = send_rej_locked(&mut l, reason, &[], &[]);
            }
            IB_CM_ESTABLISHED if l.inner.qp_type == IB_QPT_XRC_TGT as i32 => {
                l.set_state(IB_CM_IDLE, "destroyed");
            }
            IB_CM_ESTABLISHED => {
                // Timewait first: the DREQ may reach the peer at once.
                enter_timewait(&mut l, "destroyed");
                issue_dreq(&l);
            }
            IB_CM_DREQ_SENT => {
                cancel_msg(&mut l);
                enter_timewait(&mut l, "destroyed");
            }
            IB_CM_DREQ_RCVD => {
                let _ = send_drep_locked(&mut l, &[]);
            }
            IB_CM_TIMEWAIT => l.set_state(IB_CM_IDLE, "destroyed"),
            IB_CM_IDLE => break,
        }
    }
    cancel_msg(&mut l);
    remove_remote(&mut l);
    if let Some(timer) = l.inner.timewait_timer.take() {
        cancel_timer(&id.device.cm, timer);
    }
    l.inner.private_data = Box::default();
    // Destroyed before its request event was taken: its backlog place is free.
    l.inner.backlog_slot = None;
    let local_id = l.inner.local_id;
    drop(l);
    {
        // After this no MAD finds the id: a retransmitted DREQ gets a
        // stateless DREP.
        let mut t = id.device.cm.tables();
        addresses(id.addr()).remove(&id.addr());
        t.local.remove(&local_id);
    }
    id.device.ids.fetch_sub(1, Ordering::AcqRel);
    quarantine(id);
}

/// A REQ_RCVD id forgets its REQ silently (`cm_destroy_id` after `-ENOMEM`):
/// no REJ, and out of the remote tables, so the peer's REQ retry is a new
/// request, not a duplicate.
pub(super) fn forget_req_locked(l: &mut Locked) {
    remove_remote(l);
    l.set_state(IB_CM_IDLE, "request forgotten");
}

/// Marks `id` destroyed, under its lock so that no entry point that runs
/// later works on it; false if it is not to be destroyed now (a shared
/// listener still used, or destroyed already).
fn begin_destroy(id: &Arc<CmIdPriv>) -> bool {
    let mut l = id.lock();
    // A listener shared through ib_cm_insert_listen lives until its last
    // user destroys it.
    if l.state() == IB_CM_LISTEN && l.inner.listen_sharecount > 1 {
        l.inner.listen_sharecount -= 1;
        return false;
    }
    if id.destroyed.swap(true, Ordering::AcqRel) {
        return false;
    }
    if l.state() == IB_CM_LISTEN {
        // At once, as cm_destroy_id does, not after waiting for a handler:
        // no REQ finds the listener from now on, and its service ID is free.
        stop_listening(&mut l);
    }
    true
}

/// A listener leaves the listen table and becomes IDLE.
fn stop_listening(l: &mut Locked) {
    let key = (Arc::as_ptr(&l.id.device) as usize, l.inner.service_id);
    l.id.device.cm.tables().listen.remove(&key);
    l.id.device.switch_unlisten(l.inner.service_id);
    l.set_state(IB_CM_IDLE, "destroyed");
}
