//! Microbenchmarks: the timing wheel (`ib_cm::timer::Timers`) against the
//! binary heap with lazy cancel that it replaced, kept here as the baseline.
//!
//! `cargo bench --bench timer`. Nothing here asserts a time.
//!
//! Both run in a steady state on a virtual clock that moves 10 µs per
//! operation (100,000 connections a second):
//! - `arm+cancel`: a retransmission timer of 4.6 s (what REQ, REP and DREQ
//!   arm on loop devices), cancelled at once, as when the reply comes; the
//!   heap keeps the 460,000 cancelled entries of the last 4.6 s.
//! - `arm+fire`: a 10 ms timer, popped when due (about 1,000 pending).
//!
//! Each also runs with 100,000 far timers armed (timewaits of live
//! connections), which a heap pays for in depth.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

use ib_cm::timer::Timers;

/// The timers as they were before the wheel: a heap of (deadline, id) and a
/// map of the live ones; a cancelled entry stays in the heap until it surfaces.
struct HeapTimers<T> {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    live: HashMap<u64, T>,
    next_id: u64,
}

impl<T> HeapTimers<T> {
    fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            next_id: 1,
        }
    }

    fn arm(&mut self, deadline: Instant, payload: T) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((deadline, id)));
        self.live.insert(id, payload);
        id
    }

    fn cancel(&mut self, id: u64) {
        self.live.remove(&id);
    }

    fn pop_due(&mut self, now: Instant) -> Option<(u64, T)> {
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if let Some(payload) = self.live.remove(&id) {
                return Some((id, payload));
            }
        }
        None
    }
}

/// The operations both implementations offer, for one benchmark body.
trait Wheel {
    type Id: Copy;
    fn arm(&mut self, deadline: Instant, payload: u64) -> Self::Id;
    fn cancel(&mut self, id: Self::Id);
    fn pop_due(&mut self, now: Instant) -> Option<u64>;
}

impl Wheel for HeapTimers<u64> {
    type Id = u64;
    fn arm(&mut self, deadline: Instant, payload: u64) -> u64 {
        HeapTimers::arm(self, deadline, payload)
    }
    fn cancel(&mut self, id: u64) {
        HeapTimers::cancel(self, id);
    }
    fn pop_due(&mut self, now: Instant) -> Option<u64> {
        HeapTimers::pop_due(self, now).map(|(_, p)| p)
    }
}

impl Wheel for Timers<u64> {
    type Id = ib_cm::timer::TimerId;
    fn arm(&mut self, deadline: Instant, payload: u64) -> Self::Id {
        Timers::arm(self, deadline, payload)
    }
    fn cancel(&mut self, id: Self::Id) {
        Timers::cancel(self, id);
    }
    fn pop_due(&mut self, now: Instant) -> Option<u64> {
        Timers::pop_due(self, now).map(|(_, p)| p)
    }
}

const STEP_NS: u64 = 10_000;
const RETRANSMIT: Duration = Duration::from_millis(4_600);
const SHORT: Duration = Duration::from_millis(10);
const BACKGROUND: u64 = 100_000;

/// A virtual clock, and the timers brought to steady state on it.
struct Run<W> {
    timers: W,
    start: Instant,
    step: u64,
}

impl<W: Wheel> Run<W> {
    fn new(timers: W, background: u64, warm: impl Fn(&mut Self)) -> Self {
        let mut run = Self {
            timers,
            start: Instant::now(),
            step: 0,
        };
        for i in 0..background {
            run.timers.arm(run.start + Duration::from_secs(3_600), i);
        }
        warm(&mut run);
        run
    }

    fn tick(&mut self) -> Instant {
        self.step += 1;
        self.start + Duration::from_nanos(STEP_NS * self.step)
    }

    fn arm_cancel(&mut self) {
        let now = self.tick();
        let id = self.timers.arm(now + RETRANSMIT, self.step);
        self.timers.cancel(black_box(id));
        while let Some(p) = self.timers.pop_due(now) {
            black_box(p);
        }
    }

    fn arm_fire(&mut self) {
        let now = self.tick();
        self.timers.arm(now + SHORT, self.step);
        while let Some(p) = self.timers.pop_due(now) {
            black_box(p);
        }
    }
}

/// Steps of warm-up: past the longest timeout, so the state is steady.
fn warm_steps(timeout: Duration) -> u64 {
    (timeout.as_nanos() / u128::from(STEP_NS)) as u64 + 1
}

fn bench_both(
    c: &mut Criterion,
    name: &str,
    timeout: Duration,
    op: fn(&mut Run<HeapTimers<u64>>),
    op_w: fn(&mut Run<Timers<u64>>),
) {
    let mut g = c.benchmark_group(name);
    for background in [0, BACKGROUND] {
        let steps = warm_steps(timeout);
        let mut heap = Run::new(HeapTimers::new(), background, |r| {
            (0..steps).for_each(|_| op(r))
        });
        g.bench_function(format!("heap, {background} far timers"), |b| {
            b.iter(|| op(&mut heap))
        });
        let mut wheel = Run::new(Timers::default(), background, |r| {
            (0..steps).for_each(|_| op_w(r))
        });
        g.bench_function(format!("wheel, {background} far timers"), |b| {
            b.iter(|| op_w(&mut wheel))
        });
    }
    g.finish();
}

fn timers(c: &mut Criterion) {
    bench_both(
        c,
        "arm+cancel",
        RETRANSMIT,
        Run::arm_cancel,
        Run::arm_cancel,
    );
    bench_both(c, "arm+fire", SHORT, Run::arm_fire, Run::arm_fire);
}

criterion_group!(benches, timers);
criterion_main!(benches);
