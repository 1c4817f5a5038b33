//! DREQ / DREP / timewait: `ib_send_cm_dreq`, `ib_send_cm_drep`,
//! `cm_dreq_handler`, `cm_drep_handler`, `cm_enter_timewait`,
//! `cm_timewait_handler`, `cm_process_send_error`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::cm::{send_drep, send_dreq};
use crate::errno::{EINVAL, ENETDOWN};
use crate::wire::{Drep, Dreq, attr, parse_header};

/// The passive side answers every DREQ with a DREP carrying `pd`.
fn answer_dreq_with(rec: &Recorder, pd: Vec<u8>) {
    rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(move |id, _| {
            send_drep(id, Some(&pd)).unwrap();
            0
        }),
    );
}

#[test]
fn send_dreq_established_carries_220_bytes_to_peer_and_drep_carries_224_back() {
    let pair = Pair::new();
    let passive = pair.connect();
    let dreq_pd = pattern(220, 1);
    let drep_pd = pattern(224, 2);
    answer_dreq_with(&pair.rec, drep_pd.clone());

    send_dreq(&pair.active, Some(&dreq_pd)).unwrap();
    assert_eq!(pair.active.state(), IB_CM_DREQ_SENT);

    let got = pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(got.state, IB_CM_DREQ_RCVD);
    assert_eq!(got.private_data.unwrap(), dreq_pd);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.state, IB_CM_TIMEWAIT);
    assert_eq!(got.private_data.unwrap(), drep_pd);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(passive.state(), IB_CM_IDLE);
    pair.finish(&[&passive]);
}

#[test]
fn send_dreq_over_220_bytes_is_einval_and_state_unchanged() {
    let pair = Pair::new();
    let passive = pair.connect();
    assert_eq!(send_dreq(&pair.active, Some(&[0; 221])), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert_eq!(pair.loop_a().sent(attr::DREQ), 0);
    pair.finish(&[&passive]);
}

#[test]
fn send_dreq_null_data_means_no_private_data() {
    let pair = Pair::new();
    let passive = pair.connect();
    answer_dreq_with(&pair.rec, Vec::new());
    send_dreq(&pair.active, None).unwrap();
    let got = pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(got.private_data.unwrap(), vec![0; 220]);
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    pair.finish(&[&passive]);
}

#[test]
fn send_dreq_in_every_non_established_state_is_einval_and_state_unchanged() {
    let pair = Pair::new();
    // IDLE and LISTEN.
    assert_eq!(send_dreq(&pair.active, None), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(send_dreq(&pair.listener, None), Err(EINVAL));
    assert_eq!(pair.listener.state(), IB_CM_LISTEN);
    // DREQ_SENT (the DREQ is dropped, so the state holds), then DREQ_RCVD on
    // the peer's side of a second DREQ exchange is covered below.
    let passive = pair.connect();
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    assert_eq!(send_dreq(&pair.active, None), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_DREQ_SENT);
    pair.finish(&[&passive]);

    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(send_dreq(&passive, None), Err(EINVAL));
    assert_eq!(passive.state(), IB_CM_DREQ_RCVD);
    send_drep(&passive, None).unwrap();
    assert_eq!(send_dreq(&passive, None), Err(EINVAL));
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    pair.finish(&[&passive]);
}

#[test]
fn send_dreq_send_failure_enters_timewait_and_returns_the_error() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.loop_a().fail_next(attr::DREQ, 1);
    assert_eq!(send_dreq(&pair.active, None), Err(ENETDOWN));
    assert_eq!(pair.active.state(), IB_CM_TIMEWAIT);
    // No DREQ_ERROR in this path; TIMEWAIT_EXIT follows.
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    assert_eq!(
        pair.rec.events_of(&pair.active).last(),
        Some(&IB_CM_TIMEWAIT_EXIT)
    );
    assert!(!pair.rec.events_of(&pair.active).contains(&IB_CM_DREQ_ERROR));
    pair.finish(&[&passive]);
}

#[test]
fn dreq_lost_once_is_retransmitted_and_completes() {
    let pair = Pair::new();
    let passive = pair.connect();
    answer_dreq_with(&pair.rec, Vec::new());
    pair.loop_a().drop_next(attr::DREQ, 1).unwrap();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(pair.loop_a().sent(attr::DREQ), 2);
    pair.finish(&[&passive]);
}

#[test]
fn cm_process_send_error_dreq_sent_gives_dreq_error_after_max_cm_retries_then_timewait_exit() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(got.state, IB_CM_TIMEWAIT);
    // 1 + max_cm_retries (3) transmissions.
    assert_eq!(pair.loop_a().sent(attr::DREQ), 4);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.finish(&[&passive]);
}

