//! The routing core in one process: the switch serves a loop device (its
//! port on the in-process fabric), a raw loop transport on another loop
//! device plays the remote host, and raw protocol clients on socket pairs
//! play the processes.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::proto::{DeviceInfo, ToClient, ToDaemon};
use super::{SeqPacket, Switch, SwitchConfig, SwitchCounter};
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{IdSlice, MadAddr, MadTransport, RecvFn};
use crate::wire::{Drep, Dreq, Mad, Rej, SidrRep, attr, new_mad};

const WAIT: Duration = Duration::from_secs(10);
const ASSIGN: u64 = 0x0200_0000_0000_0000;

/// The switch on loop device `index`, the remote host on `index + 1`.
struct Fabric {
    switch: Arc<Switch>,
    device: String,
    remote: Arc<LoopTransport>,
    to_remote: Receiver<Mad>,
    /// The address the remote host sends to the switch's port with.
    switch_addr: MadAddr,
}

impl Fabric {
    fn new(index: u32, config: SwitchConfig) -> Self {
        let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
        let peer = LoopIdentity::from_name(&format!("loop{}", index + 1)).unwrap();
        let switch = Switch::new(config);
        let device = format!("loop{index}");
        serve_loop(&switch, &device, me);
        let (tx, to_remote) = channel();
        let tx = Mutex::new(tx);
        let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
            let _ = tx.lock().unwrap().send(*mad);
        });
        let remote = LoopTransport::open(peer, recv).unwrap();
        Self {
            switch,
            device,
            remote,
            to_remote,
            switch_addr: MadAddr {
                dlid: me.lid,
                dgid: me.gid,
                ..MadAddr::default()
            },
        }
    }

    /// The remote host sends `mad` to the switch's port.
    fn remote_sends(&self, mad: &Mad) {
        self.remote.send(1, &self.switch_addr, mad).unwrap();
    }

    /// The next MAD the remote host received.
    fn remote_got(&self) -> Mad {
        self.to_remote
            .recv_timeout(WAIT)
            .expect("a MAD at the remote host")
    }

    fn remote_got_nothing(&self) -> bool {
        self.to_remote.try_recv().is_err()
    }

    /// A raw protocol client, registered.
    fn client(&self) -> (Client, IdSlice) {
        let c = Client::connect(&self.switch);
        let slice = c.register(&self.device).expect("registered");
        (c, slice)
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        self.remote.close();
        self.switch.close();
    }
}

/// Makes `switch` serve `me`'s port on the in-process fabric as `device`.
pub(super) fn serve_loop(switch: &Arc<Switch>, device: &str, me: LoopIdentity) {
    switch
        .add_device(device, |recv| {
            let transport = LoopTransport::open(me, recv)?;
            Ok((DeviceInfo::of_loop(me), transport as Arc<dyn MadTransport>))
        })
        .unwrap();
}

/// A process speaking the protocol by hand (the other switch tests' too).
pub(super) struct Client {
    conn: SeqPacket,
    /// Messages read while waiting for another.
    backlog: VecDeque<ToClient>,
    seq: u32,
}

impl Client {
    pub(super) fn connect(switch: &Arc<Switch>) -> Self {
        let (mine, theirs) = SeqPacket::pair().unwrap();
        let switch = switch.clone();
        std::thread::spawn(move || switch.serve(theirs));
        mine.set_recv_timeout(Some(WAIT)).unwrap();
        Self {
            conn: mine,
            backlog: VecDeque::new(),
            seq: 0,
        }
    }

    pub(super) fn send(&self, msg: &ToDaemon) {
        self.conn.send(&msg.encode(), true).unwrap();
    }

    pub(super) fn next(&mut self) -> ToClient {
        let mut buf = vec![0u8; super::proto::MAX_MESSAGE];
        let n = self.conn.recv(&mut buf).expect("a message within 10 s");
        ToClient::decode(&buf[..n]).expect("well-formed")
    }

    /// The first message `pick` takes; the others stay for later.
    pub(super) fn wait_for<T>(&mut self, mut pick: impl FnMut(&ToClient) -> Option<T>) -> T {
        if let Some(i) = self.backlog.iter().position(|m| pick(m).is_some()) {
            let m = self.backlog.remove(i).unwrap();
            return pick(&m).unwrap();
        }
        loop {
            let m = self.next();
            match pick(&m) {
                Some(t) => return t,
                None => self.backlog.push_back(m),
            }
        }
    }

    pub(super) fn register(&self, device: &str) -> Result<IdSlice, i32> {
        self.send(&ToDaemon::Register {
            pid: 1,
            device: device.into(),
        });
        let mut buf = vec![0u8; super::proto::MAX_MESSAGE];
        let n = self.conn.recv(&mut buf).unwrap();
        match ToClient::decode(&buf[..n]).unwrap() {
            ToClient::Registered {
                status: 0, slice, ..
            } => Ok(slice),
            ToClient::Registered { status, .. } => Err(status),
            other => panic!("{other:?}"),
        }
    }

    pub(super) fn listen(&mut self, service_id: u64) -> Result<u64, i32> {
        self.seq += 1;
        let seq = self.seq;
        self.send(&ToDaemon::Listen {
            seq,
            service_id,
            mask: u64::MAX,
            port: 0,
        });
        self.wait_for(|m| match *m {
            ToClient::Listened {
                seq: s,
                status,
                service_id,
            } if s == seq => Some(if status == 0 {
                Ok(service_id)
            } else {
                Err(status)
            }),
            _ => None,
        })
    }

    pub(super) fn send_mad(&self, mad: &Mad, to: &MadAddr) {
        self.send(&ToDaemon::Send {
            port: 1,
            addr: *to,
            mad: Box::new(*mad),
        });
    }

    /// Everything sent before has been handled by the switch.
    pub(super) fn sync(&mut self) {
        self.seq += 1;
        let seq = self.seq;
        self.send(&ToDaemon::Stats { seq });
        self.wait_for(|m| matches!(*m, ToClient::Stats { seq: s, .. } if s == seq).then_some(()));
    }

    /// The next MAD routed to this process.
    pub(super) fn got(&mut self) -> Mad {
        self.wait_for(|m| match m {
            ToClient::Recv { mad, .. } => Some(**mad),
            _ => None,
        })
    }

    /// Whether no MAD was routed here (after a `sync` of the sender).
    pub(super) fn got_nothing(&mut self) -> bool {
        self.sync();
        !self
            .backlog
            .iter()
            .any(|m| matches!(m, ToClient::Recv { .. }))
    }
}

fn req(local_comm_id: u32, service_id: u64) -> Mad {
    let mut mad = new_mad(attr::REQ, 7, 0);
    mad[24..28].copy_from_slice(&local_comm_id.to_be_bytes());
    mad[32..40].copy_from_slice(&service_id.to_be_bytes());
    mad
}

fn dreq(local_comm_id: u32, remote_comm_id: u32) -> Mad {
    Dreq {
        local_comm_id,
        remote_comm_id,
        ..Dreq::default()
    }
    .encode(9)
}

fn attr_of(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

/// The remote host's address as a process replies to it.
fn remote_addr(f: &Fabric) -> MadAddr {
    let peer = LoopIdentity::from_gid(&f.switch_addr.dgid).unwrap();
    let remote = LoopIdentity::from_name(&format!("loop{}", peer.index + 1)).unwrap();
    MadAddr {
        dlid: remote.lid,
        dgid: remote.gid,
        ..MadAddr::default()
    }
}

#[test]
fn requests_go_to_the_listener_and_the_rest_to_the_slice_owner() {
    let f = Fabric::new(3000, SwitchConfig::default());
    let (mut a, slice_a) = f.client();
    let (mut b, slice_b) = f.client();
    assert_ne!(slice_a.base, slice_b.base);
    assert_eq!(a.listen(0x1000), Ok(0x1000));
    assert_eq!(
        b.listen(0x1000),
        Err(-libc::EBUSY),
        "taken by another process"
    );
    assert_eq!(b.listen(0x2000), Ok(0x2000));
    // IB_CM_ASSIGN_SERVICE_ID: unique across processes.
    let (sa, sb) = (a.listen(ASSIGN).unwrap(), b.listen(ASSIGN).unwrap());
    assert_ne!(sa, sb);

    f.remote_sends(&req(0x77, 0x2000));
    assert_eq!(attr_of(&b.got()), attr::REQ);
    f.remote_sends(&req(0x78, 0x1000));
    assert_eq!(attr_of(&a.got()), attr::REQ);
    // A DREQ for one of B's connections.
    f.remote_sends(&dreq(0x77, slice_b.base | 5));
    assert_eq!(attr_of(&b.got()), attr::DREQ);
    // A SIDR_REP for A's request.
    let rep = SidrRep {
        request_id: slice_a.base | 9,
        ..SidrRep::default()
    };
    f.remote_sends(&rep.encode(3, 0));
    assert_eq!(attr_of(&a.got()), attr::SIDR_REP);
    assert!(a.got_nothing() && b.got_nothing());
    assert_eq!(f.switch.counter(SwitchCounter::RxToListener), 2);
    assert_eq!(f.switch.counter(SwitchCounter::RxToOwner), 2);
}

#[test]
fn what_nobody_owns_gets_the_kernels_answer() {
    let f = Fabric::new(3010, SwitchConfig::default());
    let (mut a, _) = f.client();
    // A REQ nobody listens for: REJ, invalid service ID.
    f.remote_sends(&req(0x55, 0x9999));
    let rej = Rej::decode(&f.remote_got()).unwrap();
    assert_eq!((rej.reason, rej.remote_comm_id), (8, 0x55));
    // A DREQ for no process's connection: a stateless DREP.
    f.remote_sends(&dreq(0x66, 0xfff0_0001));
    let drep = Drep::decode(&f.remote_got()).unwrap();
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (0xfff0_0001, 0x66)
    );
    // A DREP for nobody: dropped and counted.
    let stray = Drep {
        local_comm_id: 1,
        remote_comm_id: 0xfff0_0002,
        ..Drep::default()
    };
    f.remote_sends(&stray.encode(4));
    assert!(a.got_nothing());
    assert!(f.remote_got_nothing());
    assert_eq!(f.switch.counter(SwitchCounter::RxStatelessRej), 1);
    assert_eq!(f.switch.counter(SwitchCounter::RxStatelessDrep), 1);
    assert_eq!(f.switch.counter(SwitchCounter::RxDropped), 1);
}

