//! Hostile review of the async API (`ib_cm::aio`): futures cancelled at
//! their await points, values dropped while events are on their way, the
//! runtime dropped under pending futures, a multi-threaded runtime, a peer
//! that disconnects before its RTU, a driver run by hand and dropped.
//! Each test names what it attacks and what must hold.
//!
//! `cargo test --features tokio --test rust_api_async_review`
#![cfg(feature = "tokio")]

mod rust_api_support;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use ib_cm::aio::{Connection, Device};
use ib_cm::{ConnectRequest, Error, Event, RejectReason, Reply, State};
use rust_api_support::{ATTR_RTU, WAIT, async_devices, next_qpn, pattern, runtime};

const SERVICE_ID: u64 = 0x7b7b;

/// A REQ from `a` to `b`'s listener, with `data` and the C suite's default
/// timeouts (a DREQ resent every 18 ms, timewait 128 ms).
fn request(a: &Device, b: &Device, qpn: u32, data: &[u8]) -> ConnectRequest {
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    ConnectRequest::builder(path, SERVICE_ID, qpn)
        .private_data(data)
        .remote_cm_response_timeout(12)
        .local_cm_response_timeout(12)
        .max_cm_retries(5)
        .build()
}

/// `f` within [`WAIT`], or the test fails.
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: nothing within {WAIT:?}"),
    }
}

/// Polls `f` once with `waker`: true if it is pending.
fn pending_with<F: Future>(f: std::pin::Pin<&mut F>, waker: &Waker) -> bool {
    f.poll(&mut Context::from_waker(waker)).is_pending()
}

/// Polls `f` once, with a waker that does nothing: true if it is pending.
fn pending_once<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
    pending_with(f, Waker::noop())
}

/// Lets the runtime run its other tasks (the drivers) until `done`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    bounded(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
}

/// Waits on this thread, without letting the runtime run anything (so no
/// driver runs a handler meanwhile), until `done`; the library's worker
/// goes on (state changes, MADs).
fn spin_until(what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < WAIT, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

impl Flag {
    fn woken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
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
            async {
                a.connect(request(a, b, next_qpn(), b"conn"))
                    .await
                    .unwrap()
            },
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
async fn review_a_1_reply_after_own_reject_ends_with_the_refusal() {
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
async fn review_a_3_connect_dropped_after_the_rep_came_rejects() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let sent = {
        let mut connect = pin!(a.connect(request(&a, &b, next_qpn(), b"rep")));
        let woken = Arc::new(Flag::default());
        assert!(pending_with(
            connect.as_mut(),
            &Waker::from(woken.clone())
        ));
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
async fn review_a_4_connect_dropped_after_an_mra_rejects_timeout() {
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
async fn review_a_5_disconnect_cancelled_before_the_peer_dreq_event_keeps_it() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (mut a_conn, mut b_conn) = connect(&a, &b, &listener).await;
    a_conn.send_disconnect(b"from a").unwrap();
    // No task of this runtime runs here: B's driver holds the event.
    spin_until("B in DREQ_RCVD", || b_conn.state() == State::DreqRcvd);
    {
        let disconnect = pin!(b_conn.disconnect(b"from b"));
        assert!(pending_once(disconnect));
    }
    match bounded("B's DREQ event", b_conn.next_event()).await.unwrap() {
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
async fn review_a_6_disconnect_racing_the_peer_dreq_event_answers_it() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (mut a_conn, mut b_conn) = connect(&a, &b, &listener).await;
    a_conn.send_disconnect(b"first").unwrap();
    spin_until("B in DREQ_RCVD", || b_conn.state() == State::DreqRcvd);
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
    assert_eq!(bounded("B's timewait", b_conn.wait_closed()).await.unwrap(), vec![]);
    assert_eq!(bounded("A's timewait", a_conn.wait_closed()).await.unwrap(), vec![]);
}

/// Attacks `wait_closed` cancelled after it passed over an event (the
/// peer's DREQ, kept while it waits for the end of timewait): the event
/// must be the next call's, once, in its place; then the end of timewait,
/// then `Closed`.
#[tokio::test(flavor = "current_thread")]
async fn review_a_7_wait_closed_cancelled_leaves_what_it_passed_over() {
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
    assert!(matches!(b_conn.next_event().await, Err(Error::Closed { .. })));
    assert!(matches!(b_conn.wait_closed().await, Err(Error::Closed { .. })));
}

/// Attacks `IncomingRequest::accept` when the peer's DREQ comes before its
/// RTU (the RTUs are lost): the future must end with a connection whose
/// first event is that DREQ; dropping the connection then answers it
/// (DREP), which the peer's `next_event` gets.
#[tokio::test(flavor = "current_thread")]
async fn review_a_8_accept_ends_with_the_dreq_that_came_before_the_rtu() {
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
    match bounded("B's first event", b_conn.next_event()).await.unwrap() {
        Event::DreqReceived { private_data } => assert!(private_data.starts_with(b"before rtu")),
        other => panic!("{other:?}"),
    }
    drop(b_conn);
    assert!(matches!(
        bounded("A's DREP", a_conn.next_event()).await.unwrap(),
        Event::DrepReceived { .. }
    ));
    assert_eq!(bounded("A's timewait", a_conn.wait_closed()).await.unwrap(), vec![]);
}
