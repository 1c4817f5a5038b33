//! The worker thread (`ibcm-worker`): its start, its loop over the queue
//! and the umad ports it reads, and each work item and timer it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

#[cfg(test)]
use super::fault;
use super::handler::{ON_WORKER, deliver, recover_lost_event};
use super::panics::contain;
use super::queue::Worker;
use super::{EAGAIN, TimerWork, Work};
use crate::cm::device::Device;
use crate::cm::engine::Cm;
use crate::cm::{lost, recv, send, timewait};
use crate::errno::CmResult;
use crate::ibcm_log;
use crate::timer::TimerId;
use crate::transport::{self, MadAddr};
use crate::wire::Mad;

/// Starts `cm`'s worker thread unless it runs already: `open_device` calls
/// this first, so a device is never open without a worker. The thread holds
/// the worker, not the engine: it ends once the engine is gone.
pub fn start(cm: &Cm) -> CmResult {
    cm.worker.started.ensure(|| {
        let worker = cm.worker.clone();
        let cm = cm.me.clone();
        std::thread::Builder::new()
            .name("ibcm-worker".into())
            .spawn(move || {
                crate::os::sys::block_all_signals();
                run(&worker, &cm);
            })
            .map(drop)
    })
}

/// A `Once` whose initialisation may fail and be retried (`std`'s `Once`
/// would be poisoned by a panic, and has no failure).
pub(super) struct StartOnce {
    started: AtomicBool,
    starting: Mutex<()>,
}

impl StartOnce {
    pub(super) const fn new() -> Self {
        Self {
            started: AtomicBool::new(false),
            starting: Mutex::new(()),
        }
    }

    pub(super) fn ensure(&self, spawn: impl FnOnce() -> std::io::Result<()>) -> CmResult {
        if self.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let _starting = self.starting.lock();
        if self.started.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Logged after the fact, with no lock of the queue held.
        spawn().map_err(|e| {
            ibcm_log!(Error, "cannot start the worker thread: {e}");
            EAGAIN
        })?;
        self.started.store(true, Ordering::Release);
        Ok(())
    }
}

/// Work items taken per turn of the queue lock: fewer lock round trips with
/// the threads that queue work, and due timers still run between batches.
const BATCH: usize = 64;

/// How long the worker looks for more work before it sleeps. Waking a
/// sleeping thread takes tens of µs where an idle (virtual) CPU halts, far
/// more than handling a MAD; a request that follows its predecessor within
/// this window finds the worker awake.
const SPIN: Duration = Duration::from_micros(50);

/// Polls until work is queued or `SPIN` has passed. It yields rather than
/// spins: the thread the last handler woke is often queued on this very CPU.
/// Not on a single CPU (the worker's affinity): there the work can only come once the worker gives
/// the CPU up, and each look is a `sched_yield` that finds nobody else to
/// run while the peer's answer is on the wire, 50 µs of CPU for nothing.
fn spin_for_work(worker: &Worker) {
    // The worker's own affinity, not `available_parallelism`: a CPU quota of
    // one CPU on a larger machine still runs the reader beside the worker.
    static ONE_CPU: LazyLock<bool> = LazyLock::new(|| crate::os::sys::cpus_in_affinity() == 1);
    if *ONE_CPU {
        return;
    }
    let seen = worker.pushed.load(Ordering::Acquire);
    let until = Instant::now() + SPIN;
    while worker.pushed.load(Ordering::Acquire) == seen && Instant::now() < until {
        // Kernel umad ports the worker reads: a look at them too (a MAD
        // read is queued, and ends the spin).
        if worker.polls_umad() {
            look_at_ports(Some(Duration::ZERO));
        }
        std::thread::yield_now();
    }
}

fn run(worker: &Worker, cm: &Weak<Cm>) {
    ON_WORKER.with(|w| w.set(worker as *const Worker as usize));
    let (queue, ready) = (&worker.queue, &worker.ready);
    let mut timers = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        // More received work waits behind this batch: ports the worker reads
        // get a look after it (`umad::WORKER_DRAIN`).
        let mut backlog = false;
        {
            let mut q = queue.lock();
            let mut spun = false;
            loop {
                // The engine is gone: what it queued before still runs (an
                // SA query's callback from the flush of its last device),
                // then the thread ends. Nothing can queue more: that takes
                // the engine.
                if worker.stopped.load(Ordering::Acquire)
                    && q.events.is_empty()
                    && q.work.is_empty()
                {
                    return;
                }
                let now = worker.clock.now();
                while let Some(due) = q.timers.pop_due(now) {
                    timers.push(due);
                }
                // Events first: each is the rest of the work item that
                // queued it (see `Queue::events`).
                let n = q.events.len().min(BATCH);
                batch.extend(q.events.drain(..n));
                if batch.is_empty() {
                    let n = q.work.len().min(BATCH);
                    batch.extend(q.work.drain(..n));
                    backlog = !q.work.is_empty();
                }
                if !timers.is_empty() || !batch.is_empty() {
                    break;
                }
                if !spun {
                    spun = true;
                    MutexGuard::unlocked(&mut q, || spin_for_work(worker));
                    continue;
                }
                if worker.polls_umad() {
                    // Kernel umad ports: the worker reads them itself, in
                    // `ppoll` on them and its eventfd until the next timer.
                    // `in_poll` is set under the lock, after the queue was
                    // found empty: a pusher that comes later writes the
                    // eventfd, which makes this poll (or one not yet begun)
                    // return.
                    worker.in_poll.store(true, Ordering::SeqCst);
                    let timeout = q
                        .timers
                        .next_deadline()
                        .map(|deadline| deadline.saturating_duration_since(Instant::now()));
                    MutexGuard::unlocked(&mut q, || look_at_ports(timeout));
                    worker.in_poll.store(false, Ordering::SeqCst);
                    continue;
                }
                match q.timers.next_deadline() {
                    // A virtual clock moves only by `advance`, which wakes
                    // the worker: a real deadline would mean nothing.
                    Some(deadline) if !worker.clock.is_virtual() => {
                        ready.wait_until(&mut q, deadline);
                    }
                    _ => ready.wait(&mut q),
                }
            }
            worker.taken.store(batch.len(), Ordering::Relaxed);
        }
        for (timer, work) in timers.drain(..) {
            if !contain("a timer", || fire(cm, timer, &work, false)) {
                contain("a lost timer", || fire(cm, timer, &work, true));
            }
        }
        for work in batch.drain(..) {
            worker.taken.fetch_sub(1, Ordering::Relaxed);
            run_work(work);
        }
        if backlog && worker.polls_umad() {
            look_at_ports(Some(Duration::ZERO));
        }
    }
}