#[test]
fn a_mad_with_another_process_comm_id_is_dropped_and_counted() {
    let f = Fabric::new(3020, SwitchConfig::default());
    let (mut a, slice_a) = f.client();
    let (_b, slice_b) = f.client();
    let to = remote_addr(&f);
    // A's own connection: sent.
    a.send_mad(&dreq(slice_a.base | 3, 0x10), &to);
    a.sync();
    assert_eq!(attr_of(&f.remote_got()), attr::DREQ);
    // B's connection, spoofed by A: never on the wire.
    a.send_mad(&dreq(slice_b.base | 3, 0x11), &to);
    a.send_mad(&req(slice_b.base | 4, 0x1000), &to);
    a.sync();
    assert!(f.remote_got_nothing());
    assert_eq!(f.switch.counter(SwitchCounter::TxSpoofed), 2);
    assert_eq!(f.switch.counter(SwitchCounter::TxSent), 1);
}

/// Waits (bounded) until `counter` reaches `n`.
fn wait_counter(switch: &Switch, counter: SwitchCounter, n: u64) {
    for _ in 0..1000 {
        if switch.counter(counter) >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{counter:?} never reached {n}");
}

#[test]
fn a_dead_process_connections_get_stateless_dreps_and_its_listens_end() {
    let f = Fabric::new(3030, SwitchConfig::default());
    let (mut a, slice_a) = f.client();
    let (mut b, _) = f.client();
    assert_eq!(a.listen(0x1000), Ok(0x1000));
    drop(a); // SIGKILL: the socket closes
    wait_counter(&f.switch, SwitchCounter::Gone, 1);
    f.remote_sends(&dreq(0x31, slice_a.base | 7));
    let drep = Drep::decode(&f.remote_got()).unwrap();
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (slice_a.base | 7, 0x31)
    );
    // Its service ID is free for another process.
    assert_eq!(b.listen(0x1000), Ok(0x1000));
    assert!(f.switch.slice_owner(slice_a.base).is_none());
}

#[test]
fn a_slice_is_handed_out_again_only_after_its_timewait() {
    // Two slices, slice 0 never used: one process at a time.
    let config = SwitchConfig {
        slice_bits: 31,
        timewait: Duration::from_secs(3600),
        ..SwitchConfig::default()
    };
    let f = Fabric::new(3040, config);
    let (mut a, slice_a) = f.client();
    // A peer learns one of its comm IDs (a slice nobody saw is free at once).
    a.send_mad(&dreq(slice_a.base | 1, 0x10), &remote_addr(&f));
    a.sync();
    let c = Client::connect(&f.switch);
    assert_eq!(
        c.register(&f.device),
        Err(-libc::EAGAIN),
        "all slices owned"
    );
    drop(a);
    wait_counter(&f.switch, SwitchCounter::Gone, 1);
    let c = Client::connect(&f.switch);
    assert_eq!(c.register(&f.device), Err(-libc::EAGAIN), "in timewait");
    f.switch.end_timewaits();
    let c = Client::connect(&f.switch);
    assert_eq!(c.register(&f.device), Ok(slice_a));
}

#[test]
fn unknown_devices_and_messages_before_registration_are_refused() {
    let f = Fabric::new(3050, SwitchConfig::default());
    let c = Client::connect(&f.switch);
    assert_eq!(c.register("mlx5_9"), Err(-libc::ENODEV));
    // A MAD before registering ends the connection.
    let mut c = Client::connect(&f.switch);
    c.send_mad(&req(1, 1), &remote_addr(&f));
    let mut buf = [0u8; 64];
    assert_eq!(c.conn.recv(&mut buf).unwrap(), 0);
    c.backlog.clear();
    assert!(f.remote_got_nothing());
}

#[test]
fn an_sa_answer_reaches_the_process_with_the_address_it_came_from() {
    let f = Fabric::new(3060, SwitchConfig::default());
    let (mut a, _) = f.client();
    // The remote host plays the SA: the process takes an answer from the
    // SM's LID only, so it must learn where the answer came from.
    let mut query = new_mad(0x0035, 0x1234, 0);
    query[1] = crate::sa::MGMT_CLASS_SA;
    query[3] = 0x01;
    a.send_mad(&query, &remote_addr(&f));
    let mut answer = f.remote_got();
    assert_eq!(answer[1], crate::sa::MGMT_CLASS_SA);
    answer[3] = 0x81;
    f.remote_sends(&answer);
    let (addr, mad) = a.wait_for(|m| match m {
        ToClient::Recv { addr, mad, .. } => Some((*addr, **mad)),
        _ => None,
    });
    assert_eq!(
        mad[12..16],
        0x1234u32.to_be_bytes(),
        "the process's own TID"
    );
    assert_eq!(addr.dlid, remote_addr(&f).dlid);
}

// ---- A misbehaving process in the socket's group: registration churn,
// listens in the assigned range, REJs, SIDR_REPs and SA MADs it has no
// business sending, a daemon that does not accept, a process that never
// reads, a restarted daemon. Each test below failed on main 45947c7.

/// Registers and leaves at once, `n` times: what a hostile process in the
/// socket's group can do in a second.
fn churn_registrations(f: &Fabric, n: usize) {
    for _ in 0..n {
        let c = Client::connect(&f.switch);
        if c.register(&f.device).is_err() {
            return;
        }
        drop(c);
    }
}

#[test]
fn registration_churn_does_not_lock_every_process_out() {
    let f = Fabric::new(3100, SwitchConfig::default());
    churn_registrations(&f, 4095);
    wait_counter(&f.switch, SwitchCounter::Gone, 4095);
    let victim = Client::connect(&f.switch);
    assert!(
        victim.register(&f.device).is_ok(),
        "one process that registered and left 4095 times locks every other \
         process out of the CM for the whole timewait"
    );
}

#[test]
fn explicit_listen_in_the_assigned_range_is_refused() {
    let f = Fabric::new(3110, SwitchConfig::default());
    let (mut attacker, _) = f.client();
    let (mut victim, _) = f.client();
    let first = attacker.listen(ASSIGN).unwrap();
    // The kernel refuses these (cm_init_listen: -EINVAL); the engine too,
    // but a raw client talks to the daemon directly.
    let squatted = attacker.listen(first + 1);
    assert_eq!(
        victim.listen(ASSIGN).map(|s| s != first),
        Ok(true),
        "IB_CM_ASSIGN_SERVICE_ID failed for the victim"
    );
    assert_eq!(
        squatted,
        Err(-libc::EINVAL),
        "explicit listen in the assigned range"
    );
}

#[test]
fn rej_timeout_reaches_the_process_that_got_the_req() {
    let f = Fabric::new(3120, SwitchConfig::default());
    let (mut a, _) = f.client();
    let (mut b, _) = f.client();
    assert_eq!(a.listen(0x1000), Ok(0x1000));
    let guid: u64 = 0x0002_c903_0000_1234;
    let mut request = req(0x77, 0x1000);
    request[40..48].copy_from_slice(&guid.to_be_bytes());
    f.remote_sends(&request);
    assert_eq!(attr_of(&a.got()), attr::REQ);
    // The active side is destroyed in REQ_SENT: cm_destroy_id sends REJ
    // TIMEOUT with its node GUID in the ARI and remote comm ID 0 (it never
    // learnt ours); cm_acquire_rejected_id finds us by (GUID, its comm ID).
    let mut ari = [0u8; 72];
    ari[..8].copy_from_slice(&guid.to_be_bytes());
    let rej = Rej {
        local_comm_id: 0x77,
        remote_comm_id: 0,
        message_rejected: crate::wire::MsgResponse::Other,
        rejected_info_length: 8,
        reason: crate::abi::ib_cm_rej_reason::IB_CM_REJ_TIMEOUT as u16,
        ari,
        ..Rej::default()
    };
    f.remote_sends(&rej.encode(7));
    assert_eq!(attr_of(&a.got()), attr::REJ);
    assert_eq!(
        f.switch.counter(SwitchCounter::RxDropped),
        0,
        "the REJ TIMEOUT for A's REQ_RCVD id was dropped"
    );
    // It is for the process the REQ was routed to, no other (copied to
    // every process, a tenant's own REJ timeouts would fill the others'
    // sockets).
    assert!(b.got_nothing());
    // It ends A's request; a second one is nobody's.
    f.remote_sends(&rej.encode(7));
    wait_counter(&f.switch, SwitchCounter::RxDropped, 1);
}

