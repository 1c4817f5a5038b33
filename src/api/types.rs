//! The small value types of the API: GIDs, paths, states, reasons.

use std::fmt;
use std::net::Ipv6Addr;

use crate::abi::{ib_cm_state, ib_wc_status};
use crate::cm::path::Path as EnginePath;

/// A port's global identifier: 16 bytes, shown as an IPv6 address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv6Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Self {
        Self(raw)
    }
}

/// A path between two ports (the fields of the kernel's `struct
/// sa_path_rec` the CM uses), from [`Device::path_to`](super::Device::path_to)
/// or an event. The setters change what a request will carry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Path(pub(crate) EnginePath);

impl Path {
    /// The source port's GID.
    pub fn sgid(&self) -> Gid {
        Gid(self.0.sgid)
    }

    /// The destination port's GID.
    pub fn dgid(&self) -> Gid {
        Gid(self.0.dgid)
    }

    /// The source LID (0 on RoCE).
    pub fn slid(&self) -> u16 {
        self.0.slid
    }

    /// The destination LID (0 on RoCE).
    pub fn dlid(&self) -> u16 {
        self.0.dlid
    }

    /// The partition key.
    pub fn pkey(&self) -> u16 {
        self.0.pkey
    }

    /// The path MTU (`enum ibv_mtu`: 1 = 256 bytes … 5 = 4096).
    pub fn mtu(&self) -> u8 {
        self.0.mtu
    }

    /// The service level.
    pub fn sl(&self) -> u8 {
        self.0.sl
    }

    /// The packet lifetime, an IBA time exponent (4.096 µs · 2^t).
    pub fn packet_life_time(&self) -> u8 {
        self.0.packet_life_time
    }

    /// Sets the packet lifetime: the CM's retransmission intervals and the
    /// length of timewait grow with it.
    pub fn set_packet_life_time(&mut self, t: u8) -> &mut Self {
        self.0.packet_life_time = t;
        self
    }

    /// Sets the service level.
    pub fn set_sl(&mut self, sl: u8) -> &mut Self {
        self.0.sl = sl;
        self
    }

    /// Sets the flow label (20 bits).
    pub fn set_flow_label(&mut self, flow_label: u32) -> &mut Self {
        self.0.flow_label = flow_label;
        self
    }
}

/// The state of a CM id (the kernel's `enum ib_cm_state`), for looking, not
/// steering: the calls of this API move it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[non_exhaustive]
pub enum State {
    /// Nothing in progress: before a request, after timewait, after a REJ.
    Idle,
    /// A listener.
    Listen,
    /// A REQ was sent, no REP yet.
    ReqSent,
    /// A REQ was received and not yet answered.
    ReqRcvd,
    /// An MRA was sent for a received REQ.
    MraReqSent,
    /// The peer sent an MRA for our REQ.
    MraReqRcvd,
    /// A REP was sent, no RTU yet.
    RepSent,
    /// A REP was received, no RTU sent yet.
    RepRcvd,
    /// An MRA was sent for a received REP.
    MraRepSent,
    /// The peer sent an MRA for our REP.
    MraRepRcvd,
    /// Connected.
    Established,
    /// A DREQ was sent, no DREP yet.
    DreqSent,
    /// A DREQ was received and not yet answered.
    DreqRcvd,
    /// Disconnected; the connection's identifiers are held for a while.
    Timewait,
    /// A SIDR_REQ was sent.
    SidrReqSent,
    /// A SIDR_REQ was received and not yet answered.
    SidrReqRcvd,
}

impl From<ib_cm_state> for State {
    fn from(s: ib_cm_state) -> Self {
        use ib_cm_state::*;
        match s {
            IB_CM_IDLE => State::Idle,
            IB_CM_LISTEN => State::Listen,
            IB_CM_REQ_SENT => State::ReqSent,
            IB_CM_REQ_RCVD => State::ReqRcvd,
            IB_CM_MRA_REQ_SENT => State::MraReqSent,
            IB_CM_MRA_REQ_RCVD => State::MraReqRcvd,
            IB_CM_REP_SENT => State::RepSent,
            IB_CM_REP_RCVD => State::RepRcvd,
            IB_CM_MRA_REP_SENT => State::MraRepSent,
            IB_CM_MRA_REP_RCVD => State::MraRepRcvd,
            IB_CM_ESTABLISHED => State::Established,
            IB_CM_DREQ_SENT => State::DreqSent,
            IB_CM_DREQ_RCVD => State::DreqRcvd,
            IB_CM_TIMEWAIT => State::Timewait,
            IB_CM_SIDR_REQ_SENT => State::SidrReqSent,
            IB_CM_SIDR_REQ_RCVD => State::SidrReqRcvd,
        }
    }
}

