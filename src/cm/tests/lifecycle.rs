//! Lifecycle races at engine level (issue 10): threads racing create, listen,
//! connect, destroy and device close, so that `make tsan` sees them too.
//!
//! Each test runs for a short time by default (`SHORT`); `IBCM_STRESS_SECONDS`
//! makes each run that many seconds (`make soak`).
//!
//! They are `#[ignore]`d in the default run and run in a pass of their own
//! (`make rust-check`, `make tsan`, `make soak`: `-- --ignored
//! cm::tests::lifecycle`): they keep the one worker thread every engine test
//! shares busy, and the other tests' short retransmission timers would fire
//! late beside them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use super::*;
use crate::cm::{close_device, destroy_id, listen, lookup_device, open_device, send_req};
use crate::errno::EBUSY;

/// How long each race runs without `IBCM_STRESS_SECONDS`.
const SHORT: Duration = Duration::from_millis(500);

fn run_for() -> Duration {
    std::env::var("IBCM_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map_or(SHORT, Duration::from_secs)
}

/// `ib_create_cm_id` as C reaches it: the device is looked up, then the id
/// created, which fails once the device is closing.
fn create(device: &Arc<Device>, handler: Handler) -> Option<Arc<CmIdPriv>> {
    lookup_device(Arc::as_ptr(device) as usize)?;
    crate::cm::create_id(device, handler).ok()
}

fn quiet_handler() -> Handler {
    Arc::new(|_, _| 0)
}

/// Runs `first` and `second` on two threads at once, round after round until
/// `run_for()` has passed: both start each round from one barrier, so the two
/// calls overlap. `prepare` makes the round's shared state; `check` judges it
/// once both are done and returns whether the round went wrong. Returns
/// (rounds, rounds that went wrong).
fn duel<T: Send + Sync + 'static>(
    mut prepare: impl FnMut() -> T,
    first: impl Fn(&T) + Send + Sync + 'static,
    second: impl Fn(&T) + Send + Sync + 'static,
    mut check: impl FnMut(&T) -> bool,
) -> (usize, usize) {
    let shared: Arc<Mutex<Option<Arc<T>>>> = Arc::default();
    let start = Arc::new(Barrier::new(3));
    let done = Arc::new(Barrier::new(3));
    let over = Arc::new(AtomicBool::new(false));
    let spawn = |f: Arc<dyn Fn(&T) + Send + Sync>| {
        let (shared, start, done, over) =
            (shared.clone(), start.clone(), done.clone(), over.clone());
        thread::spawn(move || {
            loop {
                start.wait();
                if over.load(Ordering::Acquire) {
                    return;
                }
                let round = shared.lock().clone().unwrap();
                f(&round);
                done.wait();
            }
        })
    };
    let threads = [spawn(Arc::new(first)), spawn(Arc::new(second))];
    let (mut rounds, mut wrong) = (0, 0);
    let end = Instant::now() + run_for();
    while Instant::now() < end {
        let round = Arc::new(prepare());
        *shared.lock() = Some(round.clone());
        start.wait();
        done.wait();
        rounds += 1;
        wrong += usize::from(check(&round));
    }
    over.store(true, Ordering::Release);
    start.wait();
    for t in threads {
        t.join().unwrap();
    }
    (rounds, wrong)
}

