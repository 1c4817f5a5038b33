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

use std::ffi::{CString, c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};

use super::batch::{self, BURST};
use super::sysfs::SysDevice;
use super::{MadAddr, MadTransport, RecvFn};
use crate::errno::{CmResult, EADDRINUSE, EBUSY, EINVAL, ELIBACC, ENODEV, Errno};
use crate::ibcm_log;
use crate::wire::{MAD_SIZE, Mad};

use crate::wire::{
    CM_CLASS_VERSION, GSI_QPN, MAD_HDR_SIZE as MAD_HEADER_LEN, MGMT_CLASS_CM, QP1_QKEY,
};

/// How long the MAD layer keeps an SA query on its agent's wait list for the
/// answer (the engine's own tries are shorter: a late answer to an earlier
/// try still matches, by TID). It expires as a send completion with a
/// timeout status, which the reader drops.
const SA_SEND_TIMEOUT_MS: c_int = 10_000;

/// The CM's one method, as umad_reg_attr's method mask counts it.
const METHOD_SEND: u32 = crate::wire::METHOD_SEND as u32;

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

/// Opens `port_num` of `dev` (`name`) and registers the CM class on it, and
/// on an InfiniBand port an SA client. `worker_polls`: the CM worker reads a
/// kernel port that does not block a read ([`worker_poll`]); the SA client
/// then gets an fd of its own (read by a thread), else it shares the CM's,
/// and so does it when its own cannot be had (the port then keeps a reader
/// thread: a handler waits on the worker for an SA answer).
fn open_port(
    lib: &'static Lib,
    dev: &str,
    name: &CString,
    port_num: u8,
    infiniband: bool,
    worker_polls: bool,
) -> CmResult<UmadPort> {
    let open_error = |e: &Errno| {
        ibcm_log!(
            Error,
            "cannot open the umad device of {dev} port {port_num}: {e:?} (is ib_umad loaded, \
             and /dev/infiniband/umad* readable and writable?)"
        )
    };
    let mut handle = open_handle(lib, name, port_num).inspect_err(open_error)?;
    let cm = AgentClass {
        mgmt_class: MGMT_CLASS_CM,
        version: CM_CLASS_VERSION,
        method_mask: [1 << METHOD_SEND, 0],
    };
    let agent_id =
        register(lib, handle.fd, &cm).map_err(|e| registration_error(dev, port_num, e))?;
    handle.agent_id = Some(agent_id);
    let mut polled = worker_polls && !handle.simulated && handle.drains;
    let mut sa = None;
    if infiniband {
        // A client of the SA: it sends queries and gets their answers only.
        let class = AgentClass {
            mgmt_class: crate::sa::MGMT_CLASS_SA,
            version: crate::sa::SA_CLASS_VERSION,
            method_mask: [0, 0],
        };
        // ib_umad gives each open file its own agents.
        let own_fd = || {
            let mut own = open_handle(lib, name, port_num)?;
            own.sa_agent_id = Some(register(lib, own.fd, &class)?);
            Ok::<_, Errno>(own)
        };
        let registered = match polled.then(own_fd) {
            Some(Ok(own)) => {
                sa = Some(own);
                Ok(())
            }
            failed => {
                if let Some(Err(e)) = failed {
                    // The worker must not read the SA's answers: a handler's
                    // `ibcm_init_path` waits on the worker for them.
                    polled = false;
                    ibcm_log!(
                        Warn,
                        "{dev} port {port_num}: no umad fd of its own for the SA client \
                         ({e:?}): the port keeps a reader thread for both"
                    );
                }
                register(lib, handle.fd, &class).map(|id| handle.sa_agent_id = Some(id))
            }
        };
        if let Err(e) = registered {
            ibcm_log!(
                Warn,
                "{dev} port {port_num}: cannot register an SA client ({e:?}): no path queries"
            );
        }
    }
    Ok(UmadPort {
        handle,
        sa,
        polled,
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
                return Err(crate::errno::EACCES);
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

/// MADs the worker reads from one port per look at it, at most: it drains
/// a port (the read that finds it empty ends the look) so that a backlog
/// waits in the device's receive queue, where [`RX_QUEUE_CAP`] bounds and
/// counts it as a reader thread's, rather than in ib_umad's list, whose
/// overflow nobody sees; the bound keeps a flooding peer from holding the
/// worker in one look. Between batches of a backlog the worker looks again
/// (`worker::run`), so ib_umad's list holds what arrives in one batch.
///
/// [`RX_QUEUE_CAP`]: crate::cm::worker::RX_QUEUE_CAP
const WORKER_DRAIN: usize = 16 * BURST;

/// The kernel umad ports the CM worker reads on its own thread: it waits in
/// [`worker_poll`] on their fds and an eventfd of its own instead of a
/// reader thread per port handing it each burst (a thread switch per burst,
/// and where the two share a CPU, per MAD). umad2sim's ports and the MAD
/// switch daemon's keep their reader threads, and so does every port with
/// `IBCM_UMAD_READER_THREADS=1`: then this set is never made.
///
/// A port leaves the set (`close`) before its fd is closed. The worker polls
/// a snapshot of the ports and says which generation of the set it holds;
/// `deregister` makes a new generation, wakes the worker and waits until it
/// holds no older snapshot. The reads after a poll, and [`read_ports_now`]'s,
/// happen under the set's lock, which `deregister` takes too, so a port is
/// never read once it has left; and the MADs of one port are queued in the
/// order read whichever thread reads them.
struct PollSet {
    state: Mutex<PollState>,
    /// Signalled when the worker lets go of a snapshot.
    released: Condvar,
    /// The worker's eventfd: [`wake_worker_poll`], `register` and
    /// `deregister` write it.
    wake: OwnedFd,
    /// How many ports are in the set, for a look without the lock.
    count: AtomicUsize,
}

#[derive(Default)]
struct PollState {
    ports: Vec<Arc<Reader>>,
    generation: u64,
    /// The generation of the snapshot the worker holds, if it holds one.
    holding: Option<u64>,
}

/// `None` if no eventfd could be made: every port gets a reader thread then.
static POLL_SET: LazyLock<Option<PollSet>> = LazyLock::new(PollSet::new);

/// Set once a port has joined the set: until then (and always with
/// `IBCM_UMAD_READER_THREADS=1`) the worker's looks at it are one load, and
/// never make it.
static POLL_SET_IN_USE: AtomicBool = AtomicBool::new(false);

/// The set for a device that opens, made on first use; `None` with
/// `IBCM_UMAD_READER_THREADS=1`.
fn poll_set() -> Option<&'static PollSet> {
    worker_reads().then(|| POLL_SET.as_ref()).flatten()
}

/// The set, once a port has been in it.
fn poll_set_in_use() -> Option<&'static PollSet> {
    if !POLL_SET_IN_USE.load(Ordering::Acquire) {
        return None;
    }
    POLL_SET.as_ref()
}

impl PollSet {
    /// An empty set; `None` if no eventfd could be made.
    fn new() -> Option<Self> {
        // SAFETY: eventfd with constant flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        (fd >= 0).then(|| PollSet {
            state: Mutex::default(),
            released: Condvar::new(),
            // SAFETY: a new fd that nothing else owns.
            wake: unsafe { OwnedFd::from_raw_fd(fd) },
            count: AtomicUsize::new(0),
        })
    }

    /// Adds a port; a `ppoll` in progress returns to take it in.
    fn register(&self, reader: Arc<Reader>) {
        let mut state = self.state.lock();
        state.ports.push(reader);
        self.count.store(state.ports.len(), Ordering::SeqCst);
        POLL_SET_IN_USE.store(true, Ordering::Release);
        self.wake();
    }

    /// Stops polling and reading `readers`: once it returns, the worker
    /// touches none of their fds, and they may be closed.
    fn deregister(&self, readers: &[Arc<Reader>]) {
        let mut state = self.state.lock();
        state
            .ports
            .retain(|p| !readers.iter().any(|r| Arc::ptr_eq(p, r)));
        self.count.store(state.ports.len(), Ordering::SeqCst);
        state.generation += 1;
        let generation = state.generation;
        if state.holding.is_some_and(|h| h < generation) {
            // The worker polls an older snapshot (or is about to): woken,
            // it reads (under this lock, once the wait lets go of it) and
            // lets go of the snapshot.
            self.wake();
            while state.holding.is_some_and(|h| h < generation) {
                self.released.wait(&mut state);
            }
        }
    }

    fn wake(&self) {
        // SAFETY: writes 8 bytes to the eventfd this set owns.
        unsafe { libc::eventfd_write(self.wake.as_raw_fd(), 1) };
    }

    /// Reads each of `ready` (with the lock held), a burst of
    /// [`WORKER_DRAIN`] at most, in one [`batch::receive_batch`]; a port
    /// whose fd reports an error, or whose read fails, is gone
    /// (`Reader::port_gone`) and leaves the set.
    fn read_ready(&self, state: &mut PollState, ready: &[(Arc<Reader>, libc::c_short)]) {
        let mut gone = Vec::new();
        batch::receive_batch(|| {
            for (port, revents) in ready {
                let failed = if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                    // What ib_umad's poll says once the device is removed.
                    Some(crate::errno::EIO)
                } else if revents & libc::POLLIN != 0 {
                    port.receive_burst().err()
                } else {
                    None
                };
                if let Some(e) = failed {
                    port.port_gone(e);
                    gone.push(port.clone());
                }
            }
        });
        if !gone.is_empty() {
            state
                .ports
                .retain(|p| !gone.iter().any(|g| Arc::ptr_eq(p, g)));
            self.count.store(state.ports.len(), Ordering::SeqCst);
        }
    }
}

