//! SIDR through the Rust API (issue 32): a request answered with a QPN, a
//! Q_Key, information and private data (every byte checked both ways), a
//! refusal seen as data, the CM's own answers (nobody listens, a connection
//! listener, a request dropped unanswered), a request nobody answers, too
//! much data, a dropped pending request; and the MRA of a REP
//! (`ReceivedReply::send_mra`).

mod rust_api_support;

use std::time::{Duration, Instant};

use ib_cm::{
    Device, Error, RejectReason, Reply, SendStatus, SidrListener, SidrReply, SidrReplyParams,
    SidrRequest, SidrStatus, State,
};
use rust_api_support::*;

const SIDR_SERVICE_ID: u64 = 0x51d2;
/// SIDR_REQ and SIDR_REP, as `ib_cm::Device::drop_next_sent` takes them.
const ATTR_SIDR_REQ: u16 = 0x0017;
const ATTR_SIDR_REP: u16 = 0x0018;

/// Two loop devices and a SIDR listener on B.
struct SidrPair {
    a: Device,
    b: Device,
    listener: SidrListener,
}

impl SidrPair {
    fn new() -> Self {
        let (a, b) = devices();
        let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
        Self { a, b, listener }
    }

    /// A request from A for `service_id`: resent every `timeout_ms`,
    /// `retries` times, with `data`.
    fn request(&self, service_id: u64, timeout_ms: u32, retries: u8, data: &[u8]) -> SidrRequest {
        let path = self.a.path_to(1, self.b.gid(1, 0).unwrap()).unwrap();
        SidrRequest::builder(path, service_id)
            .timeout_ms(timeout_ms)
            .max_cm_retries(retries)
            .private_data(data)
            .build()
    }

    /// A request to B's listener that nothing resends while a test looks.
    fn patient(&self, data: &[u8]) -> SidrRequest {
        self.request(SIDR_SERVICE_ID, 10_000, 3, data)
    }
}

/// `data` followed by zeros up to `len` bytes: a message's whole field.
fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut field = data.to_vec();
    field.resize(len, 0);
    field
}

/// The reply `pending` gets, within [`WAIT`].
fn reply_of(pending: ib_cm::OutgoingSidrRequest) -> SidrReply {
    pending.wait_timeout(WAIT).unwrap()
}

/// A refusal: a status with QPN, Q_Key and information empty.
fn assert_refusal(reply: &SidrReply, status: SidrStatus) {
    assert_eq!(reply.status, status);
    assert_eq!((reply.qpn, reply.qkey), (0, 0));
    assert!(reply.info.is_empty());
    assert_eq!(reply.private_data, vec![0; 136]);
}

#[test]
fn request_and_reply_carry_every_byte_both_ways() {
    let pair = SidrPair::new();
    let request = pair.patient(&pattern(216, 5));
    let path_pkey = pair.a.path_to(1, pair.b.gid(1, 0).unwrap()).unwrap().pkey();
    let pending = pair.a.send_sidr_request(request).unwrap();
    assert_eq!(pending.state(), State::SidrReqSent);

    let incoming = pair.listener.accept_timeout(WAIT).unwrap();
    assert_eq!(incoming.state(), State::SidrReqRcvd);
    assert_eq!(incoming.service_id(), SIDR_SERVICE_ID);
    assert_eq!(incoming.port(), 1);
    assert_eq!(incoming.pkey(), path_pkey);
    assert_eq!(incoming.private_data(), pattern(216, 5));
    let answer = SidrReplyParams {
        info: pattern(72, 6),
        private_data: pattern(136, 7),
        ..SidrReplyParams::new(0x00ab_cdef, 0x1111_2222)
    };
    incoming.reply(answer).unwrap();

    let reply = reply_of(pending);
    assert_eq!(reply.status, SidrStatus::Success);
    assert_eq!(reply.qpn, 0x00ab_cdef);
    assert_eq!(reply.qkey, 0x1111_2222);
    assert_eq!(reply.info, pattern(72, 6));
    assert_eq!(reply.private_data, pattern(136, 7));
    assert_eq!(pair.listener.pending(), 0);
}

