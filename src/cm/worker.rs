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

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::device::Device;
use super::event::CmEvent;
use super::id::CmIdPriv;
use super::{destroy, listen, lost, recv, send, timewait};
use crate::errno::{CmResult, EBUSY, EDEADLK};
use crate::ibcm_log;
use crate::refusal::{Rule, invalid, refuse};
use crate::timer::{TimerId, Timers};
use crate::transport::{self, MadAddr};
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

#[derive(Default)]
struct Queue {
    work: VecDeque<Work>,
    /// Events to deliver (`Deliver`) and SA callbacks, in their order: the worker runs them
    /// before it takes more received MADs, as the kernel's `cm_req_handler`
    /// (and every `cm_*_handler` through `cm_process_work`) calls the
    /// handler inside the work item that took the MAD. A burst of REQs then
    /// never waits behind its own backlog: with events queued behind the
    /// MADs, 10,000 REQs queued at once made 10,000 new ids wait for their
    /// REQ_RECEIVED, all but 1,024 overflowed the listen backlog and got in
    /// only with a retransmission (`ibcm-cmtime -c 10000` connected 487 per
    /// second; 105,154 with this). `Checked` items stay in `work`: the
    /// kernel's `cm_establish` queues its work behind the MADs already
    /// queued, and the check must see what they did.
    events: VecDeque<Work>,
    timers: Timers<TimerWork>,
}

static QUEUE: LazyLock<(Mutex<Queue>, Condvar)> = LazyLock::new(Default::default);

thread_local! {
    /// The cm_id whose handler runs on this thread, and the listener whose
    /// callback guard that handler runs under (0: none).
    static IN_HANDLER: Cell<[usize; 2]> = const { Cell::new([0; 2]) };
    /// True on the worker thread.
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
}

fn push(work: Work) {
    // Started when the first device opened; if that failed, this tries again
    // (and the item waits for a later success).
    let _ = start();
    let (queue, ready) = &*QUEUE;
    {
        let mut q = queue.lock();
        match work {
            Work::Deliver { .. } | Work::SaCallback(_) => q.events.push_back(work),
            Work::Recv { .. } | Work::Checked { .. } | Work::Barrier(_) | Work::DeviceLost(_) => {
                q.work.push_back(work)
            }
        }
    }
    PUSHED.fetch_add(1, Ordering::Release);
    // A reader handing on a burst of MADs wakes the worker once, at its end.
    if !transport::batch::defer_wake(wake_worker) {
        wake(ready);
    }
}

fn wake_worker() {
    wake(&QUEUE.1);
}

/// Set (under the queue lock) while the worker waits in
/// `umad::worker_poll` rather than on the condition variable; the first
/// thread to wake it clears it, and the worker clears it (under the lock)
/// once it is back. Never set unless the worker reads umad ports.
static IN_POLL: AtomicBool = AtomicBool::new(false);

/// Wakes the worker after work was queued (or a sooner timer armed) under
/// the queue lock: on the condition variable, and through its eventfd when
/// it waits in `poll`. The worker set `IN_POLL` under the lock after it found
/// nothing to do, so a pusher whose item it did not see took the lock after
/// that and finds it set, even with a relaxed load. Not the eventfd from the
/// worker itself (what it read from its ports, a timer a handler armed): it
/// looks at the queue before it waits again, and the write would only make
/// its next `ppoll` return at once.
fn wake(ready: &Condvar) {
    ready.notify_one();
    if IN_POLL.load(Ordering::Relaxed) && !on_worker() && IN_POLL.swap(false, Ordering::SeqCst) {
        transport::umad::wake_worker_poll();
    }
}

/// `umad::read_ports_now` on a caller's thread: a panic there (a bug of the
/// library's) must not stop the work the caller queues next (the state it
/// changed needs it), so it is contained and logged; the MADs stay for the
/// worker.
fn read_ports_first() {
    if catch_unwind(AssertUnwindSafe(transport::umad::read_ports_now)).is_err() {
        PANICKED.fetch_add(1, Ordering::Relaxed);
        ibcm_log!(
            Error,
            "internal error while reading the umad ports: left to the worker"
        );
    }
}

/// Kernel umad ports joined the worker's set (`UmadTransport::open`): a
/// worker asleep on the condition variable goes to `poll` on them (one in
/// `poll` already was woken by the set). The lock orders this with the
/// worker's look at `worker_ports_registered` before it sleeps.
pub fn ports_changed() {
    drop(QUEUE.0.lock());
    QUEUE.1.notify_one();
}

