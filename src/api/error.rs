//! The one error type of the API.

use std::time::Duration;

use super::event::Event;
use super::types::{RejectReason, SendStatus};
use crate::errno::Errno;
use crate::refusal::{self, Neg, Rule};

/// Why a call failed. Every variant has an errno ([`Error::errno`]); the
/// conversion to [`std::io::Error`] keeps its kind and this error inside
/// (`io_error.get_ref()` and `downcast_ref::<ib_cm::Error>()` give it back).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CM refused the call, as the C API would with `-errno`: `reason`
    /// names the rule the call broke, in the words of the C side's log line
    /// (`private_data_len 221 > 220`, `in REQ_SENT, needs ESTABLISHED`), or
    /// `failed` for an error from below (a send, the system).
    #[error("{op}: {reason} ({})", errno_name(.errno))]
    Refused {
        /// The call refused: `Connection::disconnect`, ...
        op: &'static str,
        /// The positive errno the C API returns negated (`libc::EINVAL`).
        errno: i32,
        /// Why.
        reason: String,
    },
    /// The peer answered with a REJ.
    #[error("{op}: rejected by the peer: {reason}")]
    Rejected {
        /// The call whose request was rejected.
        op: &'static str,
        /// The REJ's reason.
        reason: RejectReason,
        /// Its additional rejection information (as long as the REJ said).
        ari: Vec<u8>,
        /// Its private data (148 bytes).
        private_data: Vec<u8>,
    },
    /// The CM sent its message `1 + max_cm_retries` times and the peer never
    /// answered (the kernel's `IB_CM_REQ_ERROR`, `REP_ERROR`, `DREQ_ERROR`).
    #[error("{op}: the peer did not answer ({status:?})")]
    NoAnswer {
        /// The call that waited.
        op: &'static str,
        /// How the last send ended.
        status: SendStatus,
    },
    /// The wait the caller bounded ended before anything came.
    #[error("{op}: nothing within {after:?}")]
    TimedOut {
        /// The call that waited.
        op: &'static str,
        /// The bound.
        after: Duration,
    },
    /// A DREQ of the peer crossed ours: it was answered with a DREP without
    /// private data, and no DREP will come for ours.
    #[error("{op}: the peer disconnected at the same time")]
    DisconnectCrossed {
        /// The call (`Connection::disconnect`).
        op: &'static str,
        /// The private data of the peer's DREQ (220 bytes).
        private_data: Vec<u8>,
    },
    /// The connection is over: its timewait ended, no event will come.
    #[error("{op}: the connection is over (its timewait ended)")]
    Closed {
        /// The call.
        op: &'static str,
    },
    /// An event the call cannot go on from (it is given here, not lost).
    #[error("{op}: unexpected {event:?}")]
    Unexpected {
        /// The call that waited.
        op: &'static str,
        /// What came instead.
        event: Box<Event>,
    },
}

/// What a call of this API returns.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The positive errno this error stands for: the C API's for a refused
    /// call; `ECONNREFUSED` for a REJ, `ETIMEDOUT` for no answer (or a wait
    /// that ended), `ECONNRESET` for a crossed DREQ, `ENOTCONN` after
    /// timewait, `EPROTO` for an unexpected event.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Refused { errno, .. } => *errno,
            Error::Rejected { .. } => libc::ECONNREFUSED,
            Error::NoAnswer { .. } | Error::TimedOut { .. } => libc::ETIMEDOUT,
            Error::DisconnectCrossed { .. } => libc::ECONNRESET,
            Error::Closed { .. } => libc::ENOTCONN,
            Error::Unexpected { .. } => libc::EPROTO,
        }
    }

    /// The refusal of `op` with `errno`, for `rule` (if the check named one).
    pub(super) fn refused(op: &'static str, errno: Errno, rule: Option<Rule>) -> Self {
        Error::Refused {
            op,
            errno: errno.0,
            reason: rule.map_or_else(|| "failed".to_owned(), |r| r.to_string()),
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = std::io::Error::from_raw_os_error(e.errno()).kind();
        std::io::Error::new(kind, e)
    }
}

/// `EINVAL`, the name the C side's log lines show (without their minus).
fn errno_name(errno: &i32) -> String {
    Neg(Errno(*errno))
        .to_string()
        .trim_start_matches('-')
        .to_owned()
}

/// Runs `f`, an engine call for `op`, turning a refusal into [`Error`] with
/// its rule.
pub(super) fn call<T>(op: &'static str, f: impl FnOnce() -> Result<T, Errno>) -> Result<T> {
    if in_forked_child() {
        let rule = Rule::Text("a forked child: the CM's threads are the parent's");
        return Err(Error::refused(op, crate::errno::EOWNERDEAD, Some(rule)));
    }
    refusal::for_call(f).map_err(|(errno, rule)| Error::refused(op, errno, rule))
}

/// True in a child forked from a process that had opened a device (the
/// C API's `-EOWNERDEAD` rule, `os::fork`): its worker and readers are the
/// parent's, and a lock they held stays held. Calls fail there with
/// `EOWNERDEAD`, waits end as closed, and drops do nothing.
pub(super) fn in_forked_child() -> bool {
    crate::os::fork::in_forked_child()
}

/// `ib_destroy_cm_id` for a value of the API that goes (nothing in a
/// forked child).
pub(super) fn destroy(id: &std::sync::Arc<crate::cm::id::CmIdPriv>) {
    if !in_forked_child() {
        crate::cm::destroy_id(id, 0);
    }
}
