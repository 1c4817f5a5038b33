//! The daemon's side of the socket: the accept loop counts each connection
//! against its user's quota and starts a thread for it, which reads the
//! process's messages and hands them to the [`Switch`]. Nothing a process
//! does holds that thread or the accept loop: answers wait in a bounded
//! queue when its socket is full, a connection unregistered at its deadline
//! is closed, and an idle one holds a slot of receive buffer. A process's
//! connection ends when it closes its socket (exit, crash,
//! `ibcm_close_device`), or when it exits while a child it forked holds the
//! socket: then it is unregistered.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::proto::{DeviceInfo, MAX_TO_DAEMON, ToClient, ToDaemon};
use super::routing::{ClientId, Switch, SwitchCounter};
use crate::ibcm_log;
use crate::log::Level;
use crate::os::seqpacket::{PeerCred, PidFd, Readiness, SeqPacket};
use crate::transport::IdSlice;
use crate::transport::batch::BURST;

/// The send buffer asked for each connection: room for a burst of received
/// MADs while the process's reader catches up (the kernel doubles it, and a
/// MAD takes about 1.3 KiB of it: some 1,600 MADs, three bursts of 500 REQs;
/// without CAP_NET_ADMIN the system's wmem_max, often 208 KiB, caps it at
/// about 160). No more: it is the daemon's kernel memory, which a process
/// that never reads keeps full (16 MiB here held 26,000 MADs, 32 MiB, for
/// each such process).
pub const CLIENT_SEND_BUFFER: usize = 1 << 20;
/// Says once that the processes' send buffers are smaller than
/// [`CLIENT_SEND_BUFFER`]: a daemon without CAP_NET_ADMIN (`--user`) gets at
/// most `net.core.wmem_max`, often 208 KiB (about 160 MADs at 1.3 KiB
/// each), and a burst of more REQs to one process than that loses the rest
/// until their senders retransmit (the first version of the daemon ran at
/// 10-17 % of the direct rate so). The shipped unit raises `wmem_max`.
fn small_send_buffer(got: usize) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        ibcm_log!(
            Warn,
            "ibcmd: each process's socket buffer is {} KiB, not the {} KiB asked for (net.core.wmem_max, \
             without CAP_NET_ADMIN): a burst of more MADs to one process than it holds waits for \
             retransmissions; set net.core.wmem_max to {} or more",
            got / 1024,
            CLIENT_SEND_BUFFER / 1024,
            CLIENT_SEND_BUFFER
        );
    }
}

/// How many answers (`Registered`, `Listened`, `Stats`) may wait for room in
/// a process's socket; one more and the process is disconnected as stalled.
/// They wait only when its send buffer is full already (hundreds to
/// thousands of messages it has not read), and a process asks one question
/// per thread at a time (a Listen waits for its answer, `ibcmd --stats`
/// asks once): 64 is 64 threads listening at once on a process that reads
/// slowly, and at most some 25 KiB of the daemon's memory (a Stats answer
/// takes about 400 bytes, a Listened 20).
pub(super) const REPLY_QUEUE: usize = 64;
/// The stack of a client thread. What it runs (decoding, routing under the
/// lock, a MAD sent, a log line) ran within 16 KiB, the smallest stack a
/// thread gets, through every test of the switch in a debug build; a thread
/// touches only the pages it uses, so an idle one costs a few either way,
/// and 256 KiB leaves room for what routing may become.
pub(super) const CLIENT_STACK: usize = 256 * 1024;

