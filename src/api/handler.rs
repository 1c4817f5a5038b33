//! Handlers: the kernel's own model, safe. A [`Handler`] is called by the
//! CM for each event of its ids, on the CM's thread (the library's worker,
//! or in event-fd mode the thread that runs the device's events), and
//! answers there: a REP from inside the request, an RTU from inside the
//! reply, a DREP from inside the DREQ. Nothing is queued and no other
//! thread is woken, so a connection costs what it costs through the C API
//! (`ibcm-cmtime` and `examples/cmtime --api handler` compare the two).
//!
//! The queue-based types ([`Listener`](super::Listener),
//! [`Connection`](super::Connection)) and the async ones build on the same
//! engine; use a handler where the answer is known at once (a server that
//! accepts by rule, a benchmark, a target that owns many connections), and
//! the queues where a caller waits for its connection.
//!
//! Who owns what:
//! - [`HandlerId`] (from [`Device::create_id_with`](super::Device::create_id_with))
//!   is owned by the caller: dropping it destroys the id as
//!   `ib_destroy_cm_id` does in its state (REJ in setup, DREQ when
//!   established, DREP after a DREQ); its events go to its handler.
//! - [`HandlerListener`] (from [`Device::listen_with`](super::Device::listen_with))
//!   listens until dropped. The id a REQ creates belongs to the CM: the
//!   handler sees it as a [`CmId`] in [`Handler::request`] and in each
//!   later event, and it is destroyed when a handler returns
//!   [`Verdict::Destroy`], when its connection is over (an event leaves it
//!   IDLE: after [`Event::TimewaitExit`], a REJ, an error), or when the
//!   device's last handle goes; unless [`CmId::adopt`] made it the
//!   caller's, as a kernel ULP owns its passive ids.
//! - [`CmId`] names an id without owning it: kept past its id's end, each
//!   call on it fails with `EINVAL` as on a destroyed id.
//!
//! A handler must not block: the CM's other ids wait while it runs (as a
//! kernel ULP's handler must not sleep long). A wait of the blocking API
//! there ([`Listener::accept`](super::Listener::accept),
//! [`Connection::next_event`](super::Connection::next_event),
//! [`Device::connect`](super::Device::connect), ...) would wait for the
//! thread it runs on: it fails with `EDEADLK` (unless what it waits for
//! is queued already), as C's `ibcm_process_events` does in a handler.
//! Dropping a [`HandlerId`] or a [`HandlerListener`] inside a handler,
//! even its own, is allowed (an id goes once its handler returns).
//!
//! A handler that panics is stopped there: the panic is logged, the id
//! destroyed as for [`Verdict::Destroy`] (a request is rejected, a
//! connection gets its DREQ), and the CM goes on with its other ids.
//!
//! ```
//! use std::sync::mpsc;
//! use ib_cm::handler::{CmId, Verdict};
//! use ib_cm::{ConnectRequest, Device, Event, Reply, ReqInfo};
//!
//! let (a, b) = (Device::open("loop0")?, Device::open("loop1")?);
//! // B accepts every request at once, and answers every DREQ.
//! let _listener = b.listen_with(0x1234, (
//!     |id: &CmId, req: ReqInfo| {
//!         let qpn = 0x100 + req.remote_qpn;
//!         id.reply(&Reply::new(qpn)).map_or(Verdict::Destroy, |_| Verdict::Keep)
//!     },
//!     |id: &CmId, event: Event| {
//!         if let Event::DreqReceived { .. } = event {
//!             let _ = id.reply_disconnect(b"bye");
//!         }
//!         Verdict::Keep
//!     },
//! ))?;
//! // A confirms the REP with an RTU inside its handler, and tells main.
//! let (tx, rx) = mpsc::channel();
//! let conn = a.create_id_with(move |id: &CmId, event: Event| {
//!     if let Event::RepReceived(_) = &event {
//!         let _ = id.confirm(b"");
//!     }
//!     let _ = tx.send(event.kernel_name());
//!     Verdict::Keep
//! })?;
//! let path = a.path_to(1, b.gid(1, 0)?)?;
//! conn.request(ConnectRequest::builder(path, 0x1234, 0x11).build())?;
//! assert_eq!(rx.recv().unwrap(), "REP_RECEIVED");
//! conn.send_disconnect(b"")?;
//! assert_eq!(rx.recv().unwrap(), "DREP_RECEIVED");
//! # Ok::<(), ib_cm::Error>(())
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::device::DeviceShared;
use super::error::{Result, call};
use super::event::{Event, ReqInfo};
use super::params::{ConnectRequest, Reply};
use super::qp::{QpAttributes, QpState, qp_attributes};
use super::types::{RejectReason, State};
use crate::abi::ib_cm_state::IB_CM_IDLE;
use crate::abi::ib_event_type::IB_EVENT_COMM_EST;
use crate::cm::event::{CmEvent, EventParam};
use crate::cm::id::CmIdPriv;
use crate::cm::{self, CM_ASSIGN_SERVICE_ID};

