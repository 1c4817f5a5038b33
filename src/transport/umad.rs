//! The libibumad transport: CM MADs on real RDMA ports (rxe, mlx5, …).
//!
//! libibumad (`libibumad.so.3`, rdma-core) is loaded at run time, so the
//! library runs without it until a real device is opened; the dozen functions
//! used are declared here by hand. Each active port gets a file descriptor on
//! `/dev/infiniband/umadN`, an agent registered for the CM class (0x07,
//! version 2, method Send) and a reader thread. The kernel retries no CM MAD
//! (timeout 0, retries 0): retransmission is the engine's, since umad cannot
//! cancel a send. SA queries get a MAD-layer timeout so that their answers
//! are matched to them (see `SA_SEND_TIMEOUT_MS`).
//!
//! For a long-running daemon: the fds are close-on-exec; a reader sleeps in
//! poll() on its fd and an eventfd that `close` writes (no periodic wake-up)
//! with every signal blocked, and reads what the fd has after each wake-up; an open that fails half-way unwinds; when ib_umad
//! reports the port gone (device removed: POLLERR/POLLHUP, read -EIO) the
//! reader logs it once and stops, and sends on the port fail with -ENODEV.

use std::ffi::{CString, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::{Mutex, RwLock};

use super::batch::{self, BURST};
use super::sysfs::SysDevice;
use super::{MadAddr, MadTransport, RecvFn};
use crate::errno::{CmResult, EADDRINUSE, EBUSY, EINVAL, ELIBACC, ENODEV, Errno};
use crate::ibcm_log;
use crate::wire::{MAD_SIZE, Mad};

/// The CM's GSI Q_Key and QP.
const QP1_QKEY: u32 = 0x8001_0000;
const GSI_QPN: u32 = 1;

/// How long the MAD layer keeps an SA query on its agent's wait list for the
/// answer (the engine's own tries are shorter: a late answer to an earlier
/// try still matches, by TID). It expires as a send completion with a
/// timeout status, which the reader drops.
const SA_SEND_TIMEOUT_MS: c_int = 10_000;

const MGMT_CLASS_CM: u8 = 0x07;
const CM_CLASS_VERSION: u8 = 2;
const METHOD_SEND: u32 = 0x03;
/// The common MAD header: the least a simulated port passes on.
const MAD_HEADER_LEN: usize = 24;

/// `struct umad_reg_attr` (umad.h).
#[repr(C)]
struct UmadRegAttr {
    mgmt_class: u8,
    mgmt_class_version: u8,
    flags: u32,
    method_mask: [u64; 2],
    oui: u32,
    rmpp_version: u8,
}

/// `ib_mad_addr_t` (umad.h), 44 bytes; multi-byte fields big-endian.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbMadAddr {
    qpn: u32,
    qkey: u32,
    lid: u16,
    sl: u8,
    path_bits: u8,
    grh_present: u8,
    gid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    gid: [u8; 16],
    flow_label: u32,
    pkey_index: u16,
    reserved: [u8; 6],
}

/// `struct ib_user_mad` (umad.h) followed by one MAD: what read/write carry.
#[repr(C)]
struct UserMad {
    agent_id: u32,
    status: u32,
    timeout_ms: u32,
    retries: u32,
    length: u32,
    addr: IbMadAddr,
    data: Mad,
}

const _: () = {
    assert!(core::mem::size_of::<IbMadAddr>() == 44);
    assert!(core::mem::offset_of!(UserMad, data) == 64);
};

/// The libibumad functions this transport calls.
struct Lib {
    open_port: unsafe extern "C" fn(*const c_char, c_int) -> c_int,
    close_port: unsafe extern "C" fn(c_int) -> c_int,
    /// At least one of the two registrations is there.
    register2: Option<unsafe extern "C" fn(c_int, *mut UmadRegAttr, *mut u32) -> c_int>,
    register: Option<unsafe extern "C" fn(c_int, c_int, c_int, u8, *mut [u64; 2]) -> c_int>,
    unregister: unsafe extern "C" fn(c_int, c_int) -> c_int,
    send: unsafe extern "C" fn(c_int, c_int, *mut c_void, c_int, c_int, c_int) -> c_int,
    recv: unsafe extern "C" fn(c_int, *mut c_void, *mut c_int, c_int) -> c_int,
}

