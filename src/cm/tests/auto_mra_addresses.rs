//! The automatic MRA (issue 33): which duplicates get one. Only a
//! retransmission from the address the request came from, timed from when it
//! arrived, gets an MRA; the daemon lets it through; the extreme response
//! timeouts neither overflow nor panic.

use std::sync::Arc;
use std::time::Duration;

use super::auto_mra::{counters, impatient_with, of};
use super::*;
use crate::cm::mra::AUTO_MRA_DEFAULT;
use crate::cm::send_req;
use crate::wire::{Mra, Rep, Req, attr, parse_header};

/// A REQ whose sender resends it soon: 128 ms response timeouts both ways
/// (a retransmission is one from 64 ms on), many retries.
fn impatient(pair: &Pair) -> ReqParams {
    impatient_with(pair, 15)
}

/// Past half of [`impatient`]'s 128 ms: a duplicate now is a retransmission.
const PAST_HALF: Duration = Duration::from_millis(100);

/// What `raw` got back: the attributes and the MRAs among them.
fn got_back(raw: &Raw) -> Vec<(u16, Option<Mra>)> {
    let n = raw.received_after(Duration::from_millis(300));
    (1..=n)
        .map(|i| {
            let mad = raw.wait_for(i);
            let attr_id = parse_header(&mad).unwrap().0.attr_id;
            (
                attr_id,
                Mra::decode(&mad).ok().filter(|_| attr_id == attr::MRA),
            )
        })
        .collect()
}

// ---- An automatic MRA answers only the address the request came from. A
// duplicate is recognised by comm ID and CA GUID (REQ) or both comm IDs
// (REP), nothing about where it came from; the kernel answers a duplicate
// in REQ_RCVD / REP_RCVD with nothing, so there a third host that sends one
// learns nothing and gets nothing. An automatic MRA to any sender would give
// it one carrying our local comm ID (the half of the pair it lacks to forge
// a DREQ, a REJ or a LAP the connection will take), and a spoofed source
// address would make us send MRAs to whoever it names.

/// A third host sends a copy of A's REQ (A's comm ID and CA GUID, read off
/// the wire or guessed) while B's user holds the REQ: it must get nothing,
/// while A's own retransmission still gets its MRA.
#[test]
fn a_duplicate_req_from_another_address_gets_no_mra() {
    let pair = Pair::new();
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // the user is slow
    let p = impatient(&pair);
    send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let (b_id, a_id, a_guid) = {
        let l = passive.lock();
        (l.inner.local_id, l.inner.remote_id, l.inner.remote_ca_guid)
    };
    std::thread::sleep(PAST_HALF);
    let third = Raw::open();
    let mut copy = Req {
        local_comm_id: a_id,
        service_id: SERVICE_ID,
        local_ca_guid: a_guid,
        local_qpn: ACTIVE_QPN,
        pkey: 0xffff,
        path_mtu: 3,
        remote_cm_response_timeout: 15,
        local_cm_response_timeout: 15,
        max_cm_retries: 15,
        ..Req::default()
    };
    third.address_req(&mut copy, &pair.b);
    let dups = counters(&pair.b).rx_duplicates[of(attr::REQ)];
    third.send_to(&pair.b, &copy.encode(0x3d));
    wait_until("B took the third host's copy as a duplicate", || {
        counters(&pair.b).rx_duplicates[of(attr::REQ)] > dups
    });
    let leaked: Vec<_> = got_back(&third)
        .into_iter()
        .filter_map(|(_, mra)| mra)
        .map(|mra| mra.local_comm_id)
        .collect();
    assert!(
        leaked.is_empty(),
        "the third host got MRAs carrying B's comm ID {leaked:#x?} (B's is {b_id:#x})"
    );
    // A's own retransmissions still get theirs.
    let mra = pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REQ_RCVD);
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    pair.finish(&[&passive]);
}

