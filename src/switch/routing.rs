//! The routing core of `ibcmd`: which process a received CM MAD is for,
//! whether a process may send a MAD, and what the daemon answers itself.
//!
//! Every registered process (a *client*) owns a slice of the local comm ID
//! space (`IdSlice`): the top `32 - slice_bits` bits of every local comm ID
//! it allocates are its slice number. A received REQ or SIDR_REQ goes to the
//! process listening on its service ID; every other CM MAD to the owner of
//! the comm ID it is addressed to (its remote comm ID, a SIDR_REP's request
//! ID). What nobody owns gets the kernel's answer: a stateless DREP for a
//! DREQ, REJ "invalid service ID" for a REQ, SIDR_REP "unsupported" for a
//! SIDR_REQ; anything else is dropped and counted. The slice of a process
//! that went away stays reserved for `timewait` before another gets it, so
//! a late MAD for one of its connections never reaches a stranger.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::path_cache::{Asked, FormerSms, SaPort, SaQueries, SaWaits};
use super::proto::{DeviceInfo, ToClient};
use super::qp_owner::QpOwners;
use super::rules::{
    LOCAL_COMM_ID, Peer, REMOTE_COMM_ID, Refusal, RoutedRequests, Sender, attr_id, be32, check_qp,
    check_send, named_qpns,
};
use crate::errno::{CmResult, EBUSY, EINVAL, ENODEV, ENOMEM};
use crate::ibcm_log;
use crate::log::Level;
use crate::os::seqpacket::{PeerCred, SeqPacket};
use crate::transport::port_watch::{self, Change, LivePorts, PortPoller};
use crate::transport::sysfs::PortState;
use crate::transport::{IdSlice, MadAddr, MadTransport, RecvFn};
use crate::wire::{Drep, Mad, MsgResponse, Rej, SidrRep, attr, parse_header};

/// `IB_CM_ASSIGN_SERVICE_ID` and the first service ID the daemon assigns.
const CM_ASSIGN_SERVICE_ID: u64 = 0x0200_0000_0000_0000;
/// `IB_SERVICE_ID_AGN_MASK`: the bits that say "assigned by the CM".
const SERVICE_ID_AGN_MASK: u64 = 0xff00_0000_0000_0000;
/// `IB_CM_REJ_INVALID_SERVICE_ID`, `IB_SIDR_UNSUPPORTED`.
const REJ_INVALID_SERVICE_ID: u16 = 8;
const SIDR_UNSUPPORTED: u8 = 1;
use crate::wire::MGMT_CLASS_CM;
use crate::wire::sa::MGMT_CLASS_SA;
/// How many service IDs one process may listen on through the daemon: far
/// more than any real program (a server listens on a handful, rdma_cm's
/// ucma on one per bound port), and a bound on what one process makes the
/// daemon keep: 200,000 listens of a hostile one took 18 MiB. A user's
/// processes together are bound by [`Quotas::listens`].
pub(super) const MAX_LISTENS_PER_PROCESS: usize = 4096;

/// The offset in a MAD (header included) of a REQ's or SIDR_REQ's service ID.
const SERVICE_ID_OF_REQ: usize = 32;

/// How the switch is set up.
#[derive(Debug, Clone, Copy)]
pub struct SwitchConfig {
    /// The low bits of a comm ID that a process picks: 20 gives each process
    /// a million IDs and the host 4095 slices (slice 0 is never handed out).
    pub slice_bits: u8,
    /// How long the slice of a process that went away stays reserved.
    pub timewait: Duration,
    /// What one user (uid) may make the daemon hold.
    pub quotas: Quotas,
    /// How long after its accept a connection may stay unregistered: a
    /// fixed deadline that no message extends.
    pub register_deadline: Duration,
    /// The host's path cache (`path_cache`): its TTL, 0 for none.
    pub path_cache: crate::sa::cache::Config,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        Self {
            slice_bits: 20,
            timewait: Duration::from_secs(60),
            quotas: Quotas::default(),
            register_deadline: Duration::from_secs(10),
            path_cache: crate::sa::cache::Config::default(),
        }
    }
}

/// Per-user bounds on what tenants make the daemon hold: whoever may open
/// the socket is a tenant, and tenants do not trust each other. Each is
/// counted per uid (`SO_PEERCRED`), root included, and `ibcmd --quota
/// NAME=N` changes it (docs/ibcmd.md, "Quotas").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Connections to the socket at once, registered or not (each holds a
    /// descriptor and a thread of the daemon's). Beyond: closed at accept.
    pub connections: usize,
    /// Registered processes (device openings) at once. Beyond: `Register`
    /// answered `-EAGAIN`.
    pub registrations: usize,
    /// Comm ID slices owned or in timewait; `0` means a quarter of them
    /// (1023 of 4095). Beyond: `Register` answered `-EAGAIN`.
    pub slices: usize,
    /// Service IDs listened on, over all the user's processes (each of
    /// which may hold 4,096). Beyond: `Listen` answered `-ENOMEM` (the
    /// kernel's `cm_init_listen` errno).
    pub listens: usize,
    /// Requests (REQs and SIDR_REQs) routed to the user's processes that
    /// they may still answer, about 140 bytes each; beyond, a process's
    /// oldest is forgotten (its requester retransmits it).
    pub requests: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            connections: 512,
            registrations: 256,
            slices: 0,
            listens: 16384,
            requests: 32768,
        }
    }
}

/// The daemon's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchCounter {
    /// Received REQ/SIDR_REQ handed to their listener.
    RxToListener,
    /// Received MADs handed to the owner of their comm ID.
    RxToOwner,
    /// SA answers handed to the process that asked.
    RxSaAnswers,
    /// DREQs for nobody's comm ID, answered with a stateless DREP.
    RxStatelessDrep,
    /// REQs for nobody's service ID, answered with REJ.
    RxStatelessRej,
    /// SIDR_REQs for nobody's service ID, answered with SIDR_REP.
    RxStatelessSidrRep,
    /// Received MADs for nobody, or malformed: dropped.
    RxDropped,
    /// Received MADs dropped because their process's socket was full.
    RxClientBusy,
    /// MADs of processes sent on.
    TxSent,
    /// MADs of processes whose comm ID is not theirs: dropped.
    TxSpoofed,
    /// MADs of processes the switch does not send (not CM or SA, no such
    /// port), or that the port refused.
    TxRefused,
    /// Processes registered, and gone.
    Registered,
    Gone,
    /// Connections closed because their process let the daemon's queue of
    /// answers to it fill (it does not read its socket).
    ClientStalled,
    /// Connections closed unregistered at the registration deadline.
    RegisterTimeout,
    /// Connections, registrations and listens refused by a user's quota.
    OverQuota,
    /// Log lines that tenants' actions caused and the budget suppressed.
    LogSuppressed,
    /// Path queries of processes sent to the SA: a miss's, a resend's, one
    /// the cache does not serve. What the SA sees of this host.
    TxSaQueries,
    /// The host's path cache (`path_cache`): queries answered from it,
    /// asked of the SA, joined to the same query in flight; answers dropped
    /// by an invalidation, their TTL, the bound on entries.
    PathCacheHits,
    PathCacheMisses,
    PathCacheCoalesced,
    PathCacheInvalidations,
    PathCacheExpirations,
    PathCacheEvictions,
    /// Changes of a served port's LID, SM LID, SM SL or state seen by
    /// reading it again (`transport::port_watch`): each drops the port's
    /// cached paths.
    PortChanges,
}

