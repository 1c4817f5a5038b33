//! DREP, Disconnection REPly (IBTA Vol.1 Table 113, `struct cm_drep_msg`).

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// A DREP: the answer to a DREQ.
    pub struct Drep: attr::DREP, Table 113 {
        local_comm_id: u32 { CM_DREP_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_DREP_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        private_data: [u8; 224] { CM_DREP_PRIVATE_DATA: FieldBytes<224> = FieldBytes::new(8) },
    }
    /// Encodes as `cm_format_drep()` does. The kernel passes the DREQ's TID (§3.3).
    pub fn encode(&self, tid: u64) -> Mad;
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// c1-kernel-cm-rping.pcap, kernel DREP 10.78.0.2 -> 10.78.0.1 (decode_cm_pcap.py --hex 0x16).
    const KERNEL_DREP: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 02 bd 0b e1 27
        0010: 00 16 00 00 00 00 00 00 98 8a cb 10 27 e1 0b bd
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

    /// kernel-cm-spec.md §3.5, DREP B -> A without private data, TID copied from the DREQ.
    const SPEC_DREP: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 05 4d 3c 2b 1a
        0010: 00 16 00 00 00 00 00 00 55 66 77 88 1a 2b 3c 4d
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
    fn encode_matches_kernel_drep_captured_on_softroce() {
        let drep = Drep {
            local_comm_id: 0x988a_cb10,
            remote_comm_id: 0x27e1_0bbd,
            ..Drep::default()
        };
        let captured = mad_from_dump(KERNEL_DREP);
        assert_eq!(drep.encode(0x0000_0002_bd0b_e127), captured);
        assert_eq!(Drep::decode(&captured).unwrap(), drep);
    }

    #[test]
    fn encode_matches_spec_hex_example_without_private_data() {
        let drep = Drep {
            local_comm_id: 0x5566_7788,
            remote_comm_id: 0x1a2b_3c4d,
            ..Drep::default()
        };
        let spec = mad_from_dump(SPEC_DREP);
        assert_eq!(drep.encode(0x0000_0005_4d3c_2b1a), spec);
        assert_eq!(Drep::decode(&spec).unwrap(), drep);
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Drep {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Drep {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            private_data: [0xff; 224],
        };
        for drep in [distinct, max] {
            assert_eq!(Drep::decode(&drep.encode(7)).unwrap(), drep);
        }
    }

    #[test]
    fn fields_match_table_113_and_touch_only_their_bits() {
        check_table(vec![
            (CM_DREP_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_DREP_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_DREP_PRIVATE_DATA.into(), Mem(32, 224)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_DREP_LOCAL_COMM_ID", CM_DREP_LOCAL_COMM_ID);
        crate::field::reference::field("CM_DREP_REMOTE_COMM_ID", CM_DREP_REMOTE_COMM_ID);
        crate::field::reference::bytes("CM_DREP_PRIVATE_DATA", CM_DREP_PRIVATE_DATA);
    }
}
