//! cmtime on the Rust API: the table of `ibcm-cmtime` (tools/ibcm-cmtime.c),
//! the same phases on the same engine, through `ib_cm::aio` instead of the
//! C ABI, so that the two can be compared side by side
//! (scripts/perf/rust-vs-c-cmtime.sh).
//!
//! ```text
//! cargo run --release --features tokio --example cmtime -- -c 10000
//! ```
//!
//! One process, both sides: the active ids on `-d` (default loop0) connect
//! to a listener on `-D` (default loop1), both in one current-thread tokio
//! runtime, so that the program has two threads as the C tool has (this
//! one, and the library's worker, which receives the MADs). The devices are
//! in event-fd mode: the CM's events run in their driver tasks, and each
//! connection has one task per side (as the C tool has one id and handler
//! per side), spawned on the runtime (`tokio::spawn`; every future here is
//! `Send`). The loop that sends the REQs lets the other tasks run every
//! 32, and keeps fewer than 768 unanswered (waiting, when it has that many,
//! until the passive side takes one): the passive side drops REQs beyond
//! its backlog of 1024 not yet taken (the worker queues them for its
//! driver), where the C tool's handler, on the worker, takes each at once.
//!
//!   create id   Device::create_id() of each connection's active id
//!   connect     IdleId::request() until both sides are ESTABLISHED: the
//!               active task's wait_reply().await and confirm() (RTU), the
//!               passive task's accept().await (REP, then the RTU)
//!   disconnect  Connection::disconnect().await, the DREQ until the DREP;
//!               the passive task answers next_event().await's DREQ
//!   destroy     dropping each connection's two Connections (TIMEWAIT)
//!
//! `--api handler` runs the same phases through `ib_cm::handler` instead
//! (examples/cmtime_support/handler_mode.rs): handlers on the library's
//! worker answer each message there, as the C tool's do, with no runtime
//! task, queue or wake-up in between.
//!
//! Options: `-c N` (connections, default 1000), `-d DEV`, `-D DEV`,
//! `--api async|handler` (default async), `--no-warmup`. Not here: the C tool's --server, --client, --sequential
//! and --json.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "cmtime_support/handler_mode.rs"]
mod handler_mode;

use ib_cm::aio::{Connection, Device, IdleId, IncomingRequest, Listener, OutgoingRequest};
use ib_cm::handler::HandlerId;
use ib_cm::{ConnectRequest, Path, Reply};
use parking_lot::Mutex;
use tokio::sync::Notify;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

const PROG: &str = "cmtime (Rust API)";
const SERVICE_ID: u64 = 0x1234;
const ACTIVE_QPN_BASE: u32 = 0x1000;
const PASSIVE_QPN_FLAG: u32 = 0x80_0000;
const QPN_MASK: u32 = 0xff_ffff;
/// rdma_cm's CMA_CM_RESPONSE_TIMEOUT and CMA_MAX_CM_RETRIES, as the C tool.
const CM_RESPONSE_TIMEOUT: u8 = 20;
const MAX_CM_RETRIES: u8 = 15;
const MAX_CONNS: usize = 1_000_000;
const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests sent before the runtime's other tasks get a turn: the passive
/// side's backlog (1024 requests not yet taken) must not overflow.
const YIELD_EVERY: usize = 32;
/// REQs sent and not yet taken by the passive side, at most: its backlog
/// holds 1024 (the library's worker queues them for the passive device's
/// driver; the C tool's handlers run on the worker and take each at once).
const WINDOW: usize = 768;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Create,
    Connect,
    Disconnect,
    Destroy,
}

const PHASES: [Phase; 4] = [
    Phase::Create,
    Phase::Connect,
    Phase::Disconnect,
    Phase::Destroy,
];

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Create => "create id",
            Phase::Connect => "connect",
            Phase::Disconnect => "disconnect",
            Phase::Destroy => "destroy",
        }
    }
}

