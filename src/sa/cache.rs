//! A cache of the SA's PathRecord answers, so that the SA's load follows the
//! number of destinations, not of connections (issue 33): a path asked for
//! twice is asked of the SA once, concurrent asks for the same path share
//! one query in flight, and an answer lives until its TTL ends or something
//! makes it wrong.
//!
//! [`PathCache`] is a value, not a global: the process holds one
//! ([`process`], what `ibcm_init_path` uses) and a host-wide holder (the MAD
//! switch, for all its tenants) can hold another. Its keys say which port a
//! path leaves from by the port's identity on the host (node GUID, port
//! number), not by a handle of this process, and which path by the query's
//! wire bytes (component mask and PathRecord).
//!
//! What drops an answer:
//! - its TTL ([`DEFAULT_TTL`], `IBCM_PATH_CACHE_TTL_MS`);
//! - the port it was asked on looking different ([`PortView`]: its LID, SM
//!   LID or SM SL changed since): every answer of that port goes;
//! - [`PathCache::invalidate_port`]: what a port change calls (its state,
//!   LID, SM LID or SL read different, `transport::port_watch`);
//! - [`PathCache::invalidate_destination`]: a REQ on a path to that
//!   destination timed out;
//! - the bound on entries ([`DEFAULT_MAX_ENTRIES`]): the oldest goes first.
//!
//! Errors are not cached: the SA's error status may be its view during a
//! sweep, and a timeout says nothing of the next try. Asks that meet an error
//! in flight share it; the next ask asks again. An SA answering Busy gets a
//! bounded exponential backoff with jitter ([`Backoff`]), not a resend.
//!
//! What it keeps is a path ([`Path`], the library's) or, in a holder that
//! hands on the SA's answers as they came (the MAD switch), any small value
//! of its own: `PathCache<V>`. Such a holder keeps its queries in flight
//! and their askers itself, and asks without blocking ([`PathCache::lookup`],
//! [`PathCache::keep`]).
//!
//! Lock order: the cache's lock is taken last and nothing is called under
//! it (the SA is asked, and waiters woken, with it released).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::pathrec::{PathQuery, RECORD_SIZE};
use crate::cm::path::Path;
use crate::errno::{CmResult, EIO};

/// How long an answer is served without asking again: 5 minutes.
///
/// ibacm (rdma-core's SA cache) keeps routes with no timeout
/// (`route_timeout -1`) because it flushes them on every port event
/// (`IBV_EVENT_LID_CHANGE`, `_SM_CHANGE`, `_CLIENT_REREGISTER`, port
/// error). This library has no port events (they are verbs async events):
/// it reads a port's LID, SM and state again every `IBCM_PORT_POLL_MS`
/// (`transport::port_watch`), which sees the first, second and last, but
/// not a client reregister that changes none of them. A finite TTL bounds
/// how long a path from before such a reregister is served (a stale one
/// also goes at its first REQ timeout). Five minutes keeps the SA's load at one query per
/// destination per 5 minutes per cache: a 1,000-host job asks about 3 a
/// second per process, against the ~500,000 of one per connection.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// How many answers a cache holds: one per destination of a 16,384-node
/// all-to-all from one port, about 4 MB at most. The oldest goes first.
pub const DEFAULT_MAX_ENTRIES: usize = 16_384;

/// How a cache backs off from an SA that answers Busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first Busy; it doubles after each.
    pub first: Duration,
    /// The longest single wait.
    pub max: Duration,
    /// How many times a Busy answer is asked again before its error goes
    /// to the asker.
    pub retries: u32,
}

/// The default backoff: waits of 20, 40, 80, 160 and 320 ms (each between
/// half and all of it, at random, so that the hosts of a job that all met
/// a busy SA do not come back at once): at most 620 ms of waiting in all,
/// a third of `ibcm_init_path`'s 2 s bound on one query.
pub const DEFAULT_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(20),
    max: Duration::from_millis(320),
    retries: 5,
};

/// A cache's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How long an answer is served; zero turns the cache off (every ask
    /// is a query; Busy still backs off).
    pub ttl: Duration,
    pub max_entries: usize,
    pub busy: Backoff,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ttl: DEFAULT_TTL,
            max_entries: DEFAULT_MAX_ENTRIES,
            busy: DEFAULT_BACKOFF,
        }
    }
}

