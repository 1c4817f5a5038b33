//! The async API's edge cases (`ib_cm::aio`): futures cancelled at
//! their await points, values dropped while events are on their way, the
//! runtime dropped under pending futures, a multi-threaded runtime, a peer
//! that disconnects before its RTU, a driver run by hand and dropped.
//! Each test names what it attacks and what must hold.
//!
//! `cargo test --features tokio --test rust_api_async_edges`
#![cfg(feature = "tokio")]

mod rust_api_support;

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Waker;
use std::time::Duration;

use ib_cm::aio::{Connection, Device};
use ib_cm::{ConnectRequest, Error, Event, RejectReason, Reply, State};
use rust_api_support::aio::{Flag, bounded, pending_once, pending_with, request_to, until};
use rust_api_support::{ATTR_RTU, WAIT, async_devices, next_qpn, pattern, runtime, wait_until};

const SERVICE_ID: u64 = 0x7b7b;

/// A REQ from `a` to `b`'s listener (the C suite's default timeouts).
fn request(a: &Device, b: &Device, qpn: u32, data: &[u8]) -> ConnectRequest {
    request_to(a, b, SERVICE_ID, qpn, data)
}

/// A connection between `a` (active) and `b` (passive) through `b`'s
/// listener `listener`.
async fn connect(
    a: &Device,
    b: &Device,
    listener: &ib_cm::aio::Listener,
) -> (Connection, Connection) {
    bounded("connect", async {
        tokio::join!(
            async { a.connect(request(a, b, next_qpn(), b"conn")).await.unwrap() },
            async {
                let incoming = listener.accept().await.unwrap();
                incoming.accept(Reply::new(next_qpn())).await.unwrap()
            }
        )
    })
    .await
}

/// Attacks `IncomingRequest::reply` after the request was rejected by its
/// own side: the id is IDLE with no event on its way (a REJ we send makes
/// none), and the blocking API gives up on the event after a second. The
/// future must end with the refusal (`EINVAL`), not wait for ever.
#[tokio::test(flavor = "current_thread")]
async fn reply_after_own_reject_ends_with_the_refusal() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let pending = a.request(request(&a, &b, next_qpn(), b"rej")).unwrap();
    let incoming = bounded("the REQ", listener.accept()).await.unwrap();
    incoming
        .reject(RejectReason::CONSUMER_DEFINED, &[], b"no")
        .unwrap();
    assert_eq!(incoming.state(), State::Idle);
    match bounded("reply after reject", incoming.reply(Reply::new(0x41))).await {
        Err(e) => assert_eq!(e.errno(), libc::EINVAL, "{e}"),
        Ok(sent) => panic!("a REP after our own REJ: {sent:?}"),
    }
    match bounded("A's answer", pending.wait_reply()).await {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::CONSUMER_DEFINED),
        other => panic!("{other:?}"),
    }
}

/// Attacks `Device::connect` cancelled after the REP reached its queue
/// (woken, never polled again): the id is REP_RCVD, and dropping the
/// future must do what `ib_destroy_cm_id` does there, a REJ
/// `CONSUMER_DEFINED` that the passive side's wait for the RTU ends with.
#[tokio::test(flavor = "current_thread")]
async fn connect_dropped_after_the_rep_came_rejects() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let sent = {
        let mut connect = pin!(a.connect(request(&a, &b, next_qpn(), b"rep")));
        let woken = Arc::new(Flag::default());
        assert!(pending_with(connect.as_mut(), &Waker::from(woken.clone())));
        let incoming = bounded("the REQ", listener.accept()).await.unwrap();
        let sent = bounded("the REP", incoming.reply(Reply::new(0x42)))
            .await
            .unwrap();
        until("the REP in A's queue", || woken.woken()).await;
        sent
        // The connect future goes here, its REP unread.
    };
    match bounded("B's RTU", sent.wait_established()).await {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::CONSUMER_DEFINED),
        other => panic!("expected the REJ, got {other:?}"),
    }
}

