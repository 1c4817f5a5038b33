//! The device's CA ACK delay (issue 10 point 14): the kernel's CM takes
//! `local_ca_ack_delay` from the device for the REQ's local ACK timeout
//! (`cm_format_req`), the REP's target ACK delay (`cm_format_rep`), and so for
//! `av.timeout`: the QP's RTS timeout and the timewait. Loop devices say 15,
//! as rxe does; these say otherwise.

use std::sync::Arc;

use super::*;
use crate::cm::device::Device;
use crate::cm::path::{ack_timeout, convert_to_ms};
use crate::cm::qp_attr::QPS_RTS;
use crate::cm::{
    close_device, create_id, destroy_id, init_qp_attr, listen, send_dreq, send_rep, send_req,
    send_rtu,
};

/// A's and B's CA ACK delays: neither is rxe's 15.
const A_ACK_DELAY: u8 = 18;
const B_ACK_DELAY: u8 = 9;

fn open_with_ack_delay(ack_delay: u8) -> Arc<Device> {
    crate::cm::open_loop_device_with_ack_delay(&loop_name(), ack_delay).unwrap()
}

#[test]
fn the_devices_ack_delay_sets_req_rep_qp_and_timewait_timeouts() {
    let a = open_with_ack_delay(A_ACK_DELAY);
    let b = open_with_ack_delay(B_ACK_DELAY);
    let rec = Arc::new(Recorder::default());
    rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(|id, _| {
            send_rep(id, &rep_params(&[])).unwrap();
            0
        }),
    );
    rec.on(
        IB_CM_REP_RECEIVED,
        Arc::new(|id, _| {
            send_rtu(id, &[]).unwrap();
            0
        }),
    );
    rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(|id, _| {
            crate::cm::send_drep(id, None).unwrap();
            0
        }),
    );
    let listener = create_id(&b, rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    let active = create_id(&a, rec.handler()).unwrap();
    let path = a.init_path(1, &b.ports[0].gids[0].gid).unwrap();
    let plt = path.packet_life_time;
    let p = ReqParams {
        primary_path: path,
        service_id: SERVICE_ID,
        qp_num: ACTIVE_QPN,
        qp_type: ib_qp_type::IB_QPT_RC as i32,
        remote_cm_response_timeout: 12,
        local_cm_response_timeout: 12,
        max_cm_retries: 3,
        ..ReqParams::default()
    };
    send_req(&active, &p).unwrap();
    let passive = rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);

    // The REQ's local ACK timeout is A's delay with the path's lifetime; B
    // takes it as its av.timeout.
    let req_ack_timeout = ack_timeout(A_ACK_DELAY, plt);
    assert_eq!(req_ack_timeout, 18);
    assert_eq!(passive.lock().inner.av.timeout, req_ack_timeout);
    // The REP's target ACK delay is B's; A's av.timeout comes from it.
    assert_eq!(active.lock().inner.target_ack_delay, B_ACK_DELAY);
    let rep_ack_timeout = ack_timeout(B_ACK_DELAY, plt);
    assert_eq!(active.lock().inner.av.timeout, rep_ack_timeout);
    // The QPs' ACK timeouts, and the timewaits, follow.
    assert_eq!(
        init_qp_attr(&active, QPS_RTS).unwrap().timeout,
        rep_ack_timeout
    );
    assert_eq!(
        init_qp_attr(&passive, QPS_RTS).unwrap().timeout,
        req_ack_timeout
    );
    assert_eq!(convert_to_ms(req_ack_timeout), 1024); // B's timewait, 128 ms with 15
    assert_eq!(convert_to_ms(rep_ack_timeout), 2); // A's

    send_dreq(&active, None).unwrap();
    rec.wait(Some(&active), IB_CM_TIMEWAIT_EXIT);
    rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    for id in [&passive, &active, &listener] {
        destroy_id(id, 0);
    }
    close_device(&a).unwrap();
    close_device(&b).unwrap();
}

#[test]
fn a_device_libibverbs_does_not_know_has_no_ack_delay() {
    // The 15 of such a device comes from the caller (device_ack_delay), with
    // a warning; the query itself says it does not know.
    assert_eq!(
        crate::transport::umad::verbs_local_ca_ack_delay("ibcm-no-such-device"),
        None
    );
}
