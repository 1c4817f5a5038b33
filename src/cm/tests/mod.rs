//! Engine tests on the in-process fabric, one per kernel branch, named after it.
//!
//! Each test opens its own pair of loop devices (unique names, so tests run in
//! parallel in one process) and records every event its ids receive.

mod ack_delay;
mod alt_path;
mod auto_mra;
mod auto_mra_addresses;
mod connect;
mod counters;
mod device_bounds;
mod disconnect;
mod event_fd;
mod event_fd_turns;
mod fd_mode_close_and_orphans;
mod fidelity;
mod grh;
mod lap;
mod lifecycle;
mod listen_backlog;
mod log_order;
mod logging;
mod panic_lifecycle;
mod pkey_and_backlog_fidelity;
mod reuse;
mod saturate;
mod sidr;
mod switched;
mod teardown;
mod untrusted_peers;
mod virtual_clock;
mod worker_panics;
mod xrc;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::device::Device;
use super::event::{CmEvent, EventParam};
use super::id::{CmIdPriv, Handler};
use super::path::Path;
use super::{RepParams, ReqParams};
use crate::abi::ib_cm_event_type::{self, *};
use crate::abi::ib_cm_state::{self, *};
use crate::abi::{ib_qp_type, ib_wc_status};
pub use crate::transport::MadTransport;
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{MadAddr, RecvFn};
use crate::wire::Mad;

pub const SERVICE_ID: u64 = 0x1234;
pub const ACTIVE_QPN: u32 = 0x000a11;
pub const PASSIVE_QPN: u32 = 0x000b22;
const WAIT: Duration = Duration::from_secs(10);

/// A unique loop device name for this test process.
pub fn loop_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(100);
    format!("loop{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One delivered event, as the handler saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: usize,
    pub event: ib_cm_event_type,
    pub state: ib_cm_state,
    pub private_data: Option<Vec<u8>>,
    pub send_status: Option<ib_wc_status>,
    pub rej_reason: Option<u16>,
    pub sidr_status: Option<u8>,
    pub new_id: Option<Arc<CmIdPriv>>,
    /// REQ_RECEIVED's or LAP_RECEIVED's alternate path.
    pub alternate_path: Option<Path>,
    /// APR_RECEIVED's status and information bytes.
    pub apr: Option<(u8, Vec<u8>)>,
}

/// How a test's handler answers an event: its return value (non-zero destroys
/// the id), after doing whatever the test wants.
pub type Policy = Arc<dyn Fn(&Arc<CmIdPriv>, &CmEvent) -> i32 + Send + Sync>;

/// Records events and lets the test wait for them.
#[derive(Default)]
pub struct Recorder {
    seen: Mutex<Vec<Seen>>,
    changed: Condvar,
    policies: Mutex<HashMap<ib_cm_event_type, Policy>>,
}

impl Recorder {
    pub fn handler(self: &Arc<Self>) -> Handler {
        let rec = self.clone();
        Arc::new(move |id, ev| rec.record(id, ev))
    }

    /// Forgets what was seen and every policy: the new ids and handlers
    /// they hold (an id's handler holds this recorder) go.
    pub fn clear(&self) {
        self.seen.lock().clear();
        self.policies.lock().clear();
    }

    /// Sets what the handler does for `event` (default: nothing, return 0).
    pub fn on(&self, event: ib_cm_event_type, policy: Policy) {
        self.policies.lock().insert(event, policy);
    }

    fn record(&self, id: &Arc<CmIdPriv>, ev: &CmEvent) -> i32 {
        let seen = Seen {
            id: id.addr(),
            event: ev.event,
            state: id.state(),
            private_data: ev.private_data().map(<[u8]>::to_vec),
            send_status: match ev.param {
                EventParam::SendStatus(s) => Some(s),
                _ => None,
            },
            rej_reason: match &ev.param {
                EventParam::RejRcvd(r) => Some(r.reason),
                _ => None,
            },
            sidr_status: match &ev.param {
                EventParam::SidrRepRcvd(r) => Some(r.status),
                _ => None,
            },
            new_id: matches!(ev.event, IB_CM_REQ_RECEIVED | IB_CM_SIDR_REQ_RECEIVED)
                .then(|| id.clone()),
            alternate_path: match &ev.param {
                EventParam::ReqRcvd(r) => r.alternate_path,
                EventParam::LapRcvd(p) => Some(**p),
                _ => None,
            },
            apr: match &ev.param {
                EventParam::AprRcvd { ap_status, info } => ev
                    .mad
                    .as_ref()
                    .map(|m| (*ap_status, m[info.clone()].to_vec())),
                _ => None,
            },
        };
        let policy = self.policies.lock().get(&ev.event).cloned();
        let ret = policy.map_or(0, |p| p(id, ev));
        self.seen.lock().push(seen);
        self.changed.notify_all();
        ret
    }