/// Attacks `Device::connect` cancelled while the peer asked for more time
/// (MRA_REQ_RCVD): dropping it must send the REJ `TIMEOUT` of
/// `ib_destroy_cm_id` in that state, which the passive side's reply sees.
#[tokio::test(flavor = "current_thread")]
async fn connect_dropped_after_an_mra_rejects_timeout() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let incoming = {
        let mut connect = pin!(a.connect(request(&a, &b, next_qpn(), b"mra")));
        let woken = Arc::new(Flag::default());
        assert!(pending_with(connect.as_mut(), &Waker::from(woken.clone())));
        let incoming = bounded("the REQ", listener.accept()).await.unwrap();
        incoming.send_mra(20, b"later").unwrap();
        assert_eq!(incoming.state(), State::MraReqSent);
        // The MRA's event wakes the connect future, which takes it (the CM
        // waits longer) and waits on.
        until("A's MRA", || woken.woken()).await;
        assert!(pending_once(connect.as_mut()));
        incoming
    };
    match bounded("B's REP", incoming.reply(Reply::new(0x43))).await {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::TIMEOUT),
        Ok(sent) => match bounded("B's RTU", sent.wait_established()).await {
            Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::TIMEOUT),
            other => panic!("expected the REJ, got {other:?}"),
        },
        Err(e) => panic!("{e}"),
    }
}

/// Attacks `Connection::disconnect` in DREQ_RCVD before the peer's DREQ
/// event ran (the engine changed the state; the driver has not yet moved
/// the event): cancelled while it waits for that event, it must leave the
/// DREQ for `next_event`, after which a disconnect is refused (`EINVAL`,
/// nothing sent) and `reply_disconnect`'s data reaches the peer.
#[tokio::test(flavor = "current_thread")]
async fn disconnect_cancelled_before_the_peer_dreq_event_keeps_it() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (mut a_conn, mut b_conn) = connect(&a, &b, &listener).await;
    a_conn.send_disconnect(b"from a").unwrap();
    // No task of this runtime runs here: B's driver holds the event.
    wait_until("B in DREQ_RCVD", || b_conn.state() == State::DreqRcvd);
    {
        let disconnect = pin!(b_conn.disconnect(b"from b"));
        assert!(pending_once(disconnect));
    }
    match bounded("B's DREQ event", b_conn.next_event())
        .await
        .unwrap()
    {
        Event::DreqReceived { private_data } => assert!(private_data.starts_with(b"from a")),
        other => panic!("{other:?}"),
    }
    match bounded("a second disconnect", b_conn.disconnect(b"again")).await {
        Err(e) => assert_eq!(e.errno(), libc::EINVAL, "{e}"),
        Ok(drep) => panic!("a DREP for a DREQ never sent: {drep:?}"),
    }
    assert_eq!(b_conn.state(), State::DreqRcvd);
    b_conn.reply_disconnect(&pattern(224, 9)).unwrap();
    match bounded("A's DREP", a_conn.next_event()).await.unwrap() {
        Event::DrepReceived { private_data } => assert_eq!(private_data, pattern(224, 9)),
        other => panic!("{other:?}"),
    }
    for conn in [&mut a_conn, &mut b_conn] {
        let events = bounded("timewait", conn.wait_closed()).await.unwrap();
        assert_eq!(events, vec![]);
        assert!(matches!(conn.next_event().await, Err(Error::Closed { .. })));
    }
}

/// The same DREQ_RCVD race not cancelled: the disconnect must take the
/// peer's DREQ (the call crossed it), answer it (an empty DREP for the
/// peer's wait) and say so; no event is left behind but the end of
/// timewait.
#[tokio::test(flavor = "current_thread")]
async fn disconnect_racing_the_peer_dreq_event_answers_it() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (mut a_conn, mut b_conn) = connect(&a, &b, &listener).await;
    a_conn.send_disconnect(b"first").unwrap();
    wait_until("B in DREQ_RCVD", || b_conn.state() == State::DreqRcvd);
    match bounded("B's disconnect", b_conn.disconnect(b"second")).await {
        Err(Error::DisconnectCrossed { private_data, .. }) => {
            assert!(private_data.starts_with(b"first"));
        }
        other => panic!("{other:?}"),
    }
    match bounded("A's DREP", a_conn.next_event()).await.unwrap() {
        Event::DrepReceived { private_data } => assert_eq!(private_data, vec![0; 224]),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        bounded("B's timewait", b_conn.wait_closed()).await.unwrap(),
        vec![]
    );
    assert_eq!(
        bounded("A's timewait", a_conn.wait_closed()).await.unwrap(),
        vec![]
    );
}