fn active_qpn(index: usize) -> u32 {
    (ACTIVE_QPN_BASE + index as u32) & QPN_MASK
}

fn passive_qpn(index: usize) -> u32 {
    (PASSIVE_QPN_FLAG | index as u32) & QPN_MASK
}

/// Nanoseconds since the run began (monotonic).
fn now_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// One connection: its timestamps and, `--api handler`, its two ids. As
/// small as the C tool's `struct conn` (136 bytes here, 88 there): each
/// phase walks the connections in order, and a larger stride costs cache
/// misses that are the harness's, not the API's (with the async sides in
/// here too, 344 bytes, the handler door's destroy phase took 1.2 times
/// the C tool's, all of the difference in the loop's first touch of each
/// connection).
#[derive(Default)]
struct Conn {
    start: [AtomicU64; 4],
    end: [AtomicU64; 4],
    /// connect: how many sides are ESTABLISHED (done at 2).
    sides_up: AtomicU32,
    /// `--api handler`: the active id and the adopted passive one.
    handler_ids: [Mutex<Option<HandlerId>>; 2],
}

/// `--api async`: one connection's two sides, once each is ESTABLISHED.
#[derive(Default)]
struct AsyncSides {
    active: Mutex<Option<Connection>>,
    passive: Mutex<Option<Connection>>,
}

/// What both sides share.
struct Bench {
    epoch: Instant,
    conns: Vec<Conn>,
    /// `--api async` only (empty otherwise), by connection.
    sides: Vec<AsyncSides>,
    /// Connections done in the phase running (the main task is woken when
    /// they are `target`, as the C tool's), failures, and how many passive
    /// connections are back in their slot after the DREP (woken at
    /// `parked_target`).
    settled: AtomicUsize,
    target: AtomicUsize,
    failed: AtomicUsize,
    passive_parked: AtomicUsize,
    parked_target: AtomicUsize,
    /// Requests the passive side took in the phase running, and where the
    /// loop that sends them waits for the next when too many are pending.
    accepted: AtomicUsize,
    accepting: Notify,
    /// The main task sleeps here until a phase is settled.
    done: Notify,
    /// The disconnect phase runs: the active tasks, woken by
    /// `go_disconnect`, send their DREQs.
    disconnect: AtomicBool,
    go_disconnect: Notify,
}

impl Bench {
    fn stamp(&self) -> u64 {
        now_ns(self.epoch)
    }

    /// Connection `i` is done (or failed) in `phase`.
    fn settle(&self, i: usize, phase: Phase, ok: bool) {
        self.conns[i].end[phase as usize].store(self.stamp(), Ordering::Relaxed);
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        if self.settled.fetch_add(1, Ordering::AcqRel) + 1 == self.target.load(Ordering::Acquire) {
            self.done.notify_one();
        }
    }

    /// One side of connection `i` is ESTABLISHED.
    fn side_up(&self, i: usize) {
        if self.conns[i].sides_up.fetch_add(1, Ordering::AcqRel) + 1 == 2 {
            self.settle(i, Phase::Connect, true);
        }
    }

    fn fail(&self, i: usize, phase: Phase, what: &str, e: &dyn std::fmt::Display) {
        eprintln!("{PROG}: {}: connection {i}: {what}: {e}", phase.name());
        self.settle(i, phase, false);
    }

    /// Waits until `target` connections are settled; an error on any
    /// failure or after the phase's bound.
    async fn wait_settled(&self, phase: Phase, target: usize) -> Result {
        let bound = PHASE_TIMEOUT + Duration::from_millis(target as u64);
        let wait = async {
            while self.settled.load(Ordering::Acquire) < target {
                self.done.notified().await;
            }
        };
        if tokio::time::timeout(bound, wait).await.is_err() {
            let n = self.settled.load(Ordering::Acquire);
            return Err(format!("{}: timed out: {n} of {target} settled", phase.name()).into());
        }
        match self.failed.load(Ordering::Acquire) {
            0 => Ok(()),
            n => Err(format!("{}: {n} connections failed", phase.name()).into()),
        }
    }

