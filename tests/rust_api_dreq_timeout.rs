//! A DREQ nobody answers, through the Rust API, as
//! `c-tests/test_dreq_timeout.c` checks it through the C one; and the
//! bounded disconnect.

mod rust_api_support;

use std::time::{Duration, Instant};

use ib_cm::{ConnectRequest, Error, Reply, SendStatus, State};
use rust_api_support::*;

/// cm_process_send_error for a DREQ: every DREQ of A is lost; after
/// 1 + max_cm_retries sends A is in timewait with DREQ_ERROR
/// (IB_WC_RESP_TIMEOUT_ERR), then IDLE; B heard nothing.
#[test]
fn unanswered_dreq_ends_in_dreq_error_then_timewait_exit() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    pair.a.drop_next_sent(ATTR_DREQ, 100).unwrap();

    let e = a.disconnect(&pattern(220, 0x77)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoAnswer {
                status: SendStatus::ResponseTimeout,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::ETIMEDOUT);
    assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(a.state(), State::Timewait);
    assert_closes(&mut a);

    assert_quiet(&mut b);
    assert_eq!(b.state(), State::Established);
    pair.a.drop_next_sent(ATTR_DREQ, 0).unwrap();
}

/// With rdma_cm's defaults a DREQ nobody answers is sent 16 times over a
/// minute; `set_disconnect_timeout` makes it three sends 10 ms apart.
#[test]
fn bounded_disconnect_ends_after_its_own_retries() {
    let pair = Pair::new();
    let path = pair.a.path_to(1, pair.b.gid(1, 0).unwrap()).unwrap();
    let request = ConnectRequest::builder(path, SERVICE_ID, next_qpn()).build();
    let mut b_conn = None;
    let mut a = std::thread::scope(|s| {
        let passive = s.spawn(|| {
            let incoming = pair.listener.accept_timeout(WAIT).unwrap();
            b_conn = Some(incoming.accept(Reply::new(next_qpn())).unwrap());
        });
        let a = pair.a.connect(request).unwrap();
        passive.join().unwrap();
        a
    });
    a.set_disconnect_timeout(Duration::from_millis(10), 2)
        .unwrap();
    assert_einval(
        a.set_disconnect_timeout(Duration::ZERO, 2),
        "timeout_ms 0 is not 1 to 600000",
    );
    pair.a.drop_next_sent(ATTR_DREQ, 100).unwrap();
    let t0 = Instant::now();
    let e = a.disconnect(&[]).unwrap_err();
    assert!(matches!(e, Error::NoAnswer { .. }), "{e:?}");
    // Not the minute of the unbounded DREQ (30 ms expected).
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(a.state(), State::Timewait);
    pair.a.drop_next_sent(ATTR_DREQ, 0).unwrap();
    drop(b_conn);
}
