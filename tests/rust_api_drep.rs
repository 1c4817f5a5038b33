//! DREP through the Rust API, as `c-tests/test_drep_einval.c`,
//! `test_drep_resend.c` and `test_stateless_drep.c` check it through the C
//! one.

mod rust_api_support;

use std::thread;

use ib_cm::{Event, State};
use rust_api_support::*;

#[test]
fn drep_outside_dreq_rcvd_or_longer_than_224_bytes_is_einval_and_changes_nothing() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Slow);
    assert_einval(a.reply_disconnect(&[]), "in ESTABLISHED, needs DREQ_RCVD");
    assert_einval(b.reply_disconnect(&[]), "in ESTABLISHED, needs DREQ_RCVD");

    a.send_disconnect(&[]).unwrap();
    assert!(matches!(next(&mut b), Event::DreqReceived { .. }));
    assert_einval(a.reply_disconnect(&[]), "in DREQ_SENT, needs DREQ_RCVD");

    // Too long: still DREQ_RCVD, and nothing reached A.
    let big = pattern(255, 0x44);
    for len in [225, 255] {
        let rule = format!("private_data_len {len} > 224");
        assert_einval(b.reply_disconnect(&big[..len]), &rule);
        assert_eq!(b.state(), State::DreqRcvd);
    }
    assert_eq!(a.state(), State::DreqSent);
    assert_quiet(&mut a);

    // A valid DREP: TIMEWAIT at once, and A gets its 224 bytes.
    b.reply_disconnect(&big[..224]).unwrap();
    assert_eq!(b.state(), State::Timewait);
    assert_einval(b.reply_disconnect(&[]), "in TIMEWAIT, needs DREQ_RCVD");
    assert_eq!(
        next(&mut a),
        Event::DrepReceived {
            private_data: big[..224].to_vec()
        }
    );
    assert_eq!(a.state(), State::Timewait);
    assert_einval(a.reply_disconnect(&[]), "in TIMEWAIT, needs DREQ_RCVD");

    assert_closes(&mut a);
    assert_closes(&mut b);
    assert_einval(a.reply_disconnect(&[]), "in IDLE, needs DREQ_RCVD");
    assert_einval(b.reply_disconnect(&[]), "in IDLE, needs DREQ_RCVD");
}

/// cm_dreq_handler, TIMEWAIT branch: B's DREP is lost, A sends its DREQ
/// again, and B (in timewait) answers the duplicate with the DREP it
/// stored, private data and all, without a second DREQ_RECEIVED.
#[test]
fn lost_drep_is_resent_with_its_224_bytes_for_the_duplicate_dreq() {
    let pair = Pair::new();
    let (mut a, mut b) = pair.connect(Timing::Default);
    let drep = pattern(224, 0x88);
    pair.b.drop_next_sent(ATTR_DREP, 1).unwrap();
    thread::scope(|s| {
        let passive = s.spawn(|| {
            assert!(matches!(next(&mut b), Event::DreqReceived { .. }));
            b.reply_disconnect(&drep).unwrap();
            // Only the end of timewait follows: the duplicate DREQ is no
            // event.
            assert_closes(&mut b);
        });
        assert_eq!(a.disconnect(&[]).unwrap(), drep);
        assert_closes(&mut a);
        passive.join().unwrap();
    });
}

/// cm_dreq_handler, no matching id: B's connection is gone (its DREQ was
/// lost), so A's DREQ is answered by B's CM alone: a DREP without private
/// data.
#[test]
fn dreq_for_a_dropped_connection_gets_a_stateless_drep() {
    let pair = Pair::new();
    let (mut a, b) = pair.connect(Timing::Default);
    pair.b.drop_next_sent(ATTR_DREQ, 1).unwrap();
    drop(b);
    assert_quiet(&mut a);
    assert_eq!(a.state(), State::Established);

    assert_eq!(a.disconnect(&pattern(220, 0x99)).unwrap(), vec![0; 224]);
    assert_eq!(a.state(), State::Timewait);
    assert_closes(&mut a);
}