/// Short data arrives as the message's whole field, zeros after it; the
/// information is as long as the reply said; a QPN keeps its 24 bits.
#[test]
fn short_data_is_padded_and_information_keeps_its_length() {
    let pair = SidrPair::new();
    let pending = pair.a.send_sidr_request(pair.patient(b"who")).unwrap();
    let incoming = pair.listener.accept_timeout(WAIT).unwrap();
    assert_eq!(incoming.private_data(), padded(b"who", 216));
    let answer = SidrReplyParams {
        info: b"info".to_vec(),
        private_data: b"me".to_vec(),
        ..SidrReplyParams::new(0x7f12_3456, 7)
    };
    incoming.reply(answer).unwrap();
    let reply = reply_of(pending);
    assert_eq!(reply.qpn, 0x12_3456);
    assert_eq!(reply.info, b"info");
    assert_eq!(reply.private_data, padded(b"me", 136));
}

/// A reply that refuses is the answer, not an error: its status comes back
/// as sent, a value the kernel does not name too.
#[test]
fn a_refusal_status_is_data() {
    let pair = SidrPair::new();
    for status in [
        SidrStatus::Reject,
        SidrStatus::NoQp,
        SidrStatus::Other(0x42),
    ] {
        let pending = pair.a.send_sidr_request(pair.patient(&[])).unwrap();
        let incoming = pair.listener.accept_timeout(WAIT).unwrap();
        incoming
            .reply(SidrReplyParams::with_status(status))
            .unwrap();
        assert_refusal(&reply_of(pending), status);
    }
    let redirect = SidrReplyParams {
        status: SidrStatus::Redirect,
        info: pattern(72, 9),
        ..SidrReplyParams::new(0, 0)
    };
    let pending = pair.a.send_sidr_request(pair.patient(&[])).unwrap();
    pair.listener
        .accept_timeout(WAIT)
        .unwrap()
        .reply(redirect)
        .unwrap();
    let reply = reply_of(pending);
    assert_eq!(reply.status, SidrStatus::Redirect);
    assert_eq!(reply.info, pattern(72, 9));
}

/// Nobody listens: the CM itself answers `IB_SIDR_UNSUPPORTED`.
#[test]
fn no_listener_is_answered_unsupported() {
    let pair = SidrPair::new();
    let request = pair.request(SIDR_SERVICE_ID + 1, 10_000, 3, b"anyone?");
    let reply = pair.a.sidr_request(request).unwrap();
    assert_refusal(&reply, SidrStatus::Unsupported);
    assert_eq!(pair.listener.pending(), 0);
}

/// A connection listener answers a SIDR_REQ at once with `IB_SIDR_REJECT`
/// (and takes nothing); a SIDR listener rejects a REQ (`CONSUMER_DEFINED`).
#[test]
fn each_kind_of_listener_refuses_the_other_kind_of_request() {
    let pair = Pair::new();
    let path = pair.a.path_to(1, pair.b.gid(1, 0).unwrap()).unwrap();
    let sidr = SidrRequest::builder(path, SERVICE_ID)
        .timeout_ms(10_000)
        .build();
    assert_refusal(&pair.a.sidr_request(sidr).unwrap(), SidrStatus::Reject);
    assert_eq!(pair.listener.pending(), 0);

    let (a, b) = devices();
    let _sidr_listener = b.listen_sidr(SERVICE_ID).unwrap();
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let request = ib_cm::ConnectRequest::builder(path, SERVICE_ID, next_qpn())
        .remote_cm_response_timeout(20)
        .build();
    match a.connect(request) {
        Err(Error::Rejected { reason, .. }) => assert_eq!(reason, RejectReason::CONSUMER_DEFINED),
        other => panic!("expected a REJ, got {other:?}"),
    }
    // One listener per service ID, of either kind.
    match b.listen(SERVICE_ID) {
        Err(e) => assert_eq!(e.errno(), libc::EBUSY),
        Ok(l) => panic!("a second listener: {l:?}"),
    }
}

