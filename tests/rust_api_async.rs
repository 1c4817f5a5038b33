//! The async API (issue 32) on tokio: connect, accept and disconnect with
//! private data in one current-thread runtime (no thread of the test's
//! beyond the library's worker), many connections at once, futures dropped
//! while they wait, and an accept dropped after its request came.
//!
//! `cargo test --features tokio --test rust_api_async`
#![cfg(feature = "tokio")]

mod rust_api_support;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};

use ib_cm::aio::{Device, Listener};
use ib_cm::{ConnectRequest, Error, Event, RejectReason, Reply, State};
use rust_api_support::aio::{Flag, bounded, pending_once, request_to, until};
use rust_api_support::{async_devices, next_qpn, pattern};

const SERVICE_ID: u64 = 0x7a7a;

/// A REQ from `a` to `b`'s listener (the C suite's default timeouts).
fn request(a: &Device, b: &Device, qpn: u32, data: &[u8]) -> ConnectRequest {
    request_to(a, b, SERVICE_ID, qpn, data)
}

/// REQ, REP, RTU and DREQ, DREP with patterned private data of the full
/// sizes, both sides as futures joined on one current-thread runtime: the
/// devices' events run on this thread, in their drivers' tasks.
#[tokio::test(flavor = "current_thread")]
async fn async_connect_accept_disconnect_with_private_data_on_one_thread() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (req_data, rep_data, rtu_data) = (pattern(92, 1), pattern(196, 2), pattern(224, 3));
    let (dreq_data, drep_data) = (pattern(220, 4), pattern(224, 5));
    let test_thread = std::thread::current().id();

    let server = async {
        let incoming = listener.accept().await.unwrap();
        assert_eq!(incoming.private_data(), &req_data[..]);
        assert_eq!(incoming.state(), State::ReqRcvd);
        let reply = Reply {
            private_data: rep_data.clone(),
            ..Reply::new(0x22)
        };
        let mut conn = incoming.accept(reply).await.unwrap();
        assert_eq!(conn.rtu_private_data(), Some(&rtu_data[..]));
        let Event::DreqReceived { private_data } = conn.next_event().await.unwrap() else {
            panic!("B: expected the DREQ");
        };
        assert_eq!(private_data, dreq_data);
        conn.reply_disconnect(&drep_data).unwrap();
        assert_eq!(conn.wait_closed().await.unwrap(), vec![]);
        assert_eq!(std::thread::current().id(), test_thread);
    };
    let client = async {
        let req = request(&a, &b, 0x11, &req_data);
        let replied = a.request(req).unwrap().wait_reply().await.unwrap();
        assert_eq!(replied.rep().private_data, rep_data);
        assert_eq!(replied.rep().remote_qpn, 0x22);
        let mut conn = replied.confirm(&rtu_data).unwrap();
        assert_eq!(conn.state(), State::Established);
        assert_eq!(conn.disconnect(&dreq_data).await.unwrap(), drep_data);
        assert_eq!(conn.next_event().await.unwrap(), Event::TimewaitExit);
        assert!(matches!(conn.next_event().await, Err(Error::Closed { .. })));
    };
    bounded("connect and disconnect", async {
        tokio::join!(server, client)
    })
    .await;
}

/// 200 connections at once on a multi-threaded runtime: each task
/// connects and disconnects with its own private data; the server accepts
/// each in a task of its own and answers with data derived from the REQ's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_many_concurrent_connections() {
    const N: usize = 200;
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let server = tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..N {
            let incoming = listener.accept().await.unwrap();
            tasks.spawn(async move {
                let seed = incoming.private_data()[0];
                let mut conn = incoming.accept(Reply::new(next_qpn())).await.unwrap();
                match conn.next_event().await.unwrap() {
                    Event::DreqReceived { private_data } => {
                        assert_eq!(private_data, pattern(220, seed));
                    }
                    other => panic!("server: {other:?}"),
                }
                conn.reply_disconnect(&pattern(224, seed ^ 0xff)).unwrap();
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
            let seed = i as u8;
            let req = request(&a, &b, next_qpn(), &pattern(92, seed));
            let mut conn = a.connect(req).await.unwrap();
            let drep = conn.disconnect(&pattern(220, seed)).await.unwrap();
            assert_eq!(drep, pattern(224, seed ^ 0xff));
        });
    }
    bounded("200 connections", async {
        while let Some(done) = clients.join_next().await {
            done.unwrap();
        }
        server.await.unwrap();
    })
    .await;
}

