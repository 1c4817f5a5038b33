//! Hostile numbers saturate (issue 30): every timeout the engine
//! computes from a path, a caller's parameters, a received MAD or the device
//! stays in range. An IBA time value t stands for 4.096 µs · 2^t and is 5
//! bits wide in every CM message and QP attribute; the kernel's
//! `cm_convert_to_ms` shifts by whatever it is given (`1 << max(t - 8, 0)`
//! in int), which is undefined from t = 39 on. Here every t above 31 counts
//! as 31, both in the arithmetic and on the wire.
//!
//! Clamped timeouts are hours long: the tests fire an id's retransmission
//! timer by hand, as the wheel would at its deadline, and count the resends.

use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::abi::IB_CM_MRA_FLAG_DELAY;
use crate::cm::device::Device;
use crate::cm::event::EventParam;
use crate::cm::path::{ack_timeout, convert_to_ms};
use crate::cm::qp_attr::{QPS_RTR, QPS_RTS};
use crate::cm::worker::{cancel_timer, wait_for_queued_work};
use crate::cm::{init_qp_attr, send_mra, send_req};
use crate::wire::mra::CM_MRA_SERVICE_TIMEOUT;
use crate::wire::{Mra, MsgResponse, Req, ReqPath, TransportType, attr};

/// `convert_to_ms(31)`: the longest any IBA time value lasts here.
const MAX_MS: u32 = 1 << 23;

/// The tracked MAD of `id`: the state it was sent in, its retries left and
/// its retransmission interval.
fn tracked(id: &Arc<CmIdPriv>) -> (ib_cm_state, u8, u32) {
    let l = id.lock();
    let msg = l.inner.msg.as_ref().expect("a tracked MAD");
    (msg.sent_in, msg.retries_left, msg.timeout_ms)
}

/// Fires `id`'s retransmission timer now instead of at its deadline, and
/// waits until the worker has handled what that sent (the peer must see a
/// repeated REQ while it still knows the connection).
fn fire_retransmit_now(id: &Arc<CmIdPriv>) {
    let timer = id.lock().inner.msg.as_ref().expect("a tracked MAD").timer;
    cancel_timer(crate::cm::Cm::process(), timer);
    crate::cm::send::retransmit_handler(id, timer);
    assert!(wait_for_queued_work(
        crate::cm::Cm::process(),
        Duration::from_secs(10)
    ));
}

/// B's REQ_RECEIVED takes no action (B's user thinks) and records the
/// REQ's response timeouts as B sees them: (local, remote).
fn b_keeps_reqs_unanswered(pair: &Pair) -> Arc<Mutex<Option<(u8, u8)>>> {
    let seen: Arc<Mutex<Option<(u8, u8)>>> = Arc::default();
    let keep = seen.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |_, ev| {
            if let EventParam::ReqRcvd(r) = &ev.param {
                *keep.lock() = Some((r.local_cm_response_timeout, r.remote_cm_response_timeout));
            }
            0
        }),
    );
    seen
}

fn open_with_ack_delay(ack_delay: u8) -> Arc<Device> {
    crate::cm::open_loop_device_with_ack_delay(&loop_name(), ack_delay).unwrap()
}

#[test]
fn convert_to_ms_saturates_at_iba_time_31() {
    // The kernel's values wherever a 5-bit field can hold t.
    for t in 0..=31u8 {
        assert_eq!(convert_to_ms(t), 1 << t.saturating_sub(8), "t {t}");
    }
    assert_eq!(convert_to_ms(31), MAX_MS);
    for t in [32, 38, 39, 40, 63, 64, 200, 255] {
        assert_eq!(convert_to_ms(t), MAX_MS, "t {t}");
    }
}

#[test]
fn ack_timeout_stays_at_most_31_whatever_the_delay_and_lifetime() {
    for delay in [0, 15, 31, 32, 63, 255] {
        for lifetime in [0, 30, 31, 32, 39, 63, 255] {
            assert!(ack_timeout(delay, lifetime) <= 31, "{delay} {lifetime}");
        }
    }
    assert_eq!(ack_timeout(255, 0), 31);
    assert_eq!(ack_timeout(0, 255), 31);
}