    /// Waits for the first event `event` of `id` (any id if `None`).
    pub fn wait(&self, id: Option<&Arc<CmIdPriv>>, event: ib_cm_event_type) -> Seen {
        let deadline = Instant::now() + WAIT;
        let mut seen = self.seen.lock();
        loop {
            if let Some(s) = seen
                .iter()
                .find(|s| s.event == event && id.is_none_or(|id| s.id == id.addr()))
            {
                return s.clone();
            }
            if self.changed.wait_until(&mut seen, deadline).timed_out() {
                panic!("timed out waiting for {event:?}; seen: {:?}", events(&seen));
            }
        }
    }

    /// Waits for the `n`th (from 1) event `event` of `id`.
    pub fn wait_nth(&self, id: &Arc<CmIdPriv>, event: ib_cm_event_type, n: usize) -> Seen {
        let nth = || {
            self.seen
                .lock()
                .iter()
                .filter(|s| s.id == id.addr() && s.event == event)
                .nth(n - 1)
                .cloned()
        };
        wait_until(&format!("{event:?} number {n} of {id:?}"), || {
            nth().is_some()
        });
        nth().unwrap()
    }

    /// Waits for the `n`th (from 1) REQ_RECEIVED of any id; returns the id
    /// it made.
    pub fn nth_new_id(&self, n: usize) -> Arc<CmIdPriv> {
        let nth = || {
            self.seen
                .lock()
                .iter()
                .filter(|s| s.event == IB_CM_REQ_RECEIVED)
                .nth(n - 1)
                .and_then(|s| s.new_id.clone())
        };
        wait_until(&format!("REQ_RECEIVED number {n}"), || nth().is_some());
        nth().unwrap()
    }

    /// Every event delivered to `id` so far, in order.
    pub fn events_of(&self, id: &Arc<CmIdPriv>) -> Vec<ib_cm_event_type> {
        let seen = self.seen.lock();
        seen.iter()
            .filter(|s| s.id == id.addr())
            .map(|s| s.event)
            .collect()
    }

    pub fn count(&self, event: ib_cm_event_type) -> usize {
        self.seen.lock().iter().filter(|s| s.event == event).count()
    }
}

fn events(seen: &[Seen]) -> Vec<(usize, ib_cm_event_type)> {
    seen.iter().map(|s| (s.id, s.event)).collect()
}

/// Two loop devices, a listener on B and (after `connect`) one connection.
pub struct Pair {
    pub a: Arc<Device>,
    pub b: Arc<Device>,
    pub rec: Arc<Recorder>,
    pub listener: Arc<CmIdPriv>,
    pub active: Arc<CmIdPriv>,
}

impl Pair {
    /// Opens the devices and the listener; B answers REQs with a REP and A
    /// answers REPs with an RTU, from inside the handlers.
    pub fn new() -> Self {
        Self::open(super::open_device(&loop_name()).unwrap())
    }

    /// Like `new`, with B's port on Ethernet (RoCE) instead of InfiniBand.
    pub fn with_roce_b() -> Self {
        Self::open(super::open_roce_loop_device(&loop_name()).unwrap())
    }

    /// Like `new`, with B in FD mode: B's events wait until the test takes
    /// them (`process_device_events`), as a busy daemon's would.
    pub fn with_b_in_fd_mode() -> Self {
        let b = super::open_device(&loop_name()).unwrap();
        super::set_event_mode(&b, crate::abi::ibcm_event_mode::IBCM_EVENTS_FD).unwrap();
        Self::open(b)
    }

    pub fn open(b: Arc<Device>) -> Self {
        Self::open_both(super::open_device(&loop_name()).unwrap(), b)
    }

    /// Like `open`, with A's device given too.
    pub fn open_both(a: Arc<Device>, b: Arc<Device>) -> Self {
        let rec = Arc::new(Recorder::default());
        rec.on(
            IB_CM_REQ_RECEIVED,
            Arc::new(|id, _| {
                super::send_rep(id, &rep_params(&[])).unwrap();
                0
            }),
        );
        rec.on(
            IB_CM_REP_RECEIVED,
            Arc::new(|id, _| {
                super::send_rtu(id, &[]).unwrap();
                0
            }),
        );
        let listener = super::create_id(&b, rec.handler()).unwrap();
        super::listen(&listener, SERVICE_ID).unwrap();
        let active = super::create_id(&a, rec.handler()).unwrap();
        Self {
            a,
            b,
            rec,
            listener,
            active,
        }
    }

    pub fn req_params(&self) -> ReqParams {
        let path = self.a.init_path(1, &self.b.ports[0].gids[0].gid).unwrap();
        ReqParams {
            primary_path: path,
            service_id: SERVICE_ID,
            qp_num: ACTIVE_QPN,
            qp_type: ib_qp_type::IB_QPT_RC as i32,
            starting_psn: 0x1000,
            responder_resources: 4,
            initiator_depth: 2,
            remote_cm_response_timeout: 12,
            local_cm_response_timeout: 12,
            retry_count: 7,
            rnr_retry_count: 6,
            max_cm_retries: 3,
            ..ReqParams::default()
        }
    }

