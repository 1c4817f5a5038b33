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
        switch
            .add_device(&device, |recv| {
                let info = DeviceInfo::of_loop(me);
                Ok((
                    info,
                    LoopTransport::open(me, recv)? as Arc<dyn MadTransport>,
                ))
            })
            .unwrap();
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

/// A process speaking the protocol by hand.
struct Client {
    conn: SeqPacket,
    /// Messages read while waiting for another.
    backlog: VecDeque<ToClient>,
    seq: u32,
}

impl Client {
    fn connect(switch: &Arc<Switch>) -> Self {
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

    fn send(&self, msg: &ToDaemon) {
        self.conn.send(&msg.encode(), true).unwrap();
    }

    fn next(&mut self) -> ToClient {
        let mut buf = vec![0u8; super::proto::MAX_MESSAGE];
        let n = self.conn.recv(&mut buf).expect("a message within 10 s");
        ToClient::decode(&buf[..n]).expect("well-formed")
    }

    /// The first message `pick` takes; the others stay for later.
    fn wait_for<T>(&mut self, mut pick: impl FnMut(&ToClient) -> Option<T>) -> T {
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

    fn register(&self, device: &str) -> Result<IdSlice, i32> {
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

    fn listen(&mut self, service_id: u64) -> Result<u64, i32> {
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

    fn send_mad(&self, mad: &Mad, to: &MadAddr) {
        self.send(&ToDaemon::Send {
            port: 1,
            addr: *to,
            mad: Box::new(*mad),
        });
    }

    /// Everything sent before has been handled by the switch.
    fn sync(&mut self) {
        self.seq += 1;
        let seq = self.seq;
        self.send(&ToDaemon::Stats { seq });
        self.wait_for(|m| matches!(*m, ToClient::Stats { seq: s, .. } if s == seq).then_some(()));
    }

    /// The next MAD routed to this process.
    fn got(&mut self) -> Mad {
        self.wait_for(|m| match m {
            ToClient::Recv { mad, .. } => Some(**mad),
            _ => None,
        })
    }

    /// Whether no MAD was routed here (after a `sync` of the sender).
    fn got_nothing(&mut self) -> bool {
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
    };
    let f = Fabric::new(3040, config);
    let (a, slice_a) = f.client();
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