impl Switch {
    /// Accepts connections on `listener` until it fails (closed), each served
    /// on its own thread: the loop itself never waits for a process.
    pub fn accept_loop(self: &Arc<Self>, listener: &SeqPacket) {
        loop {
            let conn = match listener.accept() {
                Ok(conn) => conn,
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
                // The listener closed (the daemon stopping): the end.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBADF | libc::EINVAL)) => return,
                // Anything else (EMFILE, ENFILE, ENOMEM, ENOBUFS, EPROTO,
                // EPERM from a security module...) passes: one failed accept
                // must not leave the daemon running without serving anyone.
                Err(e) => {
                    static FAILED: AtomicU64 = AtomicU64::new(0);
                    if let Some(n) = doubled(&FAILED) {
                        ibcm_log!(Error, "ibcmd: cannot accept a connection: {e} ({n} so far)");
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            // A peer of unknown credentials counts against no quota: closed.
            let Ok(cred) = conn.peer_cred() else { continue };
            self.start_client(conn, cred);
        }
    }

    /// Counts the connection of the process `cred` says against its user's
    /// quota and serves it on a thread of its own; closes it at once when
    /// the user holds its quota of connections, or no thread starts.
    pub(super) fn start_client(self: &Arc<Self>, conn: SeqPacket, cred: PeerCred) {
        let accepted = Instant::now();
        let Some(admitted) = self.admit(cred.uid) else {
            self.count_loss(SwitchCounter::OverQuota, || {
                format!(
                    "process {} (uid {}) refused a connection: its user holds {} connections \
                     to the socket, its quota",
                    cred.pid,
                    cred.uid,
                    self.config().quotas.connections
                )
            });
            return;
        };
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ibcmd-client".into())
            .stack_size(CLIENT_STACK)
            .spawn(move || {
                // Counted until the connection ends.
                let _admitted = admitted;
                me.serve_from(conn, cred, accepted);
            });
        if let Err(e) = spawned {
            static NO_THREAD: AtomicU64 = AtomicU64::new(0);
            if let Some(n) = doubled(&NO_THREAD) {
                ibcm_log!(
                    Error,
                    "ibcmd: cannot start a client thread, its connection is closed: {e} ({n} so far)"
                );
            }
        }
    }

    /// Serves one connection until it closes (no quota: tests).
    pub fn serve(self: &Arc<Self>, conn: SeqPacket) {
        let cred = conn.peer_cred().unwrap_or_default();
        self.serve_as(conn, cred);
    }

    /// Serves one connection of the process `cred` says (no quota: tests).
    pub(super) fn serve_as(self: &Arc<Self>, conn: SeqPacket, cred: PeerCred) {
        self.serve_from(conn, cred, Instant::now());
    }

    /// Serves one connection, accepted at `accepted`, until it ends.
    fn serve_from(self: &Arc<Self>, conn: SeqPacket, cred: PeerCred, accepted: Instant) {
        let buffer = conn.set_send_buffer(CLIENT_SEND_BUFFER);
        if buffer < CLIENT_SEND_BUFFER {
            small_send_buffer(buffer);
        }
        let mut session = Session {
            switch: self,
            conn: Arc::new(conn),
            cred,
            deadline: accepted.checked_add(self.config().register_deadline),
            client: None,
            device: String::new(),
            process: None,
            replies: Replies::default(),
        };
        session.run();
        if let Some(c) = session.client {
            self.unregister(c);
        }
        session.conn.shutdown();
        linger(&session.conn);
    }
}

/// Keeps an ended connection (and with it its place in its user's quota of
/// connections, held by the caller) while its process has not read what
/// the daemon sent it: that is the daemon's kernel memory, which the
/// process would otherwise pin beyond its quota by keeping its end open
/// after each disconnection (without it, 6 connections closed as stalled
/// held 3.8 MB with a quota of 1; tests_daemon_resources.rs checks it). A
/// process that closes its end, or reads, ends it at once; one that does
/// neither keeps a sleeping thread and a descriptor, within its quota.
fn linger(conn: &SeqPacket) {
    while conn.unread().is_ok_and(|n| n > 0) {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Counts one more failure in `count`: its number when it is the 1st, 2nd,
/// 4th, 8th…, the times to say so, as `Switch::count_loss` does: a daemon
/// out of descriptors or threads does not fill its log too.
fn doubled(count: &AtomicU64) -> Option<u64> {
    let n = count.fetch_add(1, Ordering::Relaxed) + 1;
    n.is_power_of_two().then_some(n)
}

/// One connection being served.
struct Session<'a> {
    switch: &'a Arc<Switch>,
    conn: Arc<SeqPacket>,
    cred: PeerCred,
    /// Until it registers: when the connection is closed unregistered
    /// (`None`: a deadline beyond what the clock holds, never).
    deadline: Option<Instant>,
    client: Option<ClientId>,
    /// The device it registered for.
    device: String,
    process: Option<Watch>,
    replies: Replies,
}

/// What a process's message asks of its connection.
enum Outcome {
    Answer(ToClient),
    Nothing,
    End,
}

impl Session<'_> {
    /// Serves the connection until it ends.
    fn run(&mut self) {
        let mut inbox = Inbox::new();
        loop {
            let Some(ready) = self.wait() else { return };
            if ready.writable && self.replies.flush(&self.conn).is_err() {
                return;
            }
            if self.process.as_mut().is_some_and(|w| w.gone(ready)) {
                let cred = self.cred;
                self.switch.tenant_log(Level::Info, || {
                    format!(
                        "process {} (uid {}) exited while another process (a child it forked) \
                         holds its socket: unregistered",
                        cred.pid, cred.uid
                    )
                });
                return;
            }
            if !ready.socket {
                continue;
            }
            // A registered process's messages in bursts: 1,000 REQs cost a
            // poll and a recvmmsg per burst of them, not a poll and a recv
            // each. Before registration, and once the process has exited, a
            // message at a time: each message after the exit counts against
            // MESSAGES_AFTER_EXIT.
            let burst = self.process.as_ref().is_some_and(Watch::running);
            let count = match inbox.recv(&self.conn, burst) {
                Ok(count) => count,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            };
            for msg in inbox.messages(count) {
                if !self.take(msg) {
                    return;
                }
            }
            if self.client.is_some() && self.process.is_none() {
                match Watch::of(self.cred) {
                    Some(watch) => self.process = Some(watch),
                    None => return, // exited already
                }
            }
        }
    }

    /// Waits for a message, room for the answers waiting, or the process's
    /// exit; `None` when the connection is still unregistered at its
    /// deadline (counted), which no message moves.
    fn wait(&self) -> Option<Readiness> {
        let timeout = match (self.client, self.deadline) {
            (Some(_), _) | (None, None) => None,
            (None, Some(deadline)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    self.switch.count_loss(SwitchCounter::RegisterTimeout, || {
                        format!(
                            "process {} (uid {}) did not register within {:?}: disconnected",
                            self.cred.pid,
                            self.cred.uid,
                            self.switch.config().register_deadline
                        )
                    });
                    return None;
                }
                Some(left)
            }
        };
        let pidfd = self.process.as_ref().and_then(Watch::pidfd);
        match self.conn.wait(self.replies.waiting(), pidfd, timeout) {
            Ok(ready) => Some(ready),
            Err(_) => {
                // poll failed (ENOMEM): again shortly; the deadline holds.
                std::thread::sleep(Duration::from_millis(10));
                Some(Readiness::default())
            }
        }
    }

    /// One received message (`None`: longer than any the daemon takes); false
    /// ends the connection.
    fn take(&mut self, msg: Option<&[u8]>) -> bool {
        let Some(bytes) = msg.filter(|b| !b.is_empty()) else {
            return false; // closed, or not ours: too long
        };
        let Ok(msg) = ToDaemon::decode(bytes) else {
            let cred = self.cred;
            self.switch.tenant_log(Level::Warn, || {
                format!(
                    "process {} (uid {}) sent a malformed message: disconnected",
                    cred.pid, cred.uid
                )
            });
            return false;
        };
        match self.handle(msg) {
            Outcome::Answer(reply) => self.reply(&reply),
            Outcome::Nothing => true,
            Outcome::End => false,
        }
    }

    /// Sends `reply` when the socket has room, else queues it; false when
    /// the process lets the queue fill (disconnected, counted) or is gone.
    fn reply(&mut self, reply: &ToClient) -> bool {
        match self.replies.push(&self.conn, reply.encode()) {
            Ok(()) => true,
            Err(Stall::Closed) => false,
            Err(Stall::Full) => {
                let on = if self.device.is_empty() {
                    String::new()
                } else {
                    format!(" on {}", self.device)
                };
                self.switch.count_loss(SwitchCounter::ClientStalled, || {
                    format!(
                        "process {} (uid {}){on} does not read its socket, {REPLY_QUEUE} \
                         answers wait for it: disconnected",
                        self.cred.pid, self.cred.uid
                    )
                });
                false
            }
        }
    }

    /// One message of the process.
    fn handle(&mut self, msg: ToDaemon) -> Outcome {
        let switch = self.switch;
        Outcome::Answer(match (msg, self.client) {
            (ToDaemon::Register { device, .. }, None) => {
                match switch.register(self.conn.clone(), self.cred, &device) {
                    Ok((id, slice, info)) => {
                        self.client = Some(id);
                        self.device = device;
                        ToClient::Registered {
                            status: 0,
                            slice,
                            device: info,
                        }
                    }
                    Err(e) => ToClient::Registered {
                        status: -e.0,
                        slice: IdSlice::default(),
                        device: DeviceInfo::default(),
                    },
                }
            }
            (
                ToDaemon::Listen {
                    seq,
                    service_id,
                    mask,
                    port,
                },
                Some(c),
            ) => match switch.listen(c, service_id, mask, port) {
                Ok(service_id) => ToClient::Listened {
                    seq,
                    status: 0,
                    service_id,
                },
                Err(e) => ToClient::Listened {
                    seq,
                    status: -e.0,
                    service_id,
                },
            },
            (ToDaemon::Unlisten { service_id }, Some(c)) => {
                switch.unlisten(c, service_id);
                return Outcome::Nothing;
            }
            (ToDaemon::Send { port, addr, mad }, Some(c)) => {
                // Refused MADs are counted (and spoofed ones logged); the
                // process learns nothing, as from a lost MAD.
                let _ = switch.outbound(c, port, &addr, &mad);
                return Outcome::Nothing;
            }
            (ToDaemon::Stats { seq }, _) => ToClient::Stats {
                seq,
                counters: switch.counters(),
            },
            // A second registration, or anything before the first.
            _ => return Outcome::End,
        })
    }
}

/// Why answers cannot go on.
#[derive(Debug, PartialEq, Eq)]
enum Stall {
    /// The process let [`REPLY_QUEUE`] answers wait.
    Full,
    /// Its socket failed (closed).
    Closed,
}

/// The answers to a process its socket had no room for, oldest first: sent
/// when the socket has room again, before any later answer. (The MADs
/// routing hands to the process go to its socket directly, and are lost
/// when it is full, as in a full receive queue: one may pass an answer
/// that waits, as it may pass one being sent.)
#[derive(Default)]
struct Replies(VecDeque<Vec<u8>>);

impl Replies {
    fn waiting(&self) -> bool {
        !self.0.is_empty()
    }

    /// Sends `reply` after those waiting, as far as the socket takes them.
    fn push(&mut self, conn: &SeqPacket, reply: Vec<u8>) -> Result<(), Stall> {
        self.0.push_back(reply);
        self.flush(conn)?;
        if self.0.len() > REPLY_QUEUE {
            return Err(Stall::Full);
        }
        Ok(())
    }

    /// Sends the answers waiting, oldest first, until the socket is full.
    fn flush(&mut self, conn: &SeqPacket) -> Result<(), Stall> {
        while let Some(reply) = self.0.front() {
            match conn.send(reply, false) {
                Ok(()) => {
                    self.0.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return Err(Stall::Closed),
            }
        }
        Ok(())
    }
}

/// The receive area of a connection: slots of [`MAX_TO_DAEMON`] bytes, the
/// longest message a process sends. One to start with, doubled (up to
/// [`BURST`]) each time a burst fills them all: an idle connection holds
/// 290 bytes, a busy one what its bursts need, at most 64 × 290 (18 KiB).
pub(super) struct Inbox {
    buf: Vec<u8>,
    lens: Vec<usize>,
    /// The last burst filled every slot.
    filled: bool,
}

impl Inbox {
    pub(super) fn new() -> Self {
        Self {
            buf: vec![0; MAX_TO_DAEMON],
            lens: vec![0],
            filled: false,
        }
    }

    pub(super) fn slots(&self) -> usize {
        self.lens.len()
    }

    /// Takes what waits on `conn`, without waiting: as many messages as it
    /// has slots when `burst`, else one. `WouldBlock` when none waits.
    pub(super) fn recv(&mut self, conn: &SeqPacket, burst: bool) -> io::Result<usize> {
        if burst && self.filled && self.slots() < BURST {
            let slots = (2 * self.slots()).min(BURST);
            self.buf.resize(slots * MAX_TO_DAEMON, 0);
            self.lens.resize(slots, 0);
        }
        let slots = if burst { self.slots() } else { 1 };
        let count = conn.recv_burst(
            &mut self.buf[..slots * MAX_TO_DAEMON],
            MAX_TO_DAEMON,
            &mut self.lens[..slots],
            false,
        )?;
        self.filled = burst && count == slots;
        Ok(count)
    }

    /// The `count` messages the last `recv` took, in order: `None` for one
    /// longer than a slot (cut), empty for the peer's close.
    pub(super) fn messages(&self, count: usize) -> impl Iterator<Item = Option<&[u8]>> {
        self.buf
            .chunks(MAX_TO_DAEMON)
            .zip(&self.lens[..count])
            .map(|(slot, &n)| slot.get(..n))
    }
}

/// The registered process itself, besides its socket: a child it forked
/// after `ibcm_open_device` inherits the socket, so when the process dies
/// the socket stays open while the child lives, and the daemon would keep
/// its slice and listens (its peers' DREQs unanswered) that long. Its exit
/// (its pidfd readable) ends the connection as the socket's close does.
/// Without pidfds (before Linux 5.3; a peer in another pid namespace, pid
/// 0), only the socket's close does, as before (logged once per daemon).
/// (A pid reused between the process's death and `pidfd_open` watches the
/// new process: no worse than without.)
enum Watch {
    Process {
        pidfd: PidFd,
        /// Messages read since the process exited.
        after_exit: usize,
    },
    /// No pidfd: the socket alone.
    Socket,
}

/// What a dead process still queued is handled (its last DREQs, sent just
/// before it exited), but no more than this: a child that inherited the
/// socket would otherwise keep the dead process registered by writing.
pub(super) const MESSAGES_AFTER_EXIT: usize = 4096;

impl Watch {
    /// Watches `cred`'s process; `None` when it has exited already.
    fn of(cred: PeerCred) -> Option<Self> {
        static NO_PIDFD_LOGGED: AtomicBool = AtomicBool::new(false);
        match PidFd::open(cred.pid) {
            Ok(pidfd) => Some(Watch::Process {
                pidfd,
                after_exit: 0,
            }),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => None,
            Err(e) => {
                if !NO_PIDFD_LOGGED.swap(true, Ordering::Relaxed) {
                    ibcm_log!(
                        Warn,
                        "ibcmd: cannot watch process {} (pidfd_open: {e}): a process's \
                         registration ends when its socket closes, which a child it forked \
                         may keep open after it died",
                        cred.pid
                    );
                }
                Some(Watch::Socket)
            }
        }
    }

    /// Whether no exit of the process was seen yet: its messages are read
    /// in bursts.
    fn running(&self) -> bool {
        match self {
            Watch::Process { after_exit, .. } => *after_exit == 0,
            Watch::Socket => true,
        }
    }

    /// The pidfd to wait on with the socket, if any.
    fn pidfd(&self) -> Option<&PidFd> {
        match self {
            Watch::Process { pidfd, .. } => Some(pidfd),
            Watch::Socket => None,
        }
    }

    /// Whether the process has exited and none of its messages is left (or
    /// it has sent [`MESSAGES_AFTER_EXIT`] since), after a wait that saw
    /// `ready`. A message still queued comes first (a process's socket has
    /// both when it exits).
    fn gone(&mut self, ready: Readiness) -> bool {
        let Watch::Process { after_exit, .. } = self else {
            return false;
        };
        if ready.exited && (!ready.socket || *after_exit >= MESSAGES_AFTER_EXIT) {
            return true;
        }
        *after_exit += usize::from(ready.exited);
        false
    }
}
