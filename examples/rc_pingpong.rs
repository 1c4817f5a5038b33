//! Two real RC QPs, connected by the CM's Rust API and sending data: one
//! process, device A (`-d`, default rxe0) and device B (`-D`, default
//! rxe1), each with a PD, a CQ and an RC QP of the [`sideway`] verbs
//! crate. A's REQ carries its QP's number and a PSN, B's REP its own (as
//! in the kernel, B sends from the REQ's PSN and A from the REP's); each
//! QP is moved by the attributes the CM computes
//! ([`QpAttributes::apply_to`](ib_cm::QpAttributes::apply_to)) at the
//! points the kernel's users move theirs: A to INIT once its REQ is out
//! (the CM has the attributes from REQ_SENT on), to RTR and RTS on the REP;
//! B to INIT and RTR before its REP (receiving from the REP's PSN, which
//! the CM learns only when the REP goes out: B sets it, as rdma_cm does),
//! to RTS once established. Then A sends
//! `-n` messages of `-s` bytes (default 10 × 4096) to B, and B one of `-s`
//! bytes back; every completion's status, opcode and length and every byte
//! are checked. A disconnects with 220 bytes of DREQ private data, B
//! answers with 224 bytes of DREP private data, both checked. It exits 0
//! only when everything was as sent.
//!
//! ```text
//! cargo run --features sideway --example rc_pingpong -- -d rxe0 -D rxe1
//! ```
//!
//! It needs verbs devices (SoftRoCE: rxe0 and rxe1 over a veth pair, as in
//! the VM of `make softroce`); the loop devices of the in-process fabric
//! have no QPs. Options, or environment variables: `-d` (`IBCM_DEVICE`),
//! `-D` (`IBCM_SERVER_DEVICE`), `-n` (`IBCM_COUNT`), `-s` (`IBCM_SIZE`).
//!
//! Registering memory and pointing a work request at it are `unsafe` in
//! sideway (the device writes there behind Rust's back): both are in
//! [`Buffer`], the one place of this example that uses `unsafe`.
#![allow(unsafe_code)] // registers memory with libibverbs (docs/architecture.md)

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ib_cm::{ConnectRequest, Device, Event, QpAttributes, QpState, Reply};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::completion::{BasicCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags,
};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const SERVICE_ID: u64 = 0x1b_90e9;
/// A bound on every wait: SoftRoCE under TCG takes milliseconds.
const WAIT: Duration = Duration::from_secs(30);
/// `IBV_WC_SEND`, `IBV_WC_RECV`.
const WC_SEND: u32 = 0;
const WC_RECV: u32 = 1 << 7;
/// A's messages carry seeds from 0x10 on, B's reply this one.
const REPLY_SEED: u8 = 0xb7;

