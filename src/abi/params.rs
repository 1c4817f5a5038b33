//! The parameters C passes to send a REQ, a REP, a SIDR_REQ and a SIDR_REP.

use core::ffi::c_void;

use super::{CIntQpType, CIntSidrStatus, ib_gid_attr, rdma_ucm_ece, sa_path_rec};

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
