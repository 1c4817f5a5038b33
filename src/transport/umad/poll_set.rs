//! The CM worker's set of kernel umad ports, which it reads on its own thread.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::io::Reader;
use super::{last_errno, worker_reads};
use crate::errno::CmResult;
use crate::transport::batch::{self, BURST};

/// MADs the worker reads from one port per look at it, at most: it drains
/// a port (the read that finds it empty ends the look) so that a backlog
/// waits in the device's receive queue, where [`RX_QUEUE_CAP`] bounds and
/// counts it as a reader thread's, rather than in ib_umad's list, whose
/// overflow nobody sees; the bound keeps a flooding peer from holding the
/// worker in one look. Between batches of a backlog the worker looks again
/// (`worker::run`), so ib_umad's list holds what arrives in one batch.
///
/// [`RX_QUEUE_CAP`]: crate::cm::worker::RX_QUEUE_CAP
pub(super) const WORKER_DRAIN: usize = 16 * BURST;

/// The kernel umad ports the CM worker reads on its own thread: it waits in
/// [`worker_poll`] on their fds and an eventfd of its own instead of a
/// reader thread per port handing it each burst (a thread switch per burst,
/// and where the two share a CPU, per MAD). umad2sim's ports and the MAD
/// switch daemon's keep their reader threads, and so does every port with
/// `IBCM_UMAD_READER_THREADS=1`: then this set is never made.
///
/// A port leaves the set (`close`) before its fd is closed. The worker polls
/// a snapshot of the ports and says which generation of the set it holds;
/// `deregister` makes a new generation, wakes the worker and waits until it
/// holds no older snapshot. The reads after a poll, and [`read_ports_now`]'s,
/// happen under the set's lock, which `deregister` takes too, so a port is
/// never read once it has left; and the MADs of one port are queued in the
/// order read whichever thread reads them.
pub(super) struct PollSet {
    pub(super) state: Mutex<PollState>,
    /// Signalled when the worker lets go of a snapshot.
    pub(super) released: Condvar,
    /// The worker's eventfd: [`wake_worker_poll`], `register` and
    /// `deregister` write it.
    pub(super) wake: OwnedFd,
    /// How many ports are in the set, for a look without the lock.
    pub(super) count: AtomicUsize,
}

#[derive(Default)]
pub(super) struct PollState {
    pub(super) ports: Vec<Arc<Reader>>,
    pub(super) generation: u64,
    /// The generation of the snapshot the worker holds, if it holds one.
    pub(super) holding: Option<u64>,
}

/// `None` if no eventfd could be made: every port gets a reader thread then.
static POLL_SET: LazyLock<Option<PollSet>> = LazyLock::new(PollSet::new);

/// Set once a port has joined the set: until then (and always with
/// `IBCM_UMAD_READER_THREADS=1`) the worker's looks at it are one load, and
/// never make it.
static POLL_SET_IN_USE: AtomicBool = AtomicBool::new(false);

/// The set for a device that opens, made on first use; `None` with
/// `IBCM_UMAD_READER_THREADS=1`.
pub(super) fn poll_set() -> Option<&'static PollSet> {
    worker_reads().then(|| POLL_SET.as_ref()).flatten()
}

/// The set, once a port has been in it.
fn poll_set_in_use() -> Option<&'static PollSet> {
    if !POLL_SET_IN_USE.load(Ordering::Acquire) {
        return None;
    }
    POLL_SET.as_ref()
}

impl PollSet {
    /// An empty set; `None` if no eventfd could be made.
    pub(super) fn new() -> Option<Self> {
        // SAFETY: eventfd with constant flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        (fd >= 0).then(|| PollSet {
            state: Mutex::default(),
            released: Condvar::new(),
            // SAFETY: a new fd that nothing else owns.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            count: AtomicUsize::new(0),
        })
    }

    /// Adds a port; a `ppoll` in progress returns to take it in.
    pub(super) fn register(&self, reader: Arc<Reader>) {
        let mut state = self.state.lock();
        state.ports.push(reader);
        self.count.store(state.ports.len(), Ordering::SeqCst);
        POLL_SET_IN_USE.store(true, Ordering::Release);
        self.wake();
    }

    /// Stops polling and reading `readers`: once it returns, the worker
    /// touches none of their fds, and they may be closed.
    pub(super) fn deregister(&self, readers: &[Arc<Reader>]) {
        let mut state = self.state.lock();
        state
            .ports
            .retain(|p| !readers.iter().any(|r| Arc::ptr_eq(p, r)));
        self.count.store(state.ports.len(), Ordering::SeqCst);
        state.generation += 1;
        let generation = state.generation;
        if state.holding.is_some_and(|h| h < generation) {
            // The worker polls an older snapshot (or is about to): woken,
            // it reads (under this lock, once the wait lets go of it) and
            // lets go of the snapshot.
            self.wake();
            while state.holding.is_some_and(|h| h < generation) {
                self.released.wait(&mut state);
            }
        }
    }

    pub(super) fn wake(&self) {
        // SAFETY: writes 8 bytes to the eventfd this set owns.
        unsafe { libc::eventfd_write(self.wake.as_raw_fd(), 1) };
    }

    /// Reads each of `ready` (with the lock held), a burst of
    /// [`WORKER_DRAIN`] at most, in one [`batch::receive_batch`]; a port
    /// whose fd reports an error, or whose read fails, is gone
    /// (`Reader::port_gone`) and leaves the set.
    fn read_ready(&self, state: &mut PollState, ready: &[(Arc<Reader>, libc::c_short)]) {
        let mut gone = Vec::new();
        batch::receive_batch(|| {
            for (port, revents) in ready {
                let failed = if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                    // What ib_umad's poll says once the device is removed.
                    Some(crate::errno::EIO)
                } else if revents & libc::POLLIN != 0 {
                    port.receive_burst().err()
                } else {
                    None
                };
                if let Some(e) = failed {
                    port.port_gone(e);
                    gone.push(port.clone());
                }
            }
        });
        if !gone.is_empty() {
            state
                .ports
                .retain(|p| !gone.iter().any(|g| Arc::ptr_eq(p, g)));
            self.count.store(state.ports.len(), Ordering::SeqCst);
        }
    }
}

