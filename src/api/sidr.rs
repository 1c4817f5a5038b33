//! SIDR, service ID resolution for UD QPs: the active side asks which QP
//! (and Q_Key) serves a service ID, a [`SidrListener`] answers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::device::DeviceShared;
use super::error::{Error, Result, call};
use super::event::mad_bytes;
use super::handle::Router;
use super::queue::{Popped, Queue, would_deadlock};
use super::types::{Path, SendStatus, State};
use crate::abi::ib_cm_event_type::{IB_CM_SIDR_REP_RECEIVED, IB_CM_SIDR_REQ_ERROR};
use crate::cm::event::{CmEvent, EventParam, SidrReqRcvd};
use crate::cm::id::{CmIdPriv, Handler};
use crate::cm::{self, SidrRepParams, SidrReqParams};

/// The status of a SIDR_REP (`enum ib_cm_sidr_status`). Any status is an
/// answer: [`Device::sidr_request`](super::Device::sidr_request) returns it
/// as data, not as an [`Error`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[non_exhaustive]
pub enum SidrStatus {
    /// `IB_SIDR_SUCCESS`: the reply's QPN and Q_Key serve the service ID.
    Success,
    /// `IB_SIDR_UNSUPPORTED`: nobody listens to the service ID (the CM's
    /// own answer then).
    Unsupported,
    /// `IB_SIDR_REJECT`: the service refused (also what a request dropped
    /// unanswered, or refused by a connection [`Listener`](super::Listener),
    /// gets).
    Reject,
    /// `IB_SIDR_NO_QP`.
    NoQp,
    /// `IB_SIDR_REDIRECT`: the reply's information says where to.
    Redirect,
    /// `IB_SIDR_UNSUPPORTED_VERSION`.
    UnsupportedVersion,
    /// Another value, as sent.
    Other(u8),
}

impl SidrStatus {
    fn from_raw(v: u8) -> Self {
        match v {
            0 => SidrStatus::Success,
            1 => SidrStatus::Unsupported,
            2 => SidrStatus::Reject,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedVersion,
            other => SidrStatus::Other(other),
        }
    }

    fn to_raw(self) -> u8 {
        match self {
            SidrStatus::Success => 0,
            SidrStatus::Unsupported => 1,
            SidrStatus::Reject => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::UnsupportedVersion => 5,
            SidrStatus::Other(v) => v,
        }
    }
}

/// A SIDR request (`struct ib_cm_sidr_req_param`), made with
/// [`SidrRequest::builder`].
#[derive(Clone, Debug)]
pub struct SidrRequest {
    params: SidrReqParams,
}

/// Builds a [`SidrRequest`]. Unset fields take the values the kernel's
/// rdma_cm sends (`cma_resolve_ib_udp`): a timeout of 4096 ms and 15
/// retries, so a request nobody answers fails after about a minute: tests
/// and impatient callers set shorter ones.
#[derive(Clone, Debug)]
pub struct SidrRequestBuilder {
    request: SidrRequest,
}

impl SidrRequest {
    /// A request asking which QP serves `service_id` (host order) at the
    /// other end of `path` (from [`Device::path_to`](super::Device::path_to)).
    pub fn builder(path: Path, service_id: u64) -> SidrRequestBuilder {
        SidrRequestBuilder {
            request: SidrRequest {
                params: SidrReqParams {
                    path: path.0,
                    service_id,
                    timeout_ms: 1 << 12,
                    private_data: Vec::new(),
                    max_cm_retries: 15,
                },
            },
        }
    }
}

impl SidrRequestBuilder {
    /// The finished request.
    pub fn build(self) -> SidrRequest {
        self.request
    }

    /// How long the CM waits for the answer before it resends the request.
    pub fn timeout_ms(mut self, ms: u32) -> Self {
        self.request.params.timeout_ms = ms;
        self
    }

    /// How many times the CM resends a request nobody answers.
    pub fn max_cm_retries(mut self, n: u8) -> Self {
        self.request.params.max_cm_retries = n;
        self
    }

    /// The SIDR_REQ's private data: up to 216 bytes (more is refused with
    /// `EINVAL` when the request is sent).
    pub fn private_data(mut self, data: &[u8]) -> Self {
        self.request.params.private_data = data.to_vec();
        self
    }
}