/// How many received MADs of one device may wait for the worker. Beyond it
/// they are dropped and counted (`rx_dropped`): a handler that blocks must not
/// make a flooding peer grow the process without bound (ib_umad would have
/// capped them at 200,000 per agent). 64 Ki MADs (about 22 MB queued) is far
/// more than a burst of connection requests a daemon can sensibly absorb, and
/// a peer retransmits what was dropped, as after a loss on the wire.
pub const RX_QUEUE_CAP: usize = 65_536;

/// Queues a received MAD, unless its device has [`RX_QUEUE_CAP`] queued.
pub fn queue_recv(device: Arc<Device>, port: u8, addr: MadAddr, mad: Arc<Mad>) {
    if !device.reserve_rx_slot() {
        super::trace::dropped(&device.name, port, &addr, &mad[..], &"receive queue full");
        device.count_rx_dropped(port);
        return;
    }
    push(Work::Recv {
        device,
        port,
        addr,
        mad,
        arrived: Instant::now(),
    });
}

/// Queues the flush of `device`'s ids: its transport lost the wire for good.
pub fn queue_device_lost(device: Arc<Device>) {
    push(Work::DeviceLost(device));
}

/// Queues `event` for `id`'s handler (`cm_queue_work_unlock`).
pub fn queue_event(id: &Arc<CmIdPriv>, event: CmEvent) {
    push_handler_work(
        id,
        Work::Deliver {
            id: id.clone(),
            event,
        },
    );
}

/// Queues `check` for `id`: the event it returns when its turn comes, if
/// any, is delivered in this work item's place in the queue.
pub fn queue_checked(id: &Arc<CmIdPriv>, check: fn(&Arc<CmIdPriv>) -> Option<CmEvent>) {
    // What the kernel received before the call is queued first (the
    // worker may not have read it yet), as `cm_establish`'s work queues
    // behind the MADs the MAD layer has taken.
    read_ports_first();
    push_handler_work(
        id,
        Work::Checked {
            id: id.clone(),
            check,
        },
    );
}

