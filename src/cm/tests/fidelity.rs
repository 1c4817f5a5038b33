//! Issue 10, kernel fidelity: branches of cm.c where this library used to
//! differ (stored REP data, `cm_establish_handler`'s state check, a failed
//! SIDR_REP, `cm_req_handler`'s INVALID_GID reject, the MRA call of Linux ≤ 6.15).

use std::sync::Arc;

use super::*;
use crate::cm::send_dreq;
use crate::wire::attr;

// ---- point 11 ------------------------------------------------------------

/// `cm_dreq_handler()`, TIMEWAIT: the DREP re-sent for a DREQ that finds the
/// passive side in timewait carries what `ib_send_cm_drep` stored, and
/// nothing else: `ib_send_cm_rep` stores no private data, so a passive side
/// whose own DREQ timed out answers with a zeroed DREP, not the REP's bytes.
#[test]
fn cm_dreq_handler_timewait_drep_carries_no_rep_private_data() {
    let pair = Pair::new();
    let rep_pd = pattern(196, 11);
    let pd = rep_pd.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |id, _| {
            crate::cm::send_rep(id, &rep_params(&pd)).unwrap();
            0
        }),
    );
    // A packet lifetime of 20 makes the passive side's timewait about 8 s,
    // time enough for the active side's DREQ to find it there.
    let mut p = pair.req_params();
    p.primary_path.packet_life_time = 20;
    crate::cm::send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    // The passive side's DREQ is lost every time: DREQ_ERROR, timewait.
    crate::cm::set_disconnect_timeout(&passive, 5, 1).unwrap();
    pair.loop_b().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&passive, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_ERROR);
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    // The active side, still ESTABLISHED, disconnects; timewait answers.
    send_dreq(&pair.active, None).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), vec![0u8; 224]);
    pair.finish(&[&passive]);
}

// ---- point 13 ------------------------------------------------------------

use std::sync::mpsc;

use parking_lot::Mutex;

use crate::abi::ib_event_type::IB_EVENT_COMM_EST;
use crate::cm::event::CmEvent;
use crate::cm::send_drep;
use crate::cm::worker::queue_event;

/// Every DREQ is answered with an empty DREP.
fn answer_dreqs(rec: &Recorder) {
    rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(|id, _| {
            send_drep(id, None).unwrap();
            0
        }),
    );
}

/// Keeps the (one, shared) worker thread inside a handler until dropped, so
/// that work queued meanwhile runs afterwards, in the order it was queued.
struct WorkerHeld {
    release: mpsc::Sender<()>,
    id: Arc<CmIdPriv>,
}

fn hold_worker(device: &Arc<Device>) -> WorkerHeld {
    let (entered, is_held) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let entered = Mutex::new(entered);
    let id = crate::cm::create_id(
        device,
        Arc::new(move |_, _| {
            let _ = entered.lock().send(());
            let _ = released.lock().recv_timeout(WAIT);
            0
        }),
    )
    .unwrap();
    queue_event(&id, CmEvent::bare(IB_CM_TIMEWAIT_EXIT));
    is_held.recv_timeout(WAIT).expect("the worker never ran");
    WorkerHeld { release, id }
}

impl Drop for WorkerHeld {
    fn drop(&mut self) {
        let _ = self.release.send(());
        crate::cm::destroy_id(&self.id, 0);
    }
}

/// A passive connection whose RTU is lost: REP_SENT, with a REP timeout long
/// enough (about 4 s each) for the test to act.
fn passive_in_rep_sent(pair: &Pair) -> Arc<CmIdPriv> {
    pair.loop_a().drop_next(attr::RTU, 100).unwrap();
    let p = ReqParams {
        local_cm_response_timeout: 20,
        ..pair.req_params()
    };
    crate::cm::send_req(&pair.active, &p).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    assert_eq!(passive.state(), IB_CM_REP_SENT);
    passive
}

