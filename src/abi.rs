//! The C types of `<rdma/ib_cm.h>`: the kernel's names, numbers and x86-64 layouts.
//!
//! Plain data shared by the engine (`cm`) and the C boundary (`ffi`); nothing
//! here dereferences a pointer.
//!
//! cbindgen generates the public header from this file. Every struct has `const`
//! layout assertions at the bottom; `c-tests/test_layout.c` asserts the same
//! offsets from C with `_Static_assert`.
//!
//! Enums that the *library* writes (states, event types) are real Rust enums.
//! Enum-typed values that *C code* writes (a `qp_type` in a request, a reject
//! reason, an `ib_event_type`) are received as `CInt*` wrappers: C may store any
//! `int` there, and reading an out-of-range value into a Rust enum would be
//! undefined behaviour. cbindgen renames each wrapper to its `enum` tag.
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_int, c_uint, c_void};

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

/// `union ib_gid` (kernel `ib_verbs.h`): 16 bytes, network order.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_gid {
    pub raw: [u8; 16],
    pub global: ib_gid_global,
}

/// The `global` view of `union ib_gid`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ib_gid_global {
    /// `__be64`
    pub subnet_prefix: u64,
    /// `__be64`
    pub interface_id: u64,
}

/// Opaque: the library's device handle, from `ibcm_open_device()`.
pub struct ib_device {
    _opaque: (),
}

/// Opaque: kernel GID attribute. Userspace has none; these pointers are always NULL.
pub struct ib_gid_attr {
    _opaque: (),
}

/// `struct sa_path_rec_ib`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sa_path_rec_ib {
    /// `__be16`
    pub dlid: u16,
    /// `__be16`
    pub slid: u16,
    pub raw_traffic: u8,
}

/// `struct sa_path_rec_roce`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sa_path_rec_roce {
    pub route_resolved: bool,
    pub dmac: [u8; 6],
}

/// `struct sa_path_rec_opa`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sa_path_rec_opa {
    /// `__be32`
    pub dlid: u32,
    /// `__be32`
    pub slid: u32,
    pub raw_traffic: u8,
    pub l2_8B: u8,
    pub l2_10B: u8,
    pub l2_9B: u8,
    pub l2_16B: u8,
    pub qos_type: u8,
    pub qos_priority: u8,
}

/// The link-layer part of `struct sa_path_rec` (an anonymous union in the kernel).
#[repr(C)]
#[derive(Clone, Copy)]
pub union sa_path_rec_link {
    pub ib: sa_path_rec_ib,
    pub roce: sa_path_rec_roce,
    pub opa: sa_path_rec_opa,
}

/// `struct sa_path_rec` (kernel `ib_sa.h`), 88 bytes. Multi-byte fields are
/// big-endian as in the kernel (`__be16 pkey`, `__be32 flow_label`, …).
/// The kernel's anonymous union is named `link` here: C has `path.link.ib.dlid`
/// where kernel code writes `path.ib.dlid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sa_path_rec {
    pub dgid: ib_gid,
    pub sgid: ib_gid,
    /// `__be64`
    pub service_id: u64,
    /// `__be32`
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: u8,
    pub numb_path: u8,
    /// `__be16`
    pub pkey: u16,
    /// `__be16`
    pub qos_class: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
    pub link: sa_path_rec_link,
    pub rec_type: CIntPathRecType,
    pub flags: u32,
}

/// `struct rdma_ucm_ece` (uapi `rdma_user_cm.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rdma_ucm_ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// `ib_cm_handler`: called on the library's event thread, never with a library
/// lock held, one event at a time per cm_id. A non-zero return destroys the id.
pub type ib_cm_handler =
    Option<unsafe extern "C" fn(cm_id: *mut ib_cm_id, event: *const ib_cm_event) -> c_int>;

/// `struct ib_cm_id`, 56 bytes, the kernel's fields in the kernel's order.
/// `cm_handler` and `context` belong to the caller; the library keeps the rest
/// up to date.
#[repr(C)]
pub struct ib_cm_id {
    pub cm_handler: ib_cm_handler,
    pub context: *mut c_void,
    pub device: *mut ib_device,
    /// `__be64`
    pub service_id: u64,
    pub state: ib_cm_state,
    pub lap_state: ib_cm_lap_state,
    /// `__be32`
    pub local_id: u32,
    /// `__be32`
    pub remote_id: u32,
    pub remote_cm_qpn: u32,
}