/// Attacks `wait_closed` cancelled after it passed over an event (the
/// peer's DREQ, kept while it waits for the end of timewait): the event
/// must be the next call's, once, in its place; then the end of timewait,
/// then `Closed`.
#[tokio::test(flavor = "current_thread")]
async fn wait_closed_cancelled_leaves_what_it_passed_over() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (mut a_conn, mut b_conn) = connect(&a, &b, &listener).await;
    a_conn.send_disconnect(b"dreq").unwrap();
    {
        let mut closed = pin!(b_conn.wait_closed());
        let woken = Arc::new(Flag::default());
        assert!(pending_with(closed.as_mut(), &Waker::from(woken.clone())));
        until("the DREQ in B's queue", || woken.woken()).await;
        // Polled again: it passes over the DREQ and waits on.
        assert!(pending_once(closed.as_mut()));
        assert!(pending_once(closed.as_mut()));
    }
    assert!(matches!(
        b_conn.try_next_event(),
        Some(Event::DreqReceived { ref private_data }) if private_data.starts_with(b"dreq")
    ));
    assert_eq!(b_conn.try_next_event(), None);
    b_conn.reply_disconnect(b"drep").unwrap();
    assert!(matches!(
        bounded("A's DREP", a_conn.next_event()).await.unwrap(),
        Event::DrepReceived { .. }
    ));
    assert_eq!(
        bounded("B's timewait", b_conn.next_event()).await.unwrap(),
        Event::TimewaitExit
    );
    assert!(matches!(
        b_conn.next_event().await,
        Err(Error::Closed { .. })
    ));
    assert!(matches!(
        b_conn.wait_closed().await,
        Err(Error::Closed { .. })
    ));
}

/// Attacks `IncomingRequest::accept` when the peer's DREQ comes before its
/// RTU (the RTUs are lost): the future must end with a connection whose
/// first event is that DREQ; dropping the connection then answers it
/// (DREP), which the peer's `next_event` gets.
#[tokio::test(flavor = "current_thread")]
async fn accept_ends_with_the_dreq_that_came_before_the_rtu() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    a.drop_next_sent(ATTR_RTU, 100).unwrap();
    let (mut a_conn, mut b_conn) = bounded("connect", async {
        tokio::join!(
            async {
                let conn = a
                    .connect(request(&a, &b, next_qpn(), b"early"))
                    .await
                    .unwrap();
                conn.send_disconnect(b"before rtu").unwrap();
                conn
            },
            async {
                let incoming = listener.accept().await.unwrap();
                incoming.accept(Reply::new(0x44)).await.unwrap()
            }
        )
    })
    .await;
    assert_eq!(b_conn.rtu_private_data(), None);
    match bounded("B's first event", b_conn.next_event())
        .await
        .unwrap()
    {
        Event::DreqReceived { private_data } => assert!(private_data.starts_with(b"before rtu")),
        other => panic!("{other:?}"),
    }
    drop(b_conn);
    assert!(matches!(
        bounded("A's DREP", a_conn.next_event()).await.unwrap(),
        Event::DrepReceived { .. }
    ));
    assert_eq!(
        bounded("A's timewait", a_conn.wait_closed()).await.unwrap(),
        vec![]
    );
}

