//! The connection manager engine: safe Rust, one file per message family,
//! named like the kernel's `drivers/infiniband/core/cm.c`.
//!
//! Locks: one mutex per cm_id (its state), one global table lock; an id lock
//! may be held while taking the table lock or queueing work, never the reverse.
//! Handlers run on the worker thread with no such lock held, under their id's
//! callback guard (and a new id's REQ handler also under its listener's,
//! taken first: `deliver`).

mod apr;
mod bounded;
pub mod counters;
mod destroy;
pub mod device;
mod drep;
mod dreq;
pub mod engine;
mod establish;
pub mod event;
mod event_fd;
#[doc(hidden)]
pub mod fuzzing;
pub mod id;
mod lap;
mod listen;
mod lost;
mod mra;
pub use ib_cm_engine::path;
pub mod qp_attr;
pub(crate) mod recv;
mod rej;
mod rep;
mod req;
mod rtu;
mod send;
mod sidr;
mod tables;
mod timewait;
mod trace;
pub(crate) mod worker;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use bounded::{MAX_DISCONNECT_TIMEOUT_MS, set_disconnect_timeout};
pub use destroy::destroy_id;
pub use drep::send_drep;
pub use dreq::send_dreq;
pub use establish::notify;
pub use listen::{CM_ASSIGN_SERVICE_ID, LISTEN_BACKLOG, insert_listen, listen};
pub use mra::{prepare_mra, send_mra};
pub use qp_attr::{QpAttr, init_qp_attr};
pub use rej::send_rej;
pub use rep::{RepParams, send_rep};
pub use req::{ReqParams, send_req};
pub use rtu::send_rtu;
pub use sidr::{SidrRepParams, SidrReqParams, send_sidr_rep, send_sidr_req};
pub use trace::{CommIds, state_name};
pub use worker::process_device_events;

use device::Device;
pub use engine::{Clock, Cm, VirtualClock};
use id::{CmIdInner, CmIdPriv, Handler};

use crate::abi::ibcm_event_mode;
use crate::errno::{CmResult, EBUSY, EINVAL};
use crate::refusal::{IdCensus, Rule, refuse, refuse_with};

/// Copies private data (or an ARI) into a zeroed wire field of `N` bytes.
/// Callers checked the length; anything longer is cut, never overrun.
pub(crate) fn pd_array<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = data.len().min(N);
    out[..n].copy_from_slice(&data[..n]);
    out
}

/// A new id of `device`; `-EINVAL` once the device is closed. The id count
/// is raised under the table lock `close_device` checks it under, so a close
/// either sees the id or the id sees the device gone.
fn new_id(device: Arc<Device>, handler: Handler) -> CmResult<Arc<CmIdPriv>> {
    let local_id = {
        let mut t = device.cm.tables();
        if !t.devices.contains_key(&(Arc::as_ptr(&device) as usize)) {
            return Err(refuse(EINVAL, Rule::Text("the device is being closed")));
        }
        let local_id = t
            .alloc_local_id(device.id_slice())
            .ok_or_else(|| refuse(EBUSY, Rule::Text("no local comm ID is free")))?;
        device.ids.fetch_add(1, Ordering::AcqRel);
        local_id
    };
    let inner = CmIdInner {
        local_id,
        ..CmIdInner::default()
    };
    Ok(Arc::new_cyclic(|me| {
        CmIdPriv::new(me.clone(), device, handler, inner)
    }))
}

