//! SIDR's edge cases in the Rust API (issue 32): lifecycle races
//! (a request dropped while its answer comes, a listener's last handle
//! going while its requests wait, a reply after every other handle is
//! gone, futures dropped at their await point) and a peer that lies or
//! floods (requests beyond the backlog, duplicates, a SIDR_REP of a status
//! nobody names, with a vendor ID next to its QPN, with too much
//! information, or for a request that timed out). The peer is a raw
//! endpoint on the in-process fabric that sends crafted MADs.

mod rust_api_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use ib_cm::transport::loopback::{LoopIdentity, LoopTransport};
use ib_cm::transport::{MadAddr, MadTransport, RecvFn};
use ib_cm::wire::{Mad, SidrRep, SidrReq, attr, parse_header};
use ib_cm::{Device, Error, Gid, SidrReplyParams, SidrRequest, SidrStatus, State};
use parking_lot::{Condvar, Mutex};
use rust_api_support::*;

const SIDR_SERVICE_ID: u64 = 0x51d3;
/// `LISTEN_BACKLOG`, rdma_cm's `max_backlog`.
const BACKLOG: usize = 1024;

/// A raw endpoint on the fabric (a loop device nobody opened as a
/// `Device`): sends crafted MADs, collects the MADs sent to it.
struct Raw {
    me: LoopIdentity,
    transport: Arc<LoopTransport>,
    got: Arc<(Mutex<Vec<Mad>>, Condvar)>,
}

impl Raw {
    fn open() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(900);
        let name = format!("loop{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let me = LoopIdentity::from_name(&name).unwrap();
        let got: Arc<(Mutex<Vec<Mad>>, Condvar)> = Arc::default();
        let sink = Arc::downgrade(&got);
        let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
            if let Some(got) = sink.upgrade() {
                got.0.lock().push(*mad);
                got.1.notify_all();
            }
        });
        let transport = LoopTransport::open(me, recv).unwrap();
        Self { me, transport, got }
    }

    fn gid(&self) -> Gid {
        Gid(self.me.gid)
    }

    /// Sends `mad` to port 1 of `device`.
    fn send_to(&self, device: &Device, mad: &Mad) {
        let addr = MadAddr {
            dgid: device.gid(1, 0).unwrap().0,
            dlid: LoopIdentity::from_gid(&device.gid(1, 0).unwrap().0)
                .unwrap()
                .lid,
            ..MadAddr::default()
        };
        self.transport.send(1, &addr, mad).unwrap();
    }

    /// Waits for the `n`th MAD (1-based) sent to this endpoint.
    fn wait_for(&self, n: usize) -> Mad {
        let deadline = Instant::now() + WAIT;
        let mut got = self.got.0.lock();
        while got.len() < n {
            assert!(
                !self.got.1.wait_until(&mut got, deadline).timed_out(),
                "only {} MADs came, not {n}",
                got.len()
            );
        }
        got[n - 1]
    }

    /// The MADs of attribute `attr_id` received so far.
    fn received(&self, attr_id: u16) -> Vec<Mad> {
        let got = self.got.0.lock();
        got.iter()
            .filter(|m| parse_header(&m[..]).is_ok_and(|(h, _)| h.attr_id == attr_id))
            .copied()
            .collect()
    }

    /// The SIDR_REPs received so far, decoded.
    fn replies(&self) -> Vec<SidrRep> {
        let reps = self.received(attr::SIDR_REP);
        reps.iter().map(|m| SidrRep::decode(m).unwrap()).collect()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        self.transport.close();
    }
}

/// A SIDR_REQ for `SIDR_SERVICE_ID` with request ID `request_id`.
fn sidr_req(request_id: u32) -> Mad {
    let req = SidrReq {
        request_id,
        pkey: 0xffff,
        service_id: SIDR_SERVICE_ID,
        ..SidrReq::default()
    };
    req.encode(u64::from(request_id))
}

/// A request from `from` to `to`'s `SIDR_SERVICE_ID`, resent every
/// `timeout_ms`, `retries` times.
fn request_to(from: &Device, to: Gid, timeout_ms: u32, retries: u8) -> SidrRequest {
    let path = from.path_to(1, to).unwrap();
    SidrRequest::builder(path, SIDR_SERVICE_ID)
        .timeout_ms(timeout_ms)
        .max_cm_retries(retries)
        .build()
}

