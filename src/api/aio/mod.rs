//! The async API: the same devices, listeners and connections as the
//! blocking API, whose waits are futures.
//!
//! A device of this API is opened in the CM's event-fd mode
//! (`IBCM_EVENTS_FD`): the library's worker receives MADs and runs the
//! timers as always, but queues the handler calls of the device's ids instead
//! of running them; a [`Driver`] runs them on the program's own reactor when
//! the device's eventfd turns readable. Each handler only moves its event to
//! the queue of its listener or connection and wakes the futures waiting
//! there. So `listener.accept().await`, `device.connect(request).await`,
//! `conn.disconnect(data).await` and `conn.next_event().await` need no thread
//! of their own, and a single-threaded runtime runs everything but the
//! library's worker.
//!
//! Why event-fd mode rather than the worker's handlers waking the futures
//! directly (which would work too, with no descriptor at all): the events
//! then reach the futures on the runtime's own thread, so a wake is a local
//! one on a single-threaded runtime instead of a cross-thread unpark per
//! event, and the worker never runs user-visible code; it is also the mode
//! C programs with an event loop use, so both doors share one tested path.
//! Measured (examples/cmtime.rs, 10,000 connections, one current-thread
//! runtime): with the worker's handlers waking the futures, every wake was
//! a write to the reactor's eventfd (9,654, and 18,485 `epoll_wait`s) or,
//! without tokio's IO driver, a futex (9,839), and connect took 1.99 times
//! ibcm-cmtime's where this mode took 1.59. Handlers on the worker that
//! only hand the wakers to the driver (one eventfd write a burst) made the
//! disconnect faster (1.82 against 2.03) but the connect slower (2.03
//! against 1.58): the events' memory, allocated on the worker and freed on
//! the runtime's thread, made glibc grow and shrink the worker's arena
//! (3,923 `mprotect`s). The core is this mode's: the engine's queue of
//! handler calls, run by the [`Driver`] wherever the program polls.
//! The price is that some task must drive the device:
//! `Device::open_tokio` (feature `tokio`) spawns it on tokio, [`Device::open`] hands the
//! [`Driver`] to the program for any other runtime.
//!
//! A device is either blocking or async (the mode is the device's): open it
//! with [`crate::Device::open`] or with this module's [`Device`].
//!
//! Every future is cancel-safe: dropping one that waits loses nothing.
//! [`Listener::accept`] takes a request only when it returns it, and the
//! events a wait passed over stay, in order, for the next call. Dropping a
//! future that owns a request (from [`Device::connect`]) or a value that
//! owns a CM id does what `ib_destroy_cm_id` does in its state, at once,
//! and never waits for the peer; it may wait for a handler of that id
//! running on another thread, and those only queue.
//!
//! ```
//! # #[cfg(feature = "tokio")]
//! # fn main() -> ib_cm::Result<()> {
//! use ib_cm::aio::Device;
//! use ib_cm::{ConnectRequest, Event, Reply};
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
//! rt.block_on(async {
//!     let (a, b) = (Device::open_tokio("loop0")?, Device::open_tokio("loop1")?);
//!     let listener = b.listen(0x1234)?;
//!     let path = a.path_to(1, b.gid(1, 0)?)?;
//!     let server = async {
//!         let mut conn = listener.accept().await?.accept(Reply::new(0x22)).await?;
//!         let Event::DreqReceived { private_data } = conn.next_event().await? else {
//!             panic!()
//!         };
//!         conn.reply_disconnect(b"bye to you too")?; // DREP
//!         ib_cm::Result::Ok(private_data)
//!     };
//!     let client = async {
//!         let mut conn = a.connect(ConnectRequest::builder(path, 0x1234, 0x11).build()).await?;
//!         conn.disconnect(b"bye").await // DREQ out, DREP in
//!     };
//!     let (dreq, drep) = tokio::join!(server, client);
//!     assert!(dreq?.starts_with(b"bye"));
//!     assert!(drep?.starts_with(b"bye to you too"));
//!     Ok(())
//! })
//! # }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```

mod conn;
mod driver;
mod sidr;
#[cfg(feature = "tokio")]
mod tokio;

use std::sync::Arc;

pub use conn::{
    Connection, IdleId, IncomingRequest, Listener, OutgoingRequest, ReceivedReply, SentReply,
};
pub use driver::Driver;
pub(crate) use driver::StopSignal;
pub use sidr::{OutgoingSidrRequest, SidrListener};

use super::device::DeviceShared;
use super::error::{Result, call};
use super::params::ConnectRequest;
use super::sidr::{SidrReply, SidrRequest};
use super::types::{Gid, Path};
use crate::abi::ibcm_event_mode::IBCM_EVENTS_FD;
use crate::cm;

