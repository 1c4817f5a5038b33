//! The harness of the `receive` fuzz target: arbitrary MADs fed into the
//! receive path of a device that has live connections in every state the
//! engine reaches.
//!
//! # The world
//!
//! Once per process two loop devices are opened, A (`loop10`) and B
//! (`loop11`). [`World::build`] sets up the connection set of [`format`]
//! (`S_*`): a listener on each device and pairs A→B left in IDLE, REQ_SENT,
//! REQ_RCVD, MRA_REQ_SENT / MRA_REQ_RCVD, REP_SENT, REP_RCVD, MRA_REP_SENT /
//! MRA_REP_RCVD, ESTABLISHED (RC, UC, XRC; via RTU or `ib_cm_notify`),
//! DREQ_SENT, DREQ_RCVD, TIMEWAIT, SIDR_REQ_SENT and SIDR_REQ_RCVD. States
//! are held by dropping MADs on the fabric (`drop_next`), by the handler's
//! plan (below), and by injecting the duplicates that trigger MRAs; timeouts
//! are long (retransmissions after ≥ 65 s, timewait 131 s) and the set is
//! rebuilt every [`REBUILD_EVERY_S`] seconds at the latest, so nothing times
//! out under the fuzzer. Every connection end has its own QPN.
//!
//! # One input
//!
//! Up to [`format::MAX_RECORDS`] records of [`format::RECORD`] bytes: a
//! selector byte, a flags byte, an attribute byte and up to 256 MAD bytes
//! (zero-padded). The selector picks a connection (a slot, or one of the ids
//! fuzzed REQs / SIDR_REQs created); the flags say whether to fix the MAD
//! header, whether to patch the connection's real comm IDs / QPNs / CA GUID /
//! service ID into the MAD (so the deep handler branches are reached, not only
//! "unknown id"), which device receives it and from which address; the
//! attribute byte may override the attribute ID. Each MAD goes through
//! `ib_cm::cm::fuzzing::receive`, then the harness waits for the worker to
//! drain what it caused (handler answers, MADs the peer device sends back).
//!
//! # The handler
//!
//! Every id has the same handler, which answers as an application would:
//! REQ_RECEIVED with a REP, REP_RECEIVED with an RTU, DREQ_RECEIVED with a
//! DREP, SIDR_REQ_RECEIVED with a SIDR_REP, and reads the private data, ARI
//! and additional info the event points at. The first private-data byte of the
//! received message picks another plan: hold (no answer), reject, prepare an
//! MRA, destroy the id by returning non-zero, or return `-ENOMEM`. Ids that
//! fuzzed MADs created destroy themselves (return 1) when their connection
//! ends (REJ, timeouts, TIMEWAIT_EXIT, SIDR_REP).
//!
//! # Crash, hang and leak detection
//!
//! - a panic anywhere (library, handler, harness) aborts the process;
//! - the worker must drain its queue within [`DRAIN_LIMIT`] (else: deadlock
//!   or a MAD storm between the two devices);
//! - `id_count()` and armed timers (`pending().1`) must stay below
//!   [`LEAK_BOUND`];
//! - at every rebuild, once every id the harness ever saw is destroyed,
//!   `id_count()` must be 0 and `pending()` must be `(0, 0)`: anything left is
//!   a leaked id or timer.
//!
//! The target is stateful (the connection set changes under the inputs and is
//! rebuilt periodically), so a crash input may need the inputs before it to
//! reproduce; the harness makes each MAD's effects complete before the next
//! (drain) to keep that rare.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ib_cm::abi::ib_cm_event_type::*;
use ib_cm::abi::ib_cm_state::{self, *};
use ib_cm::abi::{ib_event_type, ib_qp_type};
use ib_cm::cm::device::Device;
use ib_cm::cm::event::{CmEvent, EventParam};
use ib_cm::cm::fuzzing;
use ib_cm::cm::id::{CmIdPriv, Handler};
use ib_cm::cm::{self, RepParams, ReqParams, SidrRepParams, SidrReqParams};
use ib_cm::transport::MadAddr;
use ib_cm::transport::loopback::LoopIdentity;
use ib_cm::wire::{MAD_SIZE, Mad, Rep, Req, TransportType, attr, dreq, rej, rep, req, sidr_req};

pub use format::*;

/// The `switch` target's harness (the daemon's routing between tenants).
pub mod switch;

/// The service both listeners listen on.
pub const SERVICE_ID: u64 = 0x1234;
/// The first QPN handed out: every connection end gets its own QP, as in an
/// application (two connections from one QP are a stale connection to the CM).
pub const FIRST_QPN: u32 = 0x000a00;
/// Rebuild the connection set after this many inputs…
pub const REBUILD_EVERY_INPUTS: u64 = 250;
/// …or this many seconds (the held states' retransmissions come after ≥ 65 s)…
pub const REBUILD_EVERY_S: u64 = 30;
/// …or when fewer than this many slots are still in the state they were built for…
pub const MIN_USEFUL_SLOTS: usize = NSLOTS as usize * 3 / 4;
/// …or when fuzzed REQs created this many ids.
pub const MAX_SPAWNED: usize = 2000;
/// `id_count()` and armed timers above this are a leak.
pub const LEAK_BOUND: usize = 10_000;
/// The worker must drain its queue within this.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// A build step must reach its state within this.
const STEP_LIMIT: Duration = Duration::from_secs(10);