/// `cm_establish_handler()`: `IB_CM_USER_ESTABLISHED` only if the id is still
/// ESTABLISHED when the work runs. Here the user disconnects right after
/// `ib_cm_notify`, before the worker gets to the work.
#[test]
fn cm_establish_handler_skips_the_event_after_a_dreq_sent() {
    let pair = Pair::new();
    answer_dreqs(&pair.rec);
    let passive = passive_in_rep_sent(&pair);
    {
        let _held = hold_worker(&pair.b);
        crate::cm::notify(&passive, IB_EVENT_COMM_EST as i32).unwrap();
        send_dreq(&passive, None).unwrap();
        assert_eq!(passive.state(), IB_CM_DREQ_SENT);
    }
    pair.rec.wait(Some(&passive), IB_CM_DREP_RECEIVED);
    assert_eq!(
        pair.rec.events_of(&passive),
        [IB_CM_REQ_RECEIVED, IB_CM_DREP_RECEIVED]
    );
    pair.finish(&[&passive]);
}

/// `cm_establish_handler()`, the other way out of ESTABLISHED: the peer's
/// DREQ was handled before the work ran (DREQ_RCVD), so no event.
#[test]
fn cm_establish_handler_skips_the_event_after_a_dreq_received() {
    let pair = Pair::new();
    answer_dreqs(&pair.rec);
    let passive = passive_in_rep_sent(&pair);
    {
        let _held = hold_worker(&pair.b);
        send_dreq(&pair.active, None).unwrap(); // queued first
        crate::cm::notify(&passive, IB_EVENT_COMM_EST as i32).unwrap();
    }
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(
        pair.rec.events_of(&passive),
        [IB_CM_REQ_RECEIVED, IB_CM_DREQ_RECEIVED]
    );
    pair.finish(&[&passive]);
}

/// The usual case still works: notify in REP_SENT, the event comes, and the
/// REP is no longer retransmitted.
#[test]
fn cm_establish_handler_delivers_while_established() {
    let pair = Pair::new();
    let passive = passive_in_rep_sent(&pair);
    crate::cm::notify(&passive, IB_EVENT_COMM_EST as i32).unwrap();
    let got = pair.rec.wait(Some(&passive), IB_CM_USER_ESTABLISHED);
    assert_eq!(got.state, IB_CM_ESTABLISHED);
    assert!(passive.lock().inner.msg.is_none());
    pair.finish(&[&passive]);
}

// ---- point 15 ------------------------------------------------------------

use crate::abi::ib_cm_sidr_status::IB_SIDR_SUCCESS;
use crate::cm::counters::{Snapshot, attr_index};
use crate::cm::{SidrRepParams, SidrReqParams, send_sidr_rep, send_sidr_req};
use crate::errno::{CmResult, ENETDOWN};

fn snapshot(device: &Device) -> Snapshot {
    device.counters(1).unwrap().snapshot()
}

fn at(counts: &[u64; 11], attr_id: u16) -> u64 {
    counts[attr_index(attr_id).unwrap()]
}

