//! The libibumad transport: CM MADs on real RDMA ports (rxe, mlx5, …).
//!
//! libibumad (`libibumad.so.3`, rdma-core) is loaded at run time, so the
//! library runs without it until a real device is opened; the dozen functions
//! used are declared here by hand. Each active port gets a file descriptor on
//! `/dev/infiniband/umadN`, an agent registered for the CM class (0x07,
//! version 2, method Send) and a reader thread. The kernel retries nothing
//! (timeout 0, retries 0): retransmission is the engine's, since umad cannot
//! cancel a send.

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use parking_lot::Mutex;

use super::sysfs::SysDevice;
use super::{MadAddr, MadTransport, RecvFn};
use crate::errno::{CmResult, EADDRINUSE, EBUSY, EINVAL, ELIBACC, Errno};
use crate::ibcm_log;
use crate::wire::{MAD_SIZE, Mad};

/// The CM's GSI Q_Key and QP.
const QP1_QKEY: u32 = 0x8001_0000;
const GSI_QPN: u32 = 1;
const MGMT_CLASS_CM: u8 = 0x07;
const CM_CLASS_VERSION: u8 = 2;
const METHOD_SEND: u32 = 0x03;
/// How often a reader thread looks at its stop flag.
const POLL_MS: c_int = 100;

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
    register2: unsafe extern "C" fn(c_int, *mut UmadRegAttr, *mut u32) -> c_int,
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

fn load() -> Result<Lib, Errno> {
    // SAFETY: dlopen with a constant name; no initialisers of ours run.
    let handle = unsafe { libc::dlopen(c"libibumad.so.3".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        ibcm_log!(
            Error,
            "libibumad.so.3 not found: install libibumad3 (rdma-core) to use RDMA devices"
        );
        return Err(ELIBACC);
    }
    // SAFETY: each name is paired with its prototype from umad.h.
    let lib = unsafe {
        (|| {
            let init: unsafe extern "C" fn() -> c_int = symbol(handle, c"umad_init")?;
            init();
            Some(Lib {
                open_port: symbol(handle, c"umad_open_port")?,
                close_port: symbol(handle, c"umad_close_port")?,
                register2: symbol(handle, c"umad_register2")?,
                unregister: symbol(handle, c"umad_unregister")?,
                send: symbol(handle, c"umad_send")?,
                recv: symbol(handle, c"umad_recv")?,
            })
        })()
    };
    lib.ok_or_else(|| {
        ibcm_log!(
            Error,
            "libibumad.so.3 lacks umad_register2: rdma-core too old"
        );
        ELIBACC
    })
}

fn lib() -> Result<&'static Lib, Errno> {
    static LIB: OnceLock<Result<Lib, Errno>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| *e)
}

/// One open port: its umad fd, CM agent and reader thread.
struct UmadPort {
    port_num: u8,
    fd: c_int,
    agent_id: u32,
    reader: Mutex<Option<JoinHandle<()>>>,
}

/// The transport of one RDMA device.
pub struct UmadTransport {
    ports: Vec<UmadPort>,
    stop: Arc<AtomicBool>,
}

/// Whether the kernel's CM module is loaded (it owns the CM class then).
fn kernel_cm_loaded() -> bool {
    std::path::Path::new("/sys/module/ib_cm").exists()
}

