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

pub mod cache;
pub mod client;
pub mod pathrec;
pub mod query;

use crate::errno::{CmResult, EINVAL, Errno};
use crate::wire::Mad;

pub use pathrec::PathQuery;

use crate::wire::sa::{MAD_STATUS_BUSY, METHOD_GET_RESP};
pub use crate::wire::sa::{MGMT_CLASS_SA, SA_CLASS_VERSION};

/// `-EINTR`: a query cancelled, or flushed with its device
/// (`IB_WC_WR_FLUSH_ERR`).
pub use crate::errno::EINTR;
/// `-ETIMEDOUT`: what the kernel's SA callback gets when no answer came
/// (`IB_WC_RESP_TIMEOUT_ERR`).
pub use crate::errno::ETIMEDOUT;
/// What `ibcm_init_path`'s queries take: rdma_cm's route resolution timeout,
/// split over the first try and 3 retries.
pub const DEFAULT_TIMEOUT_MS: u32 = 2000;
pub const DEFAULT_RETRIES: u32 = 3;

/// The transaction ID of an encoded MAD, low 32 bits.
fn tid_low(mad: &Mad) -> u32 {
    u32::from_be_bytes([mad[12], mad[13], mad[14], mad[15]])
}

/// `-EBUSY`, inside the library only: the SA answered with the MAD status
/// bit Busy (`IB_MGMT_MAD_STATUS_BUSY`, IBA 13.4.7: the request was
/// discarded, ask again later). The path cache backs off and asks again;
/// what reaches a caller is the kernel's `-EINVAL` ([`kernel_errno`]).
pub const BUSY: Errno = Errno(libc::EBUSY);

/// The status of an SA answer: 0, [`BUSY`], or `-EINVAL` for any other
/// error status (the SA's reason is in the MAD, not in the errno).
fn status_errno(mad: &Mad) -> CmResult {
    let status = u16::from_be_bytes([mad[4], mad[5]]);
    if status != 0 {
        crate::ibcm_log!(Debug, "SA answered with status {status:#06x}");
        if status & MAD_STATUS_BUSY != 0 {
            return Err(BUSY);
        }
        return Err(EINVAL);
    }
    Ok(())
}

/// A query's outcome as the kernel's SA client reports it: any error status,
/// Busy included, is `-EINVAL` (`recv_handler`).
pub fn kernel_errno(e: Errno) -> Errno {
    if e == BUSY { EINVAL } else { e }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod port_tests;
#[cfg(test)]
pub(crate) mod tests;
