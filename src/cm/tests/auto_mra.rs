//! Issue 33: the automatic MRA. A duplicate REQ (REP) that finds its id in
//! REQ_RCVD (REP_RCVD), its user not having answered, gets an MRA instead
//! of the kernel's silent drop, so a peer waits for a side that is behind
//! instead of timing out. The id stays where it is: the user's later REP,
//! REJ or MRA are the kernel's. `AutoMra::Off` is the kernel's drop; the
//! tests named after the kernel's branch show it failing the same
//! connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_CONSUMER_DEFINED;
use crate::cm::counters::{Snapshot, attr_index};
use crate::cm::mra::{AUTO_MRA_DEFAULT, AutoMra};
use crate::cm::path::{convert_to_ms, req_timeout_ms};
use crate::cm::worker::process_device_events;
use crate::cm::{prepare_mra, send_mra, send_rej, send_rep, send_req, send_rtu};
use crate::log::capture::Capture;
use crate::wire::{Mra, MsgResponse, Req, attr, parse_header};

pub(super) fn counters(device: &Device) -> Snapshot {
    device.counters(1).unwrap().snapshot()
}

pub(super) fn of(attr_id: u16) -> usize {
    attr_index(attr_id).unwrap()
}

/// A REQ whose sender gives up soon: 128 ms response timeouts both ways,
/// two retries.
fn impatient(pair: &Pair) -> ReqParams {
    impatient_with(pair, 2)
}

/// A REQ with 128 ms response timeouts both ways and `max_cm_retries`.
pub(super) fn impatient_with(pair: &Pair, max_cm_retries: u8) -> ReqParams {
    ReqParams {
        remote_cm_response_timeout: 15,
        local_cm_response_timeout: 15,
        max_cm_retries,
        ..pair.req_params()
    }
}

/// How long the active side of `p` waits for an answer to its REQ when
/// nothing answers (1 + retries transmissions).
fn req_patience(p: &ReqParams) -> Duration {
    let interval = req_timeout_ms(
        p.primary_path.packet_life_time,
        p.remote_cm_response_timeout,
    );
    Duration::from_millis(u64::from(interval) * (1 + u64::from(p.max_cm_retries)))
}

/// How long the passive side waits for an RTU to its REP (the REQ's local
/// response timeout, 1 + retries transmissions).
fn rep_patience(p: &ReqParams) -> Duration {
    let interval = convert_to_ms(p.local_cm_response_timeout);
    Duration::from_millis(u64::from(interval) * (1 + u64::from(p.max_cm_retries)))
}

fn sleep_until(when: Instant) {
    std::thread::sleep(when.saturating_duration_since(Instant::now()));
}

/// Runs B's (FD mode) handlers until `n` events were taken.
fn take_events(b: &Device, n: usize) {
    let taken = std::cell::Cell::new(0);
    wait_until(&format!("{n} events of B taken"), || {
        taken.set(taken.get() + process_device_events(b, 16).unwrap());
        taken.get() >= n
    });
}

/// B is behind: it takes its REQ_RECEIVED only after three times the
/// active side's whole patience. B's CM answers each duplicate REQ with an
/// MRA, A waits (MRA_RECEIVED, MRA_REQ_RCVD) and the connection is made.
#[test]
fn auto_mra_slow_passive_connects() {
    let pair = Pair::with_b_in_fd_mode();
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    let capture = Capture::of(&[&pair.b.name]);
    let p = impatient(&pair);
    let start = Instant::now();
    send_req(&pair.active, &p).unwrap();
    let mra = pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REQ_RCVD);
    assert!(counters(&pair.b).tx_auto_mra >= 1);
    sleep_until(start + 3 * req_patience(&p));
    assert_eq!(pair.active.state(), IB_CM_MRA_REQ_RCVD, "A still waits");
    // B's user catches up: its REQ_RECEIVED handler sends the REP.
    take_events(&pair.b, 1);
    let passive = pair.rec.nth_new_id(1);
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    wait_state(&passive, IB_CM_ESTABLISHED);
    take_events(&pair.b, 1); // RTU_RECEIVED
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert_eq!(
        pair.rec.events_of(&pair.active),
        [IB_CM_MRA_RECEIVED, IB_CM_REP_RECEIVED]
    );
    let c = counters(&pair.b);
    let dups = c.rx_duplicates[of(attr::REQ)];
    assert!(
        c.tx_auto_mra >= 1 && c.tx_auto_mra <= dups,
        "{} MRAs for {dups} duplicates",
        c.tx_auto_mra
    );
    // Said at IBCM_LOG=debug, with the service timeout (15 + 4).
    let on_b = format!(" {}:1 auto MRA of REQ (service timeout 19)", pair.b.name);
    assert!(!capture.lines_with(&["debug: ", &on_b]).is_empty());
    // Booked as the kernel books an answer to a retransmission
    // (`cm_send_handler`: `1 + retries` messages, retries 1).
    assert_eq!(c.tx_msgs[of(attr::MRA)], 2 * c.tx_auto_mra);
    assert_eq!(c.tx_retries[of(attr::MRA)], c.tx_auto_mra);
    pair.finish(&[&passive]);
}

