//! The kernel's x86-64 sizes and offsets of the structs of `path.rs`,
//! `event.rs` and `params.rs`, asserted at compile time.

use super::{
    ib_cm_apr_event_param, ib_cm_event, ib_cm_event_param, ib_cm_id, ib_cm_rej_event_param,
    ib_cm_rep_event_param, ib_cm_rep_param, ib_cm_req_event_param, ib_cm_req_param,
    ib_cm_sidr_rep_event_param, ib_cm_sidr_rep_param, ib_cm_sidr_req_event_param,
    ib_cm_sidr_req_param, ib_gid, sa_path_rec,
};

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
