//! The async API's SIDR: the blocking API's values, whose waits are
//! futures. A received request has nothing to wait for: it is the blocking
//! API's [`IncomingSidrRequest`].

use crate::api::{IncomingSidrRequest, Result, SidrReply, State};

/// A SIDR listener, as [`crate::SidrListener`], whose
/// [`accept`](SidrListener::accept) is a future. Dropping it stops
/// listening and answers the requests nobody took with `IB_SIDR_REJECT`
/// (one not yet queued then is left to the peer's resend, as for
/// [`crate::SidrListener`]).
#[derive(Debug)]
pub struct SidrListener(pub(super) crate::SidrListener);

impl SidrListener {
    /// The service ID listened to (host order).
    pub fn service_id(&self) -> u64 {
        self.0.service_id()
    }

    /// The next SIDR request. Cancel-safe: a request is taken only when the
    /// future returns it, so one dropped before (in a `select!`) leaves the
    /// request for the next call.
    pub async fn accept(&self) -> Result<IncomingSidrRequest> {
        self.0.accept_async().await
    }

    /// The next SIDR request if one is waiting.
    pub fn try_accept(&self) -> Option<IncomingSidrRequest> {
        self.0.try_accept()
    }

    /// How many SIDR requests wait to be accepted.
    pub fn pending(&self) -> usize {
        self.0.pending()
    }
}

/// A SIDR_REQ sent, as [`crate::OutgoingSidrRequest`]; dropping it cancels
/// the request (nothing is sent to the peer).
#[derive(Debug)]
pub struct OutgoingSidrRequest(pub(super) crate::OutgoingSidrRequest);

impl OutgoingSidrRequest {
    /// The id's state (SIDR_REQ_SENT, IDLE once answered).
    pub fn state(&self) -> State {
        self.0.state()
    }

    /// Waits for the peer's SIDR_REP, whatever its status, as
    /// [`crate::OutgoingSidrRequest::wait`]. Dropping the future before it
    /// is done cancels the request.
    pub async fn wait(self) -> Result<SidrReply> {
        self.0.wait_async().await
    }
}
