//! The worker's queue: work items and timers in order, who wakes the worker,
//! and what is still pending.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

#[cfg(test)]
use super::fault;
use super::handler::on_worker_of;
use super::panics::PANICKED;
use super::thread::{StartOnce, start};
use super::{TimerWork, Work};
use crate::cm::device::Device;
use crate::cm::engine::{Clock, Cm};
use crate::cm::event::CmEvent;
use crate::cm::id::CmIdPriv;
use crate::ibcm_log;
use crate::timer::{TimerId, Timers};
use crate::transport::{self, MadAddr};
use crate::wire::Mad;

#[derive(Default)]
pub(super) struct Queue {
    pub(super) work: VecDeque<Work>,
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
    pub(super) events: VecDeque<Work>,
    pub(super) timers: Timers<TimerWork>,
}

/// One engine's worker: its queue, the condition variable it sleeps on, and
/// what tells who must wake it. Shared by the engine and its thread, which
/// holds no reference to the engine itself (it ends when the engine goes).
pub struct Worker {
    pub(super) queue: Mutex<Queue>,
    pub(super) ready: Condvar,
    /// Set (under the queue lock) while the worker waits in
    /// `umad::worker_poll` rather than on the condition variable; the first
    /// thread to wake it clears it, and the worker clears it (under the
    /// lock) once it is back. Never set unless the worker reads umad ports.
    pub(super) in_poll: AtomicBool,
    /// Items the worker took from the queue and has not started: still
    /// queued as far as `pending()` is concerned.
    pub(super) taken: AtomicUsize,
    /// Work items ever queued: lets the worker watch for work without the
    /// lock.
    pub(super) pushed: AtomicUsize,
    pub(super) started: StartOnce,
    /// Set when the engine is gone: the thread ends once it ran what was
    /// queued.
    pub(super) stopped: AtomicBool,
    pub(crate) clock: Clock,
    /// The process's engine only: its worker reads the kernel umad ports.
    pub(crate) reads_umad: bool,
}

impl Worker {
    pub(crate) fn new(clock: Clock, reads_umad: bool) -> Worker {
        // The wheel counts ticks from the engine's clock's present.
        let queue = Queue {
            timers: Timers::new(clock.now()),
            ..Queue::default()
        };
        Worker {
            queue: Mutex::new(queue),
            ready: Condvar::new(),
            in_poll: AtomicBool::new(false),
            taken: AtomicUsize::new(0),
            pushed: AtomicUsize::new(0),
            started: StartOnce::new(),
            stopped: AtomicBool::new(false),
            clock,
            reads_umad,
        }
    }

    /// Work items ever queued.
    pub(crate) fn pushed(&self) -> usize {
        self.pushed.load(Ordering::Acquire)
    }

    /// Whether a timer is due on the engine's clock.
    pub(crate) fn timer_due(&self) -> bool {
        let now = self.clock.now();
        self.queue
            .lock()
            .timers
            .next_deadline()
            .is_some_and(|deadline| deadline <= now)
    }

    /// The engine's clock moved (or its umad ports changed): the worker
    /// looks again. The lock orders this with the worker's look before it
    /// sleeps.
    pub(crate) fn clock_moved(&self) {
        drop(self.queue.lock());
        self.ready.notify_one();
    }

    /// The engine is gone: the thread ends once it sees this and its queue
    /// is empty.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        drop(self.queue.lock());
        self.ready.notify_one();
        if self.reads_umad {
            transport::umad::wake_worker_poll();
        }
    }

    /// Whether the calling thread is this worker's (not another engine's).
    pub(crate) fn is_current(&self) -> bool {
        on_worker_of(self)
    }

    /// Whether this worker reads kernel umad ports now.
    pub(super) fn polls_umad(&self) -> bool {
        self.reads_umad && transport::umad::worker_ports_registered()
    }

    /// Wakes the worker after work was queued (or a sooner timer armed)
    /// under the queue lock: on the condition variable, and through its
    /// eventfd when it waits in `poll`. The worker set `in_poll` under the
    /// lock after it found nothing to do, so a pusher whose item it did not
    /// see took the lock after that and finds it set, even with a relaxed
    /// load. Not the eventfd from the worker itself (what it read from its
    /// ports, a timer a handler armed): it looks at the queue before it
    /// waits again, and the write would only make its next `ppoll` return
    /// at once. Another engine's worker is not this one: it writes it.
    fn wake(&self) {
        self.ready.notify_one();
        if self.in_poll.load(Ordering::Relaxed)
            && !on_worker_of(self)
            && self.in_poll.swap(false, Ordering::SeqCst)
        {
            transport::umad::wake_worker_poll();
        }
    }
}

