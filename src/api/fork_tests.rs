//! The Rust API in a child forked from a process that opened a device:
//! as through the C ABI (`-EOWNERDEAD`, src/os/fork.rs), every call fails
//! with `EOWNERDEAD` before it takes a lock, a wait ends at once, and a
//! drop does nothing: the worker and every lock holder are the parent's.

use crate::os::fork::exit_code_of_child;
use crate::{ConnectRequest, Device, Reply};

#[test]
#[cfg_attr(miri, ignore)]
fn in_a_forked_child_calls_fail_eownerdead_waits_end_and_drops_do_nothing() {
    let a = Device::open(&crate::cm::tests::loop_name()).unwrap();
    let b = Device::open(&crate::cm::tests::loop_name()).unwrap();
    let listener = b.listen(0x0f0f).unwrap();
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let pending = a
        .request(ConnectRequest::builder(path, 0x0f0f, 0x11).build())
        .unwrap();
    let incoming = listener.accept().unwrap();

    let code = exit_code_of_child(move || {
        let eownerdead = |e: crate::Error| e.errno() == libc::EOWNERDEAD;
        let checks = [
            a.create_id().map(drop).is_err_and(eownerdead),
            a.path_to(1, b.gid(1, 0).unwrap())
                .map(drop)
                .is_err_and(eownerdead),
            Device::open("loop99").map(drop).is_err_and(eownerdead),
            incoming
                .reject(crate::RejectReason::CONSUMER_DEFINED, &[], &[])
                .is_err_and(eownerdead),
            // No worker here: a wait must not hang.
            listener.accept().is_err(),
            pending.wait_reply().is_err(),
        ];
        // Every value goes out of scope here: their drops must not block
        // on the parent's locks or send anything.
        drop((a, b, listener));
        match checks.iter().position(|ok| !ok) {
            None => 0,
            Some(i) => 10 + i as i32,
        }
    });
    assert_eq!(code, 0, "check {} failed in the child", code - 10);
}

#[test]
#[cfg_attr(miri, ignore)]
fn the_parent_goes_on_after_a_fork() {
    let a = Device::open(&crate::cm::tests::loop_name()).unwrap();
    let b = Device::open(&crate::cm::tests::loop_name()).unwrap();
    assert_eq!(exit_code_of_child(|| 0), 0);
    let listener = b.listen(0x0f10).unwrap();
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let server = std::thread::spawn(move || listener.accept()?.accept(Reply::new(0x22)));
    let conn = a.connect(ConnectRequest::builder(path, 0x0f10, 0x12).build());
    assert!(conn.is_ok());
    assert!(server.join().unwrap().is_ok());
}

/// The async API in a forked child. A future that waits must end at once
/// (the blocking waits do: `Queue::pop` says finished there), a future that
/// calls must fail with `EOWNERDEAD`, and the driver must say
/// the device is closed to it (`run_pending` `None`, `poll_closed` ready)
/// without running the parent's queued handlers.
#[test]
#[cfg_attr(miri, ignore)]
fn in_a_forked_child_async_waits_end_and_the_driver_stops() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    let (a, a_driver) = crate::aio::Device::open(&crate::cm::tests::loop_name()).unwrap();
    let (b, b_driver) = crate::aio::Device::open(&crate::cm::tests::loop_name()).unwrap();
    let listener = b.listen(0x0f11).unwrap();
    let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
    let pending = a
        .request(ConnectRequest::builder(path, 0x0f11, 0x13).build())
        .unwrap();
    // The REQ's event is queued for B's driver, which nobody ran yet.
    let t0 = std::time::Instant::now();
    while b.engine().events.queued() == 0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "no REQ");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }

    let code = exit_code_of_child(move || {
        let mut cx = Context::from_waker(Waker::noop());
        let eownerdead = |e: &crate::Error| e.errno() == libc::EOWNERDEAD;
        let accept = pin!(listener.accept()).poll(&mut cx);
        let reply = pin!(pending.wait_reply()).poll(&mut cx);
        let connect =
            pin!(a.connect(ConnectRequest::builder(path, 0x0f11, 0x14).build())).poll(&mut cx);
        let checks = [
            matches!(accept, Poll::Ready(Err(_))),
            matches!(reply, Poll::Ready(Err(_))),
            matches!(connect, Poll::Ready(Err(ref e)) if eownerdead(e)),
            // The parent's handlers are not run here: nothing was queued
            // for the child's listener.
            b_driver.run_pending(8).is_none(),
            listener.pending() == 0,
            a_driver.run_pending(8).is_none(),
            b_driver.poll_closed(&mut cx).is_ready(),
            b_driver.is_closed(),
        ];
        drop((a, b, listener, a_driver, b_driver));
        match checks.iter().position(|ok| !ok) {
            None => 0,
            Some(i) => 10 + i as i32,
        }
    });
    assert_eq!(code, 0, "check {} failed in the child", code - 10);
}
