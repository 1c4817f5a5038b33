//! Events as the engine produces them; `ffi` turns each into a `struct
//! ib_cm_event` for the C handler.

use std::sync::Arc;

use super::id::CmIdPriv;
use super::path::Path;
use crate::abi::{ib_cm_event_type, ib_qp_type, ib_wc_status};
use crate::wire::Mad;

/// One event for one cm_id.
pub struct CmEvent {
    pub event: ib_cm_event_type,
    pub param: EventParam,
    /// The received MAD, when the event came from one: `private_data` points
    /// into it, as in the kernel.
    pub mad: Option<Arc<Mad>>,
    /// The private data's byte range in `mad`.
    pub private_data: Option<std::ops::Range<usize>>,
}

impl CmEvent {
    /// An event without parameters or private data.
    pub fn bare(event: ib_cm_event_type) -> Self {
        Self {
            event,
            param: EventParam::None,
            mad: None,
            private_data: None,
        }
    }

    /// An event that carries the private data of `mad` at `range`.
    pub fn with_private_data(
        event: ib_cm_event_type,
        param: EventParam,
        mad: Arc<Mad>,
        range: std::ops::Range<usize>,
    ) -> Self {
        Self {
            event,
            param,
            mad: Some(mad),
            private_data: Some(range),
        }
    }

    /// The private data, if any.
    pub fn private_data(&self) -> Option<&[u8]> {
        Some(&self.mad.as_ref()?[self.private_data.clone()?])
    }
}

/// `ib_cm_event.param`, for the events that carry one.
pub enum EventParam {
    None,
    /// `send_status` of the `*_ERROR` events.
    SendStatus(ib_wc_status),
    ReqRcvd(Box<ReqRcvd>),
    RepRcvd(RepRcvd),
    RejRcvd(RejRcvd),
    MraRcvd {
        service_timeout: u8,
    },
    /// `lap_rcvd.alternate_path`.
    LapRcvd(Box<Path>),
    /// `struct ib_cm_apr_event_param`: the status as the peer sent it, the
    /// information a range of the event's MAD.
    AprRcvd {
        ap_status: u8,
        info: std::ops::Range<usize>,
    },
    SidrReqRcvd(SidrReqRcvd),
    SidrRepRcvd(SidrRepRcvd),
}

/// `struct ib_cm_sidr_req_event_param`.
pub struct SidrReqRcvd {
    pub listen_id: Arc<CmIdPriv>,
    pub service_id: u64,
    pub port: u8,
    pub bth_pkey: u16,
    pub pkey: u16,
}

/// `struct ib_cm_sidr_rep_event_param`: the info is a range of the event's MAD.
pub struct SidrRepRcvd {
    pub status: u8,
    pub qkey: u32,
    pub qpn: u32,
    pub info: std::ops::Range<usize>,
}

/// `struct ib_cm_req_event_param`, with the kernel's swaps already made
/// (our responder resources are the peer's initiator depth, …).
pub struct ReqRcvd {
    pub listen_id: Arc<CmIdPriv>,
    pub bth_pkey: u16,
    pub port: u8,
    pub primary_path: Path,
    pub alternate_path: Option<Path>,
    pub remote_ca_guid: u64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub qp_type: ib_qp_type,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub local_cm_response_timeout: u8,
    pub flow_control: bool,
    pub remote_cm_response_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub ece: (u32, u32),
}

/// `struct ib_cm_rep_event_param`, swaps made.
pub struct RepRcvd {
    pub remote_ca_guid: u64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub ece: (u32, u32),
}

/// `struct ib_cm_rej_event_param`: the ARI is a range of the event's MAD.
pub struct RejRcvd {
    pub reason: u16,
    pub ari: std::ops::Range<usize>,
}
