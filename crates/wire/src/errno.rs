//! Error values: the kernel's errno numbers, positive inside the library and
//! negated once, at the C boundary (`ffi`).

use std::fmt;

/// A positive errno value (`libc::EINVAL`, …).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

/// `EINVAL`: invalid argument.
pub const EINVAL: Errno = Errno(libc::EINVAL);
/// `EBUSY`: device or resource busy.
pub const EBUSY: Errno = Errno(libc::EBUSY);
/// `ENODEV`: no such device.
pub const ENODEV: Errno = Errno(libc::ENODEV);
/// `ENOENT`: no such entry.
pub const ENOENT: Errno = Errno(libc::ENOENT);
/// `ENOMEM`: out of memory.
pub const ENOMEM: Errno = Errno(libc::ENOMEM);
/// `EISCONN`: already connected.
pub const EISCONN: Errno = Errno(libc::EISCONN);
/// `EOPNOTSUPP`: operation not supported.
pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
/// `EHOSTUNREACH`: no route to host.
pub const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
/// `ENETDOWN`: network is down.
pub const ENETDOWN: Errno = Errno(libc::ENETDOWN);
/// `EIO`: I/O error.
pub const EIO: Errno = Errno(libc::EIO);
/// `EADDRINUSE`: address already in use.
pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
/// `ELIBACC`: cannot access a needed shared library.
pub const ELIBACC: Errno = Errno(libc::ELIBACC);
/// `EDEADLK`: the operation would deadlock.
pub const EDEADLK: Errno = Errno(libc::EDEADLK);
/// `EAGAIN`: try again.
pub const EAGAIN: Errno = Errno(libc::EAGAIN);
/// `EPERM`: operation not permitted.
pub const EPERM: Errno = Errno(libc::EPERM);
/// `EACCES`: permission denied.
pub const EACCES: Errno = Errno(libc::EACCES);
/// `ETIMEDOUT`: timed out.
pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
/// `EINTR`: interrupted.
pub const EINTR: Errno = Errno(libc::EINTR);
/// `EOWNERDEAD`: the owner died (of a lock or a resource).
pub const EOWNERDEAD: Errno = Errno(libc::EOWNERDEAD);
/// `ENOBUFS`: no buffer space.
pub const ENOBUFS: Errno = Errno(libc::ENOBUFS);

impl Errno {
    /// The kernel-style return value: `-errno`.
    pub fn to_neg(self) -> i32 {
        -self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Errno({})", std::io::Error::from_raw_os_error(self.0))
    }
}

/// The result of an engine operation.
pub type CmResult<T = ()> = Result<T, Errno>;
