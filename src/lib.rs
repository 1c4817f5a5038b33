//! ib_cm: the Linux kernel's InfiniBand Connection Manager API
//! (`include/rdma/ib_cm.h`) in userspace, as a C library.
//!
//! Layers, one direction of dependency: [`ffi`] (the C ABI) → [`cm`] (the
//! engine) → [`wire`] (CM MAD encoding), and [`cm`] → [`transport`] (where MADs
//! go). [`abi`] holds the C types both the engine and the ABI use; `os` (the
//! OS calls: signals, eventfd, sockets, privileges) sits below them all.
//!
//! Rust users have their own door to the same engine, beside the C ABI:
//! [`Device`], [`Listener`], [`Connection`] and the rest of [`api`],
//! re-exported here; [`aio`] has the same with futures (its tokio adapter
//! behind the `tokio` feature).
pub mod abi;
pub mod api;
pub mod cm;
#[allow(unsafe_code)] // the C ABI (docs/architecture.md lists the exemptions)
pub mod ffi;
pub mod log;
#[allow(unsafe_code)] // the OS calls
pub(crate) mod os;
pub mod pcap;
pub mod refusal;
pub mod sa;
pub mod switch;
pub mod transport;

// The crates below the root, under the names the modules here know them by.
pub use ib_cm_engine::timer;
pub use ib_cm_wire as wire;
pub use ib_cm_wire::errno;

pub use api::aio;
pub use api::handler;
pub use api::{
    AddressVector, AlternatePath, ConnectRequest, ConnectRequestBuilder, Connection, Device,
    Engine, Error, Event, Gid, IdleId, IncomingRequest, Listener, OutgoingRequest, Path, PathQuery,
    QpAttributes, QpState, QpType, ReceivedReply, RejectReason, RepInfo, Reply, ReqInfo, Result,
    SendStatus, SentReply, Side, State,
};
pub use api::{
    IncomingSidrRequest, OutgoingSidrRequest, SidrListener, SidrReply, SidrReplyParams,
    SidrRequest, SidrRequestBuilder, SidrStatus,
};