/// Every SIDR_REQ lost: after the retries, `NoAnswer` (`ETIMEDOUT`).
#[test]
fn a_request_nobody_receives_fails_with_no_answer() {
    let pair = SidrPair::new();
    pair.a.drop_next_sent(ATTR_SIDR_REQ, 100).unwrap();
    let request = pair.request(SIDR_SERVICE_ID, 20, 2, &[]);
    match pair.a.sidr_request(request) {
        Err(e @ Error::NoAnswer { .. }) => {
            assert_eq!(e.errno(), libc::ETIMEDOUT);
            let Error::NoAnswer { status, .. } = e else {
                unreachable!()
            };
            assert_eq!(status, SendStatus::ResponseTimeout);
        }
        other => panic!("expected no answer, got {other:?}"),
    }
    assert_eq!(pair.listener.pending(), 0);
}

/// The request arrives but its answer is held back: the request's resends
/// are duplicates (not new requests), and it ends in `NoAnswer`; the
/// answer that comes after finds nobody.
#[test]
fn a_request_held_unanswered_fails_with_no_answer_and_resends_are_duplicates() {
    let pair = SidrPair::new();
    let pending = pair
        .a
        .send_sidr_request(pair.request(SIDR_SERVICE_ID, 20, 3, &[]))
        .unwrap();
    let incoming = pair.listener.accept_timeout(WAIT).unwrap();
    match pending.wait_timeout(WAIT) {
        Err(Error::NoAnswer { status, .. }) => assert_eq!(status, SendStatus::ResponseTimeout),
        other => panic!("expected no answer, got {other:?}"),
    }
    assert_eq!(pair.listener.pending(), 0);
    assert_eq!(incoming.state(), State::SidrReqRcvd);
    incoming.reply(SidrReplyParams::new(1, 2)).unwrap();
}

/// A SIDR_REP that is lost: the request's resends are new requests then
/// (the answered one is forgotten, as in the kernel).
#[test]
fn a_lost_reply_ends_in_no_answer() {
    let pair = SidrPair::new();
    pair.b.drop_next_sent(ATTR_SIDR_REP, 100).unwrap();
    // Resends for half a second: some come after the answer, however slowly
    // this test's thread runs.
    let pending = pair
        .a
        .send_sidr_request(pair.request(SIDR_SERVICE_ID, 50, 10, &[]))
        .unwrap();
    let incoming = pair.listener.accept_timeout(WAIT).unwrap();
    incoming.reply(SidrReplyParams::new(1, 2)).unwrap();
    let again = pair.listener.accept_timeout(WAIT).unwrap();
    assert_eq!(again.state(), State::SidrReqRcvd);
    assert!(matches!(
        pending.wait_timeout(WAIT),
        Err(Error::NoAnswer { .. })
    ));
}

/// Too much data is refused with `EINVAL`: a request before anything is
/// sent; a reply, and the request consumed is answered as a dropped one.
#[test]
fn too_much_data_is_einval() {
    let pair = SidrPair::new();
    let too_long = pair.patient(&[0; 217]);
    assert_einval(pair.a.sidr_request(too_long), "private_data_len 217 > 216");
    assert_eq!(pair.listener.pending(), 0);

    let cases = [
        (
            SidrReplyParams {
                private_data: vec![0; 137],
                ..SidrReplyParams::new(1, 2)
            },
            "private_data_len 137 > 136",
        ),
        (
            SidrReplyParams {
                info: vec![0; 73],
                ..SidrReplyParams::new(1, 2)
            },
            "info_length 73 > 72",
        ),
    ];
    for (answer, rule) in cases {
        let pending = pair.a.send_sidr_request(pair.patient(&[])).unwrap();
        let incoming = pair.listener.accept_timeout(WAIT).unwrap();
        assert_einval(incoming.reply(answer), rule);
        assert_refusal(&reply_of(pending), SidrStatus::Reject);
    }
}

