//! The few C library calls the rest of the library needs, behind safe
//! functions (the engine, `log` and `pcap` have no `unsafe`).

use std::ffi::{CStr, OsStr, OsString, c_char};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

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

/// The real, effective and saved user IDs of the calling thread (glibc keeps
/// every thread's the same: its `setresuid` changes them all).
pub fn user_ids() -> [u32; 3] {
    let mut ids = [0 as libc::uid_t; 3];
    let [r, e, s] = &mut ids;
    // SAFETY: three valid places for a uid_t each; getresuid cannot fail
    // with valid pointers.
    unsafe { libc::getresuid(r, e, s) };
    ids
}

/// The real, effective and saved group IDs of the calling thread.
pub fn group_ids() -> [u32; 3] {
    let mut ids = [0 as libc::gid_t; 3];
    let [r, e, s] = &mut ids;
    // SAFETY: three valid places for a gid_t each.
    unsafe { libc::getresgid(r, e, s) };
    ids
}

/// The supplementary group IDs of the calling thread.
pub fn supplementary_groups() -> std::io::Result<Vec<u32>> {
    // SAFETY: with a size of 0, getgroups only counts (nothing is written).
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut groups = vec![0 as libc::gid_t; usize::try_from(n).map_err(|_| last_error())?];
    // SAFETY: `groups` has room for the `n` entries asked for; a group added
    // in between makes it fail (EINVAL) rather than write past the end.
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) };
    groups.truncate(usize::try_from(n).map_err(|_| last_error())?);
    Ok(groups)
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Sets `no_new_privs` in every thread of the process: no `execve` can gain
/// privileges any more (set-user-ID, file capabilities). The flag is per
/// thread and `prctl(PR_SET_NO_NEW_PRIVS)` sets the caller's alone, so a
/// thread that was already running (a preloaded library's: umad2sim starts
/// one before `main`) would keep none. The kernel sets it on every thread
/// it makes share a seccomp filter (`SECCOMP_FILTER_FLAG_TSYNC`), so one
/// that allows every call is installed: it changes nothing else, and since
/// Linux 5.11 a filter that allows a call is not even run for it. Threads
/// started afterwards inherit both. Nothing is done for a process that
/// inherited the flag through `execve` (systemd's `NoNewPrivileges=yes`,
/// whose `SystemCallFilter=@system-service` refuses `seccomp`): every thread
/// has it then.
pub fn set_no_new_privs_in_every_thread() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } == 1 {
        return Ok(());
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(last_error());
    }
    let mut allow_all = [libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: libc::SECCOMP_RET_ALLOW,
    }];
    let program = libc::sock_fprog {
        len: allow_all.len() as u16,
        filter: allow_all.as_mut_ptr(),
    };
    // SAFETY: `program` points to `len` valid instructions, which the kernel
    // copies before the call returns.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &program as *const libc::sock_fprog,
        )
    };
    match rc {
        0 => Ok(()),
        rc if rc < 0 => Err(last_error()),
        // A thread whose own filters differ cannot be synchronised.
        tid => Err(std::io::Error::other(format!(
            "thread {tid} has seccomp filters of its own"
        ))),
    }
}

/// Becomes user `uid` of group `gid` for good: no supplementary groups, then
/// real, effective and saved GID, then UID (after the GID: that needs the
/// privilege the UID change gives up). A process that leaves UID 0 this way
/// loses its permitted, effective and ambient capabilities (capabilities(7),
/// unless SECBIT_KEEP_CAPS or SECBIT_NO_SETUID_FIXUP is set: the caller
/// checks). glibc applies each call to every thread of the process. The
/// error names the call that failed.
pub fn become_user(uid: u32, gid: u32) -> std::io::Result<()> {
    let step = |name: &str, rc: libc::c_int| {
        if rc == 0 {
            return Ok(());
        }
        let e = last_error();
        Err(std::io::Error::new(e.kind(), format!("{name}: {e}")))
    };
    // SAFETY: an empty list (0 entries, NULL) is what setgroups reads.
    step("setgroups", unsafe { libc::setgroups(0, std::ptr::null()) })?;
    // SAFETY: plain integer arguments.
    step("setresgid", unsafe { libc::setresgid(gid, gid, gid) })?;
    // SAFETY: plain integer arguments.
    step("setresuid", unsafe { libc::setresuid(uid, uid, uid) })
}

/// Whether `setuid(0)` succeeds: after dropping root it must not (and a
/// process for which it does is root again).
pub fn can_become_root() -> bool {
    // SAFETY: a plain integer argument.
    unsafe { libc::setuid(0) == 0 }
}

/// The first descriptor of the sd_listen_fds(3) protocol.
const LISTEN_FDS_START: std::os::fd::RawFd = 3;