/// Looks up `name` in the library `handle`.
///
/// # Safety
/// `F` must be the function pointer type of the C function `name`.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &std::ffi::CStr) -> Option<F> {
    // SAFETY: `handle` is a live dlopen handle and `name` NUL-terminated.
    let ptr = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller names the right type; a function pointer has the
    // size of a data pointer on the platforms this library supports.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&ptr) })
}

/// Loads libibumad; on failure, the error and the line to log (by `lib`,
/// after the `OnceLock` is set: nothing logs inside an initialiser).
fn load() -> Result<Lib, (Errno, &'static str)> {
    // SAFETY: dlopen with a constant name; no initialisers of ours run.
    let handle = unsafe { libc::dlopen(c"libibumad.so.3".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return Err((
            ELIBACC,
            "libibumad.so.3 not found: install libibumad3 (rdma-core) to use RDMA devices",
        ));
    }
    // SAFETY: each name is paired with its prototype from umad.h.
    let lib = unsafe {
        (|| {
            let init: unsafe extern "C" fn() -> c_int = symbol(handle, c"umad_init")?;
            init();
            Some(Lib {
                open_port: symbol(handle, c"umad_open_port")?,
                close_port: symbol(handle, c"umad_close_port")?,
                register2: symbol(handle, c"umad_register2"),
                register: symbol(handle, c"umad_register"),
                unregister: symbol(handle, c"umad_unregister")?,
                send: symbol(handle, c"umad_send")?,
                recv: symbol(handle, c"umad_recv")?,
            })
        })()
    };
    lib.filter(|l| l.register2.is_some() || l.register.is_some())
        .ok_or((
            ELIBACC,
            "libibumad.so.3 lacks umad_* functions: rdma-core too old",
        ))
}

fn lib() -> Result<&'static Lib, Errno> {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    loaded().map_err(|&(e, why)| {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            ibcm_log!(Error, "{why}");
        }
        e
    })
}

/// libibumad, loaded once; what went wrong is for the caller to say.
fn loaded() -> Result<&'static Lib, &'static (Errno, &'static str)> {
    static LIB: OnceLock<Result<Lib, (Errno, &'static str)>> = OnceLock::new();
    LIB.get_or_init(load).as_ref()
}

/// Whether this process may open the umad file of `dev`'s `port_num`: found
/// through sysfs (`/sys/class/infiniband_mad/umad*/{ibdev,port}`) and opened
/// for reading and writing, then closed. Asked before libibumad is touched,
/// which itself warns on stderr where ib_umad is not loaded.
fn may_open_umad(dev: &str, port_num: u8) -> bool {
    let Ok(entries) = std::fs::read_dir("/sys/class/infiniband_mad") else {
        return false;
    };
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).unwrap_or_default();
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| n.starts_with("umad")) else {
            return false;
        };
        read(entry.path().join("ibdev")).trim() == dev
            && read(entry.path().join("port")).trim() == port_num.to_string()
            && std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(format!("/dev/infiniband/{name}"))
                .is_ok()
    })
}

/// One open port: its umad fd and, once registered, the CM agent on it.
/// Dropping it unregisters the agent and closes the fd, so an open that fails
/// half-way unwinds what it did.
struct PortHandle {
    lib: &'static Lib,
    port_num: u8,
    fd: c_int,
    agent_id: Option<u32>,
    /// The SA client agent (class 0x03) of an InfiniBand port: path queries.
    sa_agent_id: Option<u32>,
    /// Not a kernel fd but umad2sim's (ibsim's preload), whose poll sees
    /// only its own fds.
    simulated: bool,
    /// A kernel fd that does not block a read (libibumad opens it so): the
    /// reader takes a burst after each poll.
    drains: bool,
}