impl Config {
    /// The defaults, with the TTL of `IBCM_PATH_CACHE_TTL_MS` if it is set:
    /// milliseconds, 0 to 4294967295; another value keeps the default, with
    /// a warning.
    pub fn from_env() -> Self {
        let value = crate::os::sys::secure_var_os(c"IBCM_PATH_CACHE_TTL_MS");
        Config {
            ttl: parse_ttl(value.as_deref().and_then(|v| v.to_str())),
            ..Config::default()
        }
    }
}

/// The TTL a value of `IBCM_PATH_CACHE_TTL_MS` sets.
fn parse_ttl(value: Option<&str>) -> Duration {
    let Some(value) = value else {
        return DEFAULT_TTL;
    };
    match value.trim().parse::<u32>() {
        Ok(ms) => Duration::from_millis(u64::from(ms)),
        Err(_) => {
            crate::ibcm_log!(
                Warn,
                "IBCM_PATH_CACHE_TTL_MS={value:?} is not 0 to 4294967295 ms: {} ms",
                DEFAULT_TTL.as_millis()
            );
            DEFAULT_TTL
        }
    }
}

/// A port, as every process of the host knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortId {
    pub node_guid: u64,
    pub port_num: u8,
}

/// What a port's answers depend on: when it changes, they are all dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortView {
    pub lid: u16,
    pub sm_lid: u16,
    pub sm_sl: u8,
}

/// One query as the SA sees it: its component mask and its PathRecord as
/// sent (the destination GID is in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct QueryKey {
    comp_mask: u64,
    record: [u8; RECORD_SIZE],
}

/// A port and one of its destinations: what a REQ timeout invalidates.
type DestKey = (PortId, [u8; 16]);

/// What an answer is kept by: the port the query leaves from and the
/// query as the SA sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    port: PortId,
    dgid: [u8; 16],
    query: QueryKey,
}

impl Key {
    pub fn of(port: PortId, query: &PathQuery) -> Self {
        Self::of_wire(port, query.comp_mask, query.record_bytes())
    }

    /// The key of a query as it was sent: its component mask and its
    /// PathRecord's bytes (the MAD switch's tenants' queries).
    pub fn of_wire(port: PortId, comp_mask: u64, record: [u8; RECORD_SIZE]) -> Self {
        let mut dgid = [0u8; 16];
        dgid.copy_from_slice(&record[8..24]);
        Key {
            port,
            dgid,
            query: QueryKey { comp_mask, record },
        }
    }

    pub fn port(&self) -> PortId {
        self.port
    }

    /// The destination GID the query names.
    pub fn dgid(&self) -> [u8; 16] {
        self.dgid
    }

    fn dest(&self) -> DestKey {
        (self.port, self.dgid)
    }
}

struct Entry<V> {
    query: QueryKey,
    value: V,
    view: PortView,
    expires: Instant,
    /// Its place in `State::ages`.
    seq: u64,
}

/// One query in flight, and its outcome for whoever waits on it.
struct Flight<V> {
    outcome: Mutex<Option<CmResult<V>>>,
    done: Condvar,
}

impl<V> Default for Flight<V> {
    fn default() -> Self {
        Flight {
            outcome: Mutex::new(None),
            done: Condvar::new(),
        }
    }
}

impl<V: Copy> Flight<V> {
    fn wait(&self) -> CmResult<V> {
        let mut outcome = self.outcome.lock();
        loop {
            if let Some(outcome) = *outcome {
                return outcome;
            }
            self.done.wait(&mut outcome);
        }
    }

    fn complete(&self, result: CmResult<V>) {
        *self.outcome.lock() = Some(result);
        self.done.notify_all();
    }
}

struct State<V> {
    /// The answers, by port and destination (a REQ timeout drops those of
    /// one destination without a walk over all).
    dests: HashMap<DestKey, Vec<Entry<V>>>,
    /// Every answer by the order it came in, oldest first: the order of
    /// eviction and, with one TTL for all, of expiry.
    ages: BTreeMap<u64, Key>,
    next_seq: u64,
    flights: HashMap<Key, Arc<Flight<V>>>,
    /// Bumped by every invalidation: an answer asked for before one is
    /// handed to its askers but not kept (it may be what was invalidated).
    epoch: u64,
}

