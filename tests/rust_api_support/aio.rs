//! What the async tests share (feature `tokio`): requests with the C
//! suite's default timeouts, bounded waits, polling a future by hand.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use ib_cm::ConnectRequest;
use ib_cm::aio::Device;

use super::WAIT;

/// A REQ from `a` to `b`'s listener on `service_id`, with `data` and the C
/// suite's default timeouts (a DREQ resent every 18 ms, timewait 128 ms).
pub fn request_to(
    a: &Device,
    b: &Device,
    service_id: u64,
    qpn: u32,
    data: &[u8],
) -> ConnectRequest {
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    ConnectRequest::builder(path, service_id, qpn)
        .private_data(data)
        .remote_cm_response_timeout(12)
        .local_cm_response_timeout(12)
        .max_cm_retries(5)
        .build()
}

/// `f` within [`WAIT`], or the test fails.
pub async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: nothing within {WAIT:?}"),
    }
}

/// Polls `f` once with `waker`: true if it is pending.
pub fn pending_with<F: Future>(f: Pin<&mut F>, waker: &Waker) -> bool {
    f.poll(&mut Context::from_waker(waker)).is_pending()
}

/// Polls `f` once, with a waker that does nothing: true if it is pending.
pub fn pending_once<F: Future>(f: Pin<&mut F>) -> bool {
    pending_with(f, Waker::noop())
}

/// Lets the runtime run its other tasks (the drivers) until `done`.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    bounded(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
}

/// A waker that records that it was woken.
#[derive(Default)]
pub struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

impl Flag {
    /// Whether it was woken.
    pub fn woken(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}
