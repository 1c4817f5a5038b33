//! REJ, Reject (IBTA Vol.1 Table 108, `struct cm_rej_msg`).

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, MsgResponse, attr};

cm_message! {
    /// A REJ: ends a connection attempt; `message_rejected` says at which message.
    pub struct Rej: attr::REJ, Table 108 {
        /// Zero when the kernel rejects a REQ from REQ_RCVD (`cm_format_rej`).
        local_comm_id: u32 { CM_REJ_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_REJ_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        /// The message rejected; decode fails for the reserved value 3.
        message_rejected: MsgResponse { CM_REJ_MESSAGE_REJECTED: Field = Field::new(8, 2) },
        /// Valid bytes of `ari`, 0..=72 (7-bit field).
        rejected_info_length: u8 {
            CM_REJ_REJECTED_INFO_LENGTH: Field = Field::new(9, 7), max 72
        },
        /// `enum ib_cm_rej_reason`.
        reason: u16 { CM_REJ_REASON: Field = Field::new(10, 16) },
        /// Additional Rejection Information (`IB_CM_REJ_ARI_LENGTH` = 72).
        ari: [u8; 72] { CM_REJ_ARI: FieldBytes<72> = FieldBytes::new(12) },
        private_data: [u8; 148] { CM_REJ_PRIVATE_DATA: FieldBytes<148> = FieldBytes::new(84) },
    }
    /// Encodes as `cm_format_rej()` does.
    pub fn encode(&self, tid: u64) -> Mad;
    /// Fails for "message rejected" 3 (reserved) and an ARI length beyond the 72-byte ARI field,
    /// which a consumer would otherwise use to index past `ari`.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// c2-userspace-A-vs-kernel-B.pcap: the userspace agent's REJ (reason 28) that B's kernel CM
    /// accepted as the answer to its REQ (decode_cm_pcap.py --hex 0x12).
    const REJ_ACCEPTED_BY_KERNEL: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 02 34 d2 77 55
        0010: 00 12 00 00 00 00 00 00 ab cd 00 01 55 77 d2 34
        0020: 00 00 00 1c 00 00 00 00 00 00 00 00 00 00 00 00
        0030: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0040: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0050: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0060: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
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
    fn rej_accepted_by_kernel_cm_decodes_and_re_encodes() {
        let captured = mad_from_dump(REJ_ACCEPTED_BY_KERNEL);
        let rej = Rej::decode(&captured).unwrap();
        let expect = Rej {
            local_comm_id: 0xabcd_0001,
            remote_comm_id: 0x5577_d234,
            message_rejected: MsgResponse::Req,
            reason: 28, // IB_CM_REJ_CONSUMER_DEFINED
            ..Rej::default()
        };
        assert_eq!(rej, expect);
        assert_eq!(rej.encode(0x0000_0002_34d2_7755), captured);
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Rej {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            message_rejected: MsgResponse::Rep,
            rejected_info_length: 9,
            reason: 0x0a0b,
            ari: std::array::from_fn(|i| i as u8 + 1),
            private_data: std::array::from_fn(|i| i as u8 + 101),
        };
        let max = Rej {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            message_rejected: MsgResponse::Other,
            rejected_info_length: 72, // largest value decode accepts
            reason: u16::MAX,
            ari: [0xff; 72],
            private_data: [0xff; 148],
        };
        for rej in [distinct, max] {
            assert_eq!(Rej::decode(&rej.encode(7)).unwrap(), rej);
        }
    }

    #[test]
    fn decode_rejects_reserved_message_rejected_3() {
        let mut mad = Rej::default().encode(1);
        CM_REJ_MESSAGE_REJECTED.set(&mut mad, 3);
        let err = DecodeError::FieldRange {
            field: "CM_REJ_MESSAGE_REJECTED",
            value: 3,
        };
        assert_eq!(Rej::decode(&mad), Err(err));
    }

    #[test]
    fn decode_rejects_ari_length_over_72() {
        let mut mad = Rej::default().encode(1);
        CM_REJ_REJECTED_INFO_LENGTH.set(&mut mad, 73);
        let err = DecodeError::FieldRange {
            field: "CM_REJ_REJECTED_INFO_LENGTH",
            value: 73,
        };
        assert_eq!(Rej::decode(&mad), Err(err));
    }

    #[test]
    fn fields_match_table_108_and_touch_only_their_bits() {
        check_table(vec![
            (CM_REJ_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_REJ_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_REJ_MESSAGE_REJECTED.into(), U8(32, 0xc0)),
            (CM_REJ_REJECTED_INFO_LENGTH.into(), U8(33, 0xfe)),
            (CM_REJ_REASON.into(), Be16(34, 0xffff)),
            (CM_REJ_ARI.into(), Mem(36, 72)),
            (CM_REJ_PRIVATE_DATA.into(), Mem(108, 148)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_REJ_LOCAL_COMM_ID", CM_REJ_LOCAL_COMM_ID);
        crate::field::reference::field("CM_REJ_REMOTE_COMM_ID", CM_REJ_REMOTE_COMM_ID);
        crate::field::reference::field("CM_REJ_MESSAGE_REJECTED", CM_REJ_MESSAGE_REJECTED);
        crate::field::reference::field("CM_REJ_REJECTED_INFO_LENGTH", CM_REJ_REJECTED_INFO_LENGTH);
        crate::field::reference::field("CM_REJ_REASON", CM_REJ_REASON);
        crate::field::reference::bytes("CM_REJ_ARI", CM_REJ_ARI);
        crate::field::reference::bytes("CM_REJ_PRIVATE_DATA", CM_REJ_PRIVATE_DATA);
    }
}
