//! The active side's request: an idle id, its REQ sent, the REP received and
//! confirmed (or rejected).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Connection, PEER_GONE_WAIT, Side, Step, rejected, take_until, take_until_async};
use crate::api::error::{Error, Result, call};
use crate::api::event::{Event, RepInfo};
use crate::api::handle::IdHandle;
use crate::api::params::ConnectRequest;
use crate::api::qp::{QpAttributes, QpState, qp_attributes};
use crate::api::types::{RejectReason, State};
use crate::cm;

/// A CM id of a device with nothing sent yet (IDLE, `ib_create_cm_id`),
/// from [`Device::create_id`](crate::api::Device::create_id):
/// [`request`](IdleId::request) sends its REQ. Creating ids ahead keeps
/// their cost out of the connect; [`Device::request`](crate::api::Device::request)
/// does both at once. Dropping it destroys the id (nothing to send).
pub struct IdleId {
    handle: IdHandle,
}

impl IdleId {
    pub(in crate::api) fn new(handle: IdHandle) -> Self {
        Self { handle }
    }

    /// The id's state (IDLE).
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// Sends the REQ, as [`Device::request`](crate::api::Device::request); on a
    /// refusal the id is destroyed.
    pub fn request(self, request: ConnectRequest) -> Result<OutgoingRequest> {
        call("IdleId::request", || {
            cm::send_req(&self.handle.id, &request.params)
        })?;
        Ok(OutgoingRequest::new(self.handle, request.rtu_private_data))
    }
}

impl std::fmt::Debug for IdleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleId")
            .field("id", &self.handle.id)
            .finish()
    }
}

/// A REQ sent (state REQ_SENT), waiting for the answer. Dropping it
/// cancels the request (REJ `TIMEOUT` to the peer, as `ib_destroy_cm_id`).
pub struct OutgoingRequest {
    handle: IdHandle,
    rtu_private_data: Vec<u8>,
}

impl OutgoingRequest {
    pub(in crate::api) fn new(handle: IdHandle, rtu_private_data: Vec<u8>) -> Self {
        Self {
            handle,
            rtu_private_data,
        }
    }

    /// The id's state.
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// The attributes that move the QP to `state` for this connection
    /// (`ib_cm_init_qp_attr`); `EINVAL` in a state that has none yet.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        qp_attributes("OutgoingRequest::qp_attributes", &self.handle.id, state)
    }

    /// Waits for the peer's REP (MRAs only make the CM wait longer). A REJ
    /// fails with [`Error::Rejected`], a REQ nobody answered with
    /// [`Error::NoAnswer`].
    pub fn wait_reply(self) -> Result<ReceivedReply> {
        let op = "OutgoingRequest::wait_reply";
        let mut rep = None;
        take_until(&self.handle.events, op, None, |event| {
            reply_step(op, event, &mut rep)
        })?;
        Ok(self.replied(rep))
    }

    /// [`wait_reply`](OutgoingRequest::wait_reply) for the async API.
    pub(in crate::api) async fn wait_reply_async(self) -> Result<ReceivedReply> {
        let op = "OutgoingRequest::wait_reply";
        let mut rep = None;
        take_until_async(&self.handle.events, op, |event| {
            reply_step(op, event, &mut rep)
        })
        .await?;
        Ok(self.replied(rep))
    }

    fn replied(self, rep: Option<Box<RepInfo>>) -> ReceivedReply {
        ReceivedReply {
            handle: self.handle,
            rep: rep.unwrap_or_else(|| unreachable!("the wait ends with a REP or an error")),
            rtu_private_data: self.rtu_private_data,
            rejected: AtomicBool::new(false),
        }
    }
}

/// What looking for the peer's REJ after its REP does with `event` (the
/// REJ, as the error, goes to `rej`); the end of timewait ends the search.
fn gone_step(event: Event, rej: &mut Option<Error>) -> Step {
    match event {
        Event::RejReceived {
            reason,
            ari,
            private_data,
        } => {
            *rej = Some(rejected(
                "ReceivedReply::confirm",
                reason,
                ari,
                private_data,
            ));
            Step::Done
        }
        Event::TimewaitExit => Step::Done,
        other => Step::Keep(other),
    }
}

/// What waiting for a REP does with `event`; the REP goes to `rep`.
fn reply_step(op: &'static str, event: Event, rep: &mut Option<Box<RepInfo>>) -> Step {
    match event {
        Event::RepReceived(info) => {
            *rep = Some(info);
            Step::Done
        }
        // The peer needs longer: the CM waits longer.
        Event::MraReceived { .. } => Step::Next,
        Event::RejReceived {
            reason,
            ari,
            private_data,
        } => Step::Fail(rejected(op, reason, ari, private_data)),
        Event::ReqError { status } => Step::Fail(Error::NoAnswer { op, status }),
        other => Step::Fail(Error::Unexpected {
            op,
            event: Box::new(other),
        }),
    }
}

impl std::fmt::Debug for OutgoingRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutgoingRequest")
            .field("id", &self.handle.id)
            .finish()
    }
}

/// The peer's REP received (state REP_RCVD): move the QP to RTR and RTS,
/// then [`confirm`](ReceivedReply::confirm) with the RTU. Dropping it
/// rejects the connection (`CONSUMER_DEFINED`).
pub struct ReceivedReply {
    handle: IdHandle,
    rep: Box<RepInfo>,
    rtu_private_data: Vec<u8>,
    /// [`reject`](ReceivedReply::reject) sent our REJ: no event will say
    /// why the RTU is refused.
    rejected: AtomicBool,
}

impl ReceivedReply {
    /// The REP's fields and private data.
    pub fn rep(&self) -> &RepInfo {
        &self.rep
    }

