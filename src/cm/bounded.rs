//! `ibcm_set_disconnect_timeout()`: bounded disconnects, beyond the kernel.
//!
//! The kernel takes a DREQ's retransmission interval and retry count from
//! connection setup; with rdma_cm's defaults a DREQ to a dead peer is sent 16
//! times over about 66 s before `IB_CM_DREQ_ERROR`. This sets them per id.
//! Timewait is untouched: the id still enters it and still reports
//! `IB_CM_TIMEWAIT_EXIT` after the kernel's duration.

use std::sync::Arc;

use super::id::CmIdPriv;
use crate::errno::CmResult;
use crate::refusal::{Rule, invalid};

/// The longest retransmission interval accepted (10 minutes).
pub const MAX_DISCONNECT_TIMEOUT_MS: u32 = 600_000;

/// Sets the interval and retries of this id's future DREQs: a DREQ nobody
/// answers ends in `IB_CM_DREQ_ERROR` after `(1 + max_retries) × timeout_ms`.
/// A DREQ already outstanding keeps its schedule.
pub fn set_disconnect_timeout(id: &Arc<CmIdPriv>, timeout_ms: u32, max_retries: u8) -> CmResult {
    if timeout_ms == 0 || timeout_ms > MAX_DISCONNECT_TIMEOUT_MS {
        let rule = "is not 1 to 600000";
        return Err(invalid(Rule::value("timeout_ms", timeout_ms, rule)));
    }
    id.lock_live()?.inner.disconnect_timeout = Some((timeout_ms, max_retries));
    Ok(())
}
