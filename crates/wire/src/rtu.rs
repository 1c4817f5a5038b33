//! RTU, Ready To Use (IBTA Vol.1 Table 111, `struct cm_rtu_msg`).

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// An RTU: the active side's answer to a REP, which establishes the connection.
    pub struct Rtu: attr::RTU, Table 111 {
        local_comm_id: u32 { CM_RTU_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_RTU_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        private_data: [u8; 224] { CM_RTU_PRIVATE_DATA: FieldBytes<224> = FieldBytes::new(8) },
    }
    /// Encodes as `cm_format_rtu()` does.
    pub fn encode(&self, tid: u64) -> Mad;
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// c1-kernel-cm-rping.pcap, kernel RTU 10.78.0.1 -> 10.78.0.2 (decode_cm_pcap.py --hex 0x14).
    const KERNEL_RTU: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 02 bd 0b e1 27
        0010: 00 14 00 00 00 00 00 00 27 e1 0b bd 98 8a cb 10
        0020: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
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
    fn encode_matches_kernel_rtu_captured_on_softroce() {
        let rtu = Rtu {
            local_comm_id: 0x27e1_0bbd,
            remote_comm_id: 0x988a_cb10,
            ..Rtu::default()
        };
        let captured = mad_from_dump(KERNEL_RTU);
        assert_eq!(rtu.encode(0x0000_0002_bd0b_e127), captured);
        assert_eq!(Rtu::decode(&captured).unwrap(), rtu);
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Rtu {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Rtu {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            private_data: [0xff; 224],
        };
        for rtu in [distinct, max] {
            assert_eq!(Rtu::decode(&rtu.encode(7)).unwrap(), rtu);
        }
    }

    #[test]
    fn fields_match_table_111_and_touch_only_their_bits() {
        check_table(vec![
            (CM_RTU_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_RTU_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_RTU_PRIVATE_DATA.into(), Mem(32, 224)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_RTU_LOCAL_COMM_ID", CM_RTU_LOCAL_COMM_ID);
        crate::field::reference::field("CM_RTU_REMOTE_COMM_ID", CM_RTU_REMOTE_COMM_ID);
        crate::field::reference::bytes("CM_RTU_PRIVATE_DATA", CM_RTU_PRIVATE_DATA);
    }
}
