//! The host's path cache: the SA path queries of every tenant of `ibcmd`,
//! asked of the SA once per port and path (issue 33). With P processes per
//! host each asking for the same N-1 destinations, the SA sees N-1 queries
//! per host, not P(N-1).
//!
//! What a tenant's SubnAdmGet(PathRecord) meets:
//! - its answer cached ([`PathCache`], keyed by the port's identity and the
//!   query's component mask and record): the SA's answer as it came, at
//!   once, with the tenant's TID;
//! - the same query in flight: it waits for that query's answer, which
//!   goes to every waiter with its own TID (no second query; the tenant's
//!   own retry of it sends the query again, as the SA may have lost it);
//! - neither: the query goes to the SA with a TID of the daemon's.
//!
//! An answer with status 0 from the SA the query went to is cached; an
//! error is handed to the waiters and not kept (an error other than Busy
//! also drops the port's answers for that destination). The cache serves
//! only plain SubnAdmGets (what the library sends: every other byte of the
//! MAD zero, so the key is the whole query) to the SM the daemon knows for
//! the port; any other path query (a GetTable, another SA address) goes to
//! the SA by itself as before.
//!
//! Nothing here blocks: a query in flight is a list of (process, its TID)
//! waiters, each process's waits bounded by [`SA_PENDING_MAX`] (its oldest
//! forgotten) and dropped when it leaves; a query nobody waits for any more
//! is forgotten with them, so what the daemon holds is bounded by its
//! processes' waits.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::proto::DeviceInfo;
use super::routing::ClientId;
use super::rules::be32;
use crate::sa::cache::{Config, Counters, Epoch, Key, PathCache, PortId, PortView};
use crate::sa::pathrec::RECORD_SIZE;
use crate::transport::MadAddr;
use crate::transport::loopback::LoopIdentity;
use crate::transport::port_watch::Change;
use crate::transport::sysfs::PortState;
use crate::wire::Mad;

/// How many SM LIDs a served device's ports had before the ones they have
/// now the daemon remembers (the oldest forgotten): SMs do not move often,
/// and a tenant registered before more moves than that reopens.
const FORMER_SMS_MAX: usize = 8;

/// How many SA queries in flight the daemon remembers per process (its
/// oldest forgotten): one that floods the SA cannot make the daemon forget
/// the queries of the others.
pub(super) const SA_PENDING_MAX: usize = 1024;

/// A query in flight that a new asker joins is sent again when its last
/// send is older than this: its answer was likely lost, and the asker's
/// first try should not wait out a try of its own for it.
const RESEND_STALE: Duration = Duration::from_secs(1);

use crate::wire::sa::{
    COMP_MASK_OFFSET as COMP_MASK_AT, MAD_STATUS_BUSY as STATUS_BUSY, METHOD_GET, METHOD_GET_RESP,
    RECORD_OFFSET as RECORD_AT,
};

/// An SA answer as it came, and whence: what a hit hands on.
#[derive(Clone, Copy)]
pub(super) struct SaAnswer {
    mad: Mad,
    from: MadAddr,
}

/// The port a tenant's query leaves from, as the cache sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct SaPort {
    id: PortId,
    view: PortView,
}

impl SaPort {
    /// Port `port` of `info`, which looks like `now` (as last read; `None`:
    /// as it opened), for a query sent to `addr`: `None` when the device
    /// has no such port or the query goes elsewhere than to the SM the
    /// daemon knows now (its answer is not every tenant's to share).
    pub(super) fn of(
        info: &DeviceInfo,
        now: Option<PortState>,
        port: u8,
        addr: &MadAddr,
    ) -> Option<Self> {
        let p = info.ports.iter().find(|p| p.port_num == port)?;
        let view = now.map_or(
            PortView {
                lid: p.lid,
                sm_lid: p.sm_lid,
                sm_sl: p.sm_sl,
            },
            |now| PortView {
                lid: now.lid,
                sm_lid: now.sm_lid,
                sm_sl: now.sm_sl,
            },
        );
        (view.sm_lid != 0 && addr.dlid == view.sm_lid).then_some(SaPort {
            id: PortId {
                node_guid: info.node_guid,
                port_num: port,
            },
            view,
        })
    }
}