/// A SIDR_REQ `raw` received from a device, decoded (the `n`th MAD).
fn sidr_req_received(raw: &Raw, n: usize) -> SidrReq {
    let mad = raw.wait_for(n);
    assert_eq!(parse_header(&mad[..]).unwrap().0.attr_id, attr::SIDR_REQ);
    SidrReq::decode(&mad).unwrap()
}

/// A SIDR_REP answering `req`.
fn answer(req: &SidrReq) -> SidrRep {
    SidrRep {
        request_id: req.request_id,
        service_id: req.service_id,
        ..SidrRep::default()
    }
}

/// A peer floods a listener nobody accepts from: the listener holds the
/// backlog (1024) and no more, each request beyond it is answered
/// `IB_SIDR_REJECT` at once (as rdma_cm's -ENOMEM does in the kernel),
/// and dropping the listener answers every request it held, REJECT too.
#[test]
fn requests_beyond_the_backlog_are_answered_reject_and_bounded() {
    let (_a, b) = devices();
    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    let raw = Raw::open();
    let extra = 5;
    let base = 0x7000_0000u32;
    for i in 0..(BACKLOG + extra) as u32 {
        raw.send_to(&b, &sidr_req(base + i));
    }
    wait_until("the requests beyond the backlog were answered", || {
        raw.replies().len() >= extra
    });
    std::thread::sleep(SETTLE);
    assert_eq!(listener.pending(), BACKLOG);
    let replies = raw.replies();
    assert_eq!(replies.len(), extra, "one answer each beyond the backlog");
    assert!(replies.iter().all(|r| r.status == 2), "{replies:?}");
    let answered: BTreeSet<u32> = replies.iter().map(|r| r.request_id).collect();
    let beyond: BTreeSet<u32> = (BACKLOG as u32..(BACKLOG + extra) as u32)
        .map(|i| base + i)
        .collect();
    assert_eq!(answered, beyond);

    drop(listener);
    wait_until("every queued request was answered", || {
        raw.replies().len() == BACKLOG + extra
    });
    let replies = raw.replies();
    assert!(replies.iter().all(|r| r.status == 2));
    let all: BTreeSet<u32> = replies.iter().map(|r| r.request_id).collect();
    assert_eq!(all.len(), BACKLOG + extra, "each request answered once");
}

/// A peer resends a SIDR_REQ (same request ID, same sender) while the first
/// waits to be accepted: it is a duplicate, not a second request; the one
/// request is answered once.
#[test]
fn a_duplicate_while_queued_is_not_queued_twice() {
    let (_a, b) = devices();
    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    let raw = Raw::open();
    for _ in 0..3 {
        raw.send_to(&b, &sidr_req(0x4242));
    }
    wait_until("the request came", || listener.pending() > 0);
    std::thread::sleep(SETTLE);
    assert_eq!(listener.pending(), 1);
    assert!(raw.replies().is_empty(), "a duplicate was answered");
    listener
        .accept_timeout(WAIT)
        .unwrap()
        .reply(SidrReplyParams::new(0x33, 0x44))
        .unwrap();
    raw.wait_for(1);
    std::thread::sleep(SETTLE);
    let replies = raw.replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!((replies[0].request_id, replies[0].status), (0x4242, 0));
    assert_eq!((replies[0].qpn, replies[0].qkey), (0x33, 0x44));
    assert!(listener.try_accept().is_none());
}

/// A peer answers with a status no one names and a vendor ID in the byte
/// after the QPN: the status comes as sent (`Other`), the QPN keeps its 24
/// bits, the information is as long as the reply says.
#[test]
fn an_unknown_status_and_the_qpns_24_bits_reach_the_user() {
    let (a, _b) = devices();
    let raw = Raw::open();
    let pending = a
        .send_sidr_request(request_to(&a, raw.gid(), 10_000, 3))
        .unwrap();
    let req = sidr_req_received(&raw, 1);
    let mut info = [0; 72];
    info[..3].copy_from_slice(b"abc");
    let rep = SidrRep {
        status: 0x42,
        qpn: 0x12_3456,
        vendor_id: 0xab_cdef,
        qkey: 0x5555_6666,
        info_length: 3,
        info,
        private_data: [7; 136],
        ..answer(&req)
    };
    raw.send_to(&a, &rep.encode(0, 0));
    let reply = pending.wait_timeout(WAIT).unwrap();
    assert_eq!(reply.status, SidrStatus::Other(0x42));
    assert_eq!(reply.qpn, 0x12_3456);
    assert_eq!(reply.qkey, 0x5555_6666);
    assert_eq!(reply.info, b"abc");
    assert_eq!(reply.private_data, vec![7; 136]);
}