    /// A phase for `target` connections begins.
    fn reset_counts(&self, target: usize) {
        self.target.store(target, Ordering::Release);
        self.accepted.store(0, Ordering::Release);
        self.settled.store(0, Ordering::Release);
        self.failed.store(0, Ordering::Release);
    }
}

/// The passive side: accepts every request in a task of its own, until
/// the run is over (`stop`).
async fn serve(bench: Arc<Bench>, listener: Listener, stop: Arc<Notify>) {
    let stopped = stop.notified();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            incoming = listener.accept() => match incoming {
                Ok(incoming) => {
                    bench.accepted.fetch_add(1, Ordering::AcqRel);
                    bench.accepting.notify_one();
                    tokio::spawn(passive(bench.clone(), incoming));
                }
                Err(e) => eprintln!("{PROG}: accept: {e}"),
            },
        }
    }
}

/// One connection's passive side: the REP, the RTU, then the DREQ, answered
/// with a DREP; the connection then waits in its slot to be destroyed.
async fn passive(bench: Arc<Bench>, incoming: IncomingRequest) {
    let pd = incoming.private_data();
    let i = u32::from_be_bytes([pd[0], pd[1], pd[2], pd[3]]) as usize;
    if i >= bench.conns.len() || incoming.req().remote_qpn != active_qpn(i) {
        eprintln!("{PROG}: a REQ for connection {i}: no such connection");
        return;
    }
    let reply = Reply::new(passive_qpn(i));
    let mut conn = match incoming.accept(reply).await {
        Ok(conn) => conn,
        Err(e) => return bench.fail(i, Phase::Connect, "accept", &e),
    };
    bench.side_up(i);
    match conn.next_event().await {
        Ok(ib_cm::Event::DreqReceived { .. }) => {}
        Ok(other) => {
            return bench.fail(i, Phase::Disconnect, "passive side", &format!("{other:?}"));
        }
        Err(e) => return bench.fail(i, Phase::Disconnect, "passive side", &e),
    }
    if let Err(e) = conn.reply_disconnect(&[]) {
        return bench.fail(i, Phase::Disconnect, "reply_disconnect", &e);
    }
    *bench.sides[i].passive.lock() = Some(conn);
    let parked = bench.passive_parked.fetch_add(1, Ordering::AcqRel) + 1;
    if parked == bench.parked_target.load(Ordering::Acquire) {
        bench.done.notify_one();
    }
}

/// One connection's active side: the REP, answered with the RTU; then, once
/// the disconnect phase starts, the DREQ until the DREP. The connection then
/// waits in its slot to be destroyed.
async fn active(bench: Arc<Bench>, i: usize, pending: OutgoingRequest) {
    let conn = match pending.wait_reply().await {
        Ok(replied) => replied.confirm(&[]),
        Err(e) => Err(e),
    };
    let mut conn = match conn {
        Ok(conn) => conn,
        Err(e) => return bench.fail(i, Phase::Connect, "active side", &e),
    };
    let go = bench.go_disconnect.notified();
    bench.side_up(i);
    if !bench.disconnect.load(Ordering::Acquire) {
        go.await;
    }
    let c = &bench.conns[i];
    c.start[Phase::Disconnect as usize].store(bench.stamp(), Ordering::Relaxed);
    match conn.disconnect(&[]).await {
        Ok(_) => bench.settle(i, Phase::Disconnect, true),
        Err(e) => bench.fail(i, Phase::Disconnect, "disconnect", &e),
    }
    *bench.sides[i].active.lock() = Some(conn);
}

/// The REQ of connection `i`: the index in its private data, as the C
/// tool's.
fn request(path: Path, i: usize) -> ConnectRequest {
    ConnectRequest::builder(path, SERVICE_ID, active_qpn(i))
        .private_data(&(i as u32).to_be_bytes())
        .responder_resources(1)
        .initiator_depth(1)
        .remote_cm_response_timeout(CM_RESPONSE_TIMEOUT)
        .local_cm_response_timeout(CM_RESPONSE_TIMEOUT)
        .retry_count(7)
        .rnr_retry_count(7)
        .max_cm_retries(MAX_CM_RETRIES)
        .build()
}