/// The SM LIDs the ports of a served device had before the ones they have
/// now, (port, LID), the newest last: a tenant registered before the SM
/// moved was told one of them, and its library, if it cannot read the
/// host's sysfs (a container), still sends its path queries there.
#[derive(Default)]
pub(super) struct FormerSms(Mutex<Vec<(u8, u16)>>);

impl FormerSms {
    /// A port changed: the SM LID it had is a former one, the one it has
    /// is not.
    pub(super) fn port_changed(&self, change: &Change) {
        let (old, new) = (change.old.sm_lid, change.new.sm_lid);
        if old == new {
            return;
        }
        let mut former = self.0.lock();
        former.retain(|&(port, lid)| port != change.port_num || (lid != old && lid != new));
        if old != 0 {
            if former.len() >= FORMER_SMS_MAX {
                former.remove(0);
            }
            former.push((change.port_num, old));
        }
    }

    /// Where a path query of a tenant from `port` to `addr` goes when
    /// `addr` is an SM the port had before: the SM it has now (`now`), on
    /// the in-process fabric by its GID. `None`: it goes where it was sent.
    pub(super) fn redirect(
        &self,
        port: u8,
        addr: &MadAddr,
        now: PortState,
        in_process: bool,
    ) -> Option<MadAddr> {
        let former = (now.sm_lid != 0 && addr.dlid != now.sm_lid)
            && self.0.lock().contains(&(port, addr.dlid));
        former.then(|| MadAddr {
            dlid: now.sm_lid,
            sl: now.sm_sl,
            // An SA query in the subnet needs no GRH; the in-process fabric
            // delivers by GID.
            grh: false,
            dgid: match in_process {
                true => LoopIdentity::from_lid(now.sm_lid).map_or([0; 16], |l| l.gid),
                false => [0; 16],
            },
            ..*addr
        })
    }
}

/// The cache key of `mad` asked from `port`: for a plain SubnAdmGet only,
/// every byte of it but the TID's and those of the key zero, so that two
/// queries with the same key are the same query.
fn key_of(port: PortId, mad: &Mad) -> Option<Key> {
    let plain = mad[..4]
        == [
            1,
            crate::sa::MGMT_CLASS_SA,
            crate::sa::SA_CLASS_VERSION,
            METHOD_GET,
        ]
        && mad[4..8].iter().all(|&b| b == 0)
        && mad[18..COMP_MASK_AT].iter().all(|&b| b == 0)
        && mad[RECORD_AT + RECORD_SIZE..].iter().all(|&b| b == 0);
    if !plain {
        return None;
    }
    let comp_mask = u64::from_be_bytes(mad[COMP_MASK_AT..RECORD_AT].try_into().ok()?);
    let record = mad[RECORD_AT..RECORD_AT + RECORD_SIZE].try_into().ok()?;
    Some(Key::of_wire(port, comp_mask, record))
}

/// What an answer to a cacheable query is kept as.
struct Keep {
    key: Key,
    view: PortView,
    asked_in: Epoch,
}

/// One SA query the daemon sent, and who waits for its answer.
struct Flight {
    /// `None`: a query the cache does not keep, with its one asker.
    keep: Option<Keep>,
    /// The SA's LID: only its answer is kept.
    sa_lid: u16,
    /// (process, its TID), in the order they asked.
    waiters: Vec<(ClientId, u32)>,
    /// The waiters that asked an SM the port had before ([`FormerSms`]),
    /// and its LID: their answer is handed back as from there.
    aliases: Vec<((ClientId, u32), u16)>,
    last_sent: Instant,
}

/// Who waits for an answer: a process, its TID, and the LID its answer is
/// handed back as from when it asked an SM the port had before.
pub(super) type Waiter = (ClientId, u32, Option<u16>);

