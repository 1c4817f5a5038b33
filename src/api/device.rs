//! A device: the port(s) connections are made on.

use std::sync::Arc;

use super::aio::StopSignal;
use super::connection::{Connection, IdleId, OutgoingRequest};
use super::engine::Engine;
use super::error::{Result, call};
use super::handle::IdHandle;
use super::handler::{self, Handler, HandlerId, HandlerListener};
use super::listener::Listener;
use super::params::ConnectRequest;
use super::path_query::PathQuery;
use super::sidr::{OutgoingSidrRequest, SidrListener, SidrReply, SidrRequest};
use super::types::{Gid, Path};
use crate::cm::{self, worker};
use crate::errno::EOPNOTSUPP;
use crate::ibcm_log;
use crate::refusal::{Rule, refuse};

/// An open device (`ibcm_open_device`): `loop0`, `loop1`, ... are devices of
/// the in-process fabric, which connect to each other in one process; any
/// other name is an RDMA device (`mlx5_0`, `rxe0`).
///
/// A `Device` is a handle: clones share the device, and listeners and
/// connections keep it open; it closes when the last of them is gone.
///
/// ```
/// use ib_cm::{ConnectRequest, Device, Event, Reply};
///
/// let a = Device::open("loop0")?;
/// let b = Device::open("loop1")?;
/// let listener = b.listen(0x1234)?;
///
/// // A asks, B answers with a REP, A confirms with an RTU: established.
/// let path = a.path_to(1, b.gid(1, 0)?)?;
/// let pending = a.request(ConnectRequest::builder(path, 0x1234, 0x11).build())?;
/// let incoming = listener.accept()?;
/// assert_eq!(incoming.req().remote_qpn, 0x11);
/// let sent = incoming.reply(Reply::new(0x22))?;
/// let mut a_conn = pending.wait_reply()?.confirm(b"ready")?;
/// let mut b_conn = sent.wait_established()?;
/// assert_eq!(&b_conn.rtu_private_data().unwrap()[..5], b"ready");
///
/// // B disconnects: A answers the DREQ, B gets the DREP.
/// b_conn.send_disconnect(b"bye")?;
/// match a_conn.next_event()? {
///     Event::DreqReceived { private_data } => assert_eq!(&private_data[..3], b"bye"),
///     other => panic!("{other:?}"),
/// }
/// a_conn.reply_disconnect(b"ok")?;
/// match b_conn.next_event()? {
///     Event::DrepReceived { private_data } => assert_eq!(&private_data[..2], b"ok"),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), ib_cm::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    pub(super) shared: Arc<DeviceShared>,
}

/// The engine's device, closed when its last user goes.
pub(super) struct DeviceShared {
    pub(super) engine: Arc<cm::device::Device>,
    /// For a device of the async API: tells its driver the device closed.
    pub(super) driver_stop: Option<Arc<StopSignal>>,
}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        if super::error::in_forked_child() {
            return;
        }
        // Every id of the API is destroyed by now (each holds this); ids the
        // user never saw (a REQ still queued for a gone listener) are let
        // go by close, which waits for the worker that long (2 s at most).
        // In FD mode (async), close runs the events still queued for them
        // here: a request whose listener is gone is forgotten without an
        // answer (`forget_orphan`; the peer's retries end in its timeout).
        // The connections a handler
        // listener made belong to the CM and live on their own: they end
        // with the device.
        handler::destroy_cm_owned(&self.engine);
        let closed = cm::close_device(&self.engine);
        if closed.is_err() && (worker::on_worker() || worker::in_handler()) {
            // Dropped inside a handler: the ids left go with work queued
            // behind it, which close cannot wait for on this thread.
            close_later(self.engine.clone(), self.driver_stop.take());
            return;
        }
        if let Some(stop) = &self.driver_stop {
            stop.stop();
        }
    }
}

/// Closes `engine` on a thread of its own, which waits for the CM's queued
/// work (`cm::CLOSE_WAIT` at most) as a close outside a handler does.
fn close_later(engine: Arc<cm::device::Device>, driver_stop: Option<Arc<StopSignal>>) {
    let close = move || {
        if let Err(e) = cm::close_device(&engine) {
            ibcm_log!(Error, "device {} not closed: {e:?}", engine.name);
        }
        if let Some(stop) = driver_stop {
            stop.stop();
        }
    };
    let spawned = std::thread::Builder::new()
        .name("ibcm-close".into())
        .spawn(close);
    if let Err(e) = spawned {
        ibcm_log!(Error, "cannot start a thread to close a device: {e}");
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Device").field(&self.name()).finish()
    }
}

