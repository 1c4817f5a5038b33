//! The CM's worker thread: the kernel's `ib_cm` workqueue and MAD-agent
//! completion context in one ordered queue.
//!
//! It receives MADs, fires timers, and runs handlers. One thread runs every
//! handler, so handlers of one cm_id never overlap and see events in the order
//! they were queued; no library lock is held while a handler runs.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Once, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::device::Device;
use super::event::CmEvent;
use super::id::CmIdPriv;
use super::{destroy, listen, recv, send, timewait};
use crate::timer::{TimerId, Timers};
use crate::transport::MadAddr;
use crate::wire::Mad;

/// Work items, processed in order.
pub enum Work {
    Recv {
        device: Arc<Device>,
        port: u8,
        addr: MadAddr,
        mad: Arc<Mad>,
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
}

/// What a timer does when it fires.
pub enum TimerWork {
    /// The tracked MAD of `id` timed out: resend it or report the error.
    Retransmit(Weak<CmIdPriv>),
    /// Timewait of `id` is over.
    TimewaitExit(Weak<CmIdPriv>),
}

#[derive(Default)]
struct Queue {
    work: VecDeque<Work>,
    timers: Timers<TimerWork>,
}

static QUEUE: LazyLock<(Mutex<Queue>, Condvar)> = LazyLock::new(Default::default);

thread_local! {
    /// The cm_id whose handler runs on this thread, and the listener whose
    /// callback guard that handler runs under (0: none).
    static IN_HANDLER: Cell<[usize; 2]> = const { Cell::new([0; 2]) };
}

fn push(work: Work) {
    start();
    let (queue, ready) = &*QUEUE;
    queue.lock().work.push_back(work);
    PUSHED.fetch_add(1, Ordering::Release);
    ready.notify_one();
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
        device.count_rx_dropped(port);
        return;
    }
    push(Work::Recv {
        device,
        port,
        addr,
        mad,
    });
}

/// Queues `event` for `id`'s handler (`cm_queue_work_unlock`).
pub fn queue_event(id: &Arc<CmIdPriv>, event: CmEvent) {
    push(Work::Deliver {
        id: id.clone(),
        event,
    });
}

/// Queues `check` for `id`: the event it returns on the worker, if any, is
/// delivered in this work item's place in the queue.
pub fn queue_checked(id: &Arc<CmIdPriv>, check: fn(&Arc<CmIdPriv>) -> Option<CmEvent>) {
    push(Work::Checked {
        id: id.clone(),
        check,
    });
}

/// Arms a timer `after` from now.
pub fn arm_timer(after: Duration, work: TimerWork) -> TimerId {
    start();
    let deadline = Instant::now() + after;
    let (queue, ready) = &*QUEUE;
    let mut q = queue.lock();
    // The worker sleeps until the earliest deadline at most: it needs waking
    // only for a timer that comes before that.
    let sooner = q.timers.next_deadline().is_none_or(|next| deadline < next);
    let id = q.timers.arm(deadline, work);
    drop(q);
    if sooner {
        ready.notify_one();
    }
    id
}

pub fn cancel_timer(timer: TimerId) {
    // The payload (a weak id reference) is dropped after the lock.
    let _payload = QUEUE.0.lock().timers.cancel(timer);
}

/// (queued work items, armed timers): both zero when the library is idle.
pub fn pending() -> (usize, usize) {
    let queue = QUEUE.0.lock();
    let taken = TAKEN.load(Ordering::Relaxed);
    (queue.work.len() + taken, queue.timers.len())
}

/// True while the calling thread runs the handler of the id at `addr`, or
/// of a new id that the listener at `addr` made: that thread holds the id's
/// callback guard already.
pub fn in_handler_of(addr: usize) -> bool {
    addr != 0 && IN_HANDLER.with(|h| h.get().contains(&addr))
}

fn start() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        std::thread::Builder::new()
            .name("ibcm-worker".into())
            .spawn(run)
            .expect("cannot start the ib_cm worker thread");
    });
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
fn spin_for_work() {
    let seen = PUSHED.load(Ordering::Acquire);
    let until = Instant::now() + SPIN;
    while PUSHED.load(Ordering::Acquire) == seen && Instant::now() < until {
        std::thread::yield_now();
    }
}

fn run() {
    let (queue, ready) = &*QUEUE;
    let mut timers = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        {
            let mut q = queue.lock();
            let mut spun = false;
            loop {
                let now = Instant::now();
                while let Some(due) = q.timers.pop_due(now) {
                    timers.push(due);
                }
                let n = q.work.len().min(BATCH);
                batch.extend(q.work.drain(..n));
                if !timers.is_empty() || !batch.is_empty() {
                    break;
                }
                if !spun {
                    spun = true;
                    MutexGuard::unlocked(&mut q, spin_for_work);
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
            fire(timer, work);
        }
        for work in batch.drain(..) {
            TAKEN.fetch_sub(1, Ordering::Relaxed);
            match work {
                Work::Recv {
                    device,
                    port,
                    addr,
                    mad,
                } => handle_recv(&device, port, addr, mad),
                Work::Deliver { id, event } => deliver(&id, &event),
                Work::Checked { id, check } => {
                    if let Some(event) = check(&id) {
                        deliver(&id, &event);
                    }
                }
            }
        }
    }
}

/// A received MAD leaves the device's queue and goes to `cm_recv_handler`,
/// unless the device was closed meanwhile: a closed device sends nothing, and
/// nobody is left to care (not counted: its counters are gone with it).
fn handle_recv(device: &Arc<Device>, port: u8, addr: MadAddr, mad: Arc<Mad>) {
    device.release_rx_slot();
    if !device.is_closed() {
        recv::recv_handler(device, port, addr, mad);
    }
}

fn fire(timer: TimerId, work: TimerWork) {
    match work {
        TimerWork::Retransmit(id) => {
            if let Some(id) = id.upgrade() {
                send::retransmit_handler(&id, timer);
            }
        }
        TimerWork::TimewaitExit(id) => {
            if let Some(id) = id.upgrade() {
                timewait::timewait_handler(&id, timer);
            }
        }
    }
}

/// Runs `id`'s handler for `event` (`cm_process_work`): skipped if the id was
/// destroyed; a non-zero return destroys the id afterwards.
///
/// A new id's REQ_RECEIVED or SIDR_REQ_RECEIVED runs under its listener's
/// callback guard, as the kernel's cm_req_handler runs it holding a reference
/// on the listener: `ib_destroy_cm_id(listener)` waits for it, and once the
/// listener is destroyed no handler with its context starts; the new id is
/// then refused as if no listener had matched.
fn deliver(id: &Arc<CmIdPriv>, event: &CmEvent) {
    let listener = listen::listener_of(event);
    let _listener_running = listener.map(|l| l.callback.lock());
    if let Some(listener) = listener
        && listener.is_destroyed()
    {
        listen::refuse_orphan(id);
        return;
    }
    let ret = {
        let _running = id.callback.lock();
        if id.is_destroyed() {
            return;
        }
        IN_HANDLER.with(|h| h.set([id.addr(), listener.map_or(0, |l| l.addr())]));
        let ret = (id.handler)(id, event);
        IN_HANDLER.with(|h| h.set([0; 2]));
        ret
    };
    if ret != 0 {
        destroy::destroy_id(id, ret);
    }
}