/// Point 3: `ib_cm_listen` racing `ib_destroy_cm_id` on the same id must not
/// leave the service ID taken by the destroyed id.
#[test]
#[ignore = "runs alone: make rust-check / make tsan run it with --ignored"]
fn lifecycle_listen_racing_destroy_leaves_the_service_id_free() {
    let b = open_device(&loop_name()).unwrap();
    let (b1, b2) = (b.clone(), b.clone());
    let stuck = Arc::new(AtomicUsize::new(0));
    let stuck_in_check = stuck.clone();
    let mut service = SERVICE_ID;
    let (rounds, wrong) = duel(
        move || {
            service += 1; // one per round: rounds do not see each other
            (create(&b1, quiet_handler()).unwrap(), service)
        },
        |(id, service)| {
            let _ = listen(id, *service);
        },
        |(id, _)| destroy_id(id, 0),
        move |(id, service)| {
            // Destroyed: whatever listen did, the id is IDLE and the service
            // ID is free for a new listener.
            let leftover = id.state() != IB_CM_IDLE;
            let fresh = create(&b2, quiet_handler()).unwrap();
            let refused = listen(&fresh, *service) == Err(EBUSY);
            destroy_id(&fresh, 0);
            if refused {
                stuck_in_check.fetch_add(1, Ordering::Relaxed);
            }
            leftover || refused
        },
    );
    assert_eq!(b.id_count(), 0);
    close_device(&b).unwrap();
    assert_eq!(
        (wrong, stuck.load(Ordering::Relaxed)),
        (0, 0),
        "{wrong} of {rounds} listen/destroy races left a destroyed id listening \
         ({} fresh listens got -EBUSY)",
        stuck.load(Ordering::Relaxed)
    );
}

/// Point 3: `ib_send_cm_req` racing `ib_destroy_cm_id` on the same id must
/// not leave a REQ in flight from a destroyed id.
#[test]
#[ignore = "runs alone: make rust-check / make tsan run it with --ignored"]
fn lifecycle_send_req_racing_destroy_sends_nothing_after_destroy() {
    let pair = Pair::new();
    // The passive side leaves REQs unanswered: no connection is made.
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| -1));
    let a = pair.a.clone();
    let params = pair.req_params();
    let (rounds, wrong) = duel(
        move || create(&a, quiet_handler()).unwrap(),
        move |id| {
            let _ = send_req(id, &params);
        },
        |id| destroy_id(id, 0),
        // A REQ sent first is rejected by the destroy (REQ_SENT -> IDLE); one
        // sent after must have failed. Either way the id is IDLE.
        |id| id.state() != IB_CM_IDLE,
    );
    wait_until("the passive side's ids are gone", || {
        pair.b.id_count() == 1 // the listener
    });
    assert_eq!(pair.a.id_count(), 1); // Pair's own active id
    pair.finish(&[]);
    assert_eq!(
        wrong, 0,
        "{wrong} of {rounds} send_req/destroy races left a destroyed id in REQ_SENT"
    );
}