#[test]
fn rej_with_comm_id_0_only_answers_a_req_the_process_got() {
    let f = Fabric::new(3130, SwitchConfig::default());
    let (mut attacker, _) = f.client();
    // The REQ it got, it may reject from REQ_RCVD (local comm ID 0).
    assert_eq!(attacker.listen(0x1000), Ok(0x1000));
    f.remote_sends(&req(0x55, 0x1000));
    assert_eq!(attr_of(&attacker.got()), attr::REQ);
    let mine = Rej {
        local_comm_id: 0,
        remote_comm_id: 0x55,
        message_rejected: crate::wire::MsgResponse::Req,
        reason: 28,
        ..Rej::default()
    };
    attacker.send_mad(&mine.encode(1), &remote_addr(&f));
    attacker.sync();
    assert_eq!(attr_of(&f.remote_got()), attr::REJ);
    // A REJ "of a REQ" (local comm ID 0, as from REQ_RCVD) naming a comm ID
    // of the remote host's that never sent this process a REQ: it kills
    // that host's REQ_SENT id (cm_acquire_id(remote, 0) matches any remote).
    let rej = Rej {
        local_comm_id: 0,
        remote_comm_id: 0x1234_5678,
        message_rejected: crate::wire::MsgResponse::Req,
        reason: 28, // IB_CM_REJ_CONSUMER_DEFINED
        ..Rej::default()
    };
    attacker.send_mad(&rej.encode(1), &remote_addr(&f));
    attacker.sync();
    assert!(
        f.remote_got_nothing(),
        "a spoofed REJ with comm ID 0 went on the wire"
    );
    assert_eq!(f.switch.counter(SwitchCounter::TxSpoofed), 1);
}

#[test]
fn sa_mads_other_than_path_queries_are_refused() {
    let f = Fabric::new(3140, SwitchConfig::default());
    let (mut attacker, _) = f.client();
    // SubnAdmDelete(MCMemberRecord): leaves a multicast group (IPoIB's
    // broadcast group) for the whole port; needs umad access without ibcmd.
    let mut mad = [0u8; crate::wire::MAD_SIZE];
    mad[0] = 1;
    mad[1] = crate::sa::MGMT_CLASS_SA;
    mad[2] = 2;
    mad[3] = 0x15; // SubnAdmDelete
    mad[16..18].copy_from_slice(&0x0038u16.to_be_bytes()); // MCMemberRecord
    attacker.send_mad(&mad, &remote_addr(&f));
    attacker.sync();
    assert!(
        f.remote_got_nothing(),
        "an SA Delete of a process went on the wire"
    );
    assert_eq!(f.switch.counter(SwitchCounter::TxRefused), 1);
}