/// Attacks a runtime dropped while its tasks wait: a connect waiting for
/// its REP, a connection waiting for its next event, a listener waiting
/// for a request, and the driver. Shutting the runtime down drops them
/// all, and each must do at once what destroying its id does (the peer,
/// a blocking device, sees the REJ and the DREQ); then the device is
/// closed (its name opens again).
#[test]
fn runtime_dropped_under_pending_futures() {
    let (a_blocking, b) = rust_api_support::devices();
    let a_name = a_blocking.name().to_owned();
    drop(a_blocking);
    let listener = b.listen(SERVICE_ID).unwrap();
    let rt = runtime();
    let a = {
        let _in = rt.enter();
        Device::open_tokio(&a_name).unwrap()
    };
    let req = |data: &[u8]| {
        let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
        ConnectRequest::builder(path, SERVICE_ID, next_qpn())
            .private_data(data)
            .build()
    };

    // One connection, established.
    let (a_conn, mut b_conn) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let incoming = listener.accept_timeout(WAIT).unwrap();
            incoming.accept(Reply::new(0x45)).unwrap()
        });
        let a_conn = rt
            .block_on(bounded("connect", a.connect(req(b"one"))))
            .unwrap();
        (a_conn, server.join().unwrap())
    });

    // Tasks that wait: the connection's next event, a connect nobody
    // answers yet, an accept nobody asks.
    let mut a_conn = a_conn;
    rt.spawn(async move {
        let ev = a_conn.next_event().await;
        panic!("no event was sent: {ev:?}");
    });
    let (a2, second) = (a.clone(), req(b"two"));
    rt.spawn(async move {
        let r = a2.connect(second).await;
        panic!("nobody answered: {r:?}");
    });
    let a_listener = a.listen(SERVICE_ID + 1).unwrap();
    rt.spawn(async move {
        let r = a_listener.accept().await;
        panic!("nobody asked: {r:?}");
    });
    drop(a);
    // The connect task sends its REQ when it first runs.
    rt.block_on(bounded("the second REQ", async {
        while listener.pending() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }));
    let incoming = listener.accept_timeout(WAIT).unwrap();
    assert!(incoming.private_data().starts_with(b"two"));

    drop(rt);

    match b_conn.next_event_timeout(WAIT).unwrap() {
        Event::DreqReceived { .. } => {}
        other => panic!("B expected the DREQ, got {other:?}"),
    }
    match incoming.reply(Reply::new(0x46)) {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::TIMEOUT),
        Ok(sent) => match sent.wait_established() {
            Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::TIMEOUT),
            other => panic!("expected the REJ, got {other:?}"),
        },
        Err(e) => panic!("{e}"),
    }
    let rt = runtime();
    let _in = rt.enter();
    let again = Device::open_tokio(&a_name);
    assert!(again.is_ok(), "A not closed: {again:?}");
}

/// Attacks a listener dropped while requests wait in its queue and the
/// connect futures that sent them wait: each must end with the REJ
/// `CONSUMER_DEFINED` the dropped listener's requests get.
#[tokio::test(flavor = "current_thread")]
async fn listener_dropped_with_queued_requests_rejects_them() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let connect = |data: &'static [u8]| {
        let req = request(&a, &b, next_qpn(), data);
        let a = a.clone();
        async move { a.connect(req).await }
    };
    let drop_listener = async {
        until("two requests queued", || listener.pending() == 2).await;
        drop(listener);
    };
    let (one, two, ()) = bounded("the REJs", async {
        tokio::join!(connect(b"one"), connect(b"two"), drop_listener)
    })
    .await;
    for r in [one, two] {
        match r {
            Err(Error::Rejected { reason, .. }) => {
                assert_eq!(reason, RejectReason::CONSUMER_DEFINED)
            }
            other => panic!("expected the REJ, got {other:?}"),
        }
    }
}

/// The names of two loop devices no other test of this process uses (both
/// closed again).
fn two_names() -> (String, String) {
    let (a, b) = rust_api_support::devices();
    (a.name().to_owned(), b.name().to_owned())
}

/// `driver`'s descriptor (a copy of its own) on this runtime's reactor.
/// `AsyncFd::new` is deprecated for a type whose `as_raw_fd` may change;
/// an `OwnedFd`'s never does (`register` would need code the compiler cannot check here).
#[allow(deprecated)]
fn on_reactor(driver: &ib_cm::aio::Driver) -> tokio::io::unix::AsyncFd<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    tokio::io::unix::AsyncFd::new(driver.as_fd().try_clone_to_owned().unwrap()).unwrap()
}

/// Runs `driver`'s events on this runtime (as `run_tokio`, by hand through
/// the public surface: readiness of `as_fd`, then `run_pending`) until
/// `done`.
async fn drive_until(driver: &ib_cm::aio::Driver, what: &str, mut done: impl FnMut() -> bool) {
    let fd = on_reactor(driver);
    bounded(what, async {
        while !done() {
            let mut guard = fd.readable().await.unwrap();
            if driver.run_pending(64).unwrap() < 64 {
                guard.clear_ready();
            }
        }
    })
    .await
}

/// Waits until `driver`'s descriptor is readable (an event is pending),
/// without running anything.
async fn readable(driver: &ib_cm::aio::Driver) {
    let fd = on_reactor(driver);
    bounded("an event pending", fd.readable())
        .await
        .unwrap()
        .retain_ready();
}