/// The ports the worker polls, held from before its `ppoll` until after its
/// reads; let go when dropped (also by a panic).
struct Snapshot {
    set: &'static PollSet,
    ports: Vec<Arc<Reader>>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.set.state.lock().holding = None;
        self.set.released.notify_all();
    }
}

/// Whether ports are in the worker's set: it waits in [`worker_poll`] then,
/// instead of on its condition variable. False with
/// `IBCM_UMAD_READER_THREADS=1`, one load.
pub fn worker_ports_registered() -> bool {
    poll_set_in_use().is_some_and(|set| set.count.load(Ordering::SeqCst) != 0)
}

/// Wakes the worker from [`worker_poll`] (or makes its next one return at
/// once).
pub fn wake_worker_poll() {
    if let Some(set) = poll_set_in_use() {
        set.wake();
    }
}

/// The CM worker's wait while ports are in its set: one `ppoll` on its
/// eventfd and every port's fd, `timeout` at most (`None`: until a port has
/// input or [`wake_worker_poll`] is called; `Some(Duration::ZERO)`: a look
/// without waiting); then what each readable port has, `WORKER_DRAIN` MADs
/// at most, goes to the port's `RecvFn` as a reader thread's does.
///
/// `Err` when `ppoll` itself fails (not `EINTR`): the caller must not call
/// again at once.
pub fn worker_poll(timeout: Option<Duration>) -> CmResult {
    poll_set_in_use().map_or(Ok(()), |set| set.poll(timeout))
}