#[test]
fn open_device_does_not_hang_when_the_daemon_does_not_accept() {
    // A daemon that does not accept: stopped, or out of file descriptors
    // (ibcmd keeps the systemd default of 1024 and accepts any number of
    // connections that never register, one thread each). Its backlog fills.
    let dir = std::env::temp_dir().join(format!("ibcmd-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let _ = std::fs::remove_file(&path);
    let listener = SeqPacket::listen(&path).unwrap();
    let filled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (path, filled) = (path.clone(), filled.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            // Blocks once the backlog is full, until the listener closes.
            while let Ok(conn) = SeqPacket::connect(&path) {
                held.push(conn);
                filled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
    }
    for _ in 0..1000 {
        if filled.load(std::sync::atomic::Ordering::SeqCst) >= 129 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    crate::transport::switch::TEST_SOCKETS
        .lock()
        .push(("hostile0".into(), path.clone()));
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(crate::transport::switch::register("hostile0").map(|r| r.is_some()));
    });
    let outcome = rx.recv_timeout(Duration::from_secs(30));
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        outcome.ok(),
        Some(Err(crate::errno::Errno(libc::EAGAIN))),
        "ibcm_open_device still blocked in connect() after 30 s (its answer \
         timeout is 10 s); {} connections were queued",
        filled.load(std::sync::atomic::Ordering::SeqCst)
    );
}

#[test]
fn a_process_that_never_reads_pins_a_bounded_amount_of_memory() {
    let f = Fabric::new(3150, SwitchConfig::default());
    let log = crate::log::capture::Capture::of(&[&f.device]);
    let (attacker, slice) = f.client();
    // DREQs of its own connections to its own port: each comes back and is
    // routed to it, and it never reads. What the daemon's socket buffer
    // holds for it is kernel memory of the daemon's, not the attacker's.
    let me = f.switch_addr;
    let n = 30_000u32;
    for i in 0..n {
        attacker.send_mad(&dreq(slice.base | (i & 0xfffff), slice.base | 1), &me);
    }
    wait_counter(&f.switch, SwitchCounter::TxSent, u64::from(n));
    let delivered = || {
        f.switch.counter(SwitchCounter::RxToOwner) + f.switch.counter(SwitchCounter::RxClientBusy)
    };
    for _ in 0..1000 {
        if delivered() >= u64::from(n) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let queued = f.switch.counter(SwitchCounter::RxToOwner);
    eprintln!(
        "queued for a process that never reads: {queued} MADs (~{} KiB of message), {} dropped",
        queued * 1310 / 1024,
        f.switch.counter(SwitchCounter::RxClientBusy)
    );
    assert!(
        queued <= 2048,
        "{queued} MADs queued for one process that never reads"
    );
    // Each MAD lost is counted; the warnings that say where are sparse (the
    // 1st, 2nd, 4th… loss), so the flood cannot flood the log too.
    let busy = f.switch.counter(SwitchCounter::RxClientBusy);
    let warned = log.lines_with(&["a DREQ received on", "socket refused it", "rx_client_busy"]);
    assert!(busy > 0, "nothing was lost");
    assert_eq!(
        warned.len() as u32,
        busy.ilog2() + 1,
        "{busy} lost, warnings: {warned:?}"
    );
}

/// A SubnAdmGet(PathRecord) with TID `tid`.
fn path_query(tid: u32) -> Mad {
    let mut mad = [0u8; crate::wire::MAD_SIZE];
    mad[0] = 1;
    mad[1] = crate::sa::MGMT_CLASS_SA;
    mad[2] = 2;
    mad[3] = 0x01;
    mad[12..16].copy_from_slice(&tid.to_be_bytes());
    mad[16..18].copy_from_slice(&0x0035u16.to_be_bytes());
    mad
}

#[test]
fn sa_query_flood_does_not_lose_another_process_answer() {
    let f = Fabric::new(3160, SwitchConfig::default());
    let (mut victim, _) = f.client();
    let (mut attacker, _) = f.client();
    let sm = remote_addr(&f);
    victim.send_mad(&path_query(0xabcd), &sm);
    victim.sync();
    let asked = f.remote_got();
    for i in 0..5000 {
        attacker.send_mad(&path_query(i), &sm);
    }
    attacker.sync();
    let mut answer = asked;
    answer[3] = 0x81; // SubnAdmGetResp, the daemon's TID
    f.remote_sends(&answer);
    wait_counter(&f.switch, SwitchCounter::RxSaAnswers, 1);
    let got = victim.got();
    assert_eq!(got[12..16], 0xabcdu32.to_be_bytes());
}

#[test]
fn a_restarted_daemon_does_not_reuse_the_slices_of_the_last_one() {
    // The same first slice three times in a row: 1 in 4095^2 when random.
    let first: Vec<_> = (0..3)
        .map(|i| {
            let f = Fabric::new(3170 + 2 * i, SwitchConfig::default());
            f.client().1.base
        })
        .collect();
    assert!(
        first.windows(2).any(|w| w[0] != w[1]),
        "every fresh daemon hands out {:#010x} first: a restarted ibcmd gives the \
         slices of its old processes (whose peers still send to them) to new ones",
        first[0]
    );
}

fn sidr_req(request_id: u32, service_id: u64) -> Mad {
    let mut mad = new_mad(attr::SIDR_REQ, 11, 0);
    mad[24..28].copy_from_slice(&request_id.to_be_bytes());
    mad[32..40].copy_from_slice(&service_id.to_be_bytes());
    mad
}

fn sidr_rep(request_id: u32, service_id: u64) -> Mad {
    SidrRep {
        request_id,
        service_id,
        ..SidrRep::default()
    }
    .encode(11, 0)
}

#[test]
fn a_sidr_rep_answers_a_sidr_req_the_process_got() {
    let f = Fabric::new(3180, SwitchConfig::default());
    let (mut a, _) = f.client();
    let to = remote_addr(&f);
    assert_eq!(a.listen(0x3000), Ok(0x3000));
    f.remote_sends(&sidr_req(0x41, 0x3000));
    assert_eq!(attr_of(&a.got()), attr::SIDR_REQ);
    // A SIDR_REP for a request it never got, on its own service ID: the
    // requester's CM matches SIDR_REPs by request ID alone (cm_acquire_id).
    a.send_mad(&sidr_rep(0x99, 0x3000), &to);
    a.sync();
    assert!(
        f.remote_got_nothing(),
        "a SIDR_REP for another host's request went out"
    );
    // The listener destroyed, the id in SIDR_REQ_RCVD still answers (the
    // kernel sends it: the new id is not the listener).
    a.send(&ToDaemon::Unlisten { service_id: 0x3000 });
    a.send_mad(&sidr_rep(0x41, 0x3000), &to);
    a.sync();
    assert_eq!(attr_of(&f.remote_got()), attr::SIDR_REP);
}

#[test]
fn one_user_cannot_take_every_slice() {
    let f = Fabric::new(3190, SwitchConfig::default());
    let to = remote_addr(&f);
    let attacker = super::PeerCred {
        pid: 4242,
        uid: 4242,
        gid: 4242,
    };
    // Register, send one MAD of the slice (so it needs its timewait), leave:
    // as fast as the socket goes, 4095 times.
    let mut refused = 0;
    for _ in 0..4095 {
        let (conn, _) = SeqPacket::pair().unwrap();
        match f.switch.register(Arc::new(conn), attacker, &f.device) {
            Ok((client, slice, _)) => {
                f.switch
                    .outbound(client, 1, &to, &dreq(slice.base | 1, 0x10))
                    .unwrap();
                f.switch.unregister(client);
            }
            Err(e) => {
                assert_eq!(e.0, libc::EAGAIN);
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "one user took all 4095 slices");
    let victim = Client::connect(&f.switch);
    assert!(
        victim.register(&f.device).is_ok(),
        "another user locked out"
    );
}

#[test]
fn a_connection_that_never_registers_is_closed() {
    let f = Fabric::new(3230, SwitchConfig::default());
    let (mine, theirs) = SeqPacket::pair().unwrap();
    let switch = f.switch.clone();
    std::thread::spawn(move || switch.serve(theirs));
    mine.set_recv_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(
        mine.recv(&mut buf).map_err(|e| e.kind()),
        Ok(0),
        "a connection that never registers keeps a thread and an fd of the daemon's"
    );
    // A registered one stays (the other tests' clients wait up to 10 s).
    let (mut c, _) = f.client();
    std::thread::sleep(Duration::from_secs(11));
    c.sync();
}

#[test]
fn a_service_id_is_free_for_other_processes_once_unlisten_returns() {
    // Two processes' switch transports on a real socket of the daemon.
    let f = Fabric::new(3240, SwitchConfig::default());
    let socket = std::env::temp_dir().join(format!("ibcmd-unlisten-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let listener = SeqPacket::listen(&socket).unwrap();
    let switch = f.switch.clone();
    std::thread::spawn(move || switch.accept_loop(&listener));
    crate::transport::switch::TEST_SOCKETS
        .lock()
        .push((f.device.clone(), socket.clone()));
    let open = || {
        let registered = crate::transport::switch::register(&f.device)
            .unwrap()
            .unwrap();
        let recv: RecvFn = Arc::new(|_, _, _| {});
        let lost = Arc::new(|| {});
        crate::transport::switch::SwitchTransport::start(&f.device, registered, recv, lost).unwrap()
    };
    let (a, b) = (open(), open());
    let mut busy = 0;
    for i in 0..300u64 {
        let sid = 0x5000 + i;
        assert_eq!(a.listen(sid), Ok(Some(sid)));
        a.unlisten(sid); // in ib_destroy_cm_id of A's listener
        match b.listen(sid) {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e, crate::errno::EBUSY);
                busy += 1;
            }
        }
    }
    a.close();
    b.close();
    crate::transport::switch::TEST_SOCKETS
        .lock()
        .retain(|(_, p)| *p != socket);
    let _ = std::fs::remove_file(&socket);
    assert_eq!(
        busy, 0,
        "B's ib_cm_listen got -EBUSY after A's destroy had returned"
    );
}

// ---- Issue 12: listens per process, processes that exit or fork, late
// listen grants, and the reader's bursts. Each test below failed on main
// d3a394d.

impl Client {
    fn unlisten(&self, service_id: u64) {
        self.send(&ToDaemon::Unlisten { service_id });
    }
}

#[test]
fn listens_per_process_are_capped_with_enomem_logged_once() {
    let f = Fabric::new(3250, SwitchConfig::default());
    let log = crate::log::capture::Capture::of(&[&f.device]);
    let (mut attacker, _) = f.client();
    let max = super::routing::MAX_LISTENS_PER_PROCESS as u64;
    for i in 0..max {
        assert_eq!(attacker.listen(0x10_0000 + i), Ok(0x10_0000 + i));
    }
    for i in 0..3 {
        assert_eq!(
            attacker.listen(0x20_0000 + i),
            Err(-libc::ENOMEM),
            "a process holds more than {max} listens in the daemon"
        );
    }
    assert_eq!(attacker.listen(ASSIGN), Err(-libc::ENOMEM));
    let refused = log.lines_with(&["ibcmd", "listens", "ENOMEM"]);
    assert_eq!(refused.len(), 1, "one line per process: {refused:?}");
    // One freed: room for one more.
    attacker.unlisten(0x10_0000);
    assert_eq!(attacker.listen(0x20_0000), Ok(0x20_0000));
    // Another process is not affected.
    let (mut other, _) = f.client();
    assert_eq!(other.listen(0x30_0000), Ok(0x30_0000));
}

#[test]
fn listens_of_one_process_on_one_service_id_are_counted() {
    let f = Fabric::new(3260, SwitchConfig::default());
    let (mut a, _) = f.client();
    let (mut b, _) = f.client();
    // Listener X destroyed while listener Y of the same process listens on
    // the same service ID: Y's Listen reaches the daemon before X's Unlisten.
    assert_eq!(a.listen(0x6000), Ok(0x6000));
    assert_eq!(
        a.listen(0x6000),
        Ok(0x6000),
        "-EBUSY from the daemon for a service ID the process itself holds"
    );
    a.unlisten(0x6000);
    a.sync();
    assert_eq!(b.listen(0x6000), Err(-libc::EBUSY), "still A's (Y)");
    f.remote_sends(&req(0x91, 0x6000));
    assert_eq!(attr_of(&a.got()), attr::REQ, "Y's REQ reaches A");
    a.unlisten(0x6000);
    a.sync();
    assert_eq!(b.listen(0x6000), Ok(0x6000), "free once A's count is 0");
}

#[test]
fn a_listen_on_a_held_service_id_is_never_refused_and_a_refused_ones_unlisten_is_ignored() {
    // The invariant that makes the Unlisten after a timed-out Listen exact:
    // a process's Listen is refused only when it holds no count on the
    // service ID, and then an Unlisten from it for that ID changes nothing.
    let f = Fabric::new(3270, SwitchConfig::default());
    let (mut a, _) = f.client();
    let (mut b, _) = f.client();
    let max = super::routing::MAX_LISTENS_PER_PROCESS as u64;
    for i in 0..max {
        assert_eq!(a.listen(0x40_0000 + i), Ok(0x40_0000 + i));
    }
    // At the cap, a Listen on a service ID it holds only counts.
    assert_eq!(
        a.listen(0x40_0000),
        Ok(0x40_0000),
        "a Listen on a held service ID refused at the cap"
    );
    // Refused (cap): its Unlisten is ignored; B may take it after.
    assert_eq!(a.listen(0x7000), Err(-libc::ENOMEM));
    a.unlisten(0x7000);
    a.sync();
    assert_eq!(b.listen(0x7000), Ok(0x7000));
    // Refused (another process's): A's Unlisten leaves B's listen alone.
    let (mut c, _) = f.client();
    assert_eq!(c.listen(0x7000), Err(-libc::EBUSY));
    c.unlisten(0x7000);
    c.sync();
    assert_eq!(c.listen(0x7000), Err(-libc::EBUSY), "B's listen dropped");
    f.remote_sends(&req(0x92, 0x7000));
    assert_eq!(attr_of(&b.got()), attr::REQ);
    // Two counts: two Unlistens free it.
    a.unlisten(0x40_0000);
    a.sync();
    f.remote_sends(&req(0x93, 0x40_0000));
    assert_eq!(attr_of(&a.got()), attr::REQ, "one count left");
    a.unlisten(0x40_0000);
    a.sync();
    assert_eq!(c.listen(0x40_0000), Ok(0x40_0000));
}

/// A fabric whose switch serves one connection as a real process's (a
/// `sleep` the test kills when it wants the registrant gone), and the
/// connection's other end, kept by the test as by a child that inherited
/// the socket.
fn served_as_a_living_process(index: u32, uid: u32) -> (std::process::Child, Fabric, Client) {
    let registrant = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep");
    let cred = super::PeerCred {
        pid: registrant.id() as i32,
        uid,
        gid: uid,
    };
    let f = Fabric::new(index, SwitchConfig::default());
    let (inherited, theirs) = SeqPacket::pair().unwrap();
    let switch = f.switch.clone();
    std::thread::spawn(move || switch.serve_as(theirs, cred));
    inherited.set_recv_timeout(Some(WAIT)).unwrap();
    let a = Client {
        conn: inherited,
        backlog: VecDeque::new(),
        seq: 0,
    };
    (registrant, f, a)
}

#[test]
fn a_forked_child_does_not_keep_a_dead_process_registered() {
    // The process that registered: a real one, which dies below. The
    // connection's other end stays open in this test process, as in a
    // child forked after ibcm_open_device that inherited the socket.
    let (mut registrant, f, mut a) = served_as_a_living_process(3280, 4343);
    let slice_a = a.register(&f.device).expect("registered");
    assert_eq!(a.listen(0x9000), Ok(0x9000));
    a.send_mad(&dreq(slice_a.base | 2, 0x10), &remote_addr(&f));
    a.sync();
    assert_eq!(attr_of(&f.remote_got()), attr::DREQ);

    registrant.kill().unwrap();
    registrant.wait().unwrap();
    for _ in 0..1000 {
        if f.switch.counter(SwitchCounter::Gone) >= 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        f.switch.counter(SwitchCounter::Gone),
        1,
        "the process that registered died 10 s ago, but the socket a child \
         inherited keeps its slice and listens"
    );
    let (mut b, _) = f.client();
    assert_eq!(b.listen(0x9000), Ok(0x9000), "the dead process's listen");
    f.remote_sends(&dreq(0x32, slice_a.base | 2));
    let drep = Drep::decode(&f.remote_got()).unwrap();
    assert_eq!(drep.local_comm_id, slice_a.base | 2, "a stateless DREP");
    // The daemon ended the connection: the child sees it closed.
    let mut buf = [0u8; 64];
    assert_eq!(a.conn.recv(&mut buf).map_err(|e| e.kind()), Ok(0));
}

/// A daemon that answers `Listen` only when told: what a stuck `ibcmd`
/// looks like to a process.
struct SlowDaemon {
    conn: SeqPacket,
    socket: std::path::PathBuf,
}

impl SlowDaemon {
    /// Registers the transport of `device` with it; the transport waits
    /// `timeout` for an answer.
    fn start(
        device: &str,
        timeout: Duration,
    ) -> (Self, Arc<crate::transport::switch::SwitchTransport>) {
        Self::start_with(device, timeout, Arc::new(|_, _, _| {}))
    }

    /// As `start`, the MADs it routes to the process handed to `recv`.
    fn start_with(
        device: &str,
        timeout: Duration,
        recv: RecvFn,
    ) -> (Self, Arc<crate::transport::switch::SwitchTransport>) {
        let socket =
            std::env::temp_dir().join(format!("ibcmd-{device}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = SeqPacket::listen(&socket).unwrap();
        crate::transport::switch::TEST_SOCKETS
            .lock()
            .push((device.to_owned(), socket.clone()));
        let accepted = std::thread::spawn(move || {
            let conn = listener.accept().unwrap();
            conn.set_recv_timeout(Some(WAIT)).unwrap();
            let mut buf = vec![0u8; super::proto::MAX_MESSAGE];
            let n = conn.recv(&mut buf).unwrap();
            assert!(matches!(
                ToDaemon::decode(&buf[..n]),
                Ok(ToDaemon::Register { .. })
            ));
            let answer = ToClient::Registered {
                status: 0,
                slice: IdSlice {
                    base: 0x0010_0000,
                    bits: 20,
                },
                device: DeviceInfo::default(),
            };
            conn.send(&answer.encode(), true).unwrap();
            conn
        });
        let registered = crate::transport::switch::register(device).unwrap().unwrap();
        let t = crate::transport::switch::SwitchTransport::start(
            device,
            registered,
            recv,
            Arc::new(|| {}),
        )
        .unwrap();
        t.set_answer_timeout(timeout);
        let conn = accepted.join().unwrap();
        (Self { conn, socket }, t)
    }

    fn next(&self) -> ToDaemon {
        let mut buf = vec![0u8; super::proto::MAX_MESSAGE];
        let n = self
            .conn
            .recv(&mut buf)
            .expect("a message of the process within 10 s");
        ToDaemon::decode(&buf[..n]).expect("well-formed")
    }

    fn reply(&self, msg: &ToClient) {
        self.conn.send(&msg.encode(), true).unwrap();
    }
}

impl Drop for SlowDaemon {
    fn drop(&mut self) {
        crate::transport::switch::TEST_SOCKETS
            .lock()
            .retain(|(_, p)| *p != self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[test]
fn a_listen_granted_after_its_caller_gave_up_is_undone() {
    let (daemon, t) = SlowDaemon::start("slowlisten0", Duration::from_millis(100));
    // Listen, answered after the caller got -ETIMEDOUT: an explicit service
    // ID, then IB_CM_ASSIGN_SERVICE_ID (whose ID only the answer tells).
    for (asked, granted) in [(0x8000, 0x8000), (ASSIGN, ASSIGN + 5)] {
        let (tx, rx) = channel();
        let t2 = t.clone();
        std::thread::spawn(move || tx.send(t2.listen(asked)).unwrap());
        let ToDaemon::Listen {
            seq, service_id, ..
        } = daemon.next()
        else {
            panic!("not a Listen");
        };
        assert_eq!(service_id, asked);
        assert_eq!(
            rx.recv_timeout(WAIT).unwrap(),
            Err(crate::errno::Errno(libc::ETIMEDOUT))
        );
        daemon.reply(&ToClient::Listened {
            seq,
            status: 0,
            service_id: granted,
        });
        let mut buf = vec![0u8; super::proto::MAX_MESSAGE];
        let undone = daemon
            .conn
            .recv(&mut buf)
            .ok()
            .and_then(|n| ToDaemon::decode(&buf[..n]).ok());
        assert_eq!(
            undone,
            Some(ToDaemon::Unlisten {
                service_id: granted
            }),
            "a listen the daemon granted after the caller's -ETIMEDOUT stays \
             registered for the process's lifetime"
        );
    }
    // Refused late: nothing to undo. The next message is the Unlisten of
    // the listen after it, which the reader answered after the refusal.
    let (tx, rx) = channel();
    let t2 = t.clone();
    std::thread::spawn(move || tx.send(t2.listen(0x8001)).unwrap());
    let ToDaemon::Listen { seq, .. } = daemon.next() else {
        panic!("not a Listen");
    };
    assert!(rx.recv_timeout(WAIT).unwrap().is_err());
    daemon.reply(&ToClient::Listened {
        seq,
        status: -libc::EBUSY,
        service_id: 0x8001,
    });
    let t2 = t.clone();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        tx.send(t2.listen(0x8002)).unwrap();
        t2.unlisten(0x8002);
    });
    let ToDaemon::Listen { seq, .. } = daemon.next() else {
        panic!("not a Listen");
    };
    daemon.reply(&ToClient::Listened {
        seq,
        status: 0,
        service_id: 0x8002,
    });
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Ok(Some(0x8002)));
    assert_eq!(
        daemon.next(),
        ToDaemon::Unlisten { service_id: 0x8002 },
        "an Unlisten for a listen the daemon refused"
    );
    t.close();
}

#[test]
fn what_a_process_queued_before_it_exited_is_still_handled() {
    // Its last messages (the DREQs of ib_destroy_cm_id just before exit)
    // wait on the socket when its exit makes the pidfd readable.
    let mut registrant = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep");
    let cred = super::PeerCred {
        pid: registrant.id() as i32,
        uid: 4344,
        gid: 4344,
    };
    registrant.kill().unwrap(); // a zombie until waited for: its pid stays
    let f = Fabric::new(3290, SwitchConfig::default());
    let (inherited, theirs) = SeqPacket::pair().unwrap();
    inherited.set_recv_timeout(Some(WAIT)).unwrap();
    let mut a = Client {
        conn: inherited,
        backlog: VecDeque::new(),
        seq: 0,
    };
    a.send(&ToDaemon::Register {
        pid: cred.pid as u32,
        device: f.device.clone(),
    });
    a.send(&ToDaemon::Listen {
        seq: 1,
        service_id: 0xa000,
        mask: u64::MAX,
        port: 0,
    });
    a.send(&ToDaemon::Stats { seq: 2 });
    let switch = f.switch.clone();
    std::thread::spawn(move || switch.serve_as(theirs, cred));
    assert!(matches!(a.next(), ToClient::Registered { status: 0, .. }));
    assert!(matches!(a.next(), ToClient::Listened { status: 0, .. }));
    assert!(matches!(a.next(), ToClient::Stats { seq: 2, .. }));
    let mut buf = [0u8; 64];
    assert_eq!(a.conn.recv(&mut buf).map_err(|e| e.kind()), Ok(0));
    wait_counter(&f.switch, SwitchCounter::Gone, 1);
    let (mut b, _) = f.client();
    assert_eq!(b.listen(0xa000), Ok(0xa000));
    registrant.wait().unwrap();
}

#[test]
fn a_late_grant_given_back_never_stops_the_reader() {
    // The daemon grants a listen after its caller gave up, while the socket
    // to it is full (it is slow to read): the reader gives the grant back
    // without waiting for room, and goes on receiving this process's MADs
    // (waiting for room, it received nothing for the socket's 10 s send
    // timeout).
    let (got_tx, got_rx) = channel();
    let got_tx = Mutex::new(got_tx);
    let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
        let _ = got_tx.lock().unwrap().send(attr_of(&mad));
    });
    let (daemon, t) = SlowDaemon::start_with("slowlisten1", Duration::from_millis(100), recv);
    let (tx, rx) = channel();
    let t2 = t.clone();
    std::thread::spawn(move || tx.send(t2.listen(0x8100)).unwrap());
    let ToDaemon::Listen { seq, .. } = daemon.next() else {
        panic!("not a Listen");
    };
    assert_eq!(
        rx.recv_timeout(WAIT).unwrap(),
        Err(crate::errno::Errno(libc::ETIMEDOUT))
    );
    let filled = t.fill_socket_to_daemon();
    assert!(filled > 0, "the socket to the daemon took nothing");
    daemon.reply(&ToClient::Listened {
        seq,
        status: 0,
        service_id: 0x8100,
    });
    daemon.reply(&ToClient::Recv {
        port: 1,
        addr: MadAddr::default(),
        mad: Box::new(dreq(0x33, 0x0010_0002)),
    });
    assert_eq!(
        got_rx
            .recv_timeout(Duration::from_secs(5))
            .map(|a| a == attr::DREQ),
        Ok(true),
        "the reader waited for room on the full socket to give a late grant \
         back, and received nothing meanwhile"
    );
    // Once the daemon reads again, the grant comes back all the same.
    let mut given_back = false;
    for _ in 0..=filled {
        if daemon.next() == (ToDaemon::Unlisten { service_id: 0x8100 }) {
            given_back = true;
            break;
        }
    }
    assert!(given_back, "the late grant was never given back");
    t.close();
}

#[test]
fn a_late_grant_given_back_as_the_daemon_dies_logs_no_lost_listen() {
    // The daemon grants a listen after its caller gave up, with the socket
    // to it full, and dies: the grant's give-back (on its short thread)
    // fails with EPIPE. The daemon forgot every listen of the process with
    // its registration, so nothing is lost; the warning that "the daemon
    // keeps a listen nobody here uses" is false. Whether the reader had seen
    // the daemon gone first was a race: tried 20 times.
    for round in 0..20 {
        let device = format!("slowlisten2r{round}");
        let log = crate::log::capture::Capture::of(&[&device]);
        let (daemon, t) = SlowDaemon::start(&device, Duration::from_millis(50));
        let (tx, rx) = channel();
        let t2 = t.clone();
        std::thread::spawn(move || tx.send(t2.listen(0x8200)).unwrap());
        let ToDaemon::Listen { seq, .. } = daemon.next() else {
            panic!("not a Listen");
        };
        assert_eq!(
            rx.recv_timeout(WAIT).unwrap(),
            Err(crate::errno::Errno(libc::ETIMEDOUT))
        );
        assert!(t.fill_socket_to_daemon() > 0);
        daemon.reply(&ToClient::Listened {
            seq,
            status: 0,
            service_id: 0x8200,
        });
        // Time for the reader to hand the give-back to its short thread.
        std::thread::sleep(Duration::from_millis(20));
        drop(daemon);
        std::thread::sleep(Duration::from_millis(50));
        let lost = log.lines_with(&["cannot give back service ID"]);
        assert!(lost.is_empty(), "round {round}: {lost:?}");
        t.close();
    }
}

/// A `RecvFn` as the engine's: each MAD becomes work for the worker (here
/// an item that reports the MAD's comm ID), so the reader's batch owes the
/// worker its wake-up.
fn recv_through_the_worker() -> (RecvFn, Receiver<u32>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
        let tx = tx.lock().unwrap().clone();
        crate::cm::worker::queue_sa_callback(
            crate::cm::Cm::process(),
            Box::new(move || {
                let _ = tx.send(u32::from_be_bytes(mad[24..28].try_into().unwrap()));
            }),
        );
    });
    (recv, rx)
}

#[test]
fn a_lone_mad_from_the_daemon_wakes_the_worker_while_the_reader_waits_again() {
    // One MAD, then silence with the connection open: the reader's burst
    // ends on the empty socket and pays the wake-up before it waits again.
    // Owed across that wait, the MAD would wait for the next message (none
    // comes: the 10 s below).
    let (recv, handled) = recv_through_the_worker();
    let (daemon, t) = SlowDaemon::start_with("batch14a", WAIT, recv);
    daemon.reply(&ToClient::Recv {
        port: 1,
        addr: MadAddr::default(),
        mad: Box::new(dreq(0x41, 0x0010_0002)),
    });
    assert_eq!(
        handled.recv_timeout(WAIT),
        Ok(0x41),
        "a MAD the switch reader queued waited for the worker while the reader sat in recv"
    );
    t.close();
}

#[test]
fn a_burst_longer_than_a_batch_reaches_the_worker_whole_and_in_order() {
    // More than BURST messages already queued: two batches; every MAD is
    // handled, in the daemon's order, and the last batch (a partial one)
    // is woken for as well.
    let n = 3 * crate::transport::batch::BURST as u32 + 5;
    let (recv, handled) = recv_through_the_worker();
    let (daemon, t) = SlowDaemon::start_with("batch14b", WAIT, recv);
    for i in 0..n {
        daemon.reply(&ToClient::Recv {
            port: 1,
            addr: MadAddr::default(),
            mad: Box::new(dreq(0x1000 + i, 0x0010_0002)),
        });
    }
    for i in 0..n {
        assert_eq!(handled.recv_timeout(WAIT), Ok(0x1000 + i), "MAD {i} of {n}");
    }
    t.close();
}

#[test]
fn mads_of_a_burst_ended_by_the_daemon_dying_still_reach_the_worker() {
    // The daemon sends MADs and dies in one burst: the reader's batch ends on
    // the closed connection, not on an empty socket; its MADs are woken for
    // all the same.
    let (recv, handled) = recv_through_the_worker();
    let (daemon, t) = SlowDaemon::start_with("batch14c", WAIT, recv);
    for i in 0..10 {
        daemon.reply(&ToClient::Recv {
            port: 1,
            addr: MadAddr::default(),
            mad: Box::new(dreq(0x2000 + i, 0x0010_0002)),
        });
    }
    daemon.conn.shutdown();
    for i in 0..10 {
        assert_eq!(
            handled.recv_timeout(WAIT),
            Ok(0x2000 + i),
            "MAD {i} before the daemon died"
        );
    }
    drop(daemon);
    t.close();
}

#[test]
fn a_child_flooding_after_its_parent_died_is_cut_off_within_the_bound() {
    // The process that registered dies; the socket a child inherited keeps
    // sending as fast as it can. ibcmd reads a burst per wait while the
    // process lives, one message per wait once it has seen the exit: the
    // child is cut off (when the daemon catches up with it, or after
    // MESSAGES_AFTER_EXIT), and what it got handled after the death is at
    // most that plus the rest of the burst the daemon was in.
    let (mut registrant, f, mut a) = served_as_a_living_process(3290, 4344);
    let slice = a.register(&f.device).expect("registered");
    a.send_mad(&dreq(slice.base | 2, 0x10), &remote_addr(&f));
    a.sync();
    assert_eq!(attr_of(&f.remote_got()), attr::DREQ);

    registrant.kill().unwrap();
    registrant.wait().unwrap();
    let send = ToDaemon::Send {
        port: 1,
        addr: remote_addr(&f),
        mad: Box::new(dreq(slice.base | 2, 0x10)),
    }
    .encode();
    let mut sent = 0usize;
    // The daemon ends the connection: the send fails (EPIPE), or blocks on
    // a full socket nobody reads any more until its 10 s timeout.
    while a.conn.send(&send, true).is_ok() {
        sent += 1;
        assert!(
            sent <= 4 * super::server::MESSAGES_AFTER_EXIT,
            "a child kept a dead process registered for {sent} messages"
        );
    }
    let mut handled = 0usize;
    while f.to_remote.try_recv().is_ok() {
        handled += 1;
    }
    let bound = super::server::MESSAGES_AFTER_EXIT + crate::transport::batch::BURST;
    assert!(
        handled <= bound,
        "{handled} messages of a dead process handled (bound {bound})"
    );
    assert_eq!(f.switch.counter(SwitchCounter::Gone), 1);
}

// ---- Issue 30: the daemon as a boundary between tenants. Each test below
// failed on main ae8a3c4 (before src/switch/rules.rs); the matching table
// is in docs/ibcmd.md.

impl Client {
    /// A raw protocol client served as process `cred` says (another user).
    pub(super) fn connect_as(switch: &Arc<Switch>, cred: super::PeerCred) -> Self {
        let (mine, theirs) = SeqPacket::pair().unwrap();
        let switch = switch.clone();
        std::thread::spawn(move || switch.serve_as(theirs, cred));
        mine.set_recv_timeout(Some(WAIT)).unwrap();
        Self {
            conn: mine,
            backlog: VecDeque::new(),
            seq: 0,
        }
    }

    /// The MADs routed here so far (after a `sync` of this client).
    pub(super) fn received(&mut self) -> Vec<Mad> {
        self.sync();
        self.backlog
            .iter()
            .filter_map(|m| match m {
                ToClient::Recv { mad, .. } => Some(**mad),
                _ => None,
            })
            .collect()
    }
}

/// This (living) process, as user `uid`.
pub(super) fn user(uid: u32) -> super::PeerCred {
    super::PeerCred {
        pid: std::process::id() as i32,
        uid,
        gid: uid,
    }
}

/// The node GUID of the switch's device: the CA GUID its tenants' REQs and
/// REPs carry.
fn guid_of(f: &Fabric) -> u64 {
    LoopIdentity::from_name(&f.device).unwrap().node_guid
}

fn rep(f: &Fabric, local_comm_id: u32, remote_comm_id: u32) -> Mad {
    crate::wire::Rep {
        local_comm_id,
        remote_comm_id,
        local_ca_guid: guid_of(f),
        ..crate::wire::Rep::default()
    }
    .encode(7)
}

fn mra(local_comm_id: u32, remote_comm_id: u32, mraed: crate::wire::MsgResponse) -> Mad {
    crate::wire::Mra {
        local_comm_id,
        remote_comm_id,
        message_mraed: mraed,
        ..crate::wire::Mra::default()
    }
    .encode(7)
}

fn rej(local_comm_id: u32, remote_comm_id: u32, rejected: crate::wire::MsgResponse) -> Mad {
    Rej {
        local_comm_id,
        remote_comm_id,
        message_rejected: rejected,
        reason: 28, // IB_CM_REJ_CONSUMER_DEFINED
        ..Rej::default()
    }
    .encode(7)
}

/// Sends `mad` from `client` and says whether it reached the remote host
/// (else it must have been counted as spoofed).
fn passes(f: &Fabric, client: &mut Client, mad: &Mad, to: &MadAddr) -> bool {
    let spoofed = f.switch.counter(SwitchCounter::TxSpoofed);
    client.send_mad(mad, to);
    client.sync();
    if f.remote_got_nothing() {
        assert_eq!(
            f.switch.counter(SwitchCounter::TxSpoofed),
            spoofed + 1,
            "a {} was neither sent nor counted",
            crate::wire::attr::name(attr_of(mad))
        );
        false
    } else {
        true
    }
}

/// A fabric with the honest listener A (service 0x1000) holding the remote
/// host's REQ 0x77, and tenant B of another user.
fn req_routed_to_a(index: u32) -> (Fabric, Client, IdSlice, Client, IdSlice) {
    let f = Fabric::new(index, SwitchConfig::default());
    let (mut a, slice_a) = f.client();
    let mut b = Client::connect_as(&f.switch, user(4343));
    let slice_b = b.register(&f.device).unwrap();
    assert_eq!(a.listen(0x1000), Ok(0x1000));
    f.remote_sends(&req(0x77, 0x1000));
    assert_eq!(attr_of(&a.got()), attr::REQ);
    assert!(b.got_nothing(), "the REQ went to its listener only");
    (f, a, slice_a, b, slice_b)
}

#[test]
fn a_rep_comes_only_from_the_process_the_req_was_routed_to() {
    let (f, mut a, slice_a, mut b, slice_b) = req_routed_to_a(3400);
    let to = remote_addr(&f);
    // B answers A's REQ with its own REP (its own comm ID, its QPN): the
    // requester would match it by the remote comm ID alone and connect to B.
    assert!(!passes(&f, &mut b, &rep(&f, slice_b.base | 1, 0x77), &to));
    // A's own REP goes, and again (a retransmission) with the same comm ID.
    assert!(passes(&f, &mut a, &rep(&f, slice_a.base | 1, 0x77), &to));
    assert!(passes(&f, &mut a, &rep(&f, slice_a.base | 1, 0x77), &to));
    // Or with another of its comm IDs: a new id of A's after its first one
    // gave up on its REP (REP_ERROR) answers the requester's retry; only
    // A's own connection is at stake.
    assert!(passes(&f, &mut a, &rep(&f, slice_a.base | 2, 0x77), &to));
    // B still cannot, after A answered.
    assert!(!passes(&f, &mut b, &rep(&f, slice_b.base | 1, 0x77), &to));
    // A REP needs a comm ID of the sender's slice.
    assert!(!passes(&f, &mut a, &rep(&f, slice_b.base | 1, 0x77), &to));
}

#[test]
fn a_rep_goes_only_to_the_address_the_req_came_from() {
    let (f, mut a, slice_a, _b, _) = req_routed_to_a(3410);
    let mut elsewhere = remote_addr(&f);
    elsewhere.dlid ^= 0x40;
    // Host H2's REQ_SENT id with the same comm ID would take it.
    assert!(!passes(
        &f,
        &mut a,
        &rep(&f, slice_a.base | 1, 0x77),
        &elsewhere
    ));
    let mut with_grh = remote_addr(&f);
    with_grh.grh = true;
    with_grh.dgid[15] ^= 1;
    assert!(!passes(
        &f,
        &mut a,
        &rep(&f, slice_a.base | 1, 0x77),
        &with_grh
    ));
    assert!(passes(
        &f,
        &mut a,
        &rep(&f, slice_a.base | 1, 0x77),
        &remote_addr(&f)
    ));
}

#[test]
fn a_rej_of_a_req_comes_only_from_the_process_the_req_was_routed_to() {
    use crate::wire::MsgResponse::{Other, Rep, Req};
    let (f, mut a, slice_a, mut b, slice_b) = req_routed_to_a(3420);
    let to = remote_addr(&f);
    // B rejects A's REQ with its reason and private data (seen: the peer's
    // IB_CM_REJ_RECEIVED reason 28, "rejected by attacker"), with its own
    // comm ID or with 0 as from REQ_RCVD.
    assert!(!passes(&f, &mut b, &rej(slice_b.base | 1, 0x77, Req), &to));
    assert!(!passes(&f, &mut b, &rej(0, 0x77, Req), &to));
    // A REJ of a REP or of "other" is matched by both comm IDs: B's own
    // comm ID binds it to B's connections; A's comm ID is not B's to use.
    assert!(passes(&f, &mut b, &rej(slice_b.base | 1, 0x77, Rep), &to));
    assert!(passes(&f, &mut b, &rej(slice_b.base | 1, 0x77, Other), &to));
    assert!(!passes(
        &f,
        &mut b,
        &rej(slice_a.base | 1, 0x77, Other),
        &to
    ));
    // A may reject its REQ, from MRA_REQ_SENT (its comm ID) or REQ_RCVD (0).
    assert!(passes(&f, &mut a, &rej(slice_a.base | 1, 0x77, Req), &to));
    // ... and that ends it: no REP, no second REJ of it.
    assert!(!passes(&f, &mut a, &rep(&f, slice_a.base | 1, 0x77), &to));
    assert!(!passes(&f, &mut a, &rej(0, 0x77, Req), &to));
    // Its retransmission routes it again: then A may reject it with 0.
    f.remote_sends(&req(0x77, 0x1000));
    assert_eq!(attr_of(&a.got()), attr::REQ);
    assert!(passes(&f, &mut a, &rej(0, 0x77, Req), &to));
}

#[test]
fn an_mra_of_a_req_comes_only_from_the_process_the_req_was_routed_to() {
    use crate::wire::MsgResponse::{Other, Rep, Req};
    let (f, mut a, slice_a, mut b, slice_b) = req_routed_to_a(3430);
    let to = remote_addr(&f);
    // B stalls A's REQ with an MRA (the requester waits its service time).
    assert!(!passes(&f, &mut b, &mra(slice_b.base | 1, 0x77, Req), &to));
    // An MRA of a REP or a LAP is matched by both comm IDs: B's own is B's.
    assert!(passes(&f, &mut b, &mra(slice_b.base | 1, 0x77, Rep), &to));
    assert!(passes(&f, &mut b, &mra(slice_b.base | 1, 0x77, Other), &to));
    assert!(!passes(&f, &mut b, &mra(slice_a.base | 1, 0x77, Rep), &to));
    // A may, as often as the requester resends its REQ.
    assert!(passes(&f, &mut a, &mra(slice_a.base | 1, 0x77, Req), &to));
    assert!(passes(&f, &mut a, &mra(slice_a.base | 1, 0x77, Req), &to));
    // Not with a comm ID outside its slice.
    assert!(!passes(&f, &mut a, &mra(slice_b.base | 1, 0x77, Req), &to));
    // After its REP too (a new id's, after the first gave up): still A's.
    assert!(passes(&f, &mut a, &rep(&f, slice_a.base | 1, 0x77), &to));
    assert!(passes(&f, &mut a, &mra(slice_a.base | 2, 0x77, Req), &to));
    assert!(!passes(&f, &mut b, &mra(slice_b.base | 1, 0x77, Req), &to));
}

#[test]
fn messages_matched_by_both_comm_ids_need_a_comm_id_of_the_senders_slice() {
    let (f, _a, slice_a, mut b, slice_b) = req_routed_to_a(3440);
    let to = remote_addr(&f);
    type Encode = fn(u32, u32) -> Mad;
    let both_ids: [(&str, Encode); 6] = [
        ("RTU", |l, r| {
            crate::wire::Rtu {
                local_comm_id: l,
                remote_comm_id: r,
                ..Default::default()
            }
            .encode(7)
        }),
        ("DREQ", dreq),
        ("DREP", |l, r| {
            Drep {
                local_comm_id: l,
                remote_comm_id: r,
                ..Default::default()
            }
            .encode(7)
        }),
        ("LAP", |l, r| {
            crate::wire::Lap {
                local_comm_id: l,
                remote_comm_id: r,
                ..Default::default()
            }
            .encode(7)
        }),
        ("APR", |l, r| {
            crate::wire::Apr {
                local_comm_id: l,
                remote_comm_id: r,
                ..Default::default()
            }
            .encode(7)
        }),
        ("REQ", |l, _| req(l, 0x5555)),
    ];
    let from_the_device = |encode: Encode, l: u32| {
        let mut mad = encode(l, 0x77);
        if attr_of(&mad) == attr::REQ {
            crate::wire::req::CM_REQ_LOCAL_CA_GUID.set(&mut mad, guid_of(&f));
        }
        mad
    };
    for (name, encode) in both_ids {
        assert!(
            passes(&f, &mut b, &from_the_device(encode, slice_b.base | 3), &to),
            "B's own {name}"
        );
        assert!(
            !passes(&f, &mut b, &from_the_device(encode, slice_a.base | 3), &to),
            "B's {name} with A's comm ID"
        );
    }
    assert!(passes(&f, &mut b, &sidr_req(slice_b.base | 4, 0x5555), &to));
    assert!(!passes(
        &f,
        &mut b,
        &sidr_req(slice_a.base | 4, 0x5555),
        &to
    ));
}

#[test]
fn a_message_x_of_3_is_dropped() {
    let (f, mut a, slice_a, _b, _) = req_routed_to_a(3450);
    let to = remote_addr(&f);
    // MessageRejected / MessageMRAed 3 means nothing: the remote drops an
    // MRA of it (cm_acquire_mraed_id), and no engine sends either.
    for mut mad in [
        mra(slice_a.base | 1, 0x77, crate::wire::MsgResponse::Other),
        rej(slice_a.base | 1, 0x77, crate::wire::MsgResponse::Other),
    ] {
        mad[32] |= 0xc0;
        assert!(!passes(&f, &mut a, &mad, &to));
    }
}

#[test]
fn an_rtu_ends_what_the_req_may_be_answered_with() {
    let (f, mut a, slice_a, _b, _) = req_routed_to_a(3460);
    let to = remote_addr(&f);
    assert!(passes(&f, &mut a, &rep(&f, slice_a.base | 1, 0x77), &to));
    let rtu = crate::wire::Rtu {
        local_comm_id: 0x77,
        remote_comm_id: slice_a.base | 1,
        ..Default::default()
    };
    f.remote_sends(&rtu.encode(7));
    assert_eq!(attr_of(&a.got()), attr::RTU);
    a.sync();
    // Established: a REP or a REJ "of the REQ" could only be forged now.
    assert!(!passes(&f, &mut a, &rep(&f, slice_a.base | 1, 0x77), &to));
    assert!(!passes(
        &f,
        &mut a,
        &rej(0, 0x77, crate::wire::MsgResponse::Req),
        &to
    ));
}

#[test]
fn requests_routed_to_a_process_are_bounded() {
    use super::rules::{Peer, RoutedRequests};
    let mut reqs = RoutedRequests::default();
    let peer = |lid: u16| {
        Peer::of(
            1,
            &MadAddr {
                dlid: lid,
                ..MadAddr::default()
            },
        )
    };
    // One address: its share, whatever the churn.
    for id in 0..(RoutedRequests::PER_PEER as u32 * 3) {
        reqs.insert(id, peer(1));
        if id % 2 == 0 {
            reqs.close(id, peer(1));
            reqs.insert(id, peer(1)); // routed again: its place moves back
        }
    }
    assert_eq!(reqs.len(), RoutedRequests::PER_PEER);
    assert!(reqs.order_len() <= 2 * RoutedRequests::PER_PEER + 1);
    // Another address's requests do not push out the first one's (else
    // another tenant's REQs through the port would evict a remote host's),
    // and all of them together stay within MAX.
    let early = reqs.len();
    for lid in 2..40u16 {
        for id in 0..1000 {
            reqs.insert(id, peer(lid));
        }
    }
    assert_eq!(reqs.len(), RoutedRequests::MAX);
    assert!(reqs.is_open(RoutedRequests::PER_PEER as u32 * 3 - 1, peer(1)) || early == 0);
}

#[test]
fn registrations_and_listens_are_bounded_per_user() {
    let config = SwitchConfig {
        quotas: super::Quotas {
            registrations: 3,
            listens: 5,
            ..super::Quotas::default()
        },
        ..SwitchConfig::default()
    };
    let f = Fabric::new(3470, config);
    let mut mine: Vec<Client> = (0..3)
        .map(|_| {
            let c = Client::connect_as(&f.switch, user(5000));
            c.register(&f.device).expect("within the quota");
            c
        })
        .collect();
    // One process registered 300 times held 1,228,800 listens.
    let extra = Client::connect_as(&f.switch, user(5000));
    assert_eq!(extra.register(&f.device), Err(-libc::EAGAIN));
    assert_eq!(mine[0].listen(0x100), Ok(0x100));
    assert_eq!(mine[0].listen(0x101), Ok(0x101));
    assert_eq!(mine[1].listen(0x102), Ok(0x102));
    assert_eq!(mine[2].listen(0x103), Ok(0x103));
    assert_eq!(mine[2].listen(ASSIGN).map(|_| ()), Ok(()));
    assert_eq!(mine[1].listen(0x104), Err(-libc::ENOMEM), "the user's 6th");
    // Another user is not affected.
    let mut other = Client::connect_as(&f.switch, user(5001));
    other.register(&f.device).unwrap();
    assert_eq!(other.listen(0x200), Ok(0x200));
    // A process gone gives back its registration and its listens.
    drop(mine.remove(0));
    wait_counter(&f.switch, SwitchCounter::Gone, 1);
    assert_eq!(mine[0].listen(0x104), Ok(0x104));
    let again = Client::connect_as(&f.switch, user(5000));
    assert!(again.register(&f.device).is_ok());
    assert!(f.switch.counter(SwitchCounter::OverQuota) >= 2);
}

#[test]
fn a_process_leaving_removes_exactly_its_listens() {
    let f = Fabric::new(3480, SwitchConfig::default());
    let (mut a, _) = f.client();
    let (mut b, _) = f.client();
    for i in 0..100 {
        assert_eq!(a.listen(0x1_0000 + i), Ok(0x1_0000 + i));
        assert_eq!(b.listen(0x2_0000 + i), Ok(0x2_0000 + i));
    }
    let path = path_query(1);
    a.send_mad(&path, &remote_addr(&f));
    a.sync();
    drop(a);
    wait_counter(&f.switch, SwitchCounter::Gone, 1);
    let (mut c, _) = f.client();
    for i in 0..100 {
        assert_eq!(c.listen(0x1_0000 + i), Ok(0x1_0000 + i), "A's are free");
        assert_eq!(c.listen(0x2_0000 + i), Err(-libc::EBUSY), "B's stay B's");
    }
    f.remote_sends(&req(0x99, 0x2_0005));
    assert_eq!(attr_of(&b.got()), attr::REQ);
}

#[test]
fn spoofed_mads_log_a_bounded_number_of_lines() {
    let f = Fabric::new(3490, SwitchConfig::default());
    let log = crate::log::capture::Capture::of(&[&f.device]);
    let (mut attacker, slice) = f.client();
    let to = remote_addr(&f);
    let other = slice.base.wrapping_add(1 << slice.bits);
    for i in 0..20_000u32 {
        attacker.send_mad(&dreq(other | (i & 0xffff), 1), &to);
    }
    attacker.sync();
    assert_eq!(f.switch.counter(SwitchCounter::TxSpoofed), 20_000);
    let lines = log.lines_with(&["ibcmd", "dropped a DREQ", &format!(" {}:", f.device)]);
    // The 1st, 2nd, 4th … 16,384th: 15 lines, each with the count so far.
    assert_eq!(lines.len(), 15, "{:?}", &lines[..lines.len().min(5)]);
    assert!(
        lines[14].contains("tx_spoofed 16384 so far"),
        "{}",
        lines[14]
    );
}

#[test]
fn tenant_lines_are_rate_limited_and_counted() {
    let f = Fabric::new(3500, SwitchConfig::default());
    let log = crate::log::capture::Capture::of(&[&f.device]);
    for _ in 0..200 {
        let c = Client::connect(&f.switch);
        c.register(&f.device).unwrap();
    }
    wait_counter(&f.switch, SwitchCounter::Gone, 200);
    let lines = log.lines_with(&["ibcmd: process", &format!(" {}:", f.device)]);
    assert!(
        lines.len() <= 20,
        "{} lines for 200 registrations and exits: {lines:#?}",
        lines.len()
    );
    assert_eq!(
        f.switch.counter(SwitchCounter::LogSuppressed) + lines.len() as u64,
        400
    );
}

#[test]
fn a_sidr_rep_goes_only_to_the_address_its_sidr_req_came_from() {
    let f = Fabric::new(3510, SwitchConfig::default());
    let (mut a, _) = f.client();
    let mut b = Client::connect_as(&f.switch, user(4343));
    b.register(&f.device).unwrap();
    assert_eq!(a.listen(0x3000), Ok(0x3000));
    f.remote_sends(&sidr_req(0x41, 0x3000));
    assert_eq!(attr_of(&a.got()), attr::SIDR_REQ);
    let to = remote_addr(&f);
    let mut elsewhere = to;
    elsewhere.dlid ^= 0x40;
    // The requester matches a SIDR_REP by request ID alone.
    assert!(!passes(&f, &mut b, &sidr_rep(0x41, 0x3000), &to));
    assert!(!passes(&f, &mut a, &sidr_rep(0x41, 0x3000), &elsewhere));
    assert!(passes(&f, &mut a, &sidr_rep(0x41, 0x3000), &to));
    // One answer each.
    assert!(!passes(&f, &mut a, &sidr_rep(0x41, 0x3000), &to));
}

#[test]
fn attributes_no_process_sends_are_refused_not_spoofed() {
    let (f, mut a, slice_a, _b, _) = req_routed_to_a(3520);
    // ClassPortInfo (0x0001) and an attribute the CM does not define.
    for attr_id in [0x0001u16, 0x0030] {
        let mut mad = rep(&f, slice_a.base | 1, 0x77);
        mad[16..18].copy_from_slice(&attr_id.to_be_bytes());
        a.send_mad(&mad, &remote_addr(&f));
        a.sync();
        assert!(f.remote_got_nothing());
    }
    assert_eq!(f.switch.counter(SwitchCounter::TxRefused), 2);
    assert_eq!(f.switch.counter(SwitchCounter::TxSpoofed), 0);
}
