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

use crate::errno::{EINVAL, Errno};
use crate::wire::Mad;

pub use pathrec::PathQuery;

use crate::wire::sa::METHOD_GET_RESP;
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
pub use ib_cm_engine::sa::pathrec::BUSY;

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