/// The active side: runs the phases for connections `range`.
struct Active {
    bench: Arc<Bench>,
    device: Device,
    path: Path,
}

impl Active {
    fn create(&self, range: std::ops::Range<usize>) -> Result<Vec<IdleId>> {
        let mut ids = Vec::with_capacity(range.len());
        for i in range {
            let c = &self.bench.conns[i];
            c.start[Phase::Create as usize].store(self.bench.stamp(), Ordering::Relaxed);
            let id = self.device.create_id()?;
            c.end[Phase::Create as usize].store(self.bench.stamp(), Ordering::Relaxed);
            ids.push(id);
        }
        Ok(ids)
    }

    async fn connect(&self, first: usize, ids: Vec<IdleId>) -> Result {
        let n = ids.len();
        self.bench.reset_counts(n);
        for (k, id) in ids.into_iter().enumerate() {
            let i = first + k;
            let bench = self.bench.clone();
            bench.conns[i].start[Phase::Connect as usize].store(bench.stamp(), Ordering::Relaxed);
            // The passive side and the REPs run meanwhile, in this thread:
            // what the C tool's worker does while its main thread sends.
            if k % YIELD_EVERY == YIELD_EVERY - 1 {
                tokio::task::yield_now().await;
            }
            // Fewer unanswered REQs than the passive backlog holds.
            while k - bench.accepted.load(Ordering::Acquire).min(k) >= WINDOW {
                bench.accepting.notified().await;
            }
            let pending = match id.request(request(self.path, i)) {
                Ok(pending) => pending,
                Err(e) => {
                    bench.fail(i, Phase::Connect, "request", &e);
                    continue;
                }
            };
            tokio::spawn(active(bench, i, pending));
        }
        self.bench.wait_settled(Phase::Connect, n).await
    }

    /// Lets each connection's active task send its DREQ, in the order they
    /// were connected.
    async fn disconnect(&self, range: std::ops::Range<usize>) -> Result {
        let n = range.len();
        self.bench.reset_counts(n);
        let parked = self.bench.passive_parked.load(Ordering::Acquire);
        self.bench
            .parked_target
            .store(parked + n, Ordering::Release);
        self.bench.disconnect.store(true, Ordering::Release);
        self.bench.go_disconnect.notify_waiters();
        let settled = self.bench.wait_settled(Phase::Disconnect, n).await;
        self.bench.disconnect.store(false, Ordering::Release);
        settled
    }

