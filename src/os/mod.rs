//! The OS calls the library and the daemon make, behind safe functions:
//! below the engine, so that [`crate::cm`], [`crate::transport`] and
//! [`crate::switch`] depend downwards on it and never on the C ABI
//! ([`crate::ffi`]). One of the three places with `unsafe` (with `ffi/` and
//! the umad transport), each block with its `// SAFETY:` line.
//!
//! - [`sys`]: secure_getenv, signal masks, eventfd, CPU affinity, privileges
//!   (the daemon's `--user`), socket activation.
//! - `async_fd` (feature `tokio`): a descriptor on tokio's reactor.
//! - [`fork`]: the `pthread_atfork` mark of a forked child, which both
//!   doors (the C ABI and the Rust API) refuse.
//! - [`seqpacket`]: the `SOCK_SEQPACKET` Unix sockets between `ibcmd` and its
//!   processes, with the peer's credentials.

#[cfg(feature = "tokio")]
pub(crate) mod async_fd;
pub(crate) mod fork;
pub(crate) mod rdma_netlink;
pub(crate) mod seqpacket;
pub(crate) mod sys;
