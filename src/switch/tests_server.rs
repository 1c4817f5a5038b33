//! The daemon's side of the socket (issue 30): no process
//! holds a thread of the daemon's or its accept loop, and an idle
//! connection holds a few KiB. The switch serves a loop device as in
//! `tests.rs`; the processes are raw protocol clients.

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use super::proto::{MAX_MESSAGE, MAX_TO_DAEMON, ToClient, ToDaemon};
use super::server::{CLIENT_SEND_BUFFER, Inbox, REPLY_QUEUE};
use super::{PeerCred, Quotas, SeqPacket, Switch, SwitchConfig, SwitchCounter};
use crate::transport::batch::BURST;
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{IdSlice, MadAddr, MadTransport, RecvFn};
use crate::wire::{Dreq, Mad, attr};

/// How long a test waits for what must happen (then it fails).
const WAIT: Duration = Duration::from_secs(10);

/// The switch on loop device `index`, the remote host on `index + 1`.
struct Fabric {
    switch: Arc<Switch>,
    device: String,
    remote: Arc<LoopTransport>,
    to_remote: Receiver<Mad>,
    /// Where the switch's processes send to reach the remote host.
    remote_addr: MadAddr,
}

impl Fabric {
    fn new(index: u32, config: SwitchConfig) -> Self {
        let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
        let peer = LoopIdentity::from_name(&format!("loop{}", index + 1)).unwrap();
        let switch = Switch::new(config);
        let device = format!("loop{index}");
        super::tests::serve_loop(&switch, &device, me);
        let (tx, to_remote) = channel();
        let tx = std::sync::Mutex::new(tx);
        let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
            let _ = tx.lock().unwrap().send(*mad);
        });
        let remote = LoopTransport::open(peer, recv).unwrap();
        Self {
            switch,
            device,
            remote,
            to_remote,
            remote_addr: MadAddr {
                dlid: peer.lid,
                dgid: peer.gid,
                ..MadAddr::default()
            },
        }
    }

    /// A raw client the switch serves as `serve` does (no quota).
    fn client(&self) -> Raw {
        let (mine, theirs) = SeqPacket::pair().unwrap();
        let switch = self.switch.clone();
        std::thread::spawn(move || switch.serve(theirs));
        Raw::new(mine)
    }

    /// A raw client the switch admits as the accept loop does, as `uid`.
    fn client_of(&self, uid: u32) -> Raw {
        let (mine, theirs) = SeqPacket::pair().unwrap();
        let cred = PeerCred {
            pid: 1,
            uid,
            gid: uid,
        };
        self.switch.start_client(theirs, cred);
        Raw::new(mine)
    }

    /// A raw client, registered.
    fn registered(&self) -> (Raw, IdSlice) {
        let c = self.client();
        let slice = c.register(&self.device);
        (c, slice)
    }

    fn remote_got(&self) -> Mad {
        self.to_remote
            .recv_timeout(WAIT)
            .expect("a MAD at the remote host")
    }

    fn counter(&self, counter: SwitchCounter) -> u64 {
        self.switch.counter(counter)
    }

    /// Waits (bounded) until `counter` reaches `n`.
    fn wait_counter(&self, counter: SwitchCounter, n: u64) {
        let start = Instant::now();
        while self.counter(counter) < n && start.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(self.counter(counter), n, "{}", counter.name());
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        self.remote.close();
        self.switch.close();
    }
}

/// A process speaking the protocol by hand; every wait of its bounded.
struct Raw {
    conn: SeqPacket,
}

impl Raw {
    fn new(conn: SeqPacket) -> Self {
        conn.set_recv_timeout(Some(WAIT)).unwrap();
        conn.set_send_timeout(WAIT).unwrap();
        Self { conn }
    }

    fn send(&self, msg: &ToDaemon) -> io::Result<()> {
        self.conn.send(&msg.encode(), true)
    }

    /// The next message; `None` when the daemon closed the connection (or
    /// said nothing for 10 s: the caller's assertion says which it wanted).
    fn next(&self) -> Option<ToClient> {
        let mut buf = vec![0u8; MAX_MESSAGE];
        match self.conn.recv(&mut buf) {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(ToClient::decode(&buf[..n]).expect("well-formed")),
        }
    }