impl UmadTransport {
    /// Opens every active port of `dev` and registers the CM class on it.
    pub fn open(dev: &SysDevice, recv: RecvFn) -> CmResult<Arc<Self>> {
        let lib = lib()?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut transport = Self {
            ports: Vec::new(),
            stop: stop.clone(),
        };
        let name = CString::new(dev.name.as_str()).map_err(|_| EINVAL)?;
        for port in dev.ports.iter().filter(|p| p.active) {
            // SAFETY: `name` is NUL-terminated; the port number is plain data.
            let fd = unsafe { (lib.open_port)(name.as_ptr(), c_int::from(port.port_num)) };
            if fd < 0 {
                let e = Errno(-fd);
                ibcm_log!(
                    Error,
                    "cannot open the umad device of {} port {}: {e:?} (is ib_umad loaded, \
                     and /dev/infiniband/umad* readable and writable?)",
                    dev.name,
                    port.port_num
                );
                return Err(e);
            }
            let mut attr = UmadRegAttr {
                mgmt_class: MGMT_CLASS_CM,
                mgmt_class_version: CM_CLASS_VERSION,
                flags: 0,
                method_mask: [1 << METHOD_SEND, 0],
                oui: 0,
                rmpp_version: 0,
            };
            let mut agent_id = 0u32;
            // SAFETY: `attr` and `agent_id` are valid for the call.
            let rc = unsafe { (lib.register2)(fd, &mut attr, &mut agent_id) };
            if rc != 0 {
                // SAFETY: `fd` came from umad_open_port and is closed once.
                unsafe { (lib.close_port)(fd) };
                if kernel_cm_loaded() {
                    ibcm_log!(
                        Error,
                        "the kernel ib_cm module owns CM MADs on {} port {}; unload \
                         ib_cm/rdma_cm to use ib_cm in userspace",
                        dev.name,
                        port.port_num
                    );
                    return Err(EADDRINUSE);
                }
                if rc.abs() == libc::EINVAL {
                    // The kernel refuses a second agent for method Send: another
                    // process runs a CM on this port.
                    ibcm_log!(
                        Error,
                        "another process already receives CM MADs on {} port {}",
                        dev.name,
                        port.port_num
                    );
                    return Err(EBUSY);
                }
                return Err(Errno(rc.abs()));
            }
            transport.ports.push(UmadPort {
                port_num: port.port_num,
                fd,
                agent_id,
                reader: Mutex::new(None),
            });
        }
        let transport = Arc::new(transport);
        for port in &transport.ports {
            let (fd, port_num, stop, recv) = (port.fd, port.port_num, stop.clone(), recv.clone());
            let reader = std::thread::Builder::new()
                .name(format!("ibcm-umad-{}", dev.name))
                .spawn(move || read_loop(lib, fd, port_num, &stop, &recv))
                .map_err(|_| crate::errno::ENOMEM)?;
            *port.reader.lock() = Some(reader);
        }
        Ok(transport)
    }

    fn port(&self, port_num: u8) -> CmResult<&UmadPort> {
        self.ports
            .iter()
            .find(|p| p.port_num == port_num)
            .ok_or(EINVAL)
    }
}

/// Receives MADs on one port until `stop`.
fn read_loop(lib: &Lib, fd: c_int, port_num: u8, stop: &AtomicBool, recv: &RecvFn) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    while !stop.load(Ordering::Acquire) {
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, POLL_MS) };
        if ready <= 0 {
            continue;
        }
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
        let rc = unsafe { (lib.recv)(fd, (&mut buf as *mut UserMad).cast(), &mut len, 0) };
        if rc < 0 || buf.status != 0 || len < MAD_SIZE as c_int {
            continue; // a send completion or a short MAD: nothing for the CM
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
        recv(port_num, reply, Arc::new(buf.data));
    }
}

impl MadTransport for UmadTransport {
    fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let lib = lib()?;
        let port = self.port(port_num)?;
        let mut buf = UserMad {
            agent_id: port.agent_id,
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
        // SAFETY: `buf` is a complete ib_user_mad with one MAD; no retries, so
        // the kernel keeps no reference after the call.
        let rc = unsafe {
            (lib.send)(
                port.fd,
                port.agent_id as c_int,
                (&mut buf as *mut UserMad).cast(),
                MAD_SIZE as c_int,
                0,
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

    fn close(&self) {
        self.stop.store(true, Ordering::Release);
        let Ok(lib) = lib() else { return };
        for port in &self.ports {
            if let Some(reader) = port.reader.lock().take() {
                let _ = reader.join();
            }
            // SAFETY: the fd and agent are ours, and the reader has stopped.
            unsafe {
                (lib.unregister)(port.fd, port.agent_id as c_int);
                (lib.close_port)(port.fd);
            }
        }
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