/// What the CM does with the id once a handler returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Nothing: the id goes on.
    Keep,
    /// Destroy it, as a kernel handler's non-zero return does: REJ in setup
    /// (a request refused), DREQ when established, DREP after a DREQ.
    Destroy,
}

/// What the CM calls for the events of a [`HandlerId`] or of the ids a
/// [`HandlerListener`]'s requests create, on the CM's thread, one event of
/// an id at a time and in order.
///
/// A closure `Fn(&CmId, Event) -> Verdict` is a handler for ids that take
/// no requests; a pair of closures `(request, event)` is one for a
/// listener.
pub trait Handler: Send + Sync + 'static {
    /// A connection request for a listener: `id` is the new id, in
    /// REQ_RCVD; answer with [`CmId::reply`] (or [`CmId::reject`],
    /// [`CmId::send_mra`]) here or later from any thread. The default
    /// refuses every request ([`Verdict::Destroy`]: a REJ).
    fn request(&self, id: &CmId, req: ReqInfo) -> Verdict {
        let _ = (id, req);
        Verdict::Destroy
    }

    /// Any other event of `id`.
    fn event(&self, id: &CmId, event: Event) -> Verdict;
}

impl<F> Handler for F
where
    F: Fn(&CmId, Event) -> Verdict + Send + Sync + 'static,
{
    fn event(&self, id: &CmId, event: Event) -> Verdict {
        self(id, event)
    }
}

impl<R, F> Handler for (R, F)
where
    R: Fn(&CmId, ReqInfo) -> Verdict + Send + Sync + 'static,
    F: Fn(&CmId, Event) -> Verdict + Send + Sync + 'static,
{
    fn request(&self, id: &CmId, req: ReqInfo) -> Verdict {
        (self.0)(id, req)
    }

    fn event(&self, id: &CmId, event: Event) -> Verdict {
        (self.1)(id, event)
    }
}

/// One handler for many ids (each [`HandlerId`] takes its handler by
/// value): the ids tell themselves apart by [`CmId::data`].
impl<H: Handler> Handler for Arc<H> {
    fn request(&self, id: &CmId, req: ReqInfo) -> Verdict {
        (**self).request(id, req)
    }

    fn event(&self, id: &CmId, event: Event) -> Verdict {
        (**self).event(id, event)
    }
}

/// A CM id, named without owning it: what a handler is given, and what
/// [`HandlerId`] derefs to. Each call is the C API's call of the same
/// name, with its checks and errors; on an id that is gone, `EINVAL`.
#[derive(Clone)]
pub struct CmId {
    id: Arc<CmIdPriv>,
    /// For an id the CM owns (a handler listener's): its device, which
    /// [`adopt`](CmId::adopt) keeps open for the new owner.
    device: Option<Weak<DeviceShared>>,
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("local_comm_id", &self.local_comm_id())
            .field("state", &self.state())
            .finish()
    }
}

impl CmId {
    /// The id's state.
    pub fn state(&self) -> State {
        self.id.state().into()
    }

    /// The value [`set_data`](CmId::set_data) stored (0 until then): what
    /// a handler shared by many ids knows each by, as a kernel ULP uses
    /// `cm_id->context`.
    pub fn data(&self) -> u64 {
        self.id.api_data.load(Ordering::Acquire)
    }

    /// Stores `data` with the id, for its later events' handler.
    pub fn set_data(&self, data: u64) {
        self.id.api_data.store(data, Ordering::Release);
    }

