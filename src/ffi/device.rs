//! The userspace glue: devices, GIDs, paths and fault injection (`ibcm_*`).

use std::ffi::{CStr, c_char, c_int, c_uint};

use super::{err_ptr, guard, path, ret};
use crate::abi::{ib_device, ib_gid, ibcm_counters, ibcm_event_mode, ibcm_stats, sa_path_rec};
use crate::errno::{EINVAL, EIO, EOPNOTSUPP};
use crate::{cm, errno::CmResult};

fn with_device(
    device: *mut ib_device,
    f: impl FnOnce(&std::sync::Arc<cm::device::Device>) -> CmResult,
) -> c_int {
    guard(EIO.to_neg(), || {
        ret(cm::lookup_device(device as usize)
            .ok_or(EINVAL)
            .and_then(|d| f(&d)))
    })
}

/// Opens a device: `loop0`, `loop1`, … are devices of the in-process fabric.
/// Returns `ERR_PTR(-ENODEV)` for an unknown name, `ERR_PTR(-EBUSY)` if it is
/// open already, `ERR_PTR(-EINVAL)` for NULL.
///
/// # Safety
/// A non-NULL `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_open_device(name: *const c_char) -> *mut ib_device {
    guard(err_ptr(EIO), || {
        if name.is_null() {
            return err_ptr(EINVAL);
        }
        // SAFETY: non-NULL and NUL-terminated by the caller's promise.
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
            return err_ptr(EINVAL);
        };
        // From the first device on, a forked child must not use the library.
        if let Err(e) = super::fork::register() {
            return err_ptr(e);
        }
        match cm::open_device(name) {
            Ok(device) => std::sync::Arc::as_ptr(&device) as *mut ib_device,
            Err(e) => err_ptr(e),
        }
    })
}

/// Closes a device; `-EBUSY` while cm_ids of it remain (when some do, it
/// first lets the worker finish the work queued before the call, 2 s at
/// most, unless called from a handler).
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_close_device(device: *mut ib_device) -> c_int {
    with_device(device, cm::close_device)
}

/// The GID at table index `index` of port `port_num` (`-EINVAL` for an empty
/// slot; loop ports have only index 0).
///
/// # Safety
/// A non-NULL `gid` points to writable memory for a `union ib_gid`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_query_gid(
    device: *mut ib_device,
    port_num: u8,
    index: c_int,
    gid: *mut ib_gid,
) -> c_int {
    with_device(device, |d| {
        let port = d.port(port_num)?;
        let index = u8::try_from(index).map_err(|_| EINVAL)?;
        let found = port.gid(index).ok_or(EINVAL)?;
        if gid.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { gid.write(ib_gid { raw: found }) };
        Ok(())
    })
}

/// Fills `path` with a path from port `port_num` to `dgid`, usable as
/// `ib_cm_req_param.primary_path`.
///
/// # Safety
/// Non-NULL pointers point to a readable GID and a writable `sa_path_rec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_init_path(
    device: *mut ib_device,
    port_num: u8,
    dgid: *const ib_gid,
    path: *mut sa_path_rec,
) -> c_int {
    with_device(device, |d| {
        if dgid.is_null() || path.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: non-NULL and readable; any bit pattern is a valid GID.
        let dgid = unsafe { (*dgid).raw };
        let p = d.init_path(port_num, &dgid)?;
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { path.write(path::to_c(&p)) };
        Ok(())
    })
}

/// Fault injection on the in-process fabric: drops the next `count` MADs
/// with attribute `attr_id` (host order, e.g. 0x0015 for DREQ) that `device`
/// sends; 0 cancels. `-EOPNOTSUPP` on other devices.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_loop_drop(device: *mut ib_device, attr_id: u16, count: c_uint) -> c_int {
    with_device(device, |d| d.drop_next(attr_id, count))
}