    /// The attributes that move the QP to `state` for this connection
    /// (`ib_cm_init_qp_attr`); `EINVAL` in a state that has none yet.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        qp_attributes("ReceivedReply::qp_attributes", &self.handle.id, state)
    }

    /// Sends the RTU with `private_data` (up to 224 bytes): established.
    /// `EINVAL` for more data, and the REP is rejected as a dropped one.
    /// When the peer gave up after its REP (its REJ came first), fails with
    /// [`Error::Rejected`].
    pub fn confirm(self, private_data: &[u8]) -> Result<Connection> {
        self.confirm_waiting(private_data, PEER_GONE_WAIT)
    }

    /// [`confirm`](ReceivedReply::confirm), waiting `wait` at most for the
    /// event that says why the peer gave up (`ZERO`: only one queued
    /// already, for the async API's `confirm`, whose thread may be the one
    /// that runs the events).
    pub(in crate::api) fn confirm_waiting(
        self,
        private_data: &[u8],
        wait: Duration,
    ) -> Result<Connection> {
        let op = "ReceivedReply::confirm";
        if let Err(refused) = self.send_rtu(op, private_data) {
            let why = self.peer_gave_up().then(|| self.why_gone(op, wait));
            return Err(why.flatten().unwrap_or(refused));
        }
        Ok(self.confirmed())
    }

    /// [`confirm`](ReceivedReply::confirm) for the async API.
    pub(in crate::api) async fn confirm_async(self, private_data: &[u8]) -> Result<Connection> {
        let op = "ReceivedReply::confirm";
        if let Err(refused) = self.send_rtu(op, private_data) {
            let why = match self.peer_gave_up() {
                true => self.why_gone_async(op).await,
                false => None,
            };
            return Err(why.unwrap_or(refused));
        }
        Ok(self.confirmed())
    }

    /// [`confirm`](ReceivedReply::confirm) with the RTU data of the request.
    pub(in crate::api) fn confirm_with_request_data(mut self) -> Result<Connection> {
        let data = std::mem::take(&mut self.rtu_private_data);
        self.confirm(&data)
    }

    /// [`confirm_async`](ReceivedReply::confirm_async) with the RTU data of
    /// the request.
    pub(in crate::api) async fn confirm_with_request_data_async(mut self) -> Result<Connection> {
        let data = std::mem::take(&mut self.rtu_private_data);
        self.confirm_async(&data).await
    }

    fn send_rtu(&self, op: &'static str, private_data: &[u8]) -> Result<()> {
        call(op, || cm::send_rtu(&self.handle.id, private_data))
    }

    fn confirmed(self) -> Connection {
        let mut conn = Connection::new(self.handle, Side::Active);
        conn.rep = Some(self.rep);
        conn
    }

    /// The RTU was refused because the id left REP_RCVD (and MRA_REP_SENT)
    /// not by this side's doing: the peer's REJ came after its REP, and its
    /// event is on its way (the engine changes the state first). Without
    /// this, the REJ would go with the id, and `connect` fail with a bare
    /// `EINVAL` (tests/rust_api_async_edges.rs,
    /// `connect_answered_rep_then_rej_reports_the_rej`).
    fn peer_gave_up(&self) -> bool {
        !self.rejected.load(Ordering::Acquire)
            && !matches!(self.handle.state(), State::RepRcvd | State::MraRepSent)
    }

    /// The peer's REJ among the id's events, `wait` at most; `None` when
    /// timewait ends (or the wait does) without one.
    fn why_gone(&self, op: &'static str, wait: Duration) -> Option<Error> {
        let mut rej = None;
        let _ = take_until(&self.handle.events, op, Some(wait), |event| {
            gone_step(event, &mut rej)
        });
        rej
    }

    /// [`why_gone`](ReceivedReply::why_gone) for the async API: the event
    /// comes, or timewait ends, or the queue finishes.
    async fn why_gone_async(&self, op: &'static str) -> Option<Error> {
        let mut rej = None;
        let _ = take_until_async(&self.handle.events, op, |event| gone_step(event, &mut rej)).await;
        rej
    }

    /// Rejects the REP with `reason`, additional rejection information (up
    /// to 72 bytes) and private data (up to 148); `EINVAL` for more, and
    /// the REP is still there to answer.
    pub fn reject(&self, reason: RejectReason, ari: &[u8], private_data: &[u8]) -> Result<()> {
        call("ReceivedReply::reject", || {
            cm::send_rej(&self.handle.id, reason.0, ari, private_data)
        })?;
        self.rejected.store(true, Ordering::Release);
        Ok(())
    }

    /// Asks the peer for more time before the RTU (the QP takes long to
    /// set up): an MRA with `service_timeout` (an IBA time exponent, at
    /// most 31) and up to 222 bytes of private data, sent now; the peer
    /// waits that much longer for the RTU (its state MRA_REP_RCVD), and a
    /// duplicate of the REP gets the MRA again. `EINVAL` for more data, and
    /// the REP is still there to answer; [`confirm`](ReceivedReply::confirm)
    /// works as before.
    pub fn send_mra(&self, service_timeout: u8, private_data: &[u8]) -> Result<()> {
        // Without the C API's delay flag (bit 7): this one sends now.
        let service_timeout = service_timeout.min(31);
        call("ReceivedReply::send_mra", || {
            cm::send_mra(&self.handle.id, service_timeout, Some(private_data))
        })
    }

    /// The id's state (REP_RCVD, MRA_REP_SENT after
    /// [`send_mra`](ReceivedReply::send_mra)).
    pub fn state(&self) -> State {
        self.handle.state()
    }
}

impl std::fmt::Debug for ReceivedReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedReply")
            .field("id", &self.handle.id)
            .field("rep", &self.rep)
            .finish()
    }
}