/// A process's waits, oldest first: (the daemon's TID, its own). Some may
/// be answered already.
pub(super) type SaWaits = VecDeque<(u32, u32)>;

/// What becomes of a tenant's path query.
pub(super) enum Asked {
    /// Send it to the SA: its TID is the daemon's now.
    Send,
    /// Hand this answer (the tenant's TID in it) back to the tenant, from
    /// the address the SA's came from.
    Answered(Box<Mad>, MadAddr),
    /// It waits for the same query in flight.
    Waits,
}

/// The SA queries in flight and the cache of their answers.
pub(super) struct SaQueries {
    cache: PathCache<SaAnswer>,
    /// By the daemon's TID.
    flights: HashMap<u32, Flight>,
    /// The cacheable ones, by key.
    by_key: HashMap<Key, u32>,
    next_tid: u32,
}

impl SaQueries {
    pub(super) fn new(config: Config) -> Self {
        SaQueries {
            cache: PathCache::new(config),
            flights: HashMap::new(),
            by_key: HashMap::new(),
            next_tid: 1,
        }
    }

    /// Process `client` (whose waits are `waits`) sends path query `mad`
    /// from `port` (`None`: not one the cache may serve) to the SA at
    /// `sa_lid`; `alias`: the former SM's LID it sent it to, when the
    /// daemon sends it to `sa_lid` instead ([`FormerSms`]).
    pub(super) fn ask(
        &mut self,
        client: ClientId,
        waits: &mut SaWaits,
        port: Option<SaPort>,
        (sa_lid, alias): (u16, Option<u16>),
        mad: &mut Mad,
    ) -> Asked {
        let waiter = (client, be32(mad, 12));
        let asked = self.ask_as(waiter, waits, port, sa_lid, mad);
        if let Some(lid) = alias {
            match asked {
                Asked::Answered(mad, from) => {
                    return Asked::Answered(mad, MadAddr { dlid: lid, ..from });
                }
                Asked::Send | Asked::Waits => {
                    let tid = be32(mad, 12);
                    if let Some(flight) = self.flights.get_mut(&tid)
                        && !flight.aliases.iter().any(|(w, _)| *w == waiter)
                    {
                        flight.aliases.push((waiter, lid));
                    }
                }
            }
        }
        asked
    }

    fn ask_as(
        &mut self,
        waiter: (ClientId, u32),
        waits: &mut SaWaits,
        port: Option<SaPort>,
        sa_lid: u16,
        mad: &mut Mad,
    ) -> Asked {
        let Some((key, view)) = port.and_then(|p| Some((key_of(p.id, mad)?, p.view))) else {
            let tid = self.start(None, sa_lid, waiter, waits);
            mad[12..16].copy_from_slice(&tid.to_be_bytes());
            return Asked::Send;
        };
        let in_flight = self.by_key.get(&key).copied();
        let asked_in = match self.cache.lookup(&key, view, in_flight.is_some()) {
            Ok(answer) => {
                let mut mad = answer.mad;
                mad[12..16].copy_from_slice(&waiter.1.to_be_bytes());
                return Asked::Answered(Box::new(mad), answer.from);
            }
            Err(epoch) => epoch,
        };
        let (tid, send) = match in_flight {
            Some(tid) => (tid, self.join(tid, waiter, waits)),
            None if self.cache.config().ttl.is_zero() => {
                (self.start(None, sa_lid, waiter, waits), true)
            }
            None => {
                let keep = Keep {
                    key,
                    view,
                    asked_in,
                };
                let tid = self.start(Some(keep), sa_lid, waiter, waits);
                self.by_key.insert(key, tid);
                (tid, true)
            }
        };
        mad[12..16].copy_from_slice(&tid.to_be_bytes());
        if send { Asked::Send } else { Asked::Waits }
    }

