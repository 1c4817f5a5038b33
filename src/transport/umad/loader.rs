//! libibumad and libibverbs, loaded at run time: the umad structs read and
//! written, the functions called, and libibverbs' `local_ca_ack_delay`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::errno::{ELIBACC, Errno};
use crate::ibcm_log;
use crate::wire::Mad;

/// `struct umad_reg_attr` (umad.h).
#[repr(C)]
pub(super) struct UmadRegAttr {
    pub(super) mgmt_class: u8,
    pub(super) mgmt_class_version: u8,
    pub(super) flags: u32,
    pub(super) method_mask: [u64; 2],
    pub(super) oui: u32,
    pub(super) rmpp_version: u8,
}

/// `ib_mad_addr_t` (umad.h), 44 bytes; multi-byte fields big-endian.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct IbMadAddr {
    pub(super) qpn: u32,
    pub(super) qkey: u32,
    pub(super) lid: u16,
    pub(super) sl: u8,
    pub(super) path_bits: u8,
    pub(super) grh_present: u8,
    pub(super) gid_index: u8,
    pub(super) hop_limit: u8,
    pub(super) traffic_class: u8,
    pub(super) gid: [u8; 16],
    pub(super) flow_label: u32,
    pub(super) pkey_index: u16,
    pub(super) reserved: [u8; 6],
}

/// `struct ib_user_mad` (umad.h) followed by one MAD: what read/write carry.
#[repr(C)]
pub(super) struct UserMad {
    pub(super) agent_id: u32,
    pub(super) status: u32,
    pub(super) timeout_ms: u32,
    pub(super) retries: u32,
    pub(super) length: u32,
    pub(super) addr: IbMadAddr,
    pub(super) data: Mad,
}

const _: () = {
    assert!(core::mem::size_of::<IbMadAddr>() == 44);
    assert!(core::mem::offset_of!(UserMad, data) == 64);
};

/// The libibumad functions this transport calls.
pub(super) struct Lib {
    pub(super) open_port: unsafe extern "C" fn(*const c_char, c_int) -> c_int,
    pub(super) close_port: unsafe extern "C" fn(c_int) -> c_int,
    /// At least one of the two registrations is there.
    pub(super) register2: Option<unsafe extern "C" fn(c_int, *mut UmadRegAttr, *mut u32) -> c_int>,
    pub(super) register:
        Option<unsafe extern "C" fn(c_int, c_int, c_int, u8, *mut [u64; 2]) -> c_int>,
    pub(super) unregister: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub(super) send: unsafe extern "C" fn(c_int, c_int, *mut c_void, c_int, c_int, c_int) -> c_int,
    pub(super) recv: unsafe extern "C" fn(c_int, *mut c_void, *mut c_int, c_int) -> c_int,
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

pub(super) fn lib() -> Result<&'static Lib, Errno> {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    loaded().map_err(|&(e, why)| {
        if !REPORTED.swap(true, Ordering::Relaxed) {
            ibcm_log!(Error, "{why}");
        }
        e
    })
}

/// libibumad, loaded once; what went wrong is for the caller to say.
pub(super) fn loaded() -> Result<&'static Lib, &'static (Errno, &'static str)> {
    static LIB: OnceLock<Result<Lib, (Errno, &'static str)>> = OnceLock::new();
    LIB.get_or_init(load).as_ref()
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
