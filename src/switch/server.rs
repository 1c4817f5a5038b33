//! The daemon's side of the socket: one thread per connected process reads
//! its messages and hands them to the [`Switch`]; the accept loop starts
//! them. A process's connection ends when it closes its socket (exit, crash,
//! `ibcm_close_device`), or when it exits while a child it forked holds the
//! socket: then it is unregistered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::proto::{DeviceInfo, MAX_MESSAGE, ToClient, ToDaemon};
use super::routing::{ClientId, Switch};
use crate::ffi::seqpacket::{PeerCred, PidFd, SeqPacket};
use crate::ibcm_log;
use crate::transport::IdSlice;
use crate::transport::batch::BURST;

/// The send buffer asked for each connection: room for a burst of received
/// MADs while the process's reader catches up (the kernel doubles it, and a
/// MAD takes about 1.3 KiB of it: some 1,600 MADs, three bursts of 500 REQs;
/// without CAP_NET_ADMIN the system's wmem_max, often 208 KiB, caps it at
/// about 160). No more: it is the daemon's kernel memory, which a process
/// that never reads keeps full (16 MiB here held 26,000 MADs, 32 MiB, for
/// each such process).
const CLIENT_SEND_BUFFER: usize = 1 << 20;
/// How long a connection may stay without registering: each holds a thread
/// and a file descriptor of the daemon's, and connections that never
/// register would otherwise pile up until accept fails (EMFILE) for every
/// process.
const REGISTER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

impl Switch {
    /// Accepts connections on `listener` until it fails (closed), each served
    /// on its own thread.
    pub fn accept_loop(self: &Arc<Self>, listener: &SeqPacket) {
        loop {
            let conn = match listener.accept() {
                Ok(conn) => conn,
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    ibcm_log!(Error, "ibcmd: cannot accept a connection: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
                Err(_) => return,
            };
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("ibcmd-client".into())
                .spawn(move || me.serve(conn));
            if let Err(e) = spawned {
                ibcm_log!(Error, "ibcmd: cannot start a client thread: {e}");
            }
        }
    }

    /// Serves one connection until it closes.
    pub fn serve(self: &Arc<Self>, conn: SeqPacket) {
        let cred = conn.peer_cred().unwrap_or_default();
        self.serve_as(conn, cred);
    }

    /// Serves one connection of the process `cred` says.
    pub(super) fn serve_as(self: &Arc<Self>, conn: SeqPacket, cred: PeerCred) {
        conn.set_send_buffer(CLIENT_SEND_BUFFER);
        let conn = Arc::new(conn);
        if conn.set_recv_timeout(Some(REGISTER_DEADLINE)).is_err() {
            return;
        }
        let mut buf = vec![0u8; MAX_MESSAGE * BURST];
        let mut lens = [0usize; BURST];
        let mut client: Option<ClientId> = None;
        let mut process: Option<Watch> = None;
        'connection: loop {
            match process.as_mut().map(|w| w.next(&conn)) {
                Some(Next::Message) | None => {}
                Some(Next::Gone) => {
                    ibcm_log!(
                        Info,
                        "ibcmd: process {} (uid {}) exited while another process (a child \
                         it forked) holds its socket: unregistered",
                        cred.pid,
                        cred.uid
                    );
                    break;
                }
            }
            // A registered process's messages in bursts: 1,000 REQs cost a
            // poll and a recvmmsg per BURST of them, not a poll and a recv
            // each. Before registration, and once the process has exited, a
            // message at a time: the registration's deadline applies, and
            // each message after the exit counts against MESSAGES_AFTER_EXIT.
            let received = if process.as_ref().is_some_and(Watch::running) {
                conn.recv_burst(&mut buf, MAX_MESSAGE, &mut lens, true)
            } else {
                conn.recv(&mut buf[..MAX_MESSAGE]).map(|n| {
                    lens[0] = n;
                    1
                })
            };
            let Ok(count) = received else { break };
            for (slot, &n) in buf.chunks(MAX_MESSAGE).zip(&lens[..count]) {
                if n == 0 || n > MAX_MESSAGE {
                    break 'connection; // closed, or not ours: too long
                }
                let Ok(msg) = ToDaemon::decode(&slot[..n]) else {
                    ibcm_log!(
                        Warn,
                        "ibcmd: process {} (uid {}) sent a malformed message: disconnected",
                        cred.pid,
                        cred.uid
                    );
                    break 'connection;
                };
                if !self.handle(&conn, cred, &mut client, msg) {
                    break 'connection;
                }
            }
            if client.is_some() && process.is_none() {
                match Watch::of(cred) {
                    Some(watch) => process = Some(watch),
                    None => break, // exited already
                }
            }
        }
        if let Some(c) = client {
            self.unregister(c);
        }
        conn.shutdown();
    }

    /// One message of a process; false ends its connection.
    fn handle(
        self: &Arc<Self>,
        conn: &Arc<SeqPacket>,
        cred: crate::ffi::seqpacket::PeerCred,
        client: &mut Option<ClientId>,
        msg: ToDaemon,
    ) -> bool {
        let reply = match (msg, *client) {
            (ToDaemon::Register { device, .. }, None) => {
                let answer = match self.register(conn.clone(), cred, &device) {
                    Ok((id, slice, device)) => {
                        *client = Some(id);
                        // Registered: it may stay idle as long as it lives.
                        if conn.set_recv_timeout(None).is_err() {
                            return false;
                        }
                        ToClient::Registered {
                            status: 0,
                            slice,
                            device,
                        }
                    }
                    Err(e) => ToClient::Registered {
                        status: -e.0,
                        slice: IdSlice::default(),
                        device: DeviceInfo::default(),
                    },
                };
                Some(answer)
            }
            (
                ToDaemon::Listen {
                    seq,
                    service_id,
                    mask,
                    port,
                },
                Some(c),
            ) => Some(match self.listen(c, service_id, mask, port) {
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
            }),
            (ToDaemon::Unlisten { service_id }, Some(c)) => {
                self.unlisten(c, service_id);
                None
            }
            (ToDaemon::Send { port, addr, mad }, Some(c)) => {
                // Refused MADs are counted (and spoofed ones logged); the
                // process learns nothing, as from a lost MAD.
                let _ = self.outbound(c, port, &addr, &mad);
                None
            }
            (ToDaemon::Stats { seq }, _) => Some(ToClient::Stats {
                seq,
                counters: self.counters(),
            }),
            // A second registration, or anything before the first.
            _ => return false,
        };
        match reply {
            Some(r) => conn.send(&r.encode(), true).is_ok(),
            None => true,
        }
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

/// What the connection does next.
enum Next {
    /// Read a message (one waits, or the socket closed).
    Message,
    /// The process has exited and none of its messages is left.
    Gone,
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

    /// Waits for a message of the process or its exit. A message still
    /// queued comes first (a process's socket has both when it exits).
    fn next(&mut self, conn: &SeqPacket) -> Next {
        let Watch::Process { pidfd, after_exit } = self else {
            return Next::Message;
        };
        match conn.wait_with(pidfd) {
            Ok(r) if r.exited && (!r.socket || *after_exit >= MESSAGES_AFTER_EXIT) => Next::Gone,
            Ok(r) => {
                *after_exit += usize::from(r.exited);
                Next::Message
            }
            // poll failed (ENOMEM): the socket alone, as without a pidfd.
            Err(_) => Next::Message,
        }
    }
}
