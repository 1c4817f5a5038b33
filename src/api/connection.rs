//! The active side's request, and a connection of either side.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use super::error::{Error, Result, call};
use super::event::{Event, RepInfo, ReqInfo};
use super::handle::IdHandle;
use super::params::ConnectRequest;
use super::qp::{QpAttributes, QpState, qp_attributes};
use super::queue::{Popped, Queue, would_deadlock};
use super::types::{RejectReason, State};
use crate::cm;
use crate::cm::id::CmIdPriv;

/// How long `disconnect` waits for the peer's DREQ whose state change it
/// saw.
const PEER_DREQ_WAIT: Duration = Duration::from_secs(1);

/// How long `confirm` waits for the REJ whose state change refused its RTU.
const PEER_GONE_WAIT: Duration = Duration::from_secs(1);

/// What a call that waits does with the next event of its id.
pub(super) enum Step {
    /// The call is done with this event.
    Done,
    /// The call is done; the event stays first in the queue for the user.
    DoneKeeping(Event),
    /// Not for this call: kept for the user, in order; the call goes on.
    Keep(Event),
    /// Taken (it mattered only to this call); the call goes on.
    Next,
    /// The call fails.
    Fail(Error),
}

/// Takes events of `queue` until `step` says done or fails, `timeout` at
/// most; the events kept go back in front of the queue, in their order.
pub(super) fn take_until(
    queue: &Queue<Event>,
    op: &'static str,
    timeout: Option<Duration>,
    mut step: impl FnMut(Event) -> Step,
) -> Result<()> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut kept = Vec::new();
    let result = loop {
        let event = match queue.pop(deadline) {
            Popped::Item(event) => event,
            Popped::TimedOut => {
                let after = timeout.unwrap_or_default();
                break Err(Error::TimedOut { op, after });
            }
            Popped::Finished => break Err(Error::Closed { op }),
            Popped::WouldDeadlock => break Err(would_deadlock(op)),
        };
        if let Some(result) = settle(step(event), &mut kept) {
            break result;
        }
    };
    queue.put_back(kept);
    result
}

/// [`take_until`] for a future (the async API): the same steps, without a
/// deadline (a runtime's timeout wraps the future). The events kept go back
/// before every `Pending`, so a future dropped while it waits leaves the
/// queue as it found it, less the events its steps consumed.
pub(super) async fn take_until_async(
    queue: &Queue<Event>,
    op: &'static str,
    mut step: impl FnMut(Event) -> Step,
) -> Result<()> {
    let mut waiter = queue.waiter();
    std::future::poll_fn(|cx| {
        let mut kept = Vec::new();
        let outcome = loop {
            let event = match waiter.poll_pop(cx) {
                Poll::Ready(Some(event)) => event,
                Poll::Ready(None) => break Poll::Ready(Err(Error::Closed { op })),
                Poll::Pending => break Poll::Pending,
            };
            if let Some(result) = settle(step(event), &mut kept) {
                break Poll::Ready(result);
            }
        };
        queue.put_back(kept);
        outcome
    })
    .await
}

/// What a step's answer means for the wait: `Some` ends it.
fn settle(step: Step, kept: &mut Vec<Event>) -> Option<Result<()>> {
    match step {
        Step::Done => Some(Ok(())),
        Step::DoneKeeping(event) => {
            kept.push(event);
            Some(Ok(()))
        }
        Step::Keep(event) => {
            kept.push(event);
            None
        }
        Step::Next => None,
        Step::Fail(e) => Some(Err(e)),
    }
}

/// The error a REJ received by `op` stands for.
fn rejected(op: &'static str, reason: RejectReason, ari: Vec<u8>, pd: Vec<u8>) -> Error {
    Error::Rejected {
        op,
        reason,
        ari,
        private_data: pd,
    }
}

/// A CM id of a device with nothing sent yet (IDLE, `ib_create_cm_id`),
/// from [`Device::create_id`](super::Device::create_id):
/// [`request`](IdleId::request) sends its REQ. Creating ids ahead keeps
/// their cost out of the connect; [`Device::request`](super::Device::request)
/// does both at once. Dropping it destroys the id (nothing to send).
pub struct IdleId {
    handle: IdHandle,
}

impl IdleId {
    pub(super) fn new(handle: IdHandle) -> Self {
        Self { handle }
    }

