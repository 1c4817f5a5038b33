//! The handler API's edge cases (issue 32): races of `adopt` with the CM's
//! own destroy, ids the CM owns never left behind, handlers that panic or
//! wait on the CM's thread, the last device handle dropped inside a
//! handler. Only the public API.

mod rust_api_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use ib_cm::handler::{CmId, HandlerId, Verdict};
use ib_cm::{ConnectRequest, Device, Event, RejectReason, Reply, ReqInfo};
use parking_lot::Mutex;
use rust_api_support::*;

fn request(a: &Device, b: &Device, service_id: u64) -> ConnectRequest {
    request_timing(a, b, service_id, 12)
}

/// A REQ resent after 4.096 µs × 2^`timeout` (12: 17 ms; 20: 4.3 s).
fn request_timing(a: &Device, b: &Device, service_id: u64, timeout: u8) -> ConnectRequest {
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    ConnectRequest::builder(path, service_id, next_qpn())
        .remote_cm_response_timeout(timeout)
        .local_cm_response_timeout(timeout)
        .max_cm_retries(5)
        .build()
}

/// A handler for ids of the caller's: confirms each REP, sends the names
/// of the events to `tx`.
fn active(tx: Sender<&'static str>) -> impl Fn(&CmId, Event) -> Verdict + Send + Sync + 'static {
    let tx = Mutex::new(tx);
    move |id: &CmId, event: Event| {
        if let Event::RepReceived(_) = event {
            let _ = id.confirm(b"");
        }
        let _ = tx.lock().send(event.kernel_name());
        Verdict::Keep
    }
}

fn next(rx: &Receiver<&'static str>) -> &'static str {
    rx.recv_timeout(WAIT).expect("an event within the bound")
}

/// Whether the id is destroyed: a live one (IDLE included) takes a
/// disconnect timeout, a destroyed one refuses with EINVAL.
fn destroyed(id: &CmId) -> bool {
    id.set_disconnect_timeout(Duration::from_millis(100), 1)
        .is_err()
}

/// Waits (WAIT at most) until `id` is destroyed; false if it never is.
fn becomes_destroyed(id: &CmId) -> bool {
    let until = Instant::now() + WAIT;
    while Instant::now() < until {
        if destroyed(id) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// Opens `name` again (bounded): the device closed.
fn reopens(name: &str) -> bool {
    let until = Instant::now() + WAIT;
    while Instant::now() < until {
        if Device::open(name).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// A passive id the CM destroyed (its connection over) cannot be adopted:
/// `adopt` gave a `HandlerId` of a dead id, whose every call fails, and
/// the same CAS that it races with the CM's auto-destroy let it win after
/// the CM had decided to destroy.
#[test]
fn adopt_gives_none_once_the_cm_destroyed_the_id() {
    let (a, b) = devices();
    let (id_tx, id_rx) = mpsc::channel::<CmId>();
    let id_tx = Mutex::new(id_tx);
    let (b_tx, b_rx) = mpsc::channel();
    let b_tx = Mutex::new(b_tx);
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    id_tx.lock().send(id.clone()).unwrap();
                    id.reply(&Reply::new(next_qpn())).unwrap();
                    Verdict::Keep
                },
                move |id: &CmId, event: Event| {
                    if let Event::DreqReceived { .. } = event {
                        id.reply_disconnect(b"").unwrap();
                    }
                    let _ = b_tx.lock().send(event.kernel_name());
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = a.create_id_with(active(a_tx)).unwrap();
    conn.request(request(&a, &b, SERVICE_ID)).unwrap();
    let passive = id_rx.recv_timeout(WAIT).unwrap();
    assert_eq!(next(&a_rx), "REP_RECEIVED");
    assert_eq!(next(&b_rx), "RTU_RECEIVED");
    conn.send_disconnect(b"").unwrap();
    assert_eq!(next(&b_rx), "DREQ_RECEIVED");
    assert_eq!(next(&b_rx), "TIMEWAIT_EXIT");
    assert!(becomes_destroyed(&passive), "the CM destroys it when over");
    assert!(
        passive.adopt().is_none(),
        "a destroyed id is nobody's to take"
    );
}

/// A request the handler kept and that is rejected later from another
/// thread goes IDLE with no event after it: the CM must destroy it then,
/// or it stays (with its device's id count) until the device closes.
#[test]
fn a_request_rejected_from_another_thread_is_destroyed() {
    let (a, b) = devices();
    let (id_tx, id_rx) = mpsc::channel::<CmId>();
    let id_tx = Mutex::new(id_tx);
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    id.send_mra(20, b"").unwrap();
                    id_tx.lock().send(id.clone()).unwrap();
                    Verdict::Keep
                },
                |_: &CmId, _: Event| Verdict::Keep,
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = a.create_id_with(active(a_tx)).unwrap();
    conn.request(request(&a, &b, SERVICE_ID)).unwrap();
    let passive = id_rx.recv_timeout(WAIT).unwrap();
    // One thread runs every handler: A's MRA event comes after B's
    // request handler returned, so the REJ below is sent outside it.
    assert_eq!(next(&a_rx), "MRA_RECEIVED");
    passive
        .reject(RejectReason::CONSUMER_DEFINED, b"", b"no")
        .unwrap();
    assert_eq!(next(&a_rx), "REJ_RECEIVED");
    assert!(
        destroyed(&passive),
        "a rejected request of the CM's is over"
    );
}

/// A request handler that panics: the worker goes on (as for any panic
/// under it), and the request is refused at once with a REJ, once, instead
/// of being forgotten for the peer to retry into the same panic until its
/// retries run out.
#[test]
fn a_panicking_request_handler_rejects_the_request_once() {
    let (a, b) = devices();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |_: &CmId, _: ReqInfo| -> Verdict {
                    counted.fetch_add(1, Ordering::Relaxed);
                    panic!("a request handler's bug");
                },
                |_: &CmId, _: Event| Verdict::Keep,
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = a.create_id_with(active(a_tx)).unwrap();
    // Not resent while the panic hook prints (a backtrace takes long): a
    // second call could only come from the CM, not from a retry.
    conn.request(request_timing(&a, &b, SERVICE_ID, 20))
        .unwrap();
    assert_eq!(next(&a_rx), "REJ_RECEIVED");
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

/// An event handler that panics on a connection of the CM's: treated as
/// `Verdict::Destroy` (its handler's state is unknown), so the connection
/// ends (the peer gets a DREQ) instead of living on unserved.
#[test]
fn a_panicking_event_handler_ends_its_connection() {
    let (a, b) = devices();
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                |id: &CmId, _: ReqInfo| {
                    id.reply(&Reply::new(next_qpn())).unwrap();
                    Verdict::Keep
                },
                |_: &CmId, event: Event| {
                    if let Event::RtuReceived { .. } = event {
                        panic!("an event handler's bug");
                    }
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = a.create_id_with(active(a_tx)).unwrap();
    conn.request(request(&a, &b, SERVICE_ID)).unwrap();
    assert_eq!(next(&a_rx), "REP_RECEIVED");
    assert_eq!(next(&a_rx), "DREQ_RECEIVED");
}

/// A handler that waits on a queue of the blocking API waits for the CM's
/// own thread, which is the one waiting: `EDEADLK` at once, as C's
/// `ibcm_process_events` gives inside a handler, not a hang (without a
/// bound) or a timeout that stalls every id (with one).
#[test]
fn a_blocking_wait_inside_a_handler_is_edeadlk() {
    let (a, b) = devices();
    let queued = Arc::new(b.listen(SERVICE_ID + 1).unwrap());
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    // No listener on SERVICE_ID: the REQ is rejected, and A's handler,
    // on the worker, waits for a request of B's queue listener.
    let conn = a
        .create_id_with(move |_: &CmId, event: Event| {
            if let Event::RejReceived { .. } = event {
                let got = queued.accept_timeout(Duration::from_secs(1));
                let _ = tx.lock().send(got.map(|_| ()).map_err(|e| e.errno()));
            }
            Verdict::Keep
        })
        .unwrap();
    conn.request(request(&a, &b, SERVICE_ID)).unwrap();
    let got = rx.recv_timeout(WAIT).unwrap();
    assert_eq!(got, Err(libc::EDEADLK));
}

/// The last handle of a device dropped inside a handler on the CM's
/// thread: its CM-owned connection is destroyed there (DREQ to the peer),
/// nothing waits for itself, and the device closes (it opens again).
#[test]
fn the_last_device_handle_dropped_inside_a_handler() {
    let (a, b) = devices();
    let b_name = b.name().to_owned();
    let (rtu_tx, rtu_rx) = mpsc::channel();
    let rtu_tx = Mutex::new(rtu_tx);
    let listener = b
        .listen_with(
            SERVICE_ID,
            (
                |id: &CmId, _: ReqInfo| {
                    id.reply(&Reply::new(next_qpn())).unwrap();
                    Verdict::Keep
                },
                move |_: &CmId, event: Event| {
                    if let Event::RtuReceived { .. } = event {
                        rtu_tx.lock().send(()).unwrap();
                    }
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel();
    let conn = a.create_id_with(active(a_tx)).unwrap();
    conn.request(request(&a, &b, SERVICE_ID)).unwrap();
    assert_eq!(next(&a_rx), "REP_RECEIVED");
    rtu_rx.recv_timeout(WAIT).unwrap();

    // B's last handle: a HandlerId of B's, dropped inside its own handler
    // (its REJ, for a REQ to a service nobody listens to).
    let slot: Arc<Mutex<Option<HandlerId>>> = Arc::default();
    let in_handler = slot.clone();
    let (done_tx, done_rx) = mpsc::channel();
    let done_tx = Mutex::new(done_tx);
    let last = b
        .create_id_with(move |_: &CmId, event: Event| {
            if let Event::RejReceived { .. } = event {
                drop(in_handler.lock().take());
                done_tx.lock().send(()).unwrap();
            }
            Verdict::Keep
        })
        .unwrap();
    let mut held = slot.lock();
    let last = held.insert(last);
    last.request(request(&b, &a, SERVICE_ID + 2)).unwrap();
    drop(listener);
    drop(b);
    drop(held);
    done_rx.recv_timeout(WAIT).unwrap();
    assert_eq!(next(&a_rx), "DREQ_RECEIVED");
    assert!(reopens(&b_name), "B closed with its last handle");
}

/// A listener dropped inside its own request handler: nothing waits for
/// itself (the handler holds the listener's callback guard), the request
/// in hand is still answered, and a later REQ finds no listener.
#[test]
fn a_listener_dropped_inside_its_own_request_handler() {
    let (a, b) = devices();
    let slot: Arc<Mutex<Option<ib_cm::handler::HandlerListener>>> = Arc::default();
    let in_handler = slot.clone();
    let listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    drop(in_handler.lock().take());
                    id.reply(&Reply::new(next_qpn())).unwrap();
                    Verdict::Keep
                },
                |_: &CmId, _: Event| Verdict::Keep,
            ),
        )
        .unwrap();
    *slot.lock() = Some(listener);
    let (a_tx, a_rx) = mpsc::channel();
    let first = a.create_id_with(active(a_tx.clone())).unwrap();
    first.request(request(&a, &b, SERVICE_ID)).unwrap();
    assert_eq!(next(&a_rx), "REP_RECEIVED");
    let second = a.create_id_with(active(a_tx)).unwrap();
    second.request(request(&a, &b, SERVICE_ID)).unwrap();
    assert_eq!(next(&a_rx), "REJ_RECEIVED");
}

/// How a connection of the CM's ends, for each_way_a_cm_connection_ends_destroys_its_id.
#[derive(Clone, Copy, Debug)]
enum End {
    /// The request handler refuses (`Verdict::Destroy`): a REJ.
    Refused,
    /// The peer rejects the REP: B enters timewait, then TIMEWAIT_EXIT.
    RepRejected,
    /// The peer never confirms: B's REP times out (REP_ERROR).
    RepTimedOut,
    /// B's handler destroys it once established: a DREQ.
    DestroyedEstablished,
}

/// No id of the CM's is left behind, however its connection ends: each
/// passive id is destroyed (a live IDLE one would still take calls).
#[test]
fn each_way_a_cm_connection_ends_destroys_its_id() {
    let (a, b) = devices();
    let seen: Arc<Mutex<Vec<CmId>>> = Arc::default();
    let keep = seen.clone();
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, req: ReqInfo| {
                    keep.lock().push(id.clone());
                    if req.private_data.starts_with(b"Refused") {
                        return Verdict::Destroy;
                    }
                    id.reply(&Reply::new(next_qpn())).unwrap();
                    Verdict::Keep
                },
                |_: &CmId, event: Event| match event {
                    Event::RtuReceived { private_data } if private_data.starts_with(b"destroy") => {
                        Verdict::Destroy
                    }
                    _ => Verdict::Keep,
                },
            ),
        )
        .unwrap();
    let mut conns = Vec::new();
    for end in [
        End::Refused,
        End::RepRejected,
        End::RepTimedOut,
        End::DestroyedEstablished,
    ] {
        let conn = a
            .create_id_with(move |id: &CmId, event: Event| {
                if let Event::RepReceived(_) = event {
                    let _ = match end {
                        End::RepRejected => id.reject(RejectReason::CONSUMER_DEFINED, b"", b""),
                        End::DestroyedEstablished => id.confirm(b"destroy"),
                        End::Refused | End::RepTimedOut => Ok(()),
                    };
                }
                Verdict::Keep
            })
            .unwrap();
        let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
        let req = ConnectRequest::builder(path, SERVICE_ID, next_qpn())
            .private_data(format!("{end:?}").as_bytes())
            .remote_cm_response_timeout(12)
            .local_cm_response_timeout(12)
            .max_cm_retries(2)
            .build();
        conn.request(req).unwrap();
        conns.push(conn);
    }
    let until = Instant::now() + WAIT;
    while seen.lock().len() < 4 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    let ids = seen.lock().clone();
    assert_eq!(ids.len(), 4, "four requests");
    for id in &ids {
        assert!(becomes_destroyed(id), "{id:?} left behind");
    }
}

/// A request rejected inside its own handler (its reason and private data
/// the handler's, `Verdict::Keep`): the REJ is the handler's, and the id,
/// destroyed by `reject` from inside its handler, is not touched after.
#[test]
fn a_request_rejected_inside_its_handler() {
    let (a, b) = devices();
    let (id_tx, id_rx) = mpsc::channel::<CmId>();
    let id_tx = Mutex::new(id_tx);
    let _listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    id.reject(RejectReason::CONSUMER_DEFINED, b"", b"mine")
                        .unwrap();
                    id_tx.lock().send(id.clone()).unwrap();
                    Verdict::Keep
                },
                |_: &CmId, _: Event| Verdict::Keep,
            ),
        )
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let conn = a
        .create_id_with(move |_: &CmId, event: Event| {
            if let Event::RejReceived { private_data, .. } = event {
                let _ = tx.lock().send(private_data);
            }
            Verdict::Keep
        })
        .unwrap();
    conn.request(request(&a, &b, SERVICE_ID)).unwrap();
    assert!(rx.recv_timeout(WAIT).unwrap().starts_with(b"mine"));
    let passive = id_rx.recv_timeout(WAIT).unwrap();
    assert!(becomes_destroyed(&passive));
    assert!(passive.adopt().is_none());
}

/// The last handle of a device dropped inside a handler while a request
/// for a gone listener of it is still queued on the worker: close cannot
/// wait for that work there (it runs after the handler), so it found an
/// id left, failed with EBUSY, and the device stayed open for ever (every
/// later open of its name: EBUSY).
#[test]
fn the_last_handle_dropped_in_a_handler_with_work_queued_behind() {
    let (a, b) = devices();
    let b_name = b.name().to_owned();
    let slow =
        |from: &Device, to: &Device, service_id: u64| request_timing(from, to, service_id, 20);

    // B's passive id, adopted, left in REP_SENT (A does not confirm); its
    // handler drops the last handles of B (a queue listener and itself)
    // on USER_ESTABLISHED.
    let last: Arc<Mutex<Option<HandlerId>>> = Arc::default();
    let queued: Arc<Mutex<Option<ib_cm::Listener>>> = Arc::default();
    let (adopt_last, drop_last, drop_queued) = (last.clone(), last.clone(), queued.clone());
    let (done_tx, done_rx) = mpsc::channel();
    let done_tx = Mutex::new(done_tx);
    let listener = b
        .listen_with(
            SERVICE_ID,
            (
                move |id: &CmId, _: ReqInfo| {
                    *adopt_last.lock() = id.adopt();
                    id.reply(&Reply::new(next_qpn())).unwrap();
                    Verdict::Keep
                },
                move |_: &CmId, event: Event| {
                    if let Event::UserEstablished = event {
                        drop(drop_queued.lock().take());
                        drop(drop_last.lock().take());
                        done_tx.lock().send(()).unwrap();
                    }
                    Verdict::Keep
                },
            ),
        )
        .unwrap();
    let (a_tx, a_rx) = mpsc::channel::<&'static str>();
    let a_tx = Mutex::new(a_tx);
    let unconfirmed = a
        .create_id_with(move |_: &CmId, event: Event| {
            let _ = a_tx.lock().send(event.kernel_name());
            Verdict::Keep
        })
        .unwrap();
    unconfirmed.request(slow(&a, &b, SERVICE_ID)).unwrap();
    assert_eq!(next(&a_rx), "REP_RECEIVED");
    *queued.lock() = Some(b.listen(SERVICE_ID + 1).unwrap());

    // The worker held in a handler of A's (a REJ: nobody listens there)
    // while a REQ for B's queue listener and B's USER_ESTABLISHED are
    // queued behind it, in that order.
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    let (held_tx, held_rx) = mpsc::channel();
    let held_tx = Mutex::new(held_tx);
    let blocker = a
        .create_id_with(move |_: &CmId, event: Event| {
            if let Event::RejReceived { .. } = event {
                held_tx.lock().send(()).unwrap();
                let _ = gate_rx.lock().recv_timeout(WAIT);
            }
            Verdict::Keep
        })
        .unwrap();
    blocker.request(slow(&a, &b, SERVICE_ID + 2)).unwrap();
    held_rx.recv_timeout(WAIT).unwrap();
    let _pending = a.request(slow(&a, &b, SERVICE_ID + 1)).unwrap();
    last.lock().as_ref().unwrap().notify_established().unwrap();
    drop(listener);
    drop(b);
    gate_tx.send(()).unwrap();

    done_rx.recv_timeout(WAIT).unwrap();
    assert!(reopens(&b_name), "B closed once its queued work ran");
}
