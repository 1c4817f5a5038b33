//! The library's own timers: MAD retransmission and timewait.
//!
//! umad cannot cancel a send, so the CM never asks the kernel to retry: every
//! retransmission and every timewait is one of these timers, fired on the
//! worker thread. Cancelling is O(1) (the heap entry is left behind and skipped
//! when it surfaces); `len()` counts only live timers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

/// A timer's handle, unique for the life of the process.
pub type TimerId = u64;

/// Deadline-ordered timers carrying a payload `T`.
pub struct Timers<T> {
    heap: BinaryHeap<Reverse<(Instant, TimerId)>>,
    live: HashMap<TimerId, T>,
    next_id: TimerId,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            next_id: 1,
        }
    }
}

impl<T> Timers<T> {
    /// Arms a timer for `deadline`.
    pub fn arm(&mut self, deadline: Instant, payload: T) -> TimerId {
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((deadline, id)));
        self.live.insert(id, payload);
        id
    }

    /// Cancels a timer; a no-op if it already fired or was cancelled.
    pub fn cancel(&mut self, id: TimerId) {
        self.live.remove(&id);
    }

    /// The earliest deadline of a live timer.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse((deadline, id))) = self.heap.peek() {
            if self.live.contains_key(id) {
                return Some(*deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes and returns one timer due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<(TimerId, T)> {
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if let Some(payload) = self.live.remove(&id) {
                return Some((id, payload));
            }
        }
        None
    }

    /// How many timers are armed.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timers_fire_in_deadline_order_and_cancelled_ones_never_fire() {
        let mut t = Timers::default();
        let now = Instant::now();
        t.arm(now + Duration::from_millis(3), "c");
        let b = t.arm(now + Duration::from_millis(2), "b");
        t.arm(now + Duration::from_millis(1), "a");
        t.cancel(b);
        assert_eq!(t.len(), 2);
        assert_eq!(t.next_deadline(), Some(now + Duration::from_millis(1)));
        assert_eq!(t.pop_due(now), None);
        let later = now + Duration::from_millis(10);
        assert_eq!(t.pop_due(later).map(|(_, p)| p), Some("a"));
        assert_eq!(t.pop_due(later).map(|(_, p)| p), Some("c"));
        assert_eq!(t.pop_due(later), None);
        assert!(t.is_empty());
    }
}