/// Copies the CM counters of port `port_num` into `*out`.
///
/// # Safety
/// A non-NULL `out` points to writable memory for a `struct ibcm_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_get_counters(
    device: *mut ib_device,
    port_num: u8,
    out: *mut ibcm_counters,
) -> c_int {
    with_device(device, |d| {
        if out.is_null() {
            return Err(EINVAL);
        }
        let s = d.counters(port_num)?.snapshot();
        let counters = ibcm_counters {
            cm_tx_msgs: s.tx_msgs,
            cm_tx_retries: s.tx_retries,
            cm_rx_msgs: s.rx_msgs,
            cm_rx_duplicates: s.rx_duplicates,
            rx_malformed: s.rx_malformed,
            rx_unmatched: s.rx_unmatched,
            rx_listen_overflows: s.rx_listen_overflows,
            rx_dropped: s.rx_dropped,
        };
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { out.write(counters) };
        Ok(())
    })
}

/// Fault injection on the in-process fabric: drops `drop_percent` % and
/// duplicates `dup_percent` % of the MADs `device` sends, at random (0, 0
/// stops). `-EINVAL` above 100, `-EOPNOTSUPP` on other devices.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_loop_set_loss(
    device: *mut ib_device,
    drop_percent: c_uint,
    dup_percent: c_uint,
) -> c_int {
    with_device(device, |d| {
        d.as_loop()
            .ok_or(EOPNOTSUPP)?
            .set_loss(drop_percent, dup_percent)
    })
}

/// What the library holds right now: cm_ids, armed timers, queued work.
///
/// # Safety
/// A non-NULL `stats` points to writable memory for a `struct ibcm_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_get_stats(stats: *mut ibcm_stats) -> c_int {
    guard(EIO.to_neg(), || {
        if stats.is_null() {
            return EINVAL.to_neg();
        }
        let (queued, timers) = cm::pending();
        let s = ibcm_stats {
            cm_ids: cm::id_count() as u64,
            timers: timers as u64,
            queued: queued as u64,
        };
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { stats.write(s) };
        0
    })
}

/// Chooses where the handlers of `device`'s cm_ids run: `IBCM_EVENTS_WORKER`
/// (the default: the library's worker thread, as in the kernel) or
/// `IBCM_EVENTS_FD` (the caller's thread, in `ibcm_process_events`, with
/// `ibcm_get_event_fd` readable while events are pending). `-EBUSY` while
/// cm_ids of the device exist; `-EINVAL` for another mode; `-EMFILE`,
/// `-ENFILE` or `-ENOMEM` if the event fd cannot be made.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_set_event_mode(device: *mut ib_device, mode: c_int) -> c_int {
    with_device(device, |d| {
        let mode = match mode {
            0 => ibcm_event_mode::IBCM_EVENTS_WORKER,
            1 => ibcm_event_mode::IBCM_EVENTS_FD,
            _ => return Err(EINVAL),
        };
        cm::set_event_mode(d, mode)
    })
}

/// The event fd of a device in `IBCM_EVENTS_FD` mode: readable (`POLLIN`,
/// `EPOLLIN`, level-triggered) while events are pending. Owned by the
/// library, closed by `ibcm_close_device`; do not read, write or close it.
/// `-EINVAL` for a device in worker mode.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_get_event_fd(device: *mut ib_device) -> c_int {
    guard(EIO.to_neg(), || {
        match cm::lookup_device(device as usize).ok_or(EINVAL) {
            Ok(d) => d.events.fd().unwrap_or_else(|e| e.to_neg()),
            Err(e) => e.to_neg(),
        }
    })
}

/// Runs up to `max` pending handlers of `device` (in `IBCM_EVENTS_FD` mode)
/// on the calling thread; returns how many events it took from the queue
/// (0: none pending), or `-EINVAL` (bad device, worker mode, `max < 1`),
/// `-EDEADLK` when called from inside a handler or an SA callback. Calls
/// from two threads at once take turns.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_process_events(device: *mut ib_device, max: c_int) -> c_int {
    guard(EIO.to_neg(), || {
        let ran = cm::lookup_device(device as usize)
            .ok_or(EINVAL)
            .and_then(|d| cm::process_device_events(&d, max));
        match ran {
            // At most `max`, a c_int.
            Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
            Err(e) => e.to_neg(),
        }
    })
}
