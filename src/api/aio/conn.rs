//! The async API's listener, requests and connections: the blocking API's
//! values, whose waits are futures. Each forwards what does not wait.

use crate::api::{
    ConnectRequest, Event, QpAttributes, QpState, RejectReason, RepInfo, Reply, ReqInfo, Result,
    Side, State,
};

/// A listener, as [`crate::Listener`], whose [`accept`](Listener::accept)
/// is a future. Dropping it stops listening and rejects the requests
/// nobody took.
#[derive(Debug)]
pub struct Listener(pub(super) crate::Listener);

impl Listener {
    /// The service ID listened to (host order).
    pub fn service_id(&self) -> u64 {
        self.0.service_id()
    }

    /// The next connection request. Cancel-safe: a request is taken only
    /// when the future returns it, so one dropped before (in a `select!`)
    /// leaves the request for the next call.
    pub async fn accept(&self) -> Result<IncomingRequest> {
        self.0.accept_async().await.map(IncomingRequest)
    }

    /// The next connection request if one is waiting.
    pub fn try_accept(&self) -> Option<IncomingRequest> {
        self.0.try_accept().map(IncomingRequest)
    }

    /// How many requests wait to be accepted.
    pub fn pending(&self) -> usize {
        self.0.pending()
    }
}

/// A received REQ, as [`crate::IncomingRequest`]; dropping it rejects it.
#[derive(Debug)]
pub struct IncomingRequest(crate::IncomingRequest);

impl IncomingRequest {
    /// The REQ's fields.
    pub fn req(&self) -> &ReqInfo {
        self.0.req()
    }

    /// The REQ's private data (92 bytes).
    pub fn private_data(&self) -> &[u8] {
        self.0.private_data()
    }

    /// The id's state (REQ_RCVD, or IDLE once the peer gave up).
    pub fn state(&self) -> State {
        self.0.state()
    }

    /// The attributes that move the QP to `state` for this connection.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        self.0.qp_attributes(state)
    }

    /// Sends the REP and waits for the RTU, as
    /// [`crate::IncomingRequest::accept`]. Dropping the future before it is
    /// done rejects the connection.
    pub async fn accept(self, reply: Reply) -> Result<Connection> {
        self.0.accept_async(reply).await.map(Connection::new)
    }

    /// Sends the REP, as [`crate::IncomingRequest::reply`]; the future
    /// waits only when the peer gave up first (for the event that says
    /// how).
    pub async fn reply(self, reply: Reply) -> Result<SentReply> {
        self.0.reply_async(reply).await.map(SentReply)
    }

    /// Rejects the request, as [`crate::IncomingRequest::reject`].
    pub fn reject(&self, reason: RejectReason, ari: &[u8], private_data: &[u8]) -> Result<()> {
        self.0.reject(reason, ari, private_data)
    }

    /// Asks the peer for more time, as [`crate::IncomingRequest::send_mra`].
    pub fn send_mra(&self, service_timeout: u8, private_data: &[u8]) -> Result<()> {
        self.0.send_mra(service_timeout, private_data)
    }
}

/// A REP sent, as [`crate::SentReply`]; dropping it rejects the connection.
#[derive(Debug)]
pub struct SentReply(crate::SentReply);

impl SentReply {
    /// The REQ that was answered.
    pub fn req(&self) -> &ReqInfo {
        self.0.req()
    }

    /// The id's state.
    pub fn state(&self) -> State {
        self.0.state()
    }

    /// The attributes that move the QP to `state` for this connection.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        self.0.qp_attributes(state)
    }

    /// Waits for the RTU, as [`crate::SentReply::wait_established`].
    /// Dropping the future before it is done rejects the connection.
    pub async fn wait_established(self) -> Result<Connection> {
        self.0.wait_established_async().await.map(Connection::new)
    }

    /// Established now (the QP saw traffic first), as
    /// [`crate::SentReply::notify_established`].
    pub fn notify_established(&self) -> Result<()> {
        self.0.notify_established()
    }
}

/// A CM id with nothing sent, as [`crate::IdleId`].
#[derive(Debug)]
pub struct IdleId(pub(super) crate::IdleId);

impl IdleId {
    /// The id's state (IDLE).
    pub fn state(&self) -> State {
        self.0.state()
    }

    /// Sends the REQ (without waiting), as [`crate::IdleId::request`].
    pub fn request(self, request: ConnectRequest) -> Result<OutgoingRequest> {
        self.0.request(request).map(OutgoingRequest)
    }
}

/// A REQ sent, as [`crate::OutgoingRequest`]; dropping it cancels the
/// request (a REJ to the peer).
#[derive(Debug)]
pub struct OutgoingRequest(pub(super) crate::OutgoingRequest);

impl OutgoingRequest {
    /// The id's state.
    pub fn state(&self) -> State {
        self.0.state()
    }

    /// The attributes that move the QP to `state` for this connection.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        self.0.qp_attributes(state)
    }

    /// Waits for the peer's REP, as [`crate::OutgoingRequest::wait_reply`].
    /// Dropping the future before it is done cancels the request.
    pub async fn wait_reply(self) -> Result<ReceivedReply> {
        self.0.wait_reply_async().await.map(ReceivedReply)
    }
}

/// The peer's REP, as [`crate::ReceivedReply`]; dropping it rejects the
/// connection.
#[derive(Debug)]
pub struct ReceivedReply(crate::ReceivedReply);

impl ReceivedReply {
    /// The REP's fields and private data.
    pub fn rep(&self) -> &RepInfo {
        self.0.rep()
    }

