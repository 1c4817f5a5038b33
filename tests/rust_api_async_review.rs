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