/// `struct ib_cm_req_event_param`, 80 bytes. The bitfields after
/// `initiator_depth` live in two `unsigned int` units exactly where gcc puts the
/// kernel's; the header (cbindgen.toml) spells them as C bitfields.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_req_event_param {
    pub listen_id: *mut ib_cm_id,
    pub bth_pkey: u16,
    pub port: u8,
    pub primary_path: *mut sa_path_rec,
    pub alternate_path: *mut sa_path_rec,
    pub ppath_sgid_attr: *const ib_gid_attr,
    /// `__be64`
    pub remote_ca_guid: u64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub qp_type: ib_qp_type,
    pub starting_psn: u32,
    /// `responder_resources` (byte 0), `initiator_depth` (byte 1), then the
    /// bitfields `local_cm_response_timeout:5`, `flow_control:1`,
    /// `remote_cm_response_timeout:5`, `retry_count:3` from bit 16 up.
    pub unit0: c_uint,
    /// `rnr_retry_count:3`, `srq:1` from bit 0 up.
    pub unit1: c_uint,
    pub ece: rdma_ucm_ece,
}

/// `struct ib_cm_rep_event_param`, 32 bytes; bitfields as for the REQ event.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_rep_event_param {
    /// `__be64`
    pub remote_ca_guid: u64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    /// `responder_resources` (byte 0), `initiator_depth` (byte 1), then
    /// `target_ack_delay:5`, `failover_accepted:2`, `flow_control:1`,
    /// `rnr_retry_count:3`, `srq:1` from bit 16 up.
    pub unit0: c_uint,
    pub ece: rdma_ucm_ece,
}

/// `struct ib_cm_rej_event_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_rej_event_param {
    /// The reason as the peer sent it (any 16-bit value).
    pub reason: CIntRejReason,
    pub ari: *mut c_void,
    pub ari_length: u8,
}

/// `struct ib_cm_mra_event_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_mra_event_param {
    pub service_timeout: u8,
}

/// `struct ib_cm_lap_event_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_lap_event_param {
    pub alternate_path: *mut sa_path_rec,
}

/// `struct ib_cm_apr_event_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_apr_event_param {
    /// The status as the peer sent it (any 8-bit value).
    pub ap_status: CIntAprStatus,
    pub apr_info: *mut c_void,
    pub info_len: u8,
}

/// `struct ib_cm_sidr_req_event_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_sidr_req_event_param {
    pub listen_id: *mut ib_cm_id,
    /// `__be64`
    pub service_id: u64,
    pub sgid_attr: *const ib_gid_attr,
    pub bth_pkey: u16,
    pub port: u8,
    pub pkey: u16,
}

/// `struct ib_cm_sidr_rep_event_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_sidr_rep_event_param {
    /// The status as the peer sent it (any 8-bit value).
    pub status: CIntSidrStatus,
    pub qkey: u32,
    pub qpn: u32,
    pub info: *mut c_void,
    pub sgid_attr: *const ib_gid_attr,
    pub info_len: u8,
}

/// The `param` union of `struct ib_cm_event` (anonymous in the kernel, whose
/// member is also called `param`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_cm_event_param {
    pub req_rcvd: ib_cm_req_event_param,
    pub rep_rcvd: ib_cm_rep_event_param,
    pub rej_rcvd: ib_cm_rej_event_param,
    pub mra_rcvd: ib_cm_mra_event_param,
    pub lap_rcvd: ib_cm_lap_event_param,
    pub apr_rcvd: ib_cm_apr_event_param,
    pub sidr_req_rcvd: ib_cm_sidr_req_event_param,
    pub sidr_rep_rcvd: ib_cm_sidr_rep_event_param,
    pub send_status: ib_wc_status,
}

/// `struct ib_cm_event`, 96 bytes. `private_data` points into the received MAD
/// and is valid only during the callback. Unlike the kernel, `param` is zeroed
/// for events that carry no parameters.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_event {
    pub event: ib_cm_event_type,
    pub param: ib_cm_event_param,
    pub private_data: *mut c_void,
}

