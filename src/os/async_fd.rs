//! A descriptor on tokio's reactor (the async API's tokio adapter).

use std::os::fd::OwnedFd;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// `fd` registered with the current tokio runtime's reactor for
/// readability. Must be called in the runtime's context.
pub fn readable(fd: OwnedFd) -> std::io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is an open descriptor until it is dropped, and
    // its `as_raw_fd` always gives that one; the `AsyncFd` owns it, so it
    // stays open and the same for the registration's whole life.
    let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
    Ok(registered?)
}