/// The input format, shared with `make_seeds`.
pub mod format {
    /// One record: selector, flags, attribute override, up to 256 MAD bytes.
    pub const RECORD: usize = 3 + 256;
    /// Records per input; bytes after these are ignored.
    pub const MAX_RECORDS: usize = 4;

    /// Flags bits 0-1: how to patch the selected connection's IDs into the MAD.
    pub const PATCH_MASK: u8 = 0x03;
    /// Leave the MAD as it is.
    pub const PATCH_NONE: u8 = 0;
    /// As the connection's peer would send it: local comm ID = our remote ID,
    /// remote comm ID = our local ID, and the QPN / CA GUID / service ID
    /// fields a handler checks (REQ, REP, DREQ, REJ with reason TIMEOUT,
    /// SIDR_REQ's request ID and service ID, SIDR_REP's request ID).
    pub const PATCH_PEER: u8 = 1;
    /// Only the remote comm ID = our local ID (a REP, MRA or REJ answering a
    /// REQ, whose peer ID we do not know yet). For a REQ: the peer's QPN, CA
    /// GUID and the service ID, with the fuzzed comm ID (a stale connection).
    pub const PATCH_REMOTE_ONLY: u8 = 2;
    /// Our own IDs the wrong way round (a reflected MAD).
    pub const PATCH_REFLECTED: u8 = 3;
    /// Bit 2: make bytes 0..4 a valid CM Send header.
    pub const FIX_HEADER: u8 = 0x04;
    /// Bit 3: the MAD comes from an address no device has.
    pub const FROM_NOWHERE: u8 = 0x08;
    /// Bit 4: deliver to the peer device of the selected connection instead.
    pub const CROSS: u8 = 0x10;
    /// Third byte: 0 keeps the MAD's attribute ID; 1..=11 sets REQ (0x10) …
    /// APR (0x1A); anything else keeps it.
    pub const ATTR_KEEP: u8 = 0;

    /// First private-data byte of a REQ / REP / DREQ / SIDR_REQ / LAP: what the
    /// receiving handler does. Anything else: the normal answer (REP / RTU /
    /// DREP / SIDR_REP).
    pub const PLAN_NORMAL: u8 = 0;
    pub const PLAN_HOLD: u8 = b'H';
    pub const PLAN_REJECT: u8 = b'R';
    /// The handler returns 1: the engine destroys the id.
    pub const PLAN_DESTROY: u8 = b'D';
    /// The handler returns -ENOMEM (a REQ_RCVD id goes away silently).
    pub const PLAN_ENOMEM: u8 = b'N';
    /// `ib_prepare_cm_mra()` (REQ / REP / LAP): the next duplicate gets an MRA.
    pub const PLAN_MRA: u8 = b'M';

    /// Selector values below `NSLOTS` pick a slot; larger ones pick one of
    /// the ids fuzzed REQs / SIDR_REQs created (newest first), or slot
    /// `sel % NSLOTS` if there is none. Device A sends the REQs, B listens.
    pub const S_A_IDLE: u8 = 0;
    pub const S_B_LISTEN: u8 = 1;
    pub const S_A_LISTEN: u8 = 2;
    /// A's REQ was lost.
    pub const S_A_REQ_SENT_LOST: u8 = 3;
    /// B holds the REQ (REQ_RCVD); A waits (REQ_SENT).
    pub const S_A_REQ_SENT: u8 = 4;
    pub const S_B_REQ_RCVD: u8 = 5;
    /// B's REP was lost: B REP_SENT, A still REQ_SENT.
    pub const S_A_REQ_SENT_REP_LOST: u8 = 6;
    pub const S_B_REP_SENT_LOST: u8 = 7;
    /// A holds the REP (REP_RCVD, no RTU yet); B REP_SENT.
    pub const S_A_REP_RCVD: u8 = 8;
    pub const S_B_REP_SENT: u8 = 9;
    pub const S_A_ESTABLISHED: u8 = 10;
    pub const S_B_ESTABLISHED: u8 = 11;
    /// A's DREQ was lost: A DREQ_SENT (with `set_disconnect_timeout`), B ESTABLISHED.
    pub const S_A_DREQ_SENT_LOST: u8 = 12;
    pub const S_B_ESTABLISHED_2: u8 = 13;
    /// B holds the DREQ: A DREQ_SENT, B DREQ_RCVD.
    pub const S_A_DREQ_SENT: u8 = 14;
    pub const S_B_DREQ_RCVD: u8 = 15;
    pub const S_A_TIMEWAIT: u8 = 16;
    pub const S_B_TIMEWAIT: u8 = 17;
    /// A's RTU was lost: A ESTABLISHED, B REP_SENT.
    pub const S_A_ESTABLISHED_RTU_LOST: u8 = 18;
    pub const S_B_REP_SENT_RTU_LOST: u8 = 19;
    /// B disconnects and its DREQ is lost: B DREQ_SENT, A ESTABLISHED.
    pub const S_B_DREQ_SENT_LOST: u8 = 20;
    pub const S_A_ESTABLISHED_3: u8 = 21;
    /// RTU lost, then B is established by `ib_cm_notify(COMM_EST)`.
    pub const S_A_ESTABLISHED_4: u8 = 22;
    pub const S_B_USER_ESTABLISHED: u8 = 23;
    /// An XRC connection (B's id is XRC_TGT).
    pub const S_A_XRC_ESTABLISHED: u8 = 24;
    pub const S_B_XRC_ESTABLISHED: u8 = 25;
    /// A UC connection where B holds A's DREQ.
    pub const S_A_UC_DREQ_SENT: u8 = 26;
    pub const S_B_UC_DREQ_RCVD: u8 = 27;
    /// B holds A's SIDR_REQ.
    pub const S_A_SIDR_REQ_SENT: u8 = 28;
    pub const S_B_SIDR_REQ_RCVD: u8 = 29;
    /// B prepared an MRA and answered A's duplicate REQ with it.
    pub const S_A_MRA_REQ_RCVD: u8 = 30;
    pub const S_B_MRA_REQ_SENT: u8 = 31;
    /// A prepared an MRA and answered B's duplicate REP with it.
    pub const S_A_MRA_REP_SENT: u8 = 32;
    pub const S_B_MRA_REP_RCVD: u8 = 33;
    pub const NSLOTS: u8 = 34;
}