/// The same with the kernel's `cm_dup_req_handler` (REQ_RCVD: drop): A
/// times out (REQ_ERROR, `IB_WC_RESP_TIMEOUT_ERR`) while B's user is behind.
#[test]
fn dup_req_in_req_rcvd_dropped_when_auto_mra_off() {
    let pair = Pair::with_b_in_fd_mode();
    pair.b.set_auto_mra(AutoMra::Off);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // too late anyway
    let p = impatient(&pair);
    send_req(&pair.active, &p).unwrap();
    let e = pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(e.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    assert_eq!(e.state, IB_CM_IDLE);
    let retries = u64::from(p.max_cm_retries);
    wait_until("B counted every retry as a duplicate", || {
        counters(&pair.b).rx_duplicates[of(attr::REQ)] == retries
    });
    let c = counters(&pair.b);
    assert_eq!((c.tx_auto_mra, c.tx_msgs[of(attr::MRA)]), (0, 0));
    assert_eq!(pair.rec.count(IB_CM_MRA_RECEIVED), 0);
    take_events(&pair.b, 1);
    let passive = pair.rec.nth_new_id(1);
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    pair.finish(&[&passive]);
}

/// B's user holds the REQ unanswered (worker mode, a handler that returns
/// 0) until B's CM has sent an automatic MRA and A took it; the new id is
/// still in REQ_RCVD.
fn auto_mraed_req(pair: &Pair) -> Arc<CmIdPriv> {
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    send_req(&pair.active, &pair.req_params()).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_MRA_RECEIVED);
    let passive = pair.rec.nth_new_id(1);
    assert_eq!(passive.state(), IB_CM_REQ_RCVD, "the MRA moved nothing");
    assert_eq!(pair.active.state(), IB_CM_MRA_REQ_RCVD);
    passive
}