/// The REP leg: A's user holds its RTU (REP_RCVD); a third host sends a
/// copy of B's REP (both comm IDs): it must get no MRA of REP, while B's
/// own retransmission of the REP still gets one.
#[test]
fn a_duplicate_rep_from_another_address_gets_no_mra() {
    let pair = Pair::new();
    pair.a.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0)); // no RTU yet
    let p = impatient(&pair);
    send_req(&pair.active, &p).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    let passive = pair.rec.nth_new_id(1);
    let (a_id, b_id) = {
        let l = pair.active.lock();
        (l.inner.local_id, l.inner.remote_id)
    };
    std::thread::sleep(PAST_HALF);
    let third = Raw::open();
    let copy = Rep {
        local_comm_id: b_id,
        remote_comm_id: a_id,
        local_qpn: PASSIVE_QPN,
        ..Rep::default()
    };
    let dups = counters(&pair.a).rx_duplicates[of(attr::REP)];
    third.send_to(&pair.a, &copy.encode(0x3e));
    wait_until("A took the third host's copy as a duplicate", || {
        counters(&pair.a).rx_duplicates[of(attr::REP)] > dups
    });
    let leaked: Vec<_> = got_back(&third)
        .into_iter()
        .filter_map(|(_, mra)| mra)
        .map(|mra| (mra.local_comm_id, mra.message_mraed))
        .collect();
    assert!(leaked.is_empty(), "the third host got MRAs {leaked:#x?}");
    let mra = pair.rec.wait(Some(&passive), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REP_RCVD);
    assert_eq!(pair.active.state(), IB_CM_REP_RCVD);
    crate::cm::send_rtu(&pair.active, &[]).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    pair.finish(&[&passive]);
}

// ---- Through ibcmd: the daemon lets a tenant send an MRA
// of REQ only for a REQ it routed to that tenant, towards the address it
// came from, while open (`rules::check_send`); an MRA of REP needs the
// tenant's own comm ID. The automatic MRA answers a duplicate the daemon
// has just routed (which reopens the request if it had been forgotten),
// from the id's own comm ID, to the duplicate's address: it passes, and
// the daemon counts it as sent, not spoofed or refused.

fn refused_by(daemon: &super::switched::Daemon) -> (u64, u64) {
    use crate::switch::SwitchCounter::{TxRefused, TxSpoofed};
    (
        daemon.switch.counter(TxSpoofed),
        daemon.switch.counter(TxRefused),
    )
}

#[test]
fn an_auto_mra_of_req_passes_the_switch_daemon() {
    let daemon = super::switched::Daemon::start(3950);
    let b = crate::cm::open_device(&daemon.name).unwrap();
    let pair = Pair::open(b);
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    send_req(&pair.active, &impatient(&pair)).unwrap();
    let mra = pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REQ_RCVD);
    assert!(counters(&pair.b).tx_auto_mra >= 1);
    assert_eq!(refused_by(&daemon), (0, 0));
    let passive = pair.rec.nth_new_id(1);
    crate::cm::send_rep(&passive, &rep_params(&[])).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(refused_by(&daemon), (0, 0));
    pair.finish(&[&passive]);
}

/// B (behind the daemon) connects to a listener on A and holds its RTU.
#[test]
fn an_auto_mra_of_rep_passes_the_switch_daemon() {
    let daemon = super::switched::Daemon::start(3951);
    let b = crate::cm::open_device(&daemon.name).unwrap();
    let pair = Pair::open(b);
    let listener = crate::cm::create_id(&pair.a, pair.rec.handler()).unwrap();
    crate::cm::listen(&listener, SERVICE_ID).unwrap();
    let active = crate::cm::create_id(&pair.b, pair.rec.handler()).unwrap();
    let to_b = impatient(&pair);
    let p = ReqParams {
        primary_path: Path {
            dgid: to_b.primary_path.sgid,
            sgid: to_b.primary_path.dgid,
            dlid: to_b.primary_path.slid,
            slid: to_b.primary_path.dlid,
            ..to_b.primary_path
        },
        ..to_b
    };
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0)); // no RTU yet
    send_req(&active, &p).unwrap();
    pair.rec.wait(Some(&active), IB_CM_REP_RECEIVED);
    let passive = pair.rec.nth_new_id(1);
    let mra = pair.rec.wait(Some(&passive), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REP_RCVD);
    assert!(counters(&pair.b).tx_auto_mra >= 1);
    assert_eq!(refused_by(&daemon), (0, 0));
    crate::cm::send_rtu(&active, &[]).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(refused_by(&daemon), (0, 0));
    pair.finish(&[&passive, &listener, &active]);
}

