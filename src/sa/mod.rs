//! The SA client: PathRecord queries to the subnet manager's SA, as the
//! kernel's `ib_sa_path_rec_get()` makes them.
//!
//! A query is a SubnAdmGet(PathRecord) MAD (class 0x03) sent on the port's
//! SA agent to the SM's LID and SL, QP1, the GSI Q_Key. The answer comes back
//! on the same agent and is matched by the low 32 bits of its TID (the MAD
//! layer, ib_umad or umad2sim, writes its own bits above them). The caller
//! waits for it, bounded: each try waits `timeout_ms / (retries + 1)` and the
//! query is resent with the same TID, as the kernel's MAD layer does.

pub mod pathrec;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::time::Duration;

use parking_lot::Mutex;

use crate::errno::{CmResult, EINVAL, EIO, Errno};
use crate::wire::Mad;

pub use pathrec::PathQuery;

/// Subnet administration's management class and its version.
pub const MGMT_CLASS_SA: u8 = 0x03;
pub const SA_CLASS_VERSION: u8 = 2;
/// The SA answers with this method to a SubnAdmGet.
const METHOD_GET_RESP: u8 = 0x81;

/// `-ETIMEDOUT`: what the kernel's SA callback gets when no answer came
/// (`IB_WC_RESP_TIMEOUT_ERR`).
pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
/// What the SA's queries default to: rdma_cm's route resolution timeout,
/// split over the kernel's 3 retries (`nmbr_sa_query_retries`).
pub const DEFAULT_TIMEOUT_MS: u32 = 2000;
pub const DEFAULT_RETRIES: u32 = 3;

/// The queries of one device waiting for their answer, by TID.
#[derive(Default)]
pub struct SaClient {
    pending: Mutex<HashMap<u32, SyncSender<Box<Mad>>>>,
    next_tid: AtomicU32,
}

/// The transaction ID of an encoded MAD, low 32 bits.
fn tid_low(mad: &Mad) -> u32 {
    u32::from_be_bytes([mad[12], mad[13], mad[14], mad[15]])
}

impl SaClient {
    /// A received SA MAD: hands a response to the query waiting for it;
    /// anything else (an unknown TID, a late answer) is dropped.
    pub fn deliver(&self, mad: &Mad) {
        if mad[1] != MGMT_CLASS_SA || mad[3] != METHOD_GET_RESP {
            return;
        }
        if let Some(waiter) = self.pending.lock().get(&tid_low(mad)) {
            // A full slot: a duplicate answer; the first one counts.
            let _ = waiter.try_send(Box::new(*mad));
        }
    }

    /// A fresh TID for a query (never 0).
    fn new_tid(&self) -> u32 {
        self.next_tid
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
            .max(1)
    }

    /// Sends `query` with `send` and waits for the answer: the PathRecord it
    /// carries, `-EINVAL` when the SA answered with an error status (as the
    /// kernel's `recv_handler`), `-ETIMEDOUT` when no answer came in
    /// `timeout_ms` (the first try and `retries` more).
    pub fn path_rec_get(
        &self,
        query: &PathQuery,
        timeout_ms: u32,
        retries: u32,
        send: impl Fn(&Mad) -> CmResult,
    ) -> CmResult<crate::cm::path::Path> {
        let tid = self.new_tid();
        let (tx, rx) = sync_channel(1);
        self.pending.lock().insert(tid, tx);
        let result = (|| {
            let mad = query.encode(tid);
            let per_try = Duration::from_millis(u64::from((timeout_ms / (retries + 1)).max(1)));
            for _ in 0..=retries {
                send(&mad)?;
                match rx.recv_timeout(per_try) {
                    Ok(answer) => return pathrec::decode_response(&answer),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return Err(EIO),
                }
            }
            Err(ETIMEDOUT)
        })();
        self.pending.lock().remove(&tid);
        result
    }
}

/// The status of an SA answer as the kernel hands it on: 0, or `-EINVAL`
/// for any error status (the SA's reason is in the MAD, not in the errno).
fn status_errno(mad: &Mad) -> CmResult {
    let status = u16::from_be_bytes([mad[4], mad[5]]);
    if status != 0 {
        crate::ibcm_log!(Debug, "SA answered with status {status:#06x}");
        return Err(EINVAL);
    }
    Ok(())
}
