//! `fork()` while the library is in use.
//!
//! A child has only the thread that called `fork()`: no worker (no handler
//! would ever run, no timer fire, no received MAD be processed), no umad
//! readers, and any library lock another thread held at the fork stays locked
//! forever. So once the process has opened a device, a `pthread_atfork` child
//! handler marks the child, and every entry point there fails at once with
//! `-EOWNERDEAD` (`ERR_PTR(-EOWNERDEAD)`; `ib_destroy_cm_id` does nothing)
//! before it takes any lock: the library's state belongs to threads that do
//! not exist in the child, like a robust mutex whose owner died, and no other
//! path of the library returns that errno. A child of a process that never
//! opened a device uses the library normally; the parent is unaffected.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::errno::{CmResult, Errno};

/// Set in a child forked after `register`.
static IN_CHILD: AtomicBool = AtomicBool::new(false);
static REGISTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_fork_child() {
    // One store: async-signal-safe, as a child handler must be.
    IN_CHILD.store(true, Ordering::Relaxed);
}

/// True in a child forked from a process that had opened a device: one
/// relaxed load, done by every entry point first.
pub fn in_forked_child() -> bool {
    IN_CHILD.load(Ordering::Relaxed)
}

/// Registers the child handler (once; a failure is retried by the next call).
pub fn register() -> CmResult {
    static REGISTERING: Mutex<()> = Mutex::new(());
    if REGISTERED.load(Ordering::Acquire) {
        return Ok(());
    }
    let _once = REGISTERING.lock();
    if REGISTERED.load(Ordering::Relaxed) {
        return Ok(());
    }
    // SAFETY: `on_fork_child` is an `extern "C" fn()` of this library, valid
    // while it is loaded (glibc drops a shared object's atfork handlers when
    // it is unloaded); no prepare or parent handler.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
    if rc != 0 {
        return Err(Errno(rc));
    }
    REGISTERED.store(true, Ordering::Release);
    Ok(())
}

/// Runs `child` in a forked child of this process and returns its exit
/// code (tests: what the library does in a forked child). The child ends
/// with `_exit`, running no destructor and no atexit handler of the
/// parent's.
#[cfg(test)]
pub(crate) fn exit_code_of_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: fork() in a multithreaded process: the child runs only
    // `child` (a test's, which uses the library's forked-child paths that
    // take no lock) and then _exit(2)s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child at once, as a forked child must.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid");
    assert!(
        libc::WIFEXITED(status),
        "the child did not exit: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}
