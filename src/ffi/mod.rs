//! The C ABI: the only place with `extern "C"`, `#[unsafe(no_mangle)]` and raw
//! pointers (besides the umad transport).
//!
//! Conventions: every function returns 0 or a negative errno, or for pointers
//! `ERR_PTR(-errno)`; a pointer to a cm_id or device is looked up in the
//! library's tables before it is used, so NULL, stale and foreign pointers give
//! `-EINVAL` instead of a crash; a panic never crosses into C; in a child
//! forked from a process using the library, every call fails with
//! `-EOWNERDEAD` (see [`fork`]).

mod api;
mod device;
mod event;
pub(crate) mod fork;
mod path;
mod sa;
pub(crate) mod seqpacket;
pub(crate) mod sys;

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::abi::ib_cm_id;
use crate::cm::id::CmIdPriv;
use crate::errno::{CmResult, EINVAL, EIO, Errno};

/// What a call returns in a forked child of a process that used the library.
const EOWNERDEAD: Errno = Errno(libc::EOWNERDEAD);

/// How an entry point reports an errno: `-errno`, `ERR_PTR(-errno)`, or not
/// at all (`ib_destroy_cm_id`).
trait Failure {
    fn failure(e: Errno) -> Self;
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

/// `0` or `-errno`.
fn ret(result: CmResult) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => e.to_neg(),
    }
}

/// The kernel's `ERR_PTR(-errno)`.
fn err_ptr<T>(e: Errno) -> *mut T {
    e.to_neg() as isize as *mut T
}

/// Runs `f` on the live cm_id `cm_id` points to; `-EINVAL` for NULL or a
/// pointer that is not a live cm_id.
fn with_id(cm_id: *mut ib_cm_id, f: impl FnOnce(&Arc<CmIdPriv>) -> CmResult) -> i32 {
    guard(EIO.to_neg(), || {
        ret(crate::cm::lookup_id(cm_id as usize)
            .ok_or(EINVAL)
            .and_then(|id| f(&id)))
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
/// memory is touched, as the kernel checks before copying.
///
/// # Safety
/// As for [`private_data`].
unsafe fn bounded_private_data<'a>(
    ptr: *const c_void,
    len: u8,
    max: usize,
) -> CmResult<Option<&'a [u8]>> {
    if !ptr.is_null() && usize::from(len) > max {
        return Err(EINVAL);
    }
    // SAFETY: forwarded from the caller.
    Ok(unsafe { private_data(ptr, len) })
}

/// [`with_id`] for the calls that take nothing but private data (RTU, DREQ,
/// DREP): its length is checked against `max` first, as the kernel does.
///
/// # Safety
/// As for [`private_data`].
unsafe fn with_id_and_private_data(
    cm_id: *mut ib_cm_id,
    ptr: *const c_void,
    len: u8,
    max: usize,
    f: impl FnOnce(&Arc<CmIdPriv>, Option<&[u8]>) -> CmResult,
) -> i32 {
    with_id(cm_id, |id| {
        // SAFETY: forwarded from the caller.
        let pd = unsafe { bounded_private_data(ptr, len, max) }?;
        f(id, pd)
    })
}