/// Every counter, in the order `--stats` prints them.
const ALL_COUNTERS: [SwitchCounter; 25] = [
    SwitchCounter::RxToListener,
    SwitchCounter::RxToOwner,
    SwitchCounter::RxSaAnswers,
    SwitchCounter::RxStatelessDrep,
    SwitchCounter::RxStatelessRej,
    SwitchCounter::RxStatelessSidrRep,
    SwitchCounter::RxDropped,
    SwitchCounter::RxClientBusy,
    SwitchCounter::TxSent,
    SwitchCounter::TxSpoofed,
    SwitchCounter::TxRefused,
    SwitchCounter::Registered,
    SwitchCounter::Gone,
    SwitchCounter::ClientStalled,
    SwitchCounter::RegisterTimeout,
    SwitchCounter::OverQuota,
    SwitchCounter::LogSuppressed,
    SwitchCounter::TxSaQueries,
    SwitchCounter::PathCacheHits,
    SwitchCounter::PathCacheMisses,
    SwitchCounter::PathCacheCoalesced,
    SwitchCounter::PathCacheInvalidations,
    SwitchCounter::PathCacheExpirations,
    SwitchCounter::PathCacheEvictions,
    SwitchCounter::PortChanges,
];

impl SwitchCounter {
    pub fn name(self) -> &'static str {
        match self {
            SwitchCounter::RxToListener => "rx_to_listener",
            SwitchCounter::RxToOwner => "rx_to_owner",
            SwitchCounter::RxSaAnswers => "rx_sa_answers",
            SwitchCounter::RxStatelessDrep => "rx_stateless_drep",
            SwitchCounter::RxStatelessRej => "rx_stateless_rej",
            SwitchCounter::RxStatelessSidrRep => "rx_stateless_sidr_rep",
            SwitchCounter::RxDropped => "rx_dropped",
            SwitchCounter::RxClientBusy => "rx_client_busy",
            SwitchCounter::TxSent => "tx_sent",
            SwitchCounter::TxSpoofed => "tx_spoofed",
            SwitchCounter::TxRefused => "tx_refused",
            SwitchCounter::Registered => "registered",
            SwitchCounter::Gone => "gone",
            SwitchCounter::ClientStalled => "client_stalled",
            SwitchCounter::RegisterTimeout => "register_timeout",
            SwitchCounter::OverQuota => "over_quota",
            SwitchCounter::LogSuppressed => "log_suppressed",
            SwitchCounter::TxSaQueries => "tx_sa_queries",
            SwitchCounter::PathCacheHits => "path_cache_hits",
            SwitchCounter::PathCacheMisses => "path_cache_misses",
            SwitchCounter::PathCacheCoalesced => "path_cache_coalesced",
            SwitchCounter::PathCacheInvalidations => "path_cache_invalidations",
            SwitchCounter::PathCacheExpirations => "path_cache_expirations",
            SwitchCounter::PathCacheEvictions => "path_cache_evictions",
            SwitchCounter::PortChanges => "port_changes",
        }
    }

    /// Its value among the path cache's counters, if it is one of them.
    fn of_path_cache(self, c: &crate::sa::cache::Counters) -> Option<u64> {
        Some(match self {
            SwitchCounter::PathCacheHits => c.hits,
            SwitchCounter::PathCacheMisses => c.misses,
            SwitchCounter::PathCacheCoalesced => c.coalesced,
            SwitchCounter::PathCacheInvalidations => c.invalidations,
            SwitchCounter::PathCacheExpirations => c.expirations,
            SwitchCounter::PathCacheEvictions => c.evictions,
            _ => return None,
        })
    }
}

/// A user, by its uid (`SO_PEERCRED`).
type Uid = u32;

/// A registered process, by the number the switch gave it.
pub type ClientId = u64;

/// One device the switch serves.
struct SwitchDevice {
    /// As it opened; its ports' LID and SM as they are now are `live`.
    info: DeviceInfo,
    live: LivePorts,
    /// The SM LIDs its ports had before the ones `live` says.
    former_sms: FormerSms,
    /// What the port watcher holds of it while it is served.
    _poller: Option<Arc<dyn PortPoller>>,
    transport: Arc<dyn MadTransport>,
    /// Who owns its QPs (None: nobody can tell, a simulated device's).
    qp_owners: Option<Arc<dyn QpOwners>>,
}

impl SwitchDevice {
    /// What a process registering now learns of the device: its ports'
    /// LID and SM as last read, so that its SA queries go to the SM there is.
    fn info_now(&self) -> DeviceInfo {
        let mut info = self.info.clone();
        for p in &mut info.ports {
            if let Some(now) = self.live.state(p.port_num) {
                (p.lid, p.sm_lid, p.sm_sl) = (now.lid, now.sm_lid, now.sm_sl);
            }
        }
        info
    }
}

/// The port watcher's handle on one served device (held by it while it is
/// served).
struct DevicePoller {
    switch: Weak<Switch>,
    device: String,
}

impl PortPoller for DevicePoller {
    fn poll_ports(&self) -> bool {
        self.switch
            .upgrade()
            .is_some_and(|s| s.poll_ports_of(&self.device))
    }
}

/// One registered process.
struct Client {
    device: String,
    slice: usize,
    conn: Arc<SeqPacket>,
    cred: PeerCred,
    /// Its SA queries' waits, oldest first; some answered.
    sa_waits: SaWaits,
    /// The REQs routed to it that it may still answer (`rules`).
    reqs: RoutedRequests,
    /// The SIDR_REQs routed to it that it has not answered yet.
    sidr_reqs: RoutedRequests,
    /// It sent a MAD carrying one of its comm IDs: a peer may know one, so
    /// its slice needs the timewait when it goes.
    used: bool,
    /// The service IDs it listens on (each counted in its `Listen`): what
    /// its exit removes, without a scan of every listen.
    listening: HashSet<u64>,
    /// A refusal of its listens was logged (once a process).
    listen_refusal_logged: bool,
    /// MADs for it that its full socket lost: its own count, so that its
    /// first loss is said whatever other processes lost before.
    losses: Arc<AtomicU64>,
}

/// What one user's processes hold, against [`Quotas`].
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    registrations: usize,
    listens: usize,
    /// Requests routed to its processes and still open.
    requests: usize,
}

/// One slot of the comm ID space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slice {
    Free,
    Owned(ClientId),
    /// Its process went away; nobody gets it before then.
    TimeWait(Instant, Uid),
}

/// The listens of a process on one service ID: the engine decides between
/// its own listeners (its `-EBUSY`, `ib_cm_insert_listen`'s sharing), the
/// daemon only between processes. So it counts the process's Listens and
/// Unlistens, one each per engine listener: while one thread destroys
/// listener X and another listens Y on the same service ID, Y's Listen may
/// arrive before X's Unlisten, and the service ID stays the process's.
struct Listen {
    client: ClientId,
    /// 0: every port (the first Listen's; the engine always asks for 0).
    port: u8,
    /// Listens minus Unlistens of `client`; at 0 the entry goes.
    count: u64,
}

struct State {
    next_client: ClientId,
    clients: HashMap<ClientId, Client>,
    slices: Vec<Slice>,
    next_slice: usize,
    /// (device, service ID) → its listener.
    listens: HashMap<(String, u64), Listen>,
    next_service_id: u64,
    /// The processes' SA queries in flight and the host's path cache.
    sa: SaQueries,
    /// What each user's processes hold (users holding nothing are absent).
    users: HashMap<Uid, Usage>,
}

