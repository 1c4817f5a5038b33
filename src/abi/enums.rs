//! The enums of `<rdma/ib_cm.h>` the library writes (states, event types,
//! statuses, reasons), the private data sizes, and the `CInt*` wrappers of
//! the enum-typed values C writes.

use core::ffi::c_int;

/// `enum ib_cm_state` (ib_cm.h). `cm_id->state` is for debugging, as in the kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ib_cm_state {
    IB_CM_IDLE = 0,
    IB_CM_LISTEN = 1,
    IB_CM_REQ_SENT = 2,
    IB_CM_REQ_RCVD = 3,
    IB_CM_MRA_REQ_SENT = 4,
    IB_CM_MRA_REQ_RCVD = 5,
    IB_CM_REP_SENT = 6,
    IB_CM_REP_RCVD = 7,
    IB_CM_MRA_REP_SENT = 8,
    IB_CM_MRA_REP_RCVD = 9,
    IB_CM_ESTABLISHED = 10,
    IB_CM_DREQ_SENT = 11,
    IB_CM_DREQ_RCVD = 12,
    IB_CM_TIMEWAIT = 13,
    IB_CM_SIDR_REQ_SENT = 14,
    IB_CM_SIDR_REQ_RCVD = 15,
}

/// How a device's handlers run (`ibcm_set_event_mode()`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ibcm_event_mode {
    /// On the library's worker thread, as in the kernel (the default).
    IBCM_EVENTS_WORKER = 0,
    /// On the application's thread, in `ibcm_process_events()`; the fd of
    /// `ibcm_get_event_fd()` is readable while events are pending.
    IBCM_EVENTS_FD = 1,
}

/// `enum ib_cm_lap_state`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ib_cm_lap_state {
    IB_CM_LAP_UNINIT = 0,
    IB_CM_LAP_IDLE = 1,
    IB_CM_LAP_SENT = 2,
    IB_CM_LAP_RCVD = 3,
    IB_CM_MRA_LAP_SENT = 4,
    IB_CM_MRA_LAP_RCVD = 5,
}

/// `enum ib_cm_event_type`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ib_cm_event_type {
    IB_CM_REQ_ERROR = 0,
    IB_CM_REQ_RECEIVED = 1,
    IB_CM_REP_ERROR = 2,
    IB_CM_REP_RECEIVED = 3,
    IB_CM_RTU_RECEIVED = 4,
    IB_CM_USER_ESTABLISHED = 5,
    IB_CM_DREQ_ERROR = 6,
    IB_CM_DREQ_RECEIVED = 7,
    IB_CM_DREP_RECEIVED = 8,
    IB_CM_TIMEWAIT_EXIT = 9,
    IB_CM_MRA_RECEIVED = 10,
    IB_CM_REJ_RECEIVED = 11,
    IB_CM_LAP_ERROR = 12,
    IB_CM_LAP_RECEIVED = 13,
    IB_CM_APR_RECEIVED = 14,
    IB_CM_SIDR_REQ_ERROR = 15,
    IB_CM_SIDR_REQ_RECEIVED = 16,
    IB_CM_SIDR_REP_RECEIVED = 17,
}

/// Linux ≤ 6.15: `ib_send_cm_mra()` with this bit in `service_timeout` sends no
/// MRA now, only for the peer's next duplicate REQ, REP or LAP (which is what
/// Linux ≥ 6.16's `ib_prepare_cm_mra()` always does). The header spells it by
/// hand (cbindgen.toml), as its other constants.
pub const IB_CM_MRA_FLAG_DELAY: u8 = 0x80;

/// `enum ib_cm_data_size`: private data and info sizes in bytes. Several
/// members share a value, which a Rust enum cannot express, so the header spells
/// the enum by hand (cbindgen.toml) and Rust uses these constants.
pub mod data_size {
    pub const REQ_PRIVATE_DATA_SIZE: usize = 92;
    pub const MRA_PRIVATE_DATA_SIZE: usize = 222;
    pub const REJ_PRIVATE_DATA_SIZE: usize = 148;
    pub const REP_PRIVATE_DATA_SIZE: usize = 196;
    pub const RTU_PRIVATE_DATA_SIZE: usize = 224;
    pub const DREQ_PRIVATE_DATA_SIZE: usize = 220;
    pub const DREP_PRIVATE_DATA_SIZE: usize = 224;
    pub const REJ_ARI_LENGTH: usize = 72;
    pub const LAP_PRIVATE_DATA_SIZE: usize = 168;
    pub const APR_PRIVATE_DATA_SIZE: usize = 148;
    pub const APR_INFO_LENGTH: usize = 72;
    pub const SIDR_REQ_PRIVATE_DATA_SIZE: usize = 216;
    pub const SIDR_REP_PRIVATE_DATA_SIZE: usize = 136;
    pub const SIDR_REP_INFO_LENGTH: usize = 72;
}

