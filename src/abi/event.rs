//! `struct ib_cm_id`, its handler, and `struct ib_cm_event` with the parameters
//! of each event.

use core::ffi::{c_int, c_uint, c_void};

use super::{
    CIntAprStatus, CIntRejReason, CIntSidrStatus, ib_cm_event_type, ib_cm_lap_state, ib_cm_state,
    ib_device, ib_gid_attr, ib_qp_type, ib_wc_status, rdma_ucm_ece, sa_path_rec,
};

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
