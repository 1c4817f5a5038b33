//! REP, Reply to request for communication (IBTA Vol.1 Table 110, `struct cm_rep_msg`).

use super::field::{Field, Field64, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// A REP: the passive side's acceptance of a REQ.
    pub struct Rep: attr::REP, Table 110 {
        /// MAD attribute modifier; carries `ece.attr_mod` (`cm_format_mad_ece_hdr`).
        attr_mod: u32 { header attr_mod },
        local_comm_id: u32 { CM_REP_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_REP_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        /// The kernel never sets it (`cm_format_rep`).
        local_qkey: u32 { CM_REP_LOCAL_Q_KEY: Field = Field::new(8, 32) },
        /// 24 bits.
        local_qpn: u32 { CM_REP_LOCAL_QPN: Field = Field::new(12, 24) },
        /// ECE vendor ID, 24 bits, split over `CM_REP_VENDOR_ID_H/M/L`.
        vendor_id: u32 {
            split
            /// ECE vendor ID bits 23..16; the three vendor bytes fill the reserved bytes after
            /// 24-bit fields.
            >> 16 CM_REP_VENDOR_ID_H: Field = Field::new(15, 8),
            >> 8 CM_REP_VENDOR_ID_M: Field = Field::new(19, 8),
            >> 0 CM_REP_VENDOR_ID_L: Field = Field::new(23, 8),
        },
        /// `CM_REP_LOCAL_EE_CONTEXT_NUMBER`, 24 bits; holds the QPN for XRC_TGT.
        local_eecn: u32 { CM_REP_LOCAL_EE_CONTEXT_NUMBER: Field = Field::new(16, 24) },
        /// 24 bits.
        starting_psn: u32 { CM_REP_STARTING_PSN: Field = Field::new(20, 24) },
        /// RDMA reads and atomics the sender accepts at once.
        responder_resources: u8 { CM_REP_RESPONDER_RESOURCES: Field = Field::new(24, 8) },
        /// RDMA reads and atomics the sender issues at once.
        initiator_depth: u8 { CM_REP_INITIATOR_DEPTH: Field = Field::new(25, 8) },
        /// 5 bits.
        target_ack_delay: u8 { CM_REP_TARGET_ACK_DELAY: Field = Field::new(26, 5) },
        /// 2 bits.
        failover_accepted: u8 { CM_REP_FAILOVER_ACCEPTED: Field = Field::bits(26, 5, 2) },
        end_to_end_flow_control: bool {
            CM_REP_END_TO_END_FLOW_CONTROL: Field = Field::bits(26, 7, 1)
        },
        /// 3 bits.
        rnr_retry_count: u8 { CM_REP_RNR_RETRY_COUNT: Field = Field::new(27, 3) },
        srq: bool { CM_REP_SRQ: Field = Field::bits(27, 3, 1) },
        /// The sender's CA GUID.
        local_ca_guid: u64 { CM_REP_LOCAL_CA_GUID: Field64 = Field64::new(28) },
        private_data: [u8; 196] { CM_REP_PRIVATE_DATA: FieldBytes<196> = FieldBytes::new(36) },
    }
    /// Encodes as `cm_format_rep()` does.
    pub fn encode(&self, tid: u64) -> Mad;
    /// The attribute modifier is read from the header too, for ECE.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// c1-kernel-cm-rping.pcap, kernel REP 10.78.0.2 -> 10.78.0.1 (decode_cm_pcap.py --hex 0x13).
    const KERNEL_REP: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 02 bd 0b e1 27
        0010: 00 13 00 00 00 00 00 00 98 8a cb 10 27 e1 0b bd
        0020: 00 00 00 00 00 00 11 00 00 00 00 00 05 4c 0a 00
        0030: 01 01 78 e0 50 54 00 ff fe 90 6c a2 00 00 00 00
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
    fn kernel_rep_captured_on_softroce_decodes_and_re_encodes() {
        let captured = mad_from_dump(KERNEL_REP);
        let rep = Rep::decode(&captured).unwrap();
        let expect = Rep {
            local_comm_id: 0x988a_cb10,
            remote_comm_id: 0x27e1_0bbd,
            local_qpn: 0x11,
            starting_psn: 0x05_4c0a,
            responder_resources: 1,
            initiator_depth: 1,
            target_ack_delay: 15,
            rnr_retry_count: 7,
            local_ca_guid: 0x5054_00ff_fe90_6ca2,
            ..Rep::default()
        };
        assert_eq!(rep, expect);
        assert_eq!(rep.encode(0x0000_0002_bd0b_e127), captured);
    }

    /// interop scenario 09, the kernel's XRC_TGT REP 10.78.0.2 -> 10.78.0.1
    /// (rdma_cm on RDMA_PS_IB, QPN 0xb7c0, its private data that QPN).
    const KERNEL_XRC_TGT_REP: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 0a 45 18 ae 2e
        0010: 00 13 00 00 00 00 00 00 35 9c 3b d0 2e ae 18 45
        0020: 00 00 00 00 00 00 00 00 00 b7 c0 00 cb 74 41 00
        0030: 00 00 78 f0 50 54 00 ff fe 1a 89 e0 00 00 b7 c0
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
    fn kernel_xrc_tgt_rep_captured_on_softroce_decodes_and_re_encodes() {
        let captured = mad_from_dump(KERNEL_XRC_TGT_REP);
        let rep = Rep::decode(&captured).unwrap();
        let mut private_data = [0; 196];
        private_data[..4].copy_from_slice(&0xb7c0u32.to_be_bytes());
        // cm_format_rep for IB_QPT_XRC_TGT: the QPN in the EECN, SRQ set, no
        // Local QPN, initiator depth or flow control.
        let expect = Rep {
            local_comm_id: 0x359c_3bd0,
            remote_comm_id: 0x2eae_1845,
            local_eecn: 0xb7c0,
            starting_psn: 0xcb_7441,
            target_ack_delay: 15,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x5054_00ff_fe1a_89e0,
            private_data,
            ..Rep::default()
        };
        assert_eq!(rep, expect);
        assert_eq!(rep.encode(0x0000_000a_4518_ae2e), captured);
    }

    #[test]
    fn vendor_id_is_split_over_the_h_m_l_bytes() {
        let mad = Rep {
            vendor_id: 0xab_cdef,
            local_qpn: 0xff_ffff,
            ..Rep::default()
        }
        .encode(0);
        assert_eq!(
            mad[36..48],
            [0xff, 0xff, 0xff, 0xab, 0, 0, 0, 0xcd, 0, 0, 0, 0xef]
        );
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Rep {
            attr_mod: 0x0102_0304,
            local_comm_id: 0x0506_0708,
            remote_comm_id: 0x090a_0b0c,
            local_qkey: 0x0d0e_0f10,
            local_qpn: 0x11_1213,
            vendor_id: 0x14_1516,
            local_eecn: 0x17_1819,
            starting_psn: 0x1a_1b1c,
            responder_resources: 0x1d,
            initiator_depth: 0x1e,
            target_ack_delay: 0x1f,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 5,
            srq: true,
            local_ca_guid: 0x2021_2223_2425_2627,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Rep {
            attr_mod: u32::MAX,
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            local_qkey: u32::MAX,
            local_qpn: 0xff_ffff,
            vendor_id: 0xff_ffff,
            local_eecn: 0xff_ffff,
            starting_psn: 0xff_ffff,
            responder_resources: u8::MAX,
            initiator_depth: u8::MAX,
            target_ack_delay: 31,
            failover_accepted: 3,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: u64::MAX,
            private_data: [0xff; 196],
        };
        for rep in [distinct, max] {
            assert_eq!(Rep::decode(&rep.encode(7)).unwrap(), rep);
        }
    }

    #[test]
    fn fields_match_table_110_and_touch_only_their_bits() {
        check_table(vec![
            (CM_REP_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_REP_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_REP_LOCAL_Q_KEY.into(), Be32(32, 0xffff_ffff)),
            (CM_REP_LOCAL_QPN.into(), Be32(36, 0xffff_ff00)),
            (CM_REP_VENDOR_ID_H.into(), U8(39, 0xff)),
            (CM_REP_LOCAL_EE_CONTEXT_NUMBER.into(), Be32(40, 0xffff_ff00)),
            (CM_REP_VENDOR_ID_M.into(), U8(43, 0xff)),
            (CM_REP_STARTING_PSN.into(), Be32(44, 0xffff_ff00)),
            (CM_REP_VENDOR_ID_L.into(), U8(47, 0xff)),
            (CM_REP_RESPONDER_RESOURCES.into(), U8(48, 0xff)),
            (CM_REP_INITIATOR_DEPTH.into(), U8(49, 0xff)),
            (CM_REP_TARGET_ACK_DELAY.into(), U8(50, 0xf8)),
            (CM_REP_FAILOVER_ACCEPTED.into(), U8(50, 0x06)),
            (CM_REP_END_TO_END_FLOW_CONTROL.into(), U8(50, 0x01)),
            (CM_REP_RNR_RETRY_COUNT.into(), U8(51, 0xe0)),
            (CM_REP_SRQ.into(), U8(51, 0x10)),
            (CM_REP_LOCAL_CA_GUID.into(), Be64(52)),
            (CM_REP_PRIVATE_DATA.into(), Mem(60, 196)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_REP_LOCAL_COMM_ID", CM_REP_LOCAL_COMM_ID);
        crate::field::reference::field("CM_REP_REMOTE_COMM_ID", CM_REP_REMOTE_COMM_ID);
        crate::field::reference::field("CM_REP_LOCAL_Q_KEY", CM_REP_LOCAL_Q_KEY);
        crate::field::reference::field("CM_REP_LOCAL_QPN", CM_REP_LOCAL_QPN);
        crate::field::reference::field("CM_REP_VENDOR_ID_H", CM_REP_VENDOR_ID_H);
        crate::field::reference::field(
            "CM_REP_LOCAL_EE_CONTEXT_NUMBER",
            CM_REP_LOCAL_EE_CONTEXT_NUMBER,
        );
        crate::field::reference::field("CM_REP_VENDOR_ID_M", CM_REP_VENDOR_ID_M);
        crate::field::reference::field("CM_REP_STARTING_PSN", CM_REP_STARTING_PSN);
        crate::field::reference::field("CM_REP_VENDOR_ID_L", CM_REP_VENDOR_ID_L);
        crate::field::reference::field("CM_REP_RESPONDER_RESOURCES", CM_REP_RESPONDER_RESOURCES);
        crate::field::reference::field("CM_REP_INITIATOR_DEPTH", CM_REP_INITIATOR_DEPTH);
        crate::field::reference::field("CM_REP_TARGET_ACK_DELAY", CM_REP_TARGET_ACK_DELAY);
        crate::field::reference::field("CM_REP_FAILOVER_ACCEPTED", CM_REP_FAILOVER_ACCEPTED);
        crate::field::reference::field(
            "CM_REP_END_TO_END_FLOW_CONTROL",
            CM_REP_END_TO_END_FLOW_CONTROL,
        );
        crate::field::reference::field("CM_REP_RNR_RETRY_COUNT", CM_REP_RNR_RETRY_COUNT);
        crate::field::reference::field("CM_REP_SRQ", CM_REP_SRQ);
        crate::field::reference::field64("CM_REP_LOCAL_CA_GUID", CM_REP_LOCAL_CA_GUID);
        crate::field::reference::bytes("CM_REP_PRIVATE_DATA", CM_REP_PRIVATE_DATA);
    }
}