impl Device {
    /// Opens device `name` in the process's engine. A device is open once
    /// per process: `EBUSY` if it is open already (through this API or the
    /// C one), `ENODEV` for a name that is no device.
    pub fn open(name: &str) -> Result<Device> {
        Self::open_in(&Engine::process(), name)
    }

    /// Opens device `name` in `engine` ([`Engine`]: a connection manager of
    /// its own). `EBUSY` if it is open already, in this engine or another.
    pub fn open_in(engine: &Engine, name: &str) -> Result<Device> {
        let engine = call("Device::open", || {
            // From the first device on, a forked child must not use the CM.
            crate::os::fork::register()?;
            cm::open_device_in(&engine.0, name)
        })?;
        Ok(Device {
            shared: Arc::new(DeviceShared {
                engine,
                driver_stop: None,
            }),
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.shared.engine.name
    }

    /// The node GUID (host order).
    pub fn node_guid(&self) -> u64 {
        self.shared.engine.node_guid
    }

    /// The GID at `index` of port `port_num` (`EINVAL` for an empty slot;
    /// loop ports have only index 0).
    pub fn gid(&self, port_num: u8, index: u8) -> Result<Gid> {
        call("Device::gid", || {
            let port = self.shared.engine.port(port_num)?;
            port.gid(index).map(Gid).ok_or_else(|| {
                let rule = "is an empty slot of the port's GID table";
                crate::refusal::invalid(Rule::value("index", index, rule))
            })
        })
    }

    /// A path from port `port_num` to the port with GID `dgid`
    /// (`ibcm_init_path`): on the in-process fabric and RoCE made locally,
    /// on InfiniBand asked of the subnet manager (blocking).
    pub fn path_to(&self, port_num: u8, dgid: Gid) -> Result<Path> {
        call("Device::path_to", || {
            self.shared.engine.init_path(port_num, &dgid.0).map(Path)
        })
    }

    /// Asks the SA of port `port_num`'s subnet for a path (one
    /// SubnAdmGet(PathRecord), `ib_sa_path_rec_get`'s kernel meaning: never
    /// from the path cache), waiting for the answer (4 tries of 500 ms):
    /// `EAGAIN` while the port knows no SM (a RoCE port has no SA),
    /// `ETIMEDOUT` when the SA never answers, `EINVAL` for an SA's error
    /// status (no such path; Busy after its retries).
    pub fn query_path(&self, port_num: u8, query: &PathQuery) -> Result<Path> {
        call("Device::query_path", || {
            let engine = &self.shared.engine;
            let port = engine.port(port_num)?;
            engine
                .query_path(port, &query.inner)
                .map(Path)
                .map_err(crate::sa::kernel_errno)
        })
    }

    /// Listens for connection requests to `service_id` (host order) on this
    /// device. `EBUSY` if another listener has it.
    pub fn listen(&self, service_id: u64) -> Result<Listener> {
        Listener::new(&self.shared, service_id)
    }

    /// A new CM id of this device, nothing sent (`ib_create_cm_id`):
    /// [`IdleId::request`] sends its REQ.
    pub fn create_id(&self) -> Result<IdleId> {
        let handle = call("Device::create_id", || IdHandle::create(&self.shared))?;
        Ok(IdleId::new(handle))
    }

    /// Sends a REQ; the answer is awaited with
    /// [`OutgoingRequest::wait_reply`]. For connecting in one call, see
    /// [`Device::connect`].
    pub fn request(&self, request: ConnectRequest) -> Result<OutgoingRequest> {
        let handle = call("Device::request", || IdHandle::create(&self.shared))?;
        call("Device::request", || {
            cm::send_req(&handle.id, &request.params)
        })?;
        Ok(OutgoingRequest::new(handle, request.rtu_private_data))
    }

    /// Connects: sends the REQ, waits for the REP (the CM retransmits the
    /// REQ as the request says) and answers it with the RTU. The REP is in
    /// [`Connection::rep`].
    ///
    /// Between the REP and the RTU a QP is usually moved to RTR and RTS;
    /// [`Device::request`] leaves room for that.
    pub fn connect(&self, request: ConnectRequest) -> Result<Connection> {
        self.request(request)?
            .wait_reply()?
            .confirm_with_request_data()
    }

    /// Listens for SIDR requests to `service_id` (host order) on this
    /// device: a UD service ([`SidrListener`] says why this is not
    /// [`Device::listen`]). `EBUSY` if another listener has it.
    pub fn listen_sidr(&self, service_id: u64) -> Result<SidrListener> {
        SidrListener::new(&self.shared, service_id)
    }

    /// Sends a SIDR_REQ (`ib_send_cm_sidr_req`): which QP serves the
    /// request's service ID? The answer is awaited with
    /// [`OutgoingSidrRequest::wait`]. `EINVAL` for more than 216 bytes of
    /// private data.
    pub fn send_sidr_request(&self, request: SidrRequest) -> Result<OutgoingSidrRequest> {
        OutgoingSidrRequest::send("Device::send_sidr_request", &self.shared, &request)
    }

    /// Resolves a service ID: sends the SIDR_REQ and waits for the peer's
    /// SIDR_REP (the CM resends the request as it says). Whatever the
    /// reply's [`status`](SidrReply::status), it is the answer, not an
    /// error: [`SidrStatus::Unsupported`](super::SidrStatus::Unsupported)
    /// when nobody listens, [`SidrStatus::Reject`](super::SidrStatus::Reject)
    /// when the service refused. Errors: `EINVAL` for more than 216 bytes
    /// of private data, [`Error::NoAnswer`](super::Error::NoAnswer) when no
    /// reply came after the retries.
    ///
    /// ```
    /// use ib_cm::{Device, SidrReplyParams, SidrRequest, SidrStatus};
    ///
    /// let (a, b) = (Device::open("loop0")?, Device::open("loop1")?);
    /// let listener = b.listen_sidr(0x4321)?;
    /// let server = std::thread::spawn(move || -> ib_cm::Result<Vec<u8>> {
    ///     let incoming = listener.accept()?; // SIDR_REQ in
    ///     let asked = incoming.private_data()[..5].to_vec();
    ///     let answer = SidrReplyParams {
    ///         private_data: b"use QP 0x33".to_vec(),
    ///         ..SidrReplyParams::new(0x33, 0x1111_2222)
    ///     };
    ///     incoming.reply(answer)?; // SIDR_REP out
    ///     Ok(asked)
    /// });
    /// let path = a.path_to(1, b.gid(1, 0)?)?;
    /// let request = SidrRequest::builder(path, 0x4321).private_data(b"where").build();
    /// let reply = a.sidr_request(request)?; // SIDR_REQ out, SIDR_REP in
    /// assert_eq!(reply.status, SidrStatus::Success);
    /// assert_eq!((reply.qpn, reply.qkey), (0x33, 0x1111_2222));
    /// assert!(reply.private_data.starts_with(b"use QP 0x33")); // its 136 bytes
    /// assert_eq!(server.join().unwrap()?, b"where");
    /// # Ok::<(), ib_cm::Error>(())
    /// ```
    pub fn sidr_request(&self, request: SidrRequest) -> Result<SidrReply> {
        let op = "Device::sidr_request";
        OutgoingSidrRequest::send(op, &self.shared, &request)?.wait_until(op, None)
    }

    /// A new CM id whose events go to `handler`, called on the CM's thread
    /// (see [`handler`](super::handler)); [`HandlerId::request`] sends its
    /// REQ.
    pub fn create_id_with(&self, handler: impl Handler) -> Result<HandlerId> {
        HandlerId::create(&self.shared, Arc::new(handler))
    }

    /// Listens for connection requests to `service_id` (host order), each
    /// given to `handler`'s [`request`](Handler::request) on the CM's
    /// thread with the id it made, whose later events go to the same
    /// handler (see [`handler`](super::handler)). `EBUSY` if another
    /// listener has the service ID.
    pub fn listen_with(&self, service_id: u64, handler: impl Handler) -> Result<HandlerListener> {
        HandlerListener::new(&self.shared, service_id, Arc::new(handler))
    }

    /// Fault injection on the in-process fabric (tests): the next `count`
    /// MADs with attribute `attr_id` (0x0015 DREQ, 0x0016 DREP, ...) this
    /// device sends are lost; 0 cancels. `EOPNOTSUPP` on other devices.
    #[doc(hidden)]
    pub fn drop_next_sent(&self, attr_id: u16, count: u32) -> Result<()> {
        call("Device::drop_next_sent", || {
            let engine = &self.shared.engine;
            engine.as_loop().ok_or_else(|| {
                let rule = Rule::Text("not a device of the in-process fabric (loopN)");
                refuse(EOPNOTSUPP, rule)
            })?;
            engine.drop_next(attr_id, count)
        })
    }
}