/// Reads what the worker's ports have now, without waiting, on the calling
/// thread, and queues it: `ib_cm_notify`'s check and `close`'s wait for the
/// queued work come after the MADs the kernel received before the call, as
/// they do when a reader thread has read them (the kernel's MAD layer takes
/// a MAD off its queue pair whatever the CM's workqueue is doing).
pub fn read_ports_now() {
    if let Some(set) = poll_set_in_use() {
        set.read_now();
    }
}

impl PollSet {
    /// [`worker_poll`] on this set.
    fn poll(&'static self, timeout: Option<Duration>) -> CmResult {
        let snapshot = {
            let mut state = self.state.lock();
            state.holding = Some(state.generation);
            Snapshot {
                set: self,
                ports: state.ports.clone(),
            }
        };
        let mut fds = Vec::with_capacity(1 + snapshot.ports.len());
        fds.push(libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(snapshot.ports.iter().map(|port| libc::pollfd {
            fd: port.fd,
            events: libc::POLLIN,
            revents: 0,
        }));
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: t.subsec_nanos().into(),
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const _);
        // SAFETY: `fds` are valid pollfds whose fds stay open while the
        // snapshot is held (`deregister` waits for it); the timespec is valid
        // or null (no timeout); the signal mask is not changed (null).
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                ts_ptr,
                std::ptr::null(),
            )
        };
        if ready < 0 {
            let e = last_errno();
            return if e.0 == libc::EINTR { Ok(()) } else { Err(e) };
        }
        if ready == 0 {
            return Ok(());
        }
        if fds[0].revents != 0 {
            let mut value = 0;
            // SAFETY: reads 8 bytes from the eventfd this set owns
            // (non-blocking).
            unsafe { libc::eventfd_read(self.wake.as_raw_fd(), &mut value) };
        }
        let ready: Vec<_> = snapshot
            .ports
            .iter()
            .zip(&fds[1..])
            .filter(|(_, fd)| fd.revents != 0)
            .map(|(port, fd)| (port.clone(), fd.revents))
            .collect();
        if !ready.is_empty() {
            let mut state = self.state.lock();
            // A port that left the set meanwhile (`deregister` waits for this
            // snapshot, its fd still open) is not read: its device is closing.
            let ready: Vec<_> = ready
                .into_iter()
                .filter(|(port, _)| state.ports.iter().any(|p| Arc::ptr_eq(p, port)))
                .collect();
            self.read_ready(&mut state, &ready);
        }
        Ok(())
    }

    /// [`read_ports_now`] on this set.
    fn read_now(&self) {
        let mut state = self.state.lock();
        let ready: Vec<_> = state
            .ports
            .iter()
            .map(|port| (port.clone(), libc::POLLIN))
            .collect();
        self.read_ready(&mut state, &ready);
    }
}