/// Attacks the promise that dropping the [`Driver`](ib_cm::aio::Driver)
/// leaves the events to whoever closes the device: a REQ whose event is
/// pending when the driver goes must still be run when the device closes
/// (its listener gone: forgotten, as the engine forgets an orphan), and the
/// device must close.
#[tokio::test(flavor = "current_thread")]
async fn driver_dropped_with_an_event_pending() {
    let (a_name, b_name) = two_names();
    let a = Device::open_tokio(&a_name).unwrap();
    let (b, b_driver) = Device::open(&b_name).unwrap();
    let listener = b.listen(SERVICE_ID).unwrap();
    let first = a.request(request(&a, &b, next_qpn(), b"one")).unwrap();
    drive_until(&b_driver, "the first REQ", || listener.pending() == 1).await;
    let second = a.request(request(&a, &b, next_qpn(), b"two")).unwrap();
    readable(&b_driver).await;
    assert_eq!(listener.pending(), 1);
    drop(b_driver);
    drop(listener); // rejects the first
    drop(b); // closes: runs the second's event, which refuses it
    match bounded("A's first answer", first.wait_reply()).await {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::CONSUMER_DEFINED),
        other => panic!("expected the REJ, got {other:?}"),
    }
    // The second's REQ event ran at the close, its listener gone: the
    // engine forgets such a request (src/cm/listen.rs, `forget_orphan`),
    // and its retransmissions find no device.
    match bounded("A's second answer", second.wait_reply()).await {
        Err(Error::NoAnswer { .. }) => {}
        other => panic!("expected no answer, got {other:?}"),
    }
    let again = Device::open(&b_name);
    assert!(again.is_ok(), "B not closed: {again:?}");
}

/// Attacks the driver of a device that closes while an event is pending
/// and the driver is kept: the close runs the event, and the driver then
/// says closed (`run_pending` `None`, `poll_closed` ready) instead of
/// running anything more.
#[tokio::test(flavor = "current_thread")]
async fn device_closed_under_its_driver() {
    let (a_name, b_name) = two_names();
    let a = Device::open_tokio(&a_name).unwrap();
    let (b, b_driver) = Device::open(&b_name).unwrap();
    let listener = b.listen(SERVICE_ID).unwrap();
    let pending = a.request(request(&a, &b, next_qpn(), b"x")).unwrap();
    readable(&b_driver).await;
    assert!(!b_driver.is_closed());
    assert!(pending_with(
        pin!(std::future::poll_fn(|cx| b_driver.poll_closed(cx))),
        Waker::noop()
    ));
    drop((listener, b));
    assert!(b_driver.is_closed());
    assert_eq!(b_driver.run_pending(64), None);
    bounded(
        "closed",
        std::future::poll_fn(|cx| b_driver.poll_closed(cx)),
    )
    .await;
    // Its listener gone, the request was forgotten (`forget_orphan`).
    match bounded("A's answer", pending.wait_reply()).await {
        Err(Error::NoAnswer { .. }) => {}
        other => panic!("expected no answer, got {other:?}"),
    }
}

