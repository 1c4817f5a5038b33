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
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Items for one owner, in the order the engine delivered them.
pub(super) struct Queue<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    items: VecDeque<T>,
    /// The last item was pushed: once they are taken, nothing more comes.
    finished: bool,
    /// Futures waiting for the next push, by key; a push wakes them all and
    /// empties the list, and a future that goes takes its entry with it, so
    /// the list holds at most one entry per live waiting future.
    waiters: Vec<(u64, Waker)>,
    next_key: u64,
}

/// What a wait ended with.
pub(super) enum Popped<T> {
    Item(T),
    /// The deadline passed first.
    TimedOut,
    /// Empty, and nothing more will come.
    Finished,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                items: VecDeque::new(),
                finished: false,
                waiters: Vec::new(),
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
        let waiters = std::mem::take(&mut s.waiters);
        drop(s);
        self.ready.notify_all();
        // Woken outside the lock: a waker may run its task at once.
        for (_, waker) in waiters {
            waker.wake();
        }
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
            if s.finished {
                return Popped::Finished;
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
        if s.finished {
            return Poll::Ready(None);
        }
        let s = &mut *s;
        match self
            .key
            .and_then(|k| s.waiters.iter_mut().find(|(key, _)| *key == k))
        {
            Some((_, waker)) => waker.clone_from(cx.waker()),
            None => {
                let key = s.next_key;
                s.next_key += 1;
                s.waiters.push((key, cx.waker().clone()));
                self.key = Some(key);
            }
        }
        Poll::Pending
    }
}

impl<T> Drop for Waiter<'_, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.queue.state.lock().waiters.retain(|(k, _)| *k != key);
        }
    }
}