/// The reader of one port: its own thread, or the CM worker ([`worker_poll`]).
struct Reader {
    lib: &'static Lib,
    fd: c_int,
    simulated: bool,
    /// MADs read per poll: where a read finds the fd empty without waiting,
    /// [`BURST`] for a reader thread and [`WORKER_DRAIN`] for the worker;
    /// else 1.
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
            return Err(Some(crate::errno::EIO));
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

/// The worker's set of ports ([`PollSet`]) on socketpairs read by a stand-in
/// `umad_recv`, each test with a set of its own: ports that join or leave
/// while the worker waits, bursts, and reads by the thread that asks
/// (docs/experiments/README.md).
#[cfg(test)]
mod poll_set_tests {
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    use super::*;

    /// `umad_recv` on a socketpair end: one `struct ib_user_mad` and MAD
    /// per message, as ib_umad's read gives them.
    unsafe extern "C" fn stand_in_recv(
        fd: c_int,
        buf: *mut c_void,
        len: *mut c_int,
        _timeout_ms: c_int,
    ) -> c_int {
        // SAFETY: the reader passes its buffer, room for the header and
        // `*len` bytes, and `len` itself.
        let n = unsafe { libc::read(fd, buf, 64 + *len as usize) };
        if n < 0 {
            return -last_errno().0;
        }
        if n == 0 {
            return -libc::EIO;
        }
        // SAFETY: as above.
        unsafe { *len = n as c_int - 64 };
        0
    }
    unsafe extern "C" fn unused_open(_: *const c_char, _: c_int) -> c_int {
        -libc::ENOSYS
    }
    unsafe extern "C" fn unused_close(_: c_int) -> c_int {
        0
    }
    unsafe extern "C" fn unused_unregister(_: c_int, _: c_int) -> c_int {
        0
    }
    unsafe extern "C" fn unused_send(
        _: c_int,
        _: c_int,
        _: *mut c_void,
        _: c_int,
        _: c_int,
        _: c_int,
    ) -> c_int {
        -libc::ENOSYS
    }