/// A SIDR_REP whose information length is above 72 is malformed and
/// dropped (the request waits on and takes the next, sound reply); the
/// kernel would hand out a length past the field.
#[test]
fn a_reply_with_information_over_72_bytes_is_dropped() {
    let (a, _b) = devices();
    let raw = Raw::open();
    let pending = a
        .send_sidr_request(request_to(&a, raw.gid(), 10_000, 3))
        .unwrap();
    let req = sidr_req_received(&raw, 1);
    let liar = SidrRep {
        info_length: 200,
        qkey: 1,
        ..answer(&req)
    };
    raw.send_to(&a, &liar.encode(0, 0));
    std::thread::sleep(SETTLE);
    assert_eq!(pending.state(), State::SidrReqSent);
    let sound = SidrRep {
        info_length: 72,
        info: [9; 72],
        qkey: 2,
        ..answer(&req)
    };
    raw.send_to(&a, &sound.encode(0, 0));
    let reply = pending.wait_timeout(WAIT).unwrap();
    assert_eq!(reply.qkey, 2);
    assert_eq!(reply.info, vec![9; 72]);
}

/// A SIDR_REP for a request that already timed out (or was dropped) finds
/// nobody: nothing happens, and the device answers the next request.
#[test]
fn a_reply_after_the_request_timed_out_finds_nobody() {
    let (a, b) = devices();
    let raw = Raw::open();
    let timed_out = a
        .send_sidr_request(request_to(&a, raw.gid(), 20, 1))
        .unwrap();
    let req = sidr_req_received(&raw, 1);
    match timed_out.wait_timeout(WAIT) {
        Err(Error::NoAnswer { .. }) => {}
        other => panic!("expected no answer, got {other:?}"),
    }
    let dropped = a
        .send_sidr_request(request_to(&a, raw.gid(), 10_000, 1))
        .unwrap();
    let req2 = sidr_req_received(&raw, 3); // after the first one's resend
    drop(dropped);
    raw.send_to(&a, &answer(&req).encode(0, 0));
    raw.send_to(&a, &answer(&req2).encode(0, 0));

    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    let server = std::thread::spawn(move || {
        let incoming = listener.accept_timeout(WAIT).unwrap();
        incoming.reply(SidrReplyParams::new(0x77, 0x88)).unwrap();
    });
    let reply = a
        .sidr_request(request_to(&a, b.gid(1, 0).unwrap(), 10_000, 3))
        .unwrap();
    assert_eq!(
        (reply.status, reply.qpn, reply.qkey),
        (SidrStatus::Success, 0x77, 0x88)
    );
    server.join().unwrap();
}

/// A request taken from a listener keeps its device open: answered after
/// the listener and the last `Device` handle are gone, its reply still
/// reaches the peer.
#[test]
fn a_reply_after_listener_and_device_are_gone_is_sent() {
    let (a, b) = devices();
    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    let pending = a
        .send_sidr_request(request_to(&a, b.gid(1, 0).unwrap(), 10_000, 3))
        .unwrap();
    let incoming = listener.accept_timeout(WAIT).unwrap();
    drop(listener);
    drop(b);
    assert_eq!(incoming.state(), State::SidrReqRcvd);
    incoming.reply(SidrReplyParams::new(0x99, 0xaa)).unwrap();
    let reply = pending.wait_timeout(WAIT).unwrap();
    assert_eq!(
        (reply.status, reply.qpn, reply.qkey),
        (SidrStatus::Success, 0x99, 0xaa)
    );
}