#[test]
fn user_rep_after_auto_mra_connects() {
    let pair = Pair::new();
    let passive = auto_mraed_req(&pair);
    send_rep(&passive, &rep_params(b"late")).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

/// `cm_rej_handler`, MRA_REQ_RCVD: A leaves for IDLE with the user's reason.
#[test]
fn user_rej_after_auto_mra_rejects() {
    let pair = Pair::new();
    let passive = auto_mraed_req(&pair);
    send_rej(&passive, IB_CM_REJ_CONSUMER_DEFINED as u16, &[], b"no").unwrap();
    let rej = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(rej.rej_reason, Some(IB_CM_REJ_CONSUMER_DEFINED as u16));
    assert_eq!(rej.state, IB_CM_IDLE);
    pair.finish(&[&passive]);
}

/// `ib_send_cm_mra` (≤ 6.15) from REQ_RCVD after an automatic MRA: allowed,
/// sent at once, MRA_REQ_SENT. A is already in MRA_REQ_RCVD, so for A it is
/// a duplicate MRA (`cm_mra_handler` counts it and keeps the timeout the
/// first one set). The REP from MRA_REQ_SENT then connects.
#[test]
fn user_mra_after_auto_mra_is_a_duplicate_for_the_peer() {
    let pair = Pair::new();
    let passive = auto_mraed_req(&pair);
    send_mra(&passive, 20, Some(b"wait")).unwrap();
    assert_eq!(passive.state(), IB_CM_MRA_REQ_SENT);
    wait_until("A counted the user's MRA as a duplicate", || {
        counters(&pair.a).rx_duplicates[of(attr::MRA)] == 1
    });
    assert_eq!(pair.active.state(), IB_CM_MRA_REQ_RCVD);
    assert_eq!(pair.rec.count(IB_CM_MRA_RECEIVED), 1);
    send_rep(&passive, &rep_params(&[])).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

/// `ib_prepare_cm_mra` (≥ 6.16) after an automatic MRA: MRA_REQ_SENT, and
/// the next duplicate REQ gets the user's MRA (`CM_MRA_SETTING`), not an
/// automatic one.
#[test]
fn user_prepare_mra_after_auto_mra_answers_the_next_duplicate() {
    let pair = Pair::new();
    let passive = auto_mraed_req(&pair);
    let autos = counters(&pair.b).tx_auto_mra;
    prepare_mra(&passive).unwrap();
    assert_eq!(passive.state(), IB_CM_MRA_REQ_SENT);
    wait_until("the next duplicate REQ got the user's MRA", || {
        counters(&pair.a).rx_duplicates[of(attr::MRA)] >= 1
    });
    assert_eq!(counters(&pair.b).tx_auto_mra, autos);
    send_rep(&passive, &rep_params(&[])).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    pair.finish(&[&passive]);
}

/// The REP leg: A's user holds its RTU for three times B's whole patience.
/// A's CM answers each duplicate REP with an MRA of REP; B waits
/// (MRA_REP_RCVD) and the RTU completes the connection.
#[test]
fn auto_mra_slow_active_rtu_connects() {
    let pair = Pair::new();
    pair.a.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0)); // no RTU yet
    let p = impatient(&pair);
    send_req(&pair.active, &p).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    let got_rep = Instant::now();
    let passive = pair.rec.nth_new_id(1);
    let mra = pair.rec.wait(Some(&passive), IB_CM_MRA_RECEIVED);
    assert_eq!(mra.state, IB_CM_MRA_REP_RCVD);
    assert_eq!(pair.active.state(), IB_CM_REP_RCVD, "the MRA moved nothing");
    sleep_until(got_rep + 3 * rep_patience(&p));
    assert_eq!(passive.state(), IB_CM_MRA_REP_RCVD, "B still waits");
    send_rtu(&pair.active, &[]).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    let c = counters(&pair.a);
    let dups = c.rx_duplicates[of(attr::REP)];
    assert!(c.tx_auto_mra >= 1 && c.tx_auto_mra <= dups);
    assert_eq!(pair.rec.count(IB_CM_REP_ERROR), 0);
    pair.finish(&[&passive]);
}

/// The same with the kernel's `cm_dup_rep_handler` (REP_RCVD: drop): B
/// times out (REP_ERROR) while A's user holds its RTU.
#[test]
fn dup_rep_in_rep_rcvd_dropped_when_auto_mra_off() {
    let pair = Pair::new();
    pair.a.set_auto_mra(AutoMra::Off);
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0));
    let p = impatient(&pair);
    send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.nth_new_id(1);
    let e = pair.rec.wait(Some(&passive), IB_CM_REP_ERROR);
    assert_eq!(e.send_status, Some(ib_wc_status::IB_WC_RESP_TIMEOUT_ERR));
    let retries = u64::from(p.max_cm_retries);
    wait_until("A counted every retry as a duplicate", || {
        counters(&pair.a).rx_duplicates[of(attr::REP)] == retries
    });
    let c = counters(&pair.a);
    assert_eq!((c.tx_auto_mra, c.tx_msgs[of(attr::MRA)]), (0, 0));
    assert_eq!(pair.active.state(), IB_CM_REP_RCVD);
    pair.finish(&[&passive]);
}