/// The peer's SIDR_REP (the kernel's `struct ib_cm_sidr_rep_event_param`
/// and the message's private data). Its [`status`](SidrReply::status) says
/// whether the QPN and Q_Key mean anything: a refusal is a reply too, not
/// an [`Error`].
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct SidrReply {
    /// The answer.
    pub status: SidrStatus,
    /// The QP that serves the service ID (24 bits).
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The additional information, as long as the reply said (72 bytes at
    /// most; a redirect's address).
    pub info: Vec<u8>,
    /// The SIDR_REP's private data (136 bytes).
    pub private_data: Vec<u8>,
}

/// What ends a request of this side: the peer's reply, or none after the
/// retries.
enum Outcome {
    Replied(Box<SidrReply>),
    NoAnswer(SendStatus),
}

/// A CM id of a SIDR exchange, destroyed with its owner: as
/// `ib_destroy_cm_id` does, a request sent is cancelled (nothing goes to
/// the peer), a request received is answered with `IB_SIDR_REJECT`.
struct SidrId {
    id: Arc<CmIdPriv>,
    /// Keeps the device open while the id lives (dropped after it).
    _device: Arc<DeviceShared>,
}

impl Drop for SidrId {
    fn drop(&mut self) {
        super::error::destroy(&self.id);
    }
}

impl SidrId {
    fn state(&self) -> State {
        self.id.state().into()
    }
}

/// A SIDR_REQ sent (state SIDR_REQ_SENT), from
/// [`Device::send_sidr_request`](super::Device::send_sidr_request), waiting
/// for the answer. Dropping it cancels the request: the CM stops resending
/// it and forgets a reply that comes later (`ib_destroy_cm_id`; nothing is
/// sent to the peer).
pub struct OutgoingSidrRequest {
    // Before the queue: the id goes first, and no handler pushes after.
    id: SidrId,
    outcome: Arc<Queue<Outcome>>,
}

impl OutgoingSidrRequest {
    /// Creates an id of `device` and sends `request` from it.
    pub(super) fn send(
        op: &'static str,
        device: &Arc<DeviceShared>,
        request: &SidrRequest,
    ) -> Result<Self> {
        let outcome: Arc<Queue<Outcome>> = Arc::default();
        let sink = Arc::downgrade(&outcome);
        let handler: Handler = Arc::new(move |_, ev| {
            if let (Some(queue), Some(outcome)) = (sink.upgrade(), Outcome::from_engine(ev)) {
                queue.push(outcome, true);
            }
            0
        });
        let id = call(op, || cm::create_id(&device.engine, handler))?;
        let id = SidrId {
            id,
            _device: device.clone(),
        };
        call(op, || cm::send_sidr_req(&id.id, &request.params))?;
        Ok(Self { id, outcome })
    }

    /// The id's state (SIDR_REQ_SENT, IDLE once answered).
    pub fn state(&self) -> State {
        self.id.state()
    }

    /// Waits for the peer's SIDR_REP, whatever its status. A request nobody
    /// answered after its retries fails with [`Error::NoAnswer`].
    pub fn wait(self) -> Result<SidrReply> {
        self.wait_until("OutgoingSidrRequest::wait", None)
    }

    /// [`wait`](OutgoingSidrRequest::wait), `timeout` at most
    /// ([`Error::TimedOut`]; the request is cancelled then).
    pub fn wait_timeout(self, timeout: Duration) -> Result<SidrReply> {
        self.wait_until("OutgoingSidrRequest::wait_timeout", Some(timeout))
    }

    /// The wait of `op`, `timeout` at most if given.
    pub(super) fn wait_until(
        self,
        op: &'static str,
        timeout: Option<Duration>,
    ) -> Result<SidrReply> {
        match self.outcome.pop(timeout.map(|t| Instant::now() + t)) {
            Popped::Item(outcome) => outcome.into_result(op),
            Popped::TimedOut => Err(Error::TimedOut {
                op,
                after: timeout.unwrap_or_default(),
            }),
            // The outcome is the only item, and `self` took none before.
            Popped::Finished => Err(Error::Closed { op }),
            Popped::WouldDeadlock => Err(would_deadlock(op)),
        }
    }

    /// [`wait`](OutgoingSidrRequest::wait) for the async API.
    pub(super) async fn wait_async(self) -> Result<SidrReply> {
        let op = "OutgoingSidrRequest::wait";
        let mut waiter = self.outcome.waiter();
        match std::future::poll_fn(|cx| waiter.poll_pop(cx)).await {
            Some(outcome) => outcome.into_result(op),
            None => Err(Error::Closed { op }),
        }
    }
}

impl std::fmt::Debug for OutgoingSidrRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutgoingSidrRequest")
            .field("id", &self.id.id)
            .finish()
    }
}

