//! Where an id's events wait for their user: the engine's handler pushes
//! (it never blocks on user code), a call that waits pops.
//!
//! One queue per id (a connection's events) or per listener (its requests).
//! A blocking call waits on the condition variable; a future (the async API,
//! [`super::aio`]) registers its waker in the queue's waiter list, and the
//! push that follows wakes it. Both wait on the same queue, so the types that
//! own a queue are the same for both.

use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::error::{Error, Result};
use crate::cm::worker;
use crate::errno::EDEADLK;
use crate::refusal::Rule;

/// `EDEADLK` for `op`, a wait of the blocking API called where the CM's
/// events run ([`Popped::WouldDeadlock`]), as C's `ibcm_process_events`
/// from a handler.
pub(super) fn would_deadlock(op: &'static str) -> Error {
    let rule = "a wait for the CM's events inside a handler (on the CM's thread)";
    Error::refused(op, EDEADLK, Some(Rule::Text(rule)))
}

/// Items for one owner, in the order the engine delivered them.
pub(super) struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    items: Items<T>,
    /// The last item was pushed: once they are taken, nothing more comes.
    finished: bool,
    /// Futures waiting for the next push, by key; a push wakes them all and
    /// empties the list, and a future that goes takes its entry with it, so
    /// the list holds at most one entry per live waiting future.
    waiters: Waiters,
    next_key: u64,
}

/// The items, the first one inline: a connection's queue rarely holds more
/// than one event at a time, and then needs no allocation of its own.
struct Items<T> {
    /// The first item; `None` only when `rest` is empty too.
    first: Option<T>,
    rest: VecDeque<T>,
}

impl<T> Items<T> {
    fn push_back(&mut self, item: T) {
        match self.first {
            None => self.first = Some(item),
            Some(_) => self.rest.push_back(item),
        }
    }

    fn push_front(&mut self, item: T) {
        if let Some(first) = self.first.replace(item) {
            self.rest.push_front(first);
        }
    }

    fn pop_front(&mut self) -> Option<T> {
        let item = self.first.take()?;
        self.first = self.rest.pop_front();
        Some(item)
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

/// The wakers of the futures waiting on a queue, the first one inline: one
/// future waits on a queue at a time but for rare cases, and registering
/// it then allocates nothing.
#[derive(Default)]
struct Waiters {
    first: Option<(u64, Waker)>,
    more: Vec<(u64, Waker)>,
}

impl Waiters {
    fn find(&mut self, key: u64) -> Option<&mut Waker> {
        self.first
            .iter_mut()
            .chain(self.more.iter_mut())
            .find(|(k, _)| *k == key)
            .map(|(_, waker)| waker)
    }

    fn add(&mut self, key: u64, waker: Waker) {
        match self.first {
            None => self.first = Some((key, waker)),
            Some(_) => self.more.push((key, waker)),
        }
    }

    fn remove(&mut self, key: u64) {
        if self.first.as_ref().is_some_and(|(k, _)| *k == key) {
            self.first = self.more.pop();
        } else {
            self.more.retain(|(k, _)| *k != key);
        }
    }

    /// Empties the list (without allocating), for waking outside the lock.
    fn take(&mut self) -> Waiters {
        std::mem::take(self)
    }

    fn wake(self) {
        self.first
            .into_iter()
            .chain(self.more)
            .for_each(|(_, w)| w.wake());
    }
}

impl<T> Queue<T> {
    /// A listener's wait of `op` for its next request, `timeout` at most
    /// ([`Error::TimedOut`]; a listener's queue never finishes), `EDEADLK`
    /// on the CM's own thread.
    pub(super) fn next_request(&self, op: &'static str, timeout: Option<Duration>) -> Result<T> {
        match self.pop(timeout.map(|t| Instant::now() + t)) {
            Popped::Item(request) => Ok(request),
            Popped::TimedOut | Popped::Finished => Err(Error::TimedOut {
                op,
                after: timeout.unwrap_or_default(),
            }),
            Popped::WouldDeadlock => Err(would_deadlock(op)),
        }
    }

    /// [`next_request`](Queue::next_request) for the async API: a request
    /// is taken only when the future returns it.
    pub(super) async fn next_request_async(&self, op: &'static str) -> Result<T> {
        let mut waiter = self.waiter();
        std::future::poll_fn(|cx| waiter.poll_pop(cx))
            .await
            .ok_or(Error::Closed { op })
    }
}

/// What a wait ended with.
pub(super) enum Popped<T> {
    Item(T),
    /// The deadline passed first.
    TimedOut,
    /// Empty, and nothing more will come.
    Finished,
    /// Empty, and the caller runs on the CM's thread (a handler, an SA
    /// callback), the one that would fill the queue: it would wait for
    /// itself.
    WouldDeadlock,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                items: Items {
                    first: None,
                    rest: VecDeque::new(),
                },
                finished: false,
                waiters: Waiters::default(),
                next_key: 0,
            }),
            ready: Condvar::new(),
        }
    }
}