/// Point 1: a REQ delivered after its listener was destroyed runs the dead
/// listener's handler (in C: with its freed context). Destroy must wait for
/// a REQ handler that runs, and a child whose listener is gone gets no event.
#[test]
#[ignore = "runs alone: make rust-check / make tsan run it with --ignored"]
fn lifecycle_req_received_never_reaches_a_destroyed_listener() {
    let a = open_device(&loop_name()).unwrap();
    let b = open_device(&loop_name()).unwrap();
    let late = Arc::new(AtomicUsize::new(0));
    let delivered = Arc::new(AtomicUsize::new(0));
    let params = ReqParams {
        primary_path: a.init_path(1, &b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        qp_type: ib_qp_type::IB_QPT_RC as i32,
        remote_cm_response_timeout: 18, // no REQ retry within a round
        local_cm_response_timeout: 12,
        max_cm_retries: 3,
        ..ReqParams::default()
    };
    let end = Instant::now() + run_for();
    let mut rounds = 0u32;
    while Instant::now() < end {
        rounds += 1;
        let gone = Arc::new(AtomicBool::new(false));
        let handler: Handler = {
            let (gone, late, delivered) = (gone.clone(), late.clone(), delivered.clone());
            Arc::new(move |_, ev| {
                if ev.event == IB_CM_REQ_RECEIVED {
                    delivered.fetch_add(1, Ordering::Relaxed);
                    if gone.load(Ordering::Acquire) {
                        late.fetch_add(1, Ordering::Relaxed);
                    }
                    // A slow ULP: the next REQs queue up behind this one.
                    thread::sleep(Duration::from_micros(200));
                }
                -1 // reject and destroy the child
            })
        };
        let listener = create(&b, handler).unwrap();
        listen(&listener, SERVICE_ID).unwrap();
        let actives: Vec<_> = (0..4)
            .map(|n| {
                let id = create(&a, quiet_handler()).unwrap();
                let p = ReqParams {
                    qp_num: 0x100 + (rounds * 4 + n) % 0x7f_ff00,
                    ..params.clone()
                };
                send_req(&id, &p).unwrap();
                id
            })
            .collect();
        thread::sleep(Duration::from_micros(u64::from(rounds % 7) * 100));
        destroy_id(&listener, 0);
        gone.store(true, Ordering::Release);
        for id in &actives {
            destroy_id(id, 0);
        }
    }
    wait_until("every child is gone", || b.id_count() == 0);
    close_device(&a).unwrap();
    close_device(&b).unwrap();
    let late = late.load(Ordering::Relaxed);
    assert_eq!(
        late,
        0,
        "{late} of {} REQ_RECEIVED events ran after their listener's destroy returned \
         ({rounds} listeners)",
        delivered.load(Ordering::Relaxed)
    );
}

/// One opening of the device that creators and the closer share.
struct Opened {
    device: Arc<Device>,
    /// `close_device` returned `Ok` for it.
    closed: AtomicBool,
}

/// Point 2: `ib_create_cm_id` racing `ibcm_close_device`: when close returns
/// 0, no id exists on the device (a create that overlapped it failed).
#[test]
#[ignore = "runs alone: make rust-check / make tsan run it with --ignored"]
fn lifecycle_create_racing_close_device_leaves_no_id_on_a_closed_device() {
    let name = loop_name();
    let open = |name: &str| {
        Arc::new(Opened {
            device: open_device(name).unwrap(),
            closed: AtomicBool::new(false),
        })
    };
    let current = Arc::new(Mutex::new(open(&name)));
    let over = Arc::new(AtomicBool::new(false));
    let on_closed = Arc::new(AtomicUsize::new(0));
    let creates = Arc::new(AtomicUsize::new(0));
    let creators: Vec<_> = (0..3)
        .map(|_| {
            let (current, over, on_closed, creates) = (
                current.clone(),
                over.clone(),
                on_closed.clone(),
                creates.clone(),
            );
            thread::spawn(move || {
                while !over.load(Ordering::Acquire) {
                    let opened = current.lock().clone();
                    let Some(id) = create(&opened.device, quiet_handler()) else {
                        continue;
                    };
                    creates.fetch_add(1, Ordering::Relaxed);
                    thread::yield_now();
                    // The id exists until the destroy below: a close that
                    // returned Ok meanwhile was wrong.
                    if opened.closed.load(Ordering::Acquire) {
                        on_closed.fetch_add(1, Ordering::Relaxed);
                    }
                    destroy_id(&id, 0);
                }
            })
        })
        .collect();
    let end = Instant::now() + run_for();
    let mut closes = 0;
    while Instant::now() < end {
        let opened = current.lock().clone();
        if close_device(&opened.device).is_ok() {
            opened.closed.store(true, Ordering::Release);
            closes += 1;
            *current.lock() = open(&name);
        } else {
            thread::yield_now();
        }
    }
    over.store(true, Ordering::Release);
    for t in creators {
        t.join().unwrap();
    }
    let last = current.lock().clone();
    assert_eq!(last.device.id_count(), 0);
    close_device(&last.device).unwrap();
    let on_closed = on_closed.load(Ordering::Relaxed);
    assert_eq!(
        on_closed,
        0,
        "{on_closed} ids were alive on a device whose close_device returned Ok \
         ({} creates, {closes} closes)",
        creates.load(Ordering::Relaxed)
    );
}

/// Everything at once on shared ids: four threads create, listen, connect,
/// disconnect and destroy at random (each id destroyed once, by whoever
/// claims it). At the end every id is gone and both devices close; TSan
/// watches the locking.
#[test]
#[ignore = "runs alone: make rust-check / make tsan run it with --ignored"]
fn lifecycle_churn_on_shared_ids_ends_with_nothing_left() {
    const SLOTS: usize = 32;
    let a = open_device(&loop_name()).unwrap();
    let b = open_device(&loop_name()).unwrap();
    let params = ReqParams {
        primary_path: a.init_path(1, &b.ports[0].gids[0].gid).unwrap(),
        qp_type: ib_qp_type::IB_QPT_RC as i32,
        remote_cm_response_timeout: 18,
        local_cm_response_timeout: 14,
        max_cm_retries: 5,
        ..ReqParams::default()
    };
    // Passive ids answer REQs at once and live until the CM or a thread
    // destroys them; they join the shared slots.
    let slots: Arc<Vec<Mutex<Option<Arc<CmIdPriv>>>>> =
        Arc::new((0..SLOTS).map(|_| Mutex::new(None)).collect());
    let handler: Handler = {
        let slots = Arc::downgrade(&slots);
        Arc::new(move |id, ev| match ev.event {
            IB_CM_REQ_RECEIVED => {
                let Some(slots) = slots.upgrade() else {
                    return -1;
                };
                let free = slots
                    .iter()
                    .find_map(|s| s.try_lock().filter(|s| s.is_none()));
                let Some(mut free) = free else {
                    return -1;
                };
                *free = Some(id.clone());
                let _ = crate::cm::send_rep(id, &rep_params(&[]));
                0
            }
            IB_CM_REP_RECEIVED => {
                let _ = crate::cm::send_rtu(id, &[]);
                0
            }
            IB_CM_DREQ_RECEIVED => {
                let _ = crate::cm::send_drep(id, None);
                0
            }
            _ => 0,
        })
    };
    let over = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let (a, b, slots, handler, over, params) = (
                a.clone(),
                b.clone(),
                slots.clone(),
                handler.clone(),
                over.clone(),
                params.clone(),
            );
            thread::spawn(move || {
                let mut seed = 0x9e37_79b9u32.wrapping_mul(t + 1);
                let mut next = || {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed
                };
                let mut qpn = 0x1000 * (t + 1);
                while !over.load(Ordering::Acquire) {
                    let r = next();
                    let slot = &slots[r as usize % SLOTS];
                    let service = SERVICE_ID + u64::from(r >> 8) % 3;
                    match (r >> 4) % 8 {
                        0 | 1 => {
                            let mut s = slot.lock();
                            if s.is_none() {
                                let id = create(&a, handler.clone()).unwrap();
                                qpn = (qpn + 1) & 0x7f_ffff;
                                let p = ReqParams {
                                    qp_num: qpn,
                                    service_id: service,
                                    ..params.clone()
                                };
                                *s = Some(id.clone());
                                drop(s);
                                let _ = send_req(&id, &p);
                            }
                        }
                        2 => {
                            let mut s = slot.lock();
                            if s.is_none() {
                                let id = create(&b, handler.clone()).unwrap();
                                *s = Some(id.clone());
                                drop(s);
                                let _ = listen(&id, service);
                            }
                        }
                        3 | 4 => {
                            // Whoever takes the id out of its slot destroys it.
                            let id = slot.lock().take();
                            if let Some(id) = id {
                                destroy_id(&id, 0);
                            }
                        }
                        5 => {
                            let id = slot.lock().clone();
                            if let Some(id) = id {
                                let _ = crate::cm::send_dreq(&id, None);
                            }
                        }
                        6 => {
                            let id = slot.lock().clone();
                            if let Some(id) = id {
                                let _ = listen(&id, service);
                            }
                        }
                        _ => {
                            let id = slot.lock().clone();
                            if let Some(id) = id {
                                let _ = crate::cm::send_drep(&id, None);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    thread::sleep(run_for());
    over.store(true, Ordering::Release);
    for t in threads {
        t.join().unwrap();
    }
    wait_until("every id is destroyed", || {
        for slot in slots.iter() {
            let id = slot.lock().take();
            if let Some(id) = id {
                destroy_id(&id, 0);
            }
        }
        a.id_count() == 0 && b.id_count() == 0
    });
    // Every service ID is free again.
    let refused: Vec<u64> = (SERVICE_ID..SERVICE_ID + 3)
        .filter(|&service| {
            let id = create(&b, quiet_handler()).unwrap();
            let refused = listen(&id, service).is_err();
            destroy_id(&id, 0);
            refused
        })
        .collect();
    close_device(&a).unwrap();
    close_device(&b).unwrap();
    assert_eq!(
        refused, [0u64; 0],
        "service IDs still taken after every id was destroyed"
    );
}
