//! The C ABI: the only place with `extern "C"`, `#[unsafe(no_mangle)]` and raw
//! pointers (besides the umad transport).
//!
//! Conventions: every function returns 0 or a negative errno, or for pointers
//! `ERR_PTR(-errno)`; a pointer to a cm_id or device is looked up in the
//! library's tables before it is used, so NULL, stale and foreign pointers give
//! `-EINVAL` instead of a crash; a panic never crosses into C; in a child
//! forked from a process using the library, every call fails with
//! `-EOWNERDEAD` (see `os/fork.rs`). A refused call says why in one line at
//! `info` (see `ffi/api.rs` and [`crate::refusal`]).

mod api;
mod device;
mod event;
mod path;
mod sa;
#[cfg(test)]
mod tests;

use crate::os::fork;
use std::ffi::c_void;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::abi::ib_cm_id;
use crate::cm::device::Device;
use crate::cm::id::CmIdPriv;
use crate::errno::{CmResult, EIO, Errno};
use crate::log::Level;
use crate::refusal::{self, Neg, Rule};

// What a call returns in a forked child of a process that used the library.
use crate::errno::EOWNERDEAD;

/// How an entry point reports an errno: `-errno`, `ERR_PTR(-errno)`, or not
/// at all (`ib_destroy_cm_id`: the call is ignored).
trait Failure {
    fn failure(e: Errno) -> Self;

    /// What the caller gets, as its log line says it.
    fn returned(e: Errno) -> impl fmt::Display {
        Neg(e)
    }
}

impl Failure for i32 {
    fn failure(e: Errno) -> Self {
        e.to_neg()
    }
}

impl<T> Failure for *mut T {
    fn failure(e: Errno) -> Self {
        err_ptr(e)
    }
}

impl Failure for () {
    fn failure(_: Errno) -> Self {}

    fn returned(_: Errno) -> impl fmt::Display {
        "ignored"
    }
}

/// Runs `f`, turning a panic into `on_panic` (a panic must not unwind into C).
/// In a forked child (see [`fork`]) `f` does not run: the call fails with
/// `-EOWNERDEAD` before it takes any lock.
fn guard<T: Failure>(on_panic: T, f: impl FnOnce() -> T) -> T {
    if fork::in_forked_child() {
        return T::failure(EOWNERDEAD);
    }
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// What a refused call was called on, for its log line.
enum About {
    Nothing,
    Id(Arc<CmIdPriv>),
    Device(Arc<Device>),
    /// A device by the name it was to be opened by.
    Name(String),
}

impl fmt::Display for About {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            About::Nothing => Ok(()),
            About::Id(id) => write!(f, "{} on {}: ", crate::cm::CommIds(id), id.device.name),
            About::Device(d) => write!(f, "{}: ", d.name),
            About::Name(name) => write!(f, "{name:?}: "),
        }
    }
}

/// A refused call: the errno it returns and what it was called on.
struct Refused {
    errno: Errno,
    about: About,
}

impl From<Errno> for Refused {
    fn from(errno: Errno) -> Self {
        Self {
            errno,
            about: About::Nothing,
        }
    }
}

impl Refused {
    fn on_id(id: &Arc<CmIdPriv>) -> impl FnOnce(Errno) -> Self {
        let id = id.clone();
        move |errno| Self {
            errno,
            about: About::Id(id),
        }
    }

    fn on_device(device: &Arc<Device>) -> impl FnOnce(Errno) -> Self {
        let device = device.clone();
        move |errno| Self {
            errno,
            about: About::Device(device),
        }
    }
}

/// Runs entry point `name` under [`guard`] (a panic gives `on_panic`); a
/// refused call returns its errno as `T` says, and logs one line, at
/// `info`, rate limited per function (`log::write_limited`):
/// `<name>: [<id or device>: ]<rule> (<returned>)`, the rule as the check
/// that refused the call recorded it ([`refusal`]), or `failed` from a check
/// that named none (an errno from below: a send, the system).
fn api<T: Failure>(name: &'static str, on_panic: T, f: impl FnOnce() -> Result<T, Refused>) -> T {
    guard(on_panic, || {
        refusal::begin();
        f().unwrap_or_else(|r| {
            log_refusal::<T>(name, &r);
            T::failure(r.errno)
        })
    })
}