/// A pending request dropped while its SIDR_REP is being delivered, many
/// times over: no panic, no hang, the reply is sent every time, and the
/// device serves requests after.
#[test]
fn a_request_dropped_while_its_reply_comes() {
    let (a, b) = devices();
    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    for i in 0..200u32 {
        let pending = a
            .send_sidr_request(request_to(&a, b.gid(1, 0).unwrap(), 10_000, 3))
            .unwrap();
        let incoming = listener.accept_timeout(WAIT).unwrap();
        let replier = std::thread::spawn(move || incoming.reply(SidrReplyParams::new(i, i)));
        if i % 2 == 0 {
            std::thread::yield_now();
        }
        drop(pending);
        replier.join().unwrap().unwrap();
    }
    let pending = a
        .send_sidr_request(request_to(&a, b.gid(1, 0).unwrap(), 10_000, 3))
        .unwrap();
    let incoming = listener.accept_timeout(WAIT).unwrap();
    incoming.reply(SidrReplyParams::new(0x1234, 5)).unwrap();
    assert_eq!(pending.wait_timeout(WAIT).unwrap().qpn, 0x1234);
    assert_eq!(listener.pending(), 0);
}

/// A listener shared by threads: one accepts and answers some requests,
/// then its handle goes; the last handle's drop answers the rest REJECT.
/// Every request gets exactly one answer: success for those taken.
#[test]
fn a_shared_listener_dropped_while_another_thread_accepts() {
    let (a, b) = devices();
    let listener = Arc::new(b.listen_sidr(SIDR_SERVICE_ID).unwrap());
    let n = 40;
    let pendings: Vec<_> = (0..n)
        .map(|_| {
            a.send_sidr_request(request_to(&a, b.gid(1, 0).unwrap(), 10_000, 3))
                .unwrap()
        })
        .collect();
    wait_until("every request came", || listener.pending() == n);
    let taken = 15;
    let accepting = Arc::clone(&listener);
    let acceptor = std::thread::spawn(move || {
        for _ in 0..taken {
            let incoming = accepting.accept_timeout(WAIT).unwrap();
            incoming.reply(SidrReplyParams::new(1, 1)).unwrap();
        }
    });
    drop(listener);
    acceptor.join().unwrap();
    let mut successes = 0;
    for pending in pendings {
        match pending.wait_timeout(WAIT).unwrap().status {
            SidrStatus::Success => successes += 1,
            SidrStatus::Reject => {}
            other => panic!("unexpected status {other:?}"),
        }
    }
    assert_eq!(successes, taken);
}

/// A listener dropped in the middle of a flood: the requests it held are
/// answered `IB_SIDR_REJECT`; those the CM had received but not yet handed
/// to it (their event still queued) are forgotten silently, as the engine
/// forgets a REQ whose listener went first (`listen::forget_orphan`), and
/// the peer's resend gets `IB_SIDR_UNSUPPORTED`; those after the drop get
/// `IB_SIDR_UNSUPPORTED` at once. Every request of a peer that resends is
/// answered, none runs out of retries.
#[test]
fn a_listener_dropped_during_a_flood_leaves_no_request_unanswered() {
    let (a, b) = devices();
    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    let n = 300;
    let to = b.gid(1, 0).unwrap();
    let flood = {
        let a = a.clone();
        std::thread::spawn(move || {
            (0..n)
                .map(|_| a.send_sidr_request(request_to(&a, to, 50, 20)).unwrap())
                .collect::<Vec<_>>()
        })
    };
    wait_until("some requests came", || listener.pending() > 10);
    drop(listener);
    let (mut rejected, mut unsupported) = (0, 0);
    for pending in flood.join().unwrap() {
        match pending.wait_timeout(WAIT).unwrap().status {
            SidrStatus::Reject => rejected += 1,
            SidrStatus::Unsupported => unsupported += 1,
            other => panic!("unexpected status {other:?}"),
        }
    }
    assert!(
        rejected > 10,
        "{rejected} rejected, {unsupported} unsupported"
    );
    assert_eq!(rejected + unsupported, n);
}

/// What the kernel's `cm_format_sidr_req_event` hands the listener: `pkey`
/// from the SIDR_REQ's payload, `bth_pkey` the P_Key of the packet (the
/// port's table at the P_Key index it came with, `cm_get_bth_pkey`), which
/// rdma_cm compares with the payload's to warn of a mismatch. A peer names
/// 0x8001 in its payload and sends on index 0, the loop port's default
/// partition 0xffff.
#[test]
fn bth_pkey_is_the_packets_not_the_payloads() {
    let (_a, b) = devices();
    let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
    let raw = Raw::open();
    let req = SidrReq {
        request_id: 0x15,
        pkey: 0x8001,
        service_id: SIDR_SERVICE_ID,
        ..SidrReq::default()
    };
    raw.send_to(&b, &req.encode(0x15));
    let incoming = listener.accept_timeout(WAIT).unwrap();
    assert_eq!(incoming.pkey(), 0x8001);
    assert_eq!(incoming.bth_pkey(), 0xffff);
    assert_eq!(incoming.port(), 1);
}

