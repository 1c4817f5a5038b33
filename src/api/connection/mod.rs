//! The active side's request, and a connection of either side.

use std::task::Poll;
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::event::Event;
use super::queue::{Popped, Queue, would_deadlock};
use super::types::RejectReason;

mod established;
mod request;

pub use established::{Connection, Side};
pub use request::{IdleId, OutgoingRequest, ReceivedReply};

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
