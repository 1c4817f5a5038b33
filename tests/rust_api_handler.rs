//! The handler API (`ib_cm::handler`): events on the CM's thread, answers
//! from inside them, who destroys what. Only the public API.

mod rust_api_support;

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use ib_cm::handler::{CmId, HandlerId, HandlerListener, Verdict};
use ib_cm::{ConnectRequest, Device, Event, RejectReason, Reply, ReqInfo, State};
use parking_lot::Mutex;
use rust_api_support::*;

/// An event as a test sees it: the id's comm ID, the name, its private data.
type Seen = (u32, &'static str, Vec<u8>);

fn private_data(event: &Event) -> Vec<u8> {
    match event {
        Event::RepReceived(rep) => rep.private_data.clone(),
        Event::RtuReceived { private_data }
        | Event::DreqReceived { private_data }
        | Event::DrepReceived { private_data }
        | Event::MraReceived { private_data, .. }
        | Event::RejReceived { private_data, .. } => private_data.clone(),
        _ => Vec::new(),
    }
}

fn recorder(tx: Sender<Seen>) -> impl Fn(&CmId, &Event) + Send + Sync + 'static {
    let tx = Mutex::new(tx);
    move |id, event| {
        let seen = (id.local_comm_id(), event.kernel_name(), private_data(event));
        let _ = tx.lock().send(seen);
    }
}

fn next(rx: &Receiver<Seen>) -> Seen {
    rx.recv_timeout(WAIT).expect("an event within the bound")
}

/// B's listener: a REP from inside each request, every later event
/// recorded.
fn replying_listener(b: &Device, tx: Sender<Seen>) -> HandlerListener {
    let record = recorder(tx);
    let qpn = next_qpn();
    b.listen_with(
        SERVICE_ID,
        (
            move |id: &CmId, _: ReqInfo| {
                id.reply(&Reply::new(qpn)).unwrap();
                Verdict::Keep
            },
            move |id: &CmId, event: Event| {
                record(id, &event);
                Verdict::Keep
            },
        ),
    )
    .unwrap()
}

/// A's id: an RTU from inside its REP, every event recorded.
fn confirming_id(a: &Device, tx: Sender<Seen>) -> HandlerId {
    let record = recorder(tx);
    a.create_id_with(move |id: &CmId, event: Event| {
        if let Event::RepReceived(_) = event {
            id.confirm(b"").unwrap();
        }
        record(id, &event);
        Verdict::Keep
    })
    .unwrap()
}

fn request(a: &Device, b: &Device, qpn: u32, pd: &[u8]) -> ConnectRequest {
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    ConnectRequest::builder(path, SERVICE_ID, qpn)
        .private_data(pd)
        .remote_cm_response_timeout(12)
        .local_cm_response_timeout(12)
        .max_cm_retries(5)
        .build()
}

