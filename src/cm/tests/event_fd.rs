//! Issue 13, point 3: handlers of an `IBCM_EVENTS_FD` device run in
//! `process_device_events`, on the caller's thread, with the worker's
//! guarantees (the C side: c-tests/test_event_fd.c).

use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::*;
use crate::abi::ibcm_event_mode::IBCM_EVENTS_FD;
use crate::cm::event::CmEvent;
use crate::cm::worker::{process_device_events, queue_event};
use crate::errno::{EBUSY, EDEADLK};

fn fd_device() -> Arc<Device> {
    let device = super::super::open_device(&loop_name()).unwrap();
    super::super::set_event_mode(&device, IBCM_EVENTS_FD).unwrap();
    device
}

fn wait_for(flag: &AtomicBool) {
    let t0 = Instant::now();
    while !flag.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < WAIT, "timed out");
        std::thread::yield_now();
    }
}

/// Two threads draining one device take turns: the second event's handler
/// (of another id, which its callback guard would not hold back) starts only
/// after the first one's returned, so the device's handlers run one at a
/// time and in queue order whichever thread calls.
#[test]
#[cfg_attr(miri, ignore)]
fn event_fd_two_threads_take_turns() {
    let device = fd_device();
    let running = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(AtomicBool::new(false));
    let first_in = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let order = Arc::new(Mutex::new(Vec::new()));
    let handler: Handler = {
        let (running, overlapped) = (running.clone(), overlapped.clone());
        let (first_in, release, order) = (first_in.clone(), release.clone(), order.clone());
        Arc::new(move |_id, event: &CmEvent| {
            if running.fetch_add(1, Ordering::SeqCst) != 0 {
                overlapped.store(true, Ordering::SeqCst);
            }
            order.lock().push(event.event);
            if event.event == IB_CM_USER_ESTABLISHED {
                first_in.store(true, Ordering::SeqCst);
                wait_for(&release);
            }
            running.fetch_sub(1, Ordering::SeqCst);
            0
        })
    };
    let id = super::super::create_id(&device, handler.clone()).unwrap();
    let other = super::super::create_id(&device, handler).unwrap();
    queue_event(&id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    queue_event(&other, CmEvent::bare(IB_CM_TIMEWAIT_EXIT));

    let first = {
        let device = device.clone();
        std::thread::spawn(move || process_device_events(&device, 1))
    };
    wait_for(&first_in);
    let second_calling = Arc::new(AtomicBool::new(false));
    let second = {
        let (device, calling) = (device.clone(), second_calling.clone());
        std::thread::spawn(move || {
            calling.store(true, Ordering::SeqCst);
            process_device_events(&device, 1)
        })
    };
    wait_for(&second_calling);
    // Time for the second call to run the next handler if it did not wait.
    std::thread::sleep(Duration::from_millis(50));
    release.store(true, Ordering::SeqCst);
    assert_eq!(first.join().unwrap(), Ok(1));
    assert_eq!(second.join().unwrap(), Ok(1));
    assert!(!overlapped.load(Ordering::SeqCst));
    assert_eq!(*order.lock(), [IB_CM_USER_ESTABLISHED, IB_CM_TIMEWAIT_EXIT]);
    super::super::destroy_id(&id, 0);
    super::super::destroy_id(&other, 0);
    super::super::close_device(&device).unwrap();
}

/// An event of an id destroyed before its turn is taken (counted) and its
/// handler not called; a handler's non-zero return destroys its id; a
/// handler cannot drain events (`-EDEADLK`); the mode is fixed while ids
/// exist.
#[test]
#[cfg_attr(miri, ignore)]
fn event_fd_destroyed_ids_return_values_and_nesting() {
    let device = fd_device();
    let calls = Arc::new(AtomicUsize::new(0));
    let nested = Arc::new(Mutex::new(None));
    let handler: Handler = {
        let (calls, nested, device) = (calls.clone(), nested.clone(), device.clone());
        Arc::new(move |_id, _event: &CmEvent| {
            calls.fetch_add(1, Ordering::SeqCst);
            *nested.lock() = Some(process_device_events(&device, 1));
            1 // destroys the id
        })
    };
    let doomed = super::super::create_id(&device, handler.clone()).unwrap();
    assert_eq!(
        super::super::set_event_mode(&device, IBCM_EVENTS_FD),
        Err(EBUSY)
    );
    queue_event(&doomed, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    super::super::destroy_id(&doomed, 0);
    assert_eq!(process_device_events(&device, 8), Ok(1));
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let id = super::super::create_id(&device, handler).unwrap();
    queue_event(&id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    queue_event(&id, CmEvent::bare(IB_CM_TIMEWAIT_EXIT));
    assert_eq!(process_device_events(&device, 8), Ok(2));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(*nested.lock(), Some(Err(EDEADLK)));
    assert!(id.is_destroyed());
    assert_eq!(device.id_count(), 0);
    super::super::close_device(&device).unwrap();
}