/// A peer that floods one REQ: a copy right behind the REQ is the fabric's,
/// not a retransmission, and is dropped as in the kernel; after that every
/// duplicate gets exactly one MRA (of REQ, for that REQ, service timeout
/// the REQ's response timeout + 4), never more MADs out than in.
#[test]
fn auto_mra_answers_a_flood_of_duplicate_reqs_one_for_one() {
    const DUPLICATES: u64 = 200;
    let pair = Pair::new();
    pair.b.set_auto_mra(AUTO_MRA_DEFAULT);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0));
    let raw = Raw::open();
    let mut req = Req {
        local_comm_id: 0x0f10_0d01,
        service_id: SERVICE_ID,
        // Not pkey_and_backlog_fidelity's 0x5151/0x4242: the stale connection table is the
        // process's, and a test running meanwhile with the same pair would
        // get REJ STALE_CONN instead of what it checks.
        local_ca_guid: 0x0f10_5151,
        local_qpn: 0x0f_4242,
        pkey: 0xffff,
        path_mtu: 3,
        remote_cm_response_timeout: 16, // 256 ms
        local_cm_response_timeout: 16,
        max_cm_retries: 15,
        ..Req::default()
    };
    raw.address_req(&mut req, &pair.b);
    let mad = req.encode(0x77);
    let sent = Instant::now();
    raw.send_to(&pair.b, &mad);
    raw.send_to(&pair.b, &mad); // the fabric's copy
    wait_until("B took the copy", || {
        counters(&pair.b).rx_duplicates[of(attr::REQ)] == 1
    });
    assert_eq!(raw.received_after(Duration::from_millis(20)), 0);
    let passive = pair.rec.nth_new_id(1);
    // The peer's retransmissions: from half its response timeout on.
    sleep_until(sent + Duration::from_millis(200));
    for _ in 0..DUPLICATES {
        raw.send_to(&pair.b, &mad);
    }
    wait_until("B took every duplicate", || {
        counters(&pair.b).rx_duplicates[of(attr::REQ)] == 1 + DUPLICATES
    });
    let answers = raw.received_after(Duration::from_millis(100));
    assert_eq!(answers as u64, DUPLICATES, "one answer per duplicate");
    assert_eq!(counters(&pair.b).tx_auto_mra, DUPLICATES);
    for n in [1, answers] {
        let answer = raw.wait_for(n);
        let (hdr, _) = parse_header(&answer).unwrap();
        assert_eq!(hdr.attr_id, attr::MRA);
        assert_eq!(hdr.tid, 0x77);
        let mra = Mra::decode(&answer).unwrap();
        assert_eq!(mra.message_mraed, MsgResponse::Req);
        assert_eq!(mra.remote_comm_id, req.local_comm_id);
        assert_eq!(mra.service_timeout, 20);
    }
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    pair.finish(&[&passive]);
}

#[test]
fn auto_mra_setting_parses_as_documented() {
    assert_eq!(AutoMra::parse(None), Some(AUTO_MRA_DEFAULT));
    assert_eq!(AutoMra::parse(Some("")), Some(AUTO_MRA_DEFAULT));
    assert_eq!(AutoMra::parse(Some("off")), Some(AutoMra::Off));
    assert_eq!(AutoMra::parse(Some("OFF")), Some(AutoMra::Off));
    assert_eq!(AutoMra::parse(Some("0")), Some(AutoMra::Off));
    assert_eq!(AutoMra::parse(Some(" 24 ")), Some(AutoMra::Fixed(24)));
    assert_eq!(AutoMra::parse(Some("31")), Some(AutoMra::Fixed(31)));
    for bad in ["32", "-1", "24s", "on", "256"] {
        assert_eq!(AutoMra::parse(Some(bad)), None, "{bad:?}");
    }
    for setting in [
        AutoMra::Off,
        AutoMra::Fixed(1),
        AutoMra::Fixed(31),
        AUTO_MRA_DEFAULT,
    ] {
        assert_eq!(AutoMra::from_bits(setting.to_bits()), setting);
    }
}

#[test]
fn auto_mra_never_shortens_the_peers_wait() {
    assert_eq!(AUTO_MRA_DEFAULT.service_timeout(20), Some(24));
    assert_eq!(AUTO_MRA_DEFAULT.service_timeout(30), Some(31));
    assert_eq!(AUTO_MRA_DEFAULT.service_timeout(200), Some(31));
    assert_eq!(AutoMra::Fixed(24).service_timeout(12), Some(24));
    assert_eq!(AutoMra::Fixed(10).service_timeout(20), Some(21));
    assert_eq!(AutoMra::Fixed(10).service_timeout(31), Some(31));
    assert_eq!(AutoMra::Off.service_timeout(12), None);
}