    /// Takes an id the CM owns (one a handler listener's request made)
    /// into the caller's hands, once: from then on the CM does not destroy
    /// it when its connection is over, and dropping the [`HandlerId`] does,
    /// as a kernel ULP destroys its passive ids itself. `None` for an id
    /// that is the caller's already (taken before, or from
    /// [`Device::create_id_with`](super::Device::create_id_with)), that the
    /// CM destroys or destroyed (its connection over, a handler's
    /// [`Verdict::Destroy`]), or whose device is closing.
    pub fn adopt(&self) -> Option<HandlerId> {
        let device = self.device.as_ref()?.upgrade()?;
        let context = &self.id.public.context;
        context
            .compare_exchange(CM_OWNED, ADOPTED, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        // The CM releases an id (the same field, compare-and-swapped) before
        // it destroys it, so this CAS fails once it decided; this is for an
        // id the engine destroyed on its own (a request orphaned by its
        // listener's end).
        if self.id.is_destroyed() {
            return None;
        }
        Some(HandlerId {
            id: CmId {
                id: self.id.clone(),
                device: None,
            },
            _device: device,
        })
    }

    /// This side's local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        u32::from_be(self.id.public.local_id.load(Ordering::Relaxed))
    }

    /// The peer's communication ID (0 before the peer's first message).
    pub fn remote_comm_id(&self) -> u32 {
        u32::from_be(self.id.public.remote_id.load(Ordering::Relaxed))
    }

    /// The attributes that move the QP to `state` (`ib_cm_init_qp_attr`);
    /// `EINVAL` in a state that has none yet.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        qp_attributes("CmId::qp_attributes", &self.id, state)
    }

    /// Sends a REP (`ib_send_cm_rep`): `EINVAL` outside REQ_RCVD /
    /// MRA_REQ_SENT, or for more than 196 bytes of private data.
    pub fn reply(&self, reply: &Reply) -> Result<()> {
        call("CmId::reply", || cm::send_rep(&self.id, &reply.to_engine()))
    }

    /// Sends the RTU (`ib_send_cm_rtu`) with up to 224 bytes of private
    /// data: established. `EINVAL` outside REP_RCVD / MRA_REP_SENT.
    pub fn confirm(&self, private_data: &[u8]) -> Result<()> {
        call("CmId::confirm", || cm::send_rtu(&self.id, private_data))
    }

    /// Rejects (`ib_send_cm_rej`): a request, or a REP. Up to 72 bytes of
    /// ARI and 148 of private data. A request of the CM's (not adopted)
    /// rejected is over: the CM destroys its id then.
    pub fn reject(&self, reason: RejectReason, ari: &[u8], private_data: &[u8]) -> Result<()> {
        call("CmId::reject", || {
            cm::send_rej(&self.id, reason.0, ari, private_data)
        })?;
        // A REJ of a request leaves the id IDLE with no event to follow,
        // so no handler's return would destroy it.
        if self.device.is_some() && self.id.state() == IB_CM_IDLE && release(&self.id) {
            cm::destroy_id(&self.id, 0);
        }
        Ok(())
    }

    /// Asks the peer for more time (`ib_send_cm_mra`, sent now):
    /// `service_timeout` an IBA time exponent (at most 31), up to 222 bytes
    /// of private data.
    pub fn send_mra(&self, service_timeout: u8, private_data: &[u8]) -> Result<()> {
        call("CmId::send_mra", || {
            cm::send_mra(&self.id, service_timeout.min(31), Some(private_data))
        })
    }

    /// Sends a DREQ (`ib_send_cm_dreq`) with up to 220 bytes of private
    /// data; the DREP (or DREQ_ERROR) comes as an event. `EINVAL` when not
    /// ESTABLISHED.
    pub fn send_disconnect(&self, private_data: &[u8]) -> Result<()> {
        call("CmId::send_disconnect", || {
            cm::send_dreq(&self.id, Some(private_data))
        })
    }

    /// Answers the peer's DREQ with a DREP (`ib_send_cm_drep`) carrying up
    /// to 224 bytes: timewait. `EINVAL` outside DREQ_RCVD.
    pub fn reply_disconnect(&self, private_data: &[u8]) -> Result<()> {
        call("CmId::reply_disconnect", || {
            cm::send_drep(&self.id, Some(private_data))
        })
    }

    /// The QP saw its first packet before the RTU
    /// (`ib_cm_notify(IB_EVENT_COMM_EST)`): established now.
    pub fn notify_established(&self) -> Result<()> {
        call("CmId::notify_established", || {
            cm::notify(&self.id, IB_EVENT_COMM_EST as i32)
        })
    }

    /// Bounds this id's future DREQs (beyond the kernel): resent every
    /// `interval` up to `max_retries` times.
    pub fn set_disconnect_timeout(&self, interval: Duration, max_retries: u8) -> Result<()> {
        let ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        call("CmId::set_disconnect_timeout", || {
            cm::set_disconnect_timeout(&self.id, ms, max_retries)
        })
    }
}

