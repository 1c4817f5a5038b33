//! The MAD switch transport: a device whose ports `ibcmd` owns. Its MADs
//! cross the daemon's Unix socket (`$IBCM_SWITCH_SOCKET`, by default
//! `/run/ib_cm/ibcmd.sock`); the daemon gave this process a slice of the
//! local comm ID space and routes to it what is addressed there, and the
//! REQs of the service IDs it listens on. A process that may open umad
//! sends most of its MADs itself, with a send-only agent (`DirectRoute`).
//!
//! When no daemon runs (no socket, or nobody behind it) the device is opened
//! through umad as before. When the daemon goes away, the reader logs it once
//! and tells the engine (a [`LostFn`]): every cm_id of the device with a
//! connection or request in progress gets its error event, and sends fail
//! with `-ENODEV` from then on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::batch::{self, BURST};
use super::direct_route::DirectRoute;
use super::umad::UmadSender;
use super::{IdSlice, LostFn, MadAddr, MadTransport, RecvFn};
use crate::errno::{CmResult, EIO, ENODEV, Errno};

use crate::errno::ETIMEDOUT;
use crate::ibcm_log;
use crate::os::seqpacket::SeqPacket;
use crate::switch::proto::{DeviceInfo, MAX_MESSAGE, ToClient, ToDaemon};
use crate::wire::Mad;

/// Where the daemon listens unless `IBCM_SWITCH_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/ib_cm/ibcmd.sock";
/// How long a call waits for the daemon's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Sockets of in-process switches, by device name (engine tests).
#[cfg(test)]
pub static TEST_SOCKETS: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());

/// The socket of the switch serving `device`.
fn socket_for(device: &str) -> PathBuf {
    #[cfg(test)]
    if let Some((_, path)) = TEST_SOCKETS.lock().iter().find(|(d, _)| d == device) {
        return path.clone();
    }
    let _ = device;
    socket_path()
}

/// The daemon's socket path.
pub fn socket_path() -> PathBuf {
    crate::os::sys::secure_var_os(c"IBCM_SWITCH_SOCKET")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from)
}

/// A registration with the daemon, before its reader starts.
pub struct Registered {
    conn: SeqPacket,
    slice: IdSlice,
    pub device: DeviceInfo,
}

/// Registers this process with the daemon for `device`: `Ok(None)` when no
/// daemon runs (then umad is opened directly); the daemon's errno when it
/// refuses (`-ENODEV`: it does not serve the device).
pub fn register(device: &str) -> CmResult<Option<Registered>> {
    let path = socket_for(device);
    let conn = match SeqPacket::connect_within(&path, Some(ANSWER_TIMEOUT)) {
        Ok(conn) => conn,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED)) => {
            return Ok(None);
        }
        Err(e) => {
            ibcm_log!(
                Error,
                "cannot connect to the CM MAD switch at {}: {e}",
                path.display()
            );
            return Err(Errno(e.raw_os_error().unwrap_or(libc::EIO)));
        }
    };
    let io = |e: std::io::Error| Errno(e.raw_os_error().unwrap_or(libc::EIO));
    let hello = ToDaemon::Register {
        pid: std::process::id(),
        device: device.to_owned(),
    };
    conn.send(&hello.encode(), true).map_err(io)?;
    let answer = recv_answer(&conn).map_err(io)?;
    match ToClient::decode(&answer) {
        Ok(ToClient::Registered {
            status: 0,
            slice,
            device: info,
        }) => Ok(Some(Registered {
            conn,
            slice,
            device: info,
        })),
        Ok(ToClient::Registered { status, .. }) => {
            let e = Errno(-status);
            ibcm_log!(
                Error,
                "the CM MAD switch at {} refused {device}: {e:?}",
                path.display()
            );
            Err(e)
        }
        _ => {
            ibcm_log!(
                Error,
                "the CM MAD switch at {} speaks another protocol version",
                path.display()
            );
            Err(EIO)
        }
    }
}

/// The registration answer, waited for at most [`ANSWER_TIMEOUT`].
fn recv_answer(conn: &SeqPacket) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    conn.set_recv_timeout(Some(ANSWER_TIMEOUT))?;
    let n = conn.recv(&mut buf)?;
    conn.set_recv_timeout(None)?;
    buf.truncate(n.min(MAX_MESSAGE));
    Ok(buf)
}