/// The ids the handler has seen; locked only briefly, never while calling
/// into the library (a handler waiting for it would deadlock `destroy_id`).
#[derive(Default)]
struct Registry {
    /// Every id a REQ created (build and fuzz alike), in creation order.
    spawned: Vec<Arc<CmIdPriv>>,
    /// Addresses of the ids of the current slots.
    persistent: HashSet<usize>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    let m = REGISTRY.get_or_init(Default::default);
    // A panic aborts the process, so a poisoned lock is never seen; be safe.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Events delivered, by `ib_cm_event_type` (for `IBCM_FUZZ_STATS`).
static EVENTS: [AtomicU64; 18] = [const { AtomicU64::new(0) }; 18];

/// Reads what an application reads of an event: the private data and the
/// ARI / additional-info ranges the event points into its MAD.
fn touch(ev: &CmEvent) -> u8 {
    let mut sum = ev
        .private_data()
        .map_or(0, |pd| pd.iter().fold(0u8, |a, b| a ^ b));
    let range = match &ev.param {
        EventParam::RejRcvd(r) => Some(r.ari.clone()),
        EventParam::SidrRepRcvd(r) => Some(r.info.clone()),
        EventParam::AprRcvd { info, .. } => Some(info.clone()),
        _ => None,
    };
    if let (Some(range), Some(mad)) = (range, ev.mad.as_ref()) {
        sum ^= mad[range].iter().fold(0u8, |a, b| a ^ b);
    }
    std::hint::black_box(sum)
}

/// The one handler of every id: answers like an application, never panics.
fn handle(id: &Arc<CmIdPriv>, ev: &CmEvent) -> i32 {
    if let Some(n) = EVENTS.get(ev.event as usize) {
        n.fetch_add(1, Ordering::Relaxed);
    }
    touch(ev);
    let pd = ev.private_data().unwrap_or(&[]);
    let plan = pd.first().copied().unwrap_or(PLAN_NORMAL);
    let echo = &pd[..pd.len().min(8)];
    match ev.event {
        IB_CM_REQ_RECEIVED => {
            registry().spawned.push(id.clone());
            match plan {
                PLAN_HOLD => 0,
                PLAN_REJECT => {
                    let _ = cm::send_rej(id, 28, &[], echo);
                    0
                }
                PLAN_DESTROY => 1,
                PLAN_ENOMEM => -12,
                PLAN_MRA => {
                    let _ = cm::prepare_mra(id);
                    0
                }
                _ => {
                    // The REP's first private byte is the plan for the
                    // active side's REP handler: the REQ's second byte.
                    let next = pd.get(1).copied().unwrap_or(PLAN_NORMAL);
                    let _ = cm::send_rep(id, &rep_params(next));
                    0
                }
            }
        }
        IB_CM_REP_RECEIVED => match plan {
            PLAN_HOLD => 0,
            PLAN_REJECT => {
                let _ = cm::send_rej(id, 28, &[1, 2, 3], echo);
                0
            }
            PLAN_DESTROY => 1,
            PLAN_MRA => {
                let _ = cm::prepare_mra(id);
                0
            }
            _ => {
                let _ = cm::send_rtu(id, echo);
                0
            }
        },
        IB_CM_DREQ_RECEIVED => match plan {
            PLAN_HOLD => 0,
            PLAN_DESTROY => 1,
            _ => {
                let _ = cm::send_drep(id, Some(echo));
                0
            }
        },
        IB_CM_LAP_RECEIVED => match plan {
            PLAN_DESTROY => 1,
            PLAN_MRA => {
                // The repeated LAP gets an MRA.
                let _ = cm::prepare_mra(id);
                0
            }
            _ => 0, // nothing can answer a LAP
        },
        IB_CM_SIDR_REQ_RECEIVED => {
            registry().spawned.push(id.clone());
            match plan {
                PLAN_HOLD => 0,
                PLAN_DESTROY => 1,
                _ => {
                    let p = SidrRepParams {
                        qp_num: next_qpn(),
                        qkey: 0x8001_0000,
                        status: if plan == PLAN_REJECT { 2 } else { 0 },
                        info: echo.to_vec(),
                        private_data: echo.to_vec(),
                        ece: (0, 0),
                    };
                    let _ = cm::send_sidr_rep(id, &p);
                    0
                }
            }
        }
        IB_CM_REJ_RECEIVED
        | IB_CM_REQ_ERROR
        | IB_CM_REP_ERROR
        | IB_CM_DREQ_ERROR
        | IB_CM_TIMEWAIT_EXIT
        | IB_CM_SIDR_REP_RECEIVED
        | IB_CM_SIDR_REQ_ERROR => {
            // A connection a fuzzed MAD made is over: the application frees it.
            let persistent = registry().persistent.contains(&id.addr());
            i32::from(!persistent)
        }
        _ => 0,
    }
}

fn handler() -> Handler {
    Arc::new(handle)
}

/// A new QPN (24 bits, never 0 or 1).
fn next_qpn() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(FIRST_QPN);
    loop {
        let qpn = NEXT.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        if qpn > 1 {
            return qpn;
        }
    }
}

