//! Receiving in batches: a reader that takes several MADs off its port in
//! one go hands them on with one wake-up of the thread that handles them.
//!
//! Waking the worker for each MAD of a burst costs a system call each, and
//! where the reader and the worker share one CPU the woken worker takes the
//! CPU from the reader at once, so a burst is handled one MAD per context
//! switch. Inside [`receive_batch`] a wake-up is owed instead
//! ([`defer_wake`]) and paid once when the batch ends, however it ends.
//!
//! Only the reader's own thread sees its batch: anything else queued
//! meanwhile (a handler's event, a timer) wakes the worker as before.

use std::cell::RefCell;
use std::sync::Arc;

/// Messages a reader takes per wait (`poll`, a blocking `recv`): a burst
/// (1,000 REQs queued at once) costs one read per MAD and one wake-up of the
/// worker per 64, and the worker starts on the first 64 while more arrive.
pub const BURST: usize = 64;

/// Whom a batch owes its wake-up: the worker of the engine its MADs went to.
pub trait Wake: Send + Sync {
    fn wake(&self);
}

enum Batch {
    /// Not receiving a batch: wake-ups happen at once.
    Off,
    /// In a batch, nothing owed yet.
    Open,
    /// In a batch, with this wake-up owed at its end.
    Owed(Arc<dyn Wake>),
}

thread_local! {
    static BATCH: RefCell<Batch> = const { RefCell::new(Batch::Off) };
}

/// Pays the owed wake-up when the batch ends, also by a panic.
struct EndOfBatch;

impl Drop for EndOfBatch {
    fn drop(&mut self) {
        if let Batch::Owed(waker) = BATCH.with(|b| b.replace(Batch::Off)) {
            waker.wake();
        }
    }
}

/// Runs `receive`, which hands on the MADs of one batch: the wake-ups they
/// ask for ([`defer_wake`]) happen once, when it returns. Batches do not
/// nest: an inner one is part of the outer.
pub fn receive_batch<R>(receive: impl FnOnce() -> R) -> R {
    if !BATCH.with(|b| matches!(*b.borrow(), Batch::Off)) {
        return receive();
    }
    BATCH.with(|b| *b.borrow_mut() = Batch::Open);
    let _end = EndOfBatch;
    receive()
}

/// Owes `waker`'s wake-up to the end of this thread's batch, if it receives
/// one (true); false when it does not, and the caller wakes at once. One
/// wake-up is owed at a time: a batch hands its MADs to one worker (one owed
/// to another engine's worker before is paid at once).
pub fn defer_wake<W: Wake + 'static>(waker: &Arc<W>) -> bool {
    let earlier = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        match &*b {
            Batch::Off => Err(()),
            Batch::Owed(owed) if std::ptr::addr_eq(Arc::as_ptr(owed), Arc::as_ptr(waker)) => {
                Ok(None)
            }
            Batch::Open | Batch::Owed(_) => {
                let new: Arc<dyn Wake> = waker.clone();
                match std::mem::replace(&mut *b, Batch::Owed(new)) {
                    Batch::Owed(earlier) => Ok(Some(earlier)),
                    _ => Ok(None),
                }
            }
        }
    });
    match earlier {
        Err(()) => false,
        Ok(earlier) => {
            // Woken with the thread's batch no longer borrowed.
            if let Some(earlier) = earlier {
                earlier.wake();
            }
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::cell::Cell;

    thread_local! {
        // Per thread: the wake-up runs on the batch's thread, and tests run
        // side by side.
        static WOKEN: Cell<usize> = const { Cell::new(0) };
    }
    struct Counting;
    impl Wake for Counting {
        fn wake(&self) {
            WOKEN.with(|w| w.set(w.get() + 1));
        }
    }
    fn woken() -> usize {
        WOKEN.with(|w| w.get())
    }

    #[test]
    fn a_batch_wakes_once_at_its_end_and_outside_one_nothing_is_deferred() {
        let wake = &Arc::new(Counting);
        let before = woken();
        assert!(!defer_wake(wake), "deferred outside a batch");
        receive_batch(|| {
            for _ in 0..10 {
                assert!(defer_wake(wake));
            }
            receive_batch(|| assert!(defer_wake(wake)));
            assert_eq!(woken(), before, "woken inside the batch");
        });
        assert_eq!(woken(), before + 1);
        receive_batch(|| {});
        assert_eq!(woken(), before + 1, "an empty batch woke");
        assert!(!defer_wake(wake), "the batch stayed open");
    }

    #[test]
    fn a_batch_ended_by_a_panic_still_wakes() {
        let wake = &Arc::new(Counting);
        let before = woken();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            receive_batch(|| {
                defer_wake(wake);
                panic!("in a batch");
            })
        }));
        assert!(r.is_err());
        assert_eq!(woken(), before + 1);
        assert!(!defer_wake(wake), "the batch stayed open after the panic");
    }

    #[test]
    fn a_batch_for_two_workers_wakes_each_once() {
        let (a, b) = (&Arc::new(Counting), &Arc::new(Counting));
        let before = woken();
        receive_batch(|| {
            assert!(defer_wake(a));
            assert!(defer_wake(a));
            assert_eq!(woken(), before);
            assert!(defer_wake(b)); // a's wake-up is paid here
            assert_eq!(woken(), before + 1);
        });
        assert_eq!(woken(), before + 2);
    }
}
