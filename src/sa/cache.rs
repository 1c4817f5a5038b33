//! A cache of the SA's PathRecord answers, so that the SA's load follows the
//! number of destinations, not of connections (issue 33): a path asked for
//! twice is asked of the SA once, concurrent asks for the same path share
//! one query in flight, and an answer lives until its TTL ends or something
//! makes it wrong.
//!
//! [`PathCache`] is a value, not a global: the process holds one
//! ([`process`], what `ibcm_init_path` uses) and a host-wide holder (the MAD
//! switch, for all its tenants) can hold another. Its table is the engine's
//! ([`ib_cm_engine::sa::cache::PathTable`]: the keys, the TTL, the bound on
//! entries, which queries are in flight, the counters; on a clock handed
//! in), behind a lock; what is here is what blocks: the clock read, the
//! waits for another thread's query, the backoff's sleeps, the settings
//! from the environment, the log. Its keys say which port a path leaves
//! from by the port's identity on the host (node GUID, port number), not by
//! a handle of this process, and which path by the query's wire bytes
//! (component mask and PathRecord).
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
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ib_cm_engine::sa::cache::{Ask, PathTable};
pub use ib_cm_engine::sa::cache::{Counters, Epoch, Key, PortId, PortView};
use parking_lot::{Condvar, Mutex};

use super::pathrec::PathQuery;
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

/// A path cache: see the module's documentation.
pub struct PathCache<V = Path> {
    config: Config,
    /// The table's clock is the time since this.
    origin: Instant,
    table: Mutex<PathTable<V, Arc<Flight<V>>>>,
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

impl<V: Copy> PathCache<V> {
    pub fn new(config: Config) -> Self {
        PathCache {
            config,
            origin: Instant::now(),
            table: Mutex::new(PathTable::new(config.ttl, config.max_entries)),
            jitter: RandomState::new(),
        }
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// The table's time: how long since the cache was made.
    fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
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
        let key = Key::of(port, query);
        let role = {
            let mut table = self.table.lock();
            match table.ask(key, view, self.now(), may_wait, Arc::default) {
                Ask::Hit(path) => return Ok(path),
                Ask::Follow(flight) => Role::Follower(flight.clone()),
                Ask::Alone => Role::Alone,
                Ask::Lead(epoch, flight) => Role::Leader(flight.clone(), epoch),
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
        let mut table = self.table.lock();
        table.lookup(key, view, self.now(), in_flight)
    }

    /// Keeps `value`, the SA's answer to `key` asked from a port that
    /// looked like `view` in epoch `asked_in` ([`Self::lookup`]): unless
    /// something was invalidated since, or the cache is off.
    pub fn keep(&self, key: Key, view: PortView, value: V, asked_in: Epoch) {
        if self.config.ttl.is_zero() {
            return;
        }
        let mut table = self.table.lock();
        table.keep(key, view, value, asked_in, self.now());
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
            self.table.lock().count_busy_backoff();
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
        self.table.lock().invalidate_port(port);
    }

    /// Drops the answers of `port` for destination `dgid`: a REQ on such a
    /// path timed out, so the next ask asks the SA again.
    pub fn invalidate_destination(&self, port: PortId, dgid: &[u8; 16]) {
        self.table.lock().invalidate_destination(port, dgid);
    }

    pub fn counters(&self) -> Counters {
        self.table.lock().counters()
    }

    /// How many answers the cache holds.
    pub fn len(&self) -> usize {
        self.table.lock().len()
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
        let mut table = self.cache.table.lock();
        table.end_flight(&self.key, |f| Arc::ptr_eq(f, &self.flight));
        if let Ok(path) = self.outcome {
            let now = self.cache.now();
            table.keep(self.key, self.view, path, self.epoch, now);
        }
        drop(table);
        self.flight.complete(self.outcome);
    }
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
