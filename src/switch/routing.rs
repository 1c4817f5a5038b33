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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use super::proto::{DeviceInfo, ToClient};
use crate::errno::{CmResult, EBUSY, EINVAL, ENODEV, ENOMEM, Errno};
use crate::ffi::seqpacket::{PeerCred, SeqPacket};
use crate::ibcm_log;
use crate::transport::{IdSlice, MadAddr, MadTransport, RecvFn};
use crate::wire::{Drep, Mad, MsgResponse, Rej, SidrRep, attr, parse_header};

/// `IB_CM_ASSIGN_SERVICE_ID` and the first service ID the daemon assigns.
const CM_ASSIGN_SERVICE_ID: u64 = 0x0200_0000_0000_0000;
/// `IB_SERVICE_ID_AGN_MASK`: the bits that say "assigned by the CM".
const SERVICE_ID_AGN_MASK: u64 = 0xff00_0000_0000_0000;
/// `IB_CM_REJ_INVALID_SERVICE_ID`, `IB_SIDR_UNSUPPORTED`.
const REJ_INVALID_SERVICE_ID: u16 = 8;
const SIDR_UNSUPPORTED: u8 = 1;
/// The SA's management class: path queries of the processes.
const MGMT_CLASS_SA: u8 = crate::sa::MGMT_CLASS_SA;
const MGMT_CLASS_CM: u8 = crate::wire::MGMT_CLASS_CM;
/// How many SA queries in flight the daemon remembers per process (its
/// oldest forgotten).
const SA_PENDING_MAX: usize = 1024;
/// How many service IDs one process may listen on through the daemon: far
/// more than any real program (a server listens on a handful, rdma_cm's
/// ucma on one per bound port), and a bound on what one process makes the
/// daemon keep: 200,000 listens of a hostile one took 18 MiB.
pub(super) const MAX_LISTENS_PER_PROCESS: usize = 4096;

/// Offsets in a MAD (header included) of the fields routing reads.
const LOCAL_COMM_ID: usize = 24;
const REMOTE_COMM_ID: usize = 28;
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
}

impl Default for SwitchConfig {
    fn default() -> Self {
        Self {
            slice_bits: 20,
            timewait: Duration::from_secs(60),
            quotas: Quotas::default(),
            register_deadline: Duration::from_secs(10),
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
    /// Service IDs listened on, over all the user's processes. Beyond:
    /// `Listen` answered `-ENOMEM` (the kernel's `cm_init_listen` errno).
    pub listens: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            connections: 512,
            registrations: 256,
            slices: 0,
            listens: 4096,
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
}

/// Every counter, in the order `--stats` prints them.
const ALL_COUNTERS: [SwitchCounter; 16] = [
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
        }
    }
}

/// A user, by its uid (`SO_PEERCRED`).
type Uid = u32;

/// A registered process, by the number the switch gave it.
pub type ClientId = u64;

/// One device the switch serves.
struct SwitchDevice {
    info: DeviceInfo,
    transport: Arc<dyn MadTransport>,
}

/// One registered process.
struct Client {
    device: String,
    slice: usize,
    conn: Arc<SeqPacket>,
    cred: PeerCred,
    /// Its SA queries' TIDs (the daemon's), oldest first; some answered.
    sa_order: VecDeque<u32>,
    /// The REQs routed to it that it has not answered yet.
    reqs: ReqsReceived,
    /// The SIDR_REQs routed to it that it has not answered yet.
    sidr_reqs: ReqsReceived,
    /// It sent a MAD carrying one of its comm IDs: a peer may know one, so
    /// its slice needs the timewait when it goes.
    used: bool,
    /// The service IDs it listens on (each counted in its `Listen`).
    listens: usize,
    /// Its refusal at [`MAX_LISTENS_PER_PROCESS`] was logged.
    listen_cap_logged: bool,
}

/// The REQs (their senders' comm IDs) a process got and has neither
/// answered with a REP nor rejected; the oldest forgotten beyond a bound.
#[derive(Default)]
struct ReqsReceived {
    ids: HashSet<u32>,
    order: VecDeque<u32>,
}

impl ReqsReceived {
    /// More REQ_RCVD ids than any process keeps: a bound on the daemon's
    /// memory when a process never answers (or answers, as `order` keeps
    /// the answered ones until they reach its front).
    const MAX: usize = 1 << 16;

