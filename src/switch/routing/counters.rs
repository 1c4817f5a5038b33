//! The daemon's counters, and the budget of log lines its tenants may cause.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Recipient, Switch};
use crate::ibcm_log;
use crate::log::Level;

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
pub(super) const ALL_COUNTERS: [SwitchCounter; 25] = [
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

/// The log lines tenants may cause: at most [`Self::LINES`] in each
/// [`Self::WINDOW`], for all tenants together (one tenant's flood may
/// silence another's lines, never the daemon's own, nor grow the log).
pub(super) struct LogBudget {
    window_start: Instant,
    lines: u32,
    /// Lines suppressed since the last one written.
    suppressed: u64,
}

impl LogBudget {
    const LINES: u32 = 20;
    const WINDOW: Duration = Duration::from_secs(10);

    pub(super) fn new() -> Self {
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

impl Switch {
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
    pub(super) fn count_client_loss(&self, to: &Recipient, what: impl FnOnce() -> String) {
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

    pub(in crate::switch) fn count_loss(
        &self,
        counter: SwitchCounter,
        what: impl FnOnce() -> String,
    ) {
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
}