fn main() -> Result {
    let name_a = option("-d", "IBCM_DEVICE", "rxe0");
    let name_b = option("-D", "IBCM_SERVER_DEVICE", "rxe1");
    let count = number("-n", &option("-n", "IBCM_COUNT", "10"))?;
    let size = number("-s", &option("-s", "IBCM_SIZE", "4096"))?;
    let total = count.checked_mul(size).filter(|&t| t <= 1 << 30);
    let Some(total) = total.filter(|_| count > 0 && size > 0) else {
        return Err("-n and -s: at least 1 each, 1 GiB at most in all".into());
    };
    let verbs = DeviceList::new()?;
    let mut a = Side::open(&verbs, &name_a, count, total, size)?;
    let mut b = Side::open(&verbs, &name_b, count, size, total)?;
    for (i, chunk) in a.send.bytes.chunks_mut(size).enumerate() {
        chunk.copy_from_slice(&pattern(size, 0x10u8.wrapping_add(i as u8)));
    }
    b.send.bytes.copy_from_slice(&pattern(size, REPLY_SEED));

    // The CM: B listens; A's REQ names A's QP.
    let listener = b.cm.listen(SERVICE_ID)?;
    let peer = (0..16)
        .map_while(|index| b.cm.gid(1, index).ok())
        .last()
        .ok_or("B's port has no GID")?;
    println!("rc_pingpong: {name_a} to {name_b} ({peer}), {count} x {size} bytes");
    let path = a.cm.path_to(1, peer)?;
    let request = ConnectRequest::builder(path, SERVICE_ID, a.qp.qp_number())
        .private_data(&pattern(92, 0xa1))
        .build();
    let pending = a.cm.request(request)?;
    println!("A: REQ sent: QPN {:#x}", a.qp.qp_number());
    apply("A", &mut a.qp, pending.qp_attributes(QpState::Init)?)?;
    a.recv.post_recv(&mut a.qp, 0, 0..size)?;

    let incoming = listener.accept_timeout(WAIT)?;
    let req = incoming.req();
    println!(
        "B: REQ received: QPN {:#x}, PSN {:#x}",
        req.remote_qpn, req.starting_psn
    );
    check(
        "REQ private data",
        incoming.private_data(),
        &pattern(92, 0xa1),
    )?;
    if req.remote_qpn != a.qp.qp_number() {
        return Err(format!("B: the REQ names QPN {:#x}", req.remote_qpn).into());
    }
    apply("B", &mut b.qp, incoming.qp_attributes(QpState::Init)?)?;
    for i in 0..count {
        b.recv
            .post_recv(&mut b.qp, i as u64, i * size..(i + 1) * size)?;
    }
    println!("B: {count} receives posted");
    let reply = Reply {
        private_data: pattern(196, 0xb1),
        ..Reply::new(b.qp.qp_number())
    };
    // As in the kernel, the CM learns this side's receive PSN from the REP
    // it sends (ib_send_cm_rep); a QP moved to RTR before that takes the
    // REP's PSN itself, as rdma_cm (cma_modify_qp_rtr) and IPoIB-CM do.
    let mut rtr = incoming.qp_attributes(QpState::Rtr)?;
    rtr.rq_psn = Some(reply.starting_psn);
    apply("B", &mut b.qp, rtr)?;
    let sent = incoming.reply(reply.clone())?;
    println!(
        "B: REP sent: QPN {:#x}, PSN {:#x}",
        reply.qp_num, reply.starting_psn
    );
    let rq_psn = sent.qp_attributes(QpState::Rtr)?.rq_psn;
    if rq_psn != Some(reply.starting_psn) {
        return Err(format!("B: after the REP the CM's RTR rq_psn is {rq_psn:x?}").into());
    }

    let replied = pending.wait_reply()?;
    let rep = replied.rep();
    println!(
        "A: REP received: QPN {:#x}, PSN {:#x}",
        rep.remote_qpn, rep.starting_psn
    );
    check("REP private data", &rep.private_data, &pattern(196, 0xb1))?;
    if rep.remote_qpn != b.qp.qp_number() {
        return Err(format!("A: the REP names QPN {:#x}", rep.remote_qpn).into());
    }
    apply("A", &mut a.qp, replied.qp_attributes(QpState::Rtr)?)?;
    apply("A", &mut a.qp, replied.qp_attributes(QpState::Rts)?)?;
    let mut a_conn = replied.confirm(&pattern(224, 0xc1))?;
    println!("A: RTU sent ({:?})", a_conn.state());
    let mut b_conn = sent.wait_established()?;
    println!("B: RTU received ({:?})", b_conn.state());
    apply("B", &mut b.qp, b_conn.qp_attributes(QpState::Rts)?)?;
    check(
        "RTU private data",
        b_conn.rtu_private_data().unwrap_or_default(),
        &pattern(224, 0xc1),
    )?;

    // Data: A to B, then B's reply to A.
    for i in 0..count {
        a.send
            .post_send(&mut a.qp, i as u64, i * size..(i + 1) * size)?;
    }
    a.expect("A", WC_SEND, count, size)?;
    b.expect("B", WC_RECV, count, size)?;
    check_data("B: A's messages", &b.recv.bytes, &a.send.bytes)?;
    b.send.post_send(&mut b.qp, 0, 0..size)?;
    b.expect("B", WC_SEND, 1, size)?;
    a.expect("A", WC_RECV, 1, size)?;
    check_data("A: B's reply", &a.recv.bytes, &b.send.bytes)?;

    // DREQ and DREP, each with the most private data it holds.
    a_conn.send_disconnect(&pattern(220, 0xd1))?;
    println!("A: DREQ sent ({:?})", a_conn.state());
    match b_conn.next_event_timeout(WAIT)? {
        Event::DreqReceived { private_data } => {
            check("DREQ private data", &private_data, &pattern(220, 0xd1))?
        }
        other => return Err(format!("B: expected a DREQ, got {other:?}").into()),
    }
    b_conn.reply_disconnect(&pattern(224, 0xe1))?;
    println!("B: DREP sent ({:?})", b_conn.state());
    match a_conn.next_event_timeout(WAIT)? {
        Event::DrepReceived { private_data } => {
            check("DREP private data", &private_data, &pattern(224, 0xe1))?
        }
        other => return Err(format!("A: expected a DREP, got {other:?}").into()),
    }
    for (side, conn) in [("A", &mut a_conn), ("B", &mut b_conn)] {
        let before = conn.wait_closed(Some(WAIT))?;
        if !before.is_empty() {
            return Err(format!("{side}: unexpected events {before:?}").into());
        }
        println!("{side}: timewait over ({:?})", conn.state());
    }
    println!(
        "rc_pingpong: {count} x {size} bytes A to B, {size} bytes B to A, every byte, \
         completion and private data as sent: OK"
    );
    Ok(())
}