#[test]
fn req_with_packet_life_time_39_is_retried_not_errored() {
    for packet_life_time in [39, 63, 255] {
        let pair = Pair::new();
        // The peer is unresponsive: its REP is lost, and it waits 2^23 ms
        // for an answer to it, ignoring the repeated REQs meanwhile.
        pair.loop_b().drop_next(attr::REP, u32::MAX).unwrap();
        let mut p = pair.req_params();
        p.primary_path.packet_life_time = packet_life_time;
        p.local_cm_response_timeout = 31;
        p.max_cm_retries = 2;
        send_req(&pair.active, &p).unwrap();
        let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
        wait_until("B's REP is lost", || pair.loop_b().sent(attr::REP) == 1);

        // 2 × the path's lifetime (as 31) + 2^(12 - 8) ms.
        let want = (IB_CM_REQ_SENT, 2, 2 * MAX_MS + 16);
        assert_eq!(tracked(&pair.active), want, "lifetime {packet_life_time}");
        for resent in 1..=2 {
            fire_retransmit_now(&pair.active);
            assert_eq!(pair.loop_a().sent(attr::REQ), 1 + resent);
            assert_eq!(pair.active.state(), IB_CM_REQ_SENT);
            assert_eq!(tracked(&pair.active).1, 2 - resent as u8);
        }
        assert_eq!(pair.rec.count(IB_CM_REQ_ERROR), 0);
        // Out of retries only now.
        fire_retransmit_now(&pair.active);
        let got = pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
        assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
        assert_eq!(pair.loop_a().sent(attr::REQ), 3);
        pair.finish(&[&passive]);
    }
}

#[test]
fn caller_response_timeouts_above_31_count_and_travel_as_31() {
    // (packet lifetime, the caller's response timeouts, the REQ's interval)
    for (lifetime, timeout, interval) in [
        (0, 255, 2 + MAX_MS),
        (0, 32, 2 + MAX_MS),
        (38, 255, 3 * MAX_MS),
        (31, 31, 3 * MAX_MS),
    ] {
        let pair = Pair::new();
        let seen = b_keeps_reqs_unanswered(&pair);
        let mut p = pair.req_params();
        p.primary_path.packet_life_time = lifetime;
        p.remote_cm_response_timeout = timeout;
        p.local_cm_response_timeout = timeout;
        send_req(&pair.active, &p).unwrap();
        let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
        let case = format!("lifetime {lifetime}, timeouts {timeout}");
        assert_eq!(
            tracked(&pair.active),
            (IB_CM_REQ_SENT, 3, interval),
            "{case}"
        );
        // The REQ carries 31 (the largest 5-bit value), not the low bits,
        // and the peer's REP would wait 2^23 ms.
        assert_eq!(*seen.lock(), Some((31, 31)), "{case}");
        assert_eq!(passive.lock().inner.timeout_ms, MAX_MS, "{case}");
        pair.finish(&[&passive]);
    }
}

#[test]
fn mra_from_a_malicious_peer_with_every_service_timeout_bit_set_waits_2_23_ms_more() {
    // (packet lifetime of the REQ's path, the stretched interval: the MRA's
    // service timeout (31) + the path's ACK timeout, lifetime + 1 as 31)
    for (lifetime, interval) in [(0, MAX_MS + 1), (255, 2 * MAX_MS)] {
        let pair = Pair::new();
        b_keeps_reqs_unanswered(&pair);
        let mut p = pair.req_params();
        p.primary_path.packet_life_time = lifetime;
        send_req(&pair.active, &p).unwrap();
        let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
        let (b_id, a_id, tid) = {
            let a = pair.active.lock();
            (passive.lock().inner.local_id, a.inner.local_id, a.inner.tid)
        };
        let mut mra = Mra {
            local_comm_id: b_id,
            remote_comm_id: a_id,
            message_mraed: MsgResponse::Req,
            ..Mra::default()
        }
        .encode(tid);
        // The 5-bit field and the reserved bits after it, all ones.
        mra[CM_MRA_SERVICE_TIMEOUT.mad_offset()] = 0xff;
        pair.send_from(&pair.b, &pair.a, &mra);
        pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);

        let want = (IB_CM_MRA_REQ_RCVD, 3, interval);
        assert_eq!(tracked(&pair.active), want, "lifetime {lifetime}");
        fire_retransmit_now(&pair.active);
        assert_eq!(pair.loop_a().sent(attr::REQ), 2);
        assert_eq!(pair.active.state(), IB_CM_MRA_REQ_RCVD);
        pair.finish(&[&passive]);
    }
}

