//! Where an id's events wait for their user: the engine's handler pushes
//! (it never blocks on user code), a blocking call pops.
//!
//! One queue per id (a connection's events) or per listener (its requests).
//! A blocking call waits on the condition variable; an async adapter on the
//! device's event fd can wait on the same queue with a waker list beside
//! it, without changing the types that own a queue.

use std::collections::VecDeque;
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
        drop(s);
        self.ready.notify_all();
    }

    /// Puts back items a call took but did not consume, in front, in their
    /// order.
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
}