/// A handler invocation goes to the worker, or to the device's own queue
/// when the device is in FD mode (`ibcm_process_events` runs it there).
fn push_handler_work(id: &Arc<CmIdPriv>, work: Work) {
    if let Err(work) = id.device.events.push(work) {
        push(work);
    }
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
        return Err(super::event_fd::not_fd_mode());
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

/// Queues the callback of a finished SA query: it runs on the worker, in
/// order with CM events, never on a thread of the caller's (also in FD mode).
pub fn queue_sa_callback(callback: Box<dyn FnOnce() + Send>) {
    push(Work::SaCallback(callback));
}

/// Arms a timer `after` from now.
pub fn arm_timer(after: Duration, work: TimerWork) -> TimerId {
    #[cfg(test)]
    fault::maybe_panic_arming(&work);
    let _ = start();
    let deadline = Instant::now() + after;
    let (queue, ready) = &*QUEUE;
    let mut q = queue.lock();
    // The worker sleeps until the earliest deadline at most: it needs waking
    // only for a timer that comes before that.
    let sooner = q.timers.next_deadline().is_none_or(|next| deadline < next);
    let id = q.timers.arm(deadline, work);
    drop(q);
    if sooner {
        wake(ready);
    }
    id
}

pub fn cancel_timer(timer: TimerId) {
    // The payload (a weak id reference) is dropped after the lock.
    let _payload = QUEUE.0.lock().timers.cancel(timer);
}

/// Waits until the worker has handled every work item queued before this
/// call, for `bound` at most; false if it did not in time. Never call it on
/// the worker (`on_worker`): it would wait for itself.
pub fn wait_for_queued_work(bound: Duration) -> bool {
    let (done, handled) = sync_channel(1);
    // "Queued" includes what the kernel received and the worker has not read.
    read_ports_first();
    push(Work::Barrier(done));
    handled.recv_timeout(bound).is_ok()
}

/// True on the worker thread, that is inside a handler.
pub fn on_worker() -> bool {
    ON_WORKER.with(Cell::get)
}

/// True while the calling thread runs a handler: on the worker, or in
/// `ibcm_process_events` on the application's thread.
pub fn in_handler() -> bool {
    IN_HANDLER.with(|h| h.get()[0] != 0)
}

/// (queued work items, armed timers): both zero when the library is idle.
pub fn pending() -> (usize, usize) {
    let queue = QUEUE.0.lock();
    let taken = TAKEN.load(Ordering::Relaxed);
    let queued = queue.work.len() + queue.events.len() + taken + super::event_fd::queued();
    (queued, queue.timers.len())
}

/// True while the calling thread runs the handler of the id at `addr`, or
/// of a new id that the listener at `addr` made: that thread holds the id's
/// callback guard already.
pub fn in_handler_of(addr: usize) -> bool {
    addr != 0 && IN_HANDLER.with(|h| h.get().contains(&addr))
}

// `-EAGAIN`: the worker thread cannot be started (the system is out of
// threads or memory); the next call that needs it tries again.
pub use crate::errno::EAGAIN;

/// Starts the worker thread unless it runs already: `ibcm_open_device` calls
/// this first, so a device is never open without a worker.
pub fn start() -> CmResult {
    static STARTED: StartOnce = StartOnce::new();
    STARTED.ensure(|| {
        std::thread::Builder::new()
            .name("ibcm-worker".into())
            .spawn(|| {
                crate::os::sys::block_all_signals();
                run();
            })
            .map(drop)
    })
}

/// A `Once` whose initialisation may fail and be retried (`std`'s `Once`
/// would be poisoned by a panic, and has no failure).
struct StartOnce {
    started: AtomicBool,
    starting: Mutex<()>,
}

impl StartOnce {
    const fn new() -> Self {
        Self {
            started: AtomicBool::new(false),
            starting: Mutex::new(()),
        }
    }

    fn ensure(&self, spawn: impl FnOnce() -> std::io::Result<()>) -> CmResult {
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

/// Work items and timers dropped because the engine panicked handling them.
static PANICKED: AtomicU64 = AtomicU64::new(0);

/// How many work items and timers were dropped by a panic so far (tests; the
/// log has a line for each).
#[cfg(test)]
pub fn panicked() -> u64 {
    PANICKED.load(Ordering::Relaxed)
}

/// Runs one work item or timer; a panic drops it, and the worker goes on.
/// False if it panicked.
fn contain(what: &str, f: impl FnOnce()) -> bool {
    if catch_unwind(AssertUnwindSafe(f)).is_ok() {
        return true;
    }
    PANICKED.fetch_add(1, Ordering::Relaxed);
    // The panic may have left a handler's mark on this thread.
    IN_HANDLER.with(|h| h.set([0; 2]));
    ibcm_log!(Error, "internal error while handling {what}: dropped");
    false
}

/// Work items taken per turn of the queue lock: fewer lock round trips with
/// the threads that queue work, and due timers still run between batches.
const BATCH: usize = 64;

/// Items the worker took from the queue and has not started yet: still
/// queued as far as `pending()` is concerned.
static TAKEN: AtomicUsize = AtomicUsize::new(0);

/// Work items ever queued: lets the worker watch for work without the lock.
static PUSHED: AtomicUsize = AtomicUsize::new(0);

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
fn spin_for_work() {
    // The worker's own affinity, not `available_parallelism`: a CPU quota of
    // one CPU on a larger machine still runs the reader beside the worker.
    static ONE_CPU: LazyLock<bool> = LazyLock::new(|| crate::os::sys::cpus_in_affinity() == 1);
    if *ONE_CPU {
        return;
    }
    let seen = PUSHED.load(Ordering::Acquire);
    let until = Instant::now() + SPIN;
    while PUSHED.load(Ordering::Acquire) == seen && Instant::now() < until {
        // Kernel umad ports the worker reads: a look at them too (a MAD
        // read is queued, and ends the spin).
        if transport::umad::worker_ports_registered() {
            look_at_ports(Some(Duration::ZERO));
        }
        std::thread::yield_now();
    }
}

fn run() {
    ON_WORKER.with(|w| w.set(true));
    let (queue, ready) = &*QUEUE;
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
                let now = Instant::now();
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
                    MutexGuard::unlocked(&mut q, spin_for_work);
                    continue;
                }
                if transport::umad::worker_ports_registered() {
                    // Kernel umad ports: the worker reads them itself, in
                    // `ppoll` on them and its eventfd until the next timer.
                    // `IN_POLL` is set under the lock, after the queue was
                    // found empty: a pusher that comes later writes the
                    // eventfd, which makes this poll (or one not yet begun)
                    // return.
                    IN_POLL.store(true, Ordering::SeqCst);
                    let timeout = q
                        .timers
                        .next_deadline()
                        .map(|deadline| deadline.saturating_duration_since(Instant::now()));
                    MutexGuard::unlocked(&mut q, || look_at_ports(timeout));
                    IN_POLL.store(false, Ordering::SeqCst);
                    continue;
                }
                match q.timers.next_deadline() {
                    Some(deadline) => {
                        ready.wait_until(&mut q, deadline);
                    }
                    None => ready.wait(&mut q),
                }
            }
            TAKEN.store(batch.len(), Ordering::Relaxed);
        }
        for (timer, work) in timers.drain(..) {
            if !contain("a timer", || fire(timer, &work, false)) {
                contain("a lost timer", || fire(timer, &work, true));
            }
        }
        for work in batch.drain(..) {
            TAKEN.fetch_sub(1, Ordering::Relaxed);
            run_work(work);
        }
        if backlog && transport::umad::worker_ports_registered() {
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
fn run_work(work: Work) {
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
fn fire(timer: TimerId, work: &TimerWork, lost: bool) {
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
            crate::sa::query::retry_handler(*query, (!lost).then_some(timer));
        }
    }
}

/// A panic dropped `event` of `id`. A new id's REQ_RECEIVED or
/// SIDR_REQ_RECEIVED was the only way its user could learn of it: nobody
/// will ever answer it, so it goes silently (as after a REQ handler's
/// `-ENOMEM`), and the peer's retransmission gets another chance. The user
/// owns an id that got any other event: it stays as it is.
fn recover_lost_event(id: &Arc<CmIdPriv>, event: &CmEvent) {
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
fn deliver(id: &Arc<CmIdPriv>, event: &CmEvent) {
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
        super::trace::event(id, event);
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

/// Test-only panics inside the worker and inside `send_req` (never compiled
/// into the library C links).
#[cfg(test)]
pub mod fault {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::TimerWork;
    use crate::cm::device::Device;
    use crate::cm::id::CmIdPriv;

    /// The devices whose next received MAD panics the worker. A set, not
    /// one slot: tests that run in parallel must not take each other's fault.
    static PANIC_RECEIVING_ON: Faults = Faults::new();
    /// The ids whose next retransmission timer panics while being armed.
    static PANIC_ARMING_FOR: Faults = Faults::new();

    /// Addresses, each of which panics once.
    struct Faults(Mutex<Vec<usize>>);

    impl Faults {
        const fn new() -> Self {
            Self(Mutex::new(Vec::new()))
        }

        fn set(&self, addr: usize) {
            quiet_injected_panics();
            self.0.lock().push(addr);
        }

        /// Panics if `addr` has a fault set, and clears it.
        fn hit(&self, addr: usize) {
            let mut faults = self.0.lock();
            let Some(at) = faults.iter().position(|&a| a == addr) else {
                return;
            };
            faults.swap_remove(at);
            drop(faults);
            std::panic::panic_any(INJECTED);
        }
    }

    /// Injected panics print nothing: the default hook would print (and,
    /// with RUST_BACKTRACE, symbolise) a backtrace on the worker, which
    /// takes seconds under ThreadSanitizer. Other panics are untouched.
    fn quiet_injected_panics() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let injected = info
                    .payload()
                    .downcast_ref::<&str>()
                    .is_some_and(|m| m.starts_with(INJECTED));
                if !injected {
                    default(info);
                }
            }));
        });
    }

    const INJECTED: &str = "fault injected";

    /// Panics at once, quietly (a handler of a test that stands for a
    /// library bug on the worker).
    pub fn panic_now() -> ! {
        quiet_injected_panics();
        std::panic::panic_any(INJECTED)
    }

    pub fn panic_on_next_mad_to(device: &Arc<Device>) {
        PANIC_RECEIVING_ON.set(Arc::as_ptr(device) as usize);
    }

    pub fn panic_on_next_timer_of(id: &Arc<CmIdPriv>) {
        PANIC_ARMING_FOR.set(Arc::as_ptr(id) as usize);
    }

    pub(super) fn maybe_panic_receiving(device: &Arc<Device>) {
        PANIC_RECEIVING_ON.hit(Arc::as_ptr(device) as usize);
    }

    pub(super) fn maybe_panic_arming(work: &TimerWork) {
        if let TimerWork::Retransmit(id) = work {
            PANIC_ARMING_FOR.hit(id.as_ptr() as usize);
        }
    }
}

#[cfg(test)]
mod tests {
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
}
