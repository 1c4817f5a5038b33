//! The userspace glue: devices, GIDs, paths and fault injection (`ibcm_*`).

use std::ffi::{CStr, c_char, c_int, c_uint};

use super::{Refused, api, err_ptr, live_device, path};
use crate::abi::{
    ib_device, ib_gid, ibcm_counters, ibcm_event_mode, ibcm_path_cache_counters, ibcm_stats,
    sa_path_rec,
};
use crate::errno::{EIO, EOPNOTSUPP, Errno};
use crate::refusal::{Rule, invalid, null, refuse};
use crate::{cm, errno::CmResult};

/// Runs `f` on the open device `device` points to: entry point `name`
/// returning what `f` gives (0, a count, an fd), or `-errno`.
fn with_device<T: Returned>(
    name: &'static str,
    device: *mut ib_device,
    f: impl FnOnce(&std::sync::Arc<cm::device::Device>) -> CmResult<T>,
) -> c_int {
    api(name, EIO.to_neg(), || {
        let device = live_device(device)?;
        let returned = f(&device).map_err(Refused::on_device(&device))?;
        Ok(returned.to_c())
    })
}

/// What a device call returns to C on success.
trait Returned {
    fn to_c(self) -> c_int;
}

impl Returned for () {
    fn to_c(self) -> c_int {
        0
    }
}

/// A count of events, at most the `c_int` the caller gave.
impl Returned for usize {
    fn to_c(self) -> c_int {
        c_int::try_from(self).unwrap_or(c_int::MAX)
    }
}

/// A file descriptor.
impl Returned for c_int {
    fn to_c(self) -> c_int {
        self
    }
}

/// `EOPNOTSUPP` for fault injection on a device of a real fabric.
fn not_loop() -> Errno {
    refuse(
        EOPNOTSUPP,
        Rule::Text("not a device of the in-process fabric (loopN)"),
    )
}

/// Opens a device: `loop0`, `loop1`, … are devices of the in-process fabric.
/// Returns `ERR_PTR(-ENODEV)` for an unknown name, `ERR_PTR(-EBUSY)` if it is
/// open already, `ERR_PTR(-EINVAL)` for NULL.
///
/// # Safety
/// A non-NULL `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_open_device(name: *const c_char) -> *mut ib_device {
    api("ibcm_open_device", err_ptr(EIO), || {
        if name.is_null() {
            return Err(null("name").into());
        }
        // SAFETY: non-NULL and NUL-terminated by the caller's promise.
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| invalid(Rule::Text("name is not UTF-8")))?;
        // From the first device on, a forked child must not use the library.
        crate::os::fork::register()?;
        let device = cm::open_device(name).map_err(|e| Refused {
            errno: e,
            about: super::About::Name(name.to_owned()),
        })?;
        Ok(std::sync::Arc::as_ptr(&device) as *mut ib_device)
    })
}

/// Closes a device; `-EBUSY` while cm_ids of it remain (when some do, it
/// first lets the worker finish the work queued before the call, 2 s at
/// most, unless called from a handler).
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_close_device(device: *mut ib_device) -> c_int {
    with_device("ibcm_close_device", device, cm::close_device)
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
    with_device("ibcm_query_gid", device, |d| {
        let port = d.port(port_num)?;
        let index = u8::try_from(index)
            .map_err(|_| invalid(Rule::value("index", index, "is not 0 to 255")))?;
        let found = port.gid(index).ok_or_else(|| {
            let rule = "is an empty slot of the port's GID table";
            invalid(Rule::value("index", index, rule))
        })?;
        if gid.is_null() {
            return Err(null("gid"));
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
    with_device("ibcm_init_path", device, |d| {
        if dgid.is_null() {
            return Err(null("dgid"));
        }
        if path.is_null() {
            return Err(null("path"));
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
    with_device("ibcm_loop_drop", device, |d| {
        d.as_loop().ok_or_else(not_loop)?;
        d.drop_next(attr_id, count)
    })
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
    with_device("ibcm_get_counters", device, |d| {
        if out.is_null() {
            return Err(null("out"));
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
    with_device("ibcm_loop_set_loss", device, |d| {
        d.as_loop()
            .ok_or_else(not_loop)?
            .set_loss(drop_percent, dup_percent)
    })
}

/// What the library holds right now: cm_ids, armed timers, queued work.
///
/// # Safety
/// A non-NULL `stats` points to writable memory for a `struct ibcm_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_get_stats(stats: *mut ibcm_stats) -> c_int {
    api("ibcm_get_stats", EIO.to_neg(), || {
        if stats.is_null() {
            return Err(null("stats").into());
        }
        let (queued, timers) = cm::pending();
        let s = ibcm_stats {
            cm_ids: cm::id_count() as u64,
            timers: timers as u64,
            queued: queued as u64,
        };
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { stats.write(s) };
        Ok(0)
    })
}

/// What the process's path cache (the one `ibcm_init_path` asks through on
/// InfiniBand ports) has done since the process started, and how many
/// answers it holds.
///
/// # Safety
/// A non-NULL `counters` points to writable memory for a
/// `struct ibcm_path_cache_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibcm_get_path_cache_counters(
    counters: *mut ibcm_path_cache_counters,
) -> c_int {
    api("ibcm_get_path_cache_counters", EIO.to_neg(), || {
        if counters.is_null() {
            return Err(null("counters").into());
        }
        let cache = crate::cm::Cm::process().path_cache();
        let c = cache.counters();
        let out = ibcm_path_cache_counters {
            hits: c.hits,
            misses: c.misses,
            coalesced: c.coalesced,
            invalidations: c.invalidations,
            expirations: c.expirations,
            evictions: c.evictions,
            busy_backoffs: c.busy_backoffs,
            entries: cache.len() as u64,
        };
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { counters.write(out) };
        Ok(0)
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
    with_device("ibcm_set_event_mode", device, |d| {
        let mode = match mode {
            0 => ibcm_event_mode::IBCM_EVENTS_WORKER,
            1 => ibcm_event_mode::IBCM_EVENTS_FD,
            _ => {
                let rule = "is not IBCM_EVENTS_WORKER (0) or IBCM_EVENTS_FD (1)";
                return Err(invalid(Rule::value("mode", mode, rule)));
            }
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
    with_device("ibcm_get_event_fd", device, |d| d.events.fd())
}

/// Runs up to `max` pending handlers of `device` (in `IBCM_EVENTS_FD` mode)
/// on the calling thread; returns how many events it took from the queue
/// (0: none pending), or `-EINVAL` (bad device, worker mode, `max < 1`),
/// `-EDEADLK` when called from inside a handler or an SA callback. Calls
/// from two threads at once take turns.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_process_events(device: *mut ib_device, max: c_int) -> c_int {
    // At most `max` events, a c_int.
    with_device("ibcm_process_events", device, |d| {
        cm::process_device_events(d, max)
    })
}