    /// Sends the REQ and waits for both sides to be ESTABLISHED; returns the
    /// passive id.
    pub fn connect(&self) -> Arc<CmIdPriv> {
        super::send_req(&self.active, &self.req_params()).unwrap();
        let passive = self.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
        self.rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
        assert_eq!(self.active.state(), IB_CM_ESTABLISHED);
        assert_eq!(passive.state(), IB_CM_ESTABLISHED);
        passive
    }

    /// An alternate path from A to B for the REQ: on the one-port loop
    /// fabric it is the primary path with its own SL, flow label and
    /// lifetime, so each side can tell the two apart.
    pub fn alt_path(&self) -> Path {
        Path {
            sl: 1,
            flow_label: 0x777,
            packet_life_time: 3,
            ..self.req_params().primary_path
        }
    }

    /// Sends `mad` from device `from` to the port of device `to`, as the peer
    /// of a connection would (a LAP, an APR, …).
    pub fn send_from(&self, from: &Device, to: &Device, mad: &Mad) {
        let addr = MadAddr {
            dgid: to.ports[0].gids[0].gid,
            dlid: to.ports[0].lid,
            ..MadAddr::default()
        };
        from.send(1, &addr, mad).unwrap();
    }

    pub fn loop_a(&self) -> &LoopTransport {
        self.a.as_loop().unwrap()
    }

    pub fn loop_b(&self) -> &LoopTransport {
        self.b.as_loop().unwrap()
    }

    /// Destroys what is left and closes both devices, checking nothing leaked.
    pub fn finish(self, ids: &[&Arc<CmIdPriv>]) {
        for id in ids {
            super::destroy_id(id, 0);
        }
        super::destroy_id(&self.active, 0);
        super::destroy_id(&self.listener, 0);
        super::close_device(&self.a).unwrap();
        super::close_device(&self.b).unwrap();
    }
}

pub fn rep_params(private_data: &[u8]) -> RepParams {
    RepParams {
        qp_num: PASSIVE_QPN,
        starting_psn: 0x2000,
        private_data: private_data.to_vec(),
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 5,
        ..RepParams::default()
    }
}

/// Patterned private data of `len` bytes.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Waits until `id` is in `state` (state changes that have no event).
pub fn wait_state(id: &Arc<CmIdPriv>, state: ib_cm_state) {
    let deadline = Instant::now() + WAIT;
    while id.state() != state {
        assert!(
            Instant::now() < deadline,
            "state {:?}, want {state:?}",
            id.state()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `done()` holds (effects that have no event, such as a drop
/// being counted).
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A raw endpoint on the fabric: sends crafted MADs, collects what comes back.
pub struct Raw {
    pub me: LoopIdentity,
    transport: Arc<LoopTransport>,
    got: Arc<(Mutex<Vec<Mad>>, Condvar)>,
}

impl Raw {
    pub fn open() -> Self {
        let me = LoopIdentity::from_name(&loop_name()).unwrap();
        let got: Arc<(Mutex<Vec<Mad>>, Condvar)> = Arc::default();
        let sink = Arc::downgrade(&got);
        let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
            if let Some(got) = Weak::upgrade(&sink) {
                got.0.lock().push(*mad);
                got.1.notify_all();
            }
        });
        let transport = LoopTransport::open(me, recv).unwrap();
        Self { me, transport, got }
    }

    pub fn send_to(&self, device: &Device, mad: &Mad) {
        let addr = MadAddr {
            dgid: device.ports[0].gids[0].gid,
            dlid: device.ports[0].lid,
            ..MadAddr::default()
        };
        use crate::transport::MadTransport;
        self.transport.send(1, &addr, mad).unwrap();
    }

    /// Makes `req`'s primary path the one from this port to `device`'s
    /// (same subnet), as a peer's CM would fill it in.
    pub fn address_req(&self, req: &mut crate::wire::Req, device: &Device) {
        let path = &mut req.primary_path;
        path.local_gid = self.me.gid;
        path.remote_gid = device.ports[0].gids[0].gid;
        path.local_lid = self.me.lid;
        path.remote_lid = device.ports[0].lid;
        path.subnet_local = true;
    }

    /// Waits for the `n`th MAD (1-based) to come back.
    pub fn wait_for(&self, n: usize) -> Mad {
        let deadline = Instant::now() + WAIT;
        let mut got = self.got.0.lock();
        while got.len() < n {
            assert!(
                !self.got.1.wait_until(&mut got, deadline).timed_out(),
                "no reply"
            );
        }
        got[n - 1]
    }

    /// How many MADs came back, after giving the fabric `settle` to deliver.
    pub fn received_after(&self, settle: Duration) -> usize {
        std::thread::sleep(settle);
        self.got.0.lock().len()
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        use crate::transport::MadTransport;
        self.transport.close();
    }
}