    /// A new flight with its first waiter: its TID.
    fn start(
        &mut self,
        keep: Option<Keep>,
        sa_lid: u16,
        waiter: (ClientId, u32),
        waits: &mut SaWaits,
    ) -> u32 {
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1).max(1);
        self.flights.insert(
            tid,
            Flight {
                keep,
                sa_lid,
                waiters: vec![waiter],
                aliases: Vec::new(),
                last_sent: Instant::now(),
            },
        );
        self.remember(waits, tid, waiter);
        tid
    }

    /// `waiter` joins flight `tid`: whether the query goes to the SA again
    /// (the waiter's own retry, or a flight gone stale).
    fn join(&mut self, tid: u32, waiter: (ClientId, u32), waits: &mut SaWaits) -> bool {
        let Some(flight) = self.flights.get_mut(&tid) else {
            return true;
        };
        let retry = flight.waiters.contains(&waiter);
        let resend = retry || flight.last_sent.elapsed() >= RESEND_STALE;
        if resend {
            flight.last_sent = Instant::now();
        }
        if !retry {
            flight.waiters.push(waiter);
            self.remember(waits, tid, waiter);
        }
        resend
    }

    /// Adds a wait of a process; at [`SA_PENDING_MAX`], its oldest goes.
    fn remember(&mut self, waits: &mut SaWaits, tid: u32, waiter: (ClientId, u32)) {
        if waits.len() >= SA_PENDING_MAX
            && let Some((old, theirs)) = waits.pop_front()
        {
            self.drop_wait(old, (waiter.0, theirs));
        }
        waits.push_back((tid, waiter.1));
    }

    /// `waiter` no longer waits for flight `tid`; a flight nobody waits for
    /// is forgotten.
    fn drop_wait(&mut self, tid: u32, waiter: (ClientId, u32)) {
        let Some(flight) = self.flights.get_mut(&tid) else {
            return;
        };
        flight.waiters.retain(|w| *w != waiter);
        flight.aliases.retain(|(w, _)| *w != waiter);
        if flight.waiters.is_empty() {
            self.end(tid);
        }
    }

    /// Flight `tid` taken out, with its key.
    fn end(&mut self, tid: u32) -> Option<Flight> {
        let flight = self.flights.remove(&tid)?;
        if let Some(keep) = &flight.keep
            && self.by_key.get(&keep.key) == Some(&tid)
        {
            self.by_key.remove(&keep.key);
        }
        Some(flight)
    }

    /// Process `client` left: its waits end.
    pub(super) fn forget(&mut self, client: ClientId, waits: &SaWaits) {
        for &(tid, theirs) in waits {
            self.drop_wait(tid, (client, theirs));
        }
    }

    /// The SA's answer `mad`, from `from`: who waited for it (each to get it
    /// with its own TID). A success from the SA the query went to is kept;
    /// an error other than Busy drops the port's answers for that
    /// destination.
    pub(super) fn answered(&mut self, mad: &Mad, from: &MadAddr) -> Vec<Waiter> {
        let Some(flight) = self.end(be32(mad, 12)) else {
            return Vec::new();
        };
        if let Some(keep) = flight.keep {
            let status = u16::from_be_bytes([mad[4], mad[5]]);
            if status == 0 && mad[3] == METHOD_GET_RESP && from.dlid == flight.sa_lid {
                let answer = SaAnswer {
                    mad: *mad,
                    from: *from,
                };
                self.cache.keep(keep.key, keep.view, answer, keep.asked_in);
            } else if status & STATUS_BUSY == 0 && status != 0 {
                self.cache
                    .invalidate_destination(keep.key.port(), &keep.key.dgid());
            }
        }
        let alias = |w: &(ClientId, u32)| {
            let found = flight.aliases.iter().find(|(a, _)| a == w);
            found.map(|&(_, lid)| lid)
        };
        let waiters = flight.waiters.iter();
        waiters.map(|w| (w.0, w.1, alias(w))).collect()
    }

    pub(super) fn counters(&self) -> Counters {
        self.cache.counters()
    }

    /// Port `port` changed (its LID, SM or state): its answers go, and
    /// those of its queries in flight are not kept.
    pub(super) fn invalidate_port(&mut self, port: PortId) {
        self.cache.invalidate_port(port);
    }

    /// How many queries are in flight (tests).
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.flights.len()
    }
}