    fn insert(&mut self, remote_id: u32) {
        if !self.ids.insert(remote_id) {
            return; // a retransmission
        }
        self.order.push_back(remote_id);
        while self.order.len() > Self::MAX {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }

    fn contains(&self, remote_id: u32) -> bool {
        self.ids.contains(&remote_id)
    }

    /// Leaves its place in `order` (dropped when it comes to the front):
    /// no scan of the queue under the daemon's lock for every REP.
    fn remove(&mut self, remote_id: u32) {
        self.ids.remove(&remote_id);
    }
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
    /// SA query TID (low 32 bits) the daemon sent → (process, its TID).
    sa_pending: HashMap<u32, (ClientId, u32)>,
    next_sa_tid: u32,
}

/// The MAD switch.
pub struct Switch {
    config: SwitchConfig,
    devices: RwLock<HashMap<String, Arc<SwitchDevice>>>,
    state: Mutex<State>,
    /// Connections to the socket per user (its own lock: accepting never
    /// waits for routing).
    connections: Mutex<HashMap<Uid, usize>>,
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

/// What becomes of a received MAD.
enum Route {
    To(Arc<SeqPacket>, SwitchCounter),
    /// To each of these processes (a REJ TIMEOUT for no comm ID).
    ToAll(Vec<Arc<SeqPacket>>),
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

/// Reads the big-endian u32 at `at`.
fn be32(mad: &Mad, at: usize) -> u32 {
    u32::from_be_bytes(mad[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(mad: &Mad, at: usize) -> u64 {
    u64::from_be_bytes(mad[at..at + 8].try_into().expect("8 bytes"))
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
                sa_pending: HashMap::new(),
                next_sa_tid: 1,
            }),
            connections: Mutex::new(HashMap::new()),
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
        let me = Arc::downgrade(self);
        let device = name.to_owned();
        let recv: RecvFn = Arc::new(move |port, addr, mad| {
            if let Some(switch) = Weak::upgrade(&me) {
                switch.inbound(&device, port, addr, &mad);
            }
        });
        let (info, transport) = open(recv)?;
        self.devices
            .write()
            .insert(name.to_owned(), Arc::new(SwitchDevice { info, transport }));
        Ok(())
    }

    /// Stops every device's transport and ends every process's connection:
    /// each sees the daemon gone.
    pub fn close(&self) {
        for (_, d) in self.devices.write().drain() {
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
    pub(super) fn count_loss(&self, counter: SwitchCounter, what: impl FnOnce() -> String) {
        let n = self.counters[counter as usize].fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            ibcm_log!(Warn, "ibcmd: {} ({} {n} so far)", what(), counter.name());
        }
    }

    pub fn counter(&self, counter: SwitchCounter) -> u64 {
        self.counters[counter as usize].load(Ordering::Relaxed)
    }

    pub fn counters(&self) -> Vec<(String, u64)> {
        ALL_COUNTERS
            .iter()
            .map(|&c| (c.name().to_owned(), self.counter(c)))
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
            .map(|d| d.info.clone())
            .ok_or(ENODEV)?;
        let mut st = self.state.lock();
        let now = Instant::now();
        let n = st.slices.len();
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
        // Whoever may connect may register, but one user may not take every
        // slice: registering and leaving (one MAD each, so the slice needs
        // its timewait) 4095 times took a few seconds and locked every other
        // user out for the timewait.
        if self.slices_of_user(&st, cred.uid, now) >= self.max_slices_per_user(n) {
            drop(st);
            ibcm_log!(
                Warn,
                "ibcmd: process {} (uid {}) refused: its user holds {} comm ID slices, owned or in timewait",
                cred.pid,
                cred.uid,
                self.max_slices_per_user(n)
            );
            return Err(EAGAIN);
        }
        let client = st.next_client;
        st.next_client += 1;
        st.slices[index] = Slice::Owned(client);
        st.next_slice = (index + 1) % n;
        st.clients.insert(
            client,
            Client {
                device: device.to_owned(),
                slice: index,
                conn,
                cred,
                used: false,
                listens: 0,
                listen_cap_logged: false,
                reqs: ReqsReceived::default(),
                sidr_reqs: ReqsReceived::default(),
                sa_order: VecDeque::new(),
            },
        );
        drop(st);
        self.count(SwitchCounter::Registered);
        let slice = self.slice_of(index);
        ibcm_log!(
            Info,
            "ibcmd: process {} (uid {}, gid {}) registered for {device}: comm IDs {:#010x}..={:#010x}",
            cred.pid,
            cred.uid,
            cred.gid,
            slice.base,
            slice.base | slice.mask()
        );
        Ok((client, slice, info))
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

    /// A quarter of the `n` slices (1023 of 4095): it takes four users of
    /// the socket's group to lock the others out.
    fn max_slices_per_user(&self, n: usize) -> usize {
        ((n - 1) / 4).max(1)
    }

    /// The process went away (its socket closed): its listens end at once,
    /// its slice is answered statelessly and freed after the timewait.
    pub fn unregister(&self, client: ClientId) {
        let mut st = self.state.lock();
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
        st.listens.retain(|_, l| l.client != client);
        st.sa_pending.retain(|_, (c, _)| *c != client);
        drop(st);
        self.count(SwitchCounter::Gone);
        ibcm_log!(
            Info,
            "ibcmd: process {} left {}: its comm IDs are answered statelessly for {:?}",
            gone.cred.pid,
            gone.device,
            self.config.timewait
        );
    }

    /// `ib_cm_listen` of a process: exact match (`mask` all ones), every port
    /// (0) or one. `-EBUSY` when another process listens on it already,
    /// `-ENOMEM` beyond [`MAX_LISTENS_PER_PROCESS`].
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
        if c.listens >= MAX_LISTENS_PER_PROCESS {
            // The kernel's errno when cm_init_listen cannot allocate.
            if !std::mem::replace(&mut c.listen_cap_logged, true) {
                ibcm_log!(
                    Warn,
                    "ibcmd: process {} (uid {}) on {} holds {MAX_LISTENS_PER_PROCESS} listens: \
                     its further listens are refused with -ENOMEM",
                    c.cred.pid,
                    c.cred.uid,
                    c.device
                );
            }
            return Err(ENOMEM);
        }
        let key = if assign {
            let assigned = st.next_service_id;
            st.next_service_id += 1;
            (key.0, assigned)
        } else {
            key
        };
        c.listens += 1;
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
            c.listens -= 1;
        }
    }

    /// A MAD received on `device` `port`.
    pub fn inbound(&self, device: &str, port: u8, addr: MadAddr, mad: &Mad) {
        match self.route(device, port, addr, mad) {
            Route::To(conn, counter) => {
                let msg = ToClient::Recv {
                    port,
                    addr,
                    mad: Box::new(*mad),
                };
                // Never wait for a process: a full socket loses the MAD, as
                // a full receive queue would; the sender retransmits.
                match conn.send(&msg.encode(), false) {
                    Ok(()) => self.count(counter),
                    Err(e) => self.count_loss(SwitchCounter::RxClientBusy, || {
                        lost_inbound(device, port, mad, e)
                    }),
                }
            }
            Route::ToAll(conns) => {
                let msg = ToClient::Recv {
                    port,
                    addr,
                    mad: Box::new(*mad),
                }
                .encode();
                for conn in conns {
                    match conn.send(&msg, false) {
                        Ok(()) => self.count(SwitchCounter::RxToOwner),
                        Err(e) => self.count_loss(SwitchCounter::RxClientBusy, || {
                            lost_inbound(device, port, mad, e)
                        }),
                    }
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
            return self.route_sa_answer(addr, mad);
        }
        let Ok((header, _)) = parse_header(mad) else {
            return Route::Drop;
        };
        let mut st = self.state.lock();
        if matches!(header.attr_id, attr::REQ | attr::SIDR_REQ) {
            self.remember_req(&mut st, device, port, header.attr_id, mad);
        }
        let owner = |local_id: u32| {
            let Slice::Owned(client) = st.slices.get(self.slice_index(local_id))? else {
                return None;
            };
            let c = st.clients.get(client)?;
            (c.device == device).then(|| Route::To(c.conn.clone(), SwitchCounter::RxToOwner))
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
                    Some(c) => Route::To(c.conn.clone(), SwitchCounter::RxToListener),
                    None if header.attr_id == attr::REQ => no_listener_rej(mad, header.tid),
                    None => no_listener_sidr_rep(mad, header.tid, service_id),
                }
            }
            attr::SIDR_REP => owner(be32(mad, LOCAL_COMM_ID)).unwrap_or(Route::Drop),
            // The REJ TIMEOUT of an active side destroyed in REQ_SENT names
            // no comm ID of ours (it never learnt it): the kernel finds the
            // id by the ARI's node GUID and the sender's comm ID
            // (cm_acquire_rejected_id). Only the engines know those: every
            // process of the device gets it, the others drop it.
            attr::REJ if is_rej_timeout_for_nobody(mad) => Route::ToAll(
                st.clients
                    .values()
                    .filter(|c| c.device == device)
                    .map(|c| c.conn.clone())
                    .collect(),
            ),
            attr::REP | attr::RTU | attr::REJ | attr::MRA | attr::DREP | attr::LAP | attr::APR => {
                owner(be32(mad, REMOTE_COMM_ID)).unwrap_or(Route::Drop)
            }
            attr::DREQ => {
                owner(be32(mad, REMOTE_COMM_ID)).unwrap_or_else(|| stateless_drep(mad, header.tid))
            }
            _ => Route::Drop,
        }
    }

    /// A REQ or SIDR_REQ its listener will get: what that process may
    /// answer with a REJ of comm ID 0 (from REQ_RCVD, or stateless), a
    /// SIDR_REP (which carries no comm ID of its sender).
    fn remember_req(&self, st: &mut State, device: &str, port: u8, attr_id: u16, mad: &Mad) {
        let service_id = be64(mad, SERVICE_ID_OF_REQ);
        let Some(client) = st
            .listens
            .get(&(device.to_owned(), service_id))
            .filter(|l| l.port == 0 || l.port == port)
            .map(|l| l.client)
        else {
            return;
        };
        if let Some(c) = st.clients.get_mut(&client) {
            let received = match attr_id {
                attr::REQ => &mut c.reqs,
                _ => &mut c.sidr_reqs,
            };
            received.insert(be32(mad, LOCAL_COMM_ID));
        }
    }

    /// An SA answer goes to the process whose query it answers, with that
    /// process's TID back and the address it came from (the process takes
    /// an answer from the SM's LID only).
    fn route_sa_answer(&self, addr: MadAddr, mad: &Mad) -> Route {
        let tid = be32(mad, 12);
        let mut st = self.state.lock();
        let Some((client, their_tid)) = st.sa_pending.remove(&tid) else {
            return Route::Drop;
        };
        let Some(c) = st.clients.get(&client) else {
            return Route::Drop;
        };
        let conn = c.conn.clone();
        drop(st);
        let mut answer = *mad;
        answer[12..16].copy_from_slice(&their_tid.to_be_bytes());
        let msg = ToClient::Recv {
            port: 0,
            addr,
            mad: Box::new(answer),
        };
        match conn.send(&msg.encode(), false) {
            Ok(()) => self.count(SwitchCounter::RxSaAnswers),
            Err(e) => self.count_loss(SwitchCounter::RxClientBusy, || {
                format!("an SA answer for client {client} was lost, its socket refused it: {e}")
            }),
        }
        Route::Done
    }

    /// A MAD a process sends from `port` to `addr`: sent when its comm ID is
    /// the process's own, else dropped, counted and logged with the peer's
    /// credentials. `-EPERM` for a spoofed one, `-EINVAL` for one the
    /// switch does not carry.
    pub fn outbound(&self, client: ClientId, port: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let mut mad = *mad;
        let (transport, verdict) = {
            let mut st = self.state.lock();
            let Some(c) = st.clients.get(&client) else {
                return Err(EINVAL);
            };
            let device = c.device.clone();
            let slice = self.slice_of(c.slice);
            let transport = self
                .devices
                .read()
                .get(&device)
                .map(|d| d.transport.clone());
            let verdict = match mad[1] {
                // Path queries only: SubnAdmSet/Delete (a multicast leave, a
                // service record removed) would give every process the SA
                // access of the port, which needs umad access without ibcmd.
                MGMT_CLASS_SA if is_path_query(&mad) => {
                    self.track_sa_query(&mut st, client, &mut mad);
                    Ok(())
                }
                MGMT_CLASS_CM => self.may_send(c, &mad),
                _ => Err(EINVAL),
            };
            if verdict.is_ok() && mad[1] == MGMT_CLASS_CM {
                if let Some(c) = st.clients.get_mut(&client) {
                    c.used |= slice.contains(be32(&mad, LOCAL_COMM_ID));
                    // Its REP or REJ ends REQ_RCVD: no REJ of comm ID 0 after;
                    // a SIDR_REQ gets one SIDR_REP.
                    match u16::from_be_bytes([mad[16], mad[17]]) {
                        attr::REP | attr::REJ => c.reqs.remove(be32(&mad, REMOTE_COMM_ID)),
                        attr::SIDR_REP => c.sidr_reqs.remove(be32(&mad, LOCAL_COMM_ID)),
                        _ => {}
                    }
                }
            }
            (transport, verdict)
        };
        if let Err(e) = verdict {
            self.count(if e == EPERM {
                SwitchCounter::TxSpoofed
            } else {
                SwitchCounter::TxRefused
            });
            return Err(e);
        }
        let Some(transport) = transport else {
            self.count(SwitchCounter::TxRefused);
            return Err(ENODEV);
        };
        match transport.send(port, addr, &mad) {
            Ok(()) => {
                self.count(SwitchCounter::TxSent);
                Ok(())
            }
            Err(e) => {
                self.count_loss(SwitchCounter::TxRefused, || {
                    format!(
                        "a {} of client {client} was not sent on port {port}: {}",
                        attr::name(u16::from_be_bytes([mad[16], mad[17]])),
                        std::io::Error::from_raw_os_error(e.0)
                    )
                });
                Err(e)
            }
        }
    }

    /// Whether process `sender` may send the CM MAD `mad`.
    fn may_send(&self, sender: &Client, mad: &Mad) -> CmResult {
        let (slice, cred, device) = (self.slice_of(sender.slice), sender.cred, &sender.device);
        let attr_id = u16::from_be_bytes([mad[16], mad[17]]);
        let local_id = be32(mad, LOCAL_COMM_ID);
        let allowed = match attr_id {
            // A REJ of a REQ from REQ_RCVD (or stateless) carries 0: only
            // for a REQ this process got, else it could reject any host's
            // REQ_SENT id (cm_acquire_id(remote comm ID, 0) matches it).
            attr::REJ if local_id == 0 => sender.reqs.contains(be32(mad, REMOTE_COMM_ID)),
            attr::REJ => slice.contains(local_id),
            attr::REQ
            | attr::REP
            | attr::RTU
            | attr::MRA
            | attr::DREQ
            | attr::DREP
            | attr::LAP
            | attr::APR
            | attr::SIDR_REQ => slice.contains(local_id),
            // A SIDR_REP has no comm ID of its sender, and the requester
            // matches it by request ID alone: only for a SIDR_REQ this
            // process got (its listener may be gone since, as in the kernel).
            attr::SIDR_REP => sender.sidr_reqs.contains(local_id),
            _ => return Err(EINVAL),
        };
        if allowed {
            return Ok(());
        }
        ibcm_log!(
            Warn,
            "ibcmd: dropped a {} from process {} (uid {}, gid {}) on {device}: comm ID {local_id:#010x} \
             is not in its slice {:#010x}..={:#010x}",
            attr::name(attr_id),
            cred.pid,
            cred.uid,
            cred.gid,
            slice.base,
            slice.base | slice.mask()
        );
        Err(EPERM)
    }

    /// Gives an SA query a TID of the daemon's (the processes' own TIDs
    /// collide), remembered to route the answer back.
    fn track_sa_query(&self, st: &mut State, client: ClientId, mad: &mut Mad) {
        let theirs = be32(mad, 12);
        let ours = st.next_sa_tid;
        st.next_sa_tid = st.next_sa_tid.wrapping_add(1).max(1);
        // Each process's oldest go first: one that floods the SA cannot make
        // the daemon forget the queries of the others.
        let Some(c) = st.clients.get_mut(&client) else {
            return;
        };
        let forgotten = (c.sa_order.len() >= SA_PENDING_MAX)
            .then(|| c.sa_order.pop_front())
            .flatten();
        c.sa_order.push_back(ours);
        if let Some(old) = forgotten {
            st.sa_pending.remove(&old);
        }
        st.sa_pending.insert(ours, (client, theirs));
        mad[12..16].copy_from_slice(&ours.to_be_bytes());
    }

    /// The slice state of `local_id` (tests).
    #[cfg(test)]
    pub(super) fn slice_owner(&self, local_id: u32) -> Option<ClientId> {
        match self.state.lock().slices[self.slice_index(local_id)] {
            Slice::Owned(c) => Some(c),
            _ => None,
        }
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

const EPERM: Errno = Errno(libc::EPERM);

/// SubnAdmGet or SubnAdmGetTable of PathRecord: what the library's SA
/// client sends (`ib_sa_path_rec_get`).
fn is_path_query(mad: &Mad) -> bool {
    const METHOD_GET: u8 = 0x01;
    const METHOD_GET_TABLE: u8 = 0x12;
    const ATTR_PATH_RECORD: u16 = 0x0035;
    matches!(mad[3], METHOD_GET | METHOD_GET_TABLE)
        && u16::from_be_bytes([mad[16], mad[17]]) == ATTR_PATH_RECORD
}
const EAGAIN: Errno = Errno(libc::EAGAIN);

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
