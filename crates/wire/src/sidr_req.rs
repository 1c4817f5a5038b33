//! SIDR_REQ, Service ID Resolution REQuest (IBTA Vol.1 Table 119, `struct cm_sidr_req_msg`).

use super::field::{Field, Field64, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// A SIDR_REQ: asks which UD QPN and Q_Key serve a service ID.
    pub struct SidrReq: attr::SIDR_REQ, Table 119 {
        /// The requester's local comm ID.
        request_id: u32 { CM_SIDR_REQ_REQUESTID: Field = Field::new(0, 32) },
        /// The partition key.
        pkey: u16 { CM_SIDR_REQ_PARTITION_KEY: Field = Field::new(4, 16) },
        /// The service ID to resolve.
        service_id: u64 { CM_SIDR_REQ_SERVICEID: Field64 = Field64::new(8) },
        private_data: [u8; 216] { CM_SIDR_REQ_PRIVATE_DATA: FieldBytes<216> = FieldBytes::new(16) },
    }
    /// Encodes as `cm_format_sidr_req()` does.
    pub fn encode(&self, tid: u64) -> Mad;
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
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