/// A REJ's reason (`enum ib_cm_rej_reason`): a 16-bit wire value, kept as
/// sent, with the kernel's names for the values it defines.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejectReason(pub u16);

impl RejectReason {
    /// `IB_CM_REJ_NO_QP`.
    pub const NO_QP: Self = Self(1);
    /// `IB_CM_REJ_NO_RESOURCES`.
    pub const NO_RESOURCES: Self = Self(3);
    /// `IB_CM_REJ_TIMEOUT`: the ARI is the rejecting side's node GUID.
    pub const TIMEOUT: Self = Self(4);
    /// `IB_CM_REJ_INVALID_SERVICE_ID`: nobody listens.
    pub const INVALID_SERVICE_ID: Self = Self(8);
    /// `IB_CM_REJ_STALE_CONN`.
    pub const STALE_CONN: Self = Self(10);
    /// `IB_CM_REJ_CONSUMER_DEFINED`: the peer's user (or its destroyed id).
    pub const CONSUMER_DEFINED: Self = Self(28);

    /// The kernel's text for the reason (`ibcm_reject_msg`).
    pub fn message(self) -> &'static str {
        const STRS: [&str; 36] = [
            "unrecognized reason",
            "no QP",
            "no EEC",
            "no resources",
            "timeout",
            "unsupported",
            "invalid comm ID",
            "invalid comm instance",
            "invalid service ID",
            "invalid transport type",
            "stale conn",
            "RDC not exist",
            "invalid GID",
            "invalid LID",
            "invalid SL",
            "invalid traffic class",
            "invalid hop limit",
            "invalid packet rate",
            "invalid alt GID",
            "invalid alt LID",
            "invalid alt SL",
            "invalid alt traffic class",
            "invalid alt hop limit",
            "invalid alt packet rate",
            "port CM redirect",
            "port redirect",
            "invalid MTU",
            "insufficient resp resources",
            "consumer defined",
            "invalid RNR retry",
            "duplicate local comm ID",
            "invalid class version",
            "invalid flow label",
            "invalid alt flow label",
            "unrecognized reason",
            "vendor option is not supported",
        ];
        STRS.get(usize::from(self.0)).copied().unwrap_or(STRS[0])
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message(), self.0)
    }
}

impl fmt::Debug for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RejectReason({}: {})", self.0, self.message())
    }
}

/// How a MAD the CM kept sending ended without an answer (the
/// `send_status` of the kernel's `*_ERROR` events).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[non_exhaustive]
pub enum SendStatus {
    /// Sent `1 + max_cm_retries` times, never answered
    /// (`IB_WC_RESP_TIMEOUT_ERR`).
    ResponseTimeout,
    /// The way to the wire went away (`IB_WC_WR_FLUSH_ERR`: the MAD switch
    /// daemon died).
    Flushed,
    /// Another work completion status, by its `enum ib_wc_status` value.
    Other(i32),
}

impl From<ib_wc_status> for SendStatus {
    fn from(s: ib_wc_status) -> Self {
        match s {
            ib_wc_status::IB_WC_RESP_TIMEOUT_ERR => SendStatus::ResponseTimeout,
            ib_wc_status::IB_WC_WR_FLUSH_ERR => SendStatus::Flushed,
            other => SendStatus::Other(other as i32),
        }
    }
}

/// The QP type a connection request is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, Default)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable connected (the default).
    #[default]
    Rc,
    /// Unreliable connected.
    Uc,
    /// The initiator side of an XRC connection.
    XrcIni,
    /// The target side of an XRC connection (what a request for an
    /// [`XrcIni`](QpType::XrcIni) QP arrives as).
    XrcTgt,
    /// Another `enum ib_qp_type` value, as received.
    Other(i32),
}

impl QpType {
    pub(crate) fn to_raw(self) -> i32 {
        use crate::abi::ib_qp_type::*;
        match self {
            QpType::Rc => IB_QPT_RC as i32,
            QpType::Uc => IB_QPT_UC as i32,
            QpType::XrcIni => IB_QPT_XRC_INI as i32,
            QpType::XrcTgt => IB_QPT_XRC_TGT as i32,
            QpType::Other(v) => v,
        }
    }

    pub(crate) fn from_raw(v: i32) -> Self {
        use crate::abi::ib_qp_type::*;
        match v {
            x if x == IB_QPT_RC as i32 => QpType::Rc,
            x if x == IB_QPT_UC as i32 => QpType::Uc,
            x if x == IB_QPT_XRC_INI as i32 => QpType::XrcIni,
            x if x == IB_QPT_XRC_TGT as i32 => QpType::XrcTgt,
            other => QpType::Other(other),
        }
    }
}