// ---- Timeouts and states: a REQ's response timeout of 31
// (2^23 ms) or 0 (1 ms) neither overflows nor panics; REP_SENT still
// ignores a duplicate REQ (its REP's own retransmission answers it).

/// A REQ from `raw` to B's listener, with response timeout `timeout`; the
/// REP B would send waits 4 s for its RTU before it is resent.
fn raw_req(pair: &Pair, raw: &Raw, comm_id: u32, timeout: u8) -> Mad {
    let mut req = Req {
        local_comm_id: comm_id,
        service_id: SERVICE_ID,
        // Its own (QPN, CA GUID): tests run at once, and the stale
        // connection check is the process's.
        local_ca_guid: 0x7e57_0000 | u64::from(comm_id),
        local_qpn: comm_id,
        pkey: 0xffff,
        path_mtu: 3,
        remote_cm_response_timeout: timeout,
        local_cm_response_timeout: 20,
        max_cm_retries: 15,
        ..Req::default()
    };
    raw.address_req(&mut req, &pair.b);
    req.encode(0x51)
}

/// What B's CM sent `raw` in answer to one more copy of `mad`.
fn answers_to_a_copy(pair: &Pair, raw: &Raw, mad: &Mad) -> Vec<(u16, Option<Mra>)> {
    let before = raw.received_after(Duration::ZERO);
    let dups = counters(&pair.b).rx_duplicates[of(attr::REQ)];
    raw.send_to(&pair.b, mad);
    wait_until("B took the copy", || {
        counters(&pair.b).rx_duplicates[of(attr::REQ)] > dups
    });
    got_back(raw).split_off(before)
}

#[test]
fn a_copy_of_a_req_with_timeout_31_gets_no_mra_and_with_timeout_0_gets_one_of_4() {
    let pair = Pair::new();
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    let raw = Raw::open();
    // 31: the peer resends after 2^23 ms; a copy 100 ms on is the fabric's.
    let slow = raw_req(&pair, &raw, 0x31, 31);
    raw.send_to(&pair.b, &slow);
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    std::thread::sleep(PAST_HALF);
    assert_eq!(answers_to_a_copy(&pair, &raw, &slow), []);
    assert_eq!(counters(&pair.b).tx_auto_mra, 0);
    assert_eq!(
        crate::cm::mra::AUTO_MRA_DEFAULT.service_timeout(31),
        Some(31)
    );
    // 0: 1 ms, half of it 0: even a copy right behind gets an MRA, of 0 + 4
    // (1 ms, plus the path's ack timeout at the peer): it stretches the
    // peer's wait no further than its own interval, one MAD for one.
    let fast = raw_req(&pair, &raw, 0x30, 0);
    raw.send_to(&pair.b, &fast);
    let passive2 = pair.rec.nth_new_id(2);
    let got = answers_to_a_copy(&pair, &raw, &fast);
    assert_eq!(got.len(), 1, "{got:?}");
    let mra = got[0].1.as_ref().expect("an MRA");
    assert_eq!((mra.remote_comm_id, mra.service_timeout), (0x30, 4));
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    assert_eq!(passive2.state(), IB_CM_REQ_RCVD);
    pair.finish(&[&passive, &passive2]);
}

