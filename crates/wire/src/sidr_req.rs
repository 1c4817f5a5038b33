//! SIDR_REQ, Service ID Resolution REQuest (IBTA Vol.1 Table 119, `struct cm_sidr_req_msg`).

use super::field::{Field, Field64, FieldBytes};
use super::{DecodeError, Mad, attr, new_mad};

pub const CM_SIDR_REQ_REQUESTID: Field = Field::new(0, 32);
pub const CM_SIDR_REQ_PARTITION_KEY: Field = Field::new(4, 16);
pub const CM_SIDR_REQ_SERVICEID: Field64 = Field64::new(8);
pub const CM_SIDR_REQ_PRIVATE_DATA: FieldBytes<216> = FieldBytes::new(16);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrReq {
    /// The requester's local comm ID.
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: [u8; 216],
}

impl Default for SidrReq {
    fn default() -> Self {
        Self {
            request_id: 0,
            pkey: 0,
            service_id: 0,
            private_data: [0; 216],
        }
    }
}

impl SidrReq {
    /// Encodes as `cm_format_sidr_req()` does.
    pub fn encode(&self, tid: u64) -> Mad {
        let mut mad = new_mad(attr::SIDR_REQ, tid, 0);
        CM_SIDR_REQ_REQUESTID.set(&mut mad, self.request_id);
        CM_SIDR_REQ_PARTITION_KEY.set(&mut mad, u32::from(self.pkey));
        CM_SIDR_REQ_SERVICEID.set(&mut mad, self.service_id);
        CM_SIDR_REQ_PRIVATE_DATA.set(&mut mad, &self.private_data);
        mad
    }

    /// Decodes the CM data of a MAD whose header `parse_header` already accepted.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError> {
        Ok(Self {
            request_id: CM_SIDR_REQ_REQUESTID.get(mad),
            pkey: CM_SIDR_REQ_PARTITION_KEY.get(mad) as u16,
            service_id: CM_SIDR_REQ_SERVICEID.get(mad),
            private_data: CM_SIDR_REQ_PRIVATE_DATA.get(mad),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table};

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = SidrReq {
            request_id: 0x0102_0304,
            pkey: 0x0506,
            service_id: 0x0708_090a_0b0c_0d0e,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = SidrReq {
            request_id: u32::MAX,
            pkey: u16::MAX,
            service_id: u64::MAX,
            private_data: [0xff; 216],
        };
        for req in [distinct, max] {
            assert_eq!(SidrReq::decode(&req.encode(3)).unwrap(), req);
        }
    }

    #[test]
    fn fields_match_table_119_and_touch_only_their_bits() {
        check_table(vec![
            (CM_SIDR_REQ_REQUESTID.into(), Be32(24, 0xffff_ffff)),
            (CM_SIDR_REQ_PARTITION_KEY.into(), Be16(28, 0xffff)),
            (CM_SIDR_REQ_SERVICEID.into(), Be64(32)),
            (CM_SIDR_REQ_PRIVATE_DATA.into(), Mem(40, 216)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_SIDR_REQ_REQUESTID", CM_SIDR_REQ_REQUESTID);
        crate::field::reference::field("CM_SIDR_REQ_PARTITION_KEY", CM_SIDR_REQ_PARTITION_KEY);
        crate::field::reference::field64("CM_SIDR_REQ_SERVICEID", CM_SIDR_REQ_SERVICEID);
        crate::field::reference::bytes("CM_SIDR_REQ_PRIVATE_DATA", CM_SIDR_REQ_PRIVATE_DATA);
    }
}