/// An id of the caller's whose events go to a [`Handler`]
/// ([`Device::create_id_with`](super::Device::create_id_with)): send its
/// REQ with [`request`](HandlerId::request); every [`CmId`] call works on
/// it. Dropping it destroys the id as `ib_destroy_cm_id` does in its state.
pub struct HandlerId {
    id: CmId,
    /// Keeps the device open while the id lives (dropped after it).
    _device: Arc<DeviceShared>,
}

impl std::ops::Deref for HandlerId {
    type Target = CmId;

    fn deref(&self) -> &CmId {
        &self.id
    }
}

impl Drop for HandlerId {
    fn drop(&mut self) {
        super::error::destroy(&self.id.id);
    }
}

impl std::fmt::Debug for HandlerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HandlerId").field(&self.id).finish()
    }
}

impl HandlerId {
    pub(super) fn create(device: &Arc<DeviceShared>, handler: Arc<dyn Handler>) -> Result<Self> {
        let id = call("Device::create_id_with", || {
            cm::create_id(&device.engine, engine_handler(handler, Owner::Caller))
        })?;
        Ok(HandlerId {
            id: CmId { id, device: None },
            _device: device.clone(),
        })
    }

    /// Sends the REQ (`ib_send_cm_req`); the REP, REJ or REQ_ERROR comes as
    /// an event. `EINVAL` unless IDLE, or for a request the kernel refuses.
    pub fn request(&self, request: ConnectRequest) -> Result<()> {
        call("HandlerId::request", || {
            cm::send_req(&self.id.id, &request.params)
        })
    }
}

/// A listener whose requests go to a [`Handler`]
/// ([`Device::listen_with`](super::Device::listen_with)). Dropping it
/// stops listening (waiting for a handler of it that runs); the
/// connections it made live on, as the kernel's do.
pub struct HandlerListener {
    id: Arc<CmIdPriv>,
    _device: Arc<DeviceShared>,
}

impl Drop for HandlerListener {
    fn drop(&mut self) {
        super::error::destroy(&self.id);
    }
}

impl std::fmt::Debug for HandlerListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerListener")
            .field("service_id", &format_args!("{:#x}", self.service_id()))
            .finish()
    }
}

impl HandlerListener {
    pub(super) fn new(
        device: &Arc<DeviceShared>,
        service_id: u64,
        handler: Arc<dyn Handler>,
    ) -> Result<Self> {
        let op = "Device::listen_with";
        let handler = engine_handler(handler, Owner::Cm(Arc::downgrade(device)));
        let id = call(op, || cm::create_id(&device.engine, handler))?;
        // Copied to each id a request makes: how the device finds them.
        id.public.context.store(CM_OWNED, Ordering::Release);
        if let Err(e) = call(op, || cm::listen(&id, service_id)) {
            cm::destroy_id(&id, 0);
            return Err(e);
        }
        Ok(HandlerListener {
            id,
            _device: device.clone(),
        })
    }

    /// The service ID listened to (host order); with
    /// [`HandlerListener::ASSIGN_SERVICE_ID`], the one the CM assigned.
    pub fn service_id(&self) -> u64 {
        u64::from_be(self.id.public.service_id.load(Ordering::Relaxed))
    }

    /// Pass it to [`Device::listen_with`](super::Device::listen_with) to
    /// have the CM pick a free service ID (`IB_CM_ASSIGN_SERVICE_ID`).
    pub const ASSIGN_SERVICE_ID: u64 = CM_ASSIGN_SERVICE_ID;
}

