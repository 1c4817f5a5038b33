//! The path cache's table: the SA's PathRecord answers by port and query,
//! their TTL, the bound on how many are kept, which queries are in flight,
//! and what it has done, as one value.
//!
//! It holds no lock and reads no clock: the time is an input, a `Duration`
//! since an origin its holder chooses (the root crate's `sa::cache::PathCache`
//! takes the moment it was made and hands in the time elapsed since), so a
//! test drives it on a virtual clock. Its holder keeps it behind
//! a lock, asks the SA, waits for the queries of others and backs off from a
//! busy SA; the MAD switch's host cache keeps its own queries in flight and
//! uses only [`PathTable::lookup`] and [`PathTable::keep`].
//!
//! Its keys say which port a path leaves from by the port's identity on the
//! host ([`PortId`]: node GUID, port number), not by a handle of a process,
//! and which path by the query's wire bytes (component mask and PathRecord).
//!
//! What drops an answer:
//! - its TTL: an answer kept at `t` is served before `t + ttl`, not at it;
//! - the port it was asked on looking different ([`PortView`]: its LID, SM
//!   LID or SM SL changed since): every answer of that port goes;
//! - [`PathTable::invalidate_port`] and [`PathTable::invalidate_destination`];
//! - the bound on entries: the oldest goes first, after every expired one.
//!
//! Each invalidation starts a new [`Epoch`]: an answer asked for before it
//! is not kept, since it may be what was invalidated.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::pathrec::{PathQuery, RECORD_SIZE};

/// A port, as every process of the host knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortId {
    /// The node GUID of its device.
    pub node_guid: u64,
    /// Its number on the device, from 1.
    pub port_num: u8,
}

/// What a port's answers depend on: when it changes, they are all dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortView {
    /// The port's LID.
    pub lid: u16,
    /// The LID of its subnet manager (where its SA queries go).
    pub sm_lid: u16,
    /// The SL to its subnet manager.
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
    /// The key of `query` asked from `port`.
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

    /// The port the query leaves from.
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

/// A table's invalidations so far: an answer asked for in one epoch is kept
/// only if it is still the current one when the answer comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

/// What a table has done, since it was made.
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
    /// Waits before asking again an SA that answered Busy (counted by the
    /// holder, which waits).
    pub busy_backoffs: u64,
}

/// Adds `by` to `counter`, wrapping as an atomic counter would.
fn bump(counter: &mut u64, by: u64) {
    *counter = counter.wrapping_add(by);
}

struct Entry<V> {
    query: QueryKey,
    value: V,
    view: PortView,
    /// When it stops being served (on the table's clock).
    expires: Duration,
    /// Its place in `PathTable::ages`.
    seq: u64,
}