/// Attacks a multi-threaded runtime driving both devices from several
/// workers while tasks on the other workers cancel connects at random
/// points, drop connections and requests in every state, disconnect and
/// crossing disconnects: every task must end (no lost wakeup, no
/// deadlock between a drop and the driver running the id's handler), and
/// both devices must close once the last value goes (no id left behind).
#[test]
fn multi_thread_runtime_drops_and_cancels_everywhere() {
    const N: usize = 160;
    let (a_name, b_name) = two_names();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = Device::open_tokio(&a_name).unwrap();
        let b = Device::open_tokio(&b_name).unwrap();
        let listener = b.listen(SERVICE_ID).unwrap();
        let server = tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                let incoming =
                    match tokio::time::timeout(Duration::from_secs(2), listener.accept()).await {
                        Ok(r) => r.unwrap(),
                        Err(_) => break, // every client is done
                    };
                tasks.spawn(async move {
                    let kind = incoming.private_data()[0] % 5;
                    if kind == 0 {
                        return; // dropped: REJ
                    }
                    let Ok(mut conn) = incoming.accept(Reply::new(next_qpn())).await else {
                        return;
                    };
                    match kind {
                        1 => {}
                        2 => {
                            let _ = conn.disconnect(b"server").await;
                        }
                        3 => {
                            let _ =
                                tokio::time::timeout(Duration::from_millis(5), conn.next_event())
                                    .await;
                        }
                        _ => {
                            // Every event to the end of timewait; the
                            // peer's DREQ answered.
                            while let Ok(event) = conn.next_event().await {
                                if let Event::DreqReceived { .. } = event {
                                    let _ = conn.reply_disconnect(b"server");
                                }
                            }
                        }
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        });
        let mut clients = tokio::task::JoinSet::new();
        for i in 0..N {
            let (a, b) = (a.clone(), b.clone());
            clients.spawn(async move {
                let seed = (i % 5) as u8;
                let req = request(&a, &b, next_qpn(), &pattern(92, seed));
                match i % 4 {
                    0 => {
                        // Cancelled at a point that varies with the load.
                        let wait = Duration::from_micros(50 * (i as u64 % 40));
                        let _ = tokio::time::timeout(wait, a.connect(req)).await;
                    }
                    1 => drop(a.connect(req).await),
                    2 => {
                        if let Ok(mut conn) = a.connect(req).await {
                            let _ = conn.disconnect(b"client").await;
                            let _ = conn.wait_closed().await;
                        }
                    }
                    _ => {
                        if let Ok(mut conn) = a.connect(req).await {
                            let _ =
                                tokio::time::timeout(Duration::from_millis(3), conn.next_event())
                                    .await;
                        }
                    }
                }
            });
        }
        bounded("the clients", async {
            while let Some(done) = clients.join_next().await {
                done.unwrap();
            }
        })
        .await;
        tokio::time::timeout(Duration::from_secs(30), server)
            .await
            .expect("the server's tasks")
            .unwrap();
    });
    drop(rt);
    let (a, b) = (ib_cm::Device::open(&a_name), ib_cm::Device::open(&b_name));
    assert!(a.is_ok() && b.is_ok(), "not closed: {a:?} {b:?}");
}

/// Attacks the listener's backlog with the async queue in between: 1030
/// REQs sent while no task runs (their events pile up for the driver, then
/// in the listener's queue). The listener must never hold more than the
/// backlog (1024), and each request beyond it must come in later through
/// its retransmission, once, so that every request is accepted exactly
/// once.
#[tokio::test(flavor = "current_thread")]
async fn a_flood_beyond_the_backlog_is_accepted_once_each() {
    const BACKLOG: usize = 1024;
    const N: usize = BACKLOG + 6;
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let mut qpns = std::collections::BTreeSet::new();
    let mut outgoing = Vec::new();
    for _ in 0..N {
        let qpn = next_qpn();
        qpns.insert(qpn);
        // Resent every ~260 ms, 15 times: about 4 s for the extras, so that
        // a request the listener takes late (a loaded machine drains 1024
        // accepts slowly) is still in REQ_SENT on the active side.
        let req = ConnectRequest::builder(path, SERVICE_ID, qpn)
            .remote_cm_response_timeout(16)
            .local_cm_response_timeout(16)
            .max_cm_retries(15)
            .build();
        outgoing.push(a.request(req).unwrap());
    }
    let mut taken = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    bounded("every request", async {
        while taken.len() < N {
            assert!(listener.pending() <= BACKLOG, "{}", listener.pending());
            let incoming = listener.accept().await.unwrap();
            let qpn = incoming.req().remote_qpn;
            assert!(seen.insert(qpn), "request of QP {qpn:#x} twice");
            taken.push(incoming);
        }
    })
    .await;
    assert_eq!(seen, qpns);
    // Every request is still waiting for its reply: in REQ_SENT, or in
    // MRA_REQ_RCVD where B's CM answered a retransmission with the
    // automatic MRA (cm_dup_req_handler) while the request sat in the
    // backlog. Neither timed out.
    assert!(
        outgoing
            .iter()
            .all(|o| matches!(o.state(), State::ReqSent | State::MraReqRcvd)),
        "{:?}",
        outgoing.iter().map(|o| o.state()).collect::<Vec<_>>()
    );
    // Nothing more comes: no duplicate of a request still held.
    let more = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(more.is_err(), "{more:?}");
}

/// A raw endpoint on the fabric (a loop device nobody opened as a
/// `Device`): sends crafted MADs, collects the MADs sent to it (as
/// `tests/rust_api_sidr_edges.rs`'s).
struct Raw {
    me: ib_cm::transport::loopback::LoopIdentity,
    transport: Arc<ib_cm::transport::loopback::LoopTransport>,
    got: Arc<std::sync::Mutex<Vec<ib_cm::wire::Mad>>>,
}