    static STAND_IN: Lib = Lib {
        open_port: unused_open,
        close_port: unused_close,
        register2: None,
        register: None,
        unregister: unused_unregister,
        send: unused_send,
        recv: stand_in_recv,
    };

    /// One port: the end the set reads, the "wire" end, and the sequence
    /// numbers (MAD bytes 8..12) of what its `RecvFn` got, in order.
    struct Port {
        reader: Arc<Reader>,
        wire: OwnedFd,
        _read_end: OwnedFd,
        got: Arc<Mutex<Vec<u32>>>,
    }

    fn port() -> Port {
        let mut sv = [0; 2];
        // SAFETY: `sv` has room for the two fds; the result is checked.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        // SAFETY: two new fds that nothing else owns.
        let (read_end, wire) =
            unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let reader = Arc::new(Reader {
            lib: &STAND_IN,
            fd: read_end.as_raw_fd(),
            simulated: false,
            burst: WORKER_DRAIN,
            wake: -1,
            port_num: 1,
            dev: "stand-in".into(),
            dead: Arc::new(AtomicBool::new(false)),
            recv: Arc::new(move |_, _, mad: Arc<Mad>| {
                sink.lock()
                    .push(u32::from_be_bytes(mad[8..12].try_into().unwrap()))
            }),
        });
        Port {
            reader,
            wire,
            _read_end: read_end,
            got,
        }
    }

    impl Port {
        /// A MAD numbered `seq` arrives on the port.
        fn arrive(&self, seq: u32) {
            let mut msg = [0u8; 64 + MAD_SIZE];
            msg[64 + 8..64 + 12].copy_from_slice(&seq.to_be_bytes());
            // SAFETY: writes the message from a live buffer.
            let n = unsafe { libc::write(self.wire.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
            assert_eq!(n, msg.len() as isize, "{:?}", last_errno());
        }

        fn got(&self) -> Vec<u32> {
            self.got.lock().clone()
        }
    }

    fn set() -> &'static PollSet {
        Box::leak(Box::new(PollSet::new().unwrap()))
    }