/// The C-visible `context` of a handler listener and of the ids its
/// requests make (nothing else of this API uses the field).
const CM_OWNED: usize = usize::MAX;

/// The `context` of such an id once [`CmId::adopt`] gave it to a caller.
const ADOPTED: usize = usize::MAX - 1;

/// The `context` of such an id the CM decided to destroy: no longer
/// [`CM_OWNED`], so that [`CmId::adopt`] cannot take it from then on.
const RELEASED: usize = usize::MAX - 2;

/// Takes `id` from the CM for destroying, unless adopted (or released)
/// before: true if it was the CM's.
fn release(id: &CmIdPriv) -> bool {
    id.public
        .context
        .compare_exchange(CM_OWNED, RELEASED, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
}

/// Destroys the ids of `device` that belong to the CM (a handler
/// listener's connections): its last handle is going.
pub(super) fn destroy_cm_owned(device: &Arc<cm::device::Device>) {
    for id in cm::ids_with_context(device, CM_OWNED) {
        cm::destroy_id(&id, 0);
    }
}

/// Who destroys the ids a handler serves.
enum Owner {
    /// A [`HandlerId`]: its owner, by dropping it.
    Caller,
    /// A listener's: the CM, once a connection is over, unless adopted;
    /// the device is the one [`CmId::adopt`] keeps open.
    Cm(Weak<DeviceShared>),
}

/// The engine's handler for `handler`: converts each event and applies the
/// verdict. The return value is the kernel handler's: non-zero destroys.
fn engine_handler(handler: Arc<dyn Handler>, owner: Owner) -> cm::id::Handler {
    Arc::new(move |id, ev| {
        let cm_id = CmId {
            id: id.clone(),
            device: match &owner {
                Owner::Caller => None,
                Owner::Cm(device) => Some(device.clone()),
            },
        };
        let verdict = call_handler(&*handler, &cm_id, id, ev);
        let cm_owned = matches!(owner, Owner::Cm(_));
        // A connection of the CM's is over once an event leaves it IDLE.
        // Released first either way: an `adopt` racing this cannot win
        // once the CM has decided.
        let over = cm_owned && id.state() == IB_CM_IDLE && release(id);
        if cm_owned && verdict == Verdict::Destroy {
            release(id);
        }
        if verdict == Verdict::Destroy || over {
            -libc::ECONNREFUSED
        } else {
            0
        }
    })
}

/// Calls `handler` for `ev` of `id`. A handler that panics is a bug of
/// the caller's: the panic stops there (the CM's thread serves every id)
/// and is logged, and the id is destroyed as for [`Verdict::Destroy`],
/// its handler's state being unknown (a request is rejected at once,
/// rather than forgotten for the peer to retry into the same panic).
fn call_handler(handler: &dyn Handler, cm_id: &CmId, id: &CmIdPriv, ev: &CmEvent) -> Verdict {
    let called = catch_unwind(AssertUnwindSafe(|| match &ev.param {
        EventParam::ReqRcvd(r) => handler.request(cm_id, request_info(id, ev, r)),
        // SIDR requests are not served by handlers: SIDR_REP REJECT, as
        // a C handler's refusal gives.
        EventParam::SidrReqRcvd(_) => Verdict::Destroy,
        _ => match Event::from_engine(ev) {
            Some(event) => handler.event(cm_id, event),
            None => Verdict::Keep,
        },
    }));
    called.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(not a string)");
        crate::ibcm_log!(
            Error,
            "a handler panicked on {:?} of cm_id {:#x}: {what}; the id is destroyed",
            ev.event,
            u32::from_be(id.public.local_id.load(Ordering::Relaxed))
        );
        Verdict::Destroy
    })
}

/// The REQ's fields for the handler of the id it made.
fn request_info(id: &CmIdPriv, ev: &CmEvent, r: &crate::cm::event::ReqRcvd) -> ReqInfo {
    let service_id = u64::from_be(id.public.service_id.load(Ordering::Relaxed));
    let pd = ev.private_data().map(<[u8]>::to_vec).unwrap_or_default();
    ReqInfo::new(service_id, r, pd)
}
