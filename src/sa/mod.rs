//! The SA client: PathRecord queries to the subnet manager's SA, as the
//! kernel's `ib_sa_path_rec_get()` makes them.
//!
//! A query is a SubnAdmGet(PathRecord) MAD (class 0x03) sent on the port's
//! SA agent to the SM's LID and SL, QP1, the GSI Q_Key. The answer comes back
//! on the same agent and is matched by the low 32 bits of its TID (the MAD
//! layer, ib_umad or umad2sim, writes its own bits above them), which are the
//! query's id. Queries are asynchronous ([`query`]): a try that gets no
//! answer in time is resent from a timer on the engine's wheel, with the same
//! TID, as the kernel's MAD layer does; the outcome goes to a callback on the
//! worker, or to a caller blocked in `ibcm_init_path`. [`client`] holds the
//! kernel's `struct ib_sa_client` accounting.

pub mod client;
pub mod pathrec;
pub mod query;

use crate::errno::{CmResult, EINVAL, Errno};
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
/// `-EINTR`: a query cancelled, or flushed with its device
/// (`IB_WC_WR_FLUSH_ERR`).
pub const EINTR: Errno = Errno(libc::EINTR);
/// What `ibcm_init_path`'s queries take: rdma_cm's route resolution timeout,
/// split over the first try and 3 retries.
pub const DEFAULT_TIMEOUT_MS: u32 = 2000;
pub const DEFAULT_RETRIES: u32 = 3;

/// The transaction ID of an encoded MAD, low 32 bits.
fn tid_low(mad: &Mad) -> u32 {
    u32::from_be_bytes([mad[12], mad[13], mad[14], mad[15]])
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

#[cfg(test)]
pub(crate) mod tests;