impl transport::batch::Wake for Worker {
    fn wake(&self) {
        Worker::wake(self);
    }
}

fn push(cm: &Cm, work: Work) {
    // Started when the first device opened; if that failed, this tries again
    // (and the item waits for a later success).
    let _ = start(cm);
    let worker = &*cm.worker;
    {
        let mut q = worker.queue.lock();
        match work {
            Work::Deliver { .. } | Work::SaCallback(_) => q.events.push_back(work),
            Work::Recv { .. } | Work::Checked { .. } | Work::Barrier(_) | Work::DeviceLost(_) => {
                q.work.push_back(work)
            }
        }
    }
    worker.pushed.fetch_add(1, Ordering::Release);
    // A reader handing on a burst of MADs wakes the worker once, at its end.
    if !transport::batch::defer_wake(&cm.worker) {
        worker.wake();
    }
}

/// `umad::read_ports_now` on a caller's thread: a panic there (a bug of the
/// library's) must not stop the work the caller queues next (the state it
/// changed needs it), so it is contained and logged; the MADs stay for the
/// worker.
fn read_ports_first(cm: &Cm) {
    if !cm.worker.reads_umad {
        return;
    }
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
    Cm::process().worker.clock_moved();
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
        crate::cm::trace::dropped(&device.name, port, &addr, &mad[..], &"receive queue full");
        device.count_rx_dropped(port);
        return;
    }
    let cm = device.cm.clone();
    let work = Work::Recv {
        device,
        port,
        addr,
        mad,
        arrived: Instant::now(),
    };
    push(&cm, work);
}

/// Queues the flush of `device`'s ids: its transport lost the wire for good.
pub fn queue_device_lost(device: Arc<Device>) {
    let cm = device.cm.clone();
    push(&cm, Work::DeviceLost(device));
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
    read_ports_first(&id.device.cm);
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
        push(&id.device.cm, work);
    }
}

/// Queues the callback of a finished SA query: it runs on the worker, in
/// order with CM events, never on a thread of the caller's (also in FD mode).
pub fn queue_sa_callback(cm: &Cm, callback: Box<dyn FnOnce() + Send>) {
    push(cm, Work::SaCallback(callback));
}

/// Arms a timer of `cm` `after` from now on its clock.
pub fn arm_timer(cm: &Cm, after: Duration, work: TimerWork) -> TimerId {
    #[cfg(test)]
    fault::maybe_panic_arming(&work);
    let _ = start(cm);
    let worker = &*cm.worker;
    let deadline = worker.clock.now() + after;
    let mut q = worker.queue.lock();
    // The worker sleeps until the earliest deadline at most: it needs waking
    // only for a timer that comes before that.
    let sooner = q.timers.next_deadline().is_none_or(|next| deadline < next);
    let id = q.timers.arm(deadline, work);
    drop(q);
    if sooner {
        worker.wake();
    }
    id
}

/// Cancels a timer `arm_timer` gave for `cm`.
pub fn cancel_timer(cm: &Cm, timer: TimerId) {
    // The payload (a weak id reference) is dropped after the lock.
    let _payload = cm.worker.queue.lock().timers.cancel(timer);
}

/// Waits until `cm`'s worker has handled every work item queued before this
/// call, for `bound` at most; false if it did not in time. Never call it on
/// the worker (`on_worker`): it would wait for itself.
pub fn wait_for_queued_work(cm: &Cm, bound: Duration) -> bool {
    let (done, handled) = sync_channel(1);
    // "Queued" includes what the kernel received and the worker has not read.
    read_ports_first(cm);
    push(cm, Work::Barrier(done));
    handled.recv_timeout(bound).is_ok()
}

/// (queued work items, armed timers) of `cm`'s worker (`Cm::pending` adds
/// the events waiting in FD-mode devices).
pub(crate) fn pending(cm: &Cm) -> (usize, usize) {
    let worker = &*cm.worker;
    let queue = worker.queue.lock();
    let taken = worker.taken.load(Ordering::Relaxed);
    let queued = queue.work.len() + queue.events.len() + taken;
    (queued, queue.timers.len())
}