#[test]
fn send_drep_outside_dreq_rcvd_is_einval_and_state_unchanged() {
    let pair = Pair::new();
    assert_eq!(send_drep(&pair.active, None), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    let passive = pair.connect();
    assert_eq!(send_drep(&passive, None), Err(EINVAL));
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    assert_eq!(send_drep(&pair.active, None), Err(EINVAL));
    assert_eq!(pair.active.state(), IB_CM_DREQ_SENT);
    pair.finish(&[&passive]);
}

#[test]
fn send_drep_over_224_bytes_is_einval_then_a_valid_drep_works() {
    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(send_drep(&passive, Some(&[0; 225])), Err(EINVAL));
    assert_eq!(passive.state(), IB_CM_DREQ_RCVD);
    send_drep(&passive, Some(&[7; 224])).unwrap();
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), vec![7; 224]);
    pair.finish(&[&passive]);
}

#[test]
fn send_drep_enters_timewait_even_if_the_send_fails() {
    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    pair.loop_b().fail_next(attr::DREP, 1);
    assert_eq!(send_drep(&passive, None), Err(ENETDOWN));
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    pair.finish(&[&passive]);
}

#[test]
fn cm_dreq_handler_timewait_resends_drep_with_stored_data_and_no_new_event() {
    let pair = Pair::new();
    let passive = pair.connect();
    let drep_pd = pattern(224, 9);
    answer_dreq_with(&pair.rec, drep_pd.clone());
    pair.loop_b().drop_next(attr::DREP, 1).unwrap();
    send_dreq(&pair.active, Some(&[1, 2, 3])).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), drep_pd);
    assert_eq!(pair.loop_b().sent(attr::DREP), 2);
    assert_eq!(pair.loop_a().sent(attr::DREQ), 2);
    assert_eq!(pair.rec.count(IB_CM_DREQ_RECEIVED), 1);
    pair.finish(&[&passive]);
}

#[test]
fn cm_dreq_handler_dreq_rcvd_drops_duplicate_dreq() {
    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    // Unanswered: A retransmits; B stays in DREQ_RCVD with one event.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pair.loop_a().sent(attr::DREQ) < 3 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(passive.state(), IB_CM_DREQ_RCVD);
    assert_eq!(pair.rec.count(IB_CM_DREQ_RECEIVED), 1);
    pair.finish(&[&passive]);
}

#[test]
fn cm_dreq_handler_dreq_sent_simultaneous_disconnect_both_get_dreq_received() {
    let pair = Pair::new();
    let passive = pair.connect();
    answer_dreq_with(&pair.rec, Vec::new());
    // Hold both DREQs back until both sides sent theirs.
    pair.loop_a().drop_next(attr::DREQ, 1).unwrap();
    send_dreq(&pair.active, None).unwrap();
    send_dreq(&passive, None).unwrap();
    // B's DREQ reaches A in DREQ_SENT: A cancels its DREQ, moves to DREQ_RCVD
    // and answers; B gets the DREP in DREQ_SENT.
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREQ_RECEIVED);
    assert_eq!(got.state, IB_CM_DREQ_RCVD);
    pair.rec.wait(Some(&passive), IB_CM_DREP_RECEIVED);
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    pair.finish(&[&passive]);
}

#[test]
fn cm_dreq_handler_qpn_mismatch_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    let raw = Raw::open();
    let (a_id, b_id) = {
        let l = passive.lock();
        (l.inner.remote_id, l.inner.local_id)
    };
    let dreq = Dreq {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        remote_qpn: PASSIVE_QPN ^ 1,
        ..Dreq::default()
    };
    raw.send_to(&pair.b, &dreq.encode(7));
    assert_eq!(raw.received_after(Duration::from_millis(50)), 0);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    assert_eq!(pair.rec.count(IB_CM_DREQ_RECEIVED), 0);
    pair.finish(&[&passive]);
}