#[test]
fn mra_sent_with_a_service_timeout_above_31_carries_31_not_its_low_five_bits() {
    // The last one is delayed: the MRA goes with the REQ's first repeat.
    for service_timeout in [0x20, 0x40, 0x7f, IB_CM_MRA_FLAG_DELAY | 0x20] {
        let pair = Pair::new();
        pair.rec.on(
            IB_CM_REQ_RECEIVED,
            Arc::new(move |id, _| {
                send_mra(id, service_timeout, None).unwrap();
                0
            }),
        );
        let received: Arc<Mutex<Vec<u8>>> = Arc::default();
        let keep = received.clone();
        pair.rec.on(
            IB_CM_MRA_RECEIVED,
            Arc::new(move |_, ev| {
                if let EventParam::MraRcvd { service_timeout } = ev.param {
                    keep.lock().push(service_timeout);
                }
                0
            }),
        );
        send_req(&pair.active, &pair.req_params()).unwrap();
        let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
        pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
        let case = format!("service timeout {service_timeout:#x}");
        assert_eq!(received.lock()[0], 31, "{case}");
        // 2^23 ms for the MRA + 1 ms for the path's ACK timeout (lifetime 0).
        let (sent_in, _, interval) = tracked(&pair.active);
        assert_eq!(
            (sent_in, interval),
            (IB_CM_MRA_REQ_RCVD, MAX_MS + 1),
            "{case}"
        );
        pair.finish(&[&passive]);
    }
}

#[test]
fn req_from_the_wire_with_every_time_field_at_its_maximum_waits_2_23_ms() {
    let pair = Pair::new();
    let raw = Raw::open();
    let b_port = &pair.b.ports[0];
    let path = ReqPath {
        local_lid: raw.me.lid,
        remote_lid: b_port.lid,
        local_gid: raw.me.gid,
        remote_gid: b_port.gids[0].gid,
        subnet_local: true,
        local_ack_timeout: 0x1f,
        ..ReqPath::default()
    };
    let req = Req {
        primary_path: path,
        alternate_path: ReqPath { sl: 1, ..path },
        local_comm_id: 0x0102_0304,
        service_id: SERVICE_ID,
        local_ca_guid: raw.me.node_guid,
        local_qpn: 0x77,
        pkey: 0xffff,
        transport_service_type: TransportType::Rc,
        starting_psn: 0x3000,
        path_mtu: b_port.mtu,
        max_cm_retries: 3,
        remote_cm_response_timeout: 0x1f,
        local_cm_response_timeout: 0x1f,
        ..Req::default()
    };
    raw.send_to(&pair.b, &req.encode(9));
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    raw.wait_for(1); // B's REP

    // The REP waits 2^23 ms for the RTU; the QP's ACK timeouts and the
    // timewait come from the paths' lifetime (30) + 1.
    assert_eq!(tracked(&passive), (IB_CM_REP_SENT, 3, MAX_MS));
    assert_eq!(init_qp_attr(&passive, QPS_RTS).unwrap().timeout, 31);
    assert_eq!(init_qp_attr(&passive, QPS_RTR).unwrap().alt_timeout, 31);
    assert_eq!(convert_to_ms(passive.lock().inner.av.timeout), MAX_MS);
    pair.finish(&[&passive]);
}

#[test]
fn ca_ack_delay_above_31_goes_into_the_rep_as_31_not_its_low_five_bits() {
    for b_ack_delay in [32, 255] {
        // A's delay above 31 too: the REQ's local ACK timeout is 31.
        let pair = Pair::open_both(open_with_ack_delay(255), open_with_ack_delay(b_ack_delay));
        let passive = pair.connect();
        let case = format!("B's ack delay {b_ack_delay}");
        assert_eq!(pair.active.lock().inner.target_ack_delay, 31, "{case}");
        for id in [&pair.active, &passive] {
            assert_eq!(id.lock().inner.av.timeout, 31, "{case}");
            assert_eq!(init_qp_attr(id, QPS_RTS).unwrap().timeout, 31, "{case}");
        }
        pair.finish(&[&passive]);
    }
}

#[test]
fn ib_cm_init_qp_attr_of_paths_with_packet_life_time_255_has_timeout_31() {
    let pair = Pair::new();
    let mut p = pair.req_params();
    p.primary_path.packet_life_time = 255;
    p.alternate_path = Some(Path {
        packet_life_time: 255,
        ..pair.alt_path()
    });
    send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    for (side, id) in [("active", &pair.active), ("passive", &passive)] {
        assert_eq!(init_qp_attr(id, QPS_RTS).unwrap().timeout, 31, "{side}");
        assert_eq!(init_qp_attr(id, QPS_RTR).unwrap().alt_timeout, 31, "{side}");
        // The timewait's length.
        assert_eq!(convert_to_ms(id.lock().inner.av.timeout), MAX_MS, "{side}");
    }
    pair.finish(&[&passive]);
}
