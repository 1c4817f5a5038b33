//! The passive side: a listener, the requests it receives, the answers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::connection::{Connection, Side, Step, take_until, take_until_async};
use super::device::DeviceShared;
use super::error::{Error, Result, call};
use super::event::{Event, ReqInfo};
use super::handle::{IdHandle, Router};
use super::params::Reply;
use super::qp::{QpAttributes, QpState, qp_attributes};
use super::queue::{Popped, Queue};
use super::types::{RejectReason, State};
use crate::abi::ib_event_type::IB_EVENT_COMM_EST;
use crate::cm::{self, CM_ASSIGN_SERVICE_ID, id::CmIdPriv};

/// How long [`IncomingRequest::reply`] waits for the event that says why a
/// request it could not answer went IDLE: the engine changed the state
/// before it queued the event, so it is milliseconds away at most.
const GONE_EVENT_WAIT: Duration = Duration::from_secs(1);

/// A listener (`ib_cm_listen`): connection requests to its service ID on its
/// device wait here until [`accept`](Listener::accept) takes them.
/// Dropping it stops listening, and rejects the requests nobody took
/// (`IB_CM_REJ_CONSUMER_DEFINED`). A SIDR request to its service ID is
/// answered at once with `IB_SIDR_REJECT`: SIDR requests go to a
/// [`SidrListener`](super::SidrListener).
pub struct Listener {
    id: Arc<CmIdPriv>,
    requests: Arc<Queue<IncomingRequest>>,
    _device: Arc<DeviceShared>,
}

impl Listener {
    pub(super) fn new(device: &Arc<DeviceShared>, service_id: u64) -> Result<Listener> {
        let requests: Arc<Queue<IncomingRequest>> = Arc::default();
        let handler = Router::handler(Arc::downgrade(&requests), Weak::new(), device);
        let id = call("Device::listen", || cm::create_id(&device.engine, handler))?;
        if let Err(e) = call("Device::listen", || cm::listen(&id, service_id)) {
            cm::destroy_id(&id, 0);
            return Err(e);
        }
        Ok(Listener {
            id,
            requests,
            _device: device.clone(),
        })
    }

    /// The service ID listened to (host order); with
    /// [`Listener::ASSIGN_SERVICE_ID`], the one the CM assigned.
    pub fn service_id(&self) -> u64 {
        u64::from_be(self.id.public.service_id.load(Ordering::Relaxed))
    }

    /// Pass it to [`Device::listen`](super::Device::listen) to have the CM
    /// pick a free service ID (`IB_CM_ASSIGN_SERVICE_ID`).
    pub const ASSIGN_SERVICE_ID: u64 = CM_ASSIGN_SERVICE_ID;

    /// The next connection request, waiting as long as it takes.
    pub fn accept(&self) -> Result<IncomingRequest> {
        self.requests.next_request("Listener::accept", None)
    }

    /// The next connection request, waiting `timeout` at most
    /// ([`Error::TimedOut`]).
    pub fn accept_timeout(&self, timeout: Duration) -> Result<IncomingRequest> {
        self.requests
            .next_request("Listener::accept_timeout", Some(timeout))
    }

    /// How many requests wait to be accepted.
    pub fn pending(&self) -> usize {
        self.requests.len()
    }

    /// The next connection request if one is waiting.
    pub fn try_accept(&self) -> Option<IncomingRequest> {
        self.requests.try_pop()
    }

    /// [`accept`](Listener::accept) for the async API: a request is taken
    /// only when the future returns it.
    pub(super) async fn accept_async(&self) -> Result<IncomingRequest> {
        self.requests.next_request_async("Listener::accept").await
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Waits for a REQ handler of this listener that runs (it only
        // queues); the requests left are rejected when the queue goes.
        super::error::destroy(&self.id);
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("service_id", &format_args!("{:#x}", self.service_id()))
            .field("waiting", &self.requests.len())
            .finish()
    }
}

/// A received REQ (state REQ_RCVD), to be answered:
/// [`accept`](IncomingRequest::accept) it (REP, then the RTU),
/// [`reject`](IncomingRequest::reject) it (REJ), or drop it (REJ
/// `CONSUMER_DEFINED`, as `ib_destroy_cm_id` does).
pub struct IncomingRequest {
    handle: IdHandle,
    req: Box<ReqInfo>,
    /// [`reject`](IncomingRequest::reject) sent our REJ: the id is IDLE
    /// and no event will say why (else `reply` would wait for one for ever
    /// in the async API, a second in the blocking one:
    /// `reply_after_own_reject_ends_with_the_refusal`).
    rejected: AtomicBool,
}

impl IncomingRequest {
    pub(super) fn new(handle: IdHandle, req: ReqInfo) -> Self {
        Self {
            handle,
            req: Box::new(req),
            rejected: AtomicBool::new(false),
        }
    }

