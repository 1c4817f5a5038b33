//! The event-fd mode's turns (issue 13): the worker never waits for an FD
//! device's turn, close waits for a busy turn at most its close wait and not
//! at all from a handler, and the errno the man pages point to is there.

use std::sync::atomic::AtomicBool;

use super::*;
use crate::abi::ibcm_event_mode::IBCM_EVENTS_FD;
use crate::cm::worker::{process_device_events, queue_event, queue_sa_callback};
use crate::cm::{close_device, create_id, destroy_id, open_device, set_event_mode};
use crate::errno::EDEADLK;

/// An SA query's callback runs on the worker and "may call anything"
/// (docs/threads.md). If it may drain an FD-mode device, the worker waits
/// for that device's turn, which an application thread holds while one of
/// its handlers runs; a handler that waits for anything the worker brings
/// (here: an event of a worker-mode device) then never gets it. The worker
/// must not take an FD device's turn: `-EDEADLK`, as from a handler.
#[test]
#[cfg_attr(miri, ignore)]
fn process_events_from_an_sa_callback_does_not_stall_the_worker() {
    let fd_dev = open_device(&loop_name()).unwrap();
    set_event_mode(&fd_dev, IBCM_EVENTS_FD).unwrap();
    let worker_dev = open_device(&loop_name()).unwrap();

    // A worker-mode id whose event the FD handler waits for.
    let delivered = Arc::new(AtomicBool::new(false));
    let worker_id = {
        let delivered = delivered.clone();
        let h: Handler = Arc::new(move |_, _| {
            delivered.store(true, Ordering::SeqCst);
            0
        });
        create_id(&worker_dev, h).unwrap()
    };

    // The FD handler: signals it runs, then waits (2 s at most) for the
    // worker-mode event.
    let in_handler = Arc::new(AtomicBool::new(false));
    let saw_worker_event = Arc::new(AtomicBool::new(false));
    let fd_handler: Handler = {
        let (in_handler, delivered, saw) = (
            in_handler.clone(),
            delivered.clone(),
            saw_worker_event.clone(),
        );
        Arc::new(move |_, _| {
            in_handler.store(true, Ordering::SeqCst);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(2) {
                if delivered.load(Ordering::SeqCst) {
                    saw.store(true, Ordering::SeqCst);
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            0
        })
    };
    let fd_id = create_id(&fd_dev, fd_handler).unwrap();
    queue_event(&fd_id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    let app = {
        let fd_dev = fd_dev.clone();
        std::thread::spawn(move || process_device_events(&fd_dev, 1))
    };
    wait_until("the FD handler runs", || in_handler.load(Ordering::SeqCst));

    // An SA callback drains the FD device, then the worker-mode event.
    let from_callback = Arc::new(Mutex::new(None));
    {
        let (fd_dev, from_callback) = (fd_dev.clone(), from_callback.clone());
        queue_sa_callback(
            crate::cm::Cm::process(),
            Box::new(move || {
                *from_callback.lock() = Some(process_device_events(&fd_dev, 1));
            }),
        );
    }
    queue_event(&worker_id, CmEvent::bare(IB_CM_USER_ESTABLISHED));

    assert_eq!(app.join().unwrap(), Ok(1));
    assert!(
        saw_worker_event.load(Ordering::SeqCst),
        "the worker sat in the SA callback waiting for the FD device's turn: the worker-mode \
         event came only after the FD handler gave up (callback got {:?})",
        *from_callback.lock()
    );
    wait_until("the SA callback ran", || from_callback.lock().is_some());
    assert_eq!(*from_callback.lock(), Some(Err(EDEADLK)));

    destroy_id(&fd_id, 0);
    destroy_id(&worker_id, 0);
    close_device(&fd_dev).unwrap();
    close_device(&worker_dev).unwrap();
}

/// Every entry point fails with `-EOWNERDEAD` in a child forked from a
/// process that opened a device (src/os/fork.rs), and only
/// ibcm_set_event_mode(3) lists it, "see ib_cm(7)"; ib_cm(7) said nothing
/// of fork or EOWNERDEAD, so the other 32 pages' callers had no word of it.
#[test]
fn eownerdead_is_in_ib_cm_7_where_the_pages_point() {
    let overview = include_str!("../../../man/man7/ib_cm.7");
    let section = overview
        .split(".SH RETURN VALUES AND BAD INPUT")
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .unwrap();
    assert!(
        section.contains("EOWNERDEAD") && section.contains("fork"),
        "ib_cm(7) RETURN VALUES does not say what a forked child gets (EOWNERDEAD)"
    );
    let page = include_str!("../../../man/man3/ibcm_set_event_mode.3");
    assert!(page.contains("EOWNERDEAD"));
}

/// `ibcm_close_device` with ids left waits "at most 2 s" for the work
/// queued before it (docs/threads.md), then says `-EBUSY`. In FD mode it
/// also drains the device's queue on the calling thread, and waited for the
/// device's turn without a bound: an application thread whose handler holds
/// the turn and waits for the closing thread (say, for a lock the closer
/// holds) hung both for good; in worker mode the same program gets
/// `-EBUSY` after 2 s.
#[test]
#[cfg_attr(miri, ignore)]
fn fd_mode_close_waits_for_a_busy_turn_at_most_close_wait() {
    let device = open_device(&loop_name()).unwrap();
    set_event_mode(&device, IBCM_EVENTS_FD).unwrap();
    let in_handler = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let handler: Handler = {
        let (in_handler, release) = (in_handler.clone(), release.clone());
        Arc::new(move |_, _| {
            in_handler.store(true, Ordering::SeqCst);
            let t0 = Instant::now();
            while !release.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
            0
        })
    };
    let id = create_id(&device, handler).unwrap();
    queue_event(&id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    let app = {
        let device = device.clone();
        std::thread::spawn(move || process_device_events(&device, 1))
    };
    wait_until("the handler runs", || in_handler.load(Ordering::SeqCst));

    let (tx, rx) = std::sync::mpsc::channel();
    let closer = {
        let device = device.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let _ = tx.send((close_device(&device), t0.elapsed()));
        })
    };
    let bound = crate::cm::CLOSE_WAIT * 2 + Duration::from_secs(2);
    let got = rx.recv_timeout(bound);
    release.store(true, Ordering::SeqCst);
    assert_eq!(app.join().unwrap(), Ok(1));
    closer.join().unwrap();
    let got = got.unwrap_or_else(|_| panic!("close_device still waiting after {bound:?}"));
    assert_eq!(got.0, Err(crate::errno::EBUSY), "after {:?}", got.1);

    destroy_id(&id, 0);
    close_device(&device).unwrap();
}

/// "Called from inside a handler it does not wait" (ibcm_close_device(3)):
/// `close_device` skipped its wait for the worker only on the worker. A
/// handler of an FD-mode device runs on the application's thread, so its
/// close waited for the worker's queue, here behind a worker-mode handler
/// that runs until the test releases it, the whole `CLOSE_WAIT` (2 s)
/// before its `-EBUSY`; not waiting, it returns well within that.
#[test]
#[cfg_attr(miri, ignore)]
fn close_from_an_fd_handler_does_not_wait_for_the_worker() {
    let fd_dev = open_device(&loop_name()).unwrap();
    set_event_mode(&fd_dev, IBCM_EVENTS_FD).unwrap();
    let worker_dev = open_device(&loop_name()).unwrap();

    let slow_running = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let slow = {
        let (running, release) = (slow_running.clone(), release.clone());
        let h: Handler = Arc::new(move |_, _| {
            running.store(true, Ordering::SeqCst);
            let t0 = Instant::now();
            while !release.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
            0
        });
        create_id(&worker_dev, h).unwrap()
    };
    let closed = Arc::new(Mutex::new(None));
    let fd_id = {
        let (closed, dev) = (closed.clone(), fd_dev.clone());
        let h: Handler = Arc::new(move |_, _| {
            let t0 = Instant::now();
            let got = close_device(&dev);
            *closed.lock() = Some((got, t0.elapsed()));
            0
        });
        create_id(&fd_dev, h).unwrap()
    };
    queue_event(&slow, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    wait_until("the slow worker handler runs", || {
        slow_running.load(Ordering::SeqCst)
    });
    queue_event(&fd_id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    assert_eq!(process_device_events(&fd_dev, 1), Ok(1));
    release.store(true, Ordering::SeqCst);
    let (got, took) = closed.lock().take().unwrap();
    assert_eq!(got, Err(crate::errno::EBUSY));
    assert!(
        took < crate::cm::CLOSE_WAIT,
        "close from an FD handler waited {took:?} for the worker"
    );

    destroy_id(&fd_id, 0);
    destroy_id(&slow, 0);
    close_device(&fd_dev).unwrap();
    close_device(&worker_dev).unwrap();
}