impl Drop for PortHandle {
    fn drop(&mut self) {
        // SAFETY: the fd and agent are this handle's, and nothing uses them
        // any more (readers are stopped before their ports are dropped).
        unsafe {
            for agent_id in [self.agent_id, self.sa_agent_id].into_iter().flatten() {
                (self.lib.unregister)(self.fd, agent_id as c_int);
            }
            (self.lib.close_port)(self.fd);
        }
    }
}

/// An open port and what its reader found out about it.
struct UmadPort {
    handle: PortHandle,
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
}

/// Whether the kernel's CM module is loaded (it owns the CM class then).
fn kernel_cm_loaded() -> bool {
    std::path::Path::new("/sys/module/ib_cm").exists()
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

/// Opens the umad fd of `port_num` of `name`, no agent on it yet.
fn open_handle(lib: &'static Lib, name: &CString, port_num: u8) -> CmResult<PortHandle> {
    // SAFETY: `name` is NUL-terminated; the port number is plain data.
    let fd = unsafe { (lib.open_port)(name.as_ptr(), c_int::from(port_num)) };
    if fd < 0 {
        return Err(Errno(-fd));
    }
    let mut handle = PortHandle {
        lib,
        port_num,
        fd,
        agent_id: None,
        sa_agent_id: None,
        simulated: false,
        drains: false,
    };
    // libibumad opens without O_CLOEXEC: a child that execs must not keep
    // the CM agent registered. EBADF: not a kernel fd but a simulator's
    // (umad2sim), which no child inherits anyway.
    // SAFETY: fcntl on an fd this handle owns.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        if last_errno().0 != libc::EBADF {
            return Err(last_errno());
        }
        handle.simulated = true;
    }
    // libibumad opens the fd O_NONBLOCK (umad_open_port): the reader drains
    // it after each poll, and the read that finds it empty says so (-EAGAIN)
    // instead of waiting. Looked at, not set: an fd that blocks (another
    // libibumad) is read once per poll, as a simulated one.
    if !handle.simulated {
        // SAFETY: fcntl on an fd this handle owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        handle.drains = flags >= 0 && flags & libc::O_NONBLOCK != 0;
    }
    Ok(handle)
}

/// Opens `port_num` of `dev` (`name`) and registers the CM class on it.
fn open_port(
    lib: &'static Lib,
    dev: &str,
    name: &CString,
    port_num: u8,
    infiniband: bool,
) -> CmResult<UmadPort> {
    let mut handle = open_handle(lib, name, port_num).inspect_err(|e| {
        ibcm_log!(
            Error,
            "cannot open the umad device of {dev} port {port_num}: {e:?} (is ib_umad loaded, \
             and /dev/infiniband/umad* readable and writable?)"
        )
    })?;
    let cm = AgentClass {
        mgmt_class: MGMT_CLASS_CM,
        version: CM_CLASS_VERSION,
        method_mask: [1 << METHOD_SEND, 0],
    };
    let agent_id =
        register(lib, handle.fd, &cm).map_err(|e| registration_error(dev, port_num, e))?;
    handle.agent_id = Some(agent_id);
    if infiniband {
        // A client of the SA: it sends queries and gets their answers only.
        let sa = AgentClass {
            mgmt_class: crate::sa::MGMT_CLASS_SA,
            version: crate::sa::SA_CLASS_VERSION,
            method_mask: [0, 0],
        };
        match register(lib, handle.fd, &sa) {
            Ok(id) => handle.sa_agent_id = Some(id),
            Err(e) => ibcm_log!(
                Warn,
                "{dev} port {port_num}: cannot register an SA client ({e:?}): no path queries"
            ),
        }
    }
    Ok(UmadPort {
        handle,
        dead: Arc::new(AtomicBool::new(false)),
    })
}

/// A management class an agent registers for.
struct AgentClass {
    mgmt_class: u8,
    version: u8,
    method_mask: [u64; 2],
}