impl<V> Default for State<V> {
    fn default() -> Self {
        State {
            dests: HashMap::new(),
            ages: BTreeMap::new(),
            next_seq: 0,
            flights: HashMap::new(),
            epoch: 0,
        }
    }
}

impl<V> State<V> {
    fn len(&self) -> usize {
        self.ages.len()
    }

    fn find(&self, key: &Key) -> Option<&Entry<V>> {
        self.dests
            .get(&key.dest())?
            .iter()
            .find(|e| e.query == key.query)
    }

    /// Removes the entry of `key`, if there is one.
    fn remove(&mut self, key: &Key) -> Option<Entry<V>> {
        let dest = key.dest();
        let entries = self.dests.get_mut(&dest)?;
        let at = entries.iter().position(|e| e.query == key.query)?;
        let entry = entries.swap_remove(at);
        if entries.is_empty() {
            self.dests.remove(&dest);
        }
        self.ages.remove(&entry.seq);
        Some(entry)
    }

    /// Removes every entry of `dest`; how many there were.
    fn remove_dest(&mut self, dest: &DestKey) -> u64 {
        let gone = self.dests.remove(dest).unwrap_or_default();
        for entry in &gone {
            self.ages.remove(&entry.seq);
        }
        gone.len() as u64
    }

    fn remove_port(&mut self, port: PortId) -> u64 {
        let dests: Vec<DestKey> = self.dests.keys().filter(|d| d.0 == port).copied().collect();
        dests.iter().map(|d| self.remove_dest(d)).sum()
    }

    /// The oldest entry, taken out.
    fn pop_oldest(&mut self) -> Option<(Key, Entry<V>)> {
        let (_, key) = self.ages.pop_first()?;
        let entry = self.remove(&key)?;
        Some((key, entry))
    }

    fn oldest_expired(&self, now: Instant) -> bool {
        self.ages
            .first_key_value()
            .and_then(|(_, key)| self.find(key))
            .is_some_and(|e| e.expires <= now)
    }
}

/// What a cache has done, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Asks answered from the cache.
    pub hits: u64,
    /// Asks that found no answer and asked the SA (every ask, with the cache
    /// off).
    pub misses: u64,
    /// Asks that found the same query in flight and waited for its outcome.
    pub coalesced: u64,
    /// Answers dropped because their port changed, a port event, or a REQ
    /// to their destination timed out.
    pub invalidations: u64,
    /// Answers dropped because their TTL ended.
    pub expirations: u64,
    /// Answers dropped to make room (the oldest, at the bound on entries).
    pub evictions: u64,
    /// Waits before asking again an SA that answered Busy.
    pub busy_backoffs: u64,
}

#[derive(Default)]
struct AtomicCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    coalesced: AtomicU64,
    invalidations: AtomicU64,
    expirations: AtomicU64,
    evictions: AtomicU64,
    busy_backoffs: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// A path cache: see the module's documentation.
pub struct PathCache<V = Path> {
    config: Config,
    state: Mutex<State<V>>,
    counters: AtomicCounters,
    /// Seeds the backoff's jitter; random per cache.
    jitter: RandomState,
}

/// The asker's part in an ask that found no answer.
enum Role<V> {
    /// Asks the SA and tells those who wait (the epoch it started in).
    Leader(Arc<Flight<V>>, Epoch),
    /// Waits for the leader's outcome.
    Follower(Arc<Flight<V>>),
    /// Asks the SA by itself, neither waiting nor waited for.
    Alone,
}

/// The cache's invalidations so far: an answer asked for in one epoch is
/// kept only if it is still the current one when the answer comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

