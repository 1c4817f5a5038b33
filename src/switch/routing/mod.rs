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
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use super::path_cache::{SaQueries, SaWaits};
use super::rules::RoutedRequests;
use crate::os::seqpacket::{PeerCred, SeqPacket};
use crate::transport::{IdSlice, MadAddr};
use crate::wire::Mad;
use counters::{ALL_COUNTERS, LogBudget};
use devices::SwitchDevice;

/// `IB_CM_ASSIGN_SERVICE_ID` and the first service ID the daemon assigns.
const CM_ASSIGN_SERVICE_ID: u64 = 0x0200_0000_0000_0000;
/// `IB_SERVICE_ID_AGN_MASK`: the bits that say "assigned by the CM".
const SERVICE_ID_AGN_MASK: u64 = 0xff00_0000_0000_0000;
/// `IB_CM_REJ_INVALID_SERVICE_ID`, `IB_SIDR_UNSUPPORTED`.
const REJ_INVALID_SERVICE_ID: u16 = 8;
const SIDR_UNSUPPORTED: u8 = 1;
/// How many service IDs one process may listen on through the daemon: far
/// more than any real program (a server listens on a handful, rdma_cm's
/// ucma on one per bound port), and a bound on what one process makes the
/// daemon keep: 200,000 listens of a hostile one took 18 MiB. A user's
/// processes together are bound by [`Quotas::listens`].
pub(super) const MAX_LISTENS_PER_PROCESS: usize = 4096;

/// The offset in a MAD (header included) of a REQ's or SIDR_REQ's service ID.
const SERVICE_ID_OF_REQ: usize = 32;

mod clients;
mod config;
mod counters;
mod devices;
mod inbound;
mod outbound;

pub use config::{Quotas, SwitchConfig};
pub use counters::SwitchCounter;

/// A user, by its uid (`SO_PEERCRED`).
type Uid = u32;

/// A registered process, by the number the switch gave it.
pub type ClientId = u64;

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
}