    /// The id's state (IDLE).
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// Sends the REQ, as [`Device::request`](super::Device::request); on a
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
    pub(super) fn new(handle: IdHandle, rtu_private_data: Vec<u8>) -> Self {
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
    pub(super) async fn wait_reply_async(self) -> Result<ReceivedReply> {
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
    pub(super) fn confirm_waiting(self, private_data: &[u8], wait: Duration) -> Result<Connection> {
        let op = "ReceivedReply::confirm";
        if let Err(refused) = self.send_rtu(op, private_data) {
            let why = self.peer_gave_up().then(|| self.why_gone(op, wait));
            return Err(why.flatten().unwrap_or(refused));
        }
        Ok(self.confirmed())
    }

    /// [`confirm`](ReceivedReply::confirm) for the async API.
    pub(super) async fn confirm_async(self, private_data: &[u8]) -> Result<Connection> {
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
    pub(super) fn confirm_with_request_data(mut self) -> Result<Connection> {
        let data = std::mem::take(&mut self.rtu_private_data);
        self.confirm(&data)
    }

    /// [`confirm_async`](ReceivedReply::confirm_async) with the RTU data of
    /// the request.
    pub(super) async fn confirm_with_request_data_async(mut self) -> Result<Connection> {
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

/// Which side of the connection this is.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Side {
    /// The side that sent the REQ.
    Active,
    /// The side that accepted it.
    Passive,
}

/// An established connection (or one being disconnected). Its events come
/// from [`next_event`](Connection::next_event) in order, the last one
/// [`Event::TimewaitExit`].
///
/// Dropping it does what `ib_destroy_cm_id` does in its state, at once: a
/// DREQ from ESTABLISHED, a DREP without private data from DREQ_RCVD,
/// nothing more from DREQ_SENT or TIMEWAIT. It never waits for the peer.
///
/// ```
/// use ib_cm::{ConnectRequest, Device, Event, Reply};
///
/// let a = Device::open("loop0")?;
/// let b = Device::open("loop1")?;
/// let listener = b.listen(0x5678)?;
/// let path = a.path_to(1, b.gid(1, 0)?)?;
///
/// std::thread::scope(|s| {
///     // B: accept, then answer A's DREQ with 224 bytes of DREP data.
///     let server = s.spawn(|| -> ib_cm::Result<()> {
///         let mut conn = listener.accept()?.accept(Reply::new(0x22))?;
///         match conn.next_event()? {
///             Event::DreqReceived { private_data } => {
///                 assert_eq!(private_data, vec![0xd1; 220]);
///                 conn.reply_disconnect(&[0xd2; 224])?;
///             }
///             other => panic!("{other:?}"),
///         }
///         conn.wait_closed(None)?; // timewait over
///         Ok(())
///     });
///     let mut conn = a.connect(ConnectRequest::builder(path, 0x5678, 0x11).build())?;
///     assert_eq!(conn.rep().unwrap().remote_qpn, 0x22);
///     // DREQ with 220 bytes; the peer's DREP data comes back.
///     assert_eq!(conn.disconnect(&[0xd1; 220])?, vec![0xd2; 224]);
///     server.join().unwrap()
/// })?;
/// # Ok::<(), ib_cm::Error>(())
/// ```
pub struct Connection {
    handle: IdHandle,
    side: Side,
    pub(super) req: Option<Box<ReqInfo>>,
    pub(super) rep: Option<Box<RepInfo>>,
    pub(super) rtu_private_data: Option<Vec<u8>>,
}

impl Connection {
    pub(super) fn new(handle: IdHandle, side: Side) -> Self {
        Self {
            handle,
            side,
            req: None,
            rep: None,
            rtu_private_data: None,
        }
    }

    /// Which side this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The id's state: ESTABLISHED, then DREQ_SENT or DREQ_RCVD, TIMEWAIT,
    /// IDLE.
    pub fn state(&self) -> State {
        self.handle.state()
    }

    /// The attributes that move the QP to `state` for this connection
    /// (`ib_cm_init_qp_attr`); `EINVAL` in a state that has none yet.
    pub fn qp_attributes(&self, state: QpState) -> Result<QpAttributes> {
        qp_attributes("Connection::qp_attributes", &self.handle.id, state)
    }

    /// This side's local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        u32::from_be(self.handle.id.public.local_id.load(Ordering::Relaxed))
    }

    /// The peer's communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        u32::from_be(self.handle.id.public.remote_id.load(Ordering::Relaxed))
    }

    /// The REP this side received (active side).
    pub fn rep(&self) -> Option<&RepInfo> {
        self.rep.as_deref()
    }

    /// The REQ this side accepted (passive side).
    pub fn req(&self) -> Option<&ReqInfo> {
        self.req.as_deref()
    }

    /// The RTU's private data (224 bytes), on the passive side when the RTU
    /// established the connection.
    pub fn rtu_private_data(&self) -> Option<&[u8]> {
        self.rtu_private_data.as_deref()
    }

    /// The peer's QP number.
    pub fn remote_qpn(&self) -> u32 {
        match (&self.rep, &self.req) {
            (Some(rep), _) => rep.remote_qpn,
            (None, Some(req)) => req.remote_qpn,
            (None, None) => 0,
        }
    }

    /// Sends a DREQ with `private_data` (up to 220 bytes) and waits for the
    /// peer's DREP: its private data (224 bytes). `EINVAL` for more data, or
    /// when not ESTABLISHED (as `ib_send_cm_dreq`).
    ///
    /// A DREQ nobody answers ends in [`Error::NoAnswer`] after the
    /// retransmissions ([`set_disconnect_timeout`](Connection::set_disconnect_timeout)
    /// bounds them); a DREQ of the peer that crossed ours is answered and
    /// ends in [`Error::DisconnectCrossed`], also when it came before this
    /// call. Either way the connection is in timewait, and
    /// [`Event::TimewaitExit`] follows.
    pub fn disconnect(&mut self, private_data: &[u8]) -> Result<Vec<u8>> {
        let op = "Connection::disconnect";
        if let Err(refused) = call(op, || cm::send_dreq(&self.handle.id, Some(private_data))) {
            return Err(self.peer_disconnected_first(op).unwrap_or(refused));
        }
        let mut drep = Vec::new();
        let id = &self.handle.id;
        take_until(&self.handle.events, op, None, |event| {
            disconnect_step(op, id, event, &mut drep)
        })?;
        Ok(drep)
    }

    /// [`disconnect`](Connection::disconnect) for the async API.
    /// `peer_dreq_taken`: the user has the peer's DREQ event already, so a
    /// refusal in DREQ_RCVD is the answer (there is nothing to wait for).
    pub(super) async fn disconnect_async(
        &mut self,
        private_data: &[u8],
        peer_dreq_taken: bool,
    ) -> Result<Vec<u8>> {
        let op = "Connection::disconnect";
        if let Err(refused) = call(op, || cm::send_dreq(&self.handle.id, Some(private_data))) {
            if peer_dreq_taken || self.handle.state() != State::DreqRcvd {
                return Err(refused);
            }
            // The peer's DREQ came first; its event is on its way (the
            // engine changed the state before it queued the event).
            let mut crossed = None;
            take_until_async(&self.handle.events, op, |event| match event {
                Event::DreqReceived { private_data } => {
                    crossed = Some(private_data);
                    Step::Done
                }
                other => Step::Keep(other),
            })
            .await?;
            let private_data = crossed.unwrap_or_default();
            let _ = cm::send_drep(&self.handle.id, None);
            return Err(Error::DisconnectCrossed { op, private_data });
        }
        let mut drep = Vec::new();
        let id = &self.handle.id;
        take_until_async(&self.handle.events, op, |event| {
            disconnect_step(op, id, event, &mut drep)
        })
        .await?;
        Ok(drep)
    }

    /// The DREQ that made a DREQ of ours come too late (DREQ_RCVD: the
    /// peer's DREQ came first), answered as one that crossed ours; `None`
    /// in any other case. The engine changed the state before it queued the
    /// event: it is milliseconds away at most.
    fn peer_disconnected_first(&self, op: &'static str) -> Option<Error> {
        if self.handle.state() != State::DreqRcvd {
            return None;
        }
        let mut crossed = None;
        let _ = take_until(
            &self.handle.events,
            op,
            Some(PEER_DREQ_WAIT),
            |event| match event {
                Event::DreqReceived { private_data } => {
                    crossed = Some(private_data);
                    Step::Done
                }
                other => Step::Keep(other),
            },
        );
        let private_data = crossed?;
        let _ = cm::send_drep(&self.handle.id, None);
        Some(Error::DisconnectCrossed { op, private_data })
    }

    /// Sends a DREQ with `private_data` (up to 220 bytes) without waiting:
    /// the DREP (or the error) comes as an event. `EINVAL` for more data or
    /// when not ESTABLISHED.
    pub fn send_disconnect(&self, private_data: &[u8]) -> Result<()> {
        call("Connection::send_disconnect", || {
            cm::send_dreq(&self.handle.id, Some(private_data))
        })
    }

    /// Answers the peer's DREQ ([`Event::DreqReceived`]) with a DREP
    /// carrying `private_data` (up to 224 bytes): timewait. `EINVAL` for
    /// more data or in any state but DREQ_RCVD (as `ib_send_cm_drep`). The
    /// data is kept: a DREQ the peer sends again (our DREP was lost) gets
    /// the same DREP.
    pub fn reply_disconnect(&self, private_data: &[u8]) -> Result<()> {
        call("Connection::reply_disconnect", || {
            cm::send_drep(&self.handle.id, Some(private_data))
        })
    }

    /// Bounds this connection's future DREQs (beyond the kernel): resent
    /// every `interval` (1 ms to 10 min) up to `max_retries` times, so that
    /// a DREQ nobody answers fails after `(1 + max_retries) × interval`
    /// instead of the values from connection setup.
    pub fn set_disconnect_timeout(&self, interval: Duration, max_retries: u8) -> Result<()> {
        let ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        call("Connection::set_disconnect_timeout", || {
            cm::set_disconnect_timeout(&self.handle.id, ms, max_retries)
        })
    }

    /// The next event, waiting as long as it takes; [`Error::Closed`] after
    /// the last one ([`Event::TimewaitExit`]).
    pub fn next_event(&mut self) -> Result<Event> {
        self.next("Connection::next_event", None)
    }

    /// The next event, waiting `timeout` at most ([`Error::TimedOut`]).
    pub fn next_event_timeout(&mut self, timeout: Duration) -> Result<Event> {
        self.next("Connection::next_event_timeout", Some(timeout))
    }

    /// The next event if one is waiting.
    pub fn try_next_event(&mut self) -> Option<Event> {
        self.handle.events.try_pop()
    }

    fn next(&mut self, op: &'static str, timeout: Option<Duration>) -> Result<Event> {
        match self.handle.events.pop(timeout.map(|t| Instant::now() + t)) {
            Popped::Item(event) => Ok(event),
            Popped::TimedOut => Err(Error::TimedOut {
                op,
                after: timeout.unwrap_or_default(),
            }),
            Popped::Finished => Err(Error::Closed { op }),
            Popped::WouldDeadlock => Err(would_deadlock(op)),
        }
    }

    /// Waits (`timeout` at most, if given) for the end of timewait, the
    /// connection's last event; returns the events that came before it (on
    /// an error they stay for [`next_event`](Connection::next_event)).
    pub fn wait_closed(&mut self, timeout: Option<Duration>) -> Result<Vec<Event>> {
        let op = "Connection::wait_closed";
        take_until(&self.handle.events, op, timeout, |event| match event {
            Event::TimewaitExit => Step::Done,
            other => Step::Keep(other),
        })?;
        // Nothing follows the end of timewait: what is queued came before.
        Ok(std::iter::from_fn(|| self.handle.events.try_pop()).collect())
    }

    /// [`next_event`](Connection::next_event) for the async API.
    pub(super) async fn next_event_async(&mut self) -> Result<Event> {
        let mut waiter = self.handle.events.waiter();
        match std::future::poll_fn(|cx| waiter.poll_pop(cx)).await {
            Some(event) => Ok(event),
            None => Err(Error::Closed {
                op: "Connection::next_event",
            }),
        }
    }

    /// [`wait_closed`](Connection::wait_closed) for the async API, without
    /// a bound (a runtime's timeout wraps it).
    pub(super) async fn wait_closed_async(&mut self) -> Result<Vec<Event>> {
        let op = "Connection::wait_closed";
        take_until_async(&self.handle.events, op, |event| match event {
            Event::TimewaitExit => Step::Done,
            other => Step::Keep(other),
        })
        .await?;
        Ok(std::iter::from_fn(|| self.handle.events.try_pop()).collect())
    }
}

/// What waiting for the DREP does with `event` (the DREP's data goes to
/// `drep`); a DREQ of the peer that crossed ours is answered, as the
/// kernel's destroy would.
fn disconnect_step(op: &'static str, id: &Arc<CmIdPriv>, event: Event, drep: &mut Vec<u8>) -> Step {
    match event {
        Event::DrepReceived { private_data } => {
            *drep = private_data;
            Step::Done
        }
        Event::DreqError { status } => Step::Fail(Error::NoAnswer { op, status }),
        Event::RejReceived {
            reason,
            ari,
            private_data,
        } => Step::Fail(rejected(op, reason, ari, private_data)),
        Event::DreqReceived { private_data } => {
            let _ = cm::send_drep(id, None);
            Step::Fail(Error::DisconnectCrossed { op, private_data })
        }
        other => Step::Keep(other),
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.handle.id)
            .field("side", &self.side)
            .finish()
    }
}
