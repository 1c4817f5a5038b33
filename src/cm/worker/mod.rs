//! The CM's worker thread: the kernel's `ib_cm` workqueue and MAD-agent
//! completion context in one ordered queue.
//!
//! It receives MADs, fires timers, and runs handlers. One thread runs every
//! handler, so handlers of one cm_id never overlap and see events in the order
//! they were queued; no library lock is held while a handler runs.
//!
//! The worker must outlive anything a work item does: a panic in the engine
//! while it handles one MAD, event or timer drops that item (counted and
//! logged), makes good what the item stood for (`recover_lost_event`,
//! `fire` once more) and the worker goes on with the next. A C
//! handler must not unwind (it is called as `extern "C"`: C++ exceptions and
//! `longjmp` out of it are the caller's undefined behaviour), so such panics
//! come from this library's own code. The thread blocks every signal
//! (docs/threads.md).
//!
//! Here the work items; the queue they wait in and the timers in
//! `queue.rs`, the thread that runs them and its start in `thread.rs`, the
//! handler's run and who may run one in `handler.rs`, the containment of
//! panics in `panics.rs`, and the test-only fault injection in `fault.rs`.

#[cfg(test)]
pub mod fault;
mod handler;
mod panics;
mod queue;
mod thread;

pub use handler::{
    in_handler, in_handler_of, on_worker, process_device_events, process_device_events_within,
};
#[cfg(test)]
pub use panics::panicked;
pub(crate) use queue::pending;
pub use queue::{
    RX_QUEUE_CAP, Worker, arm_timer, cancel_timer, ports_changed, queue_checked, queue_device_lost,
    queue_event, queue_recv, queue_sa_callback, wait_for_queued_work,
};
pub use thread::start;

use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::device::Device;
use super::event::CmEvent;
use super::id::CmIdPriv;
use crate::transport::MadAddr;
use crate::wire::Mad;

/// Work items, processed in order.
pub enum Work {
    Recv {
        device: Arc<Device>,
        port: u8,
        addr: MadAddr,
        mad: Arc<Mad>,
        /// When it was queued: the worker may take it much later.
        arrived: Instant,
    },
    Deliver {
        id: Arc<CmIdPriv>,
        event: CmEvent,
    },
    /// An event decided on when its turn comes: `check` runs on the worker
    /// right before delivery and gives the event, or `None` to drop it
    /// (`cm_establish_handler`).
    Checked {
        id: Arc<CmIdPriv>,
        check: fn(&Arc<CmIdPriv>) -> Option<CmEvent>,
    },
    /// Tells the waiter of `wait_for_queued_work` that every item queued
    /// before this one was handled.
    Barrier(SyncSender<()>),
    /// The callback of a finished SA query (`crate::sa::query`).
    SaCallback(Box<dyn FnOnce() + Send>),
    /// The device's transport lost the wire for good: flush its ids
    /// (`lost::device_lost_handler`), after the MADs it received before.
    DeviceLost(Arc<Device>),
}

/// What a timer does when it fires.
pub enum TimerWork {
    /// The tracked MAD of `id` timed out: resend it or report the error.
    Retransmit(Weak<CmIdPriv>),
    /// Timewait of `id` is over.
    TimewaitExit(Weak<CmIdPriv>),
    /// A try of SA query `id` got no answer in time.
    SaRetry(u32),
}

// `-EAGAIN`: the worker thread cannot be started (the system is out of
// threads or memory); the next call that needs it tries again.
pub use crate::errno::EAGAIN;

#[cfg(test)]
mod tests {
    use super::thread::StartOnce;
    use super::*;

    #[test]
    fn a_worker_that_cannot_start_is_retried() {
        let once = StartOnce::new();
        let mut spawned = 0;
        let failed = once.ensure(|| {
            spawned += 1;
            Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
        });
        assert_eq!(failed, Err(EAGAIN));
        assert_eq!(
            once.ensure(|| {
                spawned += 1;
                Ok(())
            }),
            Ok(())
        );
        assert_eq!(
            once.ensure(|| {
                spawned += 1;
                Ok(())
            }),
            Ok(())
        );
        assert_eq!(spawned, 2);
    }

    #[test]
    fn a_worker_waiting_in_poll_is_woken_through_its_eventfd_by_another_engines_worker() {
        use std::sync::atomic::Ordering;
        use std::sync::mpsc::channel;

        use crate::cm::engine::{Clock, Cm};
        use crate::transport::batch::Wake;

        // A worker that reads umad ports, waiting in `ppoll` on them: only
        // its eventfd wakes it (which clears `in_poll`).
        let polling = Arc::new(Worker::new(Clock::Real, true));
        polling.in_poll.store(true, Ordering::SeqCst);
        // Work queued for it from the worker thread of another engine (a
        // handler there sending on a loop device of this engine's).
        let other = Cm::new();
        let (tx, woken) = channel();
        let target = polling.clone();
        queue_sa_callback(
            &other,
            Box::new(move || {
                assert!(on_worker());
                Wake::wake(&*target);
                tx.send(!target.in_poll.load(Ordering::SeqCst)).unwrap();
            }),
        );
        let woken = woken.recv_timeout(std::time::Duration::from_secs(10));
        assert_eq!(
            woken,
            Ok(true),
            "the eventfd of a worker in poll was not written"
        );
    }
}
