//! `ib_cm_init_qp_attr()`: the QP attributes (and mask) that move a QP to
//! INIT, RTR or RTS for this connection, as the kernel computes them
//! (`cm_init_qp_init_attr`, `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`).

use std::sync::Arc;

use super::id::{Av, CmIdPriv};
use crate::abi::ib_cm_lap_state::IB_CM_LAP_UNINIT;
use crate::abi::ib_cm_state::*;
use crate::abi::ib_qp_type::{IB_QPT_RC, IB_QPT_XRC_INI, IB_QPT_XRC_TGT};
use crate::errno::CmResult;
use crate::refusal::{Rule, invalid, wrong_state};

/// `IBV_QPS_*` (= the kernel's `IB_QPS_*`).
pub const QPS_INIT: i32 = 1;
pub const QPS_RTR: i32 = 2;
pub const QPS_RTS: i32 = 3;

/// `IBV_QP_*` attribute mask bits (= the kernel's `IB_QP_*`).
pub mod mask {
    pub const STATE: u32 = 1 << 0;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `IBV_MIG_REARM` (= the kernel's `IB_MIG_REARM`): the QP may migrate to
/// its alternate path again.
pub const MIG_REARM: i32 = 1;

/// `IBV_ACCESS_*` remote access flags.
pub const ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// The address part (`struct ibv_ah_attr`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AhAttr {
    pub dlid: u16,
    pub sl: u8,
    pub static_rate: u8,
    pub is_global: bool,
    pub port_num: u8,
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

impl AhAttr {
    /// The QP's view of a connection address (the kernel copies
    /// `av.ah_attr`).
    fn from_av(av: &Av) -> Self {
        let addr = &av.addr;
        Self {
            dlid: addr.dlid,
            sl: addr.sl,
            static_rate: av.rate,
            is_global: addr.grh,
            port_num: av.port_num,
            dgid: addr.dgid,
            flow_label: addr.flow_label,
            sgid_index: addr.sgid_index,
            hop_limit: addr.hop_limit,
            traffic_class: addr.traffic_class,
        }
    }
}

/// What `ib_cm_init_qp_attr` writes: only the fields in `mask` are meant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttr {
    pub mask: u32,
    pub qp_state: i32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub port_num: u8,
    pub ah_attr: AhAttr,
    pub path_mtu: u8,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub sq_psn: u32,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
    pub timeout: u8,
    pub alt_ah_attr: AhAttr,
    pub alt_pkey_index: u16,
    /// 0: not written (the kernel skips it when the alternate address has no
    /// port).
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub path_mig_state: i32,
}

impl QpAttr {
    /// Whether `bit` (of [`mask`]) is in the mask: its fields are meant.
    /// What each door reads before it converts a field into its own type.
    pub fn has(&self, bit: u32) -> bool {
        self.mask & bit != 0
    }

    /// The alternate path's port, as a door writes it with
    /// [`mask::ALT_PATH`]: `None` (`alt_port_num` left as it was) when the
    /// alternate address has none.
    pub fn alt_port(&self) -> Option<u8> {
        (self.alt_port_num != 0).then_some(self.alt_port_num)
    }

    /// `IB_QP_ALT_PATH`: the alternate address, as the kernel copies
    /// `alt_av` (its port only if it has one).
    fn set_alt_path(&mut self, alt: &Av) {
        self.mask |= mask::ALT_PATH;
        self.alt_ah_attr = AhAttr::from_av(alt);
        self.alt_pkey_index = alt.addr.pkey_index;
        self.alt_port_num = alt.port_num;
        self.alt_timeout = alt.timeout;
    }
}

/// `ib_cm_init_qp_attr()` for the requested `qp_state`.
pub fn init_qp_attr(id: &Arc<CmIdPriv>, qp_state: i32) -> CmResult<QpAttr> {
    let l = id.lock_live()?;
    let state = l.state();
    let i = &l.inner;
    let mut a = QpAttr {
        qp_state,
        ..QpAttr::default()
    };
    let set_up = matches!(
        state,
        IB_CM_REQ_RCVD
            | IB_CM_MRA_REQ_SENT
            | IB_CM_REP_RCVD
            | IB_CM_MRA_REP_SENT
            | IB_CM_REP_SENT
            | IB_CM_MRA_REP_RCVD
            | IB_CM_ESTABLISHED
    );
    match qp_state {
        QPS_INIT if set_up || matches!(state, IB_CM_REQ_SENT | IB_CM_MRA_REQ_RCVD) => {
            a.mask = mask::STATE | mask::ACCESS_FLAGS | mask::PKEY_INDEX | mask::PORT;
            a.qp_access_flags = ACCESS_REMOTE_WRITE;
            if i.responder_resources != 0 {
                a.qp_access_flags |= ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC;
            }
            a.pkey_index = i.av.addr.pkey_index;
            a.port_num = i.av.port_num;
        }
        QPS_RTR if set_up => {
            a.mask = mask::STATE | mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN;
            a.ah_attr = AhAttr::from_av(&i.av);
            a.path_mtu = i.path_mtu;
            a.dest_qp_num = i.remote_qpn;
            a.rq_psn = i.rq_psn;
            if i.qp_type == IB_QPT_RC as i32 || i.qp_type == IB_QPT_XRC_TGT as i32 {
                a.mask |= mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
                a.max_dest_rd_atomic = i.responder_resources;
                a.min_rnr_timer = 0;
            }
            // An alternate path (from the REQ or a LAP) with a LID and a port.
            if i.alt_av.addr.dlid != 0 && i.alt_av.port_num != 0 {
                a.set_alt_path(&i.alt_av);
            }
        }
        QPS_RTS if set_up && l.lap_state() == IB_CM_LAP_UNINIT as i32 => {
            a.mask = mask::STATE | mask::SQ_PSN;
            a.sq_psn = i.sq_psn;
            let rc_or_ini = i.qp_type == IB_QPT_RC as i32 || i.qp_type == IB_QPT_XRC_INI as i32;
            if rc_or_ini {
                a.mask |= mask::RETRY_CNT | mask::RNR_RETRY | mask::MAX_QP_RD_ATOMIC;
                a.retry_cnt = i.retry_count;
                a.rnr_retry = i.rnr_retry_count;
                a.max_rd_atomic = i.initiator_depth;
            }
            if rc_or_ini || i.qp_type == IB_QPT_XRC_TGT as i32 {
                a.mask |= mask::TIMEOUT;
                a.timeout = i.av.timeout;
            }
            // Arm migration to the alternate path loaded at RTR (the kernel
            // checks only the LID here).
            if i.alt_av.addr.dlid != 0 {
                a.mask |= mask::PATH_MIG_STATE;
                a.path_mig_state = MIG_REARM;
            }
        }
        // After a LAP or a migration (lap_state not UNINIT): RTS to RTS with
        // the alternate path, and nothing else (not even IB_QP_STATE).
        QPS_RTS if set_up => {
            a.mask = 0;
            a.set_alt_path(&i.alt_av);
            a.mask |= mask::PATH_MIG_STATE;
            a.path_mig_state = MIG_REARM;
        }
        QPS_INIT => return Err(wrong_state(state, "REQ_SENT to ESTABLISHED")),
        QPS_RTR | QPS_RTS => {
            let needs = "the peer's REQ or REP received, to ESTABLISHED";
            return Err(wrong_state(state, needs));
        }
        _ => {
            let rule = "is not IBV_QPS_INIT, IBV_QPS_RTR or IBV_QPS_RTS";
            return Err(invalid(Rule::value("qp_state", qp_state, rule)));
        }
    }
    Ok(a)
}