/// `struct ib_cm_req_param`, 96 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_req_param {
    pub primary_path: *mut sa_path_rec,
    pub primary_path_inbound: *mut sa_path_rec,
    pub primary_path_outbound: *mut sa_path_rec,
    pub alternate_path: *mut sa_path_rec,
    pub ppath_sgid_attr: *const ib_gid_attr,
    /// `__be64`
    pub service_id: u64,
    pub qp_num: u32,
    pub qp_type: CIntQpType,
    pub starting_psn: u32,
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub remote_cm_response_timeout: u8,
    pub flow_control: u8,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: u8,
    pub ece: rdma_ucm_ece,
}

/// `struct ib_cm_sidr_req_param`, 48 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_sidr_req_param {
    pub path: *mut sa_path_rec,
    pub sgid_attr: *const ib_gid_attr,
    /// `__be64`
    pub service_id: u64,
    pub timeout_ms: core::ffi::c_ulong,
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub max_cm_retries: u8,
}

/// `struct ib_cm_sidr_rep_param`, 56 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_sidr_rep_param {
    pub qp_num: u32,
    pub qkey: u32,
    pub status: CIntSidrStatus,
    pub info: *const c_void,
    pub info_length: u8,
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ece: rdma_ucm_ece,
}

/// `struct ib_cm_rep_param`, 32 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ib_cm_rep_param {
    pub qp_num: u32,
    pub starting_psn: u32,
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub failover_accepted: u8,
    pub flow_control: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub ece: rdma_ucm_ece,
}

