//! The kernel's SA API (`<rdma/ib_sa.h>`, Linux 6.17): SA clients and
//! asynchronous PathRecord queries.
//!
//! Declared in the hand-written `include/rdma/ib_sa.h`, not in the header
//! cbindgen makes (hence `cbindgen:ignore` on each item). `make header-check`
//! compiles it and checks that it declares only exported functions; the man
//! pages' check and `c-tests/test_sa_api.c` hold its prototypes to these.

use std::ffi::{c_int, c_uint, c_ulong, c_void};

use super::{Refused, api, guard, live_device, path};
use crate::abi::{ib_device, sa_path_rec};
use crate::cm::path::{Path, REC_TYPE_IB};
use crate::cm::worker::EAGAIN;
use crate::errno::{CmResult, EINVAL, EIO, ENODEV, Errno};
use crate::refusal::{Rule, invalid, null};
use crate::sa::client;
use crate::sa::pathrec::{PathQuery, QueryExtras};
use crate::sa::query::{self, Completion, Timing};

/// `struct ib_sa_client`: 32 bytes the caller owns (a static in SRP and
/// IPoIB); the library never reads or writes them, it knows a client by its
/// address.
///
/// cbindgen:ignore
#[repr(C)]
pub struct ib_sa_client {
    _reserved: [u64; 4],
}

/// `struct ib_sa_query`: opaque; a handle the caller passes back to
/// `ib_sa_cancel_query`.
///
/// cbindgen:ignore
#[repr(C)]
pub struct ib_sa_query {
    _private: [u8; 0],
}

/// The callback of `ib_sa_path_rec_get`.
type PathRecCallback = Option<unsafe extern "C" fn(c_int, *mut sa_path_rec, c_uint, *mut c_void)>;

/// `ib_sa_register_client()`: `client` may start queries. NULL is ignored.
///
/// cbindgen:ignore
#[unsafe(no_mangle)]
pub extern "C" fn ib_sa_register_client(client: *mut ib_sa_client) {
    api("ib_sa_register_client", (), || {
        if client.is_null() {
            return Err(null("client").into());
        }
        client::register(client as usize);
        Ok(())
    })
}

/// `ib_sa_unregister_client()`: returns once every query of `client` is
/// over and its callback returned. NULL or an unregistered client: nothing.
///
/// cbindgen:ignore
#[unsafe(no_mangle)]
pub extern "C" fn ib_sa_unregister_client(client: *mut ib_sa_client) {
    guard((), || client::unregister(client as usize))
}

/// `ib_sa_cancel_query()`: the query's callback gets `-EINTR`, unless it is
/// over already (then nothing happens).
///
/// cbindgen:ignore
#[unsafe(no_mangle)]
pub extern "C" fn ib_sa_cancel_query(id: c_int, query: *mut ib_sa_query) {
    guard((), || {
        query::cancel(crate::cm::Cm::process(), id, query as usize)
    })
}

/// A C pointer handed back to the C callback on the worker thread.
struct Context(*mut c_void);

// SAFETY: the library never dereferences it; it only passes it back to the
// caller's callback, which is the caller's business (as in the kernel).
unsafe impl Send for Context {}