impl Raw {
    fn open() -> Self {
        use ib_cm::transport::loopback::{LoopIdentity, LoopTransport};
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(950);
        let name = format!("loop{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let me = LoopIdentity::from_name(&name).unwrap();
        let got: Arc<std::sync::Mutex<Vec<ib_cm::wire::Mad>>> = Arc::default();
        let sink = Arc::downgrade(&got);
        let recv: ib_cm::transport::RecvFn = Arc::new(move |_, _, mad: Arc<ib_cm::wire::Mad>| {
            if let Some(got) = sink.upgrade() {
                got.lock().unwrap().push(*mad);
            }
        });
        let transport = LoopTransport::open(me, recv).unwrap();
        Self { me, transport, got }
    }

    fn gid(&self) -> ib_cm::Gid {
        ib_cm::Gid(self.me.gid)
    }

    /// Sends `mad` to port 1 of `device`.
    fn send_to(&self, device: &Device, mad: &ib_cm::wire::Mad) {
        use ib_cm::transport::MadTransport;
        let gid = device.gid(1, 0).unwrap().0;
        let addr = ib_cm::transport::MadAddr {
            dgid: gid,
            dlid: ib_cm::transport::loopback::LoopIdentity::from_gid(&gid)
                .unwrap()
                .lid,
            ..ib_cm::transport::MadAddr::default()
        };
        self.transport.send(1, &addr, mad).unwrap();
    }

    /// The first MAD of attribute `attr_id` sent to this endpoint, and its
    /// transaction ID, within [`WAIT`].
    fn first(&self, attr_id: u16) -> (ib_cm::wire::Mad, u64) {
        let mut found = None;
        wait_until("a MAD for the raw peer", || {
            let got = self.got.lock().unwrap();
            found = got.iter().find_map(|m| {
                let (h, _) = ib_cm::wire::parse_header(&m[..]).ok()?;
                (h.attr_id == attr_id).then_some((*m, h.tid))
            });
            found.is_some()
        });
        found.unwrap()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        use ib_cm::transport::MadTransport;
        self.transport.close();
    }
}

/// Attacks `Device::connect` against a peer that sends its REP and, at
/// once, a REJ (it changed its mind, or its RTU timer fired): both events
/// are queued when the future runs. The REJ must not be lost: the future
/// ends with `Error::Rejected` (the REJ's reason), or with a connection
/// whose next event is the REJ; never with a bare refusal of the RTU.
#[tokio::test(flavor = "current_thread")]
async fn connect_answered_rep_then_rej_reports_the_rej() {
    use ib_cm::wire::{MsgResponse, Rej, Rep, Req, attr};
    let a = async_devices().0;
    let raw = Raw::open();
    let path = a.path_to(1, raw.gid()).unwrap();
    let req = ConnectRequest::builder(path, SERVICE_ID, next_qpn())
        .remote_cm_response_timeout(20)
        .local_cm_response_timeout(20)
        .build();
    let mut connect = pin!(a.connect(req));
    assert!(pending_once(connect.as_mut()));
    let (mad, tid) = raw.first(attr::REQ);
    let req = Req::decode(&mad).unwrap();
    let rep = Rep {
        local_comm_id: 0x0bad_0001,
        remote_comm_id: req.local_comm_id,
        local_qpn: 0x47,
        starting_psn: 1,
        local_ca_guid: 0x1122,
        ..Rep::default()
    };
    raw.send_to(&a, &rep.encode(tid));
    let rej = Rej {
        local_comm_id: 0x0bad_0001,
        remote_comm_id: req.local_comm_id,
        message_rejected: MsgResponse::Other,
        reason: RejectReason::CONSUMER_DEFINED.0,
        ..Rej::default()
    };
    raw.send_to(&a, &rej.encode(tid));
    // Both reach A's worker while no task runs (their events wait for
    // A's driver): the REP, then the REJ.
    std::thread::sleep(Duration::from_millis(200));
    match bounded("connect", connect).await {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::CONSUMER_DEFINED),
        Ok(mut conn) => match bounded("the REJ", conn.next_event()).await {
            Ok(Event::RejReceived { reason, .. }) => {
                assert_eq!(reason, RejectReason::CONSUMER_DEFINED)
            }
            other => panic!("expected the REJ, got {other:?}"),
        },
        Err(e) => panic!("the REJ was lost: {e}"),
    }
}