impl<T> Queue<T> {
    /// Adds `item`; `last`: nothing will follow it.
    pub(super) fn push(&self, item: T, last: bool) {
        let mut s = self.state.lock();
        s.items.push_back(item);
        s.finished |= last;
        let waiters = s.waiters.take();
        drop(s);
        self.ready.notify_all();
        // Woken outside the lock: a waker may run its task at once.
        waiters.wake();
    }

    /// Puts back items a call took but did not consume, in front, in their
    /// order. Nothing new came: a future is not woken for them (it is the
    /// one that took them, or finds them when something new wakes it).
    pub(super) fn put_back(&self, items: Vec<T>) {
        if items.is_empty() {
            return;
        }
        let mut s = self.state.lock();
        for item in items.into_iter().rev() {
            s.items.push_front(item);
        }
        drop(s);
        self.ready.notify_all();
    }

    pub(super) fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    /// The next item, without waiting.
    pub(super) fn try_pop(&self) -> Option<T> {
        self.state.lock().items.pop_front()
    }

    /// The next item, waiting until `deadline` (for ever if `None`).
    pub(super) fn pop(&self, deadline: Option<Instant>) -> Popped<T> {
        let mut s = self.state.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                return Popped::Item(item);
            }
            // In a forked child nothing more comes: the worker is the
            // parent's.
            if s.finished || super::error::in_forked_child() {
                return Popped::Finished;
            }
            if worker::in_handler() || worker::on_worker() {
                return Popped::WouldDeadlock;
            }
            match deadline {
                Some(deadline) => {
                    if self.ready.wait_until(&mut s, deadline).timed_out() && s.items.is_empty() {
                        return if s.finished {
                            Popped::Finished
                        } else {
                            Popped::TimedOut
                        };
                    }
                }
                None => self.ready.wait(&mut s),
            }
        }
    }

    /// A future's place in this queue's waiter list, for
    /// [`Waiter::poll_pop`]; it leaves the list when dropped.
    pub(super) fn waiter(&self) -> Waiter<'_, T> {
        Waiter {
            queue: self,
            key: None,
        }
    }
}

/// One future waiting on a queue. Taking an item happens only when
/// [`poll_pop`](Waiter::poll_pop) returns it, so a future dropped while it
/// waits loses nothing: what comes stays for the next call.
pub(super) struct Waiter<'q, T> {
    queue: &'q Queue<T>,
    key: Option<u64>,
}

impl<T> Waiter<'_, T> {
    /// The next item (`Ready(None)`: empty, and nothing more will come), or
    /// `Pending` with the task's waker registered under the same lock that
    /// found the queue empty, so no push can come between unseen.
    pub(super) fn poll_pop(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.queue.state.lock();
        if let Some(item) = s.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        // In a forked child nothing more comes (the worker is the
        // parent's): the wait ends as `pop`'s does, not pending for ever
        // (fork_tests::in_a_forked_child_async_waits_end_and_the_driver_stops).
        if s.finished || super::error::in_forked_child() {
            return Poll::Ready(None);
        }
        let s = &mut *s;
        match self.key.and_then(|k| s.waiters.find(k)) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                let key = s.next_key;
                s.next_key += 1;
                s.waiters.add(key, cx.waker().clone());
                self.key = Some(key);
            }
        }
        Poll::Pending
    }
}

impl<T> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.queue.state.lock().waiters.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    /// Counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn items_keep_their_order_across_the_inline_slot_and_put_back() {
        let q = Queue::default();
        for i in 0..5 {
            q.push(i, false);
        }
        assert_eq!(q.len(), 5);
        let taken: Vec<i32> = (0..3).map(|_| q.try_pop().unwrap()).collect();
        assert_eq!(taken, [0, 1, 2]);
        q.put_back(vec![1, 2]);
        q.push(5, true);
        let rest: Vec<i32> = std::iter::from_fn(|| q.try_pop()).collect();
        assert_eq!(rest, [1, 2, 3, 4, 5]);
        assert!(matches!(q.pop(None), Popped::Finished));
    }

    #[test]
    fn a_push_wakes_every_waiting_future_once_and_a_dropped_one_leaves() {
        let q: Queue<u8> = Queue::default();
        let counts: Vec<Arc<Count>> = (0..3).map(|_| Arc::default()).collect();
        let wakers: Vec<Waker> = counts.iter().map(|c| Waker::from(c.clone())).collect();
        let mut waiters: Vec<Waiter<'_, u8>> = (0..3).map(|_| q.waiter()).collect();
        for (waiter, waker) in waiters.iter_mut().zip(&wakers) {
            let polled = waiter.poll_pop(&mut Context::from_waker(waker));
            assert!(polled.is_pending());
        }
        // The first one goes (the inline entry): the others stay registered.
        drop(waiters.remove(0));
        q.push(7, false);
        let woken: Vec<usize> = counts.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
        assert_eq!(woken, [0, 1, 1]);
        let polled = waiters[0].poll_pop(&mut Context::from_waker(&wakers[1]));
        assert_eq!(polled, Poll::Ready(Some(7)));
        // Nothing is registered any more: the next push wakes nobody.
        q.push(8, false);
        let woken: Vec<usize> = counts.iter().map(|c| c.0.load(Ordering::Relaxed)).collect();
        assert_eq!(woken, [0, 1, 1]);
    }
}