/// Registers an agent for `class` on `fd`: with
/// `umad_register2`, or `umad_register` where that is missing or refused as
/// unknown (umad2sim, the ibsim preload, implements only the first ioctl).
/// On a real port the kernel refuses a taken class with EINVAL to both, so
/// the error returned is still the one that tells who holds it.
fn register(lib: &Lib, fd: c_int, class: &AgentClass) -> Result<u32, Errno> {
    let mut method_mask = class.method_mask;
    let mut refused = EINVAL;
    if let Some(register2) = lib.register2 {
        let mut attr = UmadRegAttr {
            mgmt_class: class.mgmt_class,
            mgmt_class_version: class.version,
            flags: 0,
            method_mask,
            oui: 0,
            rmpp_version: 0,
        };
        let mut agent_id = 0u32;
        // SAFETY: `attr` and `agent_id` are valid for the call.
        let rc = unsafe { register2(fd, &mut attr, &mut agent_id) };
        match rc.abs() {
            0 => return Ok(agent_id),
            e @ (libc::ENOSYS | libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL) => {
                refused = Errno(e)
            }
            e => return Err(Errno(e)),
        }
    }
    let Some(register) = lib.register else {
        return Err(refused);
    };
    // SAFETY: the mask is the 128 bits umad_register reads.
    let rc = unsafe {
        register(
            fd,
            c_int::from(class.mgmt_class),
            c_int::from(class.version),
            0,
            &mut method_mask,
        )
    };
    if rc < 0 {
        return Err(Errno(-rc));
    }
    Ok(rc as u32)
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

/// What a refused registration of the CM class means, said once in the log.
fn registration_error(dev: &str, port_num: u8, e: Errno) -> Errno {
    if kernel_cm_loaded() {
        ibcm_log!(
            Error,
            "the kernel ib_cm module owns CM MADs on {dev} port {port_num}; unload \
             ib_cm/rdma_cm to use ib_cm in userspace"
        );
        return EADDRINUSE;
    }
    if e == EINVAL {
        // The kernel refuses a second agent for method Send. A failed open of
        // ours leaves none behind, and a device opens once per process: it
        // is another process's.
        ibcm_log!(
            Error,
            "another process already receives CM MADs on {dev} port {port_num}"
        );
        return EBUSY;
    }
    ibcm_log!(
        Error,
        "cannot register the CM class on {dev} port {port_num}: {e:?}"
    );
    e
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
    pub fn open(dev: &SysDevice, recv: RecvFn) -> CmResult<Arc<Self>> {
        let lib = lib()?;
        let name = CString::new(dev.name.as_str()).map_err(|_| EINVAL)?;
        let ports = dev
            .ports
            .iter()
            .filter(|p| p.active)
            .map(|p| {
                let infiniband = p.link_layer == super::sysfs::LinkLayer::InfiniBand;
                open_port(lib, &dev.name, &name, p.port_num, infiniband)
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
        });
        for port in transport.ports.read().iter() {
            let reader = Reader {
                lib,
                fd: port.handle.fd,
                simulated: port.handle.simulated,
                burst: if port.handle.drains { BURST } else { 1 },
                wake: transport.wake.as_raw_fd(),
                port_num: port.handle.port_num,
                dev: dev.name.clone(),
                dead: port.dead.clone(),
                recv: recv.clone(),
            };
            match spawn_without_signals(format!("ibcm-umad-{}", dev.name), move || reader.run()) {
                Ok(thread) => transport.readers.lock().push(thread),
                Err(e) => {
                    ibcm_log!(Error, "cannot start a umad reader thread: {e}");
                    transport.close();
                    return Err(Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)));
                }
            }
        }
        Ok(transport)
    }
}

/// Send-only agents (no class: the kernel hands them no unsolicited MAD)
/// on the ports of a device whose CM class another process receives: the
/// MAD switch's, `ibcmd`. A process it serves that may open umad itself
/// sends its CM MADs with one write of its own instead of a write to the
/// daemon's socket, the daemon's read and the daemon's write
/// ([`super::switch`] decides which).
pub struct UmadSender {
    /// Emptied by `close`: a send after it finds no port.
    ports: RwLock<Vec<PortHandle>>,
}

