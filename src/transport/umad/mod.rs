//! The libibumad transport: CM MADs on real RDMA ports (rxe, mlx5, …).
//!
//! libibumad (`libibumad.so.3`, rdma-core) is loaded at run time, so the
//! library runs without it until a real device is opened; the dozen functions
//! used are declared here by hand. Each active port gets a file descriptor on
//! `/dev/infiniband/umadN` and an agent registered for the CM class (0x07,
//! version 2, method Send). The CM worker reads the ports of the devices the
//! library opens itself ([`worker_poll`]): it waits in one `ppoll` on them, its
//! eventfd and the next timer, so a received MAD costs no thread switch.
//! umad2sim's ports, the MAD switch daemon's, and every port under
//! `IBCM_UMAD_READER_THREADS=1` get a reader thread instead, which hands
//! what it reads to the worker. An InfiniBand port's SA client has an fd of
//! its own, with a reader thread, where the worker reads the CM fd: SA answers
//! then arrive while a handler blocks, as the kernel's SA completes apart from
//! the CM's workqueue. The kernel retries no CM MAD
//! (timeout 0, retries 0): retransmission is the engine's, since umad cannot
//! cancel a send. SA queries get a MAD-layer timeout so that their answers
//! are matched to them (see `SA_SEND_TIMEOUT_MS`).
//!
//! For a long-running daemon: the fds are close-on-exec; a reader thread
//! sleeps in poll() on its fd and an eventfd that `close` writes, and the
//! worker in ppoll() on its ports, its eventfd and the next timer (no periodic
//! wake-up), with every signal blocked, and each reads what the fd has after
//! each wake-up; an open that fails half-way unwinds; when ib_umad reports the
//! port gone (device removed: POLLERR/POLLHUP, read -EIO) its reader logs it
//! once and stops reading it, and sends on the port fail with -ENODEV.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use super::batch::BURST;
use super::sysfs::SysDevice;
use super::{MadAddr, MadTransport, RecvFn};
use crate::errno::{CmResult, EINVAL, ENODEV, Errno};
use crate::ibcm_log;
use crate::wire::Mad;

use io::Reader;
use loader::lib;
use poll_set::{WORKER_DRAIN, poll_set};
use port::{PortHandle, open_port};

mod io;
mod loader;
mod poll_set;
mod port;
mod sender;

pub use loader::verbs_local_ca_ack_delay;
pub use poll_set::{read_ports_now, wake_worker_poll, worker_poll, worker_ports_registered};
pub use sender::UmadSender;

/// An open port and what its reader found out about it.
struct UmadPort {
    /// The CM agent's fd, and the SA client's where `sa` is `None`.
    handle: PortHandle,
    /// The SA client on an fd of its own (an InfiniBand port the worker
    /// reads): its reader thread delivers SA answers while a handler blocks.
    sa: Option<PortHandle>,
    /// The CM worker reads `handle` ([`worker_poll`]), no thread of its own.
    polled: bool,
    /// The port went away (ib_umad reports the device removed): nothing is
    /// sent on it any more.
    dead: Arc<AtomicBool>,
}

/// The transport of one RDMA device.
pub struct UmadTransport {
    /// Emptied by `close`: a send after it finds no port.
    ports: RwLock<Vec<UmadPort>>,
    /// Written once by `close`: the readers wait for it and their umad fd
    /// only, so an idle device wakes nobody.
    wake: OwnedFd,
    readers: Mutex<Vec<JoinHandle<()>>>,
    /// The ports the CM worker reads ([`worker_poll`]) instead of a reader
    /// thread: taken out of its set by `close` before their fds close.
    polled: Mutex<Vec<Arc<Reader>>>,
}

/// Whether the CM worker reads the kernel umad ports of the devices the
/// library opens (the default), or each port gets a reader thread
/// (`IBCM_UMAD_READER_THREADS` set to anything but empty or `0`, e.g. `1`:
/// the only way before 2026-12-04). Read once, when the first RDMA device
/// opens.
fn worker_reads() -> bool {
    static WORKER_READS: LazyLock<bool> = LazyLock::new(|| {
        crate::os::sys::secure_var_os(c"IBCM_UMAD_READER_THREADS")
            .is_none_or(|v| v.is_empty() || v == "0")
    });
    *WORKER_READS
}

/// The errno of a failed libc call; `EIO` where the call set none
/// (umad2sim's poll fails so while its process exits).
fn last_errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|&e| e != 0)
            .unwrap_or(libc::EIO),
    )
}

/// Reads a small text file (sysfs) with libc's `open` and `read`, the calls
/// umad2sim (ibsim's preload) redirects to its simulated sysfs; std::fs uses
/// `open64`/`statx`, which it does not see. None if it cannot be read.
pub fn read_text_file(path: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let cpath = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and constant flags; the fd is checked.
    let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new fd that nothing else owns; closed when `_owned` drops.
    let _owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // SAFETY: `chunk` has room for the bytes asked for.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        match n {
            0 => break,
            n if n > 0 => text.extend_from_slice(&chunk[..n as usize]),
            _ if last_errno().0 == libc::EINTR => continue,
            _ => return None,
        }
        if text.len() > 1 << 20 {
            return None; // not a sysfs attribute
        }
    }
    String::from_utf8(text).ok()
}