/// The ports the worker polls, held from before its `ppoll` until after its
/// reads; let go when dropped (also by a panic).
struct Snapshot {
    set: &'static PollSet,
    ports: Vec<Arc<Reader>>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.set.state.lock().holding = None;
        self.set.released.notify_all();
    }
}

/// Whether ports are in the worker's set: it waits in [`worker_poll`] then,
/// instead of on its condition variable. False with
/// `IBCM_UMAD_READER_THREADS=1`, one load.
pub fn worker_ports_registered() -> bool {
    poll_set_in_use().is_some_and(|set| set.count.load(Ordering::SeqCst) != 0)
}

/// Wakes the worker from [`worker_poll`] (or makes its next one return at
/// once).
pub fn wake_worker_poll() {
    if let Some(set) = poll_set_in_use() {
        set.wake();
    }
}

/// The CM worker's wait while ports are in its set: one `ppoll` on its
/// eventfd and every port's fd, `timeout` at most (`None`: until a port has
/// input or [`wake_worker_poll`] is called; `Some(Duration::ZERO)`: a look
/// without waiting); then what each readable port has, `WORKER_DRAIN` MADs
/// at most, goes to the port's `RecvFn` as a reader thread's does.
///
/// `Err` when `ppoll` itself fails (not `EINTR`): the caller must not call
/// again at once.
pub fn worker_poll(timeout: Option<Duration>) -> CmResult {
    poll_set_in_use().map_or(Ok(()), |set| set.poll(timeout))
}

/// Reads what the worker's ports have now, without waiting, on the calling
/// thread, and queues it: `ib_cm_notify`'s check and `close`'s wait for the
/// queued work come after the MADs the kernel received before the call, as
/// they do when a reader thread has read them (the kernel's MAD layer takes
/// a MAD off its queue pair whatever the CM's workqueue is doing).
pub fn read_ports_now() {
    if let Some(set) = poll_set_in_use() {
        set.read_now();
    }
}

impl PollSet {
    /// [`worker_poll`] on this set.
    pub(super) fn poll(&'static self, timeout: Option<Duration>) -> CmResult {
        let snapshot = {
            let mut state = self.state.lock();
            state.holding = Some(state.generation);
            Snapshot {
                set: self,
                ports: state.ports.clone(),
            }
        };
        let mut fds = Vec::with_capacity(1 + snapshot.ports.len());
        fds.push(libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(snapshot.ports.iter().map(|port| libc::pollfd {
            fd: port.fd,
            events: libc::POLLIN,
            revents: 0,
        }));
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: t.subsec_nanos().into(),
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `fds` are valid pollfds whose fds stay open while the
        // snapshot is held (`deregister` waits for it); the timespec is valid
        // or null (no timeout); the signal mask is not changed (null).
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                ts_ptr,
                std::ptr::null(),
            )
        };
        if ready < 0 {
            let e = last_errno();
            return if e.0 == libc::EINTR { Ok(()) } else { Err(e) };
        }
        if ready == 0 {
            return Ok(());
        }
        if fds[0].revents != 0 {
            let mut value = 0;
            // SAFETY: reads 8 bytes from the eventfd this set owns
            // (non-blocking).
            unsafe { libc::eventfd_read(self.wake.as_raw_fd(), &mut value) };
        }
        let ready: Vec<_> = snapshot
            .ports
            .iter()
            .zip(&fds[1..])
            .filter(|(_, fd)| fd.revents != 0)
            .map(|(port, fd)| (port.clone(), fd.revents))
            .collect();
        if !ready.is_empty() {
            let mut state = self.state.lock();
            // A port that left the set meanwhile (`deregister` waits for this
            // snapshot, its fd still open) is not read: its device is closing.
            let ready: Vec<_> = ready
                .into_iter()
                .filter(|(port, _)| state.ports.iter().any(|p| Arc::ptr_eq(p, port)))
                .collect();
            self.read_ready(&mut state, &ready);
        }
        Ok(())
    }

    /// [`read_ports_now`] on this set.
    pub(super) fn read_now(&self) {
        let mut state = self.state.lock();
        let ready: Vec<_> = state
            .ports
            .iter()
            .map(|port| (port.clone(), libc::POLLIN))
            .collect();
        self.read_ready(&mut state, &ready);
    }
}
