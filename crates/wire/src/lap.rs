//! LAP, Load Alternate Path (IBTA Vol.1 Table 115, `struct cm_lap_msg`).
//!
//! The kernel only receives LAPs (`cm_lap_handler`); `ib_send_cm_lap()` was
//! removed in 2019. Encoding exists for tests and tools that play the peer.

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::req::PathFields;
use super::{DecodeError, Mad, ReqPath, attr};

cm_message! {
    /// A LAP: proposes a new alternate path for an established connection.
    pub struct Lap: attr::LAP, Table 115 {
        local_comm_id: u32 { CM_LAP_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_LAP_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        /// 24 bits: the receiver's QPN (the kernel does not check it).
        remote_qpn: u32 { CM_LAP_REMOTE_QPN_EECN: Field = Field::new(12, 24) },
        /// 5 bits.
        remote_cm_response_timeout: u8 {
            CM_LAP_REMOTE_CM_RESPONSE_TIMEOUT: Field = Field::new(15, 5)
        },
        /// "Local" is the LAP sender's side, as in a REQ: the same fields as a REQ's paths.
        alternate_path: ReqPath { PathFields {
            local_lid => CM_LAP_ALTERNATE_LOCAL_PORT_LID: Field = Field::new(20, 16),
            remote_lid => CM_LAP_ALTERNATE_REMOTE_PORT_LID: Field = Field::new(22, 16),
            local_gid => CM_LAP_ALTERNATE_LOCAL_PORT_GID: FieldBytes<16> = FieldBytes::new(24),
            remote_gid => CM_LAP_ALTERNATE_REMOTE_PORT_GID: FieldBytes<16> = FieldBytes::new(40),
            flow_label => CM_LAP_ALTERNATE_FLOW_LABEL: Field = Field::new(56, 20),
            traffic_class => CM_LAP_ALTERNATE_TRAFFIC_CLASS: Field = Field::new(59, 8),
            hop_limit => CM_LAP_ALTERNATE_HOP_LIMIT: Field = Field::new(60, 8),
            packet_rate => CM_LAP_ALTERNATE_PACKET_RATE: Field = Field::bits(61, 2, 6),
            sl => CM_LAP_ALTERNATE_SL: Field = Field::new(62, 4),
            subnet_local => CM_LAP_ALTERNATE_SUBNET_LOCAL: Field = Field::bits(62, 4, 1),
            local_ack_timeout => CM_LAP_ALTERNATE_LOCAL_ACK_TIMEOUT: Field = Field::new(63, 5),
        } },
        private_data: [u8; 168] { CM_LAP_PRIVATE_DATA: FieldBytes<168> = FieldBytes::new(64) },
    }
    /// Encodes every field as given (what the removed `cm_format_lap()` did);
    /// values wider than their field are truncated.
    pub fn encode(&self, tid: u64) -> Mad;
    /// Every bit pattern is a LAP, so this never fails.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// No kernel since 2019 sends a LAP, so there is no capture: this dump was
    /// written by hand from Table 115 (kernel-cm-spec.md §3.4), which agrees
    /// with the pre-2020 kernel's packed `struct cm_lap_msg` (cm_msgs.h). tshark
    /// 4.0.17 names it "CM LoadAlternatePath" but does not dissect its fields.
    const GOLDEN_LAP: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 01 4d 3c 2b 1a
        0010: 00 19 00 00 00 00 00 00 1a 2b 3c 4d 55 66 77 88
        0020: 00 00 00 00 00 01 23 a0 00 00 00 00 00 03 00 04
        0030: fe 80 00 00 00 00 00 00 00 02 c9 03 00 ab 00 01
        0040: fe 80 00 00 00 00 00 00 00 02 c9 03 00 ab 00 02
        0050: 12 34 50 0b 40 03 58 88 4c 41 50 21 00 00 00 00
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

    fn gid(last: u8) -> [u8; 16] {
        let mut g = [0; 16];
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        g[8..].copy_from_slice(&[0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0x00, last]);
        g
    }

    fn golden() -> Lap {
        let mut lap = Lap {
            local_comm_id: 0x1a2b_3c4d,
            remote_comm_id: 0x5566_7788,
            remote_qpn: 0x000123,
            remote_cm_response_timeout: 20,
            alternate_path: ReqPath {
                local_lid: 3,
                remote_lid: 4,
                local_gid: gid(1),
                remote_gid: gid(2),
                flow_label: 0x12345,
                packet_rate: 3,
                traffic_class: 0x0b,
                hop_limit: 0x40,
                sl: 5,
                subnet_local: true,
                local_ack_timeout: 17,
            },
            ..Lap::default()
        };
        lap.private_data[..4].copy_from_slice(b"LAP!");
        lap
    }

    #[test]
    fn encode_matches_the_golden_lap_and_decodes_back() {
        let mad = mad_from_dump(GOLDEN_LAP);
        assert_eq!(golden().encode(0x0000_0001_4d3c_2b1a), mad);
        assert_eq!(Lap::decode(&mad).unwrap(), golden());
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Lap {
            private_data: std::array::from_fn(|i| i as u8 + 1),
            ..golden()
        };
        let max = Lap {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            remote_qpn: 0xff_ffff,
            remote_cm_response_timeout: 31,
            alternate_path: ReqPath {
                local_lid: u16::MAX,
                remote_lid: u16::MAX,
                local_gid: [0xff; 16],
                remote_gid: [0xff; 16],
                flow_label: 0xf_ffff,
                packet_rate: 0x3f,
                traffic_class: 0xff,
                hop_limit: 0xff,
                sl: 0xf,
                subnet_local: true,
                local_ack_timeout: 31,
            },
            private_data: [0xff; 168],
        };
        for lap in [distinct, max, Lap::default()] {
            assert_eq!(Lap::decode(&lap.encode(7)).unwrap(), lap);
        }
    }

    #[test]
    fn fields_match_table_114_and_touch_only_their_bits() {
        check_table(vec![
            (CM_LAP_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_LAP_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_LAP_REMOTE_QPN_EECN.into(), Be32(36, 0xffff_ff00)),
            (CM_LAP_REMOTE_CM_RESPONSE_TIMEOUT.into(), U8(39, 0xf8)),
            (CM_LAP_ALTERNATE_LOCAL_PORT_LID.into(), Be16(44, 0xffff)),
            (CM_LAP_ALTERNATE_REMOTE_PORT_LID.into(), Be16(46, 0xffff)),
            (CM_LAP_ALTERNATE_LOCAL_PORT_GID.into(), Mem(48, 16)),
            (CM_LAP_ALTERNATE_REMOTE_PORT_GID.into(), Mem(64, 16)),
            (CM_LAP_ALTERNATE_FLOW_LABEL.into(), Be32(80, 0xffff_f000)),
            (CM_LAP_ALTERNATE_TRAFFIC_CLASS.into(), U8(83, 0xff)),
            (CM_LAP_ALTERNATE_HOP_LIMIT.into(), U8(84, 0xff)),
            (CM_LAP_ALTERNATE_PACKET_RATE.into(), U8(85, 0x3f)),
            (CM_LAP_ALTERNATE_SL.into(), U8(86, 0xf0)),
            (CM_LAP_ALTERNATE_SUBNET_LOCAL.into(), U8(86, 0x08)),
            (CM_LAP_ALTERNATE_LOCAL_ACK_TIMEOUT.into(), U8(87, 0xf8)),
            (CM_LAP_PRIVATE_DATA.into(), Mem(88, 168)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_LAP_LOCAL_COMM_ID", CM_LAP_LOCAL_COMM_ID);
        crate::field::reference::field("CM_LAP_REMOTE_COMM_ID", CM_LAP_REMOTE_COMM_ID);
        crate::field::reference::field("CM_LAP_REMOTE_QPN_EECN", CM_LAP_REMOTE_QPN_EECN);
        crate::field::reference::field(
            "CM_LAP_REMOTE_CM_RESPONSE_TIMEOUT",
            CM_LAP_REMOTE_CM_RESPONSE_TIMEOUT,
        );
        crate::field::reference::field(
            "CM_LAP_ALTERNATE_LOCAL_PORT_LID",
            CM_LAP_ALTERNATE_LOCAL_PORT_LID,
        );
        crate::field::reference::field(
            "CM_LAP_ALTERNATE_REMOTE_PORT_LID",
            CM_LAP_ALTERNATE_REMOTE_PORT_LID,
        );
        crate::field::reference::bytes(
            "CM_LAP_ALTERNATE_LOCAL_PORT_GID",
            CM_LAP_ALTERNATE_LOCAL_PORT_GID,
        );
        crate::field::reference::bytes(
            "CM_LAP_ALTERNATE_REMOTE_PORT_GID",
            CM_LAP_ALTERNATE_REMOTE_PORT_GID,
        );
        crate::field::reference::field("CM_LAP_ALTERNATE_FLOW_LABEL", CM_LAP_ALTERNATE_FLOW_LABEL);
        crate::field::reference::field(
            "CM_LAP_ALTERNATE_TRAFFIC_CLASS",
            CM_LAP_ALTERNATE_TRAFFIC_CLASS,
        );
        crate::field::reference::field("CM_LAP_ALTERNATE_HOP_LIMIT", CM_LAP_ALTERNATE_HOP_LIMIT);
        crate::field::reference::field(
            "CM_LAP_ALTERNATE_PACKET_RATE",
            CM_LAP_ALTERNATE_PACKET_RATE,
        );
        crate::field::reference::field("CM_LAP_ALTERNATE_SL", CM_LAP_ALTERNATE_SL);
        crate::field::reference::field(
            "CM_LAP_ALTERNATE_SUBNET_LOCAL",
            CM_LAP_ALTERNATE_SUBNET_LOCAL,
        );
        crate::field::reference::field(
            "CM_LAP_ALTERNATE_LOCAL_ACK_TIMEOUT",
            CM_LAP_ALTERNATE_LOCAL_ACK_TIMEOUT,
        );
        crate::field::reference::bytes("CM_LAP_PRIVATE_DATA", CM_LAP_PRIVATE_DATA);
    }
}