    /// The REQ's fields.
    pub fn req(&self) -> &ReqInfo {
        &self.req
    }

    /// The REQ's private data (92 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.req.private_data
    }

    /// The id's state (REQ_RCVD, or IDLE once the peer gave up).
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// The attributes that move the QP to `state` for this connection
    /// (`ib_cm_init_qp_attr`); `EINVAL` in a state that has none yet.
    ///
    /// Before the REP, the RTR's `rq_psn` is 0: as in the kernel, the CM
    /// learns this side's receive PSN from the REP (`ib_send_cm_rep`), so
    /// an RTR made now sets it to the [`Reply`]'s `starting_psn` itself, as
    /// rdma_cm does (`examples/rc_pingpong.rs`).
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        qp_attributes("IncomingRequest::qp_attributes", &self.handle.id, state)
    }

    /// Sends the REP and waits for the RTU (or for the peer to disconnect
    /// at once). A REP nobody confirms fails with [`Error::NoAnswer`]; a
    /// REJ with [`Error::Rejected`]. The request is consumed: if the REP is
    /// refused (too much private data), it is rejected as a dropped one.
    pub fn accept(self, reply: Reply) -> Result<Connection> {
        self.reply(reply)?.wait_established()
    }

    /// Sends the REP; [`SentReply::wait_established`] waits for the RTU.
    /// `EINVAL` for more than 196 bytes of private data. When the peer gave
    /// up first, what it sent: [`Error::Rejected`] (its REJ; `TIMEOUT` with
    /// its node GUID when it dropped its request).
    pub fn reply(self, reply: Reply) -> Result<SentReply> {
        let op = "IncomingRequest::reply";
        if let Err(refused) = self.send_rep(op, &reply) {
            return Err(self.why_gone(op).unwrap_or(refused));
        }
        Ok(self.replied())
    }

    /// [`reply`](IncomingRequest::reply) for the async API.
    pub(super) async fn reply_async(self, reply: Reply) -> Result<SentReply> {
        let op = "IncomingRequest::reply";
        if let Err(refused) = self.send_rep(op, &reply) {
            return Err(self.why_gone_async(op).await.unwrap_or(refused));
        }
        Ok(self.replied())
    }

    /// [`accept`](IncomingRequest::accept) for the async API.
    pub(super) async fn accept_async(self, reply: Reply) -> Result<Connection> {
        self.reply_async(reply)
            .await?
            .wait_established_async()
            .await
    }

    fn send_rep(&self, op: &'static str, reply: &Reply) -> Result<()> {
        call(op, || cm::send_rep(&self.handle.id, &reply.to_engine()))
    }

    fn replied(self) -> SentReply {
        SentReply {
            handle: self.handle,
            req: self.req,
        }
    }

    /// The event that ended a request the peer gave up (its state went
    /// IDLE, and the event that says why is on its way to the queue).
    fn why_gone(&self, op: &'static str) -> Option<Error> {
        if self.handle.state() != State::Idle || self.rejected.load(Ordering::Acquire) {
            return None;
        }
        let deadline = Instant::now() + GONE_EVENT_WAIT;
        match self.handle.events.pop(Some(deadline)) {
            Popped::Item(event) => Some(gone_error(op, event)),
            Popped::TimedOut | Popped::Finished | Popped::WouldDeadlock => None,
        }
    }

    /// [`why_gone`](IncomingRequest::why_gone) for the async API: the event
    /// comes (the engine queued it when it changed the state), or the queue
    /// finishes.
    async fn why_gone_async(&self, op: &'static str) -> Option<Error> {
        // Our own REJ made it IDLE: nothing is on its way, and this wait
        // has no bound of its own.
        if self.handle.state() != State::Idle || self.rejected.load(Ordering::Acquire) {
            return None;
        }
        let mut waiter = self.handle.events.waiter();
        let event = std::future::poll_fn(|cx| waiter.poll_pop(cx)).await?;
        Some(gone_error(op, event))
    }

    /// Rejects the request with `reason`, up to 72 bytes of additional
    /// rejection information and up to 148 of private data (`EINVAL` for
    /// more: the request is still there to answer). Once rejected, the
    /// request is IDLE and dropping it sends nothing.
    pub fn reject(&self, reason: RejectReason, ari: &[u8], private_data: &[u8]) -> Result<()> {
        call("IncomingRequest::reject", || {
            cm::send_rej(&self.handle.id, reason.0, ari, private_data)
        })?;
        self.rejected.store(true, Ordering::Release);
        Ok(())
    }

    /// Asks the peer for more time: an MRA with `service_timeout` (an IBA
    /// time exponent, at most 31) and up to 222 bytes of private data, sent
    /// now; a duplicate of the REQ gets it again. `EINVAL` for more data.
    pub fn send_mra(&self, service_timeout: u8, private_data: &[u8]) -> Result<()> {
        // Without the C API's delay flag (bit 7): this one sends now.
        let service_timeout = service_timeout.min(31);
        call("IncomingRequest::send_mra", || {
            cm::send_mra(&self.handle.id, service_timeout, Some(private_data))
        })
    }
}

