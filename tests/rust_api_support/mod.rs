//! What the `rust_api_*` tests share: pairs of loop devices, requests with
//! the C suite's timeouts, patterned private data. Only the public API.
#![allow(dead_code)] // each test file uses its part

#[cfg(feature = "tokio")]
pub mod aio;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ib_cm::{
    ConnectRequest, Connection, Device, Error, Event, Listener, OutgoingRequest, Reply, State,
};

pub const SERVICE_ID: u64 = 0x5a5a;
/// A bound on waits for what should come in milliseconds.
pub const WAIT: Duration = Duration::from_secs(10);
/// How long a test watches for something that must not come.
pub const SETTLE: Duration = Duration::from_millis(50);

/// DREQ and DREP, as `ib_cm::Device::drop_next_sent` takes them.
pub const ATTR_RTU: u16 = 0x0014;
pub const ATTR_DREQ: u16 = 0x0015;
pub const ATTR_DREP: u16 = 0x0016;

/// The names of two loop devices no other test of this process uses.
fn pair_names() -> (String, String) {
    static NEXT: AtomicU32 = AtomicU32::new(10);
    let n = NEXT.fetch_add(2, Ordering::Relaxed);
    (format!("loop{n}"), format!("loop{}", n + 1))
}

/// Two loop devices with names no other test of this process uses.
pub fn devices() -> (Device, Device) {
    let (a, b) = pair_names();
    (Device::open(&a).unwrap(), Device::open(&b).unwrap())
}

/// Two loop devices of the async API (their drivers on tokio), with names
/// no other test of this process uses; call it inside a runtime.
#[cfg(feature = "tokio")]
pub fn async_devices() -> (ib_cm::aio::Device, ib_cm::aio::Device) {
    let (a, b) = pair_names();
    let open = |name: &str| ib_cm::aio::Device::open_tokio(name).unwrap();
    (open(&a), open(&b))
}

/// A current-thread tokio runtime with IO and timers.
#[cfg(feature = "tokio")]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap()
}

/// Waits on this thread until `done`, [`WAIT`] at most (an async test's
/// runtime runs nothing meanwhile: no driver runs a handler; the
/// library's worker goes on).
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !done() {
        assert!(t0.elapsed() < WAIT, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A QP number no other connection of this process uses.
pub fn next_qpn() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0x100);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Patterned private data of `len` bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// The C suite's connection timeouts (`c-tests/common.c`).
#[derive(Clone, Copy, Debug)]
pub enum Timing {
    /// `conn_opts_default`: CM response timeouts of 12 (a DREQ is resent
    /// every 18 ms on loop devices), 5 retries, timewait 128 ms.
    Default,
    /// `conn_opts_slow`: timeouts of 20 and a packet lifetime of 18, so
    /// that nothing is resent while a test looks at a state (seconds);
    /// timewait about 2 s.
    Slow,
}

/// A listener on B and what a test connects with.
pub struct Pair {
    pub a: Device,
    pub b: Device,
    pub listener: Listener,
}

impl Pair {
    pub fn new() -> Self {
        let (a, b) = devices();
        let listener = b.listen(SERVICE_ID).unwrap();
        Self { a, b, listener }
    }

    /// A REQ from A to B's listener for QP `qpn`.
    pub fn request(&self, timing: Timing, qpn: u32) -> ConnectRequest {
        let mut path = self.a.path_to(1, self.b.gid(1, 0).unwrap()).unwrap();
        let (response_timeout, retries) = match timing {
            Timing::Default => (12, 5),
            Timing::Slow => {
                path.set_packet_life_time(18);
                (20, 5)
            }
        };
        ConnectRequest::builder(path, SERVICE_ID, qpn)
            .remote_cm_response_timeout(response_timeout)
            .local_cm_response_timeout(response_timeout)
            .max_cm_retries(retries)
            .responder_resources(4)
            .initiator_depth(4)
            .build()
    }

    /// Sends a REQ and takes it on B: (A's request, B's request).
    pub fn start(&self, timing: Timing) -> (OutgoingRequest, ib_cm::IncomingRequest) {
        let qpn = next_qpn();
        let pending = self.a.request(self.request(timing, qpn)).unwrap();
        let incoming = self.listener.accept_timeout(WAIT).unwrap();
        assert_eq!(incoming.req().remote_qpn, qpn);
        (pending, incoming)
    }

    /// Connects A to B on one thread: (A's connection, B's connection).
    pub fn connect(&self, timing: Timing) -> (Connection, Connection) {
        let (pending, incoming) = self.start(timing);
        let sent = incoming.reply(Reply::new(next_qpn())).unwrap();
        let a = pending.wait_reply().unwrap().confirm(&[]).unwrap();
        let b = sent.wait_established().unwrap();
        assert_eq!(a.state(), State::Established);
        assert_eq!(b.state(), State::Established);
        (a, b)
    }
}

/// `result` is the C API's `-EINVAL`, for a reason that says `rule`.
pub fn assert_einval<T: std::fmt::Debug>(result: Result<T, Error>, rule: &str) {
    assert_refused(result, libc::EINVAL, rule);
}

/// `result` is a refusal with `errno`, for a reason that says `rule`.
pub fn assert_refused<T: std::fmt::Debug>(result: Result<T, Error>, errno: i32, rule: &str) {
    match result {
        Err(Error::Refused {
            errno: e, reason, ..
        }) => {
            assert_eq!(e, errno, "errno for {reason:?}");
            assert!(reason.contains(rule), "{reason:?} does not say {rule:?}");
        }
        other => panic!("expected a refusal ({errno}, {rule:?}), got {other:?}"),
    }
}

/// The next event of `conn`, within [`WAIT`].
pub fn next(conn: &mut Connection) -> Event {
    conn.next_event_timeout(WAIT).unwrap()
}

/// Nothing comes for `conn` within [`SETTLE`].
pub fn assert_quiet(conn: &mut Connection) {
    match conn.next_event_timeout(SETTLE) {
        Err(Error::TimedOut { .. }) => {}
        other => panic!("expected no event, got {other:?}"),
    }
}

/// The end of timewait is `conn`'s next event, with nothing before it; IDLE
/// after.
pub fn assert_closes(conn: &mut Connection) {
    assert_eq!(conn.wait_closed(Some(WAIT)).unwrap(), vec![]);
    assert_eq!(conn.state(), State::Idle);
}
