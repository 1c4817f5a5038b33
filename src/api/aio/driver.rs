//! What runs an async device's events: the runtime-agnostic core that a
//! reactor drives (the tokio adapter is one such reactor).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::cm;

/// Runs the CM's events of one [`Device`](super::Device) of the async API:
/// the handlers the engine queued for the device in its event-fd mode
/// (`IBCM_EVENTS_FD`), which move each event to the queue of its listener or
/// connection and wake the futures waiting there.
///
/// It is runtime-agnostic: whatever reactor the program has waits until
/// [its descriptor](Driver::as_fd) (an eventfd, level-triggered: readable
/// while events are pending) is readable, then calls
/// [`run_pending`](Driver::run_pending), until that returns `None` (the
/// device closed). `Device::open_tokio` (feature `tokio`) does
/// this on tokio's reactor; with another runtime:
///
/// ```no_run
/// # fn wait_readable(_fd: std::os::fd::BorrowedFd<'_>) {}
/// # use std::os::fd::AsFd;
/// let (device, driver) = ib_cm::aio::Device::open("loop0")?;
/// // In a task of the program's runtime:
/// loop {
///     wait_readable(driver.as_fd()); // the runtime's readiness wait
///     if driver.run_pending(64).is_none() {
///         break; // the device closed
///     }
/// }
/// # Ok::<(), ib_cm::Error>(())
/// ```
///
/// Dropping it leaves the events to whoever closes the device (close runs
/// what is still queued); the futures of the device then wait in vain.
pub struct Driver {
    pub(super) engine: Arc<cm::device::Device>,
    /// A descriptor of its own for the device's eventfd: a reactor may keep
    /// it registered after the device closed its own.
    pub(super) fd: OwnedFd,
    pub(super) stop: Arc<StopSignal>,
}

impl Driver {
    /// Runs up to `max` of the device's pending events on this thread, in
    /// order (each moves an event to its queue and wakes its futures; none
    /// waits). Returns how many it ran (0: nothing was pending), or `None`
    /// once the device is closed, or in a forked child: nothing more will
    /// come.
    ///
    /// When it ran fewer than `max`, nothing was left pending, and the
    /// descriptor is not readable until the next event comes.
    pub fn run_pending(&self, max: usize) -> Option<usize> {
        // In a forked child the device is the parent's: nothing runs here,
        // not even the parent's queued handlers, and no lock is taken
        // (fork_tests::in_a_forked_child_async_waits_end_and_the_driver_stops).
        if crate::os::fork::in_forked_child() {
            return None;
        }
        let max = i32::try_from(max.max(1)).unwrap_or(i32::MAX);
        // Refused only once the device left FD mode, which is its close (or
        // from inside a handler, which never runs user code here).
        cm::process_device_events(&self.engine, max).ok()
    }

    /// Whether the device is closed (its last handle went).
    pub fn is_closed(&self) -> bool {
        self.stop.is_stopped() || crate::os::fork::in_forked_child()
    }

    /// `Ready` once the device is closed; until then the task is woken when
    /// it closes.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        // Closed for a forked child: its driver loop ends.
        if crate::os::fork::in_forked_child() {
            return Poll::Ready(());
        }
        self.stop.poll(cx)
    }
}

impl AsFd for Driver {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Driver {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("device", &self.engine.name)
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

/// Set when an async device closes; wakes its driver.
#[derive(Default)]
pub(crate) struct StopSignal {
    stopped: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl StopSignal {
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(waker) = self.waker.lock().take() {
            waker.wake();
        }
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut waker = self.waker.lock();
        // Checked under the lock `stop` takes after setting the flag: a stop
        // is either seen here or wakes the waker set here.
        if self.is_stopped() {
            return Poll::Ready(());
        }
        match &mut *waker {
            Some(w) => w.clone_from(cx.waker()),
            None => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}
