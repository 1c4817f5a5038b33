//! Per-port counters after known exchanges (the kernel's sysfs counters plus
//! this library's drop counts).

use std::time::Duration;

use super::*;
use crate::cm::counters::{Snapshot, attr_index};
use crate::cm::{send_drep, send_dreq};
use crate::wire::{Dreq, attr};

fn snapshot(device: &Device) -> Snapshot {
    device.counters(1).unwrap().snapshot()
}

fn at(counts: &[u64; 11], attr_id: u16) -> u64 {
    counts[attr_index(attr_id).unwrap()]
}

#[test]
fn counters_count_one_connect_and_disconnect() {
    let pair = Pair::new();
    let passive = pair.connect();
    answer_all_dreqs(&pair);
    send_dreq(&pair.active, Some(&[1])).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_TIMEWAIT_EXIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    let (a, b) = (snapshot(&pair.a), snapshot(&pair.b));
    for (attr_id, sent_by_a) in [
        (attr::REQ, true),
        (attr::RTU, true),
        (attr::DREQ, true),
        (attr::REP, false),
        (attr::DREP, false),
    ] {
        let (tx, rx) = if sent_by_a { (&a, &b) } else { (&b, &a) };
        assert_eq!(at(&tx.tx_msgs, attr_id), 1, "{}", attr::name(attr_id));
        assert_eq!(at(&rx.rx_msgs, attr_id), 1, "{}", attr::name(attr_id));
    }
    assert_eq!(a.tx_retries, [0; 11]);
    assert_eq!(b.rx_duplicates, [0; 11]);
    assert_eq!((a.rx_malformed, a.rx_unmatched), (0, 0));
    pair.finish(&[&passive]);
}

fn answer_all_dreqs(pair: &Pair) {
    pair.rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(|id, _| {
            send_drep(id, None).unwrap();
            0
        }),
    );
}

#[test]
fn counters_count_retries_and_duplicates_like_the_kernel() {
    let pair = Pair::new();
    let passive = pair.connect();
    answer_all_dreqs(&pair);
    pair.loop_b().drop_next(attr::DREP, 1).unwrap();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    let (a, b) = (snapshot(&pair.a), snapshot(&pair.b));
    // A's DREQ went twice (one retry); B saw the second as a duplicate in
    // TIMEWAIT and re-sent its DREP, booked as a message plus a retry.
    assert_eq!(at(&a.tx_msgs, attr::DREQ), 2);
    assert_eq!(at(&a.tx_retries, attr::DREQ), 1);
    assert_eq!(at(&b.rx_duplicates, attr::DREQ), 1);
    assert_eq!(at(&b.tx_msgs, attr::DREP), 3);
    assert_eq!(at(&b.tx_retries, attr::DREP), 1);
    pair.finish(&[&passive]);
}

#[test]
fn counters_count_stateless_drep_malformed_and_unmatched_mads() {
    let pair = Pair::new();
    let raw = Raw::open();
    raw.send_to(&pair.b, &Dreq::default().encode(1)); // unknown connection
    raw.wait_for(1);
    let mut bad_class = Dreq::default().encode(2);
    bad_class[1] = 0x04;
    raw.send_to(&pair.b, &bad_class);
    let mut bad_version = Dreq::default().encode(3);
    bad_version[2] = 1;
    raw.send_to(&pair.b, &bad_version);
    let mut bad_method = Dreq::default().encode(4);
    bad_method[3] = 0x81;
    raw.send_to(&pair.b, &bad_method);
    raw.send_to(&pair.b, &crate::wire::Drep::default().encode(5)); // no such id
    let mut unknown_attr = Dreq::default().encode(6);
    unknown_attr[16..18].copy_from_slice(&0x0001u16.to_be_bytes());
    raw.send_to(&pair.b, &unknown_attr);
    std::thread::sleep(Duration::from_millis(50));
    let b = snapshot(&pair.b);
    assert_eq!(at(&b.rx_msgs, attr::DREQ), 1);
    assert_eq!(at(&b.rx_duplicates, attr::DREQ), 1);
    assert_eq!(at(&b.tx_msgs, attr::DREP), 2);
    assert_eq!(at(&b.tx_retries, attr::DREP), 1);
    assert_eq!(b.rx_malformed, 4);
    assert_eq!(b.rx_unmatched, 1);
    assert_eq!(raw.received_after(Duration::from_millis(10)), 1);
    pair.finish(&[]);
}
