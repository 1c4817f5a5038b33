//! Test-only panics inside the worker and inside `send_req` (never compiled
//! into the library C links).

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