/// A request (`ib_send_cm_req`, `ib_send_cm_sidr_req`) on an id back in
/// IDLE after one it sent or answered before: the id starts afresh, as a new
/// id would. It gets a new local comm ID, so that nothing meant for the old
/// connection (a REP, REJ or DREQ still on its way, or the peer's timewait
/// of it) can match the new one; and it forgets the old connection's peer
/// (the remote comm ID a REP is matched on, the remote QPN and CA GUID),
/// addresses, alternate path, LAP state, stored private data and timers.
/// What the user set on the id (handler, context, disconnect bound) stays.
/// The kernel keeps both comm IDs, so there a REP for the second REQ finds
/// nothing (docs/kernel-differences.md). `-EBUSY` when no comm ID is free.
fn renew_identity(l: &mut id::Locked) -> CmResult {
    if !l.inner.used {
        return Ok(()); // a new id (or one whose request never left)
    }
    let me = l.id.me.upgrade().ok_or(EINVAL)?;
    let local_id = {
        let mut t = l.id.device.cm.tables();
        let local_id = t.alloc_local_id(l.id.device.id_slice()).ok_or(EBUSY)?;
        t.local.remove(&l.inner.local_id);
        t.local.insert(local_id, me);
        local_id
    };
    send::cancel_msg(l);
    timewait::remove_remote(l);
    if let Some(timer) = l.inner.timewait_timer.take() {
        worker::cancel_timer(&l.id.device.cm, timer);
    }
    *l.inner = CmIdInner {
        local_id,
        disconnect_timeout: l.inner.disconnect_timeout,
        ..CmIdInner::default()
    };
    l.id.public
        .local_id
        .store(local_id.to_be(), Ordering::Relaxed);
    l.set_remote_id(0);
    l.set_lap_state(crate::abi::ib_cm_lap_state::IB_CM_LAP_UNINIT);
    Ok(())
}

/// Drops an id that was never made visible (a SIDR request nobody serves).
fn forget_unfinalized(id: &Arc<CmIdPriv>) {
    id.device.ids.fetch_sub(1, Ordering::AcqRel);
}

/// Makes `id` visible to MADs and to C (`cm_finalize_id`).
fn finalize_id(id: &Arc<CmIdPriv>) {
    let local_id = id.lock().inner.local_id;
    id.device.cm.tables().insert_id(local_id, id);
}

/// `ib_create_cm_id()`: a new IDLE id whose events go to `handler`;
/// `-EINVAL` for a device that is not (or no longer) open.
pub fn create_id(device: &Arc<Device>, handler: Handler) -> CmResult<Arc<CmIdPriv>> {
    let id = new_id(device.clone(), handler)?;
    finalize_id(&id);
    Ok(id)
}

/// The id a REQ creates for `listener`'s user (made visible once set up);
/// `-EINVAL` if the device is being closed.
fn create_child_id(listener: &Arc<CmIdPriv>) -> CmResult<Arc<CmIdPriv>> {
    new_id(listener.device.clone(), listener.handler.clone())
}

/// The live id C knows by `addr`; `None` for anything else, including a
/// destroyed id.
pub fn lookup_id(addr: usize) -> Option<Arc<CmIdPriv>> {
    tables::addresses(addr).get(&addr).cloned()
}

/// `ibcm_open_device()`: `name` in the process's engine.
pub fn open_device(name: &str) -> CmResult<Arc<Device>> {
    open_device_in(Cm::process(), name)
}

/// Opens `name` in `cm`.
pub fn open_device_in(cm: &Arc<Cm>, name: &str) -> CmResult<Arc<Device>> {
    // A device is open at most once per process, whichever engine has it (a
    // second CM agent on a port would be refused by the kernel anyway).
    if !tables::claim_name(name) {
        return Err(refuse(EBUSY, Rule::Text("already open in this process")));
    }
    // Received MADs go to the worker: no device without one (-EAGAIN).
    let opened = worker::start(cm).and_then(|()| Device::open(cm, name));
    match opened {
        Ok(device) => {
            register_device(&device);
            Ok(device)
        }
        Err(e) => {
            tables::release_name(name);
            Err(e)
        }
    }
}

/// Makes an opened device the engine's: ids can be made on it.
fn register_device(device: &Arc<Device>) {
    device
        .cm
        .tables()
        .devices
        .insert(Arc::as_ptr(device) as usize, device.clone());
}

/// A loop device with a RoCE port, registered like `open_device` (tests).
#[cfg(test)]
pub fn open_roce_loop_device(name: &str) -> CmResult<Arc<Device>> {
    if !tables::claim_name(name) {
        return Err(EBUSY);
    }
    let device = Device::open_loop_as_roce(Cm::process(), name)?;
    register_device(&device);
    Ok(device)
}

/// A loop device with the CA ACK delay `ack_delay`, registered like
/// `open_device` (tests).
#[cfg(test)]
pub fn open_loop_device_with_ack_delay(name: &str, ack_delay: u8) -> CmResult<Arc<Device>> {
    if !tables::claim_name(name) {
        return Err(EBUSY);
    }
    let device = Device::open_loop_with_ack_delay(Cm::process(), name, ack_delay)?;
    register_device(&device);
    Ok(device)
}

