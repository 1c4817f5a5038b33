//! The connection manager as a value: what the kernel keeps in cm.c's one
//! `static struct ib_cm cm` (the lookup tables, the workqueue and its
//! timers) plus the SA client's query table and path cache, in one [`Cm`].
//!
//! A process may hold several: each has its own tables, worker thread,
//! timers and clock, and its devices and ids never see another's. The C API
//! has no context handle, so it uses [`Cm::process`], made on first use;
//! the Rust API and the tests may build their own ([`Cm::new`],
//! [`Cm::with_clock`]). What stays process-wide is what a C pointer is
//! checked against (`tables::addresses`), since C has no engine to name.

use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use super::device::Device;
use super::tables::Tables;
use super::worker::{self, Worker};
use crate::sa::cache::{Config, PathCache};
use crate::sa::query;

/// One connection manager: tables, worker, timers, SA queries, path cache.
pub struct Cm {
    tables: Mutex<Tables>,
    pub(super) worker: Arc<Worker>,
    pub(crate) sa_queries: Mutex<query::Table>,
    /// Made at the first path lookup: `IBCM_PATH_CACHE_TTL_MS` is read
    /// then (ib_cm(7)), not when the engine is.
    path_cache: OnceLock<Arc<PathCache>>,
    /// This engine, for the worker thread it starts.
    pub(super) me: Weak<Cm>,
}

static PROCESS: LazyLock<Arc<Cm>> = LazyLock::new(|| Cm::build(Clock::Real, true));

impl Cm {
    /// The process's engine: the one the C API works in, and the Rust API's
    /// unless it is given another. Its worker reads the kernel's umad ports
    /// itself (one `ppoll` over all of them); an engine of its own gives
    /// each umad port a reader thread.
    pub fn process() -> &'static Arc<Cm> {
        &PROCESS
    }

    /// A new engine on the real clock, independent of every other.
    pub fn new() -> Arc<Cm> {
        Self::build(Clock::Real, false)
    }

    /// A new engine whose timers run on `clock` (tests: a
    /// [`VirtualClock`] moves only when told).
    pub fn with_clock(clock: Clock) -> Arc<Cm> {
        Self::build(clock, false)
    }

    fn build(clock: Clock, reads_umad: bool) -> Arc<Cm> {
        let cm = Arc::new_cyclic(|me| Cm {
            tables: Mutex::new(Tables::new()),
            worker: Arc::new(Worker::new(clock.clone(), reads_umad)),
            sa_queries: Mutex::default(),
            path_cache: OnceLock::new(),
            me: me.clone(),
        });
        if let Clock::Virtual(v) = &clock {
            v.watch(&cm.worker);
        }
        cm
    }

    /// The lookup tables (`cm.lock`). Lock order: an id lock may be held
    /// while taking this, never the reverse.
    pub fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock()
    }

    /// The time on this engine's clock.
    pub fn now(&self) -> Instant {
        self.worker.clock.now()
    }

    /// The path cache `ibcm_init_path` asks on InfiniBand ports.
    pub fn path_cache(&self) -> &Arc<PathCache> {
        self.path_cache
            .get_or_init(|| Arc::new(PathCache::new(Config::from_env())))
    }

    /// Whether the path cache was made (tests).
    #[cfg(test)]
    pub fn path_cache_made(&self) -> bool {
        self.path_cache.get().is_some()
    }

    /// Whether the calling thread is this engine's worker (another
    /// engine's is not: this one's timers still fire meanwhile).
    pub fn on_its_worker(&self) -> bool {
        self.worker.is_current()
    }

    /// Whether this engine's worker reads the kernel's umad ports itself.
    pub fn reads_umad(&self) -> bool {
        self.worker.reads_umad
    }

    /// (queued work items, armed timers): both zero when the engine is idle.
    /// Events waiting in FD-mode devices count as queued.
    pub fn pending(&self) -> (usize, usize) {
        let (queued, timers) = worker::pending(self);
        let devices: Vec<Arc<Device>> = self.tables().devices.values().cloned().collect();
        let fd_events: usize = devices.iter().map(|d| d.events.queued()).sum();
        (queued + fd_events, timers)
    }

    /// How many cm_ids of this engine exist: 0 when everything was
    /// destroyed.
    pub fn id_count(&self) -> usize {
        self.tables().devices.values().map(|d| d.id_count()).sum()
    }
}

impl Drop for Cm {
    fn drop(&mut self) {
        // Nothing can queue work any more (devices and ids hold the engine):
        // the worker thread, if one started, runs what is queued (SA
        // callbacks of a flush hold no engine) and ends.
        self.worker.stop();
    }
}

/// Where an engine's timers get the time.
#[derive(Clone)]
pub enum Clock {
    /// `Instant::now()`.
    Real,
    /// A clock that moves only when [`VirtualClock::advance`] is called.
    Virtual(Arc<VirtualClock>),
}

impl Clock {
    pub fn now(&self) -> Instant {
        match self {
            Clock::Real => Instant::now(),
            Clock::Virtual(v) => v.now(),
        }
    }

    pub fn is_virtual(&self) -> bool {
        matches!(self, Clock::Virtual(_))
    }
}

/// A clock for tests of timer behaviour without sleeps: it starts at the
/// instant it was made and moves only by [`advance`](Self::advance), which
/// wakes the workers of the engines on it so that what fell due runs.
pub struct VirtualClock {
    start: Instant,
    elapsed: Mutex<Duration>,
    /// The workers of the engines on this clock: a clock shared by engines
    /// is the one time of their fabric.
    workers: Mutex<Vec<Weak<Worker>>>,
}

impl VirtualClock {
    pub fn new() -> Arc<VirtualClock> {
        Arc::new(VirtualClock {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
            workers: Mutex::default(),
        })
    }

    pub fn now(&self) -> Instant {
        self.start + *self.elapsed.lock()
    }

    /// How far the clock moved since it was made.
    pub fn elapsed(&self) -> Duration {
        *self.elapsed.lock()
    }

    /// Moves the clock `by` forward and wakes every engine on it: timers
    /// now due fire on their workers (this returns before they ran; tests
    /// wait with `settle`).
    pub fn advance(&self, by: Duration) {
        *self.elapsed.lock() += by;
        let workers: Vec<Arc<Worker>> = {
            let mut w = self.workers.lock();
            w.retain(|w| w.strong_count() > 0);
            w.iter().filter_map(Weak::upgrade).collect()
        };
        for worker in workers {
            worker.clock_moved();
        }
    }

    fn watch(&self, worker: &Arc<Worker>) {
        self.workers.lock().push(Arc::downgrade(worker));
    }
}

/// Waits until none of `engines` has work left that is due now: each one's
/// queue handled (what it received from the others included) and no timer
/// due on its clock. For tests on a [`VirtualClock`]: a wait for work to be
/// done, never for time to pass. False if that took longer than `bound`.
pub fn settle(engines: &[&Arc<Cm>], bound: Duration) -> bool {
    let until = Instant::now() + bound;
    loop {
        let before: Vec<usize> = engines.iter().map(|cm| cm.worker.pushed()).collect();
        for cm in engines {
            let left = until.saturating_duration_since(Instant::now());
            if !worker::wait_for_queued_work(cm, left) {
                return false;
            }
        }
        // Nothing new was queued anywhere while they ran (the barriers
        // themselves counted once each): all quiet.
        let after: Vec<usize> = engines.iter().map(|cm| cm.worker.pushed()).collect();
        let quiet = before.iter().zip(&after).all(|(b, a)| a - b == 1)
            && engines.iter().all(|cm| !cm.worker.timer_due());
        if quiet {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
    }
}