fn log_refusal<T: Failure>(name: &'static str, r: &Refused) {
    if !crate::log::enabled(Level::Info) {
        return;
    }
    let (about, returned) = (&r.about, T::returned(r.errno));
    match refusal::take(r.errno) {
        Some(rule) => crate::log::write_limited(
            name,
            Level::Info,
            format_args!("{name}: {about}{rule} ({returned})"),
        ),
        None => crate::log::write_limited(
            name,
            Level::Info,
            format_args!("{name}: {about}failed ({returned})"),
        ),
    }
}

/// The kernel's `ERR_PTR(-errno)`.
fn err_ptr<T>(e: Errno) -> *mut T {
    e.to_neg() as isize as *mut T
}

/// The live cm_id `cm_id` points to; `-EINVAL` for NULL or a pointer that is
/// not a live cm_id.
fn live_id(cm_id: *mut ib_cm_id) -> CmResult<Arc<CmIdPriv>> {
    if cm_id.is_null() {
        return Err(refusal::null("cm_id"));
    }
    crate::cm::lookup_id(cm_id as usize).ok_or_else(|| {
        not_live(
            "cm_id",
            cm_id as usize,
            "is not a live cm_id (never one, or destroyed)",
        )
    })
}

/// The open device `device` points to; `-EINVAL` for NULL or a pointer that
/// is not an open device.
fn live_device<T>(device: *mut T) -> CmResult<Arc<Device>> {
    if device.is_null() {
        return Err(refusal::null("device"));
    }
    crate::cm::lookup_device(device as usize).ok_or_else(|| {
        not_live(
            "device",
            device as usize,
            "is not an open device (never one, or closed)",
        )
    })
}

/// `EINVAL` for a pointer the library's tables do not know.
fn not_live(field: &'static str, addr: usize, rule: &'static str) -> Errno {
    refusal::invalid(Rule::hex(field, addr as u64, rule))
}

/// Runs `f` on the live cm_id `cm_id` points to: entry point `name`
/// returning 0 or `-errno`.
fn with_id(
    name: &'static str,
    cm_id: *mut ib_cm_id,
    f: impl FnOnce(&Arc<CmIdPriv>) -> CmResult,
) -> i32 {
    api(name, EIO.to_neg(), || {
        let id = live_id(cm_id)?;
        f(&id).map_err(Refused::on_id(&id))?;
        Ok(0)
    })
}

/// Private data as C passes it: `None` for NULL (whatever the length), else
/// `len` bytes. Callers check `len` against the message's limit first, so no
/// byte past what the kernel would read is touched.
///
/// # Safety
/// A non-NULL `ptr` must point to `len` readable bytes that stay valid and
/// unchanged for `'a`.
unsafe fn private_data<'a>(ptr: *const c_void, len: u8) -> Option<&'a [u8]> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-NULL, and the caller guarantees `len` readable bytes.
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), usize::from(len)) })
}

/// `private_data` that must not exceed `max` bytes: `-EINVAL` before the
/// memory is touched, as the kernel checks before copying. `field` names the
/// length in the refusal's log line (`private_data_len`, `ari_length`).
///
/// # Safety
/// As for [`private_data`].
unsafe fn bounded_private_data<'a>(
    ptr: *const c_void,
    len: u8,
    max: usize,
    field: &'static str,
) -> CmResult<Option<&'a [u8]>> {
    if !ptr.is_null() && usize::from(len) > max {
        return Err(refusal::above(field, len.into(), max));
    }
    // SAFETY: forwarded from the caller.
    Ok(unsafe { private_data(ptr, len) })
}

/// [`with_id`] for the calls that take nothing but private data (RTU, DREQ,
/// DREP, MRA): its length is checked against `max` first, as the kernel does.
///
/// # Safety
/// As for [`private_data`].
unsafe fn with_id_and_private_data(
    name: &'static str,
    cm_id: *mut ib_cm_id,
    ptr: *const c_void,
    len: u8,
    max: usize,
    f: impl FnOnce(&Arc<CmIdPriv>, Option<&[u8]>) -> CmResult,
) -> i32 {
    with_id(name, cm_id, |id| {
        // SAFETY: forwarded from the caller.
        let pd = unsafe { bounded_private_data(ptr, len, max, "private_data_len") }?;
        f(id, pd)
    })
}
