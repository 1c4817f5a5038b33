//! A device's events for the application's own event loop
//! (`IBCM_EVENTS_FD`): the handler invocations that the worker would make for
//! the device's ids wait here instead, and `ibcm_process_events()` runs them
//! on the caller's thread.
//!
//! This is a second way to drain the same ordered stream of events, not a
//! second engine: received MADs, timers and retransmissions stay on the
//! worker, which queues events here exactly where it would have run them. All
//! events of one id go to one queue, so they keep their order.
//!
//! The eventfd is level-triggered by construction: its counter is non-zero
//! exactly while the queue is non-empty (both change under one lock), so it
//! polls readable while events are pending and stops once they have run.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::worker::Work;
use crate::errno::{CmResult, EINVAL, ENOMEM, Errno};
use crate::refusal::{Rule, refuse};

/// One device's delivery mode and, in FD mode, its pending events.
#[derive(Default)]
pub struct EventQueue {
    state: Mutex<State>,
    /// Held by the thread running this device's handlers: concurrent
    /// `ibcm_process_events` calls take turns, so handlers of one id never
    /// overlap and run in order whichever thread calls.
    running: Mutex<()>,
}

#[derive(Default)]
struct State {
    fd_mode: bool,
    work: VecDeque<Work>,
    /// Made by the first switch to FD mode and kept until the device closes:
    /// the application may still have it in its epoll set.
    fd: Option<File>,
    /// Set by `close`: the fd is gone, nothing is queued any more.
    closed: bool,
}

/// `EINVAL` for a call that needs a device in FD mode.
pub(super) fn not_fd_mode() -> Errno {
    refuse(
        EINVAL,
        Rule::Text("in IBCM_EVENTS_WORKER mode, needs IBCM_EVENTS_FD"),
    )
}

impl EventQueue {
    /// Switches the mode. The caller made sure no id of the device exists, so
    /// whatever is still queued belongs to destroyed ids (whose handlers
    /// would be skipped): returned for the caller to drop once it holds no
    /// lock.
    pub fn set_mode(&self, fd_mode: bool) -> CmResult<Vec<Work>> {
        let mut s = self.state.lock();
        if s.closed {
            return Err(refuse(EINVAL, Rule::Text("the device is being closed")));
        }
        if fd_mode && s.fd.is_none() {
            let fd =
                crate::os::sys::eventfd().map_err(|e| e.raw_os_error().map_or(ENOMEM, Errno))?;
            s.fd = Some(fd);
        }
        s.fd_mode = fd_mode;
        Ok(take_all(&mut s))
    }

    pub fn is_fd_mode(&self) -> bool {
        self.state.lock().fd_mode
    }

    /// The eventfd; `-EINVAL` unless the device is in FD mode.
    pub fn fd(&self) -> CmResult<RawFd> {
        let s = self.state.lock();
        match &s.fd {
            Some(fd) if s.fd_mode => Ok(fd.as_raw_fd()),
            _ => Err(not_fd_mode()),
        }
    }

    /// A descriptor of its own for the eventfd, for an owner that may keep it
    /// registered with a reactor after the device closes its own (the Rust
    /// API's async driver); `-EINVAL` unless the device is in FD mode.
    pub fn dup_fd(&self) -> CmResult<OwnedFd> {
        let s = self.state.lock();
        match &s.fd {
            Some(fd) if s.fd_mode => fd
                .try_clone()
                .map(OwnedFd::from)
                .map_err(|e| e.raw_os_error().map_or(ENOMEM, Errno)),
            _ => Err(not_fd_mode()),
        }
    }

    /// Queues a handler invocation in FD mode; gives it back in worker mode.
    /// On a closed device it is dropped: the device has no ids left.
    pub fn push(&self, work: Work) -> Result<(), Work> {
        let mut s = self.state.lock();
        if !s.fd_mode {
            let closed = s.closed;
            drop(s);
            return if closed { Ok(()) } else { Err(work) };
        }
        // Queued (and so counted by `queued`) as the fd turns readable,
        // under one lock: whoever sees the fd readable sees the event in
        // stats.
        if s.work.is_empty() {
            signal(&s);
        }
        s.work.push_back(work);
        Ok(())
    }

    /// How many events are pending (`ibcm_get_stats`'s `queued` counts them
    /// with the worker's).
    pub fn queued(&self) -> usize {
        self.state.lock().work.len()
    }

    /// The next pending event; the fd stops being readable with the last.
    pub fn pop(&self) -> Option<Work> {
        let mut s = self.state.lock();
        let work = s.work.pop_front()?;
        if s.work.is_empty() {
            clear(&s);
        }
        Some(work)
    }

    /// Takes this device's turn to run handlers (see `running`).
    pub fn run_turn(&self) -> MutexGuard<'_, ()> {
        self.running.lock()
    }

    /// The turn, waited for `bound` at most (`close_device`).
    pub fn try_run_turn(&self, bound: Duration) -> Option<MutexGuard<'_, ()>> {
        self.running.try_lock_for(bound)
    }

    /// The device is closing (no id is left): closes the fd and gives back
    /// what is queued, for the caller to drop once it holds no lock.
    pub fn close(&self) -> Vec<Work> {
        let mut s = self.state.lock();
        s.closed = true;
        s.fd_mode = false;
        s.fd = None;
        take_all(&mut s)
    }
}

fn take_all(s: &mut State) -> Vec<Work> {
    let work: Vec<Work> = s.work.drain(..).collect();
    clear(s);
    work
}

/// Makes the fd readable (the queue is about to be non-empty). An eventfd
/// write fails only when the counter would overflow, which one write per
/// empty-to-non-empty change never reaches.
fn signal(s: &State) {
    if let Some(mut fd) = s.fd.as_ref() {
        let _ = fd.write(&1u64.to_ne_bytes());
    }
}

/// Makes the fd unreadable (the queue is empty). `EAGAIN` when it was not
/// readable is fine.
fn clear(s: &State) {
    if let Some(mut fd) = s.fd.as_ref() {
        let _ = fd.read(&mut [0u8; 8]);
    }
}