/// A connect future dropped while it waits for the REP cancels the request
/// (the passive side sees the REJ), and a next_event future dropped while
/// it waits loses nothing: the event comes to the next call.
#[tokio::test(flavor = "current_thread")]
async fn async_dropped_futures_cancel_or_keep() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();

    // Connect, dropped after its REQ went: the REQ's id is destroyed.
    {
        let connect = pin!(a.connect(request(&a, &b, next_qpn(), b"dropped")));
        assert!(pending_once(connect));
    }
    let incoming = bounded("the REQ", listener.accept()).await.unwrap();
    assert_eq!(&incoming.private_data()[..7], b"dropped");
    match bounded("the REP", incoming.reply(Reply::new(0x33))).await {
        // The REJ came first (REQ_RCVD → IDLE), or after the REP.
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::TIMEOUT),
        Ok(sent) => match bounded("the REJ", sent.wait_established()).await {
            Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::TIMEOUT),
            other => panic!("{other:?}"),
        },
        Err(e) => panic!("{e}"),
    }

    // A connection, and next_event futures dropped before and after the
    // DREQ came.
    let (mut a_conn, mut b_conn) = bounded("connect", async {
        tokio::join!(
            async {
                a.connect(request(&a, &b, next_qpn(), b"kept"))
                    .await
                    .unwrap()
            },
            async {
                let incoming = listener.accept().await.unwrap();
                incoming.accept(Reply::new(0x34)).await.unwrap()
            }
        )
    })
    .await;
    {
        let next = pin!(b_conn.next_event());
        assert!(pending_once(next));
    }
    a_conn.send_disconnect(b"later").unwrap();
    {
        let mut next = pin!(b_conn.next_event());
        let woken = Arc::new(Flag::default());
        let waker = Waker::from(woken.clone());
        let polled = next.as_mut().poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
        // The DREQ reaches B's queue and wakes this future, which is
        // dropped without being polled again.
        until("the DREQ in B's queue", || woken.woken()).await;
    }
    let event = bounded("the DREQ", b_conn.next_event()).await.unwrap();
    assert!(
        matches!(event, Event::DreqReceived { ref private_data } if private_data.starts_with(b"later"))
    );

    // Disconnect dropped after its DREQ went: the DREP comes to next_event.
    drop(b_conn); // answers the DREQ (DREP): A's first DREQ is done
    let ev = bounded("the DREP", a_conn.next_event()).await.unwrap();
    assert!(matches!(ev, Event::DrepReceived { .. }), "{ev:?}");
}

/// Cancellation safety of accept: an accept future woken by a request and
/// dropped without being polled again, and one dropped by `select!`, leave
/// the request for the next accept.
#[tokio::test(flavor = "current_thread")]
async fn async_accept_dropped_after_the_request_came_loses_nothing() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    {
        let accept = pin!(listener.accept());
        assert!(pending_once(accept));
        let _pending = a.request(request(&a, &b, next_qpn(), b"first")).unwrap();
        until("the first request queued", || listener.pending() == 1).await;
        // Dropped here: woken, never polled again.
        let incoming = accept_now(&listener).await;
        assert_eq!(&incoming.private_data()[..5], b"first");
    }
    let _second = a.request(request(&a, &b, next_qpn(), b"second")).unwrap();
    until("the second request queued", || listener.pending() == 1).await;
    // A select whose other branch is ready first drops the accept future.
    tokio::select! {
        biased;
        _ = std::future::ready(()) => {}
        _ = listener.accept() => panic!("the ready branch goes first"),
    }
    assert_eq!(listener.pending(), 1);
    let incoming = bounded("the second request", listener.accept())
        .await
        .unwrap();
    assert_eq!(&incoming.private_data()[..6], b"second");
}

/// The next request, which is queued already.
async fn accept_now(listener: &Listener) -> ib_cm::aio::IncomingRequest {
    bounded("a queued request", listener.accept())
        .await
        .unwrap()
}

/// Dropping a connection whose peer no longer answers (its DREQs are lost)
/// returns at once inside a task: the DREQ's retransmissions go on without
/// it, and the device closes.
#[tokio::test(flavor = "current_thread")]
async fn async_drop_does_not_wait_for_the_peer() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let (a_conn, _b_conn) = bounded("connect", async {
        tokio::join!(
            async { a.connect(request(&a, &b, next_qpn(), b"x")).await.unwrap() },
            async {
                let incoming = listener.accept().await.unwrap();
                incoming.accept(Reply::new(0x35)).await.unwrap()
            }
        )
    })
    .await;
    a.drop_next_sent(rust_api_support::ATTR_DREQ, 100).unwrap();
    // The DREQ and its retransmissions (18 ms apart) are lost: a drop that
    // waited for the DREP would not return within WAIT.
    bounded("drop", async { drop(a_conn) }).await;
    bounded("drop the device", async { drop(a) }).await;
}

/// Outside a runtime, open_tokio is refused (EINVAL), and the device is not
/// left open.
#[test]
fn async_open_tokio_outside_a_runtime_is_refused() {
    let err = Device::open_tokio("loop90").unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "{err}");
    let (device, driver) = Device::open("loop90").unwrap();
    assert_eq!(driver.run_pending(8), Some(0));
    drop(device);
    assert_eq!(driver.run_pending(8), None);
    assert!(driver.is_closed());
}

/// An id created ahead (IDLE, nothing sent) connects when its REQ goes.
#[tokio::test(flavor = "current_thread")]
async fn async_created_id_requests_later() {
    let (a, b) = async_devices();
    let listener = b.listen(SERVICE_ID).unwrap();
    let id = a.create_id().unwrap();
    assert_eq!(id.state(), State::Idle);
    assert_eq!(listener.pending(), 0);
    let pending = id.request(request(&a, &b, next_qpn(), b"late")).unwrap();
    assert_eq!(pending.state(), State::ReqSent);
    let (a_conn, _b_conn) = bounded("connect", async {
        let active = async { pending.wait_reply().await.unwrap().confirm(&[]).unwrap() };
        tokio::join!(active, async {
            let incoming = listener.accept().await.unwrap();
            assert_eq!(&incoming.private_data()[..4], b"late");
            incoming.accept(Reply::new(0x36)).await.unwrap()
        })
    })
    .await;
    assert_eq!(a_conn.state(), State::Established);
}