    /// Whether the daemon closed the connection: what is left read, then
    /// the end (within 10 s).
    fn closed(&self) -> bool {
        let mut buf = vec![0u8; MAX_MESSAGE];
        loop {
            match self.conn.recv(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) => return e.raw_os_error() == Some(libc::ECONNRESET),
            }
        }
    }

    fn register(&self, device: &str) -> IdSlice {
        self.send(&ToDaemon::Register {
            pid: 1,
            device: device.into(),
        })
        .unwrap();
        match self.next() {
            Some(ToClient::Registered {
                status: 0, slice, ..
            }) => slice,
            other => panic!("not registered: {other:?}"),
        }
    }

    /// Whether a Stats question is answered (within 10 s).
    fn answers(&self, seq: u32) -> bool {
        self.send(&ToDaemon::Stats { seq }).is_ok()
            && matches!(self.next(), Some(ToClient::Stats { seq: s, .. }) if s == seq)
    }

    fn send_dreq(&self, slice: IdSlice, i: u32, to: &MadAddr) {
        let dreq = Dreq {
            local_comm_id: slice.base | (i & 0xfffff),
            remote_comm_id: 0x10,
            ..Dreq::default()
        };
        self.send(&ToDaemon::Send {
            port: 1,
            addr: *to,
            mad: Box::new(dreq.encode(u64::from(i))),
        })
        .unwrap();
    }
}

#[test]
fn stats_do_not_extend_the_registration_deadline() {
    let deadline = Duration::from_secs(1);
    let f = Fabric::new(3600, {
        SwitchConfig {
            register_deadline: deadline,
            ..SwitchConfig::default()
        }
    });
    let c = f.client();
    let start = Instant::now();
    let (mut answered, mut closed) = (0u32, false);
    // Stats every 100 ms, each answered, for up to 15 deadlines.
    while start.elapsed() < 15 * deadline {
        if !c.answers(answered + 1) {
            closed = c.closed();
            break;
        }
        answered += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = start.elapsed();
    assert!(
        closed,
        "a connection that asks for Stats every 100 ms and never registers was open \
         after {held:?} (deadline {deadline:?}, {answered} answers)"
    );
    assert!(
        held >= deadline,
        "closed after {held:?}, before its deadline"
    );
    assert!(answered >= 2, "only {answered} Stats answered before");
    assert_eq!(f.counter(SwitchCounter::RegisterTimeout), 1);
}

#[test]
fn a_client_that_never_reads_its_answers_is_disconnected() {
    let f = Fabric::new(3610, SwitchConfig::default());
    let log = crate::log::capture::Capture::of(&[&f.device]);
    let (flooder, _) = f.registered();
    // Stats as fast as the socket takes them, never reading an answer: the
    // daemon's socket to it fills, then its queue of answers.
    let flood = std::thread::spawn(move || {
        let mut sent = 0u32;
        while sent < 1_000_000 && flooder.send(&ToDaemon::Stats { seq: sent }).is_ok() {
            sent += 1;
        }
        (flooder, sent)
    });
    // Meanwhile another process registers and is answered.
    let (honest, _) = f.registered();
    assert!(honest.answers(7), "another process was not answered");
    let (flooder, sent) = flood.join().unwrap();
    eprintln!("the flooder sent {sent} Stats before its sends failed");
    f.wait_counter(SwitchCounter::ClientStalled, 1);
    assert!(flooder.closed(), "the flooder's connection is still open");
    f.wait_counter(SwitchCounter::Gone, 1);
    assert!(honest.answers(8), "another process was not answered");
    let logged = log.lines_with(&["does not read its socket", "client_stalled"]);
    assert_eq!(logged.len(), 1, "{logged:?}");
}

/// The uid of this test process: what the daemon sees of a connection of
/// its own.
fn my_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid()
}