impl std::fmt::Debug for IncomingRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingRequest")
            .field("id", &self.handle.id)
            .field("req", &self.req)
            .finish()
    }
}

/// A REP sent (state REP_SENT), waiting for the peer's RTU. Dropping it
/// rejects the connection (`CONSUMER_DEFINED`).
pub struct SentReply {
    handle: IdHandle,
    req: Box<ReqInfo>,
}

impl SentReply {
    /// The REQ that was answered.
    pub fn req(&self) -> &ReqInfo {
        &self.req
    }

    /// The attributes that move the QP to `state` for this connection
    /// (`ib_cm_init_qp_attr`); `EINVAL` in a state that has none yet.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        qp_attributes("SentReply::qp_attributes", &self.handle.id, state)
    }

    /// The id's state.
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// Waits for the RTU: the connection. Also done when the QP saw traffic
    /// first ([`notify_established`](SentReply::notify_established)), or
    /// when the peer's DREQ comes before its RTU (the DREQ is the
    /// connection's first event then).
    pub fn wait_established(self) -> Result<Connection> {
        let op = "SentReply::wait_established";
        let mut rtu_private_data = None;
        take_until(&self.handle.events, op, None, |event| {
            establish_step(op, event, &mut rtu_private_data)
        })?;
        Ok(self.established(rtu_private_data))
    }

    /// [`wait_established`](SentReply::wait_established) for the async API.
    pub(super) async fn wait_established_async(self) -> Result<Connection> {
        let op = "SentReply::wait_established";
        let mut rtu_private_data = None;
        take_until_async(&self.handle.events, op, |event| {
            establish_step(op, event, &mut rtu_private_data)
        })
        .await?;
        Ok(self.established(rtu_private_data))
    }

    fn established(self, rtu_private_data: Option<Vec<u8>>) -> Connection {
        let mut conn = Connection::new(self.handle, Side::Passive);
        conn.req = Some(self.req);
        conn.rtu_private_data = rtu_private_data;
        conn
    }

    /// Tells the CM the QP received traffic before the RTU
    /// (`ib_cm_notify(IB_EVENT_COMM_EST)`): established now, and
    /// [`Event::UserEstablished`] follows. `EISCONN` if established already.
    pub fn notify_established(&self) -> Result<()> {
        call("SentReply::notify_established", || {
            cm::notify(&self.handle.id, IB_EVENT_COMM_EST as i32)
        })
    }
}

impl std::fmt::Debug for SentReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentReply")
            .field("id", &self.handle.id)
            .finish()
    }
}

/// The error the event `event` stands for, that came to a request the peer
/// gave up.
fn gone_error(op: &'static str, event: Event) -> Error {
    match event {
        Event::RejReceived {
            reason,
            ari,
            private_data,
        } => Error::Rejected {
            op,
            reason,
            ari,
            private_data,
        },
        Event::RepError { status } | Event::ReqError { status } => Error::NoAnswer { op, status },
        other => Error::Unexpected {
            op,
            event: Box::new(other),
        },
    }
}

/// What waiting for the RTU does with `event` (the RTU's data goes to
/// `rtu_private_data`).
fn establish_step(op: &'static str, event: Event, rtu_private_data: &mut Option<Vec<u8>>) -> Step {
    match event {
        Event::RtuReceived { private_data } => {
            *rtu_private_data = Some(private_data);
            Step::Done
        }
        Event::UserEstablished => Step::Done,
        // The RTU was lost, and the peer disconnects already.
        dreq @ Event::DreqReceived { .. } => Step::DoneKeeping(dreq),
        // The peer needs longer: the CM waits longer.
        Event::MraReceived { .. } => Step::Next,
        Event::RejReceived {
            reason,
            ari,
            private_data,
        } => Step::Fail(Error::Rejected {
            op,
            reason,
            ari,
            private_data,
        }),
        Event::RepError { status } => Step::Fail(Error::NoAnswer { op, status }),
        other => Step::Fail(Error::Unexpected {
            op,
            event: Box::new(other),
        }),
    }
}
