//! The few C library calls the rest of the library needs, behind safe
//! functions (the engine, `log` and `pcap` have no `unsafe`).

use std::ffi::{CStr, OsStr, OsString, c_char};
use std::os::unix::ffi::OsStrExt;

/// `secure_getenv(name)`: the variable's value, or `None` when it is unset or
/// the process runs set-user-ID / set-group-ID (or with capabilities), so an
/// unprivileged caller cannot pick the files a privileged process writes
/// (`IBCM_PCAP`) or make it chatty (`IBCM_LOG`).
///
/// Like every `getenv`, it must not race a `setenv` of another thread; the
/// library reads each variable once, at first use.
pub fn secure_var_os(name: &CStr) -> Option<OsString> {
    // Miri cannot call into libc here; no test under it is privileged anyway.
    if cfg!(miri) {
        return std::env::var_os(OsStr::from_bytes(name.to_bytes()));
    }
    // Declared here, not at module level, so that cbindgen does not put it in
    // the header. glibc 2.17 and later; the `libc` crate does not declare it.
    unsafe extern "C" {
        fn secure_getenv(name: *const c_char) -> *mut c_char;
    }
    // SAFETY: `name` is NUL-terminated; the result is NULL or a NUL-terminated
    // string of the environment, copied before anything can change it.
    let value = unsafe { secure_getenv(name.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated, as returned by `secure_getenv`.
    let bytes = unsafe { CStr::from_ptr(value) }.to_bytes();
    Some(OsStr::from_bytes(bytes).to_owned())
}

/// Blocks every signal in the calling thread: the library's threads never run
/// the application's signal handlers, and their blocking calls are never
/// interrupted by them (the application's own threads receive its signals).
/// SIGKILL and SIGSTOP cannot be blocked; synchronous faults (SIGSEGV, …)
/// still kill the process as they would anyway.
pub fn block_all_signals() {
    // SAFETY: `set` is a local sigset_t that sigfillset initialises before
    // pthread_sigmask reads it; the old mask is not asked for (NULL).
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(set.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// How many CPUs the calling thread may run on (its affinity mask); 0 when
/// it cannot be told. A cgroup CPU quota does not count: threads on two CPUs
/// of the mask run at the same moment even when the quota caps their sum.
pub fn cpus_in_affinity() -> usize {
    let mut set = std::mem::MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: `set` is a zeroed cpu_set_t of the size passed; the kernel
    // writes at most that many bytes.
    let rc = unsafe {
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set.as_mut_ptr())
    };
    if rc != 0 {
        return 0; // more CPUs than a cpu_set_t holds (EINVAL)
    }
    // SAFETY: initialised by the zeroing, then by sched_getaffinity.
    let set = unsafe { set.assume_init() };
    // SAFETY: CPU_COUNT only reads the set.
    usize::try_from(unsafe { libc::CPU_COUNT(&set) }).unwrap_or(0)
}

/// Whether standard error is a regular file (or `/dev/null`-like: it never
/// blocks a writer); false for a pipe, a socket or a terminal, where a
/// `write(2)` blocks as long as the reader does not read.
pub fn stderr_never_blocks() -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `struct stat` into `st` when it returns 0,
    // and `st` is read only then.
    unsafe {
        if libc::fstat(libc::STDERR_FILENO, st.as_mut_ptr()) != 0 {
            return true; // closed: a write fails at once
        }
        let mode = st.assume_init().st_mode & libc::S_IFMT;
        mode == libc::S_IFREG || (mode == libc::S_IFCHR && st.assume_init().st_rdev == null_rdev())
    }
}

/// The device number of `/dev/null` (1, 3), which never blocks.
fn null_rdev() -> libc::dev_t {
    libc::makedev(1, 3)
}

/// Whether the calling thread blocks every signal it can block (tests).
#[cfg(test)]
pub fn blocks_all_signals() -> bool {
    // SAFETY: both sets are initialised (sigfillset, pthread_sigmask's
    // output) before they are read.
    unsafe {
        let mut current = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        if libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), current.as_mut_ptr()) != 0 {
            return false;
        }
        let current = current.assume_init();
        (1..32)
            .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
            .all(|s| libc::sigismember(&current, s) == 1)
    }
}

/// A new eventfd (close-on-exec, non-blocking, counter 0), as a `File` whose
/// `read`/`write` are eventfd's: `write` of 8 bytes adds to the counter,
/// `read` of 8 bytes takes it and leaves 0 (`-EAGAIN` at 0).
pub fn eventfd() -> std::io::Result<std::fs::File> {
    // SAFETY: eventfd takes no pointers; its result is checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_var_os_reads_the_environment() {
        // PATH is set in any test environment, and tests are not set-user-ID.
        assert_eq!(secure_var_os(c"PATH"), std::env::var_os("PATH"));
        assert_eq!(secure_var_os(c"IBCM_SURELY_UNSET_VARIABLE"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn block_all_signals_blocks_them_in_this_thread_only() {
        let blocked = std::thread::spawn(|| {
            block_all_signals();
            blocks_all_signals()
        })
        .join()
        .unwrap();
        assert!(blocked);
    }
}