#[test]
fn rep_sent_ignores_a_duplicate_req() {
    let pair = Pair::new();
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    let raw = Raw::open();
    let mad = raw_req(&pair, &raw, 0x5e, 15);
    raw.send_to(&pair.b, &mad);
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    crate::cm::send_rep(&passive, &rep_params(&[])).unwrap();
    assert_eq!(raw.received_after(Duration::from_millis(50)), 1, "the REP");
    std::thread::sleep(PAST_HALF);
    assert_eq!(answers_to_a_copy(&pair, &raw, &mad), []);
    assert_eq!(passive.state(), IB_CM_REP_SENT);
    assert_eq!(counters(&pair.b).tx_auto_mra, 0);
    pair.finish(&[&passive]);
}

// ---- "When the original came" is when it arrived, not when the worker
// took it. The worker takes received MADs in order, after the handler it
// runs; a handler that holds it (worker mode: another id's REQ_RECEIVED
// doing slow setup) leaves a REQ and its retransmissions queued, and then
// takes them microseconds apart: timed from then, every retransmission
// would look like the fabric's copy and be dropped, as the kernel drops it,
// and a requester with few retries left would time out although B's CM was
// there to answer for its user. So arrival is stamped when the MAD is
// queued.

/// B's worker is held 450 ms by the REQ_RECEIVED handler of a first
/// connection; meanwhile a remote requester (its own timers: a raw port)
/// sends its REQ (128 ms response timeout) and retransmits it at 128, 256
/// and 384 ms. B's user then holds that REQ: each retransmission must get
/// an MRA.
#[test]
fn retransmissions_queued_behind_a_busy_worker_get_an_mra() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let pair = Pair::new();
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    let first = Arc::new(AtomicBool::new(true));
    let (started_tx, started) = std::sync::mpsc::channel();
    let started_tx = parking_lot::Mutex::new(started_tx);
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |_, _| {
            if first.swap(false, Ordering::SeqCst) {
                started_tx.lock().send(()).unwrap();
                std::thread::sleep(Duration::from_millis(450)); // slow setup
            }
            0 // answered later (never, here)
        }),
    );
    send_req(&pair.active, &pair.req_params()).unwrap();
    started.recv_timeout(WAIT).unwrap();
    let raw = Raw::open();
    let req = raw_req(&pair, &raw, 0xb5, 15);
    let t0 = std::time::Instant::now();
    for n in 0..4 {
        std::thread::sleep(
            (t0 + n * Duration::from_millis(128))
                .saturating_duration_since(std::time::Instant::now()),
        );
        raw.send_to(&pair.b, &req);
    }
    let queued = pair.rec.nth_new_id(2);
    wait_until("B took the three retransmissions", || {
        counters(&pair.b).rx_duplicates[of(attr::REQ)] >= 3
    });
    let mras = got_back(&raw)
        .into_iter()
        .filter(|(_, mra)| mra.is_some())
        .count();
    assert_eq!(mras, 3, "MRAs for 3 retransmissions taken late");
    assert_eq!(queued.state(), IB_CM_REQ_RCVD);
    let first_id = pair.rec.nth_new_id(1);
    pair.finish(&[&first_id, &queued]);
}

/// M1's check on RoCE (every MAD with a GRH: the sender's GID is compared,
/// not only the LID): the requester's own retransmission still gets its
/// automatic MRA.
#[test]
fn on_roce_the_requesters_own_retransmission_gets_an_mra() {
    let roce = || crate::cm::open_roce_loop_device(&loop_name()).unwrap();
    let pair = Pair::open_both(roce(), roce());
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    send_req(&pair.active, &impatient(&pair)).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let mra = pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REQ_RCVD);
    let from = passive.lock().inner.peer_msg.map(|m| m.came_with_grh());
    assert_eq!(from, Some(true), "the REQ came with a GRH");
    pair.finish(&[&passive]);
}