    /// Drops both sides of each connection, timed; waits first for the
    /// passive sides' tasks to have put theirs back after the DREP.
    async fn destroy(&self, range: std::ops::Range<usize>, parked: usize) -> Result {
        let wait = async {
            while self.bench.passive_parked.load(Ordering::Acquire) < parked {
                self.bench.done.notified().await;
            }
        };
        tokio::time::timeout(PHASE_TIMEOUT, wait)
            .await
            .map_err(|_| "destroy: the passive sides did not come back")?;
        for i in range {
            let c = &self.bench.conns[i];
            let sides = &self.bench.sides[i];
            let (active, passive) = (sides.active.lock().take(), sides.passive.lock().take());
            c.start[Phase::Destroy as usize].store(self.bench.stamp(), Ordering::Relaxed);
            drop(active);
            drop(passive);
            c.end[Phase::Destroy as usize].store(self.bench.stamp(), Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A phase's row: total, rate, and latency statistics.
struct Row {
    total_ms: f64,
    per_sec: f64,
    avg_us: f64,
    min_us: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
}

fn row(bench: &Bench, phase: Phase, n: usize, phase_start: u64) -> Row {
    let p = phase as usize;
    let mut lat: Vec<u64> = bench.conns[..n]
        .iter()
        .map(|c| c.end[p].load(Ordering::Relaxed) - c.start[p].load(Ordering::Relaxed))
        .collect();
    let last_end = bench.conns[..n]
        .iter()
        .map(|c| c.end[p].load(Ordering::Relaxed))
        .max()
        .unwrap_or(phase_start);
    let sum: u64 = lat.iter().sum();
    lat.sort_unstable();
    let total = last_end - phase_start;
    let us = |ns: u64| ns as f64 / 1e3;
    Row {
        total_ms: total as f64 / 1e6,
        per_sec: if total > 0 {
            n as f64 * 1e9 / total as f64
        } else {
            0.0
        },
        avg_us: sum as f64 / n as f64 / 1e3,
        min_us: us(lat[0]),
        // Nearest-rank percentiles, as the C tool.
        p50_us: us(lat[(n * 50).div_ceil(100) - 1]),
        p99_us: us(lat[(n * 99).div_ceil(100) - 1]),
        max_us: us(lat[n - 1]),
    }
}

/// This process's resident set in bytes (/proc/self/statm); 0 if unknown.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Async,
    Handler,
}

struct Options {
    conns: usize,
    active: String,
    passive: String,
    warmup: bool,
    api: Api,
}

fn parse_args() -> Result<Options> {
    let mut o = Options {
        conns: 1000,
        active: "loop0".into(),
        passive: "loop1".into(),
        warmup: true,
        api: Api::Async,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg}: a value is missing"));
        match arg.as_str() {
            "-c" | "--connections" => {
                let v = value()?;
                o.conns = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_CONNS).contains(n))
                    .ok_or(format!(
                        "-c: expected 1 to {MAX_CONNS} connections, got '{v}'"
                    ))?;
            }
            "-d" | "--active-dev" => o.active = value()?,
            "-D" | "--passive-dev" => o.passive = value()?,
            "--no-warmup" => o.warmup = false,
            "--api" => {
                o.api = match value()?.as_str() {
                    "async" => Api::Async,
                    "handler" => Api::Handler,
                    v => return Err(format!("--api: expected async or handler, got '{v}'").into()),
                }
            }
            "-h" | "--help" => {
                println!(
                    "usage: cmtime [-c connections] [-d active_dev] [-D passive_dev] [--api async|handler] [--no-warmup]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unexpected argument '{other}'").into()),
        }
    }
    Ok(o)
}

fn current_thread() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn main() -> Result {
    let o = parse_args()?;
    let n = o.conns;
    // The last one is the warm-up connection.
    let bench = Arc::new(Bench {
        epoch: Instant::now(),
        conns: (0..=n).map(|_| Conn::default()).collect(),
        sides: match o.api {
            Api::Async => (0..=n).map(|_| AsyncSides::default()).collect(),
            Api::Handler => Vec::new(),
        },
        settled: AtomicUsize::new(0),
        target: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        passive_parked: AtomicUsize::new(0),
        parked_target: AtomicUsize::new(0),
        accepted: AtomicUsize::new(0),
        accepting: Notify::new(),
        done: Notify::new(),
        disconnect: AtomicBool::new(false),
        go_disconnect: Notify::new(),
    });

    let rt = current_thread()?;

    if o.api == Api::Handler {
        let run = handler_mode::run(bench.clone(), &o.active, &o.passive, n, o.warmup);
        let (starts, memory) = rt.block_on(run)?;
        print_table(&o, &bench, starts, memory);
        return Ok(());
    }

    let stop = Arc::new(Notify::new());
    let rows = rt.block_on(async {
        let passive_device = Device::open_tokio(&o.passive)?;
        let listener = passive_device.listen(SERVICE_ID)?;
        tokio::spawn(serve(bench.clone(), listener, stop.clone()));
        let device = Device::open_tokio(&o.active)?;
        let path = device.path_to(1, passive_device.gid(1, 0)?)?;
        let active = Active {
            bench: bench.clone(),
            device,
            path,
        };
        if o.warmup {
            let ids = active.create(n..n + 1)?;
            active.connect(n, ids).await?;
            active.disconnect(n..n + 1).await?;
            active.destroy(n..n + 1, 1).await?;
            bench.passive_parked.store(0, Ordering::Release);
        }
        let mut starts = [0u64; 4];
        let before = rss_bytes();
        starts[0] = bench.stamp();
        let ids = active.create(0..n)?;
        let created = rss_bytes();
        starts[1] = bench.stamp();
        active.connect(0, ids).await?;
        let connected = rss_bytes();
        starts[2] = bench.stamp();
        active.disconnect(0..n).await?;
        starts[3] = bench.stamp();
        active.destroy(0..n, n).await?;
        Result::Ok((starts, [before, created, connected]))
    });
    stop.notify_one();
    let (starts, memory) = rows?;

    print_table(&o, &bench, starts, memory);
    Ok(())
}

