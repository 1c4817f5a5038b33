//! Unix `SOCK_SEQPACKET` sockets behind safe functions: the MAD switch
//! (`ibcmd`) and its clients talk over them. std has no seqpacket socket, so
//! the few system calls are made here, where the crate's `unsafe` lives.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// The credentials of a socket's peer (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// One connected (or listening) seqpacket socket: every send is one message,
/// every receive takes one whole message.
#[derive(Debug)]
pub struct SeqPacket(OwnedFd);

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: constant arguments; the result is checked.
    let fd = check(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `struct sockaddr_un` for `path`; `-ENAMETOOLONG` if it does not fit.
fn address(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

impl SeqPacket {
    /// A socket listening on `path` (which must not exist).
    pub fn listen(path: &Path) -> io::Result<Self> {
        let fd = new_socket()?;
        let (addr, len) = address(path)?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        })?;
        // SAFETY: a bound socket of ours.
        check(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
        Ok(Self(fd))
    }

    /// A connection to the socket at `path`.
    pub fn connect(path: &Path) -> io::Result<Self> {
        Self::connect_within(path, None)
    }

    /// A connection to the socket at `path`, waiting at most `timeout` for
    /// room in its backlog (then `EAGAIN`): a listener that does not accept
    /// (stopped, out of file descriptors) must not block the caller for
    /// ever. The send timeout stays set.
    pub fn connect_within(path: &Path, timeout: Option<Duration>) -> io::Result<Self> {
        let fd = new_socket()?;
        if let Some(timeout) = timeout {
            // A Unix socket's connect waits for the backlog up to SO_SNDTIMEO.
            Self::set_timeout_of(&fd, libc::SO_SNDTIMEO, Some(timeout))?;
        }
        let (addr, len) = address(path)?;
        loop {
            // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
            let rc = unsafe {
                libc::connect(
                    fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_un).cast(),
                    len,
                )
            };
            match check(rc) {
                Ok(_) => return Ok(Self(fd)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Two connected sockets (in-process tests of the switch).
    pub fn pair() -> io::Result<(Self, Self)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two fds; the result is checked.
        check(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: two new fds that nothing else owns.
        Ok(unsafe {
            (
                Self(OwnedFd::from_raw_fd(fds[0])),
                Self(OwnedFd::from_raw_fd(fds[1])),
            )
        })
    }

    /// The next connection to this listening socket.
    pub fn accept(&self) -> io::Result<Self> {
        loop {
            // SAFETY: no address is asked for (NULL, NULL); the result is checked.
            let rc = unsafe {
                libc::accept4(
                    self.0.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            match check(rc) {
                // SAFETY: a new fd that nothing else owns.
                Ok(fd) => return Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) })),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends `msg` as one message, waiting for room unless `wait` is false
    /// (then a full socket is `WouldBlock`). Never raises SIGPIPE: a closed
    /// peer is `BrokenPipe`.
    pub fn send(&self, msg: &[u8], wait: bool) -> io::Result<()> {
        let flags = libc::MSG_NOSIGNAL | if wait { 0 } else { libc::MSG_DONTWAIT };
        loop {
            // SAFETY: `msg` is valid for `msg.len()` bytes.
            let rc =
                unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len(), flags) };
            if rc >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receives one message into `buf`: its length (0: the peer closed). A
    /// message longer than `buf` is cut; the length says how long it was.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            let rc = unsafe {
                libc::recv(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if rc >= 0 {
                return Ok(rc as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receives up to `lens.len()` messages in one system call
    /// (`recvmmsg`): message `i` into `buf[i * size..][..size]`, its length
    /// in `lens[i]` (longer than `size`: it was cut; 0: the peer closed);
    /// returns how many came. With `wait` it waits for the first and takes
    /// the others already queued (`MSG_WAITFORONE`); without, it takes what
    /// is queued and is `WouldBlock` when nothing is. A reader drains a
    /// burst with one call, where `recv` takes one per message and one more
    /// to find the socket empty.
    pub fn recv_burst(
        &self,
        buf: &mut [u8],
        size: usize,
        lens: &mut [usize],
        wait: bool,
    ) -> io::Result<usize> {
        let size = size.max(1);
        let count = lens.len().min(buf.len() / size);
        let mut iov: Vec<libc::iovec> = buf
            .chunks_exact_mut(size)
            .take(count)
            .map(|slot| libc::iovec {
                iov_base: slot.as_mut_ptr().cast(),
                iov_len: slot.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|iov| {
                // SAFETY: mmsghdr is plain data; all zeroes is a valid value
                // (no name, no control data).
                let mut msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
                msg.msg_hdr.msg_iov = iov;
                msg.msg_hdr.msg_iovlen = 1;
                msg
            })
            .collect();
        let flags = libc::MSG_TRUNC
            | if wait {
                libc::MSG_WAITFORONE
            } else {
                libc::MSG_DONTWAIT
            };
        loop {
            // SAFETY: `count` mmsghdrs, each with one iovec into its own
            // `size` bytes of `buf`; all of them outlive the call.
            let rc = unsafe {
                libc::recvmmsg(
                    self.0.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    count as libc::c_uint,
                    flags,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                let n = rc as usize;
                for (len, msg) in lens.iter_mut().zip(&msgs[..n]) {
                    *len = msg.msg_len as usize;
                }
                return Ok(n);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Wakes a `recv` in progress on another thread (it returns 0) and ends
    /// the connection for both sides.
    pub fn shutdown(&self) {
        // SAFETY: shutdown of a socket of ours; an error changes nothing.
        unsafe { libc::shutdown(self.0.as_raw_fd(), libc::SHUT_RDWR) };
    }

    /// The peer's pid, uid and gid as the kernel recorded them at connect.
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid for the option's size.
        check(unsafe {
            libc::getsockopt(
                self.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        })?;
        Ok(PeerCred {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
        })
    }

    /// Bounds how long a waiting `send` waits (then `WouldBlock`).
    pub fn set_send_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.set_timeout(libc::SO_SNDTIMEO, Some(timeout))
    }

    /// Bounds how long `recv` waits (then `WouldBlock`); `None`: for ever.
    pub fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_timeout(libc::SO_RCVTIMEO, timeout)
    }

    fn set_timeout(&self, option: libc::c_int, timeout: Option<Duration>) -> io::Result<()> {
        Self::set_timeout_of(&self.0, option, timeout)
    }

    fn set_timeout_of(
        fd: &OwnedFd,
        option: libc::c_int,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let timeout = timeout.unwrap_or_default();
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
        };
        // SAFETY: `tv` is a valid timeval for the option.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }

    /// Asks for a send buffer of `bytes`, up to the system's
    /// `net.core.wmem_max` (never beyond with `SO_SNDBUFFORCE`: the daemon's
    /// buffers towards a tenant are no larger than what the tenant could
    /// make itself). Returns the size it has now ([`Self::send_buffer`]).
    pub fn set_send_buffer(&self, bytes: usize) -> usize {
        let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: `size` is a valid int for the option. Failure leaves the
        // default, which send_buffer says.
        unsafe {
            libc::setsockopt(
                self.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        self.send_buffer()
    }

    /// How many bytes this socket sent that its peer has not read yet
    /// (`SIOCOUTQ`): kernel memory charged to this socket, held until the
    /// peer reads it or closes its end.
    pub fn unread(&self) -> io::Result<usize> {
        let mut bytes: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int to `bytes`.
        check(unsafe { libc::ioctl(self.0.as_raw_fd(), libc::TIOCOUTQ, &mut bytes) })?;
        Ok(usize::try_from(bytes).unwrap_or(0))
    }

    /// The send buffer the kernel gave, as asked for: it doubles what
    /// `SO_SNDBUF` asks (for its own bookkeeping), so half of what it says.
    pub fn send_buffer(&self) -> usize {
        let mut size: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `size` and `len` are valid for writes of an int option.
        let rc = unsafe {
            libc::getsockopt(
                self.0.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut size as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            usize::try_from(size).unwrap_or(0) / 2
        } else {
            0
        }
    }
}

/// What [`SeqPacket::wait`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    /// A message (or the peer's close, or an error) waits on the socket.
    pub socket: bool,
    /// The socket has room for a message (asked for only).
    pub writable: bool,
    /// The watched process has exited.
    pub exited: bool,
}

impl SeqPacket {
    /// Waits until a message (or the peer's close) waits on the socket, the
    /// socket has room (when `room` is asked for), `process` has exited, or
    /// `timeout` has passed (`None`: no limit); several may be true, none
    /// after the timeout.
    pub fn wait(
        &self,
        room: bool,
        process: Option<&PidFd>,
        timeout: Option<Duration>,
    ) -> io::Result<Readiness> {
        let socket = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN | if room { libc::POLLOUT } else { 0 },
            revents: 0,
        };
        let watched = libc::pollfd {
            fd: process.map_or(-1, |p| p.0.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [socket, watched];
        let nfds = if process.is_some() { 2 } else { 1 };
        // Rounded up: a wait cut to 0 ms would spin until the deadline.
        let millis = timeout.map_or(-1, |t| {
            libc::c_int::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX)
        });
        loop {
            // SAFETY: `fds` holds `nfds` (at most 2) valid pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), nfds, millis) };
            if rc >= 0 {
                // POLLHUP or POLLERR: the next recv says what happened.
                let readable = libc::POLLIN | libc::POLLHUP | libc::POLLERR;
                return Ok(Readiness {
                    socket: fds[0].revents & readable != 0,
                    writable: fds[0].revents & libc::POLLOUT != 0,
                    exited: fds[1].revents != 0,
                });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// A process, by a pidfd (`pidfd_open(2)`, Linux 5.3): readable once it has
/// exited, and never another process with a reused pid.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// The process `pid`: `ESRCH` if it is gone, `ENOSYS` before Linux 5.3,
    /// `EINVAL` for pid 0 (the peer is in another pid namespace).
    pub fn open(pid: i32) -> io::Result<Self> {
        if pid <= 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: pidfd_open takes a pid and flags (0) and returns a new fd
        // or -1; no memory is passed.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = check(libc::c_int::try_from(rc).unwrap_or(-1))?;
        // SAFETY: a new fd that nothing else owns (pidfds are close-on-exec).
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
}

/// A socket made elsewhere: the listening socket systemd passes to `ibcmd`.
impl From<OwnedFd> for SeqPacket {
    fn from(fd: OwnedFd) -> Self {
        Self(fd)
    }
}

impl AsRawFd for SeqPacket {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// SIGTERM, SIGINT and SIGHUP: what stops the daemon.
fn termination_signals() -> libc::sigset_t {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set before sigaddset and the
    // return read it; the signal numbers are constants.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        set.assume_init()
    }
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, so the threads it
/// starts inherit the mask and [`wait_for_termination`] alone receives them.
pub fn block_termination_signals() {
    let set = termination_signals();
    // SAFETY: a valid sigset; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and the threads
/// it starts afterwards), then waits for one of them: how the daemon's main
/// thread sleeps until it is told to stop. Returns the signal number.
pub fn wait_for_termination() -> i32 {
    block_termination_signals();
    let set = termination_signals();
    let mut sig = 0;
    // SAFETY: a valid sigset and a place for the signal number.
    while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
    sig
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_burst_takes_what_is_queued_in_one_call_and_says_how_long_each_was() {
        let (a, b) = SeqPacket::pair().unwrap();
        let (mut buf, mut lens) = (vec![0u8; 4 * 8], [0usize; 4]);
        let empty = b.recv_burst(&mut buf, 8, &mut lens, false).unwrap_err();
        assert_eq!(empty.kind(), io::ErrorKind::WouldBlock);
        for msg in [&b"one"[..], b"second", b"a message longer than its slot"] {
            a.send(msg, true).unwrap();
        }
        assert_eq!(b.recv_burst(&mut buf, 8, &mut lens, true).unwrap(), 3);
        assert_eq!(
            lens[..3],
            [3, 6, 30],
            "the cut message says how long it was"
        );
        assert_eq!(&buf[..3], b"one");
        assert_eq!(&buf[8..14], b"second");
        assert_eq!(&buf[16..24], b"a messag");
        // More than fit: the rest stays queued for the next call.
        for _ in 0..6 {
            a.send(b"x", true).unwrap();
        }
        assert_eq!(b.recv_burst(&mut buf, 8, &mut lens, false).unwrap(), 4);
        assert_eq!(b.recv_burst(&mut buf, 8, &mut lens, false).unwrap(), 2);
        drop(a);
        let n = b.recv_burst(&mut buf, 8, &mut lens, true).unwrap();
        assert!(
            n >= 1 && lens[0] == 0,
            "the peer's close reads as an empty message"
        );
    }
}
