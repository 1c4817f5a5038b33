//! The wheel against its contract: never early, at most one tick late,
//! cancel removes, handles never outlive their timer. OS-free (they run under
//! Miri, with smaller counts).

use super::*;

/// Counts that stay small under Miri.
const fn scaled(native: usize, miri: usize) -> usize {
    if cfg!(miri) { miri } else { native }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Pops everything due at `now`.
fn drain<T>(t: &mut Timers<T>, now: Instant) -> Vec<T> {
    std::iter::from_fn(|| t.pop_due(now).map(|(_, p)| p)).collect()
}

/// What the worker does: sleeps until `next_deadline`, then pops what is due.
/// Returns when the first timer fires, and how many wake-ups that took.
fn run_until_first<T>(t: &mut Timers<T>) -> (Instant, T, usize) {
    for wakeups in 1.. {
        let at = t.next_deadline().expect("a timer is armed");
        if let Some((_, payload)) = t.pop_due(at) {
            return (at, payload, wakeups);
        }
    }
    unreachable!()
}

use ib_cm_wire::rng::Rng;

#[test]
fn timers_fire_in_deadline_order_and_cancelled_ones_never_fire() {
    let t0 = Instant::now();
    let mut t = Timers::new(t0);
    t.arm(t0 + 3 * TICK, "c");
    let b = t.arm(t0 + 2 * TICK, "b");
    t.arm(t0 + TICK, "a");
    assert_eq!(t.cancel(b), Some("b"));
    assert_eq!(t.len(), 2);
    assert_eq!(t.next_deadline(), Some(t0 + TICK));
    assert_eq!(t.pop_due(t0), None);
    assert_eq!(drain(&mut t, t0 + ms(10)), ["a", "c"]);
    assert!(t.is_empty());
    assert_eq!(t.next_deadline(), None);
}

#[test]
fn a_timer_never_fires_early_and_at_most_one_tick_late() {
    let t0 = Instant::now();
    for offset_ns in [
        0,
        1,
        999_999,
        1_000_000,
        1 << 20,
        (1 << 20) + 1,
        63 << 20,
        64 << 20,
        4_095 << 20,
        5_000_000_017,
    ] {
        let mut t = Timers::new(t0);
        let deadline = t0 + Duration::from_nanos(offset_ns);
        t.arm(deadline, offset_ns);
        if offset_ns > 0 {
            assert_eq!(
                t.pop_due(deadline - Duration::from_nanos(1)),
                None,
                "{offset_ns}"
            );
        }
        let next = t.next_deadline().unwrap();
        assert!(next >= t0 && next < deadline + TICK, "{offset_ns}");
        assert_eq!(t.pop_due(deadline + TICK).map(|(_, p)| p), Some(offset_ns));
    }
}

#[test]
fn deadlines_already_past_fire_at_once() {
    let t0 = Instant::now();
    let mut t = Timers::new(t0 + ms(5));
    t.arm(t0, "before the wheel began");
    assert_eq!(drain(&mut t, t0 + ms(5)), ["before the wheel began"]);
    // The wheel's time is now 100 ms; a deadline behind it is due at once.
    assert!(t.pop_due(t0 + ms(105)).is_none());
    t.arm(t0 + ms(50), "late");
    assert!(t.next_deadline().unwrap() <= t0 + ms(105));
    assert_eq!(drain(&mut t, t0 + ms(105)), ["late"]);
}

#[test]
fn cancel_removes_the_entry_and_stale_handles_do_nothing() {
    let t0 = Instant::now();
    let mut t = Timers::new(t0);
    let a = t.arm(t0 + ms(600_000), 1);
    assert_eq!(t.cancel(a), Some(1));
    assert_eq!(t.cancel(a), None, "cancelled twice");
    assert!(t.is_empty());
    assert_eq!(t.next_deadline(), None, "the slot emptied with the cancel");
    // The entry is reused at once, under a new handle the old one cannot touch.
    let b = t.arm(t0 + ms(1), 2);
    assert_ne!(a, b);
    assert_eq!(t.cancel(a), None);
    assert_eq!(t.len(), 1);
    let (fired, _) = t.pop_due(t0 + ms(2)).unwrap();
    assert_eq!(fired, b);
    assert_eq!(t.cancel(b), None, "cancel after firing");
    // Arm and cancel, again and again: the storage does not grow.
    for i in 0..scaled(10_000, 100) {
        let id = t.arm(t0 + ms(1 + i as u64 % 5_000), 3);
        t.cancel(id);
    }
    assert_eq!(t.slab.entries(), 1);
}

#[test]
fn a_rearmed_timer_fires_only_at_its_new_deadline() {
    let t0 = Instant::now();
    let mut t = Timers::new(t0);
    let first = t.arm(t0 + ms(10), "first");
    t.cancel(first);
    t.arm(t0 + ms(30), "again");
    assert_eq!(t.pop_due(t0 + ms(20)), None);
    let (at, payload, _) = run_until_first(&mut t);
    assert_eq!(payload, "again");
    assert!(at >= t0 + ms(30) && at < t0 + ms(30) + TICK);
}

#[test]
fn far_deadlines_come_down_the_levels_and_fire_on_time() {
    let day = 86_400_000;
    for after in [
        ms(64),
        ms(600_000),
        ms(3_600_000),
        ms(30 * day),
        ms(3_650 * day),
    ] {
        let t0 = Instant::now();
        let mut t = Timers::new(t0);
        t.arm(t0 + after, after);
        // A near timer first: the far one waits on its level meanwhile.
        t.arm(t0 + ms(1), Duration::ZERO);
        assert_eq!(run_until_first(&mut t).1, Duration::ZERO);
        let (at, payload, wakeups) = run_until_first(&mut t);
        assert_eq!(payload, after);
        assert!(at >= t0 + after && at < t0 + after + TICK, "{after:?}");
        assert!(wakeups <= LEVELS + 1, "{after:?}: {wakeups} wake-ups");
    }
}

#[test]
fn many_timers_fire_in_tick_order() {
    let t0 = Instant::now();
    let mut t = Timers::new(t0);
    let mut rng = Rng(0x5eed);
    let n = scaled(20_000, 300);
    for _ in 0..n {
        let deadline = t0 + Duration::from_nanos(rng.below(700_000_000_000));
        t.arm(deadline, deadline);
    }
    assert_eq!(t.len(), n);
    let mut last = t0;
    let mut fired = 0;
    while !t.is_empty() {
        let (at, deadline, _) = run_until_first(&mut t);
        assert!(deadline <= at && at < deadline + TICK);
        assert!(at >= last);
        last = at;
        fired += 1;
    }
    assert_eq!(fired, n);
}

/// Random arms (near and far), cancels (live and stale) and time steps (small
/// and huge), against a list of what should be armed.
#[test]
fn random_operations_match_a_simple_model() {
    let t0 = Instant::now();
    let mut t = Timers::new(t0);
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut model: Vec<(TimerId, Instant, u64)> = Vec::new();
    let mut gone: Vec<TimerId> = Vec::new();
    let mut now = t0;
    for step in 0..scaled(50_000, 400) as u64 {
        match rng.below(10) {
            0..=4 => {
                let after = match rng.below(4) {
                    0 => rng.below(5_000_000),
                    1 => rng.below(200_000_000),
                    2 => rng.below(10_000_000_000),
                    _ => rng.below(2_000_000_000_000),
                };
                let deadline = now + Duration::from_nanos(after);
                model.push((t.arm(deadline, step), deadline, step));
            }
            5 | 6 if !model.is_empty() => {
                let (id, _, payload) = model.swap_remove(rng.below(model.len() as u64) as usize);
                assert_eq!(t.cancel(id), Some(payload));
                gone.push(id);
            }
            5 | 6 => {}
            7 if !gone.is_empty() => {
                let id = gone[rng.below(gone.len() as u64) as usize];
                assert_eq!(t.cancel(id), None, "a stale handle cancelled something");
            }
            _ => {
                now += Duration::from_nanos(match rng.below(8) {
                    0 => rng.below(1_000_000_000_000),
                    1 => rng.below(5_000_000_000),
                    _ => rng.below(3 << TICK_SHIFT),
                });
                let mut last_tick = 0;
                while let Some((id, payload)) = t.pop_due(now) {
                    let i = model.iter().position(|m| m.0 == id).expect("fired twice");
                    let (_, deadline, expected) = model.swap_remove(i);
                    assert_eq!(payload, expected);
                    assert!(deadline <= now, "fired early");
                    let tick = (deadline - t0).as_nanos() >> TICK_SHIFT;
                    assert!(tick + 1 >= last_tick, "out of order");
                    last_tick = tick;
                    gone.push(id);
                }
                for (_, deadline, _) in &model {
                    assert!(*deadline + TICK > now, "more than one tick late");
                }
            }
        }
        assert_eq!(t.len(), model.len());
        let earliest = model.iter().map(|m| m.1).min();
        match (t.next_deadline(), earliest) {
            (None, None) => {}
            (Some(next), Some(earliest)) => assert!(next < earliest + TICK),
            other => panic!("next_deadline {other:?}"),
        }
        if gone.len() > 1_000 {
            gone.drain(..500);
        }
    }
}
