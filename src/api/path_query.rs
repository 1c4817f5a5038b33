//! A PathRecord query to the subnet's SA (`ib_sa_path_rec_get`), for the
//! caller who needs more than [`Device::path_to`](super::Device::path_to)
//! asks (a service ID, a service level, a partition of its own).

use super::types::Gid;
use crate::sa::pathrec::{COMP_PKEY, COMP_SERVICE_ID, PathQuery as EngineQuery};

/// `IB_SA_PATH_REC_SL`: the component mask bit of the record's SL.
const COMP_SL: u64 = 1 << 15;

/// What a [`Device::query_path`](super::Device::query_path) asks the SA:
/// one reversible path from `sgid` to `dgid`, and whichever of the fields
/// below are set (each set field's bit goes into the component mask, as
/// a kernel caller of `ib_sa_path_rec_get` sets them).
///
/// ```
/// use ib_cm::{Gid, PathQuery};
///
/// let q = PathQuery::between(Gid([0xfe; 16]), Gid([0xfd; 16]))
///     .pkey(0x8001)
///     .service_id(0x1234)
///     .sl(3);
/// assert_eq!(q.component_mask() & (1 << 13), 1 << 13); // IB_SA_PATH_REC_PKEY
/// ```
#[derive(Clone, Debug)]
pub struct PathQuery {
    pub(super) inner: EngineQuery,
}

impl PathQuery {
    /// A reversible path from `sgid` (a GID of the querying port) to
    /// `dgid` in the default partition (0xffff), as `ibcm_init_path` and
    /// rdma_cm's route query ask.
    pub fn between(sgid: Gid, dgid: Gid) -> Self {
        Self {
            inner: EngineQuery::between(sgid.0, dgid.0, 0xffff),
        }
    }

    /// In partition `pkey`.
    pub fn pkey(mut self, pkey: u16) -> Self {
        self.inner.rec.pkey = pkey;
        self.inner.comp_mask |= COMP_PKEY;
        self
    }

    /// For service ID `service_id` (host order): the SM may route by it
    /// (QoS).
    pub fn service_id(mut self, service_id: u64) -> Self {
        self.inner.rec.service_id = service_id;
        self.inner.comp_mask |= COMP_SERVICE_ID;
        self
    }

    /// With service level `sl` (0–15).
    pub fn sl(mut self, sl: u8) -> Self {
        self.inner.rec.sl = sl & 0x0f;
        self.inner.comp_mask |= COMP_SL;
        self
    }

    /// The component mask the query is sent with (`IB_SA_PATH_REC_*`
    /// bits): SGID, DGID, reversible, one path, and each field set.
    pub fn component_mask(&self) -> u64 {
        self.inner.comp_mask
    }
}
