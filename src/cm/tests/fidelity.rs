//! Issue 10, kernel fidelity: branches of cm.c where this library used to
//! differ (stored REP data, `cm_establish_handler`'s state check, a failed
//! SIDR_REP, `cm_req_handler`'s INVALID_GID reject, the 6.x MRA call).

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
fn hardening_11_cm_dreq_handler_timewait_drep_carries_no_rep_private_data() {
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
    let passive = pair.connect();
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
    );
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
fn hardening_13_cm_establish_handler_skips_the_event_after_a_dreq_sent() {
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
fn hardening_13_cm_establish_handler_skips_the_event_after_a_dreq_received() {
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
fn hardening_13_cm_establish_handler_delivers_while_established() {
    let pair = Pair::new();
    let passive = passive_in_rep_sent(&pair);
    crate::cm::notify(&passive, IB_EVENT_COMM_EST as i32).unwrap();
    let got = pair.rec.wait(Some(&passive), IB_CM_USER_ESTABLISHED);
    assert_eq!(got.state, IB_CM_ESTABLISHED);
    assert!(passive.lock().inner.msg.is_none());
    pair.finish(&[&passive]);
}