fn print_table(o: &Options, bench: &Bench, starts: [u64; 4], memory: [u64; 3]) {
    let n = o.conns;
    let loop_dev = |s: &str| s.starts_with("loop");
    let fabric = if loop_dev(&o.active) && loop_dev(&o.passive) {
        "the in-process fabric"
    } else {
        "RDMA devices"
    };
    println!(
        "{PROG}: {n} connections from {} to {} on {fabric},",
        o.active, o.passive
    );
    println!(
        "  both sides in this process, phase by phase{}",
        if o.warmup {
            ", after one untimed warm-up connection"
        } else {
            ""
        }
    );
    match o.api {
        Api::Async => {
            println!("  create id   Device::create_id() of each connection's active id");
            println!(
                "  connect     IdleId::request() until both sides are ESTABLISHED (REQ, REP, RTU)"
            );
            println!("  disconnect  Connection::disconnect().await until the DREP (DREQ, DREP)");
            println!("  destroy     dropping each connection's two Connections");
        }
        Api::Handler => {
            println!("  create id   Device::create_id_with() of each connection's active id");
            println!(
                "  connect     HandlerId::request() until both sides are ESTABLISHED (REQ, REP\n              \
                 from the passive handler, RTU from the active handler)"
            );
            println!(
                "  disconnect  CmId::send_disconnect() until DREP_RECEIVED (the DREP from the\n              \
                 passive handler)"
            );
            println!("  destroy     dropping each connection's two HandlerIds");
        }
    }
    println!(
        "  each phase starts its operation for all {n} connections at once (back to back),\n  \
         then waits for the last to complete: total(ms) runs from the first start to the\n  \
         last completion, ops/s = {n} / total; an operation's latency (avg to max) runs\n  \
         from its start to its completion, so in connect and disconnect it includes the\n  \
         time spent queued behind the operations started before it"
    );
    println!(
        "{:<12} {:>11} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "phase", "total(ms)", "ops/s", "avg(us)", "min(us)", "p50(us)", "p99(us)", "max(us)"
    );
    for (phase, start) in PHASES.iter().zip(starts) {
        let r = row(bench, *phase, n, start);
        println!(
            "{:<12} {:>11.2} {:>11.0} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            phase.name(),
            r.total_ms,
            r.per_sec,
            r.avg_us,
            r.min_us,
            r.p50_us,
            r.p99_us,
            r.max_us
        );
    }
    let [before, created, connected] = memory;
    if before != 0 && created != 0 && connected != 0 {
        let grown = connected as f64 - before as f64;
        println!(
            "memory: RSS {:.1} MiB before, {:.1} MiB with {n} connections established: {:.0} bytes/connection, {:.0} bytes/cm_id ({} cm_ids); {:.0} bytes per IDLE id",
            before as f64 / f64::from(1 << 20),
            connected as f64 / f64::from(1 << 20),
            grown / n as f64,
            grown / (2 * n) as f64,
            2 * n,
            (created as f64 - before as f64) / n as f64
        );
    }
}