/// Moves `qp` with `attrs` (one `ibv_modify_qp`) and says how.
fn apply(side: &str, qp: &mut BasicQueuePair, attrs: QpAttributes) -> Result {
    attrs.apply_to(qp)?;
    let state = attrs.state.map_or("RTS again".into(), |s| format!("{s:?}"));
    let mut what = format!("{side}: QP to {state}, mask {:#x}", attrs.mask);
    if let Some(qpn) = attrs.dest_qp_num {
        what += &format!(", dest QPN {qpn:#x}");
    }
    if let Some(psn) = attrs.rq_psn {
        what += &format!(", rq_psn {psn:#x}");
    }
    if let Some(psn) = attrs.sq_psn {
        what += &format!(", sq_psn {psn:#x}");
    }
    if let Some(mtu) = attrs.path_mtu {
        what += &format!(", path MTU {}", 128 << mtu);
    }
    if let Some(av) = attrs.address {
        what += &format!(", to {} (GID index {})", av.dgid, av.sgid_index);
    }
    println!("{what}");
    Ok(())
}

/// One end: the CM's device and a verbs device of the same name, with a PD,
/// a CQ, an RC QP and its two buffers. The QP is dropped first (fields
/// drop in order), before the memory its work requests point at.
struct Side {
    qp: BasicQueuePair,
    send: Buffer,
    recv: Buffer,
    cq: Arc<BasicCompletionQueue>,
    cm: Device,
}