#[test]
fn cm_issue_drep_answers_unknown_dreq_with_swapped_ids_and_its_tid() {
    let pair = Pair::new();
    let raw = Raw::open();
    let dreq = Dreq {
        local_comm_id: 0x5a5a_0000,
        remote_comm_id: 0x1234_5678,
        remote_qpn: 0x11,
        ..Dreq::default()
    };
    raw.send_to(&pair.b, &dreq.encode(0x0000_0008_0000_1000));
    let reply = raw.wait_for(1);
    let (header, _) = parse_header(&reply).unwrap();
    assert_eq!(header.attr_id, attr::DREP);
    assert_eq!(header.tid, 0x0000_0008_0000_1000);
    let drep = Drep::decode(&reply).unwrap();
    assert_eq!(drep.local_comm_id, 0x1234_5678);
    assert_eq!(drep.remote_comm_id, 0x5a5a_0000);
    assert_eq!(drep.private_data, [0; 224]);
    pair.finish(&[]);
}

#[test]
fn cm_drep_handler_drops_drep_outside_dreq_sent_and_dreq_rcvd() {
    let pair = Pair::new();
    let passive = pair.connect();
    let raw = Raw::open();
    let (b_id, a_id) = {
        let l = passive.lock();
        (l.inner.local_id, l.inner.remote_id)
    };
    let drep = Drep {
        local_comm_id: b_id,
        remote_comm_id: a_id,
        ..Drep::default()
    };
    raw.send_to(&pair.a, &drep.encode(1));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert_eq!(pair.rec.count(IB_CM_DREP_RECEIVED), 0);
    pair.finish(&[&passive]);
}

#[test]
fn cm_timewait_handler_exits_after_convert_to_ms_of_av_timeout() {
    let pair = Pair::new();
    let passive = pair.connect();
    answer_dreq_with(&pair.rec, Vec::new());
    // Loop devices report a CA ACK delay of 15 and packet lifetime 0:
    // av.timeout 15 on both sides, so timewait lasts 1 << 7 = 128 ms.
    assert_eq!(pair.active.lock().inner.av.timeout, 15);
    assert_eq!(passive.lock().inner.av.timeout, 15);
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    let entered = Instant::now();
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    assert!(entered.elapsed() >= Duration::from_millis(120));
    pair.finish(&[&passive]);
}

#[test]
fn dreq_tid_is_formed_from_hi_tid_and_local_id_and_drep_echoes_it() {
    let pair = Pair::new();
    let passive = pair.connect();
    let raw = Raw::open();
    // Point A's connection at the raw endpoint to see its DREQ on the wire.
    let local_id = {
        let mut l = pair.active.lock();
        l.inner.av.addr.dgid = raw.me.gid;
        l.inner.local_id
    };
    send_dreq(&pair.active, Some(&[0xde, 0xad, 0xbe, 0xef])).unwrap();
    let dreq = raw.wait_for(1);
    let (header, _) = parse_header(&dreq).unwrap();
    assert_eq!(header.tid, (1u64 << 32) | u64::from(local_id.to_be()));
    let decoded = Dreq::decode(&dreq).unwrap();
    assert_eq!(decoded.local_comm_id, local_id);
    assert_eq!(decoded.remote_qpn, PASSIVE_QPN);
    assert_eq!(decoded.private_data[..4], [0xde, 0xad, 0xbe, 0xef]);
    pair.finish(&[&passive]);
}

#[test]
fn set_disconnect_timeout_bounds_an_unanswered_dreq_and_keeps_timewait() {
    let pair = Pair::new();
    let passive = pair.connect();
    assert_eq!(
        crate::cm::set_disconnect_timeout(&pair.active, 0, 1),
        Err(EINVAL)
    );
    assert_eq!(
        crate::cm::set_disconnect_timeout(&pair.active, 600_001, 1),
        Err(EINVAL)
    );
    crate::cm::set_disconnect_timeout(&pair.active, 5, 2).unwrap();
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(pair.loop_a().sent(attr::DREQ), 3); // 1 + max_retries
    // Timewait is the kernel's, whatever the DREQ's bound.
    let entered = Instant::now();
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    assert!(entered.elapsed() >= Duration::from_millis(100));
    pair.finish(&[&passive]);
}

#[test]
fn destroy_never_waits_for_the_peer_even_with_a_long_dreq_schedule() {
    let pair = Pair::new();
    let passive = pair.connect();
    crate::cm::set_disconnect_timeout(&pair.active, 600_000, 255).unwrap();
    pair.loop_a().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&pair.active, None).unwrap();
    let started = Instant::now();
    crate::cm::destroy_id(&pair.active, 0);
    // Bounded by a running handler of the id, not by the network: far below
    // the 600 s retransmission interval.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!pair.rec.events_of(&pair.active).contains(&IB_CM_DREQ_ERROR));
    pair.finish(&[&passive]);
}