impl Outcome {
    /// What the event `ev` of a request of this side says; `None` for any
    /// other event (an id of this kind gets none).
    fn from_engine(ev: &CmEvent) -> Option<Outcome> {
        match (ev.event, &ev.param) {
            (IB_CM_SIDR_REP_RECEIVED, EventParam::SidrRepRcvd(r)) => {
                Some(Outcome::Replied(Box::new(SidrReply {
                    status: SidrStatus::from_raw(r.status),
                    qpn: r.qpn,
                    qkey: r.qkey,
                    info: mad_bytes(ev, &r.info),
                    private_data: ev.private_data().map(<[u8]>::to_vec).unwrap_or_default(),
                })))
            }
            (IB_CM_SIDR_REQ_ERROR, EventParam::SendStatus(s)) => {
                Some(Outcome::NoAnswer((*s).into()))
            }
            _ => None,
        }
    }

    fn into_result(self, op: &'static str) -> Result<SidrReply> {
        match self {
            Outcome::Replied(reply) => Ok(*reply),
            Outcome::NoAnswer(status) => Err(Error::NoAnswer { op, status }),
        }
    }
}

/// A SIDR listener (`ib_cm_listen` for a UD service): SIDR requests to its
/// service ID on its device wait here until [`accept`](SidrListener::accept)
/// takes them. Dropping it stops listening, and answers the requests nobody
/// took with `IB_SIDR_REJECT`. A request that arrived just before the drop
/// but was not yet queued here is forgotten without an answer, as the CM
/// forgets a REQ whose listener went first: the peer's resend gets
/// `IB_SIDR_UNSUPPORTED` (or the service ID's next listener).
///
/// Why a type of its own rather than SIDR requests on a [`Listener`](super::Listener):
/// a service ID is served either by connections or by a UD QP (rdma_cm's
/// TCP and UDP port spaces), so an accept loop meets one kind only and
/// keeps its return type; and a listener never holds requests of a kind
/// its user does not take, which would wait unanswered and fill the
/// backlog the other kind needs. A connection [`Listener`](super::Listener)
/// answers a SIDR_REQ at once with `IB_SIDR_REJECT`; a `SidrListener`
/// rejects a REQ at once (`CONSUMER_DEFINED`). One service ID has one
/// listener of either kind per device (`EBUSY` for a second one).
pub struct SidrListener {
    id: Arc<CmIdPriv>,
    requests: Arc<Queue<IncomingSidrRequest>>,
    _device: Arc<DeviceShared>,
}

impl SidrListener {
    pub(super) fn new(device: &Arc<DeviceShared>, service_id: u64) -> Result<SidrListener> {
        let op = "Device::listen_sidr";
        let requests: Arc<Queue<IncomingSidrRequest>> = Arc::default();
        let handler = Router::handler(std::sync::Weak::new(), Arc::downgrade(&requests), device);
        let id = call(op, || cm::create_id(&device.engine, handler))?;
        if let Err(e) = call(op, || cm::listen(&id, service_id)) {
            cm::destroy_id(&id, 0);
            return Err(e);
        }
        Ok(SidrListener {
            id,
            requests,
            _device: device.clone(),
        })
    }

    /// The service ID listened to (host order); with
    /// [`Listener::ASSIGN_SERVICE_ID`](super::Listener::ASSIGN_SERVICE_ID),
    /// the one the CM assigned.
    pub fn service_id(&self) -> u64 {
        u64::from_be(self.id.public.service_id.load(Ordering::Relaxed))
    }

    /// The next SIDR request, waiting as long as it takes.
    pub fn accept(&self) -> Result<IncomingSidrRequest> {
        self.requests.next_request("SidrListener::accept", None)
    }

    /// The next SIDR request, waiting `timeout` at most
    /// ([`Error::TimedOut`]).
    pub fn accept_timeout(&self, timeout: Duration) -> Result<IncomingSidrRequest> {
        self.requests
            .next_request("SidrListener::accept_timeout", Some(timeout))
    }

    /// The next SIDR request if one is waiting.
    pub fn try_accept(&self) -> Option<IncomingSidrRequest> {
        self.requests.try_pop()
    }

    /// How many SIDR requests wait to be accepted.
    pub fn pending(&self) -> usize {
        self.requests.len()
    }

    /// [`accept`](SidrListener::accept) for the async API: a request is
    /// taken only when the future returns it.
    pub(super) async fn accept_async(&self) -> Result<IncomingSidrRequest> {
        self.requests
            .next_request_async("SidrListener::accept")
            .await
    }
}

impl Drop for SidrListener {
    fn drop(&mut self) {
        // Waits for a handler of this listener that runs (it only queues);
        // the requests left are answered when the queue goes.
        super::error::destroy(&self.id);
    }
}