impl Side {
    /// Opens `name`: a QP with room for `count` sends and receives, and
    /// buffers of `send` and `recv` bytes.
    fn open(
        verbs: &DeviceList,
        name: &str,
        count: usize,
        send: usize,
        recv: usize,
    ) -> Result<Side> {
        let device = verbs
            .iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| format!("no verbs device {name}"))?;
        let context: Arc<DeviceContext> = device.open()?;
        let pd = context.alloc_pd()?;
        let depth = u32::try_from(count + 1)?;
        let cq = context.create_cq_builder().setup_cqe(2 * depth).build()?;
        let qp = pd
            .create_qp_builder()
            .setup_send_cq(Arc::clone(&cq))
            .setup_recv_cq(Arc::clone(&cq))
            .setup_max_send_wr(depth)
            .setup_max_recv_wr(depth)
            .build()?;
        Ok(Side {
            qp,
            send: Buffer::register(&pd, send)?,
            recv: Buffer::register(&pd, recv)?,
            cq,
            cm: Device::open(name)?,
        })
    }

    /// Waits for `count` completions of `opcode`, each a success of `size`
    /// bytes, their work request ids 0, 1, ... in order.
    fn expect(&self, side: &str, opcode: u32, count: usize, size: usize) -> Result {
        let deadline = Instant::now() + WAIT;
        let mut seen = 0;
        while seen < count {
            let poller = match self.cq.start_poll() {
                Ok(poller) => poller,
                Err(PollCompletionQueueError::CompletionQueueEmpty) => {
                    if Instant::now() > deadline {
                        return Err(format!("{side}: {seen} of {count} completions").into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for wc in poller {
                let (id, status, op, len) = (wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len());
                // A send's byte_len is undefined (ibv_poll_cq(3)).
                let len_ok = opcode == WC_SEND || len as usize == size;
                if status != 0 || op != opcode || id != seen as u64 || !len_ok {
                    return Err(format!(
                        "{side}: completion {seen}: wr_id {id}, status {status}, \
                         opcode {op:#x}, {len} bytes; want wr_id {seen}, status 0 \
                         (IBV_WC_SUCCESS), opcode {opcode:#x}, {size} bytes"
                    )
                    .into());
                }
                seen += 1;
            }
        }
        let what = if opcode == WC_SEND { "send" } else { "receive" };
        println!("{side}: {count} {what} completions of {size} bytes, status SUCCESS");
        Ok(())
    }
}

/// Memory a QP sends from or receives into, registered with its PD. The
/// registration is dropped before the memory (fields drop in order), and a
/// boxed slice never moves or changes size.
struct Buffer {
    mr: Arc<MemoryRegion>,
    bytes: Box<[u8]>,
}

impl Buffer {
    /// `len` zero bytes, registered for local writes (receives).
    fn register(pd: &Arc<ProtectionDomain>, len: usize) -> Result<Buffer> {
        let bytes = vec![0u8; len].into_boxed_slice();
        // SAFETY: `bytes` is valid for `len` bytes and stays where it is as
        // long as the registration: both live in the Buffer, the
        // registration is dropped first.
        let mr = unsafe { pd.reg_mr(bytes.as_ptr() as usize, len, AccessFlags::LocalWrite)? };
        Ok(Buffer { mr, bytes })
    }

    /// Posts a receive into `range` of the buffer (`wr_id` names it in the
    /// completion); the bytes are read only after that completion.
    fn post_recv(&mut self, qp: &mut BasicQueuePair, wr_id: u64, range: Range<usize>) -> Result {
        let chunk = &mut self.bytes[range];
        let mut guard = qp.start_post_recv();
        let wr = guard.construct_wr(wr_id);
        // SAFETY: `chunk` is inside the registered memory (the index above
        // checked the range), which outlives the QP's use of it (Side drops
        // the QP first).
        unsafe { wr.setup_sge(self.mr.lkey(), chunk.as_mut_ptr() as u64, len32(chunk)?) };
        guard.post()?;
        Ok(())
    }

    /// Posts a signaled send of `range` of the buffer; it is not written
    /// until that send's completion.
    fn post_send(&self, qp: &mut BasicQueuePair, wr_id: u64, range: Range<usize>) -> Result {
        let chunk = &self.bytes[range];
        let mut guard = qp.start_post_send();
        let wr = guard
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .setup_send();
        // SAFETY: as in post_recv; the device only reads this memory.
        unsafe { wr.setup_sge(self.mr.lkey(), chunk.as_ptr() as u64, len32(chunk)?) };
        guard.post()?;
        Ok(())
    }
}

/// A chunk's length as a work request's.
fn len32(chunk: &[u8]) -> Result<u32> {
    Ok(u32::try_from(chunk.len())?)
}

/// `len` bytes, the first one `seed`, each different from its neighbours.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Fails with `what` unless `got == want`.
fn check(what: &str, got: &[u8], want: &[u8]) -> Result {
    if got != want {
        return Err(format!("{what}: got {} bytes {got:02x?}", got.len()).into());
    }
    println!("    {what}: {} bytes, as sent", got.len());
    Ok(())
}

/// Fails with `what` and the first byte that differs unless `got == want`.
fn check_data(what: &str, got: &[u8], want: &[u8]) -> Result {
    if let Some(at) = got.iter().zip(want).position(|(g, w)| g != w) {
        return Err(format!(
            "{what}: byte {at} is {:#04x}, sent {:#04x}",
            got[at], want[at]
        )
        .into());
    }
    if got.len() != want.len() {
        return Err(format!("{what}: {} bytes, sent {}", got.len(), want.len()).into());
    }
    println!("    {what}: {} bytes, every one as sent", got.len());
    Ok(())
}

/// The value of option `name` (`-d rxe0`), else of environment variable
/// `env`, else `default`.
fn option(name: &str, env: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var(env).ok())
        .unwrap_or_else(|| default.to_owned())
}

/// A count in decimal.
fn number(what: &str, text: &str) -> Result<usize> {
    text.parse()
        .map_err(|_| format!("{what}: '{text}' is not a number").into())
}
