//! Per-port CM counters: the kernel's sysfs groups `cm_tx_msgs`,
//! `cm_tx_retries`, `cm_rx_msgs`, `cm_rx_duplicates` (one counter per
//! attribute, REQ … APR), plus what this library drops and the kernel drops
//! silently.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters per attribute: REQ (0x10) … APR (0x1A).
pub const ATTR_COUNT: usize = 11;

/// Index of a CM attribute in the per-attribute arrays, if it has one.
pub fn attr_index(attr_id: u16) -> Option<usize> {
    let i = usize::from(attr_id.checked_sub(0x10)?);
    (i < ATTR_COUNT).then_some(i)
}

#[derive(Debug, Clone, Copy)]
pub enum Counter {
    TxMsgs,
    TxRetries,
    RxMsgs,
    RxDuplicates,
}

/// One port's counters.
#[derive(Default)]
pub struct PortCounters {
    tx_msgs: [AtomicU64; ATTR_COUNT],
    tx_retries: [AtomicU64; ATTR_COUNT],
    rx_msgs: [AtomicU64; ATTR_COUNT],
    rx_duplicates: [AtomicU64; ATTR_COUNT],
    /// Dropped on receipt: short, not CM class 2 method Send, a field out of
    /// range, or an attribute the CM has no handler for.
    pub rx_malformed: AtomicU64,
    /// Dropped on receipt: no matching connection or not expected in its state
    /// (the kernel's silent drops).
    pub rx_unmatched: AtomicU64,
    /// Dropped on receipt: a REQ or SIDR_REQ for a listener whose backlog is
    /// full (`listen::LISTEN_BACKLOG`).
    pub rx_listen_overflows: AtomicU64,
    /// Dropped on receipt: the device had a full receive queue.
    pub rx_dropped: AtomicU64,
    /// Automatic MRAs sent (`mra::auto_mra`, beyond the kernel): each answers
    /// a duplicate REQ or REP its user had not answered yet. Also counted in
    /// `tx_msgs`/`tx_retries` of MRA; not in `struct ibcm_counters` (the C
    /// header stays as it is).
    pub tx_auto_mra: AtomicU64,
}

/// A snapshot, laid out like `struct ibcm_counters`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub tx_msgs: [u64; ATTR_COUNT],
    pub tx_retries: [u64; ATTR_COUNT],
    pub rx_msgs: [u64; ATTR_COUNT],
    pub rx_duplicates: [u64; ATTR_COUNT],
    pub rx_malformed: u64,
    pub rx_unmatched: u64,
    pub rx_listen_overflows: u64,
    pub rx_dropped: u64,
    pub tx_auto_mra: u64,
}

impl PortCounters {
    pub fn add(&self, counter: Counter, attr_id: u16) {
        let Some(i) = attr_index(attr_id) else {
            return;
        };
        let group = match counter {
            Counter::TxMsgs => &self.tx_msgs,
            Counter::TxRetries => &self.tx_retries,
            Counter::RxMsgs => &self.rx_msgs,
            Counter::RxDuplicates => &self.rx_duplicates,
        };
        group[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        let load =
            |group: &[AtomicU64; ATTR_COUNT]| group.each_ref().map(|c| c.load(Ordering::Relaxed));
        Snapshot {
            tx_msgs: load(&self.tx_msgs),
            tx_retries: load(&self.tx_retries),
            rx_msgs: load(&self.rx_msgs),
            rx_duplicates: load(&self.rx_duplicates),
            rx_malformed: self.rx_malformed.load(Ordering::Relaxed),
            rx_unmatched: self.rx_unmatched.load(Ordering::Relaxed),
            rx_listen_overflows: self.rx_listen_overflows.load(Ordering::Relaxed),
            rx_dropped: self.rx_dropped.load(Ordering::Relaxed),
            tx_auto_mra: self.tx_auto_mra.load(Ordering::Relaxed),
        }
    }
}