/// `ib_sa_path_rec_get()`: sends a PathRecord query and returns its id
/// (>= 0), with `*sa_query` set; `callback` then runs exactly once on the
/// library's worker thread: (0, the record, 1) or (`-ETIMEDOUT` |
/// `-EINTR` | `-EINVAL` | `-EIO`, NULL, 0).
///
/// # Safety
/// `rec` points to a readable `struct sa_path_rec` and `sa_query` to a
/// writable pointer; `callback` is callable with `context` until it ran.
///
/// cbindgen:ignore
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the kernel's signature
pub unsafe extern "C" fn ib_sa_path_rec_get(
    client: *mut ib_sa_client,
    device: *mut ib_device,
    port_num: u32,
    rec: *mut sa_path_rec,
    comp_mask: u64,
    timeout_ms: c_ulong,
    _gfp_mask: c_uint,
    callback: PathRecCallback,
    context: *mut c_void,
    sa_query: *mut *mut ib_sa_query,
) -> c_int {
    api("ib_sa_path_rec_get", EIO.to_neg(), || {
        let start = || -> Result<i32, Refused> {
            let device = live_device(device)?;
            let on_device = Refused::on_device(&device);
            let start_on_device = || -> CmResult<i32> {
                let callback = callback.ok_or_else(|| null("callback"))?;
                if rec.is_null() {
                    return Err(null("rec"));
                }
                if sa_query.is_null() {
                    return Err(null("sa_query"));
                }
                let port_num = u8::try_from(port_num)
                    .map_err(|_| invalid(Rule::value("port_num", port_num, "is not 1 to 255")))?;
                // SAFETY: non-NULL and readable by the caller's promise.
                let query = path_query(unsafe { &*rec }, u64::from_be(comp_mask))?;
                let client = client::hold(client as usize).ok_or_else(|| {
                    let rule = "is not a registered client";
                    invalid(Rule::hex("client", client as u64, rule))
                })?;
                let context = Context(context);
                let done = Completion::Callback(Box::new(move |outcome| {
                    let context = context;
                    run_callback(callback, outcome, context.0);
                }));
                #[allow(clippy::useless_conversion)] // c_ulong is u32 on 32-bit targets
                let timing = Timing::kernel(u64::from(timeout_ms));
                // The handle is stored before the first send, as the kernel's
                // `*sa_query = &query->sa_query`: the callback may run before
                // this call returns, and clear or free where it is kept.
                // SAFETY: non-NULL and writable by the caller's promise.
                let announce =
                    |_, handle: usize| unsafe { sa_query.write(handle as *mut ib_sa_query) };
                let (id, _) = device
                    .start_announced_path_query(
                        port_num,
                        query,
                        timing,
                        done,
                        Some(client),
                        announce,
                    )
                    .map_err(documented)?;
                Ok(id)
            };
            start_on_device().map_err(on_device)
        };
        start().inspect_err(|_| {
            if !sa_query.is_null() {
                // SAFETY: as above; no query, as the kernel's `*sa_query = NULL`.
                unsafe { sa_query.write(std::ptr::null_mut()) };
            }
        })
    })
}

/// The errno of a query that could not start, among those documented: a
/// failed first send is `-EIO` whatever the transport said (`-ENETDOWN`,
/// `-EOPNOTSUPP` without an SA agent, a umad write's errno).
fn documented(e: Errno) -> Errno {
    if [EINVAL, EAGAIN, ENODEV].contains(&e) {
        e
    } else {
        EIO
    }
}

/// What the C record asks for. Only InfiniBand records: an OPA or RoCE
/// record has no PathRecord of the SA (`-EINVAL`).
fn path_query(rec: &sa_path_rec, comp_mask: u64) -> CmResult<PathQuery> {
    let path: Path = path::from_c(rec);
    if path.rec_type != REC_TYPE_IB {
        let rule = "is not SA_PATH_REC_TYPE_IB: the SA has no other PathRecord";
        return Err(invalid(Rule::value("rec_type", path.rec_type, rule)));
    }
    // SAFETY: every bit pattern of the plain-data union is a valid
    // `sa_path_rec_ib` (integers only).
    let raw_traffic = unsafe { rec.link.ib.raw_traffic };
    Ok(PathQuery {
        rec: path,
        extras: QueryExtras {
            raw_traffic,
            qos_class: u16::from_be(rec.qos_class),
            mtu_selector: rec.mtu_selector,
            rate_selector: rec.rate_selector,
            packet_life_time_selector: rec.packet_life_time_selector,
            preference: rec.preference,
        },
        comp_mask,
    })
}