/// `enum ib_cm_rej_reason`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ib_cm_rej_reason {
    IB_CM_REJ_NO_QP = 1,
    IB_CM_REJ_NO_EEC = 2,
    IB_CM_REJ_NO_RESOURCES = 3,
    IB_CM_REJ_TIMEOUT = 4,
    IB_CM_REJ_UNSUPPORTED = 5,
    IB_CM_REJ_INVALID_COMM_ID = 6,
    IB_CM_REJ_INVALID_COMM_INSTANCE = 7,
    IB_CM_REJ_INVALID_SERVICE_ID = 8,
    IB_CM_REJ_INVALID_TRANSPORT_TYPE = 9,
    IB_CM_REJ_STALE_CONN = 10,
    IB_CM_REJ_RDC_NOT_EXIST = 11,
    IB_CM_REJ_INVALID_GID = 12,
    IB_CM_REJ_INVALID_LID = 13,
    IB_CM_REJ_INVALID_SL = 14,
    IB_CM_REJ_INVALID_TRAFFIC_CLASS = 15,
    IB_CM_REJ_INVALID_HOP_LIMIT = 16,
    IB_CM_REJ_INVALID_PACKET_RATE = 17,
    IB_CM_REJ_INVALID_ALT_GID = 18,
    IB_CM_REJ_INVALID_ALT_LID = 19,
    IB_CM_REJ_INVALID_ALT_SL = 20,
    IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS = 21,
    IB_CM_REJ_INVALID_ALT_HOP_LIMIT = 22,
    IB_CM_REJ_INVALID_ALT_PACKET_RATE = 23,
    IB_CM_REJ_PORT_CM_REDIRECT = 24,
    IB_CM_REJ_PORT_REDIRECT = 25,
    IB_CM_REJ_INVALID_MTU = 26,
    IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES = 27,
    IB_CM_REJ_CONSUMER_DEFINED = 28,
    IB_CM_REJ_INVALID_RNR_RETRY = 29,
    IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID = 30,
    IB_CM_REJ_INVALID_CLASS_VERSION = 31,
    IB_CM_REJ_INVALID_FLOW_LABEL = 32,
    IB_CM_REJ_INVALID_ALT_FLOW_LABEL = 33,
    IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED = 35,
}

/// `enum ib_cm_apr_status` (APR events are delivered only on InfiniBand ports).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum ib_cm_apr_status {
    IB_CM_APR_SUCCESS = 0,
    IB_CM_APR_INVALID_COMM_ID = 1,
    IB_CM_APR_UNSUPPORTED = 2,
    IB_CM_APR_REJECT = 3,
    IB_CM_APR_REDIRECT = 4,
    IB_CM_APR_IS_CURRENT = 5,
    IB_CM_APR_INVALID_QPN_EECN = 6,
    IB_CM_APR_INVALID_LID = 7,
    IB_CM_APR_INVALID_GID = 8,
    IB_CM_APR_INVALID_FLOW_LABEL = 9,
    IB_CM_APR_INVALID_TCLASS = 10,
    IB_CM_APR_INVALID_HOP_LIMIT = 11,
    IB_CM_APR_INVALID_PACKET_RATE = 12,
    IB_CM_APR_INVALID_SL = 13,
}

/// `enum ib_cm_sidr_status`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum ib_cm_sidr_status {
    IB_SIDR_SUCCESS = 0,
    IB_SIDR_UNSUPPORTED = 1,
    IB_SIDR_REJECT = 2,
    IB_SIDR_NO_QP = 3,
    IB_SIDR_REDIRECT = 4,
    IB_SIDR_UNSUPPORTED_VERSION = 5,
}