    /// The attributes that move the QP to `state` for this connection.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        self.0.qp_attributes(state)
    }

    /// Sends the RTU (nothing to wait for), as
    /// [`crate::ReceivedReply::confirm`], but without its wait: when the
    /// peer's REJ came after its REP and the driver has not run its event
    /// yet, the error is the RTU's refusal (`EINVAL`, the id no longer in
    /// REP_RCVD), not [`Error::Rejected`](crate::Error::Rejected);
    /// [`Device::connect`](super::Device::connect) waits for the REJ.
    pub fn confirm(self, private_data: &[u8]) -> Result<Connection> {
        // No wait for the event that says why a refused RTU came too late:
        // this thread may be the one that runs the events (only one
        // already queued is looked at).
        self.0
            .confirm_waiting(private_data, std::time::Duration::ZERO)
            .map(Connection::new)
    }

    /// Rejects the REP, as [`crate::ReceivedReply::reject`].
    pub fn reject(&self, reason: RejectReason, ari: &[u8], private_data: &[u8]) -> Result<()> {
        self.0.reject(reason, ari, private_data)
    }

    /// Asks the peer for more time before the RTU, as
    /// [`crate::ReceivedReply::send_mra`].
    pub fn send_mra(&self, service_timeout: u8, private_data: &[u8]) -> Result<()> {
        self.0.send_mra(service_timeout, private_data)
    }

    /// The id's state.
    pub fn state(&self) -> State {
        self.0.state()
    }
}

/// An established connection, as [`crate::Connection`], whose waits are
/// futures. Dropping it does what `ib_destroy_cm_id` does in its state, at
/// once (a DREQ from ESTABLISHED, a DREP after the peer's DREQ).
#[derive(Debug)]
pub struct Connection {
    inner: crate::Connection,
    /// The peer's DREQ event was handed to the user: a disconnect refused in
    /// DREQ_RCVD has no event to wait for.
    peer_dreq_taken: bool,
}

impl Connection {
    pub(super) fn new(inner: crate::Connection) -> Self {
        Self {
            inner,
            peer_dreq_taken: false,
        }
    }

    /// Which side this is.
    pub fn side(&self) -> Side {
        self.inner.side()
    }

    /// The id's state.
    pub fn state(&self) -> State {
        self.inner.state()
    }

    /// The attributes that move the QP to `state` for this connection.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        self.inner.qp_attributes(state)
    }

    /// This side's local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        self.inner.local_comm_id()
    }

    /// The peer's communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        self.inner.remote_comm_id()
    }

    /// The REP this side received (active side).
    pub fn rep(&self) -> Option<&RepInfo> {
        self.inner.rep()
    }

    /// The REQ this side accepted (passive side).
    pub fn req(&self) -> Option<&ReqInfo> {
        self.inner.req()
    }

    /// The RTU's private data (passive side).
    pub fn rtu_private_data(&self) -> Option<&[u8]> {
        self.inner.rtu_private_data()
    }

    /// The peer's QP number.
    pub fn remote_qpn(&self) -> u32 {
        self.inner.remote_qpn()
    }

    /// Sends a DREQ with `private_data` (up to 220 bytes) and waits for the
    /// peer's DREP: its private data (224 bytes), as
    /// [`crate::Connection::disconnect`]. Cancel-safe: dropped after the
    /// DREQ went, the DREP (or what ends it) comes from
    /// [`next_event`](Connection::next_event).
    pub async fn disconnect(&mut self, private_data: &[u8]) -> Result<Vec<u8>> {
        let taken = self.peer_dreq_taken;
        self.inner.disconnect_async(private_data, taken).await
    }

    /// Sends a DREQ without waiting, as
    /// [`crate::Connection::send_disconnect`].
    pub fn send_disconnect(&self, private_data: &[u8]) -> Result<()> {
        self.inner.send_disconnect(private_data)
    }

    /// Answers the peer's DREQ with a DREP, as
    /// [`crate::Connection::reply_disconnect`].
    pub fn reply_disconnect(&self, private_data: &[u8]) -> Result<()> {
        self.inner.reply_disconnect(private_data)
    }

    /// Bounds this connection's future DREQs, as
    /// [`crate::Connection::set_disconnect_timeout`].
    pub fn set_disconnect_timeout(&self, interval: std::time::Duration, retries: u8) -> Result<()> {
        self.inner.set_disconnect_timeout(interval, retries)
    }

    /// The next event; [`Error::Closed`](crate::Error::Closed) after the last one
    /// ([`Event::TimewaitExit`]). Cancel-safe: an event is taken only when
    /// the future returns it.
    pub async fn next_event(&mut self) -> Result<Event> {
        let event = self.inner.next_event_async().await?;
        self.saw(&event);
        Ok(event)
    }

    /// The next event if one is waiting.
    pub fn try_next_event(&mut self) -> Option<Event> {
        let event = self.inner.try_next_event()?;
        self.saw(&event);
        Some(event)
    }

    /// Waits for the end of timewait, the connection's last event; returns
    /// the events that came before it, as
    /// [`crate::Connection::wait_closed`] without a bound (a runtime's
    /// timeout bounds the future; the events stay if it is dropped).
    pub async fn wait_closed(&mut self) -> Result<Vec<Event>> {
        let events = self.inner.wait_closed_async().await?;
        events.iter().for_each(|event| self.saw(event));
        Ok(events)
    }

    fn saw(&mut self, event: &Event) {
        self.peer_dreq_taken |= matches!(event, Event::DreqReceived { .. });
    }
}