impl UmadSender {
    /// A send-only agent on each of `port_nums` of `dev`; `None` (logged at
    /// debug level) when umad cannot be opened here, e.g. without access to
    /// `/dev/infiniband/umad*`, or on umad2sim, whose routing of a second
    /// agent per port is its own.
    pub fn open(dev: &str, port_nums: &[u8]) -> Option<Self> {
        let opened = (|| {
            if !port_nums.iter().all(|&p| may_open_umad(dev, p)) {
                return Err(Errno(libc::EACCES));
            }
            let lib = loaded().map_err(|&(e, _)| e)?;
            let name = CString::new(dev).map_err(|_| EINVAL)?;
            port_nums
                .iter()
                .map(|&port_num| {
                    let mut handle = open_handle(lib, &name, port_num)?;
                    if handle.simulated {
                        return Err(crate::errno::EOPNOTSUPP);
                    }
                    let send_only = AgentClass {
                        mgmt_class: 0,
                        version: 0,
                        method_mask: [0, 0],
                    };
                    handle.agent_id = Some(register(lib, handle.fd, &send_only)?);
                    Ok(handle)
                })
                .collect::<CmResult<Vec<_>>>()
        })();
        match opened {
            Ok(ports) => Some(Self {
                ports: RwLock::new(ports),
            }),
            Err(e) => {
                ibcm_log!(
                    Debug,
                    "{dev}: no send-only umad agent ({e:?}): CM MADs go through the MAD switch"
                );
                None
            }
        }
    }

    /// Writes `mad` from `port_num`: `-ENODEV` once closed.
    pub fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let ports = self.ports.read();
        let Some(port) = ports.iter().find(|p| p.port_num == port_num) else {
            return Err(if ports.is_empty() { ENODEV } else { EINVAL });
        };
        port.post(addr, mad)
    }

    /// Unregisters the agents and closes the fds, once sends in progress
    /// are done.
    pub fn close(&self) {
        self.ports.write().clear();
    }
}

/// The reader thread of one port.
struct Reader {
    lib: &'static Lib,
    fd: c_int,
    simulated: bool,
    /// MADs read per poll: [`BURST`] where a read finds the fd empty
    /// without waiting, else 1.
    burst: usize,
    wake: c_int,
    port_num: u8,
    dev: String,
    dead: Arc<AtomicBool>,
    recv: RecvFn,
}

impl Reader {
    /// Receives MADs until close wakes it or the port goes away.
    fn run(self) {
        loop {
            match self.wait() {
                Ok(false) => continue,
                Ok(true) => {}
                Err(None) => return, // closed
                Err(Some(e)) => return self.port_gone(e),
            }
            if let Err(e) = batch::receive_batch(|| self.receive_burst()) {
                return self.port_gone(e);
            }
        }
    }

    /// Reads what the port has, up to [`BURST`] MADs, with one `poll` before
    /// them all: the read that finds the fd empty ends the burst. A
    /// simulated port reads one per poll, as it always did (umad2sim's poll
    /// ticks every 100 ms).
    fn receive_burst(&self) -> CmResult {
        for _ in 0..self.burst {
            if !self.receive()? {
                break;
            }
        }
        Ok(())
    }

    /// Waits for a MAD (true), or nothing (false, a simulated port's tick);
    /// `Err(None)` once closed, `Err(Some(e))` when the port is gone.
    fn wait(&self) -> Result<bool, Option<Errno>> {
        let mut fds = [
            libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // umad2sim's poll waits on its own fd only and ignores the others: a
        // simulated port polls it alone for a while, then the wake fd.
        let (count, timeout) = if self.simulated { (1, 100) } else { (2, -1) };
        // SAFETY: `count` valid pollfds; a real port has no timeout: only a
        // MAD or close wakes it.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), count, timeout) };
        if ready < 0 {
            let e = last_errno();
            return if e.0 == libc::EINTR {
                Ok(false)
            } else {
                Err(Some(e))
            };
        }
        if self.simulated {
            // SAFETY: one valid pollfd (a kernel fd: umad2sim passes it on).
            unsafe { libc::poll(&mut fds[1], 1, 0) };
        }
        if fds[1].revents != 0 {
            return Err(None);
        }
        let revents = fds[0].revents;
        if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            // What ib_umad's poll says once the device is removed.
            return Err(Some(Errno(libc::EIO)));
        }
        Ok(revents & libc::POLLIN != 0)
    }