impl<V: Copy> PathCache<V> {
    pub fn new(config: Config) -> Self {
        PathCache {
            config,
            state: Mutex::default(),
            counters: AtomicCounters::default(),
            jitter: RandomState::new(),
        }
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// The path `query` asks from port `port` (which looks like `view`
    /// now): from the cache, from the query in flight for it, or from
    /// `ask` (the SA), asked again after a backoff while it answers
    /// [`super::BUSY`]. `may_wait`: whether this asker may wait for another
    /// thread's query; one that may not (the worker thread, whose timers
    /// drive every query's resends) asks by itself instead.
    pub fn get(
        &self,
        port: PortId,
        view: PortView,
        query: &PathQuery,
        may_wait: bool,
        ask: impl FnMut() -> CmResult<V>,
    ) -> CmResult<V> {
        if self.config.ttl.is_zero() {
            bump(&self.counters.misses, 1);
            return self.ask_with_backoff(ask);
        }
        let key = Key::of(port, query);
        let role = {
            let mut state = self.state.lock();
            if let Some(path) = self.find_valid(&mut state, &key, view) {
                bump(&self.counters.hits, 1);
                return Ok(path);
            }
            match state.flights.get(&key) {
                Some(flight) if may_wait => {
                    bump(&self.counters.coalesced, 1);
                    Role::Follower(flight.clone())
                }
                Some(_) => {
                    bump(&self.counters.misses, 1);
                    Role::Alone
                }
                None => {
                    bump(&self.counters.misses, 1);
                    let flight = Arc::new(Flight::default());
                    state.flights.insert(key, flight.clone());
                    Role::Leader(flight, Epoch(state.epoch))
                }
            }
        };
        match role {
            Role::Follower(flight) => flight.wait(),
            Role::Alone => self.ask_with_backoff(ask),
            Role::Leader(flight, epoch) => {
                let mut lead = Lead {
                    cache: self,
                    key,
                    view,
                    epoch,
                    flight,
                    outcome: Err(EIO),
                };
                lead.outcome = self.ask_with_backoff(ask);
                lead.outcome
            }
        }
    }

    /// [`Self::get`] for an asker that may not block and keeps its own
    /// queries in flight, with who waits for each (the MAD switch): the
    /// answer of `key` asked from a port that looks like `view` now (a
    /// hit), or the epoch to [`Self::keep`] the answer of its query with,
    /// counted as coalesced when `in_flight` (the asker waits for a query it
    /// sent already) or else as a miss (it asks the SA).
    pub fn lookup(&self, key: &Key, view: PortView, in_flight: bool) -> Result<V, Epoch> {
        let mut state = self.state.lock();
        if !self.config.ttl.is_zero()
            && let Some(value) = self.find_valid(&mut state, key, view)
        {
            bump(&self.counters.hits, 1);
            return Ok(value);
        }
        let counter = match in_flight {
            true => &self.counters.coalesced,
            false => &self.counters.misses,
        };
        bump(counter, 1);
        Err(Epoch(state.epoch))
    }

    /// Keeps `value`, the SA's answer to `key` asked from a port that
    /// looked like `view` in epoch `asked_in` ([`Self::lookup`]): unless
    /// something was invalidated since, or the cache is off.
    pub fn keep(&self, key: Key, view: PortView, value: V, asked_in: Epoch) {
        if self.config.ttl.is_zero() {
            return;
        }
        let mut state = self.state.lock();
        if state.epoch == asked_in.0 {
            self.insert(&mut state, key, view, value);
        }
    }

    /// The answer of `key` if it may still be served; drops it (or all of
    /// its port's) if not.
    fn find_valid(&self, state: &mut State<V>, key: &Key, view: PortView) -> Option<V> {
        let entry = state.find(key)?;
        if entry.view != view {
            let gone = state.remove_port(key.port);
            state.epoch += 1;
            bump(&self.counters.invalidations, gone);
            return None;
        }
        if entry.expires <= Instant::now() {
            state.remove(key);
            bump(&self.counters.expirations, 1);
            return None;
        }
        Some(entry.value)
    }

    /// Keeps `path` as `key`'s answer, making room if need be.
    fn insert(&self, state: &mut State<V>, key: Key, view: PortView, value: V) {
        let now = Instant::now();
        state.remove(&key);
        while state.oldest_expired(now) {
            state.pop_oldest();
            bump(&self.counters.expirations, 1);
        }
        if self.config.max_entries == 0 {
            return;
        }
        while state.len() >= self.config.max_entries {
            state.pop_oldest();
            bump(&self.counters.evictions, 1);
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.ages.insert(seq, key);
        let entry = Entry {
            query: key.query,
            value,
            view,
            // Past `Instant`'s range (a TTL of 49 days on a clock near its
            // end): kept until evicted or invalidated.
            expires: now.checked_add(self.config.ttl).unwrap_or(now),
            seq,
        };
        state.dests.entry(key.dest()).or_default().push(entry);
    }

    /// `ask`, and again after a wait while it answers Busy (at most
    /// `busy.retries` times): the SA dropped the query, and asking at once
    /// would only add to what it cannot take.
    fn ask_with_backoff(&self, mut ask: impl FnMut() -> CmResult<V>) -> CmResult<V> {
        let busy = self.config.busy;
        let mut wait = busy.first;
        let mut retries = 0;
        loop {
            let outcome = ask();
            if !matches!(outcome, Err(e) if e == super::BUSY) || retries >= busy.retries {
                return outcome;
            }
            retries += 1;
            bump(&self.counters.busy_backoffs, 1);
            std::thread::sleep(self.jittered(wait, retries));
            wait = (wait * 2).min(busy.max);
        }
    }

    /// Between half of `wait` and all of it, at random.
    fn jittered(&self, wait: Duration, salt: u32) -> Duration {
        let half = wait / 2;
        let span = (wait - half).as_nanos() as u64;
        if span == 0 {
            return wait;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let random = self.jitter.hash_one((nanos, salt));
        half + Duration::from_nanos(random % (span + 1))
    }

    /// Drops every answer of `port`: its state, LID or SM changed, or its
    /// SM asked clients to reregister. Queries in flight are not kept.
    pub fn invalidate_port(&self, port: PortId) {
        let mut state = self.state.lock();
        let gone = state.remove_port(port);
        state.epoch += 1;
        bump(&self.counters.invalidations, gone);
    }

    /// Drops the answers of `port` for destination `dgid`: a REQ on such a
    /// path timed out, so the next ask asks the SA again.
    pub fn invalidate_destination(&self, port: PortId, dgid: &[u8; 16]) {
        let mut state = self.state.lock();
        let gone = state.remove_dest(&(port, *dgid));
        state.epoch += 1;
        bump(&self.counters.invalidations, gone);
    }

    pub fn counters(&self) -> Counters {
        let c = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Counters {
            hits: load(&c.hits),
            misses: load(&c.misses),
            coalesced: load(&c.coalesced),
            invalidations: load(&c.invalidations),
            expirations: load(&c.expirations),
            evictions: load(&c.evictions),
            busy_backoffs: load(&c.busy_backoffs),
        }
    }

    /// How many answers the cache holds.
    pub fn len(&self) -> usize {
        self.state.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A leader's query: when it ends, however it ends (a panic in `ask`
/// included, as `-EIO`), its flight is over, its answer kept if nothing
/// was invalidated meanwhile, and its followers told.
struct Lead<'c, V: Copy> {
    cache: &'c PathCache<V>,
    key: Key,
    view: PortView,
    epoch: Epoch,
    flight: Arc<Flight<V>>,
    outcome: CmResult<V>,
}

impl<V: Copy> Drop for Lead<'_, V> {
    fn drop(&mut self) {
        let mut state = self.cache.state.lock();
        if state
            .flights
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            state.flights.remove(&self.key);
        }
        match self.outcome {
            Ok(path) if state.epoch == self.epoch.0 => {
                self.cache.insert(&mut state, self.key, self.view, path);
            }
            _ => {}
        }
        drop(state);
        self.flight.complete(self.outcome);
    }
}

static PROCESS: LazyLock<Arc<PathCache>> =
    LazyLock::new(|| Arc::new(PathCache::new(Config::from_env())));

/// The process's cache: what `ibcm_init_path` asks on InfiniBand ports.
pub fn process() -> &'static Arc<PathCache> {
    &PROCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_variable_is_milliseconds_and_a_bad_value_keeps_the_default() {
        assert_eq!(parse_ttl(None), DEFAULT_TTL);
        assert_eq!(parse_ttl(Some("0")), Duration::ZERO);
        assert_eq!(parse_ttl(Some(" 1500 ")), Duration::from_millis(1500));
        assert_eq!(parse_ttl(Some("-1")), DEFAULT_TTL);
        assert_eq!(parse_ttl(Some("4294967296")), DEFAULT_TTL);
        assert_eq!(parse_ttl(Some("5m")), DEFAULT_TTL);
    }

    #[test]
    fn a_backoff_wait_is_between_half_and_all_of_it() {
        let cache = PathCache::<Path>::new(Config::default());
        let wait = Duration::from_millis(40);
        for salt in 0..200 {
            let got = cache.jittered(wait, salt);
            assert!(got >= wait / 2 && got <= wait, "{got:?}");
        }
    }
}