/// Calls waiting for the daemon's answer, by sequence number.
type Pending = Mutex<HashMap<u32, Waiter>>;

/// What the daemon's answer to a sequence number is for.
enum Waiter {
    /// A call waiting for it.
    Call(SyncSender<(i32, u64)>),
    /// A Listen whose caller got `-ETIMEDOUT`: if the daemon grants it after
    /// all, the reader gives it back (an Unlisten), else it would hold the
    /// service ID for the process's lifetime with no listener behind it.
    GaveUpListen,
}

/// The transport of one device served by the daemon.
pub struct SwitchTransport {
    conn: Arc<SeqPacket>,
    slice: IdSlice,
    /// The daemon closed the connection (or died): nothing goes through.
    dead: Arc<AtomicBool>,
    pending: Arc<Pending>,
    next_seq: AtomicU32,
    /// [`ANSWER_TIMEOUT`]; shorter in tests of a stuck daemon.
    answer_timeout: Mutex<Duration>,
    reader: Mutex<Option<JoinHandle<()>>>,
    /// Send-only umad agents of this process's own, when it may open umad
    /// (see [`DirectRoute`]); `None` with `IBCM_SWITCH_DIRECT_SEND=0`.
    direct: Option<UmadSender>,
    /// Which MADs may use `direct`.
    route: Arc<DirectRoute>,
}

/// Whether sends may bypass the daemon (`IBCM_SWITCH_DIRECT_SEND`, default
/// on; `0` sends every MAD through it).
fn direct_send_enabled() -> bool {
    crate::os::sys::secure_var_os(c"IBCM_SWITCH_DIRECT_SEND").is_none_or(|v| v != "0")
}

impl SwitchTransport {
    /// Starts receiving for `device` with `recv`; `lost` is called if the
    /// daemon goes away before `close`.
    pub fn start(
        device: &str,
        registered: Registered,
        recv: RecvFn,
        lost: LostFn,
    ) -> CmResult<Arc<Self>> {
        let transport = Arc::new(Self {
            conn: Arc::new(registered.conn),
            slice: registered.slice,
            dead: Arc::new(AtomicBool::new(false)),
            pending: Arc::default(),
            next_seq: AtomicU32::new(1),
            answer_timeout: Mutex::new(ANSWER_TIMEOUT),
            reader: Mutex::new(None),
            direct: direct_send_enabled()
                .then(|| {
                    let ports: Vec<u8> =
                        registered.device.ports.iter().map(|p| p.port_num).collect();
                    UmadSender::open(device, &ports)
                })
                .flatten(),
            route: Arc::default(),
        });
        let reader = Reader {
            conn: transport.conn.clone(),
            dead: transport.dead.clone(),
            pending: Arc::downgrade(&transport.pending),
            route: transport.route.clone(),
            device: device.to_owned(),
            recv,
            lost,
        };
        let thread = std::thread::Builder::new()
            .name(format!("ibcm-switch-{device}"))
            .spawn(move || {
                crate::os::sys::block_all_signals();
                reader.run();
            })
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)))?;
        *transport.reader.lock() = Some(thread);
        Ok(transport)
    }

    /// How long calls wait for the daemon's answer (tests of a stuck daemon).
    #[cfg(test)]
    pub fn set_answer_timeout(&self, timeout: Duration) {
        *self.answer_timeout.lock() = timeout;
    }

    /// Fills the socket to the daemon with Stats requests nobody waits for,
    /// until a send would block: what a daemon that stopped reading leaves.
    /// Returns how many were sent.
    #[cfg(test)]
    pub fn fill_socket_to_daemon(&self) -> usize {
        let stats = ToDaemon::Stats { seq: 0 }.encode();
        let mut sent = 0;
        while self.conn.send(&stats, false).is_ok() {
            sent += 1;
        }
        sent
    }

    /// Sends the message `make` builds with a new sequence number and waits
    /// for the daemon's answer to it (a listen's status and service ID).
    /// When none comes in time, a Listen (`listen`) is marked given up.
    fn ask(&self, listen: bool, make: impl FnOnce(u32) -> ToDaemon) -> CmResult<(i32, u64)> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        self.pending.lock().insert(seq, Waiter::Call(tx));
        if let Err(e) = self.post(&make(seq)) {
            self.pending.lock().remove(&seq);
            return Err(e);
        }
        let timeout = *self.answer_timeout.lock();
        match rx.recv_timeout(timeout) {
            Ok(answer) => return Ok(answer),
            Err(RecvTimeoutError::Disconnected) => return Err(ENODEV),
            Err(RecvTimeoutError::Timeout) => {}
        }
        let mut pending = self.pending.lock();
        if pending.remove(&seq).is_none() {
            // The reader took our place, and answered under this lock (or
            // the connection ended): the answer came just in time.
            drop(pending);
            return rx.try_recv().map_err(|_| ENODEV);
        }
        if listen {
            pending.insert(seq, Waiter::GaveUpListen);
        }
        Err(ETIMEDOUT)
    }

    fn post(&self, msg: &ToDaemon) -> CmResult {
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        self.conn.send(&msg.encode(), true).map_err(|e| {
            match e.raw_os_error() {
                // Full for ANSWER_TIMEOUT: the daemon is stuck; the MAD is lost.
                Some(libc::EAGAIN) => crate::errno::ENOBUFS,
                _ => ENODEV,
            }
        })
    }
}

