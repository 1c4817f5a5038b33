//! DREQ, Disconnection REQuest (IBTA Vol.1 Table 112, `struct cm_dreq_msg`).

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// A DREQ: the message that starts a connection's disconnection.
    pub struct Dreq: attr::DREQ, Table 112 {
        local_comm_id: u32 { CM_DREQ_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_DREQ_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        /// 24 bits. The receiver's QPN; the kernel drops a DREQ whose value differs from its
        /// local QPN.
        remote_qpn: u32 { CM_DREQ_REMOTE_QPN_EECN: Field = Field::new(8, 24) },
        private_data: [u8; 220] { CM_DREQ_PRIVATE_DATA: FieldBytes<220> = FieldBytes::new(12) },
    }
    /// Encodes as `cm_format_dreq()` does; values wider than their field are truncated.
    pub fn encode(&self, tid: u64) -> Mad;
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// c1-kernel-cm-rping.pcap, kernel DREQ 10.78.0.1 -> 10.78.0.2 (decode_cm_pcap.py --hex 0x15).
    const KERNEL_DREQ: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 02 bd 0b e1 27
        0010: 00 15 00 00 00 00 00 00 27 e1 0b bd 98 8a cb 10
        0020: 00 00 11 00 00 00 00 00 00 00 00 00 00 00 00 00
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

    /// kernel-cm-spec.md §3.5, DREQ A -> B with private data `de ad be ef`.
    const SPEC_DREQ: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 05 4d 3c 2b 1a
        0010: 00 15 00 00 00 00 00 00 1a 2b 3c 4d 55 66 77 88
        0020: 00 01 23 00 de ad be ef 00 00 00 00 00 00 00 00
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
    fn encode_matches_kernel_dreq_captured_on_softroce() {
        let dreq = Dreq {
            local_comm_id: 0x27e1_0bbd,
            remote_comm_id: 0x988a_cb10,
            remote_qpn: 0x11,
            ..Dreq::default()
        };
        let captured = mad_from_dump(KERNEL_DREQ);
        assert_eq!(dreq.encode(0x0000_0002_bd0b_e127), captured);
        assert_eq!(Dreq::decode(&captured).unwrap(), dreq);
    }

    #[test]
    fn encode_matches_spec_hex_example_with_private_data() {
        let mut dreq = Dreq {
            local_comm_id: 0x1a2b_3c4d,
            remote_comm_id: 0x5566_7788,
            remote_qpn: 0x000123,
            ..Dreq::default()
        };
        dreq.private_data[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let spec = mad_from_dump(SPEC_DREQ);
        assert_eq!(dreq.encode(0x0000_0005_4d3c_2b1a), spec);
        assert_eq!(Dreq::decode(&spec).unwrap(), dreq);
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Dreq {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            remote_qpn: 0x09_0a0b,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Dreq {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            remote_qpn: 0xff_ffff,
            private_data: [0xff; 220],
        };
        for dreq in [distinct, max] {
            assert_eq!(Dreq::decode(&dreq.encode(7)).unwrap(), dreq);
        }
    }

    #[test]
    fn fields_match_table_112_and_touch_only_their_bits() {
        check_table(vec![
            (CM_DREQ_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_DREQ_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_DREQ_REMOTE_QPN_EECN.into(), Be32(32, 0xffff_ff00)),
            (CM_DREQ_PRIVATE_DATA.into(), Mem(36, 220)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_DREQ_LOCAL_COMM_ID", CM_DREQ_LOCAL_COMM_ID);
        crate::field::reference::field("CM_DREQ_REMOTE_COMM_ID", CM_DREQ_REMOTE_COMM_ID);
        crate::field::reference::field("CM_DREQ_REMOTE_QPN_EECN", CM_DREQ_REMOTE_QPN_EECN);
        crate::field::reference::bytes("CM_DREQ_PRIVATE_DATA", CM_DREQ_PRIVATE_DATA);
    }
}