/// The MAD switch.
pub struct Switch {
    config: SwitchConfig,
    devices: RwLock<HashMap<String, Arc<SwitchDevice>>>,
    state: Mutex<State>,
    /// Connections to the socket per user (its own lock: accepting never
    /// waits for routing).
    connections: Mutex<HashMap<Uid, usize>>,
    /// What is left of the log lines tenants may cause now.
    log_budget: Mutex<LogBudget>,
    counters: [AtomicU64; ALL_COUNTERS.len()],
}

/// A connection counted against its user's quota ([`Switch::admit`]) until
/// dropped.
pub struct Admitted {
    switch: Weak<Switch>,
    uid: Uid,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let Some(switch) = self.switch.upgrade() else {
            return;
        };
        let mut conns = switch.connections.lock();
        if let Some(held) = conns.get_mut(&self.uid) {
            *held -= 1;
            if *held == 0 {
                conns.remove(&self.uid);
            }
        }
    }
}

/// The log lines tenants may cause: at most [`Self::LINES`] in each
/// [`Self::WINDOW`], for all tenants together (one tenant's flood may
/// silence another's lines, never the daemon's own, nor grow the log).
struct LogBudget {
    window_start: Instant,
    lines: u32,
    /// Lines suppressed since the last one written.
    suppressed: u64,
}

impl LogBudget {
    const LINES: u32 = 20;
    const WINDOW: Duration = Duration::from_secs(10);

    fn new() -> Self {
        Self {
            window_start: Instant::now(),
            lines: 0,
            suppressed: 0,
        }
    }