#[test]
fn accept_refuses_a_users_connections_over_quota() {
    let config = SwitchConfig {
        quotas: Quotas {
            connections: 2,
            ..Quotas::default()
        },
        ..SwitchConfig::default()
    };
    let f = Fabric::new(3620, config);
    let dir = std::env::temp_dir().join(format!("ibcmd-quota-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let _ = std::fs::remove_file(&path);
    let listener = SeqPacket::listen(&path).unwrap();
    let switch = f.switch.clone();
    std::thread::spawn(move || switch.accept_loop(&listener));
    let connect = || Raw::new(SeqPacket::connect(&path).unwrap());

    let first = connect();
    let second = connect();
    assert!(first.answers(1) && second.answers(1));
    let third = connect();
    let _ = third.send(&ToDaemon::Stats { seq: 1 });
    assert!(
        third.closed(),
        "a third connection of a user whose quota is 2 was served"
    );
    assert_eq!(f.counter(SwitchCounter::OverQuota), 1);
    // Another user is not counted with this one.
    let other = f.client_of(my_uid().wrapping_add(4711));
    assert!(other.answers(2), "another user's connection was refused");
    // A connection closed frees its place.
    drop(first);
    let start = Instant::now();
    while f.switch.connections_of(my_uid()) > 1 && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    let fourth = connect();
    assert!(
        fourth.answers(3),
        "the place of a closed connection stayed taken"
    );
    assert!(second.answers(4));
    let _ = std::fs::remove_dir_all(&dir);
}

/// This process's resident memory (VmRSS), in bytes.
fn resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[test]
fn an_idle_connection_holds_a_few_kib() {
    let f = Fabric::new(
        3630,
        SwitchConfig {
            register_deadline: Duration::from_secs(600),
            ..SwitchConfig::default()
        },
    );
    // Served: each has had its Stats answered, so its thread is in its
    // loop with whatever it keeps.
    let served = |n: usize| -> Vec<Raw> {
        (0..n)
            .map(|i| {
                let c = f.client_of(10_000 + i as u32);
                assert!(c.answers(1), "connection {i} not served");
                c
            })
            .collect()
    };
    // Connections come and go first, as in a daemon that has run a while:
    // the memory of the gone ones is reused (malloc clears it for a zeroed
    // buffer, making it resident again).
    for _ in 0..3 {
        drop(served(50));
        let start = Instant::now();
        while (10_000..10_050).any(|uid| f.switch.connections_of(uid) > 0) && start.elapsed() < WAIT
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The first threads make what every thread shares (malloc arenas).
    let warm = served(20);
    let before = resident();
    let n = 100;
    let idle = served(n);
    let after = resident();
    let each = after.saturating_sub(before) / n;
    eprintln!(
        "{n} idle connections: resident {} KiB -> {} KiB, {} KiB each",
        before / 1024,
        after / 1024,
        each / 1024
    );
    assert!(
        each < 64 * 1024,
        "an idle unregistered connection holds {} KiB of the daemon's memory",
        each / 1024
    );
    drop((warm, idle));
}

#[test]
fn answers_wait_for_a_client_that_reads_late_and_arrive_all_in_order() {
    let f = Fabric::new(3640, SwitchConfig::default());
    let (c, slice) = f.registered();
    // How many Stats answers the daemon's socket to a process holds.
    let answer = ToClient::Stats {
        seq: 0,
        counters: f.switch.counters(),
    }
    .encode();
    let capacity = {
        let (daemon_end, _process_end) = SeqPacket::pair().unwrap();
        daemon_end.set_send_buffer(CLIENT_SEND_BUFFER);
        let mut n = 0u32;
        while daemon_end.send(&answer, false).is_ok() {
            n += 1;
        }
        n
    };
    // That many, then more than half the queue's worth, Stats and Listens
    // mixed, none read: the socket fills and answers wait in the queue.
    let waiting = (REPLY_QUEUE * 2 / 3) as u32;
    let total = capacity + waiting;
    for seq in 1..=total {
        let msg = if seq > capacity && seq % 2 == 0 {
            ToDaemon::Listen {
                seq,
                service_id: 0x7000 + u64::from(seq),
                mask: u64::MAX,
                port: 0,
            }
        } else {
            ToDaemon::Stats { seq }
        };
        c.send(&msg).unwrap();
    }
    // The daemon goes on with the process's messages meanwhile.
    c.send_dreq(slice, 1, &f.remote_addr);
    assert_eq!(
        crate::wire::parse_header(&f.remote_got())
            .unwrap()
            .0
            .attr_id,
        attr::DREQ
    );
    // Read late: every answer, in order.
    for seq in 1..=total {
        match c.next() {
            Some(ToClient::Stats { seq: s, .. }) if s == seq && seq <= capacity => {}
            Some(ToClient::Stats { seq: s, .. } | ToClient::Listened { seq: s, .. })
                if s == seq => {}
            other => panic!("answer {seq} of {total} (capacity {capacity}): {other:?}"),
        }
    }
    assert!(c.answers(total + 1));
    assert_eq!(f.counter(SwitchCounter::ClientStalled), 0);
}

#[test]
fn a_burst_of_1000_sends_is_handled_whole() {
    let f = Fabric::new(3650, SwitchConfig::default());
    let (c, slice) = f.registered();
    let n = 1000;
    for i in 0..n {
        c.send_dreq(slice, i, &f.remote_addr);
    }
    assert!(c.answers(1));
    assert_eq!(f.counter(SwitchCounter::TxSent), u64::from(n));
    for i in 0..n {
        let (header, _) = crate::wire::parse_header(&f.remote_got()).unwrap();
        assert_eq!(header.tid, u64::from(i), "MAD {i} of the burst");
    }
}

#[test]
fn the_receive_buffer_starts_with_one_slot_and_doubles_to_a_burst_when_bursts_fill_it() {
    let (process, daemon) = SeqPacket::pair().unwrap();
    // Room for the 1,000 messages below (a failing send, not a hang, if not).
    process.set_send_buffer(CLIENT_SEND_BUFFER);
    process.set_send_timeout(WAIT).unwrap();
    let mut inbox = Inbox::new();
    assert_eq!(inbox.slots(), 1);
    let msg = |i: u32| ToDaemon::Stats { seq: i }.encode();
    // One at a time (before registration): one slot, however many wait.
    for i in 0..10 {
        process.send(&msg(i), true).unwrap();
    }
    for i in 0..10 {
        assert_eq!(inbox.recv(&daemon, false).unwrap(), 1);
        assert_eq!(inbox.messages(1).next(), Some(Some(&msg(i)[..])));
    }
    assert_eq!(inbox.slots(), 1);
    // In bursts: each one that fills every slot doubles them, up to BURST.
    let n = 1000u32;
    for i in 0..n {
        process.send(&msg(i), true).unwrap();
    }
    let (mut next, mut slots) = (0u32, vec![inbox.slots()]);
    while next < n {
        let count = inbox.recv(&daemon, true).unwrap();
        for m in inbox.messages(count) {
            assert_eq!(m, Some(&msg(next)[..]), "message {next}");
            next += 1;
        }
        if slots.last() != Some(&inbox.slots()) {
            slots.push(inbox.slots());
        }
    }
    assert_eq!(slots, [1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(BURST, 64);
    let empty = inbox.recv(&daemon, true).unwrap_err();
    assert_eq!(empty.kind(), io::ErrorKind::WouldBlock);
    // A message longer than a slot reads as cut.
    process.send(&vec![0; MAX_TO_DAEMON + 1], true).unwrap();
    assert_eq!(inbox.recv(&daemon, true).unwrap(), 1);
    assert_eq!(inbox.messages(1).next(), Some(None));
}

#[test]
fn a_slot_holds_the_longest_request_and_a_longer_message_ends_the_connection() {
    let send = ToDaemon::Send {
        port: 1,
        addr: MadAddr::default(),
        mad: Box::new([0; crate::wire::MAD_SIZE]),
    };
    assert_eq!(send.encode().len(), MAX_TO_DAEMON);
    let register = ToDaemon::Register {
        pid: 1,
        device: "d".repeat(64),
    };
    assert!(register.encode().len() < MAX_TO_DAEMON);

    let f = Fabric::new(3660, SwitchConfig::default());
    let (c, slice) = f.registered();
    c.send_dreq(slice, 1, &f.remote_addr);
    f.remote_got();
    let mut long = send.encode();
    long.push(0);
    c.conn.send(&long, true).unwrap();
    assert!(c.closed(), "a message longer than any request was taken");
    f.wait_counter(SwitchCounter::Gone, 1);
}