/// The reader thread: the daemon's messages, until the connection ends.
struct Reader {
    conn: Arc<SeqPacket>,
    dead: Arc<AtomicBool>,
    pending: Weak<Pending>,
    /// Told of every received MAD (the peer answered a REP).
    route: Arc<DirectRoute>,
    device: String,
    recv: RecvFn,
    lost: LostFn,
}

impl Reader {
    fn run(self) {
        let mut buf = vec![0u8; MAX_MESSAGE * BURST];
        let mut lens = [0usize; BURST];
        // One recvmmsg per burst: it waits for the daemon's next message and
        // takes what else is queued, and the MADs of a burst wake the worker
        // once.
        while let Ok(count @ 1..) = self.conn.recv_burst(&mut buf, MAX_MESSAGE, &mut lens, true) {
            let open = batch::receive_batch(|| {
                for (slot, &n) in buf.chunks(MAX_MESSAGE).zip(&lens[..count]) {
                    if n == 0 || n > MAX_MESSAGE {
                        return false;
                    }
                    self.handle(&slot[..n]);
                }
                true
            });
            if !open {
                break;
            }
        }
        self.daemon_gone();
    }

    /// One message of the daemon.
    fn handle(&self, msg: &[u8]) {
        match ToClient::decode(msg) {
            Ok(ToClient::Recv { port, addr, mad }) => {
                self.route.received(&mad);
                (self.recv)(port, addr, Arc::new(*mad))
            }
            Ok(ToClient::Listened {
                seq,
                status,
                service_id,
            }) => self.answer(seq, (status, service_id)),
            Ok(ToClient::Stats { seq, .. }) => self.answer(seq, (0, 0)),
            _ => {} // nothing this side asked for
        }
    }

    /// Hands the daemon's answer to the call waiting for it; gives back a
    /// listen granted after its caller gave up. The daemon counts a
    /// process's Listens and Unlistens per service ID, so this Unlisten
    /// undoes exactly that grant, whatever the process's other listeners
    /// on the service ID did meanwhile; a refused Listen needs none.
    fn answer(&self, seq: u32, answer: (i32, u64)) {
        let Some(pending) = self.pending.upgrade() else {
            return;
        };
        let mut pending = pending.lock();
        match pending.remove(&seq) {
            // Under the lock: a caller that times out meanwhile finds it.
            Some(Waiter::Call(waiter)) => {
                let _ = waiter.try_send(answer);
            }
            Some(Waiter::GaveUpListen) if answer.0 == 0 => {
                drop(pending);
                self.give_back_listen(answer.1);
            }
            Some(Waiter::GaveUpListen) | None => {}
        }
    }