// Layout assertions: the kernel's x86-64 sizes and offsets (spec §1.2–1.4).
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ib_gid>() == 16);
    assert!(size_of::<sa_path_rec>() == 88);
    assert!(offset_of!(sa_path_rec, service_id) == 32);
    assert!(offset_of!(sa_path_rec, flow_label) == 40);
    assert!(offset_of!(sa_path_rec, pkey) == 48);
    assert!(offset_of!(sa_path_rec, sl) == 52);
    assert!(offset_of!(sa_path_rec, mtu) == 54);
    assert!(offset_of!(sa_path_rec, packet_life_time) == 58);
    assert!(offset_of!(sa_path_rec, link) == 60);
    assert!(offset_of!(sa_path_rec, rec_type) == 76);
    assert!(offset_of!(sa_path_rec, flags) == 80);

    assert!(size_of::<ib_cm_id>() == 56);
    assert!(offset_of!(ib_cm_id, context) == 8);
    assert!(offset_of!(ib_cm_id, device) == 16);
    assert!(offset_of!(ib_cm_id, service_id) == 24);
    assert!(offset_of!(ib_cm_id, state) == 32);
    assert!(offset_of!(ib_cm_id, lap_state) == 36);
    assert!(offset_of!(ib_cm_id, local_id) == 40);
    assert!(offset_of!(ib_cm_id, remote_id) == 44);
    assert!(offset_of!(ib_cm_id, remote_cm_qpn) == 48);

    assert!(size_of::<ib_cm_event>() == 96);
    assert!(offset_of!(ib_cm_event, param) == 8);
    assert!(offset_of!(ib_cm_event, private_data) == 88);
    assert!(size_of::<ib_cm_event_param>() == 80);

    assert!(size_of::<ib_cm_req_event_param>() == 80);
    assert!(offset_of!(ib_cm_req_event_param, bth_pkey) == 8);
    assert!(offset_of!(ib_cm_req_event_param, port) == 10);
    assert!(offset_of!(ib_cm_req_event_param, primary_path) == 16);
    assert!(offset_of!(ib_cm_req_event_param, alternate_path) == 24);
    assert!(offset_of!(ib_cm_req_event_param, ppath_sgid_attr) == 32);
    assert!(offset_of!(ib_cm_req_event_param, remote_ca_guid) == 40);
    assert!(offset_of!(ib_cm_req_event_param, remote_qkey) == 48);
    assert!(offset_of!(ib_cm_req_event_param, remote_qpn) == 52);
    assert!(offset_of!(ib_cm_req_event_param, qp_type) == 56);
    assert!(offset_of!(ib_cm_req_event_param, starting_psn) == 60);
    assert!(offset_of!(ib_cm_req_event_param, unit0) == 64);
    assert!(offset_of!(ib_cm_req_event_param, unit1) == 68);
    assert!(offset_of!(ib_cm_req_event_param, ece) == 72);

    assert!(size_of::<ib_cm_rep_event_param>() == 32);
    assert!(offset_of!(ib_cm_rep_event_param, unit0) == 20);
    assert!(offset_of!(ib_cm_rep_event_param, ece) == 24);
    assert!(size_of::<ib_cm_rej_event_param>() == 24);
    assert!(offset_of!(ib_cm_rej_event_param, ari) == 8);
    assert!(offset_of!(ib_cm_rej_event_param, ari_length) == 16);
    assert!(size_of::<ib_cm_apr_event_param>() == 24);
    assert!(size_of::<ib_cm_sidr_req_event_param>() == 32);
    assert!(offset_of!(ib_cm_sidr_req_event_param, pkey) == 28);
    assert!(size_of::<ib_cm_sidr_rep_event_param>() == 40);
    assert!(offset_of!(ib_cm_sidr_rep_event_param, info_len) == 32);

    assert!(size_of::<ib_cm_req_param>() == 96);
    assert!(offset_of!(ib_cm_req_param, ppath_sgid_attr) == 32);
    assert!(offset_of!(ib_cm_req_param, service_id) == 40);
    assert!(offset_of!(ib_cm_req_param, qp_num) == 48);
    assert!(offset_of!(ib_cm_req_param, qp_type) == 52);
    assert!(offset_of!(ib_cm_req_param, starting_psn) == 56);
    assert!(offset_of!(ib_cm_req_param, private_data) == 64);
    assert!(offset_of!(ib_cm_req_param, private_data_len) == 72);
    assert!(offset_of!(ib_cm_req_param, max_cm_retries) == 80);
    assert!(offset_of!(ib_cm_req_param, srq) == 81);
    assert!(offset_of!(ib_cm_req_param, ece) == 84);

    assert!(size_of::<ib_cm_rep_param>() == 32);
    assert!(size_of::<ib_cm_sidr_req_param>() == 48);
    assert!(offset_of!(ib_cm_sidr_req_param, timeout_ms) == 24);
    assert!(offset_of!(ib_cm_sidr_req_param, private_data_len) == 40);
    assert!(offset_of!(ib_cm_sidr_req_param, max_cm_retries) == 41);
    assert!(size_of::<ib_cm_sidr_rep_param>() == 56);
    assert!(offset_of!(ib_cm_sidr_rep_param, status) == 8);
    assert!(offset_of!(ib_cm_sidr_rep_param, info) == 16);
    assert!(offset_of!(ib_cm_sidr_rep_param, info_length) == 24);
    assert!(offset_of!(ib_cm_sidr_rep_param, private_data) == 32);
    assert!(offset_of!(ib_cm_sidr_rep_param, private_data_len) == 40);
    assert!(offset_of!(ib_cm_sidr_rep_param, ece) == 44);
    assert!(offset_of!(ib_cm_rep_param, private_data) == 8);
    assert!(offset_of!(ib_cm_rep_param, private_data_len) == 16);
    assert!(offset_of!(ib_cm_rep_param, srq) == 22);
    assert!(offset_of!(ib_cm_rep_param, ece) == 24);
};

/// Index of a CM attribute in the arrays of `struct ibcm_counters`
/// (attribute ID − 0x10, the kernel's sysfs counter order).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum ibcm_counter_attr {
    IBCM_CNT_REQ = 0,
    IBCM_CNT_MRA = 1,
    IBCM_CNT_REJ = 2,
    IBCM_CNT_REP = 3,
    IBCM_CNT_RTU = 4,
    IBCM_CNT_DREQ = 5,
    IBCM_CNT_DREP = 6,
    IBCM_CNT_SIDR_REQ = 7,
    IBCM_CNT_SIDR_REP = 8,
    IBCM_CNT_LAP = 9,
    IBCM_CNT_APR = 10,
    IBCM_CNT_ATTRS = 11,
}