impl std::fmt::Debug for SidrListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidrListener")
            .field("service_id", &format_args!("{:#x}", self.service_id()))
            .field("waiting", &self.requests.len())
            .finish()
    }
}

/// A received SIDR_REQ (state SIDR_REQ_RCVD), to be answered with
/// [`reply`](IncomingSidrRequest::reply). Dropping it unanswered answers
/// with a SIDR_REP of status `IB_SIDR_REJECT` and nothing else, as
/// `ib_destroy_cm_id` does in SIDR_REQ_RCVD.
pub struct IncomingSidrRequest {
    id: SidrId,
    service_id: u64,
    port: u8,
    pkey: u16,
    bth_pkey: u16,
    private_data: Vec<u8>,
}

impl IncomingSidrRequest {
    /// The request that event `ev` (with `r`) brought on the new id `id`.
    pub(super) fn new(
        id: Arc<CmIdPriv>,
        device: Arc<DeviceShared>,
        ev: &CmEvent,
        r: &SidrReqRcvd,
    ) -> Self {
        Self {
            id: SidrId {
                id,
                _device: device,
            },
            service_id: r.service_id,
            port: r.port,
            pkey: r.pkey,
            bth_pkey: r.bth_pkey,
            private_data: ev.private_data().map(<[u8]>::to_vec).unwrap_or_default(),
        }
    }

    /// The service ID asked about (host order).
    pub fn service_id(&self) -> u64 {
        self.service_id
    }

    /// The port the request arrived on.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The P_Key the request names.
    pub fn pkey(&self) -> u16 {
        self.pkey
    }

    /// The P_Key of the packet (the port's P_Key table at the index it
    /// came with; the kernel's `cm_get_bth_pkey`), which rdma_cm compares
    /// with [`pkey`](IncomingSidrRequest::pkey).
    pub fn bth_pkey(&self) -> u16 {
        self.bth_pkey
    }

    /// The SIDR_REQ's private data (216 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The id's state (SIDR_REQ_RCVD).
    pub fn state(&self) -> State {
        self.id.state()
    }

    /// Sends the SIDR_REP. `EINVAL` for more than 72 bytes of information
    /// or 136 of private data; the request is consumed either way, so a
    /// refused reply leaves it to be answered as a dropped one
    /// (`IB_SIDR_REJECT`).
    pub fn reply(self, reply: SidrReplyParams) -> Result<()> {
        call("IncomingSidrRequest::reply", || {
            cm::send_sidr_rep(&self.id.id, &reply.to_engine())
        })
    }
}

impl std::fmt::Debug for IncomingSidrRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncomingSidrRequest")
            .field("id", &self.id.id)
            .field("service_id", &format_args!("{:#x}", self.service_id))
            .field("port", &self.port)
            .field("pkey", &format_args!("{:#x}", self.pkey))
            .finish()
    }
}

/// The answer to a SIDR request (`struct ib_cm_sidr_rep_param`). Start
/// from [`SidrReplyParams::new`] (or [`with_status`](SidrReplyParams::with_status)
/// for a refusal) and change what you need:
/// `SidrReplyParams { private_data: b"hi".to_vec(), ..SidrReplyParams::new(qpn, qkey) }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// The status.
    pub status: SidrStatus,
    /// The QP that serves the service ID (24 bits).
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// Additional information: up to 72 bytes.
    pub info: Vec<u8>,
    /// Up to 136 bytes.
    pub private_data: Vec<u8>,
    /// Enhanced connection establishment (vendor ID, attribute modifier).
    /// Of the vendor ID only bits 15..0 are sent, as Linux sends them.
    pub ece: (u32, u32),
}

impl SidrReplyParams {
    /// A reply of status [`SidrStatus::Success`]: QP `qpn` with Q_Key
    /// `qkey` serves the service ID.
    pub fn new(qpn: u32, qkey: u32) -> Self {
        Self {
            status: SidrStatus::Success,
            qpn,
            qkey,
            info: Vec::new(),
            private_data: Vec::new(),
            ece: (0, 0),
        }
    }

    /// A reply with `status` and nothing else (QPN and Q_Key 0): a
    /// refusal such as [`SidrStatus::Reject`] or [`SidrStatus::NoQp`].
    pub fn with_status(status: SidrStatus) -> Self {
        Self {
            status,
            ..Self::new(0, 0)
        }
    }

    fn to_engine(&self) -> SidrRepParams {
        SidrRepParams {
            qp_num: self.qpn,
            qkey: self.qkey,
            status: self.status.to_raw(),
            info: self.info.clone(),
            private_data: self.private_data.clone(),
            ece: self.ece,
        }
    }
}
