//! The PathRecord attribute (IBA 15.2.5.16) and the SubnAdmGet that asks
//! for it: the engine's codec ([`ib_cm_engine::sa::pathrec`]), and an
//! answer's decoding that logs the SA's error status.

use crate::cm::path::Path;
use crate::errno::CmResult;
use crate::wire::Mad;
use ib_cm_engine::sa::pathrec as engine;

pub use engine::{
    COMP_DGID, COMP_DLID, COMP_NUMB_PATH, COMP_PKEY, COMP_REVERSIBLE, COMP_SERVICE_ID, COMP_SGID,
    COMP_SLID, PathQuery, QueryExtras, RECORD_SIZE, decode_record, encode_record,
};

/// The PathRecord of a SubnAdmGetResp, or the errno of its status
/// ([`super::BUSY`], or `-EINVAL` for any other error status), the status
/// logged.
pub fn decode_response(mad: &Mad) -> CmResult<Path> {
    let status = engine::status(mad);
    if status != 0 {
        crate::ibcm_log!(Debug, "SA answered with status {status:#06x}");
    }
    engine::decode_response(mad)
}