/// Calls the C callback with a query's outcome; the record lives on this
/// stack for the call, as the kernel's does.
fn run_callback(
    callback: unsafe extern "C" fn(c_int, *mut sa_path_rec, c_uint, *mut c_void),
    outcome: CmResult<Path>,
    context: *mut c_void,
) {
    match outcome {
        Ok(found) => {
            let mut resp = path::to_c(&found);
            // SAFETY: the caller's callback, with the context it gave.
            unsafe { callback(0, &mut resp, 1, context) };
        }
        // SAFETY: as above; no record with an error, as the kernel.
        Err(e) => unsafe { callback(e.to_neg(), std::ptr::null_mut(), 0, context) },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::abi::CIntPathRecType;
    use crate::cm::path::REC_TYPE_ROCE_V2;

    /// `SA_PATH_REC_TYPE_OPA`.
    const REC_TYPE_OPA: i32 = 3;

    static CALLS: AtomicU32 = AtomicU32::new(0);
    static STATUS: AtomicI32 = AtomicI32::new(1);

    unsafe extern "C" fn record(status: c_int, _: *mut sa_path_rec, _: c_uint, _: *mut c_void) {
        STATUS.store(status, Ordering::SeqCst);
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    /// `ib_sa_path_rec_get` on port `port` of `device` with `rec_type`.
    fn get(
        client: *mut ib_sa_client,
        device: *mut ib_device,
        port: u32,
        rec_type: i32,
        callback: PathRecCallback,
        out: *mut *mut ib_sa_query,
    ) -> c_int {
        let mut rec = path::to_c(&Path::default());
        rec.rec_type = CIntPathRecType(rec_type);
        // SAFETY: `rec` is a valid record; `out` is NULL or writable.
        unsafe {
            ib_sa_path_rec_get(
                client,
                device,
                port,
                &mut rec,
                0,
                1000,
                0,
                callback,
                std::ptr::null_mut(),
                out,
            )
        }
    }

    #[test]
    fn bad_arguments_get_the_documented_errno_and_no_callback() {
        let _serial = crate::sa::tests::SA_TESTS.lock();
        let device = crate::cm::open_device(&crate::cm::tests::loop_name()).unwrap();
        let dev = std::sync::Arc::as_ptr(&device) as *mut ib_device;
        let mut client = ib_sa_client { _reserved: [0; 4] };
        let mut stranger = ib_sa_client { _reserved: [0; 4] };
        let (c, s): (*mut ib_sa_client, *mut ib_sa_client) = (&mut client, &mut stranger);
        ib_sa_register_client(c);
        let mut q = std::ptr::null_mut();
        let cb: PathRecCallback = Some(record);
        let einval = -libc::EINVAL;
        CALLS.store(0, Ordering::SeqCst);
        assert_eq!(
            get(std::ptr::null_mut(), dev, 1, REC_TYPE_IB, cb, &mut q),
            einval
        );
        assert_eq!(get(s, dev, 1, REC_TYPE_IB, cb, &mut q), einval);
        assert_eq!(
            get(c, std::ptr::null_mut(), 1, REC_TYPE_IB, cb, &mut q),
            einval
        );
        assert_eq!(get(c, dev, 1, REC_TYPE_IB, None, &mut q), einval);
        assert_eq!(
            get(c, dev, 1, REC_TYPE_IB, cb, std::ptr::null_mut()),
            einval
        );
        assert_eq!(get(c, dev, 2, REC_TYPE_IB, cb, &mut q), einval);
        assert_eq!(get(c, dev, 257, REC_TYPE_IB, cb, &mut q), einval);
        assert_eq!(get(c, dev, 1, REC_TYPE_ROCE_V2, cb, &mut q), einval);
        assert_eq!(get(c, dev, 1, REC_TYPE_OPA, cb, &mut q), einval);
        assert!(q.is_null());

        // A good one, cancelled through the ABI: -EINTR, once.
        let id = get(c, dev, 1, REC_TYPE_IB, cb, &mut q);
        assert!(id >= 0 && !q.is_null());
        ib_sa_cancel_query(id, q);
        ib_sa_cancel_query(id, q);
        let until = Instant::now() + Duration::from_secs(10);
        while CALLS.load(Ordering::SeqCst) == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        ib_sa_unregister_client(c);
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        assert_eq!(STATUS.load(Ordering::SeqCst), -libc::EINTR);
        assert_eq!(get(c, dev, 1, REC_TYPE_IB, cb, &mut q), einval);
        crate::cm::close_device(&device).unwrap();
    }

    /// A caller's state as IPoIB's `struct ipoib_path`: the query's handle,
    /// which its callback clears (`path->query = NULL`) to say "no query in
    /// flight"; and a way to tell the fake SA the callback ran.
    struct InFlight {
        query: *mut ib_sa_query,
        ran: std::sync::mpsc::SyncSender<()>,
    }

    unsafe extern "C" fn clear_handle(_: c_int, _: *mut sa_path_rec, _: c_uint, ctx: *mut c_void) {
        // SAFETY: the test's `InFlight`, alive until the test ends.
        let caller = unsafe { &mut *ctx.cast::<InFlight>() };
        caller.query = std::ptr::null_mut();
        let _ = caller.ran.send(());
    }

    #[test]
    fn the_handle_is_stored_before_an_early_callback_clears_it() {
        use crate::transport::loopback::{LoopIdentity, LoopTransport};
        use crate::transport::{MadTransport, RecvFn};
        use std::sync::{Arc, Mutex, OnceLock};

        let _serial = crate::sa::tests::SA_TESTS.lock();
        let (ran, ran_rx) = std::sync::mpsc::sync_channel(1);
        let ran_rx = Mutex::new(ran_rx);
        // An SA that answers at once, and is slow to return from the send
        // (as a preempted caller would be): the callback runs meanwhile.
        let sa: Arc<OnceLock<Arc<LoopTransport>>> = Arc::default();
        let inner = sa.clone();
        let recv: RecvFn = Arc::new(move |_port, from, mad| {
            let mut resp = *mad;
            resp[3] = 0x81;
            if let Some(t) = inner.get() {
                let _ = t.send(1, &from, &resp);
            }
            let _ = ran_rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
        });
        let me = LoopIdentity::from_lid(LoopIdentity::SM_LID).unwrap();
        let transport = LoopTransport::open(me, recv).unwrap();
        let _ = sa.set(transport.clone());

        let device = crate::cm::open_device(&crate::cm::tests::loop_name()).unwrap();
        let dev = std::sync::Arc::as_ptr(&device) as *mut ib_device;
        let mut client = ib_sa_client { _reserved: [0; 4] };
        let c: *mut ib_sa_client = &mut client;
        ib_sa_register_client(c);
        let mut caller = InFlight {
            query: std::ptr::null_mut(),
            ran,
        };
        let mut rec = path::to_c(&Path::default());
        rec.rec_type = CIntPathRecType(REC_TYPE_IB);
        // SAFETY: valid record, callback and handle slot, alive past the call.
        let id = unsafe {
            ib_sa_path_rec_get(
                c,
                dev,
                1,
                &mut rec,
                0,
                10_000,
                0,
                Some(clear_handle),
                (&mut caller as *mut InFlight).cast(),
                &mut caller.query,
            )
        };
        ib_sa_unregister_client(c);
        transport.close();
        crate::cm::close_device(&device).unwrap();
        assert!(id >= 0, "{id}");
        assert!(
            caller.query.is_null(),
            "the callback cleared its handle, then ib_sa_path_rec_get wrote it back: {:?}",
            caller.query
        );
    }

    #[test]
    #[ignore = "known gap: the callback's record has selectors 'exactly', QoS class 0 and preference 0 whatever the SA answered"]
    fn the_callbacks_record_has_what_the_sa_answered() {
        // An SA answer with a preference, a QoS class and selectors of its own.
        let mut mad = crate::sa::PathQuery::between([0; 16], [0; 16], 0xffff).encode(1);
        mad[3] = 0x81;
        let r = &mut mad[56..];
        r[52] = 0xab; // QoS class 0xabc, SL 5
        r[53] = 0xc5;
        r[54] = (1 << 6) | 4; // MTU greater than 2048
        r[57] = 7; // preference
        let got = path::to_c(&crate::sa::pathrec::decode_response(&mad).unwrap());
        assert_eq!(got.sl, 5);
        assert_eq!((got.mtu_selector, got.mtu), (1, 4), "mtu selector");
        assert_eq!(u16::from_be(got.qos_class), 0xabc, "qos class");
        assert_eq!(got.preference, 7, "preference");
    }

    #[test]
    fn a_failed_first_send_is_one_of_the_documented_errnos() {
        let _serial = crate::sa::tests::SA_TESTS.lock();
        let device = crate::cm::open_device(&crate::cm::tests::loop_name()).unwrap();
        let dev = std::sync::Arc::as_ptr(&device) as *mut ib_device;
        let mut client = ib_sa_client { _reserved: [0; 4] };
        let c: *mut ib_sa_client = &mut client;
        ib_sa_register_client(c);
        // The port's link is down as the query leaves.
        device.as_loop().unwrap().fail_next(0x0035, 1);
        let mut q = std::ptr::null_mut();
        CALLS.store(0, Ordering::SeqCst);
        let rc = get(c, dev, 1, REC_TYPE_IB, Some(record), &mut q);
        ib_sa_unregister_client(c);
        crate::cm::close_device(&device).unwrap();
        let documented = [-libc::EINVAL, -libc::EAGAIN, -libc::ENODEV, -libc::EIO];
        assert!(documented.contains(&rc), "ib_sa_path_rec_get returned {rc}");
        assert_eq!(CALLS.load(Ordering::SeqCst), 0);
    }
}