    /// Reads one MAD and hands it on: false when there was none to read; an
    /// error only when the port is unusable.
    fn receive(&self) -> CmResult<bool> {
        let mut buf = UserMad {
            agent_id: 0,
            status: 0,
            timeout_ms: 0,
            retries: 0,
            length: 0,
            addr: IbMadAddr::default(),
            data: [0; MAD_SIZE],
        };
        let mut len = MAD_SIZE as c_int;
        // SAFETY: `buf` has room for the header and one MAD of `len` bytes.
        let rc =
            unsafe { (self.lib.recv)(self.fd, (&mut buf as *mut UserMad).cast(), &mut len, 0) };
        if rc < 0 {
            return match -rc {
                // Nothing there (after all), or a MAD too long for the CM
                // (ib_umad keeps it queued: the burst ends, as before).
                libc::EAGAIN | libc::EINTR | libc::ENOSPC => Ok(false),
                e => Err(Errno(e)),
            };
        }
        // umad2sim hands a MAD over as its sender wrote it (OpenSM writes an
        // SA answer's 56 + 64 bytes) and in a 288-byte buffer with its 64-byte
        // header, so the last 32 bytes of a full MAD never arrive: what is
        // missing stays zero here, as the end of a MAD the SA padded would be.
        let whole = if self.simulated {
            MAD_HEADER_LEN
        } else {
            MAD_SIZE
        };
        if buf.status != 0 || len < whole as c_int {
            ibcm_log!(
                Debug,
                "{} port {}: dropped a received MAD (status {}, {len} bytes)",
                self.dev,
                self.port_num,
                buf.status
            );
            return Ok(true); // a send completion or a short MAD: nothing for the CM
        }
        let a = buf.addr;
        let reply = MadAddr {
            dlid: u16::from_be(a.lid),
            sl: a.sl,
            pkey_index: a.pkey_index,
            grh: a.grh_present != 0,
            dgid: a.gid,
            sgid_index: a.gid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
            flow_label: u32::from_be(a.flow_label),
        };
        (self.recv)(self.port_num, reply, Arc::new(buf.data));
        Ok(true)
    }

    /// The port is gone (the device was removed): stop reading and sending,
    /// and say so once.
    fn port_gone(&self, e: Errno) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            ibcm_log!(
                Error,
                "{} port {}: the umad device is gone ({e:?}; device removed?): its CM MADs \
                 fail with -ENODEV from now on; destroy its cm_ids and close the device",
                self.dev,
                self.port_num
            );
        }
    }
}

impl PortHandle {
    /// Writes `mad` to `addr` from this port (one `umad_send`).
    fn post(&self, addr: &MadAddr, mad: &Mad) -> CmResult {
        let (port, port_num) = (self, self.port_num);
        // The agent of the MAD's class: the SA's for path queries.
        let agent_id = if mad[1] == crate::sa::MGMT_CLASS_SA {
            port.sa_agent_id.ok_or(crate::errno::EOPNOTSUPP)?
        } else {
            port.agent_id.unwrap_or_default()
        };
        let mut buf = UserMad {
            agent_id,
            status: 0,
            timeout_ms: 0,
            retries: 0,
            length: MAD_SIZE as u32,
            addr: IbMadAddr {
                qpn: GSI_QPN.to_be(),
                qkey: QP1_QKEY.to_be(),
                lid: addr.dlid.to_be(),
                sl: addr.sl,
                path_bits: 0,
                grh_present: u8::from(addr.grh),
                gid_index: addr.sgid_index,
                hop_limit: addr.hop_limit,
                traffic_class: addr.traffic_class,
                gid: addr.dgid,
                flow_label: addr.flow_label.to_be(),
                pkey_index: addr.pkey_index,
                reserved: [0; 6],
            },
            data: *mad,
        };
        // An SA query waits in the MAD layer for its answer: the kernel hands
        // a response MAD only to a send still on its agent's wait list
        // (`ib_find_send_mad`: a send with a timeout), and drops any other
        // non-RMPP response, which a single-record GetResp is. CM MADs are
        // Sends: no answer to match, so no timeout (the engine retransmits).
        let timeout_ms = if mad[1] == crate::sa::MGMT_CLASS_SA {
            SA_SEND_TIMEOUT_MS
        } else {
            0
        };
        // SAFETY: `buf` is a complete ib_user_mad with one MAD; write(2)
        // copies it, so the kernel keeps no reference after the call.
        let rc = unsafe {
            (port.lib.send)(
                port.fd,
                buf.agent_id as c_int,
                (&mut buf as *mut UserMad).cast(),
                MAD_SIZE as c_int,
                timeout_ms,
                0,
            )
        };
        if rc < 0 {
            // libibumad returns -EIO for any failed write; errno says why.
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(-rc);
            let e = Errno(if errno > 0 { errno } else { -rc });
            ibcm_log!(
                Debug,
                "umad send on port {port_num} to {addr:?} failed: {e:?}"
            );
            return Err(e);
        }
        Ok(())
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
        port.handle.post(addr, mad)
    }

