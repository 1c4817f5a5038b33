//! The QP attributes of a connection (`ib_cm_init_qp_attr`), typed: a
//! field is `Some` exactly when its bit is in the mask the kernel returns.

use std::sync::Arc;

use super::error::{Result, call};
use super::types::Gid;
use crate::cm::id::CmIdPriv;
use crate::cm::qp_attr::{self, AhAttr, mask};
use crate::cm::{self, QpAttr};

/// The QP state to move a QP to.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum QpState {
    /// `IBV_QPS_INIT`: from REQ_SENT on.
    Init,
    /// `IBV_QPS_RTR`: once the peer's REQ or REP is in.
    Rtr,
    /// `IBV_QPS_RTS`: likewise; after a LAP, the RTS-to-RTS change to the
    /// alternate path.
    Rts,
}

/// An address (`struct ibv_ah_attr`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AddressVector {
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Static rate (`enum ibv_rate`).
    pub static_rate: u8,
    /// Whether packets carry a GRH (the fields below it).
    pub is_global: bool,
    /// The local port.
    pub port_num: u8,
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the source GID.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

impl From<AhAttr> for AddressVector {
    fn from(a: AhAttr) -> Self {
        Self {
            dlid: a.dlid,
            sl: a.sl,
            static_rate: a.static_rate,
            is_global: a.is_global,
            port_num: a.port_num,
            dgid: Gid(a.dgid),
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        }
    }
}

/// The alternate path of a QP (`IBV_QP_ALT_PATH`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AlternatePath {
    /// Its address.
    pub address: AddressVector,
    /// Its P_Key index.
    pub pkey_index: u16,
    /// Its port; `None` when the kernel leaves `alt_port_num` unwritten.
    pub port_num: Option<u8>,
    /// Its local ACK timeout.
    pub timeout: u8,
}

/// What `ibv_modify_qp` needs for one step of the connection, as the kernel
/// computes it: each field is `Some` exactly when the kernel sets it, and
/// [`mask`](QpAttributes::mask) is the `IBV_QP_*` mask to pass with them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct QpAttributes {
    /// The `IBV_QP_*` attribute mask.
    pub mask: u32,
    /// The state to move to (`None` for RTS to RTS after a LAP).
    pub state: Option<QpState>,
    /// `IBV_ACCESS_*` remote access flags.
    pub access_flags: Option<u32>,
    /// P_Key index.
    pub pkey_index: Option<u16>,
    /// Port.
    pub port_num: Option<u8>,
    /// The primary address.
    pub address: Option<AddressVector>,
    /// Path MTU (`enum ibv_mtu`).
    pub path_mtu: Option<u8>,
    /// The peer's QP number.
    pub dest_qp_num: Option<u32>,
    /// Receive PSN.
    pub rq_psn: Option<u32>,
    /// RDMA reads and atomics the peer may have in flight here.
    pub max_dest_rd_atomic: Option<u8>,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: Option<u8>,
    /// Send PSN.
    pub sq_psn: Option<u32>,
    /// Transport retry count.
    pub retry_cnt: Option<u8>,
    /// RNR retry count.
    pub rnr_retry: Option<u8>,
    /// RDMA reads and atomics this side may have in flight.
    pub max_rd_atomic: Option<u8>,
    /// Local ACK timeout.
    pub timeout: Option<u8>,
    /// The alternate path.
    pub alternate: Option<AlternatePath>,
    /// Re-arm path migration (`IBV_MIG_REARM`).
    pub rearm_path_migration: bool,
}

impl QpAttributes {
    fn new(state: QpState, a: &QpAttr) -> Self {
        Self {
            mask: a.mask,
            state: a.has(mask::STATE).then_some(state),
            access_flags: a.has(mask::ACCESS_FLAGS).then_some(a.qp_access_flags),
            pkey_index: a.has(mask::PKEY_INDEX).then_some(a.pkey_index),
            port_num: a.has(mask::PORT).then_some(a.port_num),
            address: a.has(mask::AV).then_some(a.ah_attr.into()),
            path_mtu: a.has(mask::PATH_MTU).then_some(a.path_mtu),
            dest_qp_num: a.has(mask::DEST_QPN).then_some(a.dest_qp_num),
            rq_psn: a.has(mask::RQ_PSN).then_some(a.rq_psn),
            max_dest_rd_atomic: a
                .has(mask::MAX_DEST_RD_ATOMIC)
                .then_some(a.max_dest_rd_atomic),
            min_rnr_timer: a.has(mask::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
            sq_psn: a.has(mask::SQ_PSN).then_some(a.sq_psn),
            retry_cnt: a.has(mask::RETRY_CNT).then_some(a.retry_cnt),
            rnr_retry: a.has(mask::RNR_RETRY).then_some(a.rnr_retry),
            max_rd_atomic: a.has(mask::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
            timeout: a.has(mask::TIMEOUT).then_some(a.timeout),
            alternate: a.has(mask::ALT_PATH).then(|| AlternatePath {
                address: a.alt_ah_attr.into(),
                pkey_index: a.alt_pkey_index,
                port_num: a.alt_port(),
                timeout: a.alt_timeout,
            }),
            rearm_path_migration: a.has(mask::PATH_MIG_STATE)
                && a.path_mig_state == qp_attr::MIG_REARM,
        }
    }
}

/// `ib_cm_init_qp_attr` on `id` for `state`, for the call `op`.
pub(super) fn qp_attributes(
    op: &'static str,
    id: &Arc<CmIdPriv>,
    state: QpState,
) -> Result<QpAttributes> {
    let raw = match state {
        QpState::Init => qp_attr::QPS_INIT,
        QpState::Rtr => qp_attr::QPS_RTR,
        QpState::Rts => qp_attr::QPS_RTS,
    };
    let a = call(op, || cm::init_qp_attr(id, raw))?;
    Ok(QpAttributes::new(state, &a))
}
