//! A connection of either side: its events, its disconnect, its timewait.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{PEER_DREQ_WAIT, Step, rejected, take_until, take_until_async};
use crate::api::error::{Error, Result, call};
use crate::api::event::{Event, RepInfo, ReqInfo};
use crate::api::handle::IdHandle;
use crate::api::qp::{QpAttributes, QpState, qp_attributes};
use crate::api::queue::{Popped, would_deadlock};
use crate::api::types::State;
use crate::cm;
use crate::cm::id::CmIdPriv;

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
    pub(in crate::api) req: Option<Box<ReqInfo>>,
    pub(in crate::api) rep: Option<Box<RepInfo>>,
    pub(in crate::api) rtu_private_data: Option<Vec<u8>>,
}

impl Connection {
    pub(in crate::api) fn new(handle: IdHandle, side: Side) -> Self {
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
    pub(in crate::api) async fn disconnect_async(
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
    pub(in crate::api) async fn next_event_async(&mut self) -> Result<Event> {
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
    pub(in crate::api) async fn wait_closed_async(&mut self) -> Result<Vec<Event>> {
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
