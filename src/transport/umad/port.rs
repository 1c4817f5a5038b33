//! Opening a port: its umad fd, the CM agent and the SA client registered on
//! it, and what a refused registration means.

use std::ffi::{CString, c_int};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::loader::{Lib, UmadRegAttr};
use super::{UmadPort, last_errno};
use crate::errno::{CmResult, EADDRINUSE, EBUSY, EINVAL, Errno};
use crate::ibcm_log;
use crate::wire::{CM_CLASS_VERSION, MGMT_CLASS_CM};

/// The CM's one method, as umad_reg_attr's method mask counts it.
const METHOD_SEND: u32 = crate::wire::METHOD_SEND as u32;

/// Whether this process may open the umad file of `dev`'s `port_num`: found
/// through sysfs (`/sys/class/infiniband_mad/umad*/{ibdev,port}`) and opened
/// for reading and writing, then closed. Asked before libibumad is touched,
/// which itself warns on stderr where ib_umad is not loaded.
pub(super) fn may_open_umad(dev: &str, port_num: u8) -> bool {
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
pub(super) struct PortHandle {
    pub(super) lib: &'static Lib,
    pub(super) port_num: u8,
    pub(super) fd: c_int,
    pub(super) agent_id: Option<u32>,
    /// The SA client agent (class 0x03) of an InfiniBand port: path queries.
    pub(super) sa_agent_id: Option<u32>,
    /// Not a kernel fd but umad2sim's (ibsim's preload), whose poll sees
    /// only its own fds.
    pub(super) simulated: bool,
    /// A kernel fd that does not block a read (libibumad opens it so): the
    /// reader takes a burst after each poll.
    pub(super) drains: bool,
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

/// Whether the kernel's CM module is loaded (it owns the CM class then).
fn kernel_cm_loaded() -> bool {
    std::path::Path::new("/sys/module/ib_cm").exists()
}

/// Opens the umad fd of `port_num` of `name`, no agent on it yet.
pub(super) fn open_handle(lib: &'static Lib, name: &CString, port_num: u8) -> CmResult<PortHandle> {
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
///
/// [`worker_poll`]: super::worker_poll
pub(super) fn open_port(
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
pub(super) struct AgentClass {
    pub(super) mgmt_class: u8,
    pub(super) version: u8,
    pub(super) method_mask: [u64; 2],
}

/// Registers an agent for `class` on `fd`: with
/// `umad_register2`, or `umad_register` where that is missing or refused as
/// unknown (umad2sim, the ibsim preload, implements only the first ioctl).
/// On a real port the kernel refuses a taken class with EINVAL to both, so
/// the error returned is still the one that tells who holds it.
pub(super) fn register(lib: &Lib, fd: c_int, class: &AgentClass) -> Result<u32, Errno> {
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
