//! The Rust API: the same engine as the C ABI, with ownership for the
//! lifecycle, typed events and one error type.
//!
//! A [`Device`] opens a port's CM; a [`Listener`] takes connection
//! requests ([`IncomingRequest`]) that are accepted with a [`Reply`] or
//! rejected; [`Device::connect`] sends a [`ConnectRequest`]. Either way a
//! [`Connection`] results, whose [`Event`]s come in order and which
//! disconnects with a DREQ ([`Connection::disconnect`]) or answers the
//! peer's ([`Connection::reply_disconnect`]).
//!
//! For UD QPs, [`Device::sidr_request`] asks which QP serves a service ID
//! (SIDR) and a [`SidrListener`] answers ([`IncomingSidrRequest::reply`]).
//!
//! Every value that owns a CM id destroys it when dropped, doing what
//! `ib_destroy_cm_id` does in its state (REJ during setup, DREQ when
//! established, DREP after a DREQ), without waiting for the peer. The CM's
//! handlers only queue events for their owner: a call that waits, waits on
//! that queue, from any thread.
//!
//! Connect and disconnect, one process on the in-process fabric (README.md,
//! "Using it from Rust", shows these lines):
//!
//! ```
//! use ib_cm::{ConnectRequest, Device, Event, Reply};
//!
//! # fn main() -> ib_cm::Result<()> {
//! let (a, b) = (Device::open("loop0")?, Device::open("loop1")?);
//! let listener = b.listen(0x1234)?;
//! let server = std::thread::spawn(move || -> ib_cm::Result<Vec<u8>> {
//!     let mut conn = listener.accept()?.accept(Reply::new(0x22))?; // REQ in, REP out, RTU in
//!     let Event::DreqReceived { private_data } = conn.next_event()? else { panic!() };
//!     conn.reply_disconnect(b"bye to you too")?; // DREP
//!     Ok(private_data)
//! });
//! let path = a.path_to(1, b.gid(1, 0)?)?;
//! let mut conn = a.connect(ConnectRequest::builder(path, 0x1234, 0x11).build())?;
//! let drep = conn.disconnect(b"bye")?; // DREQ out, DREP in: its 224 bytes
//! assert!(drep.starts_with(b"bye to you too"));
//! assert!(server.join().unwrap()?.starts_with(b"bye"));
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod aio;
mod connection;
mod device;
mod engine;
mod error;
mod event;
#[cfg(test)]
mod fork_tests;
mod handle;
pub mod handler;
mod listener;
mod params;
mod path_query;
#[cfg(test)]
mod path_query_tests;
mod qp;
mod queue;
#[cfg(feature = "sideway")]
mod sideway;
mod sidr;
mod types;

pub use connection::{Connection, IdleId, OutgoingRequest, ReceivedReply, Side};
pub use device::Device;
pub use engine::Engine;
pub use error::{Error, Result};
pub use event::{Event, RepInfo, ReqInfo};
pub use listener::{IncomingRequest, Listener, SentReply};
pub use params::{ConnectRequest, ConnectRequestBuilder, Reply};
pub use path_query::PathQuery;
pub use qp::{AddressVector, AlternatePath, QpAttributes, QpState};
pub use sidr::{
    IncomingSidrRequest, OutgoingSidrRequest, SidrListener, SidrReply, SidrReplyParams,
    SidrRequest, SidrRequestBuilder, SidrStatus,
};
pub use types::{Gid, Path, QpType, RejectReason, SendStatus, State};