fn sidr_params(pair: &Pair) -> SidrReqParams {
    SidrReqParams {
        path: pair.a.init_path(1, &pair.b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        timeout_ms: 5000,
        private_data: Vec::new(),
        max_cm_retries: 3,
    }
}

fn sidr_rep_params() -> SidrRepParams {
    SidrRepParams {
        qp_num: 0x55,
        qkey: 0x1111_2222,
        status: IB_SIDR_SUCCESS as u8,
        ..SidrRepParams::default()
    }
}

/// `cm_send_sidr_rep_locked()`: when the post fails the id stays in
/// SIDR_REQ_RCVD (and in the SIDR table), so the caller can try again.
#[test]
fn sidr_rep_send_failure_stays_sidr_req_rcvd_for_a_retry() {
    type Tries = (CmResult, ib_cm_state, CmResult, ib_cm_state);
    let pair = Pair::new();
    let tries: Arc<Mutex<Vec<Tries>>> = Arc::default();
    let seen = tries.clone();
    pair.rec.on(
        IB_CM_SIDR_REQ_RECEIVED,
        Arc::new(move |id, _| {
            let first = send_sidr_rep(id, &sidr_rep_params());
            let between = id.state();
            let second = send_sidr_rep(id, &sidr_rep_params());
            seen.lock().push((first, between, second, id.state()));
            0
        }),
    );
    pair.loop_b().fail_next(attr::SIDR_REP, 1);
    send_sidr_req(&pair.active, &sidr_params(&pair)).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    assert_eq!(got.sidr_status, Some(IB_SIDR_SUCCESS as u8));
    let passive = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    // One request, answered on the second try (not a new request after a
    // retransmitted SIDR_REQ).
    assert_eq!(
        *tries.lock(),
        [(Err(ENETDOWN), IB_CM_SIDR_REQ_RCVD, Ok(()), IB_CM_IDLE)]
    );
    assert_eq!(pair.rec.count(IB_CM_SIDR_REP_RECEIVED), 1);
    // Counted once the transport took it: the failed post is not booked.
    assert_eq!(at(&snapshot(&pair.b).tx_msgs, attr::SIDR_REP), 1);
    pair.finish(&[&passive]);
}

/// Destroying an id in SIDR_REQ_RCVD whose rejecting SIDR_REP cannot be sent
/// still ends (`cm_destroy_id` does not retry) and forgets the request.
#[test]
fn destroy_in_sidr_req_rcvd_with_failing_send_forgets_the_request() {
    let pair = Pair::new();
    send_sidr_req(&pair.active, &sidr_params(&pair)).unwrap();
    let passive = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(passive.state(), IB_CM_SIDR_REQ_RCVD);
    pair.loop_b().fail_next(attr::SIDR_REP, 1);
    crate::cm::destroy_id(&passive, 0);
    assert_eq!(passive.state(), IB_CM_IDLE);
    let me = Arc::downgrade(&passive);
    let t = crate::cm::Cm::process().tables();
    assert!(!t.remote_sidr.values().any(|w| w.ptr_eq(&me)));
    drop(t);
    pair.finish(&[]);
}

// ---- point 16 ------------------------------------------------------------

use crate::abi::ib_cm_rej_reason::IB_CM_REJ_INVALID_GID;
use crate::wire::{Rej, parse_header};

/// `cm_req_handler()`: `cm_init_av_by_path(&work->path[0])` fails when the
/// REQ's primary remote GID (our side) is not in the receiving port's GID
/// table and the REQ came without a GRH: REJ INVALID_GID, ARI the port's
/// GID 0, no connection. A raw endpoint relays A's REQ, whose path leads to
/// it and so names its GID, to B, and B's answer back to A.
#[test]
fn cm_req_handler_rejects_a_req_for_a_gid_not_ours_invalid_gid() {
    let pair = Pair::new();
    let relay = Raw::open();
    let p = ReqParams {
        primary_path: pair.a.init_path(1, &relay.me.gid).unwrap(),
        remote_cm_response_timeout: 20, // no REQ retransmission meanwhile
        ..pair.req_params()
    };
    crate::cm::send_req(&pair.active, &p).unwrap();
    let req = relay.wait_for(1);
    relay.send_to(&pair.b, &req);
    let answer = relay.wait_for(2);
    let (hdr, _) = parse_header(&answer).unwrap();
    assert_eq!(attr::name(hdr.attr_id), attr::name(attr::REJ));
    let rej = Rej::decode(&answer).unwrap();
    assert_eq!(rej.rejected_info_length, 16);
    assert_eq!(rej.ari[..16], pair.b.ports[0].gids[0].gid);
    relay.send_to(&pair.a, &answer);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_REJ_RECEIVED);
    assert_eq!(got.rej_reason, Some(IB_CM_REJ_INVALID_GID as u16));
    assert_eq!(pair.active.state(), IB_CM_IDLE);
    assert_eq!(pair.rec.count(IB_CM_REQ_RECEIVED), 0);
    assert_eq!(pair.b.id_count(), 1); // the listener only
    let b = snapshot(&pair.b);
    assert_eq!(at(&b.rx_msgs, attr::REQ), 1);
    assert_eq!(at(&b.tx_msgs, attr::REJ), 1);
    assert_eq!(at(&b.tx_msgs, attr::REP), 0);
    pair.finish(&[]);
}

// An id reused for a second `ib_send_cm_req` used to keep its `remote_id`,
// as the kernel's does, and could not match the new REP: issue 31 gives it
// a fresh identity instead (tests/reuse.rs).

// ---- point 17 ------------------------------------------------------------