/// An open device whose waits are futures (see the [module](self)); a
/// handle, as [`crate::Device`] is: clones share it, and it closes when the
/// last handle, listener and connection are gone.
#[derive(Clone)]
pub struct Device {
    inner: crate::Device,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("aio::Device").field(&self.name()).finish()
    }
}

impl Device {
    /// Opens device `name` (`loop0`, `rxe0`, `mlx5_0`, as
    /// [`crate::Device::open`]) in event-fd mode, and the [`Driver`] that
    /// must run its events on the program's reactor for any future of the
    /// device to finish.
    pub fn open(name: &str) -> Result<(Device, Driver)> {
        let op = "aio::Device::open";
        let engine = call(op, || {
            crate::os::fork::register()?;
            cm::open_device(name)
        })?;
        // Closes the device again if a step below fails.
        let mut shared = DeviceShared {
            engine,
            driver_stop: None,
        };
        call(op, || cm::set_event_mode(&shared.engine, IBCM_EVENTS_FD))?;
        let fd = call(op, || shared.engine.events.dup_fd())?;
        let stop = Arc::new(StopSignal::default());
        shared.driver_stop = Some(stop.clone());
        let driver = Driver {
            engine: shared.engine.clone(),
            fd,
            stop,
        };
        let inner = crate::Device {
            shared: Arc::new(shared),
        };
        Ok((Device { inner }, driver))
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The engine's device (unit tests: its queue of pending events).
    #[cfg(test)]
    pub(crate) fn engine(&self) -> &std::sync::Arc<cm::device::Device> {
        &self.inner.shared.engine
    }

    /// The node GUID (host order).
    pub fn node_guid(&self) -> u64 {
        self.inner.node_guid()
    }

    /// The GID at `index` of port `port_num`, as [`crate::Device::gid`].
    pub fn gid(&self, port_num: u8, index: u8) -> Result<Gid> {
        self.inner.gid(port_num, index)
    }

    /// A path from port `port_num` to the port with GID `dgid`, as
    /// [`crate::Device::path_to`]: made at once on the in-process fabric and
    /// RoCE; on InfiniBand it asks the subnet manager and blocks the thread
    /// for the answer (seconds at worst), so call it where blocking is
    /// allowed there (tokio's `spawn_blocking`).
    pub fn path_to(&self, port_num: u8, dgid: Gid) -> Result<Path> {
        self.inner.path_to(port_num, dgid)
    }

    /// Listens for connection requests to `service_id` (host order), as
    /// [`crate::Device::listen`].
    pub fn listen(&self, service_id: u64) -> Result<Listener> {
        self.inner.listen(service_id).map(Listener)
    }

    /// A new CM id of this device, nothing sent, as
    /// [`crate::Device::create_id`].
    pub fn create_id(&self) -> Result<IdleId> {
        self.inner.create_id().map(IdleId)
    }

    /// Sends a REQ (without waiting); [`OutgoingRequest::wait_reply`]
    /// waits for the answer.
    pub fn request(&self, request: ConnectRequest) -> Result<OutgoingRequest> {
        self.inner.request(request).map(OutgoingRequest)
    }

    /// Connects: sends the REQ, waits for the REP and answers it with the
    /// RTU, as [`crate::Device::connect`]. Dropping the future before it is
    /// done cancels the request (a REJ to the peer).
    pub async fn connect(&self, request: ConnectRequest) -> Result<Connection> {
        let conn = self
            .inner
            .request(request)?
            .wait_reply_async()
            .await?
            .confirm_with_request_data_async()
            .await?;
        Ok(Connection::new(conn))
    }

    /// Listens for SIDR requests to `service_id` (host order), as
    /// [`crate::Device::listen_sidr`].
    pub fn listen_sidr(&self, service_id: u64) -> Result<SidrListener> {
        self.inner.listen_sidr(service_id).map(SidrListener)
    }

    /// Sends a SIDR_REQ (without waiting), as
    /// [`crate::Device::send_sidr_request`]; [`OutgoingSidrRequest::wait`]
    /// waits for the answer.
    pub fn send_sidr_request(&self, request: SidrRequest) -> Result<OutgoingSidrRequest> {
        self.inner
            .send_sidr_request(request)
            .map(OutgoingSidrRequest)
    }

    /// Resolves a service ID: sends the SIDR_REQ and waits for the SIDR_REP,
    /// as [`crate::Device::sidr_request`] (any status is the answer, not an
    /// error). Dropping the future before it is done cancels the request.
    pub async fn sidr_request(&self, request: SidrRequest) -> Result<SidrReply> {
        self.send_sidr_request(request)?.wait().await
    }

    /// Fault injection on the in-process fabric (tests), as
    /// [`crate::Device::drop_next_sent`].
    #[doc(hidden)]
    pub fn drop_next_sent(&self, attr_id: u16, count: u32) -> Result<()> {
        self.inner.drop_next_sent(attr_id, count)
    }
}
