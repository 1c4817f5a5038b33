//! APR, Alternate Path Response (IBTA Vol.1 Table 116, `struct cm_apr_msg`).
//!
//! The answer to a LAP. The kernel only receives APRs (`cm_apr_handler`);
//! `ib_send_cm_apr()` was removed in 2019. Encoding exists for tests and
//! tools that play the peer.

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// An APR: whether the peer loaded the alternate path a LAP proposed.
    pub struct Apr: attr::APR, Table 116 {
        local_comm_id: u32 { CM_APR_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_APR_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        /// Valid bytes of `info`, at most 72 (decode refuses more).
        info_length: u8 {
            CM_APR_ADDITIONAL_INFORMATION_LENGTH: Field = Field::new(8, 8), max 72
        },
        /// `enum ib_cm_apr_status`, as the peer sent it (any 8-bit value).
        ap_status: u8 { CM_APR_AR_STATUS: Field = Field::new(9, 8) },
        /// `IB_CM_APR_INFO_LENGTH` = 72.
        info: [u8; 72] { CM_APR_ADDITIONAL_INFORMATION: FieldBytes<72> = FieldBytes::new(12) },
        private_data: [u8; 148] { CM_APR_PRIVATE_DATA: FieldBytes<148> = FieldBytes::new(84) },
    }
    /// Encodes every field as given (what the removed `cm_format_apr()` did).
    pub fn encode(&self, tid: u64) -> Mad;
    /// Fails for an information length beyond the 72-byte field, which a
    /// consumer would otherwise read past `info` with (the kernel hands it on
    /// unchecked as `apr_rcvd.info_len`).
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// Written by hand from Table 116 (no kernel sends APRs any more), which
    /// agrees with the pre-2020 kernel's packed `struct cm_apr_msg`: status 5
    /// (IS_CURRENT), 4 bytes of information, private data "APR!". tshark 4.0.17
    /// names it "CM AlternatePathResponse" but does not dissect its fields.
    const GOLDEN_APR: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 01 4d 3c 2b 1a
        0010: 00 1a 00 00 00 00 00 00 55 66 77 88 1a 2b 3c 4d
        0020: 04 05 00 00 de ad be ef 00 00 00 00 00 00 00 00
        0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0040: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0050: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0060: 00 00 00 00 00 00 00 00 00 00 00 00 41 50 52 21
        0070: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0080: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0090: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00a0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00b0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00c0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00d0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00e0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00f0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";

    #[test]
    fn encode_matches_the_golden_apr_and_decodes_back() {
        let mut apr = Apr {
            local_comm_id: 0x5566_7788,
            remote_comm_id: 0x1a2b_3c4d,
            info_length: 4,
            ap_status: 5,
            ..Apr::default()
        };
        apr.info[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        apr.private_data[..4].copy_from_slice(b"APR!");
        let mad = mad_from_dump(GOLDEN_APR);
        assert_eq!(apr.encode(0x0000_0001_4d3c_2b1a), mad);
        assert_eq!(Apr::decode(&mad).unwrap(), apr);
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Apr {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            info_length: 9,
            ap_status: 13,
            info: std::array::from_fn(|i| i as u8 + 10),
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Apr {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            info_length: 72,
            ap_status: 0xff,
            info: [0xff; 72],
            private_data: [0xff; 148],
        };
        for apr in [distinct, max, Apr::default()] {
            assert_eq!(Apr::decode(&apr.encode(7)).unwrap(), apr);
        }
    }

    #[test]
    fn decode_rejects_information_length_over_72() {
        let mut mad = Apr::default().encode(1);
        CM_APR_ADDITIONAL_INFORMATION_LENGTH.set(&mut mad, 73);
        let err = DecodeError::FieldRange {
            field: "CM_APR_ADDITIONAL_INFORMATION_LENGTH",
            value: 73,
        };
        assert_eq!(Apr::decode(&mad), Err(err));
    }

    #[test]
    fn fields_match_table_115_and_touch_only_their_bits() {
        check_table(vec![
            (CM_APR_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_APR_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_APR_ADDITIONAL_INFORMATION_LENGTH.into(), U8(32, 0xff)),
            (CM_APR_AR_STATUS.into(), U8(33, 0xff)),
            (CM_APR_ADDITIONAL_INFORMATION.into(), Mem(36, 72)),
            (CM_APR_PRIVATE_DATA.into(), Mem(108, 148)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_APR_LOCAL_COMM_ID", CM_APR_LOCAL_COMM_ID);
        crate::field::reference::field("CM_APR_REMOTE_COMM_ID", CM_APR_REMOTE_COMM_ID);
        crate::field::reference::field(
            "CM_APR_ADDITIONAL_INFORMATION_LENGTH",
            CM_APR_ADDITIONAL_INFORMATION_LENGTH,
        );
        crate::field::reference::field("CM_APR_AR_STATUS", CM_APR_AR_STATUS);
        crate::field::reference::bytes(
            "CM_APR_ADDITIONAL_INFORMATION",
            CM_APR_ADDITIONAL_INFORMATION,
        );
        crate::field::reference::bytes("CM_APR_PRIVATE_DATA", CM_APR_PRIVATE_DATA);
    }
}
