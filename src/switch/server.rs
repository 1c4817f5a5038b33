//! The daemon's side of the socket: one thread per connected process reads
//! its messages and hands them to the [`Switch`]; the accept loop starts
//! them. A process's connection ends when it closes its socket (exit, crash,
//! `ibcm_close_device`): then it is unregistered.

use std::sync::Arc;

use super::proto::{DeviceInfo, MAX_MESSAGE, ToClient, ToDaemon};
use super::routing::{ClientId, Switch};
use crate::ffi::seqpacket::SeqPacket;
use crate::ibcm_log;
use crate::transport::IdSlice;

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
        conn.set_send_buffer(CLIENT_SEND_BUFFER);
        let conn = Arc::new(conn);
        let cred = conn.peer_cred().unwrap_or_default();
        if conn.set_recv_timeout(Some(REGISTER_DEADLINE)).is_err() {
            return;
        }
        let mut buf = vec![0u8; MAX_MESSAGE];
        let mut client: Option<ClientId> = None;
        loop {
            let n = match conn.recv(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) if n > buf.len() => break, // not ours: too long
                Ok(n) => n,
            };
            let Ok(msg) = ToDaemon::decode(&buf[..n]) else {
                ibcm_log!(
                    Warn,
                    "ibcmd: process {} (uid {}) sent a malformed message: disconnected",
                    cred.pid,
                    cred.uid
                );
                break;
            };
            if !self.handle(&conn, cred, &mut client, msg) {
                break;
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
