//! Typed events: each variant carries its own fields, and its private data
//! as the bytes the message carried (a CM message has no length for it: it
//! is the message's whole private data field, 220 bytes for a DREQ, 224
//! for a DREP, ...).

use crate::abi::ib_cm_event_type::{self, *};
use crate::cm::event::{CmEvent, EventParam, RepRcvd, ReqRcvd};

use super::types::{Path, QpType, RejectReason, SendStatus};

/// An event of a connection (or of a request on its way to one), in the
/// order the CM produced them. A connection's last event is
/// [`Event::TimewaitExit`].
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Event {
    /// The peer's REP (active side); `connect` takes it.
    RepReceived(Box<RepInfo>),
    /// The peer's RTU (passive side): established; `accept` takes it.
    RtuReceived {
        /// The RTU's private data (224 bytes).
        private_data: Vec<u8>,
    },
    /// Established by [`SentReply::notify_established`](super::SentReply::notify_established)
    /// before the RTU came (`IB_CM_USER_ESTABLISHED`).
    UserEstablished,
    /// The REQ was never answered.
    ReqError {
        /// How its last send ended.
        status: SendStatus,
    },
    /// The REP was never answered.
    RepError {
        /// How its last send ended.
        status: SendStatus,
    },
    /// The DREQ was never answered; the connection is in timewait.
    DreqError {
        /// How its last send ended.
        status: SendStatus,
    },
    /// The peer asks to disconnect: answer with
    /// [`Connection::reply_disconnect`](super::Connection::reply_disconnect)
    /// (dropping the connection answers without private data).
    DreqReceived {
        /// The DREQ's private data (220 bytes).
        private_data: Vec<u8>,
    },
    /// The peer answered our DREQ; the connection is in timewait.
    DrepReceived {
        /// The DREP's private data (224 bytes).
        private_data: Vec<u8>,
    },
    /// Timewait is over: the connection's last event.
    TimewaitExit,
    /// The peer needs more time to answer.
    MraReceived {
        /// How much longer it needs (an IBA time exponent).
        service_timeout: u8,
        /// The MRA's private data (222 bytes).
        private_data: Vec<u8>,
    },
    /// The peer rejected the connection.
    RejReceived {
        /// Why.
        reason: RejectReason,
        /// The additional rejection information, as long as the REJ said.
        ari: Vec<u8>,
        /// The REJ's private data (148 bytes).
        private_data: Vec<u8>,
    },
    /// The peer's LAP never got an answer.
    LapError {
        /// How the last send ended.
        status: SendStatus,
    },
    /// The peer proposes an alternate path (LAP).
    LapReceived {
        /// The path.
        alternate_path: Path,
        /// The LAP's private data (168 bytes).
        private_data: Vec<u8>,
    },
    /// The peer's answer to a LAP (APR).
    AprReceived {
        /// The APR status as the peer sent it (`enum ib_cm_apr_status`).
        status: u8,
        /// Its additional information, as long as the APR said.
        info: Vec<u8>,
        /// The APR's private data (148 bytes).
        private_data: Vec<u8>,
    },
}

/// The fields of a received REQ (the kernel's `struct
/// ib_cm_req_event_param`, with its swaps made: our responder resources are
/// the peer's initiator depth).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct ReqInfo {
    /// The service ID the REQ was for (host order).
    pub service_id: u64,
    /// The port it arrived on.
    pub port: u8,
    /// The P_Key of the packet.
    pub bth_pkey: u16,
    /// The primary path, as seen from this side.
    pub primary_path: Path,
    /// The alternate path, if the REQ had one.
    pub alternate_path: Option<Path>,
    /// The peer's node GUID.
    pub remote_ca_guid: u64,
    /// The peer's Q_Key.
    pub remote_qkey: u32,
    /// The peer's QP number.
    pub remote_qpn: u32,
    /// The QP type this side needs.
    pub qp_type: QpType,
    /// The REQ's starting PSN: as in the kernel, the PSN this side's QP
    /// sends from (its RTS `sq_psn`).
    pub starting_psn: u32,
    /// Responder resources this side may offer.
    pub responder_resources: u8,
    /// Initiator depth this side may use.
    pub initiator_depth: u8,
    /// How long the peer may take to answer (IBA time exponent).
    pub local_cm_response_timeout: u8,
    /// Whether the peer's QP does end-to-end flow control.
    pub flow_control: bool,
    /// How long the peer waits for this side's answer (IBA time exponent).
    pub remote_cm_response_timeout: u8,
    /// The transport retry count.
    pub retry_count: u8,
    /// The RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether the peer's QP has an SRQ.
    pub srq: bool,
    /// The peer's enhanced connection establishment (vendor ID, attribute
    /// modifier).
    pub ece: (u32, u32),
    /// The REQ's private data (92 bytes).
    pub private_data: Vec<u8>,
}

/// The fields of a received REP (the kernel's `struct
/// ib_cm_rep_event_param`, swaps made).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct RepInfo {
    /// The peer's node GUID.
    pub remote_ca_guid: u64,
    /// The peer's Q_Key.
    pub remote_qkey: u32,
    /// The peer's QP number.
    pub remote_qpn: u32,
    /// The REP's starting PSN: as in the kernel, the PSN this side's QP
    /// sends from (its RTS `sq_psn`).
    pub starting_psn: u32,
    /// Responder resources this side may offer.
    pub responder_resources: u8,
    /// Initiator depth this side may use.
    pub initiator_depth: u8,
    /// The peer's target ACK delay (IBA time exponent).
    pub target_ack_delay: u8,
    /// Whether the peer accepted the alternate path (0: yes).
    pub failover_accepted: u8,
    /// Whether the peer's QP does end-to-end flow control.
    pub flow_control: bool,
    /// The RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether the peer's QP has an SRQ.
    pub srq: bool,
    /// The peer's enhanced connection establishment (vendor ID, attribute
    /// modifier).
    pub ece: (u32, u32),
    /// The REP's private data (196 bytes).
    pub private_data: Vec<u8>,
}