    /// Sends the Unlisten for a listen granted after its caller gave up. The
    /// reader must never wait for room on the socket: while it waits, no MAD
    /// of this process is received. When the socket to the daemon is full
    /// (the daemon is slow), a short thread of its own waits for room, at
    /// most the connection's send timeout (ANSWER_TIMEOUT).
    fn give_back_listen(&self, service_id: u64) {
        let unlisten = ToDaemon::Unlisten { service_id }.encode();
        match self.conn.send(&unlisten, false) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if connection_ended(&e) => return,
            Err(e) => return log_unlisten_lost(&self.device, service_id, &e),
            Ok(()) => return,
        }
        let conn = self.conn.clone();
        let dead = self.dead.clone();
        let device = self.device.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("ibcm-unlisten-{device}"))
            .spawn(move || {
                crate::os::sys::block_all_signals();
                // A device closed meanwhile, or the daemon died (the reader
                // may not know yet): its listens ended with the connection,
                // nothing is lost.
                if let Err(e) = conn.send(&unlisten, true)
                    && !dead.load(Ordering::Acquire)
                    && !connection_ended(&e)
                {
                    log_unlisten_lost(&device, service_id, &e);
                }
            });
        if let Err(e) = spawned {
            log_unlisten_lost(&self.device, service_id, &e);
        }
    }

    /// The connection ended: by `close`, or because the daemon went away.
    fn daemon_gone(&self) {
        let closing = self.dead.swap(true, Ordering::AcqRel);
        if let Some(pending) = self.pending.upgrade() {
            pending.lock().clear(); // the waiters see the channel closed
        }
        if !closing {
            ibcm_log!(
                Error,
                "{}: the CM MAD switch (ibcmd) went away: its cm_ids in progress get their \
                 error events (IB_WC_WR_FLUSH_ERR) and its CM MADs fail with -ENODEV from \
                 now on; destroy its cm_ids and close the device",
                self.device
            );
            (self.lost)();
        }
    }
}

/// A send failed because the connection to the daemon is gone (the daemon
/// died, or `close` shut it down): the daemon dropped this process's
/// registration, and its listens with it.
fn connection_ended(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN)
    )
}

/// The daemon keeps a listen nobody here uses, until this process leaves it.
fn log_unlisten_lost(device: &str, service_id: u64, e: &std::io::Error) {
    ibcm_log!(
        Warn,
        "{device}: cannot give back service ID {service_id:#x}, granted by the CM MAD switch \
         after ib_cm_listen gave up: {e}"
    );
}

impl MadTransport for SwitchTransport {
    fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        if let Some(direct) = &self.direct
            && self.route.may_go_direct(mad)
        {
            if self.dead.load(Ordering::Acquire) {
                return Err(ENODEV);
            }
            return direct.send(port_num, addr, mad);
        }
        self.post(&ToDaemon::Send {
            port: port_num,
            addr: *addr,
            mad: Box::new(*mad),
        })?;
        self.route.sent_through_daemon(mad);
        Ok(())
    }

    fn id_slice(&self) -> Option<IdSlice> {
        Some(self.slice)
    }

    fn listen(&self, service_id: u64) -> CmResult<Option<u64>> {
        let answer = self.ask(true, |seq| ToDaemon::Listen {
            seq,
            service_id,
            mask: u64::MAX,
            port: 0,
        });
        match answer? {
            (0, service_id) => Ok(Some(service_id)),
            (status, _) => Err(Errno(-status)),
        }
    }

    /// Returns once the daemon has freed `service_id`, as `cm_destroy_id`
    /// frees it before returning: another process may listen on it at once.
    fn unlisten(&self, service_id: u64) {
        if self.post(&ToDaemon::Unlisten { service_id }).is_ok() {
            // The daemon handles a process's messages in order: the answer
            // to this one says the Unlisten is done.
            let _ = self.ask(false, |seq| ToDaemon::Stats { seq });
        }
    }

    fn close(&self) {
        self.dead.store(true, Ordering::Release);
        if let Some(direct) = &self.direct {
            direct.close();
        }
        self.conn.shutdown();
        if let Some(reader) = self.reader.lock().take() {
            // Never itself: the reader may drop the last device reference.
            if reader.thread().id() != std::thread::current().id() {
                let _ = reader.join();
            }
        }
    }
}

impl Drop for SwitchTransport {
    fn drop(&mut self) {
        self.close();
    }
}
