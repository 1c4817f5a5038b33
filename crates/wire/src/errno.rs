//! Error values: the kernel's errno numbers, positive inside the library and
//! negated once, at the C boundary (`ffi`).

use std::fmt;

/// A positive errno value (`libc::EINVAL`, …).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

pub const EINVAL: Errno = Errno(libc::EINVAL);
pub const EBUSY: Errno = Errno(libc::EBUSY);
pub const ENODEV: Errno = Errno(libc::ENODEV);
pub const ENOENT: Errno = Errno(libc::ENOENT);
pub const ENOMEM: Errno = Errno(libc::ENOMEM);
pub const EISCONN: Errno = Errno(libc::EISCONN);
pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
pub const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
pub const ENETDOWN: Errno = Errno(libc::ENETDOWN);
pub const EIO: Errno = Errno(libc::EIO);
pub const EADDRINUSE: Errno = Errno(libc::EADDRINUSE);
pub const ELIBACC: Errno = Errno(libc::ELIBACC);
pub const EDEADLK: Errno = Errno(libc::EDEADLK);
pub const EAGAIN: Errno = Errno(libc::EAGAIN);
pub const EPERM: Errno = Errno(libc::EPERM);
pub const EACCES: Errno = Errno(libc::EACCES);
pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
pub const EINTR: Errno = Errno(libc::EINTR);
pub const EOWNERDEAD: Errno = Errno(libc::EOWNERDEAD);
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