/// `enum ib_qp_type`: the kernel's numbers, equal to libibverbs' `enum ibv_qp_type`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum ib_qp_type {
    IB_QPT_SMI = 0,
    IB_QPT_GSI = 1,
    IB_QPT_RC = 2,
    IB_QPT_UC = 3,
    IB_QPT_UD = 4,
    IB_QPT_RAW_IPV6 = 5,
    IB_QPT_RAW_ETHERTYPE = 6,
    IB_QPT_RAW_PACKET = 8,
    IB_QPT_XRC_INI = 9,
    IB_QPT_XRC_TGT = 10,
}

/// `enum ib_wc_status`: the kernel's numbers, equal to libibverbs' `enum ibv_wc_status`.
/// Error events carry one in `param.send_status`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ib_wc_status {
    IB_WC_SUCCESS = 0,
    IB_WC_LOC_LEN_ERR = 1,
    IB_WC_LOC_QP_OP_ERR = 2,
    IB_WC_LOC_EEC_OP_ERR = 3,
    IB_WC_LOC_PROT_ERR = 4,
    IB_WC_WR_FLUSH_ERR = 5,
    IB_WC_MW_BIND_ERR = 6,
    IB_WC_BAD_RESP_ERR = 7,
    IB_WC_LOC_ACCESS_ERR = 8,
    IB_WC_REM_INV_REQ_ERR = 9,
    IB_WC_REM_ACCESS_ERR = 10,
    IB_WC_REM_OP_ERR = 11,
    IB_WC_RETRY_EXC_ERR = 12,
    IB_WC_RNR_RETRY_EXC_ERR = 13,
    IB_WC_LOC_RDD_VIOL_ERR = 14,
    IB_WC_REM_INV_RD_REQ_ERR = 15,
    IB_WC_REM_ABORT_ERR = 16,
    IB_WC_INV_EECN_ERR = 17,
    IB_WC_INV_EEC_STATE_ERR = 18,
    IB_WC_FATAL_ERR = 19,
    IB_WC_RESP_TIMEOUT_ERR = 20,
    IB_WC_GENERAL_ERR = 21,
}

/// `enum ib_event_type`: the kernel's numbers, equal to libibverbs' `enum ibv_event_type`.
/// `ib_cm_notify()` takes one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum ib_event_type {
    IB_EVENT_CQ_ERR = 0,
    IB_EVENT_QP_FATAL = 1,
    IB_EVENT_QP_REQ_ERR = 2,
    IB_EVENT_QP_ACCESS_ERR = 3,
    IB_EVENT_COMM_EST = 4,
    IB_EVENT_SQ_DRAINED = 5,
    IB_EVENT_PATH_MIG = 6,
    IB_EVENT_PATH_MIG_ERR = 7,
    IB_EVENT_DEVICE_FATAL = 8,
    IB_EVENT_PORT_ACTIVE = 9,
    IB_EVENT_PORT_ERR = 10,
    IB_EVENT_LID_CHANGE = 11,
    IB_EVENT_PKEY_CHANGE = 12,
    IB_EVENT_SM_CHANGE = 13,
    IB_EVENT_SRQ_ERR = 14,
    IB_EVENT_SRQ_LIMIT_REACHED = 15,
    IB_EVENT_QP_LAST_WQE_REACHED = 16,
    IB_EVENT_CLIENT_REREGISTER = 17,
    IB_EVENT_GID_CHANGE = 18,
    IB_EVENT_WQ_FATAL = 19,
}

/// `enum sa_path_rec_type` (kernel `ib_sa.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum sa_path_rec_type {
    SA_PATH_REC_TYPE_IB = 0,
    SA_PATH_REC_TYPE_ROCE_V1 = 1,
    SA_PATH_REC_TYPE_ROCE_V2 = 2,
    SA_PATH_REC_TYPE_OPA = 3,
}

/// An `enum ib_qp_type` as written by C code (any `int`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CIntQpType(pub c_int);
/// An `enum ib_cm_rej_reason` as written by C code (any `int`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CIntRejReason(pub c_int);
/// An `enum ib_event_type` as written by C code (any `int`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CIntEventType(pub c_int);
/// An `enum ib_cm_sidr_status` as C writes it, or as a peer sent it.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CIntSidrStatus(pub c_int);
/// An `enum ib_cm_apr_status` as a peer sent it (any 8-bit value).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CIntAprStatus(pub c_int);
/// An `enum sa_path_rec_type` as written by C code (any `int`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CIntPathRecType(pub c_int);