/// What an ask that may share another's query meets ([`PathTable::ask`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Ask<'t, V, F> {
    /// The answer, from the table (counted as a hit).
    Hit(V),
    /// The same query is in flight: wait for the outcome of this flight
    /// (counted as coalesced).
    Follow(&'t F),
    /// The same query is in flight but the asker may not wait: it asks by
    /// itself, neither waiting nor waited for, and its answer is not kept
    /// (a miss; also every ask with the cache off).
    Alone,
    /// Nothing: the asker asks the SA for everyone, with this flight now
    /// in flight for its key, and keeps the answer with [`PathTable::keep`]
    /// in this epoch and ends the flight with [`PathTable::end_flight`]
    /// (a miss).
    Lead(Epoch, &'t F),
}

/// The path cache's table, of answers `V` and of flights `F` (what the
/// holder's askers of a query in flight wait on; `()` for a holder that
/// keeps its flights itself): see the module's documentation.
pub struct PathTable<V, F = ()> {
    ttl: Duration,
    max_entries: usize,
    /// The answers, by port and destination (a REQ timeout drops those of
    /// one destination without a walk over all).
    dests: HashMap<DestKey, Vec<Entry<V>>>,
    /// Every answer by the order it came in, oldest first: the order of
    /// eviction and, with one TTL for all, of expiry.
    ages: BTreeMap<u64, Key>,
    next_seq: u64,
    /// The queries in flight, by key.
    flights: HashMap<Key, F>,
    /// Bumped by every invalidation.
    epoch: u64,
    counters: Counters,
}

impl<V: Copy, F> PathTable<V, F> {
    /// An empty table whose answers are served for `ttl` (zero: the cache
    /// is off, nothing is kept and every ask is a miss), at most
    /// `max_entries` of them (0: none is kept).
    pub fn new(ttl: Duration, max_entries: usize) -> Self {
        PathTable {
            ttl,
            max_entries,
            dests: HashMap::new(),
            ages: BTreeMap::new(),
            next_seq: 0,
            flights: HashMap::new(),
            epoch: 0,
            counters: Counters::default(),
        }
    }

    /// How long an answer is served.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the cache is off (a TTL of zero).
    pub fn is_off(&self) -> bool {
        self.ttl.is_zero()
    }

    /// How many answers it holds at most.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// How many answers it holds (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.ages.len()
    }

    /// Whether it holds no answer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What it has done.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Counts one wait of the holder's before it asks again an SA that
    /// answered Busy.
    pub fn count_busy_backoff(&mut self) {
        bump(&mut self.counters.busy_backoffs, 1);
    }

    /// The current epoch.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.epoch)
    }

    /// The flight of `key`'s query, if one is in flight.
    pub fn flight(&self, key: &Key) -> Option<&F> {
        self.flights.get(key)
    }

    /// Whether `key`'s query is in flight.
    pub fn is_in_flight(&self, key: &Key) -> bool {
        self.flights.contains_key(key)
    }

    /// How many queries are in flight.
    pub fn flights(&self) -> usize {
        self.flights.len()
    }

    /// An ask for `key` from a port that looks like `view` at `now`: its
    /// answer, the flight to wait on, or the asker's part in asking the SA
    /// ([`Ask`]). `may_wait`: whether this asker may wait for another's
    /// query; `new_flight`: the flight it leads, made only when it does.
    pub fn ask(
        &mut self,
        key: Key,
        view: PortView,
        now: Duration,
        may_wait: bool,
        new_flight: impl FnOnce() -> F,
    ) -> Ask<'_, V, F> {
        if self.is_off() {
            bump(&mut self.counters.misses, 1);
            return Ask::Alone;
        }
        if let Some(value) = self.find_valid(&key, view, now) {
            bump(&mut self.counters.hits, 1);
            return Ask::Hit(value);
        }
        let epoch = Epoch(self.epoch);
        let in_flight = self.flights.contains_key(&key);
        if in_flight && may_wait {
            bump(&mut self.counters.coalesced, 1);
            return self.flights.get(&key).map_or(Ask::Alone, Ask::Follow);
        }
        bump(&mut self.counters.misses, 1);
        if in_flight {
            return Ask::Alone;
        }
        Ask::Lead(epoch, self.flights.entry(key).or_insert_with(new_flight))
    }

    /// Ends the flight of `key` if `is_this` says it is the asker's own;
    /// the flight ended, if one was.
    pub fn end_flight(&mut self, key: &Key, is_this: impl FnOnce(&F) -> bool) -> Option<F> {
        if self.flights.get(key).is_some_and(is_this) {
            return self.flights.remove(key);
        }
        None
    }

    /// [`Self::ask`] for an asker that keeps its own queries in flight,
    /// with who waits for each (the MAD switch): the answer of `key` asked
    /// from a port that looks like `view` at `now` (a hit), or the epoch to
    /// [`Self::keep`] the answer of its query with, counted as coalesced
    /// when `in_flight` (the asker waits for a query it sent already) or
    /// else as a miss (it asks the SA).
    pub fn lookup(
        &mut self,
        key: &Key,
        view: PortView,
        now: Duration,
        in_flight: bool,
    ) -> Result<V, Epoch> {
        if !self.is_off()
            && let Some(value) = self.find_valid(key, view, now)
        {
            bump(&mut self.counters.hits, 1);
            return Ok(value);
        }
        let counter = match in_flight {
            true => &mut self.counters.coalesced,
            false => &mut self.counters.misses,
        };
        bump(counter, 1);
        Err(Epoch(self.epoch))
    }

    /// Keeps `value`, the SA's answer to `key` asked from a port that
    /// looked like `view` in epoch `asked_in`, at `now`: unless something
    /// was invalidated since, or the cache is off. It replaces the key's
    /// answer if there was one; the expired answers go first, then the
    /// oldest while the table is full.
    pub fn keep(&mut self, key: Key, view: PortView, value: V, asked_in: Epoch, now: Duration) {
        if self.is_off() || self.epoch != asked_in.0 {
            return;
        }
        self.insert(key, view, value, now);
    }

    /// Drops every answer of `port`: its state, LID or SM changed, or its
    /// SM asked clients to reregister. Answers of the queries in flight
    /// are not kept.
    pub fn invalidate_port(&mut self, port: PortId) {
        let gone = self.remove_port(port);
        self.epoch += 1;
        bump(&mut self.counters.invalidations, gone);
    }

    /// Drops the answers of `port` for destination `dgid`: a REQ on such a
    /// path timed out, so the next ask asks the SA again.
    pub fn invalidate_destination(&mut self, port: PortId, dgid: &[u8; 16]) {
        let gone = self.remove_dest(&(port, *dgid));
        self.epoch += 1;
        bump(&mut self.counters.invalidations, gone);
    }

    fn find(&self, key: &Key) -> Option<&Entry<V>> {
        self.dests
            .get(&key.dest())?
            .iter()
            .find(|e| e.query == key.query)
    }

    /// The answer of `key` if it may still be served at `now`; drops it (or
    /// all of its port's) if not.
    fn find_valid(&mut self, key: &Key, view: PortView, now: Duration) -> Option<V> {
        let entry = self.find(key)?;
        if entry.view != view {
            self.invalidate_port(key.port);
            return None;
        }
        if entry.expires <= now {
            self.remove(key);
            bump(&mut self.counters.expirations, 1);
            return None;
        }
        Some(entry.value)
    }

    /// Keeps `value` as `key`'s answer, making room if need be.
    fn insert(&mut self, key: Key, view: PortView, value: V, now: Duration) {
        self.remove(&key);
        while self.oldest_expired(now) {
            self.pop_oldest();
            bump(&mut self.counters.expirations, 1);
        }
        if self.max_entries == 0 {
            return;
        }
        while self.len() >= self.max_entries {
            self.pop_oldest();
            bump(&mut self.counters.evictions, 1);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ages.insert(seq, key);
        let entry = Entry {
            query: key.query,
            value,
            view,
            // A TTL past the clock's range ends at its end.
            expires: now.saturating_add(self.ttl),
            seq,
        };
        self.dests.entry(key.dest()).or_default().push(entry);
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

    fn oldest_expired(&self, now: Duration) -> bool {
        self.ages
            .first_key_value()
            .and_then(|(_, key)| self.find(key))
            .is_some_and(|e| e.expires <= now)
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