/// The open device of the process's engine that C knows by `addr`.
pub fn lookup_device(addr: usize) -> Option<Arc<Device>> {
    Cm::process().tables().devices.get(&addr).cloned()
}

/// How long `close_device` waits for the worker to finish the work queued
/// before it, when ids of the device remain.
pub const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// `ibcm_close_device()`: `-EBUSY` while cm_ids of the device remain.
///
/// Some ids the user never saw, and cannot destroy, go only when the worker
/// reaches the work queued for them: a new id whose REQ_RECEIVED (or
/// SIDR_REQ_RECEIVED) is still queued, to be refused when its listener is
/// gone. So when ids remain, close first lets the worker finish the work
/// queued before the call ([`CLOSE_WAIT`] at most), then looks again. Not on
/// the worker (a handler calling close): it would wait for itself; nor from
/// an FD-mode device's handler, which the documentation promises the same.
pub fn close_device(device: &Arc<Device>) -> CmResult {
    if device.id_count() != 0 && !worker::on_worker() && !worker::in_handler() {
        worker::wait_for_queued_work(&device.cm, CLOSE_WAIT);
        // In FD mode the worker only queued them: the events pending for the
        // device run here, as `ibcm_process_events` would run them (none from
        // inside a handler: -EDEADLK, and then -EBUSY below). The device's
        // turn is waited for as the worker is, CLOSE_WAIT at most: the
        // thread that has it may run a handler that waits for this one.
        if device.id_count() != 0 && device.events.is_fd_mode() {
            let _ = worker::process_device_events_within(device, CLOSE_WAIT);
        }
    }
    let mut t = device.cm.tables();
    if device.id_count() != 0 {
        drop(t);
        return Err(refuse_with(EBUSY, || Rule::IdsLeft(census(device))));
    }
    if t.devices.remove(&(Arc::as_ptr(device) as usize)).is_none() {
        return Err(refuse(EINVAL, Rule::Text("closed by another thread")));
    }
    t.release_when_no_device();
    drop(t);
    device.close();
    tables::release_name(&device.name);
    tables::quarantine_device(device);
    Ok(())
}

/// The ids of `device` by state, as C can see them (a listener of
/// `ib_cm_insert_listen` too; a new id not yet handed out is only counted).
fn census(device: &Arc<Device>) -> IdCensus {
    let mut census = IdCensus {
        total: device.id_count(),
        ..IdCensus::default()
    };
    tables::for_each_id(|id| {
        if Arc::ptr_eq(&id.device, device)
            && let Some(n) = census.by_state.get_mut(id.state() as usize)
        {
            *n += 1;
        }
    });
    census
}

/// `ibcm_set_event_mode()`: where `device`'s handlers run from now on.
/// `-EBUSY` while cm_ids of the device exist (checked under the table lock
/// ids are created under, so none appears meanwhile): an id's events must
/// all go one way, or they could run out of order.
pub fn set_event_mode(device: &Arc<Device>, mode: ibcm_event_mode) -> CmResult {
    let t = device.cm.tables();
    if device.id_count() != 0 {
        drop(t);
        let rule = Rule::Text("cm_ids of the device exist: set the mode before the first");
        return Err(refuse(EBUSY, rule));
    }
    let stale = device
        .events
        .set_mode(mode == ibcm_event_mode::IBCM_EVENTS_FD)?;
    drop(t);
    drop(stale);
    Ok(())
}

/// The live ids of `device` whose C-visible `context` is `context` (the
/// Rust API marks the ids it leaves to the CM so).
pub fn ids_with_context(device: &Arc<Device>, context: usize) -> Vec<Arc<CmIdPriv>> {
    let mut ids = Vec::new();
    tables::for_each_id(|id| {
        if Arc::ptr_eq(&id.device, device) && id.public.context.load(Ordering::Relaxed) == context {
            ids.push(id.clone());
        }
    });
    ids
}

/// How many cm_ids exist in the process's engine (all devices): 0 when
/// everything was destroyed. Counted per device, since not every id has a
/// local comm ID in the table (`ib_cm_insert_listen`'s listeners have none,
/// as in the kernel).
pub fn id_count() -> usize {
    Cm::process().id_count()
}

/// (queued work items, armed timers) of the process's engine: both zero
/// when the library is idle.
pub fn pending() -> (usize, usize) {
    Cm::process().pending()
}
#[cfg(test)]
pub(crate) mod tests;