fn rep_params(plan: u8) -> RepParams {
    RepParams {
        qp_num: next_qpn(),
        starting_psn: 0x2000,
        private_data: vec![plan],
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 5,
        ..RepParams::default()
    }
}

/// One connection end the fuzzer can aim at.
pub struct Slot {
    pub name: &'static str,
    pub id: Arc<CmIdPriv>,
    /// 0: A, 1: B.
    pub dev: usize,
    pub want: ib_cm_state,
}

/// What the patching needs to know of the selected id.
struct View {
    local_id: u32,
    remote_id: u32,
    local_qpn: u32,
    remote_qpn: u32,
    peer_guid: u64,
}

pub struct World {
    devs: [Arc<Device>; 2],
    slots: Vec<Slot>,
    nowhere: MadAddr,
    inputs_since_build: u64,
    built_at: Instant,
    pub builds: u64,
    pub inputs: u64,
    /// Rebuilds by reason (`Rebuild as usize`).
    pub reasons: [u64; 4],
    /// Time spent tearing down and rebuilding.
    pub rebuild_time: Duration,
}

/// Why the connection set was rebuilt.
#[derive(Clone, Copy)]
pub enum Rebuild {
    Inputs,
    Age,
    Spawned,
    Degraded,
}

impl World {
    /// Opens the devices (once per process) and builds the connection set.
    pub fn open() -> Self {
        let a = cm::open_device("loop10").expect("open loop10");
        let b = cm::open_device("loop11").expect("open loop11");
        let nowhere_id = LoopIdentity::from_name("loop3000").unwrap();
        let mut world = Self {
            devs: [a, b],
            slots: Vec::new(),
            nowhere: MadAddr {
                dlid: nowhere_id.lid,
                dgid: nowhere_id.gid,
                ..MadAddr::default()
            },
            inputs_since_build: 0,
            built_at: Instant::now(),
            builds: 0,
            inputs: 0,
            reasons: [0; 4],
            rebuild_time: Duration::ZERO,
        };
        world.build();
        world
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Runs one fuzz input.
    pub fn run(&mut self, data: &[u8]) {
        if let Some(why) = self.needs_rebuild() {
            self.reasons[why as usize] += 1;
            let start = Instant::now();
            self.teardown();
            self.build();
            self.rebuild_time += start.elapsed();
            self.stats();
        }
        for record in data.chunks(RECORD).take(MAX_RECORDS) {
            if record.len() < 3 {
                break;
            }
            self.feed(record[0], record[1], record[2], &record[3..]);
        }
        self.inputs += 1;
        self.inputs_since_build += 1;
        check_bounds();
    }

    /// Why the connection set must be rebuilt now, if it must.
    fn needs_rebuild(&self) -> Option<Rebuild> {
        if self.inputs_since_build >= REBUILD_EVERY_INPUTS {
            return Some(Rebuild::Inputs);
        }
        if self.built_at.elapsed() >= Duration::from_secs(REBUILD_EVERY_S) {
            return Some(Rebuild::Age);
        }
        if registry().spawned.len() >= MAX_SPAWNED {
            return Some(Rebuild::Spawned);
        }
        let useful = self
            .slots
            .iter()
            .filter(|s| !s.id.is_destroyed() && s.id.state() == s.want)
            .count();
        (useful < MIN_USEFUL_SLOTS).then_some(Rebuild::Degraded)
    }

    /// With `IBCM_FUZZ_STATS=1`: one line per 100 rebuilds on stderr.
    fn stats(&self) {
        static ON: OnceLock<bool> = OnceLock::new();
        if !*ON.get_or_init(|| std::env::var_os("IBCM_FUZZ_STATS").is_some()) {
            return;
        }
        if !self.builds.is_multiple_of(100) {
            return;
        }
        let mut rx = 0;
        let mut dup = 0;
        let mut unmatched = 0;
        let mut malformed = 0;
        for dev in &self.devs {
            let c = dev.counters(1).expect("port 1").snapshot();
            rx += c.rx_msgs.iter().sum::<u64>();
            dup += c.rx_duplicates.iter().sum::<u64>();
            unmatched += c.rx_unmatched;
            malformed += c.rx_malformed;
        }
        let events: Vec<u64> = EVENTS.iter().map(|n| n.load(Ordering::Relaxed)).collect();
        eprintln!("ib_cm_fuzz: events by ib_cm_event_type: {events:?}");
        eprintln!(
            "ib_cm_fuzz: {} inputs, {} builds in {:?} (inputs {}, age {}, spawned {}, degraded {}); \
             rx {rx} (duplicate {dup}, unmatched {unmatched}), malformed {malformed}",
            self.inputs,
            self.builds,
            self.rebuild_time,
            self.reasons[0],
            self.reasons[1],
            self.reasons[2],
            self.reasons[3],
        );
    }

    /// The id the selector picks and its device.
    fn pick(&self, sel: u8) -> (Arc<CmIdPriv>, usize) {
        if sel < NSLOTS {
            let s = &self.slots[usize::from(sel)];
            return (s.id.clone(), s.dev);
        }
        let spawned = {
            let r = registry();
            let n = r.spawned.len();
            (n > 0).then(|| r.spawned[n - 1 - usize::from(sel - NSLOTS) % n].clone())
        };
        match spawned {
            Some(id) => {
                let dev = usize::from(!Arc::ptr_eq(&id.device, &self.devs[0]));
                (id, dev)
            }
            None => {
                let s = &self.slots[usize::from(sel % NSLOTS)];
                (s.id.clone(), s.dev)
            }
        }
    }

    /// One record: build the MAD, hand it to a device, wait for the worker.
    fn feed(&mut self, sel: u8, flags: u8, attr_sel: u8, bytes: &[u8]) {
        let mut mad: Mad = [0; MAD_SIZE];
        let n = bytes.len().min(MAD_SIZE);
        mad[..n].copy_from_slice(&bytes[..n]);
        if flags & FIX_HEADER != 0 {
            mad[..4].copy_from_slice(&ib_cm::wire::new_mad(0, 0, 0)[..4]);
        }
        if (1..=11).contains(&attr_sel) {
            let attr_id = attr::REQ + u16::from(attr_sel - 1);
            mad[16..18].copy_from_slice(&attr_id.to_be_bytes());
        }
        let (id, dev) = self.pick(sel);
        let patch = flags & PATCH_MASK;
        if patch != PATCH_NONE {
            let view = {
                let l = id.lock();
                View {
                    local_id: l.inner.local_id,
                    remote_id: l.inner.remote_id,
                    local_qpn: l.inner.local_qpn,
                    remote_qpn: l.inner.remote_qpn,
                    peer_guid: if l.inner.remote_ca_guid != 0 {
                        l.inner.remote_ca_guid
                    } else {
                        self.devs[1 - dev].node_guid
                    },
                }
            };
            patch_ids(&mut mad, patch, &view);
        }
        let to = if flags & CROSS != 0 { 1 - dev } else { dev };
        let from = if flags & FROM_NOWHERE != 0 {
            self.nowhere
        } else {
            fuzzing::address_of(&self.devs[1 - to])
        };
        fuzzing::receive(&self.devs[to], from, &mad);
        drain();
    }

    /// Destroys every id (slots, listeners' children, fuzz-made ids) and
    /// checks that nothing is left: no id, no queued work, no armed timer.
    pub fn teardown(&mut self) {
        let slots = std::mem::take(&mut self.slots);
        registry().persistent.clear();
        for s in &slots {
            cm::destroy_id(&s.id, 0);
        }
        drop(slots);
        let deadline = Instant::now() + DRAIN_LIMIT;
        loop {
            // Handlers may still be adding ids: destroy until none appear.
            let spawned = std::mem::take(&mut registry().spawned);
            for id in &spawned {
                cm::destroy_id(id, 0);
            }
            drain();
            if registry().spawned.is_empty() && cm::id_count() == 0 && cm::pending() == (0, 0) {
                break;
            }
            if Instant::now() > deadline {
                panic!(
                    "leak: after destroying every id, {} ids remain (want 0) and \
                     pending() = {:?} (want (0, 0)); {} ids still registered",
                    cm::id_count(),
                    cm::pending(),
                    registry().spawned.len()
                );
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Builds the connection set of `format::S_*`.
    pub fn build(&mut self) {
        let [a, b] = self.devs.clone();
        for dev in [&a, &b] {
            for attr_id in [attr::REQ, attr::REP, attr::RTU, attr::DREQ, attr::DREP] {
                dev.drop_next(attr_id, 0).expect("drop_next");
            }
        }
        self.slots.clear();
        let rc = ib_qp_type::IB_QPT_RC as i32;

        let idle = self.new_id(0);
        self.push(S_A_IDLE, "A idle", &idle, 0, IB_CM_IDLE);
        let lb = self.new_id(1);
        cm::listen(&lb, SERVICE_ID).expect("listen on B");
        self.push(S_B_LISTEN, "B listener", &lb, 1, IB_CM_LISTEN);
        let la = self.new_id(0);
        cm::listen(&la, SERVICE_ID).expect("listen on A");
        self.push(S_A_LISTEN, "A listener", &la, 0, IB_CM_LISTEN);

        // REQ lost.
        let x = self.new_id(0);
        a.drop_next(attr::REQ, 1).unwrap();
        self.send_req(&x, rc, [PLAN_NORMAL, PLAN_NORMAL]);
        self.push(
            S_A_REQ_SENT_LOST,
            "A REQ_SENT (REQ lost)",
            &x,
            0,
            IB_CM_REQ_SENT,
        );

        // B holds the REQ.
        let (x, p) = self.req_pair(rc, [PLAN_HOLD, PLAN_NORMAL]);
        self.push(S_A_REQ_SENT, "A REQ_SENT", &x, 0, IB_CM_REQ_SENT);
        self.push(S_B_REQ_RCVD, "B REQ_RCVD", &p, 1, IB_CM_REQ_RCVD);

        // B's REP lost.
        b.drop_next(attr::REP, 1).unwrap();
        let (x, p) = self.req_pair(rc, [PLAN_NORMAL, PLAN_NORMAL]);
        self.push(
            S_A_REQ_SENT_REP_LOST,
            "A REQ_SENT (REP lost)",
            &x,
            0,
            IB_CM_REQ_SENT,
        );
        self.push(
            S_B_REP_SENT_LOST,
            "B REP_SENT (REP lost)",
            &p,
            1,
            IB_CM_REP_SENT,
        );

        // A holds the REP.
        let (x, p) = self.req_pair(rc, [PLAN_NORMAL, PLAN_HOLD]);
        self.push(S_A_REP_RCVD, "A REP_RCVD", &x, 0, IB_CM_REP_RCVD);
        self.push(S_B_REP_SENT, "B REP_SENT", &p, 1, IB_CM_REP_SENT);

        let (x, p) = self.connect(rc);
        self.push(S_A_ESTABLISHED, "A ESTABLISHED", &x, 0, IB_CM_ESTABLISHED);
        self.push(S_B_ESTABLISHED, "B ESTABLISHED", &p, 1, IB_CM_ESTABLISHED);

        // A's DREQ lost.
        let (x, p) = self.connect(rc);
        a.drop_next(attr::DREQ, 1).unwrap();
        cm::set_disconnect_timeout(&x, 120_000, 3).expect("set_disconnect_timeout");
        cm::send_dreq(&x, None).expect("send_dreq");
        self.push(
            S_A_DREQ_SENT_LOST,
            "A DREQ_SENT (DREQ lost)",
            &x,
            0,
            IB_CM_DREQ_SENT,
        );
        self.push(
            S_B_ESTABLISHED_2,
            "B ESTABLISHED (DREQ lost)",
            &p,
            1,
            IB_CM_ESTABLISHED,
        );

        // B holds A's DREQ.
        let (x, p) = self.connect(rc);
        cm::send_dreq(&x, Some(&[PLAN_HOLD])).expect("send_dreq");
        self.push(S_A_DREQ_SENT, "A DREQ_SENT", &x, 0, IB_CM_DREQ_SENT);
        self.push(S_B_DREQ_RCVD, "B DREQ_RCVD", &p, 1, IB_CM_DREQ_RCVD);

        // Disconnected both ways: TIMEWAIT (131 s).
        let (x, p) = self.connect(rc);
        cm::send_dreq(&x, Some(&[PLAN_NORMAL])).expect("send_dreq");
        self.push(S_A_TIMEWAIT, "A TIMEWAIT", &x, 0, IB_CM_TIMEWAIT);
        self.push(S_B_TIMEWAIT, "B TIMEWAIT", &p, 1, IB_CM_TIMEWAIT);

        // A's RTU lost.
        a.drop_next(attr::RTU, 1).unwrap();
        let (x, p) = self.req_pair(rc, [PLAN_NORMAL, PLAN_NORMAL]);
        self.push(
            S_A_ESTABLISHED_RTU_LOST,
            "A ESTABLISHED (RTU lost)",
            &x,
            0,
            IB_CM_ESTABLISHED,
        );
        self.push(
            S_B_REP_SENT_RTU_LOST,
            "B REP_SENT (RTU lost)",
            &p,
            1,
            IB_CM_REP_SENT,
        );

        // B disconnects, its DREQ is lost.
        let (x, p) = self.connect(rc);
        b.drop_next(attr::DREQ, 1).unwrap();
        cm::send_dreq(&p, None).expect("send_dreq");
        self.push(
            S_B_DREQ_SENT_LOST,
            "B DREQ_SENT (DREQ lost)",
            &p,
            1,
            IB_CM_DREQ_SENT,
        );
        self.push(
            S_A_ESTABLISHED_3,
            "A ESTABLISHED (B's DREQ lost)",
            &x,
            0,
            IB_CM_ESTABLISHED,
        );

        // RTU lost; B established by ib_cm_notify.
        a.drop_next(attr::RTU, 1).unwrap();
        let (x, p) = self.req_pair(rc, [PLAN_NORMAL, PLAN_NORMAL]);
        self.wait_state(&p, IB_CM_REP_SENT, "B REP_SENT before notify");
        cm::notify(&p, ib_event_type::IB_EVENT_COMM_EST as i32).expect("notify");
        self.push(
            S_A_ESTABLISHED_4,
            "A ESTABLISHED (RTU lost)",
            &x,
            0,
            IB_CM_ESTABLISHED,
        );
        self.push(
            S_B_USER_ESTABLISHED,
            "B ESTABLISHED (notify)",
            &p,
            1,
            IB_CM_ESTABLISHED,
        );

        let (x, p) = self.connect(ib_qp_type::IB_QPT_XRC_INI as i32);
        self.push(
            S_A_XRC_ESTABLISHED,
            "A XRC ESTABLISHED",
            &x,
            0,
            IB_CM_ESTABLISHED,
        );
        self.push(
            S_B_XRC_ESTABLISHED,
            "B XRC_TGT ESTABLISHED",
            &p,
            1,
            IB_CM_ESTABLISHED,
        );

        let (x, p) = self.connect(ib_qp_type::IB_QPT_UC as i32);
        cm::send_dreq(&x, Some(&[PLAN_HOLD])).expect("send_dreq");
        self.push(S_A_UC_DREQ_SENT, "A UC DREQ_SENT", &x, 0, IB_CM_DREQ_SENT);
        self.push(S_B_UC_DREQ_RCVD, "B UC DREQ_RCVD", &p, 1, IB_CM_DREQ_RCVD);

        // B holds A's SIDR_REQ.
        let x = self.new_id(0);
        let p = SidrReqParams {
            path: self.path(),
            service_id: SERVICE_ID,
            timeout_ms: 120_000,
            private_data: vec![PLAN_HOLD],
            max_cm_retries: 15,
        };
        cm::send_sidr_req(&x, &p).expect("send_sidr_req");
        let local_id = x.lock().inner.local_id;
        let p = self.wait_spawned(local_id, "B made no id for A's SIDR_REQ");
        self.push(
            S_A_SIDR_REQ_SENT,
            "A SIDR_REQ_SENT",
            &x,
            0,
            IB_CM_SIDR_REQ_SENT,
        );
        self.push(
            S_B_SIDR_REQ_RCVD,
            "B SIDR_REQ_RCVD",
            &p,
            1,
            IB_CM_SIDR_REQ_RCVD,
        );

        // B prepares an MRA; A's (injected) duplicate REQ gets it.
        let (x, p) = self.req_pair(rc, [PLAN_MRA, PLAN_NORMAL]);
        self.wait_state(&p, IB_CM_MRA_REQ_SENT, "B MRA_REQ_SENT");
        let dup = {
            let l = x.lock();
            Req {
                local_comm_id: l.inner.local_id,
                service_id: SERVICE_ID,
                local_ca_guid: a.node_guid,
                local_qpn: l.inner.local_qpn,
                transport_service_type: TransportType::Rc,
                ..Req::default()
            }
            .encode(l.inner.tid)
        };
        fuzzing::receive(&b, fuzzing::address_of(&a), &dup);
        self.push(
            S_A_MRA_REQ_RCVD,
            "A MRA_REQ_RCVD",
            &x,
            0,
            IB_CM_MRA_REQ_RCVD,
        );
        self.push(
            S_B_MRA_REQ_SENT,
            "B MRA_REQ_SENT",
            &p,
            1,
            IB_CM_MRA_REQ_SENT,
        );

        // A prepares an MRA; B's (injected) duplicate REP gets it.
        let (x, p) = self.req_pair(rc, [PLAN_NORMAL, PLAN_MRA]);
        self.wait_state(&x, IB_CM_MRA_REP_SENT, "A MRA_REP_SENT");
        let dup = {
            let l = p.lock();
            Rep {
                local_comm_id: l.inner.local_id,
                remote_comm_id: l.inner.remote_id,
                local_qpn: l.inner.local_qpn,
                local_ca_guid: b.node_guid,
                ..Rep::default()
            }
            .encode(l.inner.tid)
        };
        fuzzing::receive(&a, fuzzing::address_of(&b), &dup);
        self.push(
            S_A_MRA_REP_SENT,
            "A MRA_REP_SENT",
            &x,
            0,
            IB_CM_MRA_REP_SENT,
        );
        self.push(
            S_B_MRA_REP_RCVD,
            "B MRA_REP_RCVD",
            &p,
            1,
            IB_CM_MRA_REP_RCVD,
        );

        assert_eq!(self.slots.len(), usize::from(NSLOTS));
        drain();
        for s in &self.slots {
            self.wait_state(&s.id, s.want, s.name);
        }
        self.inputs_since_build = 0;
        self.built_at = Instant::now();
        self.builds += 1;
    }

    fn new_id(&self, dev: usize) -> Arc<CmIdPriv> {
        cm::create_id(&self.devs[dev], handler()).expect("the device is open")
    }

    fn push(
        &mut self,
        index: u8,
        name: &'static str,
        id: &Arc<CmIdPriv>,
        dev: usize,
        want: ib_cm_state,
    ) {
        assert_eq!(self.slots.len(), usize::from(index), "slot order");
        registry().persistent.insert(id.addr());
        self.slots.push(Slot {
            name,
            id: id.clone(),
            dev,
            want,
        });
    }

    /// A's REQ with long timeouts; `plans` go in its first two private bytes.
    /// A's path to B, with a long packet lifetime: timewait lasts
    /// convert_to_ms(25) = 131 s, REQ retries come after 2 · 65 s + 65 s.
    fn path(&self) -> ib_cm::cm::path::Path {
        let [a, b] = &self.devs;
        let mut path = a.init_path(1, &b.ports[0].gids[0].gid).expect("init_path");
        path.packet_life_time = 24;
        path
    }

    fn send_req(&self, id: &Arc<CmIdPriv>, qp_type: i32, plans: [u8; 2]) {
        // B's REP retries come after convert_to_ms(24) = 65 s.
        let p = ReqParams {
            primary_path: self.path(),
            service_id: SERVICE_ID,
            qp_num: next_qpn(),
            qp_type,
            starting_psn: 0x1000,
            private_data: plans.to_vec(),
            responder_resources: 4,
            initiator_depth: 2,
            remote_cm_response_timeout: 24,
            local_cm_response_timeout: 24,
            retry_count: 7,
            rnr_retry_count: 6,
            max_cm_retries: 15,
            ..ReqParams::default()
        };
        cm::send_req(id, &p).expect("send_req");
    }

    /// A new A id sends a REQ; returns it and the id B made for it.
    fn req_pair(&self, qp_type: i32, plans: [u8; 2]) -> (Arc<CmIdPriv>, Arc<CmIdPriv>) {
        let x = self.new_id(0);
        self.send_req(&x, qp_type, plans);
        let local_id = x.lock().inner.local_id;
        let p = self.wait_spawned(local_id, "B made no id for A's REQ");
        (x, p)
    }

    /// The id B's listener made for the request of A's id `remote_id`.
    fn wait_spawned(&self, remote_id: u32, what: &str) -> Arc<CmIdPriv> {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            let found = registry()
                .spawned
                .iter()
                .find(|id| id.lock().inner.remote_id == remote_id)
                .cloned();
            if let Some(p) = found {
                return p;
            }
            assert!(Instant::now() < deadline, "build: {what}");
            std::thread::yield_now();
        }
    }

    /// An established pair.
    fn connect(&self, qp_type: i32) -> (Arc<CmIdPriv>, Arc<CmIdPriv>) {
        let (x, p) = self.req_pair(qp_type, [PLAN_NORMAL, PLAN_NORMAL]);
        self.wait_state(&x, IB_CM_ESTABLISHED, "A ESTABLISHED");
        self.wait_state(&p, IB_CM_ESTABLISHED, "B ESTABLISHED");
        (x, p)
    }

    fn wait_state(&self, id: &Arc<CmIdPriv>, want: ib_cm_state, what: &str) {
        let deadline = Instant::now() + STEP_LIMIT;
        while id.state() != want {
            assert!(
                Instant::now() < deadline,
                "build: {what}: id in {:?}, want {want:?}",
                id.state()
            );
            std::thread::yield_now();
        }
    }
}

/// Writes `v` big-endian at MAD offset `at`.
fn put32(mad: &mut Mad, at: usize, v: u32) {
    mad[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Patches the selected id's IDs into the MAD (see `format::PATCH_*`).
fn patch_ids(mad: &mut Mad, mode: u8, v: &View) {
    const LOCAL: usize = 24;
    const REMOTE: usize = 28;
    let attr_id = u16::from_be_bytes([mad[16], mad[17]]);
    match (mode, attr_id) {
        // SIDR has one ID, the requester's local comm ID, at offset 0.
        (PATCH_PEER, attr::SIDR_REQ) => {
            put32(mad, LOCAL, v.remote_id);
            sidr_req::CM_SIDR_REQ_SERVICEID.set(mad, SERVICE_ID);
        }
        (PATCH_PEER | PATCH_REMOTE_ONLY, attr::SIDR_REP) => put32(mad, LOCAL, v.local_id),
        (PATCH_REFLECTED, attr::SIDR_REQ | attr::SIDR_REP) => put32(mad, LOCAL, v.local_id),
        (PATCH_PEER, _) => {
            // A peer that does not know our ID yet keeps its own (fuzzed) one.
            if v.remote_id != 0 {
                put32(mad, LOCAL, v.remote_id);
            }
            if attr_id != attr::REQ {
                put32(mad, REMOTE, v.local_id);
            }
            match attr_id {
                attr::REQ => {
                    req::CM_REQ_SERVICE_ID.set(mad, SERVICE_ID);
                    req::CM_REQ_LOCAL_CA_GUID.set(mad, v.peer_guid);
                    if v.remote_qpn != 0 {
                        req::CM_REQ_LOCAL_QPN.set(mad, v.remote_qpn);
                    }
                }
                attr::REP => {
                    rep::CM_REP_LOCAL_CA_GUID.set(mad, v.peer_guid);
                    if v.remote_qpn != 0 {
                        rep::CM_REP_LOCAL_QPN.set(mad, v.remote_qpn);
                    }
                }
                attr::DREQ => dreq::CM_DREQ_REMOTE_QPN_EECN.set(mad, v.local_qpn),
                // IB_CM_REJ_TIMEOUT: the ARI names the rejecting CA.
                attr::REJ if rej::CM_REJ_REASON.get(mad) == 4 => {
                    let mut ari = rej::CM_REJ_ARI.get(mad);
                    ari[..8].copy_from_slice(&v.peer_guid.to_be_bytes());
                    rej::CM_REJ_ARI.set(mad, &ari);
                    rej::CM_REJ_REJECTED_INFO_LENGTH.set(mad, 8);
                }
                _ => {}
            }
        }
        (PATCH_REMOTE_ONLY, attr::REQ) => {
            // A new connection (fuzzed comm ID) from the peer's QP of this
            // one: the stale-connection branch.
            req::CM_REQ_SERVICE_ID.set(mad, SERVICE_ID);
            req::CM_REQ_LOCAL_CA_GUID.set(mad, v.peer_guid);
            req::CM_REQ_LOCAL_QPN.set(mad, v.remote_qpn);
        }
        (PATCH_REMOTE_ONLY, _) => put32(mad, REMOTE, v.local_id),
        (PATCH_REFLECTED, _) => {
            put32(mad, LOCAL, v.local_id);
            put32(mad, REMOTE, v.remote_id);
        }
        _ => {}
    }
}

/// Waits until the worker has no queued work (what the last MAD caused: the
/// handlers' answers, the peer device's replies). A queue that does not drain
/// is a deadlock or a MAD storm.
pub fn drain() {
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut idle_checks = 0;
    while idle_checks < 2 {
        let (queued, _) = cm::pending();
        if queued == 0 {
            idle_checks += 1;
        } else {
            idle_checks = 0;
            if queued > LEAK_BOUND {
                panic!("worker queue holds {queued} items (bound {LEAK_BOUND}): a MAD storm?");
            }
            if Instant::now() > deadline {
                panic!("worker did not drain its queue in {DRAIN_LIMIT:?}: {queued} items left");
            }
        }
        std::thread::yield_now();
    }
}

/// Fixed bounds on live ids and armed timers.
pub fn check_bounds() {
    let ids = cm::id_count();
    let (_, timers) = cm::pending();
    assert!(
        ids < LEAK_BOUND,
        "leak: {ids} cm_ids exist (bound {LEAK_BOUND})"
    );
    assert!(
        timers < LEAK_BOUND,
        "leak: {timers} timers armed (bound {LEAK_BOUND})"
    );
}

/// The process-wide world of the `receive` target.
pub fn world() -> MutexGuard<'static, World> {
    static WORLD: OnceLock<Mutex<World>> = OnceLock::new();
    WORLD
        .get_or_init(|| Mutex::new(World::open()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The `receive` target's body.
pub fn run_input(data: &[u8]) {
    world().run(data);
}