    /// `Some(lines suppressed before this one)` when a line may be
    /// written now, `None` when it is suppressed (and counted).
    fn take(&mut self, now: Instant) -> Option<u64> {
        if now.duration_since(self.window_start) >= Self::WINDOW {
            self.window_start = now;
            self.lines = 0;
        }
        if self.lines >= Self::LINES {
            self.suppressed += 1;
            return None;
        }
        self.lines += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// A process a received MAD goes to: its socket and its own count of the
/// MADs its full socket lost.
struct Recipient {
    conn: Arc<SeqPacket>,
    losses: Arc<AtomicU64>,
}

impl Recipient {
    fn of(c: &Client) -> Self {
        Self {
            conn: c.conn.clone(),
            losses: c.losses.clone(),
        }
    }
}

/// A process's path query that the daemon does not send.
enum SaServed {
    /// It waits for the same query in flight.
    Waits,
    /// Answered from the cache: this answer, from this address.
    Answered(Recipient, Box<Mad>, MadAddr),
}

/// What becomes of a received MAD.
enum Route {
    To(Recipient, SwitchCounter),
    Answer(Box<Mad>, SwitchCounter),
    Drop,
    /// Handed on already.
    Done,
}

/// What a MAD received on `device` `port` that no process got was: the
/// warning `Switch::count_loss` gives.
fn lost_inbound(device: &str, port: u8, mad: &Mad, e: std::io::Error) -> String {
    format!(
        "a {} received on {device} port {port} was lost, its process's socket refused it: {e}",
        attr::name(u16::from_be_bytes([mad[16], mad[17]]))
    )
}

fn be64(mad: &Mad, at: usize) -> u64 {
    u64::from_be_bytes(mad[at..at + 8].try_into().expect("8 bytes"))
}

/// A REQ or SIDR_REQ its listener will get: what that process may answer
/// by the requester's comm ID alone (`rules`), towards `from`. At its
/// user's [`Quotas::requests`], the process's own oldest goes first (one
/// user's floods cost only its own processes).
fn remember_req(st: &mut State, device: &str, from: Peer, attr_id: u16, mad: &Mad, quota: usize) {
    let service_id = be64(mad, SERVICE_ID_OF_REQ);
    let Some(client) = st
        .listens
        .get(&(device.to_owned(), service_id))
        .filter(|l| l.port == 0 || l.port == from.port())
        .map(|l| l.client)
    else {
        return;
    };
    let Some(c) = st.clients.get_mut(&client) else {
        return;
    };
    let usage = st.users.entry(c.cred.uid).or_default();
    let held = c.reqs.len() + c.sidr_reqs.len();
    let received = match attr_id {
        attr::REQ => &mut c.reqs,
        _ => &mut c.sidr_reqs,
    };
    if received.is_open(be32(mad, LOCAL_COMM_ID), from) {
        return; // a retransmission: nothing new to keep
    }
    if usage.requests >= quota {
        // Its user's other processes may hold the quota: then this one
        // keeps none it cannot (its requesters retransmit).
        if received.len() == 0 {
            return;
        }
        received.forget_oldest_of_the_busiest();
    }
    received.insert(be32(mad, LOCAL_COMM_ID), from);
    let now = c.reqs.len() + c.sidr_reqs.len();
    usage.requests = (usage.requests + now).saturating_sub(held);
}

/// A REJ "timeout" with remote comm ID 0 arrived on `device` from `from`:
/// it goes to the process whose routed REQ it gives up (its LocalCommID,
/// from that address), which may not answer it after; nobody's is dropped.
fn rej_timeout_for_a_request(st: &mut State, device: &str, from: Peer, mad: &Mad) -> Route {
    let requester = be32(mad, LOCAL_COMM_ID);
    let Some(c) = st
        .clients
        .values_mut()
        .find(|c| c.device == device && c.reqs.is_open(requester, from))
    else {
        return Route::Drop;
    };
    c.reqs.close(requester, from);
    if let Some(usage) = st.users.get_mut(&c.cred.uid) {
        usage.requests = usage.requests.saturating_sub(1);
    }
    Route::To(Recipient::of(c), SwitchCounter::RxToOwner)
}

impl Switch {
    pub fn new(config: SwitchConfig) -> Arc<Self> {
        let slices = 1usize << (32 - u32::from(config.slice_bits.clamp(8, 31)));
        // A restarted daemon must not hand the slices of the processes it
        // served before to the first processes that register: their peers
        // still send to those comm IDs. It forgot them; a random start makes
        // reuse unlikely (slices are handed out round robin from there).
        let random =
            std::hash::BuildHasher::build_hasher(&std::collections::hash_map::RandomState::new());
        let first_slice = 1 + (std::hash::Hasher::finish(&random) as usize) % (slices - 1);
        Arc::new(Self {
            config,
            devices: RwLock::new(HashMap::new()),
            state: Mutex::new(State {
                next_client: 1,
                clients: HashMap::new(),
                slices: vec![Slice::Free; slices],
                next_slice: first_slice,
                listens: HashMap::new(),
                next_service_id: CM_ASSIGN_SERVICE_ID,
                sa: SaQueries::new(config.path_cache),
                users: HashMap::new(),
            }),
            connections: Mutex::new(HashMap::new()),
            log_budget: Mutex::new(LogBudget::new()),
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
        })
    }

    /// How the switch was set up.
    pub fn config(&self) -> &SwitchConfig {
        &self.config
    }

    /// Counts a new connection of user `uid` against its quota: `None` (the
    /// connection is to be closed) when the user holds
    /// [`Quotas::connections`] already. The connection is counted until the
    /// returned value is dropped.
    pub fn admit(self: &Arc<Self>, uid: u32) -> Option<Admitted> {
        let mut conns = self.connections.lock();
        let held = conns.entry(uid).or_insert(0);
        if *held >= self.config.quotas.connections {
            return None;
        }
        *held += 1;
        Some(Admitted {
            switch: Arc::downgrade(self),
            uid,
        })
    }

    /// The routed requests user `uid`'s processes may still answer (tests).
    #[cfg(test)]
    pub(super) fn requests_of(&self, uid: u32) -> usize {
        self.state.lock().users.get(&uid).map_or(0, |u| u.requests)
    }

    /// The connections user `uid` holds now.
    pub fn connections_of(&self, uid: u32) -> usize {
        self.connections.lock().get(&uid).copied().unwrap_or(0)
    }

    /// Serves `name` through the transport `open` makes (with what the
    /// processes need to know of the device); its received MADs come back to
    /// this switch.
    pub fn add_device(
        self: &Arc<Self>,
        name: &str,
        open: impl FnOnce(RecvFn) -> CmResult<(DeviceInfo, Arc<dyn MadTransport>)>,
    ) -> CmResult {
        self.add_device_with_qp_owners(name, None, open)
    }

    /// [`Switch::add_device`], with who owns the device's QPs: a tenant's
    /// REQ, REP or SIDR_REP must then name a QP of a process of its user
    /// (`rules::check_qp`).
    pub fn add_device_with_qp_owners(
        self: &Arc<Self>,
        name: &str,
        qp_owners: Option<Arc<dyn QpOwners>>,
        open: impl FnOnce(RecvFn) -> CmResult<(DeviceInfo, Arc<dyn MadTransport>)>,
    ) -> CmResult {
        self.add_watched_device(name, qp_owners, None, open)
    }

    /// [`Switch::add_device_with_qp_owners`], reading the device's ports
    /// again under `watch_root` (sysfs) every `IBCM_PORT_POLL_MS`.
    pub fn add_watched_device(
        self: &Arc<Self>,
        name: &str,
        qp_owners: Option<Arc<dyn QpOwners>>,
        watch_root: Option<&str>,
        open: impl FnOnce(RecvFn) -> CmResult<(DeviceInfo, Arc<dyn MadTransport>)>,
    ) -> CmResult {
        let me = Arc::downgrade(self);
        let device = name.to_owned();
        let recv: RecvFn = Arc::new(move |port, addr, mad| {
            if let Some(switch) = Weak::upgrade(&me) {
                switch.inbound(&device, port, addr, &mad);
            }
        });
        let (info, transport) = open(recv)?;
        let live = LivePorts::new(info.ports.iter().map(|p| {
            let state = PortState {
                lid: p.lid,
                sm_lid: p.sm_lid,
                sm_sl: p.sm_sl,
                active: true,
            };
            (p.port_num, state)
        }));
        let poller = watch_root.map(|root| {
            let poller: Arc<dyn PortPoller> = Arc::new(DevicePoller {
                switch: Arc::downgrade(self),
                device: name.to_owned(),
            });
            (root, poller)
        });
        let device = Arc::new(SwitchDevice {
            info,
            live,
            former_sms: FormerSms::default(),
            _poller: poller.as_ref().map(|(_, p)| p.clone()),
            transport,
            qp_owners,
        });
        self.devices.write().insert(name.to_owned(), device.clone());
        // Served first: a poll that found no such device would forget it.
        if let (Some((root, poller)), Some(interval)) = (poller, port_watch::poll_interval()) {
            device.live.read_from(root, name, interval);
            port_watch::watch(Arc::downgrade(&poller));
        }
        Ok(())
    }

    /// Reads the ports of `device` again: each that changed drops the
    /// host's cached paths of that port, counted and logged. False when the
    /// device is no longer served.
    fn poll_ports_of(&self, device: &str) -> bool {
        let Some(served) = self.devices.read().get(device).cloned() else {
            return false;
        };
        for change in served.live.refresh_all() {
            served.former_sms.port_changed(&change);
            self.port_did_change(device, served.info.node_guid, change);
        }
        true
    }

    fn port_did_change(&self, device: &str, node_guid: u64, change: Change) {
        let port = crate::sa::cache::PortId {
            node_guid,
            port_num: change.port_num,
        };
        self.state.lock().sa.invalidate_port(port);
        self.count(SwitchCounter::PortChanges);
        ibcm_log!(
            Info,
            "ibcmd: {device} {change}; the host's cached paths dropped"
        );
    }

    /// Makes the ports of `device` read from the files of a test under
    /// `root` (as `root/<device>/ports/N/…`); the test reads them with
    /// [`Switch::poll_ports_now`].
    #[cfg(test)]
    pub(super) fn read_ports_from(&self, device: &str, root: &std::path::Path) {
        if let Some(d) = self.devices.read().get(device) {
            d.live.read_from(root, device, Duration::from_secs(3600));
        }
    }

    /// Reads the ports of `device` again now (tests).
    #[cfg(test)]
    pub(super) fn poll_ports_now(&self, device: &str) -> bool {
        self.poll_ports_of(device)
    }

    /// Stops every device's transport and ends every process's connection:
    /// each sees the daemon gone.
    pub fn close(&self) {
        // Out of the lock first: a transport's close waits for its reader,
        // which may be answering a MAD itself under the devices' read lock.
        let devices: Vec<_> = self.devices.write().drain().collect();
        for (_, d) in devices {
            d.transport.close();
        }
        let conns: Vec<_> = self
            .state
            .lock()
            .clients
            .values()
            .map(|c| c.conn.clone())
            .collect();
        for conn in conns {
            conn.shutdown();
        }
    }

    pub fn count(&self, counter: SwitchCounter) {
        self.counters[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a MAD the switch lost (`counter`) and says so at warn level
    /// the 1st, 2nd, 4th, 8th… time: a loss the peer's retransmission hides
    /// still shows where it happened, and a flood of them cannot fill the log.
    /// Counts a MAD for process `to` that its full socket lost, and says so
    /// the 1st, 2nd, 4th… time *for that process* (one process losing
    /// thousands of its own cannot hide another's first loss), within the
    /// tenants' log budget.
    fn count_client_loss(&self, to: &Recipient, what: impl FnOnce() -> String) {
        let total =
            self.counters[SwitchCounter::RxClientBusy as usize].fetch_add(1, Ordering::Relaxed) + 1;
        let mine = to.losses.fetch_add(1, Ordering::Relaxed) + 1;
        // Within the tenants' budget too: a user churning processes that
        // each lose a MAD would otherwise write a line per process.
        if mine.is_power_of_two() {
            self.tenant_log(Level::Warn, || {
                format!(
                    "{} ({mine} for this process, rx_client_busy {total} so far)",
                    what()
                )
            });
        }
    }

    pub(super) fn count_loss(&self, counter: SwitchCounter, what: impl FnOnce() -> String) {
        let n = self.counters[counter as usize].fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            ibcm_log!(Warn, "ibcmd: {} ({} {n} so far)", what(), counter.name());
        }
    }

    /// Logs a line a tenant's action caused (a registration, a refusal),
    /// within [`LogBudget`]: a tenant doing it in a loop cannot flood the
    /// log, and the next line that passes says how many were suppressed.
    pub(crate) fn tenant_log(&self, level: Level, line: impl FnOnce() -> String) {
        if !crate::log::enabled(level) {
            return;
        }
        let suppressed = match self.log_budget.lock().take(Instant::now()) {
            Some(suppressed) => suppressed,
            None => {
                self.count(SwitchCounter::LogSuppressed);
                return;
            }
        };
        let line = line();
        match suppressed {
            0 => crate::log::write(level, format_args!("ibcmd: {line}")),
            n => crate::log::write(
                level,
                format_args!("ibcmd: {line} ({n} lines of tenants suppressed before this one)"),
            ),
        }
    }

    pub fn counter(&self, counter: SwitchCounter) -> u64 {
        let cache = self.state.lock().sa.counters();
        self.counter_with(counter, &cache)
    }

    fn counter_with(&self, counter: SwitchCounter, cache: &crate::sa::cache::Counters) -> u64 {
        counter
            .of_path_cache(cache)
            .unwrap_or_else(|| self.counters[counter as usize].load(Ordering::Relaxed))
    }

    pub fn counters(&self) -> Vec<(String, u64)> {
        let cache = self.state.lock().sa.counters();
        ALL_COUNTERS
            .iter()
            .map(|&c| (c.name().to_owned(), self.counter_with(c, &cache)))
            .collect()
    }

    fn slice_of(&self, index: usize) -> IdSlice {
        let bits = self.config.slice_bits.clamp(8, 31);
        IdSlice {
            base: (index as u32) << bits,
            bits,
        }
    }

    /// The slice index of `local_id`.
    fn slice_index(&self, local_id: u32) -> usize {
        (local_id >> self.config.slice_bits.clamp(8, 31)) as usize
    }

    /// Registers a process for `device`: its number, its slice and what it
    /// needs of the device. `-ENODEV` for a device not served, `-EAGAIN`
    /// while every slice is owned or in timewait.
    pub fn register(
        &self,
        conn: Arc<SeqPacket>,
        cred: PeerCred,
        device: &str,
    ) -> CmResult<(ClientId, IdSlice, DeviceInfo)> {
        let info = self
            .devices
            .read()
            .get(device)
            .map(|d| d.info_now())
            .ok_or(ENODEV)?;
        let mut st = self.state.lock();
        let now = Instant::now();
        let n = st.slices.len();
        let quotas = self.config.quotas;
        let usage = st.users.get(&cred.uid).copied().unwrap_or_default();
        if usage.registrations >= quotas.registrations {
            drop(st);
            self.refuse_over_quota(|| {
                format!(
                    "process {} (uid {}) refused: its user has {} processes registered (quota \
                     registrations={})",
                    cred.pid, cred.uid, usage.registrations, quotas.registrations
                )
            });
            return Err(EAGAIN);
        }
        // Whoever may connect may register, but one user may not take every
        // slice: registering and leaving (one MAD each, so the slice needs
        // its timewait) 4095 times took a few seconds and locked every other
        // user out for the timewait.
        let max_slices = self.max_slices_per_user(n);
        if self.slices_of_user(&st, cred.uid, now) >= max_slices {
            drop(st);
            self.refuse_over_quota(|| {
                format!(
                    "process {} (uid {}) refused: its user holds {max_slices} comm ID slices, \
                     owned or in timewait (quota slices)",
                    cred.pid, cred.uid
                )
            });
            return Err(EAGAIN);
        }
        let start = st.next_slice;
        let index = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| i != 0)
            .find(|&i| match st.slices[i] {
                Slice::Free => true,
                Slice::TimeWait(until, _) => until <= now,
                Slice::Owned(_) => false,
            })
            .ok_or(EAGAIN)?;
        let client = st.next_client;
        st.next_client += 1;
        st.slices[index] = Slice::Owned(client);
        st.next_slice = (index + 1) % n;
        st.users.entry(cred.uid).or_default().registrations += 1;
        st.clients.insert(
            client,
            Client {
                device: device.to_owned(),
                slice: index,
                conn,
                cred,
                used: false,
                listening: HashSet::new(),
                listen_refusal_logged: false,
                losses: Arc::default(),
                reqs: RoutedRequests::default(),
                sidr_reqs: RoutedRequests::default(),
                sa_waits: SaWaits::new(),
            },
        );
        drop(st);
        self.count(SwitchCounter::Registered);
        let slice = self.slice_of(index);
        self.tenant_log(Level::Info, || {
            format!(
                "process {} (uid {}, gid {}) registered for {device}: comm IDs {:#010x}..={:#010x}",
                cred.pid,
                cred.uid,
                cred.gid,
                slice.base,
                slice.base | slice.mask()
            )
        });
        Ok((client, slice, info))
    }

    /// Counts a refusal by a user's quota and says so, rate-limited.
    fn refuse_over_quota(&self, what: impl FnOnce() -> String) {
        self.count(SwitchCounter::OverQuota);
        self.tenant_log(Level::Warn, what);
    }

    /// The slices user `uid`'s processes own or left in timewait.
    fn slices_of_user(&self, st: &State, uid: Uid, now: Instant) -> usize {
        st.slices
            .iter()
            .filter(|s| match **s {
                Slice::Free => false,
                Slice::Owned(c) => st.clients.get(&c).is_some_and(|c| c.cred.uid == uid),
                Slice::TimeWait(until, owner) => owner == uid && until > now,
            })
            .count()
    }

    /// [`Quotas::slices`], or a quarter of the `n` slices (1023 of 4095):
    /// it takes four users of the socket's group to lock the others out.
    fn max_slices_per_user(&self, n: usize) -> usize {
        match self.config.quotas.slices {
            0 => ((n - 1) / 4).max(1),
            quota => quota,
        }
    }

    /// The process went away (its socket closed): its listens end at once,
    /// its slice is answered statelessly and freed after the timewait. It
    /// costs what the process held, not a scan of every process's.
    pub fn unregister(&self, client: ClientId) {
        let mut st = self.state.lock();
        let st = &mut *st;
        let Some(gone) = st.clients.remove(&client) else {
            return;
        };
        // A slice no peer ever saw a comm ID of is free at once: else one
        // process registering and leaving in a loop would keep every slice
        // in timewait, and every other process out, without any connection.
        st.slices[gone.slice] = if gone.used {
            Slice::TimeWait(Instant::now() + self.config.timewait, gone.cred.uid)
        } else {
            Slice::Free
        };
        let mut key = (gone.device, 0);
        for &service_id in &gone.listening {
            key.1 = service_id;
            st.listens.remove(&key);
        }
        st.sa.forget(client, &gone.sa_waits);
        if let Some(usage) = st.users.get_mut(&gone.cred.uid) {
            usage.registrations -= 1;
            usage.listens -= gone.listening.len();
            usage.requests = usage
                .requests
                .saturating_sub(gone.reqs.len() + gone.sidr_reqs.len());
            if usage.registrations == 0 {
                st.users.remove(&gone.cred.uid);
            }
        }
        let (pid, device) = (gone.cred.pid, key.0);
        self.count(SwitchCounter::Gone);
        self.tenant_log(Level::Info, || {
            format!(
                "process {pid} left {device}: its comm IDs are answered statelessly for {:?}",
                self.config.timewait
            )
        });
    }

    /// `ib_cm_listen` of a process: exact match (`mask` all ones), every port
    /// (0) or one. `-EBUSY` when another process listens on it already,
    /// `-ENOMEM` beyond `MAX_LISTENS_PER_PROCESS` or its user's
    /// [`Quotas::listens`].
    ///
    /// Invariant (it makes the process's Unlistens exact, even the one after
    /// a Listen whose answer came too late): a Listen on a service ID the
    /// process holds only counts, never refused, not even at the cap; so a
    /// refused Listen means the process holds no count there, and an
    /// Unlisten from it for that ID is ignored.
    pub fn listen(&self, client: ClientId, service_id: u64, mask: u64, port: u8) -> CmResult<u64> {
        if mask != u64::MAX {
            return Err(EINVAL);
        }
        // The kernel's cm_init_listen: the assigned range is the CM's alone,
        // else a process could take the IDs others are about to be given.
        if service_id & SERVICE_ID_AGN_MASK == CM_ASSIGN_SERVICE_ID
            && service_id != CM_ASSIGN_SERVICE_ID
        {
            return Err(EINVAL);
        }
        // rdma_cm's service IDs of ports below 1024 need what binding such a
        // port needs (cma_use_port: CAP_NET_BIND_SERVICE, else -EACCES):
        // else any tenant could take a root service's port while it is down
        // and get its clients' REQs and private data.
        if let Some(port) = privileged_rdma_cm_port(service_id) {
            let cred = self.state.lock().clients.get(&client).ok_or(EINVAL)?.cred;
            if !may_bind_privileged(cred) {
                self.tenant_log(Level::Warn, || {
                    format!(
                        "process {} (uid {}) may not listen on {service_id:#x}, rdma_cm's port \
                         {port} (below 1024: CAP_NET_BIND_SERVICE needed): -EACCES",
                        cred.pid, cred.uid
                    )
                });
                return Err(EACCES);
            }
        }
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.clients.get_mut(&client).ok_or(EINVAL)?;
        let assign = service_id == CM_ASSIGN_SERVICE_ID;
        let key = (c.device.clone(), service_id);
        if !assign {
            match st.listens.get_mut(&key) {
                Some(l) if l.client == client => {
                    l.count += 1;
                    return Ok(service_id);
                }
                Some(_) => return Err(EBUSY),
                None => {}
            }
        }
        let usage = st.users.entry(c.cred.uid).or_default();
        let quota = self.config.quotas.listens;
        if c.listening.len() >= MAX_LISTENS_PER_PROCESS || usage.listens >= quota {
            // The kernel's errno when cm_init_listen cannot allocate.
            let (cred, device, held) = (c.cred, c.device.clone(), c.listening.len());
            let user_held = usage.listens;
            if std::mem::replace(&mut c.listen_refusal_logged, true) {
                self.count(SwitchCounter::OverQuota);
                return Err(ENOMEM);
            }
            self.refuse_over_quota(|| {
                format!(
                    "process {} (uid {}) on {device} holds {held} listens, its user {user_held} \
                     (at most {MAX_LISTENS_PER_PROCESS} a process, quota listens={quota}): \
                     a listen refused with -ENOMEM",
                    cred.pid, cred.uid
                )
            });
            return Err(ENOMEM);
        }
        let key = if assign {
            let assigned = st.next_service_id;
            st.next_service_id += 1;
            (key.0, assigned)
        } else {
            key
        };
        usage.listens += 1;
        c.listening.insert(key.1);
        let service_id = key.1;
        st.listens.insert(
            key,
            Listen {
                client,
                port,
                count: 1,
            },
        );
        Ok(service_id)
    }

    /// The end of one of the process's listens on `service_id`; ignored for
    /// a service ID it does not hold (see [`Self::listen`]).
    pub fn unlisten(&self, client: ClientId, service_id: u64) {
        let mut st = self.state.lock();
        let st = &mut *st;
        let Some(c) = st.clients.get_mut(&client) else {
            return;
        };
        let key = (c.device.clone(), service_id);
        let Some(l) = st.listens.get_mut(&key).filter(|l| l.client == client) else {
            return;
        };
        l.count -= 1;
        if l.count == 0 {
            st.listens.remove(&key);
            c.listening.remove(&service_id);
            if let Some(usage) = st.users.get_mut(&c.cred.uid) {
                usage.listens -= 1;
            }
        }
    }

    /// A MAD received on `device` `port`.
    pub fn inbound(&self, device: &str, port: u8, addr: MadAddr, mad: &Mad) {
        match self.route(device, port, addr, mad) {
            Route::To(to, counter) => {
                let msg = ToClient::Recv {
                    port,
                    addr,
                    mad: Box::new(*mad),
                };
                // Never wait for a process: a full socket loses the MAD, as
                // a full receive queue would; the sender retransmits.
                match to.conn.send(&msg.encode(), false) {
                    Ok(()) => self.count(counter),
                    Err(e) => self.count_client_loss(&to, || lost_inbound(device, port, mad, e)),
                }
            }
            Route::Answer(answer, counter) => {
                let transport = self.devices.read().get(device).map(|d| d.transport.clone());
                if let Some(t) = transport
                    && let Err(e) = t.send(port, &addr, &answer)
                {
                    ibcm_log!(
                        Warn,
                        "ibcmd: the {} answering a {} on {device} port {port} was not sent: {}",
                        attr::name(u16::from_be_bytes([answer[16], answer[17]])),
                        attr::name(u16::from_be_bytes([mad[16], mad[17]])),
                        std::io::Error::from_raw_os_error(e.0),
                    );
                }
                self.count(counter);
            }
            Route::Drop => self.count(SwitchCounter::RxDropped),
            Route::Done => {}
        }
    }

    fn route(&self, device: &str, port: u8, addr: MadAddr, mad: &Mad) -> Route {
        if mad[1] == MGMT_CLASS_SA {
            return self.route_sa_answer(&addr, mad);
        }
        let Ok((header, _)) = parse_header(mad) else {
            return Route::Drop;
        };
        let mut st = self.state.lock();
        let from = Peer::of(port, &addr);
        match header.attr_id {
            attr::REQ | attr::SIDR_REQ => {
                let quota = self.config.quotas.requests;
                remember_req(&mut st, device, from, header.attr_id, mad, quota);
            }
            // The REJ TIMEOUT of an active side destroyed in REQ_SENT names
            // no comm ID of ours (it never learnt it): the kernel finds the
            // id by the ARI's node GUID and the sender's comm ID
            // (cm_acquire_rejected_id). It is for the process its REQ was
            // routed to, and no other.
            attr::REJ if is_rej_timeout_for_nobody(mad) => {
                return rej_timeout_for_a_request(&mut st, device, from, mad);
            }
            // The requester has our REP (RTU), or gave up (REJ): its REQ may
            // no longer be answered by comm ID alone.
            attr::RTU | attr::REJ => self.end_req(&mut st, device, from, mad),
            _ => {}
        }
        let owner = |local_id: u32| {
            let Slice::Owned(client) = st.slices.get(self.slice_index(local_id))? else {
                return None;
            };
            let c = st.clients.get(client)?;
            (c.device == device).then(|| Route::To(Recipient::of(c), SwitchCounter::RxToOwner))
        };
        match header.attr_id {
            attr::REQ | attr::SIDR_REQ => {
                let service_id = be64(mad, SERVICE_ID_OF_REQ);
                let listener = st
                    .listens
                    .get(&(device.to_owned(), service_id))
                    .filter(|l| l.port == 0 || l.port == port)
                    .and_then(|l| st.clients.get(&l.client));
                match listener {
                    Some(c) => Route::To(Recipient::of(c), SwitchCounter::RxToListener),
                    None if header.attr_id == attr::REQ => no_listener_rej(mad, header.tid),
                    None => no_listener_sidr_rep(mad, header.tid, service_id),
                }
            }
            attr::SIDR_REP => owner(be32(mad, LOCAL_COMM_ID)).unwrap_or(Route::Drop),
            attr::REP | attr::RTU | attr::REJ | attr::MRA | attr::DREP | attr::LAP | attr::APR => {
                owner(be32(mad, REMOTE_COMM_ID)).unwrap_or(Route::Drop)
            }
            attr::DREQ => {
                owner(be32(mad, REMOTE_COMM_ID)).unwrap_or_else(|| stateless_drep(mad, header.tid))
            }
            _ => Route::Drop,
        }
    }

    /// An RTU or REJ for a connection of a process: the REQ it answers
    /// (its LocalCommID is the requester's) is over for that process.
    fn end_req(&self, st: &mut State, device: &str, from: Peer, mad: &Mad) {
        let Some(Slice::Owned(client)) = st.slices.get(self.slice_index(be32(mad, REMOTE_COMM_ID)))
        else {
            return;
        };
        if let Some(c) = st.clients.get_mut(client).filter(|c| c.device == device) {
            let had = c.reqs.len();
            c.reqs.close(be32(mad, LOCAL_COMM_ID), from);
            let closed = had - c.reqs.len();
            if let Some(usage) = st.users.get_mut(&c.cred.uid) {
                usage.requests = usage.requests.saturating_sub(closed);
            }
        }
    }

    /// An SA answer goes to every process that waits for the query it
    /// answers (`path_cache`), each with its own TID back and the address
    /// it came from (the process takes an answer from the SM's LID only).
    fn route_sa_answer(&self, addr: &MadAddr, mad: &Mad) -> Route {
        let mut st = self.state.lock();
        let waiters = st.sa.answered(mad, addr);
        let to: Vec<_> = waiters
            .into_iter()
            .filter_map(|(client, theirs, alias)| {
                let c = st.clients.get(&client)?;
                Some((client, Recipient::of(c), theirs, alias))
            })
            .collect();
        drop(st);
        if to.is_empty() {
            return Route::Drop;
        }
        for (client, recipient, theirs, alias) in to {
            let mut answer = *mad;
            answer[12..16].copy_from_slice(&theirs.to_be_bytes());
            // One who asked the SM the port had before takes an answer
            // only from there.
            let from = MadAddr {
                dlid: alias.unwrap_or(addr.dlid),
                ..*addr
            };
            self.hand_sa_answer(client, &recipient, &from, answer);
        }
        Route::Done
    }

    /// Hands `answer` (its TID the process's) to process `client`.
    fn hand_sa_answer(&self, client: ClientId, to: &Recipient, from: &MadAddr, answer: Mad) {
        let msg = ToClient::Recv {
            port: 0,
            addr: *from,
            mad: Box::new(answer),
        };
        match to.conn.send(&msg.encode(), false) {
            Ok(()) => self.count(SwitchCounter::RxSaAnswers),
            Err(e) => self.count_client_loss(to, || {
                format!("an SA answer for client {client} was lost, its socket refused it: {e}")
            }),
        }
    }

    /// A MAD a process sends from `port` to `addr`: sent when the identity
    /// it carries is the process's (`rules::check_send`), else dropped,
    /// counted and logged (rate-limited) with the process's credentials.
    /// `-EPERM` for a spoofed one, `-EINVAL` for one the switch does not
    /// carry.
    pub fn outbound(&self, client: ClientId, port: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let mut mad = *mad;
        // A path query to an SM the port had before goes to the one it has.
        let mut addr = *addr;
        let addr = &mut addr;
        // Whose QPs it names, asked of the kernel before the state lock.
        let qp_refusal = named_qpns(&mad).find_map(|qpn| self.qp_refusal(client, port, qpn));
        let (transport, verdict, sa_served) = {
            let mut st = self.state.lock();
            let st = &mut *st;
            let Some(c) = st.clients.get_mut(&client) else {
                return Err(EINVAL);
            };
            let slice = self.slice_of(c.slice);
            let (device, cred) = (c.device.clone(), c.cred);
            let (transport, node_guid) = self
                .devices
                .read()
                .get(&device)
                .map(|d| (Some(d.transport.clone()), d.info.node_guid))
                .unwrap_or_default();
            let verdict = match mad[1] {
                // Path queries only: SubnAdmSet/Delete (a multicast leave, a
                // service record removed) would give every process the SA
                // access of the port, which needs umad access without ibcmd.
                MGMT_CLASS_SA if is_path_query(&mad) => Ok(()),
                MGMT_CLASS_CM if let Some(why) = qp_refusal => Err((why, device, cred, slice)),
                MGMT_CLASS_CM => {
                    let held = c.reqs.len() + c.sidr_reqs.len();
                    let sender = Sender {
                        slice,
                        node_guid,
                        reqs: &mut c.reqs,
                        sidr_reqs: &mut c.sidr_reqs,
                    };
                    let verdict = check_send(sender, port, addr, &mad);
                    // A REJ of a REQ, a SIDR_REP end theirs.
                    let closed = held - (c.reqs.len() + c.sidr_reqs.len());
                    if let Some(usage) = st.users.get_mut(&cred.uid) {
                        usage.requests = usage.requests.saturating_sub(closed);
                    }
                    // A peer may know one of its comm IDs now: its slice
                    // needs the timewait when it goes.
                    c.used |= verdict.is_ok() && slice.contains(be32(&mad, LOCAL_COMM_ID));
                    verdict.map_err(|why| (why, device, cred, slice))
                }
                _ => Err((Refusal::Unknown, device, cred, slice)),
            };
            let mut sa_served = None;
            if verdict.is_ok() && mad[1] == MGMT_CLASS_SA {
                sa_served = self.track_sa_query(st, client, port, addr, &mut mad);
            }
            (transport, verdict, sa_served)
        };
        match sa_served {
            Some(SaServed::Waits) => return Ok(()),
            Some(SaServed::Answered(to, answer, from)) => {
                self.hand_sa_answer(client, &to, &from, *answer);
                return Ok(());
            }
            None => {}
        }
        if let Err((why, device, cred, slice)) = verdict {
            if let Refusal::QpUnchecked(qpn) = why {
                self.count_loss(SwitchCounter::TxRefused, || {
                    format!(
                        "refused a {} of process {} (uid {}) on {device}: {} (QPN {qpn:#08x})",
                        attr::name(attr_id(&mad)),
                        cred.pid,
                        cred.uid,
                        why.why()
                    )
                });
                return Err(EAGAIN);
            }
            if !why.is_spoof() {
                self.count(SwitchCounter::TxRefused);
                return Err(EINVAL);
            }
            // Counted; said the 1st, 2nd, 4th… time: a tenant sending
            // spoofed MADs in a loop cannot flood the log.
            self.count_loss(SwitchCounter::TxSpoofed, || {
                format!(
                    "dropped a {} from process {} (uid {}, gid {}) on {device}: {} (local comm \
                     ID {:#010x}, remote comm ID {:#010x}{}; its slice {:#010x}..={:#010x})",
                    attr::name(attr_id(&mad)),
                    cred.pid,
                    cred.uid,
                    cred.gid,
                    why.why(),
                    be32(&mad, LOCAL_COMM_ID),
                    be32(&mad, REMOTE_COMM_ID),
                    why.qpn()
                        .map(|q| format!(", QPN {q:#08x}"))
                        .unwrap_or_default(),
                    slice.base,
                    slice.base | slice.mask()
                )
            });
            return Err(EPERM);
        }
        let Some(transport) = transport else {
            self.count(SwitchCounter::TxRefused);
            return Err(ENODEV);
        };
        match transport.send(port, &*addr, &mad) {
            Ok(()) => {
                self.count(SwitchCounter::TxSent);
                if mad[1] == MGMT_CLASS_SA {
                    self.count(SwitchCounter::TxSaQueries);
                }
                Ok(())
            }
            Err(e) => {
                self.count_loss(SwitchCounter::TxRefused, || {
                    format!(
                        "a {} of client {client} was not sent on port {port}: {}",
                        attr::name(attr_id(&mad)),
                        std::io::Error::from_raw_os_error(e.0)
                    )
                });
                Err(e)
            }
        }
    }

    /// Why `client` may not name QP `qpn` in a MAD leaving `port`: None when
    /// it may, or when that is not checked (root, which may open umad and
    /// send anything anyway; a device whose QPs nobody can tell); asked of
    /// the device's [`QpOwners`] out of the state lock.
    fn qp_refusal(&self, client: ClientId, port: u8, qpn: u32) -> Option<Refusal> {
        let (device, cred) = {
            let st = self.state.lock();
            let c = st.clients.get(&client)?;
            (c.device.clone(), c.cred)
        };
        if cred.uid == 0 {
            return None;
        }
        let owners = self.devices.read().get(&device)?.qp_owners.clone()?;
        check_qp(cred, qpn, owners.owner(port, qpn)).err()
    }

    /// A path query of `client` from `port` to `addr`, through the host's
    /// path cache (`path_cache`): `None` when it goes to the SA, with a TID
    /// of the daemon's (the processes' own TIDs collide) remembered to route
    /// the answer back; else answered from the cache, or waiting for the
    /// same query in flight. A query to an SM the port had before goes to
    /// the one it has now (`addr` is changed), and its answer is handed
    /// back as from the LID asked ([`FormerSms`]).
    fn track_sa_query(
        &self,
        st: &mut State,
        client: ClientId,
        port: u8,
        addr: &mut MadAddr,
        mad: &mut Mad,
    ) -> Option<SaServed> {
        let c = st.clients.get_mut(&client)?;
        let mut alias = None;
        let sa_port = self.devices.read().get(&c.device).and_then(|d| {
            let now = d.live.state(port);
            let in_process = d.transport.as_loop().is_some();
            if let Some(to) = now.and_then(|n| d.former_sms.redirect(port, addr, n, in_process)) {
                alias = Some(addr.dlid);
                *addr = to;
            }
            SaPort::of(&d.info, now, port, addr)
        });
        match st
            .sa
            .ask(client, &mut c.sa_waits, sa_port, (addr.dlid, alias), mad)
        {
            Asked::Send => None,
            Asked::Waits => Some(SaServed::Waits),
            Asked::Answered(answer, from) => {
                Some(SaServed::Answered(Recipient::of(c), answer, from))
            }
        }
    }

    /// The slice state of `local_id` (tests).
    #[cfg(test)]
    pub(super) fn slice_owner(&self, local_id: u32) -> Option<ClientId> {
        match self.state.lock().slices[self.slice_index(local_id)] {
            Slice::Owned(c) => Some(c),
            _ => None,
        }
    }

    /// How many SA queries the daemon waits for (tests).
    #[cfg(test)]
    pub(super) fn sa_in_flight(&self) -> usize {
        self.state.lock().sa.in_flight()
    }

    /// Ends every timewait now (tests of slice reuse).
    #[cfg(test)]
    pub(super) fn end_timewaits(&self) {
        let now = Instant::now();
        for s in self.state.lock().slices.iter_mut() {
            if let Slice::TimeWait(until, _) = s {
                *until = now;
            }
        }
    }

    /// Whether the switch serves `device`.
    pub fn has_device(&self, device: &str) -> bool {
        self.devices.read().contains_key(device)
    }
}

use crate::errno::{EACCES, EPERM};

/// The port of an rdma_cm service ID below 1024: `(port space << 16) +
/// port` (`cma_get_service_id`) in the port spaces IPoIB, TCP, UDP and IB.
fn privileged_rdma_cm_port(service_id: u64) -> Option<u16> {
    const PORT_SPACES: [u64; 4] = [0x0002, 0x0106, 0x0111, 0x013f];
    let port = (service_id & 0xffff) as u16;
    (PORT_SPACES.contains(&(service_id >> 16)) && port < 1024).then_some(port)
}

/// Whether process `cred` may bind a port below 1024: root, or
/// CAP_NET_BIND_SERVICE in its effective set (`/proc/PID/status`, read as
/// the kernel had it then; a process the daemon cannot see, as under the
/// unit's `ProtectProc=invisible`, has none).
fn may_bind_privileged(cred: PeerCred) -> bool {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    cred.uid == 0
        || std::fs::read_to_string(format!("/proc/{}/status", cred.pid))
            .ok()
            .and_then(|status| {
                let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
                u64::from_str_radix(hex.trim(), 16).ok()
            })
            .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

/// SubnAdmGet or SubnAdmGetTable of PathRecord: what the library's SA
/// client sends (`ib_sa_path_rec_get`).
fn is_path_query(mad: &Mad) -> bool {
    use crate::wire::sa::{ATTR_PATH_RECORD, METHOD_GET, METHOD_GET_TABLE};
    matches!(mad[3], METHOD_GET | METHOD_GET_TABLE)
        && u16::from_be_bytes([mad[16], mad[17]]) == ATTR_PATH_RECORD
}
use crate::errno::EAGAIN;

/// A REJ, reason timeout, with remote comm ID 0.
fn is_rej_timeout_for_nobody(mad: &Mad) -> bool {
    let timeout = crate::abi::ib_cm_rej_reason::IB_CM_REJ_TIMEOUT as u16;
    Rej::decode(mad).is_ok_and(|rej| rej.remote_comm_id == 0 && rej.reason == timeout)
}

/// The kernel's answer to a REQ nobody listens for (`cm_req_handler` →
/// `cm_issue_rej`): REJ, invalid service ID, with the REQ's comm IDs swapped.
fn no_listener_rej(mad: &Mad, tid: u64) -> Route {
    let rej = Rej {
        remote_comm_id: be32(mad, LOCAL_COMM_ID),
        local_comm_id: be32(mad, REMOTE_COMM_ID),
        message_rejected: MsgResponse::Req,
        reason: REJ_INVALID_SERVICE_ID,
        ..Rej::default()
    };
    Route::Answer(Box::new(rej.encode(tid)), SwitchCounter::RxStatelessRej)
}

/// The kernel's answer to a SIDR_REQ nobody listens for: SIDR_REP,
/// unsupported.
fn no_listener_sidr_rep(mad: &Mad, tid: u64, service_id: u64) -> Route {
    let rep = SidrRep {
        request_id: be32(mad, LOCAL_COMM_ID),
        status: SIDR_UNSUPPORTED,
        service_id,
        ..SidrRep::default()
    };
    Route::Answer(
        Box::new(rep.encode(tid, 0)),
        SwitchCounter::RxStatelessSidrRep,
    )
}

/// The kernel's answer to a DREQ for no connection (`cm_issue_drep`).
fn stateless_drep(mad: &Mad, tid: u64) -> Route {
    let drep = Drep {
        local_comm_id: be32(mad, REMOTE_COMM_ID),
        remote_comm_id: be32(mad, LOCAL_COMM_ID),
        ..Drep::default()
    };
    Route::Answer(Box::new(drep.encode(tid)), SwitchCounter::RxStatelessDrep)
}
