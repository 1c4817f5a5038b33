//! The library's own counters and statistics (`ibcm_get_counters()`,
//! `ibcm_get_stats()`, `ibcm_get_path_cache_counters()`).

/// Index of a CM attribute in the arrays of `struct ibcm_counters`
/// (attribute ID − 0x10, the kernel's sysfs counter order).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub enum ibcm_counter_attr {
    IBCM_CNT_REQ = 0,
    IBCM_CNT_MRA = 1,
    IBCM_CNT_REJ = 2,
    IBCM_CNT_REP = 3,
    IBCM_CNT_RTU = 4,
    IBCM_CNT_DREQ = 5,
    IBCM_CNT_DREP = 6,
    IBCM_CNT_SIDR_REQ = 7,
    IBCM_CNT_SIDR_REP = 8,
    IBCM_CNT_LAP = 9,
    IBCM_CNT_APR = 10,
    IBCM_CNT_ATTRS = 11,
}

/// One port's CM counters (`ibcm_get_counters()`): the kernel's sysfs groups
/// `cm_tx_msgs`, `cm_tx_retries`, `cm_rx_msgs`, `cm_rx_duplicates`, indexed by
/// `enum ibcm_counter_attr`, plus the MADs this library dropped.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibcm_counters {
    /// Every transmission, retries included.
    pub cm_tx_msgs: [u64; 11],
    pub cm_tx_retries: [u64; 11],
    pub cm_rx_msgs: [u64; 11],
    /// Received again: a duplicate REQ/REP/RTU/DREQ, or a DREQ for a
    /// connection that does not exist (answered by a stateless DREP).
    pub cm_rx_duplicates: [u64; 11],
    /// Dropped on receipt: too short, not CM class version 2 method Send, a
    /// field out of range, or an attribute the CM does not know.
    pub rx_malformed: u64,
    /// Dropped on receipt: no connection matches it, or it is not expected in
    /// the connection's state (the kernel drops these silently).
    pub rx_unmatched: u64,
    /// Not taken: a REQ or SIDR_REQ for a listener 1024 of whose new ids
    /// still wait for their request event to be handled (beyond the kernel).
    /// A REQ is dropped (the peer's retransmission gets another chance), a
    /// SIDR_REQ answered with a SIDR_REP `IB_SIDR_REJECT`.
    pub rx_listen_overflows: u64,
    /// Dropped on receipt: 65,536 received MADs of the device were already
    /// waiting for the CM (a handler that does not return holds them up).
    pub rx_dropped: u64,
}

const _: () = assert!(core::mem::size_of::<ibcm_counters>() == 8 * (4 * 11 + 4));

/// What the library holds right now (`ibcm_get_stats()`): all zero once every
/// cm_id is destroyed and the fabric is quiet.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibcm_stats {
    /// cm_ids that exist (created and not yet destroyed).
    pub cm_ids: u64,
    /// Armed timers (retransmissions, timewaits).
    pub timers: u64,
    /// Work queued for the worker thread (received MADs and events), and
    /// events pending for `ibcm_process_events()` on devices in
    /// `IBCM_EVENTS_FD` mode.
    pub queued: u64,
}

/// What the process's path cache has done (`ibcm_get_path_cache_counters()`),
/// since the process started: the answers `ibcm_init_path` got from it and
/// the SA queries it made. The SA saw `misses + busy_backoffs` queries.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibcm_path_cache_counters {
    /// Paths answered from the cache.
    pub hits: u64,
    /// Paths asked of the SA: none was kept (every ask, with the cache off).
    pub misses: u64,
    /// Asks that found the same query in flight and shared its outcome.
    pub coalesced: u64,
    /// Answers dropped because their port changed or a REQ to their
    /// destination timed out.
    pub invalidations: u64,
    /// Answers dropped at the end of their TTL.
    pub expirations: u64,
    /// Answers dropped to make room (the oldest first).
    pub evictions: u64,
    /// Queries asked again after the SA answered Busy.
    pub busy_backoffs: u64,
    /// Answers the cache holds now.
    pub entries: u64,
}

const _: () = assert!(core::mem::size_of::<ibcm_path_cache_counters>() == 8 * 8);