/// A SIDR listener on a service ID the CM assigns: `service_id` says
/// which, and a request for it is answered.
#[test]
fn an_assigned_service_id_serves_sidr() {
    let (a, b) = devices();
    let listener = b.listen_sidr(ib_cm::Listener::ASSIGN_SERVICE_ID).unwrap();
    // From 0x0200_0000_0000_0000 on, as the kernel's cm.listen_service_id
    // (the first one is the request's value itself).
    let service_id = listener.service_id();
    assert_eq!(service_id >> 56, 0x02, "{service_id:#x}");
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let request = SidrRequest::builder(path, service_id)
        .timeout_ms(10_000)
        .build();
    let pending = a.send_sidr_request(request).unwrap();
    let incoming = listener.accept_timeout(WAIT).unwrap();
    assert_eq!(incoming.service_id(), service_id);
    incoming.reply(SidrReplyParams::new(0x16, 0x16)).unwrap();
    let reply = pending.wait_timeout(WAIT).unwrap();
    assert_eq!((reply.status, reply.qpn), (SidrStatus::Success, 0x16));
}

#[cfg(feature = "tokio")]
mod asynchronous {
    use std::future::Future;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use ib_cm::aio::Device;
    use ib_cm::{SidrReplyParams, SidrRequest, SidrStatus};

    use super::{SIDR_SERVICE_ID, WAIT};
    use crate::rust_api_support::{async_devices, runtime};

    fn request(a: &Device, b: &Device) -> SidrRequest {
        let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
        SidrRequest::builder(path, SIDR_SERVICE_ID)
            .timeout_ms(10_000)
            .build()
    }

    /// An accept future that waited, was woken by a request, and was
    /// dropped before it was polled again took nothing: the request is
    /// there for the next accept. Two accepts waiting at once are both
    /// woken, so dropping one loses no wake-up for the other.
    #[test]
    fn an_accept_woken_then_dropped_loses_nothing() {
        runtime().block_on(async {
            let (a, b) = async_devices();
            let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
            let mut cx = Context::from_waker(Waker::noop());
            let mut first = Box::pin(listener.accept());
            assert!(first.as_mut().poll(&mut cx).is_pending());
            let second = listener.accept();
            let pending = a.send_sidr_request(request(&a, &b)).unwrap();
            // Let the driver run the request's handler, which wakes `first`.
            let t0 = std::time::Instant::now();
            while listener.pending() == 0 {
                assert!(t0.elapsed() < WAIT, "the request never came");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(first);
            let incoming = tokio::time::timeout(WAIT, second).await.unwrap().unwrap();
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

    /// A `wait` future dropped after its reply came but before it was
    /// polled again: the request is over, nothing is resent, the listener
    /// side is unaffected, and a new request works.
    #[test]
    fn a_wait_dropped_after_its_reply_came() {
        runtime().block_on(async {
            let (a, b) = async_devices();
            let listener = b.listen_sidr(SIDR_SERVICE_ID).unwrap();
            let mut cx = Context::from_waker(Waker::noop());
            let pending = a.send_sidr_request(request(&a, &b)).unwrap();
            let mut wait = Box::pin(pending.wait());
            assert!(wait.as_mut().poll(&mut cx).is_pending());
            let incoming = tokio::time::timeout(WAIT, listener.accept())
                .await
                .unwrap()
                .unwrap();
            incoming.reply(SidrReplyParams::new(3, 4)).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Now the reply waits in the future's queue; the future goes.
            drop(wait);
            let again = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
            assert!(again.is_err(), "a request came back: {again:?}");
            let next = a.send_sidr_request(request(&a, &b)).unwrap();
            let incoming = tokio::time::timeout(WAIT, listener.accept())
                .await
                .unwrap()
                .unwrap();
            incoming.reply(SidrReplyParams::new(5, 6)).unwrap();
            let reply = tokio::time::timeout(WAIT, next.wait())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((reply.qpn, reply.qkey), (5, 6));
        });
    }
}