/// The whole connection answered from inside handlers: REP in the
/// request, RTU in the REP, DREP in the DREQ; every private data arrives
/// whole (92 REQ, 196 REP, 224 RTU, 220 DREQ, 224 DREP), and the passive
/// id goes by itself after its TIMEWAIT_EXIT (the device then closes).
#[test]
fn connect_and_disconnect_inside_handlers_with_every_private_data() {
    let (a, b) = devices();
    let (b_tx, b_rx) = mpsc::channel();
    let b_record = recorder(b_tx);
    let passive_qpn = next_qpn();
    let req_seen: Arc<Mutex<Option<ReqInfo>>> = Arc::default();
    let req_store = req_seen.clone();
    let listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, req: ReqInfo| {
                    assert_eq!(id.state(), State::ReqRcvd);
                    let reply = Reply {
                        private_data: pattern(196, 2),
                        ..Reply::new(passive_qpn)
                    };
                    *req_store.lock() = Some(req);
                    id.reply(&reply).map_or(Verdict::Destroy, |_| Verdict::Keep)
                },
                move |id: &CmId, event: Event| {
                    b_record(id, &event);
                    if let Event::DreqReceived { .. } = event {
                        id.reply_disconnect(&pattern(224, 5)).unwrap();
                    }
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let a_record = recorder(a_tx);
    let conn = a
        .create_id_with(move |id: &CmId, event: Event| {
            if let Event::RepReceived(_) = event {
                id.confirm(&pattern(224, 3)).unwrap();
            }
            a_record(id, &event);
            Verdict::Keep
        })
        .unwrap();
    let active_qpn = next_qpn();
    conn.request(request(&a, &b, active_qpn, &pattern(92, 1)))
        .unwrap();

    let (_, name, pd) = next(&a_rx);
    assert_eq!((name, pd), ("REP_RECEIVED", pattern(196, 2)));
    assert_eq!(conn.state(), State::Established);
    let (b_comm_id, name, pd) = next(&b_rx);
    assert_eq!((name, pd), ("RTU_RECEIVED", pattern(224, 3)));
    let req = req_seen.lock().take().unwrap();
    assert_eq!(req.remote_qpn, active_qpn);
    assert_eq!(req.private_data, pattern(92, 1));
    assert_eq!(req.service_id, SERVICE_ID);
    assert_eq!(conn.remote_comm_id(), b_comm_id);

    conn.send_disconnect(&pattern(220, 4)).unwrap();
    let (_, name, pd) = next(&b_rx);
    assert_eq!((name, pd), ("DREQ_RECEIVED", pattern(220, 4)));
    let (_, name, pd) = next(&a_rx);
    assert_eq!((name, pd), ("DREP_RECEIVED", pattern(224, 5)));
    assert_eq!(conn.state(), State::Timewait);
    assert_eq!(next(&b_rx).1, "TIMEWAIT_EXIT");
    assert_eq!(next(&a_rx).1, "TIMEWAIT_EXIT");
    assert_eq!(conn.state(), State::Idle);

    // Nothing of B's is left: the passive id went after TIMEWAIT_EXIT, so
    // B's device closes when its handles go, and opens again.
    let b_name = b.name().to_owned();
    drop(listener);
    drop(b);
    Device::open(&b_name).expect("B closed: no id of it was left");
}

/// A listener handler that does not override `request` refuses: the REJ
/// is CONSUMER_DEFINED, as for a kernel handler that returns non-zero.
#[test]
fn a_handler_without_request_refuses_each_request() {
    let (a, b) = devices();
    let _listener = b
        .listen_with(SERVICE_ID, |_: &CmId, _: Event| Verdict::Keep)
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let record = recorder(tx);
    let conn = a
        .create_id_with(move |id: &CmId, event: Event| {
            if let Event::RejReceived { reason, .. } = &event {
                assert_eq!(*reason, RejectReason::CONSUMER_DEFINED);
            }
            record(id, &event);
            Verdict::Keep
        })
        .unwrap();
    conn.request(request(&a, &b, next_qpn(), b"")).unwrap();
    assert_eq!(next(&rx).1, "REJ_RECEIVED");
    assert_eq!(conn.state(), State::Idle);
}

/// `Verdict::Destroy` from an established connection's event destroys it
/// as `ib_destroy_cm_id` does there: the peer gets a DREQ.
#[test]
fn verdict_destroy_when_established_sends_a_dreq() {
    let (a, b) = devices();
    let (b_tx, b_rx) = mpsc::channel();
    let b_record = recorder(b_tx);
    let passive_qpn = next_qpn();
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    id.reply(&Reply::new(passive_qpn)).unwrap();
                    Verdict::Keep
                },
                move |id: &CmId, event: Event| {
                    b_record(id, &event);
                    // Established: gone at once.
                    match event {
                        Event::RtuReceived { .. } => Verdict::Destroy,
                        _ => Verdict::Keep,
                    }
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = confirming_id(&a, a_tx);
    conn.request(request(&a, &b, next_qpn(), b"")).unwrap();
    assert_eq!(next(&a_rx).1, "REP_RECEIVED");
    assert_eq!(next(&b_rx).1, "RTU_RECEIVED");
    assert_eq!(next(&a_rx).1, "DREQ_RECEIVED");
    // The kernel's destroy answers nothing more: B's id is gone, so A's
    // DREP goes to nobody, and A's id waits in DREQ_RCVD for its user.
    assert_eq!(conn.state(), State::DreqRcvd);
    conn.reply_disconnect(b"").unwrap();
    assert_eq!(conn.state(), State::Timewait);
}

/// A request answered later, from another thread, through a `CmId` the
/// handler kept: the REP goes out then; a `CmId` kept past its id's end
/// refuses with EINVAL instead of touching anything.
#[test]
fn a_request_answered_later_from_another_thread() {
    let (a, b) = devices();
    let (id_tx, id_rx) = mpsc::channel::<CmId>();
    let id_tx = Mutex::new(id_tx);
    let (b_tx, b_rx) = mpsc::channel();
    let b_record = recorder(b_tx);
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    id_tx.lock().send(id.clone()).unwrap();
                    Verdict::Keep
                },
                move |id: &CmId, event: Event| {
                    b_record(id, &event);
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = confirming_id(&a, a_tx);
    conn.request(request(&a, &b, next_qpn(), b"")).unwrap();
    let passive = id_rx.recv_timeout(WAIT).unwrap();
    assert_eq!(passive.state(), State::ReqRcvd);
    passive.reply(&Reply::new(next_qpn())).unwrap();
    assert_eq!(next(&a_rx).1, "REP_RECEIVED");
    assert_eq!(next(&b_rx).1, "RTU_RECEIVED");
    // A's drop sends the DREQ; B's handler does not answer, so B's id
    // waits in DREQ_RCVD, and `passive` answers it from here.
    drop(conn);
    assert_eq!(next(&b_rx).1, "DREQ_RECEIVED");
    passive.reply_disconnect(b"late").unwrap();
    assert_eq!(next(&b_rx).1, "TIMEWAIT_EXIT");
    // Gone now (the CM destroyed it after its last event).
    let e = passive.reply_disconnect(b"").unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
}

/// The last handle of a device destroys the connections its handler
/// listener made, as `ib_destroy_cm_id` would: the peer gets their DREQ,
/// and the device closes (it opens again).
#[test]
fn a_device_going_takes_its_handler_connections_with_it() {
    let (a, b) = devices();
    let (b_tx, b_rx) = mpsc::channel();
    let listener = replying_listener(&b, b_tx);
    let (a_tx, a_rx) = mpsc::channel();
    let conn = confirming_id(&a, a_tx);
    conn.request(request(&a, &b, next_qpn(), b"")).unwrap();
    assert_eq!(next(&a_rx).1, "REP_RECEIVED");
    // B established too (its RTU may still be on its way when A's REP
    // handler has run): else B's end is a REJ, not a DREQ.
    assert_eq!(next(&b_rx).1, "RTU_RECEIVED");
    let b_name = b.name().to_owned();
    drop(listener);
    drop(b);
    assert_eq!(next(&a_rx).1, "DREQ_RECEIVED");
    Device::open(&b_name).expect("B closed");
}

/// A `HandlerId` dropped inside its own handler: the id goes once the
/// handler returns (a REJ for its REP), nothing waits for itself.
#[test]
fn a_handler_id_dropped_inside_its_own_handler() {
    let (a, b) = devices();
    let (b_tx, b_rx) = mpsc::channel();
    let _listener = replying_listener(&b, b_tx);
    let slot: Arc<Mutex<Option<HandlerId>>> = Arc::default();
    let in_handler = slot.clone();
    let (done_tx, done_rx) = mpsc::channel();
    let done_tx = Mutex::new(done_tx);
    let conn = a
        .create_id_with(move |_: &CmId, event: Event| {
            if let Event::RepReceived(_) = event {
                drop(in_handler.lock().take());
                done_tx.lock().send(()).unwrap();
            }
            Verdict::Keep
        })
        .unwrap();
    // In its slot before its REQ goes: the handler may run at once.
    let mut held = slot.lock();
    let conn = held.insert(conn);
    conn.request(request(&a, &b, next_qpn(), b"")).unwrap();
    drop(held);
    done_rx.recv_timeout(WAIT).unwrap();
    let (_, name, _) = next(&b_rx);
    assert_eq!(name, "REJ_RECEIVED");
}

/// The calls check what the C calls check: a DREP outside DREQ_RCVD, an
/// RTU before a REP, private data over the limit: EINVAL.
#[test]
fn calls_refuse_as_the_c_api_does() {
    let (a, _b) = devices();
    let id = a
        .create_id_with(|_: &CmId, _: Event| Verdict::Keep)
        .unwrap();
    assert_eq!(id.state(), State::Idle);
    for e in [
        id.reply_disconnect(b"").unwrap_err(),
        id.send_disconnect(b"").unwrap_err(),
        id.confirm(b"").unwrap_err(),
        id.reply(&Reply::new(1)).unwrap_err(),
    ] {
        assert_eq!(e.errno(), libc::EINVAL, "{e}");
    }
}

/// An adopted passive id is the caller's: the CM leaves it after its
/// TIMEWAIT_EXIT (it keeps its device open), and dropping it destroys it.
/// Adopting twice, or an id that is the caller's already, gives `None`.
#[test]
fn an_adopted_passive_id_lives_until_its_owner_drops_it() {
    let (a, b) = devices();
    let adopted: Arc<Mutex<Option<HandlerId>>> = Arc::default();
    let keep = adopted.clone();
    let (b_tx, b_rx) = mpsc::channel();
    let b_record = recorder(b_tx);
    let passive_qpn = next_qpn();
    let listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    let owned = id.adopt().expect("the CM's until now");
                    assert!(id.adopt().is_none(), "adopted once only");
                    assert!(owned.adopt().is_none());
                    *keep.lock() = Some(owned);
                    id.reply(&Reply::new(passive_qpn)).unwrap();
                    Verdict::Keep
                },
                move |id: &CmId, event: Event| {
                    if let Event::DreqReceived { .. } = event {
                        id.reply_disconnect(b"").unwrap();
                    }
                    b_record(id, &event);
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = confirming_id(&a, a_tx);
    assert!(conn.adopt().is_none(), "the caller's already");
    conn.request(request(&a, &b, next_qpn(), b"")).unwrap();
    assert_eq!(next(&a_rx).1, "REP_RECEIVED");
    assert_eq!(next(&b_rx).1, "RTU_RECEIVED");
    conn.send_disconnect(b"").unwrap();
    assert_eq!(next(&b_rx).1, "DREQ_RECEIVED");
    assert_eq!(next(&b_rx).1, "TIMEWAIT_EXIT");
    let owned = adopted.lock().take().unwrap();
    assert_eq!(owned.state(), State::Idle);
    // Still there: it holds B open.
    let b_name = b.name().to_owned();
    drop(listener);
    drop(b);
    let busy = Device::open(&b_name).unwrap_err();
    assert_eq!(busy.errno(), libc::EBUSY, "{busy}");
    drop(owned);
    Device::open(&b_name).expect("B closed with its last id");
}
