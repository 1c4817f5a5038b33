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