    /// Polls `set` on a thread of its own until `stop`, as the worker does
    /// (waiting with no timeout).
    fn poller(set: &'static PollSet, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
        let polls = Arc::new(AtomicU32::new(0));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                set.poll(None).unwrap();
                polls.fetch_add(1, Ordering::Relaxed);
            }
            polls.load(Ordering::Relaxed)
        })
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < until, "not within 5 s: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn stop_poller(set: &'static PollSet, stop: &AtomicBool, thread: JoinHandle<u32>) {
        stop.store(true, Ordering::Release);
        set.wake();
        thread.join().unwrap();
    }

    /// A port that joins while the worker waits in `ppoll` without it (a
    /// second device opened) is polled from then on.
    #[test]
    fn worker_reads_a_port_that_joins_while_it_waits() {
        let set = set();
        let first = port();
        set.register(first.reader.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = poller(set, stop.clone());
        std::thread::sleep(Duration::from_millis(50)); // in ppoll on `first` alone
        let second = port();
        set.register(second.reader.clone());
        second.arrive(7);
        wait_until("the MAD of the port that joined is read", || {
            second.got() == [7]
        });
        stop_poller(set, &stop, thread);
    }

    /// `close`: once `deregister` returns, the worker holds no snapshot with
    /// the port (it waited for one in progress) and never reads it again.
    #[test]
    fn worker_never_reads_a_port_once_deregistered() {
        let set = set();
        let p = port();
        set.register(p.reader.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = poller(set, stop.clone());
        p.arrive(1);
        wait_until("the first MAD is read", || p.got() == [1]);
        std::thread::sleep(Duration::from_millis(20)); // back in ppoll on it
        set.deregister(std::slice::from_ref(&p.reader));
        let state = set.state.lock();
        assert!(
            state.holding.is_none_or(|h| h == state.generation),
            "the worker holds a snapshot older than the set"
        );
        drop(state);
        p.arrive(2);
        set.read_now();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(p.got(), [1], "a port read after it left the set");
        assert_eq!(set.count.load(Ordering::SeqCst), 0);
        stop_poller(set, &stop, thread);
    }

    /// A look drains the port past a reader thread's burst, so a backlog
    /// waits in the device's bounded, counted queue rather than in ib_umad's
    /// list.
    #[test]
    fn a_look_drains_past_a_reader_threads_burst() {
        let set = set();
        let p = port();
        set.register(p.reader.clone());
        let sent = u32::try_from(BURST).unwrap() + 36;
        for seq in 0..sent {
            p.arrive(seq);
        }
        set.poll(Some(Duration::ZERO)).unwrap();
        assert_eq!(p.got(), (0..sent).collect::<Vec<_>>());
    }

    /// What the port holds is read and handed on, in order, by the thread
    /// that asks (`ib_cm_notify`, `close`), before that thread queues its own
    /// work; the worker then finds the port empty.
    #[test]
    fn read_now_hands_on_what_the_port_holds_in_order() {
        let set = set();
        let p = port();
        set.register(p.reader.clone());
        for seq in [3, 1, 2] {
            p.arrive(seq);
        }
        set.read_now();
        assert_eq!(p.got(), [3, 1, 2]);
        set.poll(Some(Duration::ZERO)).unwrap();
        assert_eq!(p.got(), [3, 1, 2], "read twice");
    }

    /// A port whose fd hangs up (the device was removed) is gone and leaves
    /// the set, so an idle worker does not wake for it again and again.
    #[test]
    fn a_port_that_hangs_up_leaves_the_set() {
        let set = set();
        let p = port();
        set.register(p.reader.clone());
        // SAFETY: shuts down the wire end this test owns.
        unsafe { libc::shutdown(p.wire.as_raw_fd(), libc::SHUT_RDWR) };
        set.poll(Some(Duration::from_secs(5))).unwrap();
        assert!(p.reader.dead.load(Ordering::Acquire));
        assert_eq!(set.count.load(Ordering::SeqCst), 0);
        assert!(set.state.lock().ports.is_empty());
    }

    /// `close` while the worker's `ppoll` has just seen the port readable:
    /// `deregister` takes the port out and waits for the snapshot; the
    /// worker, which then gets the lock, must not read the port any more
    /// (that interleaving forced with the set's lock).
    #[test]
    fn a_port_is_not_read_once_it_has_left_even_by_a_poll_in_progress() {
        let set = set();
        let p = port();
        set.register(p.reader.clone());
        set.poll(Some(Duration::ZERO)).unwrap(); // takes register's wake-up
        let poller = std::thread::spawn(move || set.poll(None).unwrap());
        std::thread::sleep(Duration::from_millis(50)); // in ppoll on the port
        let held = set.state.lock();
        let r = p.reader.clone();
        let closer = std::thread::spawn(move || set.deregister(std::slice::from_ref(&r)));
        std::thread::sleep(Duration::from_millis(50)); // close waits for the lock
        p.arrive(1); // ppoll returns; the poller waits for the lock after close
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        closer.join().unwrap();
        poller.join().unwrap();
        assert_eq!(
            p.got(),
            [0u32; 0],
            "the port was read after it left the set"
        );
    }
}