/// How long the worker waits before it polls its umad ports again after
/// `ppoll` failed (not `EINTR`: out of memory, say), instead of retrying at
/// once for as long as it fails.
const POLL_RETRY: Duration = Duration::from_millis(10);

/// Waits on the umad ports the worker reads, `timeout` at most
/// (`umad::worker_poll`), and queues what they have. A panic there is
/// contained as a work item's; a failing `ppoll` is logged once, and the
/// worker sleeps [`POLL_RETRY`] (the timeout, if shorter) before it goes on.
fn look_at_ports(timeout: Option<Duration>) {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    let mut polled = Ok(());
    contain("received MADs", || {
        polled = transport::umad::worker_poll(timeout);
    });
    if let Err(e) = polled {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            ibcm_log!(
                Error,
                "cannot wait for the umad ports: ppoll failed ({e:?}); trying again every {} ms",
                POLL_RETRY.as_millis()
            );
        }
        std::thread::sleep(timeout.map_or(POLL_RETRY, |t| t.min(POLL_RETRY)));
    }
}

/// Runs one work item (on the worker, or a handler invocation in
/// `ibcm_process_events`); a panic drops it.
pub(super) fn run_work(work: Work) {
    match work {
        Work::Recv {
            device,
            port,
            addr,
            mad,
            arrived,
        } => {
            contain("a received MAD", || {
                handle_recv(&device, port, addr, mad, arrived);
            });
        }
        Work::Deliver { id, event } => {
            if !contain("an event", || deliver(&id, &event)) {
                contain("a lost event", || recover_lost_event(&id, &event));
            }
        }
        Work::Barrier(done) => {
            // The waiter may have given up: nobody to tell then.
            let _ = done.try_send(());
        }
        Work::SaCallback(callback) => {
            contain("an SA callback", callback);
        }
        Work::DeviceLost(device) => {
            contain("a lost device", || lost::device_lost_handler(&device));
        }
        Work::Checked { id, check } => {
            contain("an event", || {
                if let Some(event) = check(&id) {
                    deliver(&id, &event);
                }
            });
        }
    }
}

/// A received MAD leaves the device's queue and goes to `cm_recv_handler`,
/// unless the device was closed meanwhile: a closed device sends nothing, and
/// nobody is left to care (not counted: its counters are gone with it).
fn handle_recv(device: &Arc<Device>, port: u8, addr: MadAddr, mad: Arc<Mad>, arrived: Instant) {
    device.release_rx_slot();
    #[cfg(test)]
    fault::maybe_panic_receiving(device);
    if !device.is_closed() {
        recv::recv_handler_at(device, port, addr, mad, arrived);
    }
}

/// Runs the timer `timer`. `lost`: a panic dropped its first run, and
/// nothing else would ever end what it stood for (the kernel's MAD layer
/// always completes a send): this run makes good for it.
fn fire(cm: &Weak<Cm>, timer: TimerId, work: &TimerWork, lost: bool) {
    match work {
        TimerWork::Retransmit(id) => {
            if let Some(id) = id.upgrade() {
                if lost {
                    send::retransmit_lost(&id, timer);
                } else {
                    send::retransmit_handler(&id, timer);
                }
            }
        }
        // The handler acts only on the timewait that armed `timer`, so it is
        // its own recovery: run again, it ends the timewait if the panic came
        // first, and does nothing if the id had left it already. Ending the
        // timewait rather than re-arming it is what cm_timewait_handler does
        // at the deadline anyway, and needs no second timer.
        TimerWork::TimewaitExit(id) => {
            if let Some(id) = id.upgrade() {
                timewait::timewait_handler(&id, timer);
            }
        }
        // Run again as if no timer were meant (the first run may have let go
        // of it), it resends or times the query out.
        TimerWork::SaRetry(query) => {
            if let Some(cm) = cm.upgrade() {
                crate::sa::query::retry_handler(&cm, *query, (!lost).then_some(timer));
            }
        }
    }
}
