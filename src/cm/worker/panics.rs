//! Panics in work items: contained, counted and logged.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

use super::handler::IN_HANDLER;
use crate::ibcm_log;

/// Work items and timers dropped because the engine panicked handling them.
pub(super) static PANICKED: AtomicU64 = AtomicU64::new(0);

/// How many work items and timers were dropped by a panic so far (tests; the
/// log has a line for each).
#[cfg(test)]
pub fn panicked() -> u64 {
    PANICKED.load(Ordering::Relaxed)
}

/// Runs one work item or timer; a panic drops it, and the worker goes on.
/// False if it panicked.
pub(super) fn contain(what: &str, f: impl FnOnce()) -> bool {
    if catch_unwind(AssertUnwindSafe(f)).is_ok() {
        return true;
    }
    PANICKED.fetch_add(1, Ordering::Relaxed);
    // The panic may have left a handler's mark on this thread.
    IN_HANDLER.with(|h| h.set([0; 2]));
    ibcm_log!(Error, "internal error while handling {what}: dropped");
    false
}