/// One port's CM counters (`ibcm_get_counters()`): the kernel's sysfs groups
/// `cm_tx_msgs`, `cm_tx_retries`, `cm_rx_msgs`, `cm_rx_duplicates`, indexed by
/// `enum ibcm_counter_attr`, plus the MADs this library dropped.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibcm_counters {
    /// Every transmission, retries included.
    pub cm_tx_msgs: [u64; 11],
    pub cm_tx_retries: [u64; 11],
    pub cm_rx_msgs: [u64; 11],
    /// Received again: a duplicate REQ/REP/RTU/DREQ, or a DREQ for a
    /// connection that does not exist (answered by a stateless DREP).
    pub cm_rx_duplicates: [u64; 11],
    /// Dropped on receipt: too short, not CM class version 2 method Send, a
    /// field out of range, or an attribute the CM does not know.
    pub rx_malformed: u64,
    /// Dropped on receipt: no connection matches it, or it is not expected in
    /// the connection's state (the kernel drops these silently).
    pub rx_unmatched: u64,
    /// Not taken: a REQ or SIDR_REQ for a listener 1024 of whose new ids
    /// still wait for their request event to be handled (beyond the kernel).
    /// A REQ is dropped (the peer's retransmission gets another chance), a
    /// SIDR_REQ answered with a SIDR_REP `IB_SIDR_REJECT`.
    pub rx_listen_overflows: u64,
    /// Dropped on receipt: 65,536 received MADs of the device were already
    /// waiting for the CM (a handler that does not return holds them up).
    pub rx_dropped: u64,
}

const _: () = assert!(core::mem::size_of::<ibcm_counters>() == 8 * (4 * 11 + 4));

/// What the library holds right now (`ibcm_get_stats()`): all zero once every
/// cm_id is destroyed and the fabric is quiet.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibcm_stats {
    /// cm_ids that exist (created and not yet destroyed).
    pub cm_ids: u64,
    /// Armed timers (retransmissions, timewaits).
    pub timers: u64,
    /// Work queued for the worker thread (received MADs and events), and
    /// events pending for `ibcm_process_events()` on devices in
    /// `IBCM_EVENTS_FD` mode.
    pub queued: u64,
}

/// What the process's path cache has done (`ibcm_get_path_cache_counters()`),
/// since the process started: the answers `ibcm_init_path` got from it and
/// the SA queries it made. The SA saw `misses + busy_backoffs` queries.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibcm_path_cache_counters {
    /// Paths answered from the cache.
    pub hits: u64,
    /// Paths asked of the SA: none was kept (every ask, with the cache off).
    pub misses: u64,
    /// Asks that found the same query in flight and shared its outcome.
    pub coalesced: u64,
    /// Answers dropped because their port changed or a REQ to their
    /// destination timed out.
    pub invalidations: u64,
    /// Answers dropped at the end of their TTL.
    pub expirations: u64,
    /// Answers dropped to make room (the oldest first).
    pub evictions: u64,
    /// Queries asked again after the SA answered Busy.
    pub busy_backoffs: u64,
    /// Answers the cache holds now.
    pub entries: u64,
}

const _: () = assert!(core::mem::size_of::<ibcm_path_cache_counters>() == 8 * 8);

/// `union ibv_gid` as a plain 16 bytes with its 8-byte alignment.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_gid_raw(pub [u8; 16]);

/// `struct ibv_global_route` (libibverbs `verbs.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid_raw,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` (libibverbs `verbs.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap` (libibverbs `verbs.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr` (libibverbs `verbs.h`), what `ib_cm_init_qp_attr()`
/// fills (the kernel's `struct ib_qp_attr`). The header only forward-declares
/// it: callers include `<infiniband/verbs.h>`. Enum fields are plain `int`s
/// here because C writes them.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

// libibverbs' x86-64 layout (checked against verbs.h in c-tests/test_init_qp_attr.c).
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<ibv_global_route>() == 24);
    assert!(size_of::<ibv_ah_attr>() == 32);
    assert!(offset_of!(ibv_ah_attr, dlid) == 24);
    assert!(offset_of!(ibv_ah_attr, port_num) == 30);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(offset_of!(ibv_qp_attr, qp_access_flags) == 32);
    assert!(offset_of!(ibv_qp_attr, ah_attr) == 56);
    assert!(offset_of!(ibv_qp_attr, alt_ah_attr) == 88);
    assert!(offset_of!(ibv_qp_attr, pkey_index) == 120);
    assert!(offset_of!(ibv_qp_attr, max_rd_atomic) == 126);
    assert!(offset_of!(ibv_qp_attr, port_num) == 129);
    assert!(offset_of!(ibv_qp_attr, rnr_retry) == 132);
    assert!(offset_of!(ibv_qp_attr, rate_limit) == 136);
};