/// Dropping an incoming request unanswered answers `IB_SIDR_REJECT`, as
/// `ib_destroy_cm_id` in SIDR_REQ_RCVD; so does dropping the listener
/// with a request nobody took.
#[test]
fn dropped_incoming_request_and_listener_answer_reject() {
    let pair = SidrPair::new();
    let pending = pair.a.send_sidr_request(pair.patient(b"x")).unwrap();
    drop(pair.listener.accept_timeout(WAIT).unwrap());
    assert_refusal(&reply_of(pending), SidrStatus::Reject);

    let pending = pair.a.send_sidr_request(pair.patient(b"y")).unwrap();
    let t0 = Instant::now();
    while pair.listener.pending() == 0 {
        assert!(t0.elapsed() < WAIT, "the SIDR_REQ never came");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(pair.listener);
    assert_refusal(&reply_of(pending), SidrStatus::Reject);
}

/// Dropping a pending request cancels it: the CM stops resending it. B's
/// answers are lost, so a request still alive would come back as a new
/// one once B answered (and forgot) the first.
#[test]
fn dropped_pending_request_is_not_resent() {
    // Control (devices of its own): not dropped, the request comes back
    // after B's lost answer.
    let control = SidrPair::new();
    control.b.drop_next_sent(ATTR_SIDR_REP, 100).unwrap();
    let request = control.request(SIDR_SERVICE_ID, 20, 15, &[]);
    let pending = control.a.send_sidr_request(request).unwrap();
    drop(control.listener.accept_timeout(WAIT).unwrap());
    drop(control.listener.accept_timeout(WAIT).unwrap());
    drop(pending);

    let pair = SidrPair::new();
    pair.b.drop_next_sent(ATTR_SIDR_REP, 100).unwrap();
    // Resends for a second if nothing cancels them.
    let request = pair.request(SIDR_SERVICE_ID, 20, 50, &[]);
    let pending = pair.a.send_sidr_request(request).unwrap();
    let incoming = pair.listener.accept_timeout(WAIT).unwrap();
    assert_eq!(pending.state(), State::SidrReqSent);
    drop(pending);
    // A resend sent before the drop reaches B as a duplicate while B still
    // holds the request: let those land first.
    std::thread::sleep(Duration::from_millis(200));
    drop(incoming); // its REJECT is lost too
    // A resend every 20 ms would bring it back within this.
    match pair.listener.accept_timeout(Duration::from_millis(300)) {
        Err(Error::TimedOut { .. }) => {}
        other => panic!("the dropped request came back: {other:?}"),
    }
}

/// The active side asks for more time before its RTU: B's REP is then
/// MRA_REP_RCVD, and the RTU that follows establishes both sides. Too much
/// MRA data is `EINVAL`, and the REP is still there to answer.
#[test]
fn received_reply_sends_an_mra_the_peer_sees() {
    let pair = Pair::new();
    let (pending, incoming) = pair.start(Timing::Slow);
    let sent = incoming.reply(Reply::new(next_qpn())).unwrap();
    let replied = pending.wait_reply().unwrap();
    assert_eq!(replied.state(), State::RepRcvd);
    assert_einval(replied.send_mra(20, &[0; 223]), "223 > 222");
    assert_eq!(replied.state(), State::RepRcvd);

    replied.send_mra(20, &pattern(222, 3)).unwrap();
    assert_eq!(replied.state(), State::MraRepSent);
    let t0 = Instant::now();
    while sent.state() != State::MraRepRcvd {
        assert!(
            t0.elapsed() < WAIT,
            "B never saw the MRA: {:?}",
            sent.state()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let a = replied.confirm(b"ready").unwrap();
    let b = sent.wait_established().unwrap();
    assert_eq!(a.state(), State::Established);
    assert_eq!(b.state(), State::Established);
    assert_eq!(&b.rtu_private_data().unwrap()[..5], b"ready");
}

#[cfg(feature = "tokio")]
mod asynchronous {
    use std::time::Duration;

    use ib_cm::{SidrReplyParams, SidrRequest, SidrStatus};

    use super::{SIDR_SERVICE_ID, WAIT, pattern};
    use crate::rust_api_support::{async_devices, runtime};

    /// Request and reply on one current-thread runtime, every byte checked;
    /// then a request dropped unanswered is answered `IB_SIDR_REJECT`.
    #[test]
    fn async_request_and_reply() {
        runtime().block_on(async {
            let (a, b) = async_devices();
            let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
            let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
            let request = SidrRequest::builder(path, SIDR_SERVICE_ID)
                .timeout_ms(10_000)
                .private_data(&pattern(216, 1))
                .build();
            let server = async {
                let incoming = listener.accept().await.unwrap();
                assert_eq!(incoming.private_data(), pattern(216, 1));
                let answer = SidrReplyParams {
                    info: pattern(72, 2),
                    private_data: pattern(136, 3),
                    ..SidrReplyParams::new(0x42, 0x4242)
                };
                incoming.reply(answer).unwrap();
            };
            let client = a.sidr_request(request.clone());
            let ((), reply) = tokio::time::timeout(WAIT, async { tokio::join!(server, client) })
                .await
                .unwrap();
            let reply = reply.unwrap();
            assert_eq!(reply.status, SidrStatus::Success);
            assert_eq!((reply.qpn, reply.qkey), (0x42, 0x4242));
            assert_eq!(reply.info, pattern(72, 2));
            assert_eq!(reply.private_data, pattern(136, 3));

            let server = async { drop(listener.accept().await.unwrap()) };
            let client = a.sidr_request(request);
            let ((), reply) = tokio::time::timeout(WAIT, async { tokio::join!(server, client) })
                .await
                .unwrap();
            assert_eq!(reply.unwrap().status, SidrStatus::Reject);
        });
    }

    /// A `sidr_request` future dropped while it waits cancels the request:
    /// with B's answers lost, a request still alive would come back as a
    /// new one once B answered (and forgot) the first.
    #[test]
    fn async_dropped_request_future_is_not_resent() {
        runtime().block_on(async {
            let (a, b) = async_devices();
            let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
            b.drop_next_sent(super::ATTR_SIDR_REP, 100).unwrap();
            let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
            let request = SidrRequest::builder(path, SIDR_SERVICE_ID)
                .timeout_ms(20)
                .max_cm_retries(50)
                .build();
            let client = a.sidr_request(request);
            let server = async { listener.accept().await.unwrap() };
            // The request's future is gone once the request came.
            let incoming = tokio::time::timeout(WAIT, async {
                tokio::select! {
                    reply = client => panic!("a reply nobody sent: {reply:?}"),
                    incoming = server => incoming,
                }
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(incoming); // its REJECT is lost too
            let again = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
            assert!(again.is_err(), "the dropped request came back: {again:?}");
        });
    }

    /// An accept dropped before a request came loses nothing: the next one
    /// gets the request.
    #[test]
    fn async_accept_is_cancel_safe() {
        runtime().block_on(async {
            let (a, b) = async_devices();
            let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
            let nothing =
                tokio::time::timeout(std::time::Duration::from_millis(20), listener.accept()).await;
            assert!(nothing.is_err());
            let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
            let request = SidrRequest::builder(path, SIDR_SERVICE_ID)
                .timeout_ms(10_000)
                .build();
            let pending = a.send_sidr_request(request).unwrap();
            let incoming = tokio::time::timeout(WAIT, listener.accept())
                .await
                .unwrap()
                .unwrap();
            incoming
                .reply(SidrReplyParams::with_status(SidrStatus::NoQp))
                .unwrap();
            let reply = tokio::time::timeout(WAIT, pending.wait())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(reply.status, SidrStatus::NoQp);
        });
    }
}
