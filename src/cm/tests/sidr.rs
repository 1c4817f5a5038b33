//! SIDR: `ib_send_cm_sidr_req`, `cm_sidr_req_handler`, `ib_send_cm_sidr_rep`,
//! `cm_sidr_rep_handler`, and their error paths.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::abi::ib_cm_sidr_status::*;
use crate::cm::{SidrRepParams, SidrReqParams, send_sidr_rep, send_sidr_req};
use crate::errno::EINVAL;
use crate::wire::attr;

fn sidr_params(pair: &Pair, service_id: u64) -> SidrReqParams {
    SidrReqParams {
        path: pair.a.init_path(1, &pair.b.ports[0].gids[0].gid).unwrap(),
        service_id,
        timeout_ms: 20,
        private_data: pattern(216, 5),
        max_cm_retries: 3,
    }
}

fn answer_sidr(rec: &Recorder) {
    rec.on(
        IB_CM_SIDR_REQ_RECEIVED,
        Arc::new(|id, _| {
            let p = SidrRepParams {
                qp_num: 0x55,
                qkey: 0x1111_2222,
                status: IB_SIDR_SUCCESS as u8,
                info: pattern(72, 6),
                private_data: pattern(136, 7),
                ..SidrRepParams::default()
            };
            send_sidr_rep(id, &p).unwrap();
            0
        }),
    );
}

#[test]
fn cm_sidr_req_handler_hands_a_new_id_and_the_rep_comes_back() {
    let pair = Pair::new();
    answer_sidr(&pair.rec);
    send_sidr_req(&pair.active, &sidr_params(&pair, SERVICE_ID)).unwrap();
    assert_eq!(pair.active.state(), IB_CM_SIDR_REQ_SENT);
    let got = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED);
    assert_eq!(got.state, IB_CM_SIDR_REQ_RCVD);
    assert_eq!(got.private_data.unwrap(), pattern(216, 5));
    let passive = got.new_id.unwrap();
    assert_eq!(passive.state(), IB_CM_IDLE); // answered from the handler
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    assert_eq!(got.sidr_status, Some(IB_SIDR_SUCCESS as u8));
    assert_eq!(got.private_data.unwrap(), pattern(136, 7));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    pair.finish(&[&passive]);
}

#[test]
fn cm_sidr_req_handler_without_listener_answers_unsupported() {
    let pair = Pair::new();
    send_sidr_req(&pair.active, &sidr_params(&pair, SERVICE_ID + 1)).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    assert_eq!(got.sidr_status, Some(IB_SIDR_UNSUPPORTED as u8));
    assert_eq!(pair.b.id_count(), 1); // the listener only
    pair.finish(&[]);
}

#[test]
fn cm_process_send_error_sidr_req_sent_gives_sidr_req_error_and_idle() {
    let pair = Pair::new();
    pair.loop_a().drop_next(attr::SIDR_REQ, 100).unwrap();
    send_sidr_req(&pair.active, &sidr_params(&pair, SERVICE_ID)).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(pair.loop_a().sent(attr::SIDR_REQ), 4);
    pair.finish(&[]);
}

#[test]
fn cm_sidr_req_handler_drops_a_duplicate_and_destroy_rejects() {
    let pair = Pair::new();
    // The first request is kept (think about it). A retransmission the
    // active side sends before B's REJECT reaches it arrives after the id
    // is gone, and is a new request (in the kernel too: the SIDR table
    // knows only live ids): refused, so that close finds no id left (a
    // slow run, under TSan, left one and close failed with EBUSY).
    let requests = AtomicUsize::new(0);
    pair.rec.on(
        IB_CM_SIDR_REQ_RECEIVED,
        Arc::new(move |_, _| match requests.fetch_add(1, Ordering::Relaxed) {
            0 => 0,
            _ => -1,
        }),
    );
    // Retries enough that the request is still outstanding when the passive
    // side is destroyed, however slowly this machine runs the timers.
    let p = SidrReqParams {
        timeout_ms: 50,
        max_cm_retries: 15,
        ..sidr_params(&pair, SERVICE_ID)
    };
    send_sidr_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    wait_until("two retransmissions", || {
        pair.loop_a().sent(attr::SIDR_REQ) >= 2
    });
    assert_eq!(pair.rec.count(IB_CM_SIDR_REQ_RECEIVED), 1);
    crate::cm::destroy_id(&passive, 0);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    assert_eq!(got.sidr_status, Some(IB_SIDR_REJECT as u8));
    pair.finish(&[]);
}

#[test]
fn sidr_calls_in_the_wrong_state_or_with_too_much_data_are_einval() {
    let pair = Pair::new();
    let mut p = sidr_params(&pair, SERVICE_ID);
    p.private_data = vec![0; 217];
    assert_eq!(send_sidr_req(&pair.active, &p), Err(EINVAL));
    assert_eq!(
        send_sidr_req(&pair.listener, &sidr_params(&pair, 1)),
        Err(EINVAL)
    );
    assert_eq!(
        send_sidr_rep(&pair.active, &SidrRepParams::default()),
        Err(EINVAL)
    );
    let too_much = SidrRepParams {
        info: vec![0; 73],
        ..SidrRepParams::default()
    };
    assert_eq!(send_sidr_rep(&pair.active, &too_much), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    pair.finish(&[]);
}

/// `cm_format_sidr_rep()` (Linux 6.16) puts `ece.attr_mod` in the MAD
/// header and of `ece.vendor_id` only bits 15..0: `(vendor_id >> 8) & 0xFF`
/// in the 16-bit VENDOR_ID_H (MAD bytes 30..32), `vendor_id & 0xFF` in
/// VENDOR_ID_L (byte 35). For 0x00ABCDEF a peer sees 00 CD … EF, no AB.
#[test]
fn send_sidr_rep_puts_the_ece_on_the_wire_as_the_kernel_does() {
    let pair = Pair::new();
    let raw = Raw::open();
    pair.rec.on(
        IB_CM_SIDR_REQ_RECEIVED,
        Arc::new(|id, _| {
            let p = SidrRepParams {
                qp_num: 0x12_3456,
                ece: (0x00ab_cdef, 0x0102_0304),
                ..SidrRepParams::default()
            };
            send_sidr_rep(id, &p).unwrap();
            0
        }),
    );
    let req = crate::wire::SidrReq {
        request_id: 0x5151,
        pkey: 0xffff,
        service_id: SERVICE_ID,
        ..crate::wire::SidrReq::default()
    };
    raw.send_to(&pair.b, &req.encode(9));
    let passive = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    let rep = raw.wait_for(1);
    assert_eq!(rep[20..24], [0x01, 0x02, 0x03, 0x04], "attribute modifier");
    assert_eq!(
        rep[30..36],
        [0x00, 0xcd, 0x12, 0x34, 0x56, 0xef],
        "VENDOR_ID_H, QPN, VENDOR_ID_L"
    );
    pair.finish(&[&passive]);
}