use super::lap::lap_for;
use crate::abi::IB_CM_MRA_FLAG_DELAY;
use crate::abi::ib_cm_lap_state::IB_CM_MRA_LAP_SENT;
use crate::cm::{pd_array, send_mra};
use crate::wire::{Mra, MsgResponse};

/// `ib_send_cm_mra()` (Linux ≤ 6.15) on an ESTABLISHED id with a LAP received: lap_state
/// MRA_LAP_SENT and an MRA for the LAP (message MRAed "other") at once; a
/// repeated LAP gets the same MRA again. Sent to the LAP's sender, where the
/// kernel's LAP handler points the connection.
#[test]
fn send_mra_lap_rcvd_sends_the_mra_at_once_and_again_for_a_duplicate() {
    let pair = Pair::new();
    pair.rec.on(
        IB_CM_LAP_RECEIVED,
        Arc::new(|id, _| {
            send_mra(id, 21, Some(&pattern(100, 3))).unwrap();
            0
        }),
    );
    let passive = pair.connect();
    let raw = Raw::open();
    let lap = lap_for(&pair, &passive).encode(0x0000_0001_0000_4c41);
    raw.send_to(&pair.b, &lap);
    let first = Mra::decode(&raw.wait_for(1)).unwrap();
    assert_eq!(first.message_mraed, MsgResponse::Other);
    assert_eq!(first.service_timeout, 21);
    assert_eq!(first.private_data[..100], pattern(100, 3));
    assert_eq!(passive.lock().lap_state(), IB_CM_MRA_LAP_SENT as i32);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    raw.send_to(&pair.b, &lap);
    let again = Mra::decode(&raw.wait_for(2)).unwrap();
    assert_eq!(again, first);
    pair.finish(&[&passive]);
}

/// With `IB_CM_MRA_FLAG_DELAY` nothing goes out until the duplicate, whose
/// MRA carries the timeout without the flag bit (a 5-bit field) and the data.
#[test]
fn send_mra_with_delay_flag_waits_for_the_duplicate_lap() {
    let pair = Pair::new();
    pair.rec.on(
        IB_CM_LAP_RECEIVED,
        Arc::new(|id, _| {
            send_mra(id, IB_CM_MRA_FLAG_DELAY | 21, Some(&pattern(222, 4))).unwrap();
            0
        }),
    );
    let passive = pair.connect();
    let raw = Raw::open();
    let lap = lap_for(&pair, &passive).encode(0x0000_0001_0000_4c41);
    let mras = || at(&snapshot(&pair.b).tx_msgs, attr::MRA);
    raw.send_to(&pair.b, &lap);
    pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    assert_eq!(passive.lock().lap_state(), IB_CM_MRA_LAP_SENT as i32);
    assert_eq!(mras(), 0);
    raw.send_to(&pair.b, &lap);
    let mra = Mra::decode(&raw.wait_for(1)).unwrap();
    assert_eq!(mra.service_timeout, 21);
    assert_eq!(mra.private_data, pd_array::<222>(&pattern(222, 4)));
    pair.finish(&[&passive]);
}

/// `ib_send_cm_mra()`: an MRA that cannot be posted returns the error and
/// changes nothing (state, stored data); the call can be repeated.
#[test]
fn send_mra_send_failure_returns_the_error_and_changes_nothing() {
    type Tries = (CmResult, ib_cm_state, usize, CmResult, ib_cm_state);
    let pair = Pair::new();
    let tries: Arc<Mutex<Vec<Tries>>> = Arc::default();
    let seen = tries.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |id, _| {
            let first = send_mra(id, 10, Some(&[1, 2, 3]));
            let (state, kept) = (id.state(), id.lock().inner.private_data.len());
            let second = send_mra(id, 10, Some(&[1, 2, 3]));
            seen.lock().push((first, state, kept, second, id.state()));
            crate::cm::send_rep(id, &rep_params(&[])).unwrap();
            0
        }),
    );
    pair.loop_b().fail_next(attr::MRA, 1);
    let passive = pair.connect();
    assert_eq!(
        *tries.lock(),
        [(Err(ENETDOWN), IB_CM_REQ_RCVD, 0, Ok(()), IB_CM_MRA_REQ_SENT)]
    );
    assert_eq!(pair.rec.count(IB_CM_MRA_RECEIVED), 1);
    pair.finish(&[&passive]);
}
