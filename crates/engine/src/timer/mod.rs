//! The library's own timers: MAD retransmission and timewait.
//!
//! umad cannot cancel a send, so the CM never asks the kernel to retry: every
//! retransmission and every timewait is one of these timers, fired on the
//! worker thread. Nearly every timer is cancelled (a reply came), so arming
//! and cancelling must stay cheap with 100,000 connections live.
//!
//! A hierarchical timing wheel with cascading (Varghese & Lauck). Time counts
//! in ticks of 2^20 ns (1.05 ms: a power of two turns a duration into ticks
//! with a shift). A deadline is rounded up to a tick boundary and fires there:
//! never early, at most one tick late. Level `k` has 64 slots of 64^k ticks. A
//! timer sits on the level of the highest base-64 digit in which its deadline
//! differs from the wheel's time, in the slot of its deadline's digit there,
//! so each level's slots come after all of the level below. When the wheel's
//! time reaches a slot above level 0, its timers move down to where they now
//! belong. A timer moves at most once per level, so arming, firing and
//! cancelling are O(1), and a cancel unlinks the timer at once (a heap with
//! lazy cancel kept it until its deadline). Eight levels hold every deadline up
//! to 2^64 ns (584 years) away, so even very long timewaits need no overflow
//! list. Timers of one tick fire in no particular order.

mod slab;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use slab::Slab;
pub use slab::TimerId;

const TICK_SHIFT: u32 = 20;
/// The wheel's resolution: how late a timer may fire.
pub const TICK: Duration = Duration::from_nanos(1 << TICK_SHIFT);
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const LEVELS: usize = 8;
/// The list of timers whose tick has come, in the order they came due.
const DUE: u16 = (LEVELS * SLOTS) as u16;

/// Timers carrying a payload `T`, fired by tick.
pub struct Timers<T> {
    /// Tick 0.
    origin: Instant,
    /// The wheel's time in ticks: every timer due by then is on `DUE`.
    now: u64,
    /// Bit `s` of `occupied[k]`: slot `s` of level `k` holds timers.
    occupied: [u64; LEVELS],
    slab: Slab<T>,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl<T> Timers<T> {
    /// A wheel whose tick 0 is `origin`; deadlines before it fire at once.
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            now: 0,
            occupied: [0; LEVELS],
            slab: Slab::new(LEVELS * SLOTS + 1),
        }
    }

    /// Arms a timer for `deadline`.
    pub fn arm(&mut self, deadline: Instant, payload: T) -> TimerId {
        let tick = self.nanos(deadline).div_ceil(1 << TICK_SHIFT);
        let id = self.slab.insert(tick, payload);
        self.place(id.index());
        id
    }

    /// Cancels a timer and hands back its payload; `None` if it already fired
    /// or was cancelled.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let index = self.slab.find(id)?;
        let list = self.slab.list_of(index);
        let (_, payload) = self.slab.remove(index);
        if list != DUE && self.slab.is_empty_list(list) {
            self.occupied[usize::from(list) / SLOTS] &= !(1 << (usize::from(list) % SLOTS));
        }
        Some(payload)
    }

    /// When to look again: the earliest deadline, rounded up to its tick, if
    /// it is in the next 64 ticks; otherwise the start of the slot that holds
    /// it, which is earlier (the caller then finds nothing due, and asks
    /// again). Never after the earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        let tick = if self.slab.is_empty_list(DUE) {
            let (level, slot) = self.next_slot()?;
            self.slot_start(level, slot)
        } else {
            self.now
        };
        Some(self.origin + Duration::from_nanos(tick.saturating_mul(1 << TICK_SHIFT)))
    }

    /// Removes and returns one timer due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<(TimerId, T)> {
        if self.slab.is_empty_list(DUE) {
            self.advance(self.nanos(now) >> TICK_SHIFT);
        }
        let index = self.slab.front(DUE)?;
        Some(self.slab.remove(index))
    }

    /// How many timers are armed.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// Nanoseconds from tick 0 to `at` (0 before it; saturated far after).
    fn nanos(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin);
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Puts entry `index`, on no list, where its deadline belongs now.
    fn place(&mut self, index: u32) {
        let deadline = self.slab.deadline(index);
        let list = if deadline <= self.now {
            DUE
        } else {
            let highest_diff = 63 - (deadline ^ self.now).leading_zeros();
            let level = (highest_diff / SLOT_BITS) as usize;
            let slot = (deadline >> (level as u32 * SLOT_BITS)) as usize & (SLOTS - 1);
            self.occupied[level] |= 1 << slot;
            (level * SLOTS + slot) as u16
        };
        self.slab.push_back(list, index);
    }

    /// The first occupied slot: on the lowest occupied level, its lowest
    /// slot. Every occupied slot is ahead of the wheel's time on its level.
    fn next_slot(&self) -> Option<(usize, usize)> {
        let level = self.occupied.iter().position(|&bits| bits != 0)?;
        Some((level, self.occupied[level].trailing_zeros() as usize))
    }

    /// The first tick of `slot` of `level`.
    fn slot_start(&self, level: usize, slot: usize) -> u64 {
        let shift = level as u32 * SLOT_BITS;
        let span = shift + SLOT_BITS;
        (self.now >> span << span) | (slot as u64) << shift
    }

    /// Moves the wheel's time to tick `to`: each slot reached on the way
    /// passes its timers down a level, or, on level 0, to `DUE`.
    fn advance(&mut self, to: u64) {
        while let Some((level, slot)) = self.next_slot() {
            let start = self.slot_start(level, slot);
            if start > to {
                break;
            }
            self.now = start;
            self.occupied[level] &= !(1 << slot);
            let list = (level * SLOTS + slot) as u16;
            while let Some(index) = self.slab.front(list) {
                self.slab.unlink(index);
                self.place(index);
            }
        }
        // Nothing is due before `to`, and every timer still keeps its level
        // and slot relative to it.
        self.now = self.now.max(to);
    }
}
