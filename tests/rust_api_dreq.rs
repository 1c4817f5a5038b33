//! DREQ through the Rust API, as `c-tests/test_dreq_einval.c`,
//! `test_disconnect_active.c` and `test_disconnect_passive.c` check it
//! through the C one.

mod rust_api_support;

use std::thread;

use ib_cm::{Event, State};
use rust_api_support::*;

#[test]
fn dreq_with_more_than_220_bytes_is_einval_and_sends_nothing() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Slow);
    let big = pattern(255, 2);
    for len in [221, 255] {
        assert_einval(
            a.send_disconnect(&big[..len]),
            &format!("private_data_len {len} > 220"),
        );
        assert_einval(
            a.disconnect(&big[..len]),
            &format!("private_data_len {len} > 220"),
        );
        assert_einval(
            b.send_disconnect(&big[..len]),
            &format!("private_data_len {len} > 220"),
        );
    }
    assert_eq!(a.state(), State::Established);
    assert_eq!(b.state(), State::Established);
    assert_quiet(&mut a);
    assert_quiet(&mut b);
}

#[test]
fn dreq_outside_established_is_einval_and_changes_nothing() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Slow);

    // No private data: the DREQ carries 220 zero bytes. B holds it.
    a.send_disconnect(&[]).unwrap();
    assert_eq!(a.state(), State::DreqSent);
    assert_eq!(
        next(&mut b),
        Event::DreqReceived {
            private_data: vec![0; 220]
        }
    );
    assert_eq!(b.state(), State::DreqRcvd);
    assert_einval(a.send_disconnect(&[]), "in DREQ_SENT, needs ESTABLISHED");
    assert_einval(b.send_disconnect(&[]), "in DREQ_RCVD, needs ESTABLISHED");
    // The length is checked first.
    assert_einval(b.send_disconnect(&[0; 221]), "private_data_len 221 > 220");
    assert_eq!(a.state(), State::DreqSent);
    assert_eq!(b.state(), State::DreqRcvd);

    // TIMEWAIT on both.
    b.reply_disconnect(&[]).unwrap();
    assert_einval(b.send_disconnect(&[]), "in TIMEWAIT, needs ESTABLISHED");
    assert_eq!(
        next(&mut a),
        Event::DrepReceived {
            private_data: vec![0; 224]
        }
    );
    assert_einval(a.disconnect(&[]), "in TIMEWAIT, needs ESTABLISHED");

    // IDLE after timewait; nothing else came (no DREQ_ERROR, no REJ).
    assert_closes(&mut a);
    assert_closes(&mut b);
    assert_einval(a.send_disconnect(&[]), "in IDLE, needs ESTABLISHED");
    assert_einval(b.send_disconnect(&[]), "in IDLE, needs ESTABLISHED");
    assert!(matches!(a.next_event(), Err(ib_cm::Error::Closed { .. })));
}

/// The active side disconnects: 220 bytes of DREQ data reach B, B's 224
/// bytes of DREP data come back as `disconnect`'s result, both sides see
/// the end of timewait, and nothing else.
#[test]
fn active_disconnect_carries_220_bytes_and_returns_the_peers_224() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    let dreq = pattern(220, 0xd1);
    let drep = pattern(224, 0xd2);
    thread::scope(|s| {
        let passive = s.spawn(|| {
            assert_eq!(
                next(&mut b),
                Event::DreqReceived {
                    private_data: dreq.clone()
                }
            );
            assert_eq!(b.state(), State::DreqRcvd);
            b.reply_disconnect(&drep).unwrap();
            assert_eq!(b.state(), State::Timewait);
            assert_closes(&mut b);
        });
        assert_eq!(a.disconnect(&dreq).unwrap(), drep);
        assert_eq!(a.state(), State::Timewait);
        assert_closes(&mut a);
        passive.join().unwrap();
    });
}

/// The passive side disconnects, with its own timeouts: the same exchange
/// the other way.
#[test]
fn passive_disconnect_carries_220_bytes_and_returns_the_peers_224() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    let dreq = pattern(220, 0xe1);
    let drep = pattern(224, 0xe2);
    thread::scope(|s| {
        let active = s.spawn(|| {
            assert_eq!(
                next(&mut a),
                Event::DreqReceived {
                    private_data: dreq.clone()
                }
            );
            a.reply_disconnect(&drep).unwrap();
            assert_closes(&mut a);
        });
        assert_eq!(b.disconnect(&dreq).unwrap(), drep);
        assert_eq!(b.state(), State::Timewait);
        assert_closes(&mut b);
        active.join().unwrap();
    });
}

/// Both sides disconnect at once: each DREQ crosses the other; neither
/// call hangs, each ends with the peer's DREP or the crossed DREQ, and
/// both connections reach the end of timewait.
#[test]
fn crossed_disconnects_both_end_in_timewait() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    thread::scope(|s| {
        for (conn, seed) in [(&mut a, 1), (&mut b, 2)] {
            s.spawn(move || {
                match conn.disconnect(&pattern(220, seed)) {
                    Ok(drep) => assert_eq!(drep.len(), 224),
                    Err(ib_cm::Error::DisconnectCrossed { private_data, .. }) => {
                        assert_eq!(private_data, pattern(220, 3 - seed));
                    }
                    Err(e) => panic!("{e}"),
                }
                let before = conn.wait_closed(Some(WAIT)).unwrap();
                // At most the peer's DREP, come after the crossed DREQ.
                assert!(before.len() <= 1, "{before:?}");
                assert_eq!(conn.state(), State::Idle);
            });
        }
    });
}

/// The peer's DREQ came before ours was sent (DREQ_RCVD): `disconnect`
/// answers it as a crossed one instead of refusing with the C API's
/// `EINVAL`, and the peer gets its DREP.
#[test]
fn disconnect_after_the_peers_dreq_came_answers_it() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    a.send_disconnect(&pattern(220, 0x31)).unwrap();
    let t0 = std::time::Instant::now();
    while b.state() != State::DreqRcvd {
        assert!(t0.elapsed() < WAIT, "the DREQ never came");
        thread::sleep(std::time::Duration::from_millis(1));
    }
    match b.disconnect(&pattern(220, 0x32)) {
        Err(ib_cm::Error::DisconnectCrossed { private_data, .. }) => {
            assert_eq!(private_data, pattern(220, 0x31));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(b.state(), State::Timewait);
    assert_eq!(
        next(&mut a),
        Event::DrepReceived {
            private_data: vec![0; 224]
        }
    );
    assert_closes(&mut a);
    assert_closes(&mut b);
}