/// Starts `body` on a thread named `name` with every signal blocked: signals
/// are the application's, to be handled in its own threads.
fn spawn_without_signals(
    name: String,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    // SAFETY: sigset_t is plain data that sigfillset initialises.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut saved: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigsets; the new thread inherits the blocked mask, and
    // this thread's own mask is restored right after.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut saved);
    }
    let spawned = std::thread::Builder::new().name(name).spawn(body);
    // SAFETY: `saved` is the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut()) };
    spawned
}

impl UmadTransport {
    /// Opens every active port of `dev` and registers the CM class on it; on
    /// any failure nothing stays open, registered or running.
    ///
    /// `worker`: the kernel ports are read by the CM worker ([`worker_poll`])
    /// unless `IBCM_UMAD_READER_THREADS=1`, and this wakes it (`worker()`)
    /// once they are in its set; `None` (the MAD switch daemon, which has no
    /// CM worker): every port gets a reader thread.
    pub fn open(dev: &SysDevice, recv: RecvFn, worker: Option<fn()>) -> CmResult<Arc<Self>> {
        let lib = lib()?;
        let name = CString::new(dev.name.as_str()).map_err(|_| EINVAL)?;
        let poll_set = worker.and_then(|_| poll_set());
        if worker.is_some() && worker_reads() && poll_set.is_none() {
            static REPORTED: AtomicBool = AtomicBool::new(false);
            if !REPORTED.swap(true, Ordering::Relaxed) {
                ibcm_log!(
                    Warn,
                    "no eventfd for the worker's wait on the umad ports: a reader thread per port"
                );
            }
        }
        let ports = dev
            .ports
            .iter()
            .filter(|p| p.active)
            .map(|p| {
                let infiniband = p.link_layer == super::sysfs::LinkLayer::InfiniBand;
                open_port(
                    lib,
                    &dev.name,
                    &name,
                    p.port_num,
                    infiniband,
                    poll_set.is_some(),
                )
            })
            .collect::<CmResult<Vec<_>>>()?;
        // SAFETY: eventfd with constant flags; the result is checked.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(last_errno());
        }
        let transport = Arc::new(Self {
            ports: RwLock::new(ports),
            // SAFETY: a new fd that nothing else owns.
            wake: unsafe { OwnedFd::from_raw_fd(wake) },
            readers: Mutex::new(Vec::new()),
            polled: Mutex::new(Vec::new()),
        });
        let reader_of = |handle: &PortHandle, port: &UmadPort, burst: usize| Reader {
            lib,
            fd: handle.fd,
            simulated: handle.simulated,
            burst: if handle.drains { burst } else { 1 },
            wake: transport.wake.as_raw_fd(),
            port_num: handle.port_num,
            dev: dev.name.clone(),
            dead: port.dead.clone(),
            recv: recv.clone(),
        };
        let mut threads = Vec::new();
        for port in transport.ports.read().iter() {
            match poll_set.filter(|_| port.polled) {
                Some(set) => {
                    let reader = Arc::new(reader_of(&port.handle, port, WORKER_DRAIN));
                    transport.polled.lock().push(reader.clone());
                    set.register(reader);
                }
                None => threads.push(("umad", reader_of(&port.handle, port, BURST))),
            }
            if let Some(sa) = &port.sa {
                threads.push(("sa", reader_of(sa, port, BURST)));
            }
        }
        for (kind, reader) in threads {
            let thread_name = format!("ibcm-{kind}-{}", dev.name);
            match spawn_without_signals(thread_name, move || reader.run()) {
                Ok(thread) => transport.readers.lock().push(thread),
                Err(e) => {
                    ibcm_log!(Error, "cannot start a umad reader thread: {e}");
                    transport.close();
                    return Err(Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)));
                }
            }
        }
        if let Some(woken) = worker.filter(|_| !transport.polled.lock().is_empty()) {
            woken();
        }
        Ok(transport)
    }
}

impl MadTransport for UmadTransport {
    fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let ports = self.ports.read();
        let Some(port) = ports.iter().find(|p| p.handle.port_num == port_num) else {
            // No such port, or closed (no port left): never a stale fd.
            return Err(if ports.is_empty() { ENODEV } else { EINVAL });
        };
        if port.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        match &port.sa {
            Some(sa) if mad[1] == crate::sa::MGMT_CLASS_SA => sa.post(addr, mad),
            _ => port.handle.post(addr, mad),
        }
    }

    fn close(&self) {
        // SAFETY: writes 8 bytes to the eventfd this transport owns.
        unsafe { libc::eventfd_write(self.wake.as_raw_fd(), 1) };
        for reader in self.readers.lock().drain(..) {
            let _ = reader.join();
        }
        let polled = std::mem::take(&mut *self.polled.lock());
        if let Some(set) = poll_set().filter(|_| !polled.is_empty()) {
            set.deregister(&polled);
        }
        // The readers have stopped: unregister the agents and close the fds.
        // Sends in progress hold the lock; later ones find no port.
        self.ports.write().clear();
    }
}

impl Drop for UmadTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod poll_set_tests;