    fn close(&self) {
        // SAFETY: writes 8 bytes to the eventfd this transport owns.
        unsafe { libc::eventfd_write(self.wake.as_raw_fd(), 1) };
        for reader in self.readers.lock().drain(..) {
            let _ = reader.join();
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

/// `struct ibv_device_attr` (verbs.h) as raw bytes: only `local_ca_ack_delay`
/// is read, at its offset in the x86_64/aarch64 layout.
#[repr(C, align(8))]
struct IbvDeviceAttr([u8; 232]);
const IBV_DEVICE_ATTR_LOCAL_CA_ACK_DELAY: usize = 226;

/// The `local_ca_ack_delay` of RDMA device `name` as libibverbs reports it
/// (`ibv_query_device`), what the kernel's CM takes from `ib_device.attrs`.
/// libibverbs (`libibverbs.so.1`) is loaded at run time, as libibumad is;
/// `None` when it, its functions or the device are missing, or the query
/// fails.
pub fn verbs_local_ca_ack_delay(name: &str) -> Option<u8> {
    type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
    type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
    type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
    type OpenDevice = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
    type CloseDevice = unsafe extern "C" fn(*mut c_void) -> c_int;
    type QueryDevice = unsafe extern "C" fn(*mut c_void, *mut IbvDeviceAttr) -> c_int;

    // SAFETY: dlopen with a constant name; libibverbs' initialisers only
    // read its configuration.
    let handle = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: each name is paired with its prototype from verbs.h; the list
    // is used before it is freed, the context before it is closed, and the
    // attribute buffer is the size of `struct ibv_device_attr`.
    let delay = unsafe {
        (|| {
            let get_list: GetDeviceList = symbol(handle, c"ibv_get_device_list")?;
            let free_list: FreeDeviceList = symbol(handle, c"ibv_free_device_list")?;
            let get_name: GetDeviceName = symbol(handle, c"ibv_get_device_name")?;
            let open: OpenDevice = symbol(handle, c"ibv_open_device")?;
            let close: CloseDevice = symbol(handle, c"ibv_close_device")?;
            let query: QueryDevice = symbol(handle, c"ibv_query_device")?;
            let mut count: c_int = 0;
            let list = get_list(&mut count);
            if list.is_null() {
                return None;
            }
            let devices = std::slice::from_raw_parts(list, usize::try_from(count).unwrap_or(0));
            let found = devices.iter().copied().find(|&dev| {
                let dev_name = get_name(dev);
                !dev_name.is_null()
                    && std::ffi::CStr::from_ptr(dev_name).to_bytes() == name.as_bytes()
            });
            let delay = found.and_then(|dev| {
                let ctx = open(dev);
                if ctx.is_null() {
                    return None;
                }
                let mut attr = IbvDeviceAttr([0; 232]);
                let rc = query(ctx, &mut attr);
                close(ctx);
                (rc == 0).then_some(attr.0[IBV_DEVICE_ATTR_LOCAL_CA_ACK_DELAY])
            });
            free_list(list);
            delay
        })()
    };
    // The handle stays open: libibverbs keeps its providers loaded, and an
    // unload under them gains nothing (a second dlopen only counts up).
    delay
}