/// How many sockets the sd_listen_fds(3) protocol passes to process `pid`
/// (`LISTEN_PID`, `LISTEN_FDS`): 0 when unset, or meant for another process
/// (they were inherited through an `exec`), or not numbers.
pub fn listen_fds_for(pid: u32, listen_pid: Option<&str>, listen_fds: Option<&str>) -> u32 {
    match (
        listen_pid.map(str::parse::<u32>),
        listen_fds.map(str::parse),
    ) {
        (Some(Ok(p)), Some(Ok(n))) if p == pid => n,
        _ => 0,
    }
}

/// The listening socket a socket unit (or systemd-socket-activate) passed
/// to this process by the sd_listen_fds(3) protocol, which libsystemd
/// implements for others: `LISTEN_PID` this process's pid and `LISTEN_FDS`
/// 1, the socket at descriptor 3. `None` when none was passed. An error when
/// more than one was, or when descriptor 3 is not a listening `AF_UNIX`
/// `SOCK_SEQPACKET` socket. The socket is made close-on-exec and blocking,
/// as [`crate::os::seqpacket::SeqPacket::listen`] makes one (systemd passes
/// its sockets non-blocking). Only the first call can take it; later ones
/// get `None`.
pub fn inherited_seqpacket_listener() -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicBool, Ordering};
    static TAKEN: AtomicBool = AtomicBool::new(false);
    let var = |name| std::env::var(name).ok();
    let passed = listen_fds_for(
        std::process::id(),
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
    );
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
    match passed {
        0 => return Ok(None),
        1 => {}
        n => return Err(invalid(format!("{n} sockets passed (LISTEN_FDS), not one"))),
    }
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Ok(None);
    }
    // SAFETY: F_GETFD only tells whether the descriptor is open.
    if unsafe { libc::fcntl(LISTEN_FDS_START, libc::F_GETFD) } < 0 {
        return Err(last_error());
    }
    // SAFETY: by the protocol descriptor 3 was passed to this process for it
    // to own; it is open (above), and TAKEN lets one OwnedFd alone own it.
    let fd = unsafe { OwnedFd::from_raw_fd(LISTEN_FDS_START) };
    let option = |name| {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are valid for the int getsockopt writes.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    };
    let listening = option(libc::SO_DOMAIN) == Some(libc::AF_UNIX)
        && option(libc::SO_TYPE) == Some(libc::SOCK_SEQPACKET)
        && option(libc::SO_ACCEPTCONN) == Some(1);
    if !listening {
        return Err(invalid(
            "descriptor 3 is not a listening AF_UNIX SOCK_SEQPACKET socket".into(),
        ));
    }
    // SAFETY: fcntl on a descriptor `fd` owns, integer arguments only.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0
            || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) != 0
            || libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) != 0
        {
            return Err(last_error());
        }
    }
    Ok(Some(fd))
}

/// The path a Unix socket is bound to (`getsockname`); `None` for an
/// unbound or abstract one.
pub fn unix_socket_path(socket: std::os::fd::BorrowedFd<'_>) -> Option<std::path::PathBuf> {
    use std::os::fd::AsRawFd;
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `addr` has room for the `len` bytes getsockname may write.
    let rc = unsafe {
        libc::getsockname(
            socket.as_raw_fd(),
            (&mut addr as *mut libc::sockaddr_un).cast(),
            &mut len,
        )
    };
    if rc != 0 || addr.sun_family != libc::AF_UNIX as libc::sa_family_t {
        return None;
    }
    let path: Vec<u8> = addr
        .sun_path
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    (!path.is_empty()).then(|| std::path::PathBuf::from(OsString::from_vec(path)))
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

    #[test]
    fn listen_fds_for_counts_only_what_was_passed_to_this_process() {
        assert_eq!(listen_fds_for(42, Some("42"), Some("1")), 1);
        assert_eq!(listen_fds_for(42, Some("42"), Some("2")), 2);
        // Inherited from a parent that was socket-activated: not ours.
        assert_eq!(listen_fds_for(42, Some("41"), Some("1")), 0);
        assert_eq!(listen_fds_for(42, None, Some("1")), 0);
        assert_eq!(listen_fds_for(42, Some("42"), None), 0);
        assert_eq!(listen_fds_for(42, Some("42"), Some("x")), 0);
        assert_eq!(listen_fds_for(42, Some("forty-two"), Some("1")), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn unix_socket_path_is_the_bound_path() {
        use std::os::fd::AsFd;
        let path = std::env::temp_dir().join(format!("ibcm-sys-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_eq!(unix_socket_path(listener.as_fd()), Some(path.clone()));
        std::fs::remove_file(&path).unwrap();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(unix_socket_path(a.as_fd()), None, "unbound");
    }
}