/// The private data of `ev` (empty for an event without any).
fn private_data(ev: &CmEvent) -> Vec<u8> {
    ev.private_data().map(<[u8]>::to_vec).unwrap_or_default()
}

/// Bytes `range` of the event's MAD (an ARI, an APR's information).
pub(super) fn mad_bytes(ev: &CmEvent, range: &std::ops::Range<usize>) -> Vec<u8> {
    ev.mad
        .as_ref()
        .and_then(|m| m.get(range.clone()))
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

fn send_status(ev: &CmEvent) -> SendStatus {
    match ev.param {
        EventParam::SendStatus(s) => s.into(),
        _ => SendStatus::Other(-1),
    }
}

impl Event {
    /// The kernel's name of the event, without its `IB_CM_` prefix
    /// (`DREQ_RECEIVED`), as the library's log lines show it.
    pub fn kernel_name(&self) -> &'static str {
        match self {
            Event::RepReceived(_) => "REP_RECEIVED",
            Event::RtuReceived { .. } => "RTU_RECEIVED",
            Event::UserEstablished => "USER_ESTABLISHED",
            Event::ReqError { .. } => "REQ_ERROR",
            Event::RepError { .. } => "REP_ERROR",
            Event::DreqError { .. } => "DREQ_ERROR",
            Event::DreqReceived { .. } => "DREQ_RECEIVED",
            Event::DrepReceived { .. } => "DREP_RECEIVED",
            Event::TimewaitExit => "TIMEWAIT_EXIT",
            Event::MraReceived { .. } => "MRA_RECEIVED",
            Event::RejReceived { .. } => "REJ_RECEIVED",
            Event::LapError { .. } => "LAP_ERROR",
            Event::LapReceived { .. } => "LAP_RECEIVED",
            Event::AprReceived { .. } => "APR_RECEIVED",
        }
    }

    /// The event of a connection `ev` stands for; `None` for the events
    /// that go elsewhere (requests to a listener, SIDR).
    pub(super) fn from_engine(ev: &CmEvent) -> Option<Event> {
        let event: ib_cm_event_type = ev.event;
        Some(match (event, &ev.param) {
            (IB_CM_REP_RECEIVED, EventParam::RepRcvd(r)) => {
                Event::RepReceived(Box::new(RepInfo::new(r, private_data(ev))))
            }
            (IB_CM_RTU_RECEIVED, _) => Event::RtuReceived {
                private_data: private_data(ev),
            },
            (IB_CM_USER_ESTABLISHED, _) => Event::UserEstablished,
            (IB_CM_REQ_ERROR, _) => Event::ReqError {
                status: send_status(ev),
            },
            (IB_CM_REP_ERROR, _) => Event::RepError {
                status: send_status(ev),
            },
            (IB_CM_DREQ_ERROR, _) => Event::DreqError {
                status: send_status(ev),
            },
            (IB_CM_LAP_ERROR, _) => Event::LapError {
                status: send_status(ev),
            },
            (IB_CM_DREQ_RECEIVED, _) => Event::DreqReceived {
                private_data: private_data(ev),
            },
            (IB_CM_DREP_RECEIVED, _) => Event::DrepReceived {
                private_data: private_data(ev),
            },
            (IB_CM_TIMEWAIT_EXIT, _) => Event::TimewaitExit,
            (IB_CM_MRA_RECEIVED, EventParam::MraRcvd { service_timeout }) => Event::MraReceived {
                service_timeout: *service_timeout,
                private_data: private_data(ev),
            },
            (IB_CM_REJ_RECEIVED, EventParam::RejRcvd(r)) => Event::RejReceived {
                reason: RejectReason(r.reason),
                ari: mad_bytes(ev, &r.ari),
                private_data: private_data(ev),
            },
            (IB_CM_LAP_RECEIVED, EventParam::LapRcvd(path)) => Event::LapReceived {
                alternate_path: Path(**path),
                private_data: private_data(ev),
            },
            (IB_CM_APR_RECEIVED, EventParam::AprRcvd { ap_status, info }) => Event::AprReceived {
                status: *ap_status,
                info: mad_bytes(ev, info),
                private_data: private_data(ev),
            },
            _ => return None,
        })
    }
}

impl ReqInfo {
    pub(super) fn new(service_id: u64, r: &ReqRcvd, private_data: Vec<u8>) -> Self {
        Self {
            service_id,
            port: r.port,
            bth_pkey: r.bth_pkey,
            primary_path: Path(r.primary_path),
            alternate_path: r.alternate_path.map(Path),
            remote_ca_guid: r.remote_ca_guid,
            remote_qkey: r.remote_qkey,
            remote_qpn: r.remote_qpn,
            qp_type: QpType::from_raw(r.qp_type as i32),
            starting_psn: r.starting_psn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            local_cm_response_timeout: r.local_cm_response_timeout,
            flow_control: r.flow_control,
            remote_cm_response_timeout: r.remote_cm_response_timeout,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            ece: r.ece,
            private_data,
        }
    }
}

impl RepInfo {
    fn new(r: &RepRcvd, private_data: Vec<u8>) -> Self {
        Self {
            remote_ca_guid: r.remote_ca_guid,
            remote_qkey: r.remote_qkey,
            remote_qpn: r.remote_qpn,
            starting_psn: r.starting_psn,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            target_ack_delay: r.target_ack_delay,
            failover_accepted: r.failover_accepted,
            flow_control: r.flow_control,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            ece: r.ece,
            private_data,
        }
    }
}
