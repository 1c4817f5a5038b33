//! REQ, Request for communication (IBTA Vol.1 Table 106, `struct cm_req_msg`).

use super::field::{Field, Field64, FieldBytes};
use super::message::{WireValue, cm_message};
use super::{DecodeError, Mad, attr};

cm_message! {
    /// Every field of Table 106. Widths below 8/16/32 bits are noted; encode truncates wider values.
    pub struct Req: attr::REQ, Table 106 {
        /// MAD attribute modifier; carries `ece.attr_mod` (`cm_format_mad_ece_hdr`).
        attr_mod: u32 { header attr_mod },
        local_comm_id: u32 { CM_REQ_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        /// ECE vendor ID, in the 24 bits after the reserved byte 4.
        vendor_id: u32 { CM_REQ_VENDOR_ID: Field = Field::new(5, 24) },
        /// The service the REQ connects to.
        service_id: u64 { CM_REQ_SERVICE_ID: Field64 = Field64::new(8) },
        /// The sender's CA GUID.
        local_ca_guid: u64 { CM_REQ_LOCAL_CA_GUID: Field64 = Field64::new(16) },
        local_qkey: u32 { CM_REQ_LOCAL_Q_KEY: Field = Field::new(28, 32) },
        /// 24 bits.
        local_qpn: u32 { CM_REQ_LOCAL_QPN: Field = Field::new(32, 24) },
        /// RDMA reads and atomics the sender accepts at once.
        responder_resources: u8 { CM_REQ_RESPONDER_RESOURCES: Field = Field::new(35, 8) },
        /// 24 bits.
        local_eecn: u32 { CM_REQ_LOCAL_EECN: Field = Field::new(36, 24) },
        /// RDMA reads and atomics the sender issues at once.
        initiator_depth: u8 { CM_REQ_INITIATOR_DEPTH: Field = Field::new(39, 8) },
        /// 24 bits.
        remote_eecn: u32 { CM_REQ_REMOTE_EECN: Field = Field::new(40, 24) },
        /// 5 bits.
        remote_cm_response_timeout: u8 {
            CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT: Field = Field::new(43, 5)
        },
        /// Decode fails for the reserved value 2.
        transport_service_type: TransportType {
            CM_REQ_TRANSPORT_SERVICE_TYPE: Field = Field::bits(43, 5, 2)
        },
        end_to_end_flow_control: bool {
            CM_REQ_END_TO_END_FLOW_CONTROL: Field = Field::bits(43, 7, 1)
        },
        /// 24 bits.
        starting_psn: u32 { CM_REQ_STARTING_PSN: Field = Field::new(44, 24) },
        /// 5 bits.
        local_cm_response_timeout: u8 {
            CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT: Field = Field::new(47, 5)
        },
        /// 3 bits.
        retry_count: u8 { CM_REQ_RETRY_COUNT: Field = Field::bits(47, 5, 3) },
        /// The partition key.
        pkey: u16 { CM_REQ_PARTITION_KEY: Field = Field::new(48, 16) },
        /// 4 bits, `enum ib_mtu` (3 = 1024).
        path_mtu: u8 { CM_REQ_PATH_PACKET_PAYLOAD_MTU: Field = Field::new(50, 4) },
        rdc_exists: bool { CM_REQ_RDC_EXISTS: Field = Field::bits(50, 4, 1) },
        /// 3 bits.
        rnr_retry_count: u8 { CM_REQ_RNR_RETRY_COUNT: Field = Field::bits(50, 5, 3) },
        /// 4 bits.
        max_cm_retries: u8 { CM_REQ_MAX_CM_RETRIES: Field = Field::new(51, 4) },
        srq: bool { CM_REQ_SRQ: Field = Field::bits(51, 4, 1) },
        /// 3 bits.
        extended_transport_type: u8 {
            CM_REQ_EXTENDED_TRANSPORT_TYPE: Field = Field::bits(51, 5, 3)
        },
        /// The primary path.
        primary_path: ReqPath { PathFields {
            local_lid => CM_REQ_PRIMARY_LOCAL_PORT_LID: Field = Field::new(52, 16),
            remote_lid => CM_REQ_PRIMARY_REMOTE_PORT_LID: Field = Field::new(54, 16),
            local_gid => CM_REQ_PRIMARY_LOCAL_PORT_GID: FieldBytes<16> = FieldBytes::new(56),
            remote_gid => CM_REQ_PRIMARY_REMOTE_PORT_GID: FieldBytes<16> = FieldBytes::new(72),
            flow_label => CM_REQ_PRIMARY_FLOW_LABEL: Field = Field::new(88, 20),
            packet_rate => CM_REQ_PRIMARY_PACKET_RATE: Field = Field::bits(91, 2, 6),
            traffic_class => CM_REQ_PRIMARY_TRAFFIC_CLASS: Field = Field::new(92, 8),
            hop_limit => CM_REQ_PRIMARY_HOP_LIMIT: Field = Field::new(93, 8),
            sl => CM_REQ_PRIMARY_SL: Field = Field::new(94, 4),
            subnet_local => CM_REQ_PRIMARY_SUBNET_LOCAL: Field = Field::bits(94, 4, 1),
            local_ack_timeout => CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT: Field = Field::new(95, 5),
        } },
        /// The alternate path; all zero when there is none.
        alternate_path: ReqPath { PathFields {
            local_lid => CM_REQ_ALTERNATE_LOCAL_PORT_LID: Field = Field::new(96, 16),
            remote_lid => CM_REQ_ALTERNATE_REMOTE_PORT_LID: Field = Field::new(98, 16),
            local_gid => CM_REQ_ALTERNATE_LOCAL_PORT_GID: FieldBytes<16> = FieldBytes::new(100),
            remote_gid => CM_REQ_ALTERNATE_REMOTE_PORT_GID: FieldBytes<16> = FieldBytes::new(116),
            flow_label => CM_REQ_ALTERNATE_FLOW_LABEL: Field = Field::new(132, 20),
            packet_rate => CM_REQ_ALTERNATE_PACKET_RATE: Field = Field::bits(135, 2, 6),
            traffic_class => CM_REQ_ALTERNATE_TRAFFIC_CLASS: Field = Field::new(136, 8),
            hop_limit => CM_REQ_ALTERNATE_HOP_LIMIT: Field = Field::new(137, 8),
            sl => CM_REQ_ALTERNATE_SL: Field = Field::new(138, 4),
            subnet_local => CM_REQ_ALTERNATE_SUBNET_LOCAL: Field = Field::bits(138, 4, 1),
            local_ack_timeout => CM_REQ_ALTERNATE_LOCAL_ACK_TIMEOUT: Field = Field::new(139, 5),
        } },
        sap_supported: bool { CM_REQ_SAP_SUPPORTED: Field = Field::bits(139, 5, 1) },
        private_data: [u8; 92] { CM_REQ_PRIVATE_DATA: FieldBytes<92> = FieldBytes::new(140) },
    }
    /// Encodes every field as given (the kernel's `cm_format_req` leaves some at zero).
    pub fn encode(&self, tid: u64) -> Mad;
    /// The attribute modifier is read from the header too, for ECE. Fails only for the reserved
    /// transport type 2.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

/// REQ Transport Service Type (cm_msgs.h); 2 is reserved. XRC is 3 with extended type 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportType {
    /// Reliable Connected.
    #[default]
    Rc = 0,
    /// Unreliable Connected.
    Uc = 1,
    /// eXtended Reliable Connected.
    Xrc = 3,
}

impl TransportType {
    /// Decodes the 2-bit wire value; fails for the reserved 2. `field` names the field for the
    /// error.
    pub(crate) fn from_wire(field: &'static str, value: u32) -> Result<Self, DecodeError> {
        match value {
            0 => Ok(Self::Rc),
            1 => Ok(Self::Uc),
            3 => Ok(Self::Xrc),
            _ => Err(DecodeError::FieldRange { field, value }),
        }
    }
}

/// One path of a REQ: the primary and alternate paths have the same fields at different offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqPath {
    /// The sender's port LID.
    pub local_lid: u16,
    /// The receiver's port LID.
    pub remote_lid: u16,
    /// The sender's port GID.
    pub local_gid: [u8; 16],
    /// The receiver's port GID.
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits, `enum ib_rate`.
    pub packet_rate: u8,
    /// The GRH traffic class.
    pub traffic_class: u8,
    /// The GRH hop limit.
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    /// Whether the path stays in the sender's subnet.
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

/// The field descriptors of one `ReqPath` (a LAP's alternate path has the
/// same fields, at its own offsets: `wire::lap`).
pub(super) struct PathFields {
    pub(super) local_lid: Field,
    pub(super) remote_lid: Field,
    pub(super) local_gid: FieldBytes<16>,
    pub(super) remote_gid: FieldBytes<16>,
    pub(super) flow_label: Field,
    pub(super) packet_rate: Field,
    pub(super) traffic_class: Field,
    pub(super) hop_limit: Field,
    pub(super) sl: Field,
    pub(super) subnet_local: Field,
    pub(super) local_ack_timeout: Field,
}

// Inlined, like `Field`'s accessors: with the path's descriptors consts at
// the call, every offset and mask is a constant.
impl WireValue<PathFields> for ReqPath {
    #[inline(always)]
    fn put(&self, d: &PathFields, mad: &mut Mad) {
        self.local_lid.put(&d.local_lid, mad);
        self.remote_lid.put(&d.remote_lid, mad);
        self.local_gid.put(&d.local_gid, mad);
        self.remote_gid.put(&d.remote_gid, mad);
        self.flow_label.put(&d.flow_label, mad);
        self.packet_rate.put(&d.packet_rate, mad);
        self.traffic_class.put(&d.traffic_class, mad);
        self.hop_limit.put(&d.hop_limit, mad);
        self.sl.put(&d.sl, mad);
        self.subnet_local.put(&d.subnet_local, mad);
        self.local_ack_timeout.put(&d.local_ack_timeout, mad);
    }

    #[inline(always)]
    fn take(d: &PathFields, name: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(ReqPath {
            local_lid: WireValue::take(&d.local_lid, name, mad)?,
            remote_lid: WireValue::take(&d.remote_lid, name, mad)?,
            local_gid: WireValue::take(&d.local_gid, name, mad)?,
            remote_gid: WireValue::take(&d.remote_gid, name, mad)?,
            flow_label: WireValue::take(&d.flow_label, name, mad)?,
            packet_rate: WireValue::take(&d.packet_rate, name, mad)?,
            traffic_class: WireValue::take(&d.traffic_class, name, mad)?,
            hop_limit: WireValue::take(&d.hop_limit, name, mad)?,
            sl: WireValue::take(&d.sl, name, mad)?,
            subnet_local: WireValue::take(&d.subnet_local, name, mad)?,
            local_ack_timeout: WireValue::take(&d.local_ack_timeout, name, mad)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_header;
    use crate::test_util::{Access::*, check_table, mad_from_dump};

    /// c2-userspace-A-vs-kernel-B.pcap: B's kernel rdma_cm REQ received by A's userspace agent
    /// (NOTES.md §C2; decode_cm_pcap.py --hex 0x10 gives all 256 bytes).
    const KERNEL_REQ: &str = "
        0000: 01 07 02 03 00 00 00 00 00 00 00 02 34 d2 77 55
        0010: 00 10 00 00 00 00 00 00 55 77 d2 34 00 00 00 00
        0020: 00 00 00 00 01 06 1c 06 50 54 00 ff fe 90 6c a2
        0030: 00 00 00 00 00 00 00 00 00 00 11 01 00 00 00 01
        0040: 00 00 00 a0 70 38 6a a7 ff ff 37 f0 ff ff ff ff
        0050: 00 00 00 00 00 00 00 00 00 00 ff ff 0a 4e 00 02
        0060: 00 00 00 00 00 00 00 00 00 00 ff ff 0a 4e 00 01
        0070: bd e8 80 00 00 40 00 98 00 00 00 00 00 00 00 00
        0080: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        0090: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00a0: 00 00 00 00 00 40 e5 3e 00 00 00 00 00 00 00 00
        00b0: 00 00 00 00 0a 4e 00 02 00 00 00 00 00 00 00 00
        00c0: 00 00 00 00 0a 4e 00 01 00 00 00 00 00 00 00 00
        00d0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00e0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        00f0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00";

    /// `::ffff:a.b.c.d` as a GID.
    fn v4_mapped_gid(ip: [u8; 4]) -> [u8; 16] {
        let mut gid = [0; 16];
        gid[10..12].copy_from_slice(&[0xff, 0xff]);
        gid[12..].copy_from_slice(&ip);
        gid
    }

    #[test]
    fn kernel_rdma_cm_req_decodes_and_re_encodes_byte_exact() {
        let captured = mad_from_dump(KERNEL_REQ);
        let (hdr, mad) = parse_header(&captured).unwrap();
        let req = Req::decode(mad).unwrap();

        assert_eq!(req.local_comm_id, 0x5577_d234);
        assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
        assert_eq!(req.local_ca_guid, 0x5054_00ff_fe90_6ca2);
        assert_eq!(req.local_qpn, 0x11);
        assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
        assert_eq!(req.remote_cm_response_timeout, 20);
        assert_eq!(req.transport_service_type, TransportType::Rc);
        assert_eq!(req.starting_psn, 0x70_386a);
        assert_eq!(req.local_cm_response_timeout, 20);
        assert_eq!(req.retry_count, 7);
        assert_eq!(req.pkey, 0xffff);
        assert_eq!(req.path_mtu, 3); // IB_MTU_1024
        assert_eq!(req.rnr_retry_count, 7);
        assert_eq!(req.max_cm_retries, 15);
        let p = req.primary_path;
        assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
        assert_eq!(p.local_gid, v4_mapped_gid([10, 78, 0, 2]));
        assert_eq!(p.remote_gid, v4_mapped_gid([10, 78, 0, 1]));
        assert_eq!(p.flow_label, 0xb_de88);
        assert_eq!((p.traffic_class, p.hop_limit), (0, 64));
        assert_eq!(p.local_ack_timeout, 19);
        assert_eq!(req.alternate_path, ReqPath::default());
        // rdma_cm's `struct cma_hdr`: version 0, IPv4, port 0xe53e, then src and dst addresses.
        assert_eq!(req.private_data[..4], [0x00, 0x40, 0xe5, 0x3e]);
        assert_eq!(req.private_data[16..20], [10, 78, 0, 2]);
        assert_eq!(req.private_data[32..36], [10, 78, 0, 1]);

        assert_eq!(req.encode(hdr.tid), captured);
    }

    #[test]
    fn decode_rejects_reserved_transport_type_2() {
        let mut mad = Req::default().encode(1);
        CM_REQ_TRANSPORT_SERVICE_TYPE.set(&mut mad, 2);
        let err = DecodeError::FieldRange {
            field: "CM_REQ_TRANSPORT_SERVICE_TYPE",
            value: 2,
        };
        assert_eq!(Req::decode(&mad), Err(err));
    }

    fn path_with(seed: u8, max: bool) -> ReqPath {
        if max {
            return ReqPath {
                local_lid: u16::MAX,
                remote_lid: u16::MAX,
                local_gid: [0xff; 16],
                remote_gid: [0xff; 16],
                flow_label: 0xf_ffff,
                packet_rate: 0x3f,
                traffic_class: u8::MAX,
                hop_limit: u8::MAX,
                sl: 0xf,
                subnet_local: true,
                local_ack_timeout: 0x1f,
            };
        }
        ReqPath {
            local_lid: u16::from(seed) << 8 | 1,
            remote_lid: u16::from(seed) << 8 | 2,
            local_gid: std::array::from_fn(|i| seed + i as u8),
            remote_gid: std::array::from_fn(|i| seed + 0x10 + i as u8),
            flow_label: u32::from(seed) << 8 | 3,
            packet_rate: seed % 0x40 + 4,
            traffic_class: seed + 5,
            hop_limit: seed + 6,
            sl: 7,
            subnet_local: true,
            local_ack_timeout: seed % 0x10 + 8,
        }
    }

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Req {
            attr_mod: 0x0102_0304,
            local_comm_id: 0x0506_0708,
            vendor_id: 0x09_0a0b,
            service_id: 0x0c0d_0e0f_1011_1213,
            local_ca_guid: 0x1415_1617_1819_1a1b,
            local_qkey: 0x1c1d_1e1f,
            local_qpn: 0x20_2122,
            responder_resources: 0x23,
            local_eecn: 0x24_2526,
            initiator_depth: 0x27,
            remote_eecn: 0x28_292a,
            remote_cm_response_timeout: 0x1b,
            transport_service_type: TransportType::Uc,
            end_to_end_flow_control: true,
            starting_psn: 0x2c_2d2e,
            local_cm_response_timeout: 0x1d,
            retry_count: 5,
            pkey: 0x2f30,
            path_mtu: 4,
            rdc_exists: true,
            rnr_retry_count: 6,
            max_cm_retries: 9,
            srq: true,
            extended_transport_type: 1,
            primary_path: path_with(0x40, false),
            alternate_path: path_with(0x80, false),
            sap_supported: true,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Req {
            attr_mod: u32::MAX,
            local_comm_id: u32::MAX,
            vendor_id: 0xff_ffff,
            service_id: u64::MAX,
            local_ca_guid: u64::MAX,
            local_qkey: u32::MAX,
            local_qpn: 0xff_ffff,
            responder_resources: u8::MAX,
            local_eecn: 0xff_ffff,
            initiator_depth: u8::MAX,
            remote_eecn: 0xff_ffff,
            remote_cm_response_timeout: 0x1f,
            transport_service_type: TransportType::Xrc,
            end_to_end_flow_control: true,
            starting_psn: 0xff_ffff,
            local_cm_response_timeout: 0x1f,
            retry_count: 7,
            pkey: u16::MAX,
            path_mtu: 0xf,
            rdc_exists: true,
            rnr_retry_count: 7,
            max_cm_retries: 0xf,
            srq: true,
            extended_transport_type: 7,
            primary_path: path_with(0, true),
            alternate_path: path_with(0, true),
            sap_supported: true,
            private_data: [0xff; 92],
        };
        for req in [distinct, max] {
            assert_eq!(Req::decode(&req.encode(7)).unwrap(), req);
        }
    }

    #[test]
    fn fields_match_table_106_and_touch_only_their_bits() {
        check_table(vec![
            (CM_REQ_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_REQ_VENDOR_ID.into(), Be32(28, 0x00ff_ffff)),
            (CM_REQ_SERVICE_ID.into(), Be64(32)),
            (CM_REQ_LOCAL_CA_GUID.into(), Be64(40)),
            (CM_REQ_LOCAL_Q_KEY.into(), Be32(52, 0xffff_ffff)),
            (CM_REQ_LOCAL_QPN.into(), Be32(56, 0xffff_ff00)),
            (CM_REQ_RESPONDER_RESOURCES.into(), U8(59, 0xff)),
            (CM_REQ_LOCAL_EECN.into(), Be32(60, 0xffff_ff00)),
            (CM_REQ_INITIATOR_DEPTH.into(), U8(63, 0xff)),
            (CM_REQ_REMOTE_EECN.into(), Be32(64, 0xffff_ff00)),
            (CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT.into(), U8(67, 0xf8)),
            (CM_REQ_TRANSPORT_SERVICE_TYPE.into(), U8(67, 0x06)),
            (CM_REQ_END_TO_END_FLOW_CONTROL.into(), U8(67, 0x01)),
            (CM_REQ_STARTING_PSN.into(), Be32(68, 0xffff_ff00)),
            (CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT.into(), U8(71, 0xf8)),
            (CM_REQ_RETRY_COUNT.into(), U8(71, 0x07)),
            (CM_REQ_PARTITION_KEY.into(), Be16(72, 0xffff)),
            (CM_REQ_PATH_PACKET_PAYLOAD_MTU.into(), U8(74, 0xf0)),
            (CM_REQ_RDC_EXISTS.into(), U8(74, 0x08)),
            (CM_REQ_RNR_RETRY_COUNT.into(), U8(74, 0x07)),
            (CM_REQ_MAX_CM_RETRIES.into(), U8(75, 0xf0)),
            (CM_REQ_SRQ.into(), U8(75, 0x08)),
            (CM_REQ_EXTENDED_TRANSPORT_TYPE.into(), U8(75, 0x07)),
            (CM_REQ_PRIMARY_LOCAL_PORT_LID.into(), Be16(76, 0xffff)),
            (CM_REQ_PRIMARY_REMOTE_PORT_LID.into(), Be16(78, 0xffff)),
            (CM_REQ_PRIMARY_LOCAL_PORT_GID.into(), Mem(80, 16)),
            (CM_REQ_PRIMARY_REMOTE_PORT_GID.into(), Mem(96, 16)),
            (CM_REQ_PRIMARY_FLOW_LABEL.into(), Be32(112, 0xffff_f000)),
            (CM_REQ_PRIMARY_PACKET_RATE.into(), U8(115, 0x3f)),
            (CM_REQ_PRIMARY_TRAFFIC_CLASS.into(), U8(116, 0xff)),
            (CM_REQ_PRIMARY_HOP_LIMIT.into(), U8(117, 0xff)),
            (CM_REQ_PRIMARY_SL.into(), U8(118, 0xf0)),
            (CM_REQ_PRIMARY_SUBNET_LOCAL.into(), U8(118, 0x08)),
            (CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT.into(), U8(119, 0xf8)),
            (CM_REQ_ALTERNATE_LOCAL_PORT_LID.into(), Be16(120, 0xffff)),
            (CM_REQ_ALTERNATE_REMOTE_PORT_LID.into(), Be16(122, 0xffff)),
            (CM_REQ_ALTERNATE_LOCAL_PORT_GID.into(), Mem(124, 16)),
            (CM_REQ_ALTERNATE_REMOTE_PORT_GID.into(), Mem(140, 16)),
            (CM_REQ_ALTERNATE_FLOW_LABEL.into(), Be32(156, 0xffff_f000)),
            (CM_REQ_ALTERNATE_PACKET_RATE.into(), U8(159, 0x3f)),
            (CM_REQ_ALTERNATE_TRAFFIC_CLASS.into(), U8(160, 0xff)),
            (CM_REQ_ALTERNATE_HOP_LIMIT.into(), U8(161, 0xff)),
            (CM_REQ_ALTERNATE_SL.into(), U8(162, 0xf0)),
            (CM_REQ_ALTERNATE_SUBNET_LOCAL.into(), U8(162, 0x08)),
            (CM_REQ_ALTERNATE_LOCAL_ACK_TIMEOUT.into(), U8(163, 0xf8)),
            (CM_REQ_SAP_SUPPORTED.into(), U8(163, 0x04)),
            (CM_REQ_PRIVATE_DATA.into(), Mem(164, 92)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_REQ_LOCAL_COMM_ID", CM_REQ_LOCAL_COMM_ID);
        crate::field::reference::field("CM_REQ_VENDOR_ID", CM_REQ_VENDOR_ID);
        crate::field::reference::field64("CM_REQ_SERVICE_ID", CM_REQ_SERVICE_ID);
        crate::field::reference::field64("CM_REQ_LOCAL_CA_GUID", CM_REQ_LOCAL_CA_GUID);
        crate::field::reference::field("CM_REQ_LOCAL_Q_KEY", CM_REQ_LOCAL_Q_KEY);
        crate::field::reference::field("CM_REQ_LOCAL_QPN", CM_REQ_LOCAL_QPN);
        crate::field::reference::field("CM_REQ_RESPONDER_RESOURCES", CM_REQ_RESPONDER_RESOURCES);
        crate::field::reference::field("CM_REQ_LOCAL_EECN", CM_REQ_LOCAL_EECN);
        crate::field::reference::field("CM_REQ_INITIATOR_DEPTH", CM_REQ_INITIATOR_DEPTH);
        crate::field::reference::field("CM_REQ_REMOTE_EECN", CM_REQ_REMOTE_EECN);
        crate::field::reference::field(
            "CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT",
            CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT,
        );
        crate::field::reference::field(
            "CM_REQ_TRANSPORT_SERVICE_TYPE",
            CM_REQ_TRANSPORT_SERVICE_TYPE,
        );
        crate::field::reference::field(
            "CM_REQ_END_TO_END_FLOW_CONTROL",
            CM_REQ_END_TO_END_FLOW_CONTROL,
        );
        crate::field::reference::field("CM_REQ_STARTING_PSN", CM_REQ_STARTING_PSN);
        crate::field::reference::field(
            "CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT",
            CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT,
        );
        crate::field::reference::field("CM_REQ_RETRY_COUNT", CM_REQ_RETRY_COUNT);
        crate::field::reference::field("CM_REQ_PARTITION_KEY", CM_REQ_PARTITION_KEY);
        crate::field::reference::field(
            "CM_REQ_PATH_PACKET_PAYLOAD_MTU",
            CM_REQ_PATH_PACKET_PAYLOAD_MTU,
        );
        crate::field::reference::field("CM_REQ_RDC_EXISTS", CM_REQ_RDC_EXISTS);
        crate::field::reference::field("CM_REQ_RNR_RETRY_COUNT", CM_REQ_RNR_RETRY_COUNT);
        crate::field::reference::field("CM_REQ_MAX_CM_RETRIES", CM_REQ_MAX_CM_RETRIES);
        crate::field::reference::field("CM_REQ_SRQ", CM_REQ_SRQ);
        crate::field::reference::field(
            "CM_REQ_EXTENDED_TRANSPORT_TYPE",
            CM_REQ_EXTENDED_TRANSPORT_TYPE,
        );
        crate::field::reference::field(
            "CM_REQ_PRIMARY_LOCAL_PORT_LID",
            CM_REQ_PRIMARY_LOCAL_PORT_LID,
        );
        crate::field::reference::field(
            "CM_REQ_PRIMARY_REMOTE_PORT_LID",
            CM_REQ_PRIMARY_REMOTE_PORT_LID,
        );
        crate::field::reference::bytes(
            "CM_REQ_PRIMARY_LOCAL_PORT_GID",
            CM_REQ_PRIMARY_LOCAL_PORT_GID,
        );
        crate::field::reference::bytes(
            "CM_REQ_PRIMARY_REMOTE_PORT_GID",
            CM_REQ_PRIMARY_REMOTE_PORT_GID,
        );
        crate::field::reference::field("CM_REQ_PRIMARY_FLOW_LABEL", CM_REQ_PRIMARY_FLOW_LABEL);
        crate::field::reference::field("CM_REQ_PRIMARY_PACKET_RATE", CM_REQ_PRIMARY_PACKET_RATE);
        crate::field::reference::field(
            "CM_REQ_PRIMARY_TRAFFIC_CLASS",
            CM_REQ_PRIMARY_TRAFFIC_CLASS,
        );
        crate::field::reference::field("CM_REQ_PRIMARY_HOP_LIMIT", CM_REQ_PRIMARY_HOP_LIMIT);
        crate::field::reference::field("CM_REQ_PRIMARY_SL", CM_REQ_PRIMARY_SL);
        crate::field::reference::field("CM_REQ_PRIMARY_SUBNET_LOCAL", CM_REQ_PRIMARY_SUBNET_LOCAL);
        crate::field::reference::field(
            "CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT",
            CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT,
        );
        crate::field::reference::field(
            "CM_REQ_ALTERNATE_LOCAL_PORT_LID",
            CM_REQ_ALTERNATE_LOCAL_PORT_LID,
        );
        crate::field::reference::field(
            "CM_REQ_ALTERNATE_REMOTE_PORT_LID",
            CM_REQ_ALTERNATE_REMOTE_PORT_LID,
        );
        crate::field::reference::bytes(
            "CM_REQ_ALTERNATE_LOCAL_PORT_GID",
            CM_REQ_ALTERNATE_LOCAL_PORT_GID,
        );
        crate::field::reference::bytes(
            "CM_REQ_ALTERNATE_REMOTE_PORT_GID",
            CM_REQ_ALTERNATE_REMOTE_PORT_GID,
        );
        crate::field::reference::field("CM_REQ_ALTERNATE_FLOW_LABEL", CM_REQ_ALTERNATE_FLOW_LABEL);
        crate::field::reference::field(
            "CM_REQ_ALTERNATE_PACKET_RATE",
            CM_REQ_ALTERNATE_PACKET_RATE,
        );
        crate::field::reference::field(
            "CM_REQ_ALTERNATE_TRAFFIC_CLASS",
            CM_REQ_ALTERNATE_TRAFFIC_CLASS,
        );
        crate::field::reference::field("CM_REQ_ALTERNATE_HOP_LIMIT", CM_REQ_ALTERNATE_HOP_LIMIT);
        crate::field::reference::field("CM_REQ_ALTERNATE_SL", CM_REQ_ALTERNATE_SL);
        crate::field::reference::field(
            "CM_REQ_ALTERNATE_SUBNET_LOCAL",
            CM_REQ_ALTERNATE_SUBNET_LOCAL,
        );
        crate::field::reference::field(
            "CM_REQ_ALTERNATE_LOCAL_ACK_TIMEOUT",
            CM_REQ_ALTERNATE_LOCAL_ACK_TIMEOUT,
        );
        crate::field::reference::field("CM_REQ_SAP_SUPPORTED", CM_REQ_SAP_SUPPORTED);
        crate::field::reference::bytes("CM_REQ_PRIVATE_DATA", CM_REQ_PRIVATE_DATA);
    }
}
