//! Handlers: who runs one on this thread (the worker, or `ibcm_process_events`
//! in FD mode), and a handler's run for one event (`deliver`).

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use super::queue::Worker;
use super::thread::run_work;
use crate::cm::device::Device;
use crate::cm::event::CmEvent;
use crate::cm::id::CmIdPriv;
use crate::cm::{destroy, listen};
use crate::errno::{CmResult, EBUSY, EDEADLK};
use crate::refusal::{Rule, invalid, refuse};

thread_local! {
    /// The cm_id whose handler runs on this thread, and the listener whose
    /// callback guard that handler runs under (0: none).
    pub(super) static IN_HANDLER: Cell<[usize; 2]> = const { Cell::new([0; 2]) };
    /// On a worker thread: the address of the engine's `Worker` it runs
    /// (0: none). Engines each have one.
    pub(super) static ON_WORKER: Cell<usize> = const { Cell::new(0) };
}

/// `ibcm_process_events()`: runs up to `max` of `device`'s pending handler
/// invocations on the calling thread, in order, each as the worker would
/// (`deliver`); returns how many it took from the queue (an event of an id
/// destroyed meanwhile is taken and skipped).
///
/// `-EINVAL` for `max < 1` or a device not in FD mode; `-EDEADLK` from
/// inside a handler (of any device): this thread runs that handler, and the
/// device's turn (or the handler's own id) would wait for it. Also on the
/// worker (an SA callback): it would wait for the device's turn, which an
/// application thread holds while its handler may wait for the worker.
/// Two threads calling it at once take turns.
pub fn process_device_events(device: &Device, max: i32) -> CmResult<usize> {
    let max = may_process_events(device, max)?;
    let _turn = device.events.run_turn();
    Ok(run_device_events(device, max))
}

/// `close_device`'s drain: as [`process_device_events`] with no maximum,
/// but it waits for the device's turn `bound` at most, as close waits for
/// the worker: the thread that holds the turn runs a handler, which may be
/// waiting for the closing thread. `-EBUSY` when the turn did not come.
pub fn process_device_events_within(device: &Device, bound: Duration) -> CmResult<usize> {
    let max = may_process_events(device, i32::MAX)?;
    let Some(_turn) = device.events.try_run_turn(bound) else {
        return Err(EBUSY);
    };
    Ok(run_device_events(device, max))
}

/// `max` as a count, or why this thread may not run the device's handlers.
fn may_process_events(device: &Device, max: i32) -> CmResult<usize> {
    if in_handler() || on_worker() {
        let rule = "called from a handler or an SA callback, whose thread it would wait for";
        return Err(refuse(EDEADLK, Rule::Text(rule)));
    }
    let count = usize::try_from(max)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| invalid(Rule::value("max", max, "is less than 1")))?;
    if !device.events.is_fd_mode() {
        return Err(crate::cm::event_fd::not_fd_mode());
    }
    let max = count;
    Ok(max)
}

/// Runs up to `max` pending handler invocations; the caller has the turn.
fn run_device_events(device: &Device, max: usize) -> usize {
    let mut taken = 0;
    while taken < max {
        let Some(work) = device.events.pop() else {
            break;
        };
        taken += 1;
        run_work(work);
    }
    taken
}

/// True on a worker thread (of any engine), that is inside a handler.
pub fn on_worker() -> bool {
    ON_WORKER.with(Cell::get) != 0
}

/// True on the thread of `worker` itself (not another engine's).
pub(super) fn on_worker_of(worker: &Worker) -> bool {
    ON_WORKER.with(Cell::get) == worker as *const Worker as usize
}

/// True while the calling thread runs a handler: on the worker, or in
/// `ibcm_process_events` on the application's thread.
pub fn in_handler() -> bool {
    IN_HANDLER.with(|h| h.get()[0] != 0)
}

/// True while the calling thread runs the handler of the id at `addr`, or
/// of a new id that the listener at `addr` made: that thread holds the id's
/// callback guard already.
pub fn in_handler_of(addr: usize) -> bool {
    addr != 0 && IN_HANDLER.with(|h| h.get().contains(&addr))
}

/// A panic dropped `event` of `id`. A new id's REQ_RECEIVED or
/// SIDR_REQ_RECEIVED was the only way its user could learn of it: nobody
/// will ever answer it, so it goes silently (as after a REQ handler's
/// `-ENOMEM`), and the peer's retransmission gets another chance. The user
/// owns an id that got any other event: it stays as it is.
pub(super) fn recover_lost_event(id: &Arc<CmIdPriv>, event: &CmEvent) {
    if listen::listener_of(event).is_some() {
        destroy::destroy_id(id, -libc::ENOMEM);
    }
}

/// Runs `id`'s handler for `event` (`cm_process_work`): skipped if the id was
/// destroyed; a non-zero return destroys the id afterwards.
///
/// A new id's REQ_RECEIVED or SIDR_REQ_RECEIVED runs under its listener's
/// callback guard, as the kernel's cm_req_handler runs it holding a reference
/// on the listener: `ib_destroy_cm_id(listener)` waits for it, and once the
/// listener is destroyed no handler with its context starts; the new id is
/// then forgotten silently, so that the peer's retransmission decides.
pub(super) fn deliver(id: &Arc<CmIdPriv>, event: &CmEvent) {
    let listener = listen::listener_of(event);
    let _listener_running = listener.map(|l| l.callback.lock());
    if let Some(listener) = listener
        && listener.is_destroyed()
    {
        listen::forget_orphan(id);
        return;
    }
    let ret = {
        let _running = id.callback.lock();
        if id.is_destroyed() {
            return;
        }
        crate::cm::trace::event(id, event);
        IN_HANDLER.with(|h| h.set([id.addr(), listener.map_or(0, |l| l.addr())]));
        let ret = (id.handler)(id, event);
        IN_HANDLER.with(|h| h.set([0; 2]));
        ret
    };
    if listener.is_some() {
        listen::request_taken(id);
    }
    if ret != 0 {
        destroy::destroy_id(id, ret);
    }
}
