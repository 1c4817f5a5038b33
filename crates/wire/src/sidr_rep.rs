//! SIDR_REP, Service ID Resolution REPly (IBTA Vol.1 Table 120, `struct cm_sidr_rep_msg`).

use super::field::{Field, Field64, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, attr};

cm_message! {
    /// A SIDR_REP: the answer to a SIDR_REQ.
    pub struct SidrRep: attr::SIDR_REP, Table 120 {
        /// The SIDR_REQ's request ID.
        request_id: u32 { CM_SIDR_REP_REQUESTID: Field = Field::new(0, 32) },
        /// `enum ib_cm_sidr_status`.
        status: u8 { CM_SIDR_REP_STATUS: Field = Field::new(4, 8) },
        /// At most 72 (decode refuses more).
        info_length: u8 {
            CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH: Field = Field::new(5, 8), max 72
        },
        /// 24 bits, from the H (16) and L (8) fields as IBTA defines them. What
        /// Linux sends for an `ece.vendor_id` is [`SidrRep::vendor_id_as_linux_sends`].
        vendor_id: u32 {
            split
            >> 8 CM_SIDR_REP_VENDOR_ID_H: Field = Field::new(6, 16),
            >> 0 CM_SIDR_REP_VENDOR_ID_L: Field = Field::new(11, 8),
        },
        /// 24 bits.
        qpn: u32 { CM_SIDR_REP_QPN: Field = Field::new(8, 24) },
        /// The service ID resolved.
        service_id: u64 { CM_SIDR_REP_SERVICEID: Field64 = Field64::new(12) },
        /// The Q_Key of `qpn`.
        qkey: u32 { CM_SIDR_REP_Q_KEY: Field = Field::new(20, 32) },
        /// Additional information, `info_length` bytes of it valid.
        info: [u8; 72] {
            CM_SIDR_REP_ADDITIONAL_INFORMATION: FieldBytes<72> = FieldBytes::new(24)
        },
        private_data: [u8; 136] { CM_SIDR_REP_PRIVATE_DATA: FieldBytes<136> = FieldBytes::new(96) },
    }
    /// Encodes as `cm_format_sidr_rep()` does.
    pub fn encode(&self, tid: u64, attr_mod: u32) -> Mad;
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

impl SidrRep {
    /// The [`vendor_id`](SidrRep::vendor_id) of the SIDR_REP that Linux's
    /// `cm_format_sidr_rep()` sends for `ece.vendor_id`. It writes
    /// `IBA_SET(CM_SIDR_REP_VENDOR_ID_L, …, vendor_id & 0xFF)` and
    /// `IBA_SET(CM_SIDR_REP_VENDOR_ID_H, …, (vendor_id >> 8) & 0xFF)`: the
    /// 16-bit H field gets bits 15..8 in its low byte and 0 in its high byte,
    /// so bits 23..16 never reach the wire (IBTA would put bits 23..8 in H).
    /// Read back as H << 8 | L, that is the low 16 bits. No receiver sees the
    /// difference from Linux: `cm_format_sidr_rep_event()` reads neither
    /// field, and `struct ib_cm_sidr_rep_event_param` has no `ece`.
    pub const fn vendor_id_as_linux_sends(ece_vendor_id: u32) -> u32 {
        ece_vendor_id & 0xffff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table};

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = SidrRep {
            request_id: 0x0102_0304,
            status: 5,
            info_length: 72,
            vendor_id: 0x06_0708,
            qpn: 0x09_0a0b,
            service_id: 0x0c0d_0e0f_1011_1213,
            qkey: 0x1415_1617,
            info: std::array::from_fn(|i| i as u8 + 1),
            private_data: std::array::from_fn(|i| i as u8 + 2),
        };
        let max = SidrRep {
            request_id: u32::MAX,
            status: u8::MAX,
            info_length: 72,
            vendor_id: 0xff_ffff,
            qpn: 0xff_ffff,
            service_id: u64::MAX,
            qkey: u32::MAX,
            info: [0xff; 72],
            private_data: [0xff; 136],
        };
        for rep in [distinct, max] {
            assert_eq!(SidrRep::decode(&rep.encode(3, 0)).unwrap(), rep);
        }
    }

    /// Linux 6.16 `cm_format_sidr_rep()` for `ece.vendor_id` 0x00ABCDEF: MAD
    /// bytes 30..32 (VENDOR_ID_H, 16 bits) are 00 CD, byte 35 (VENDOR_ID_L)
    /// is EF, and AB is nowhere; bits 31..24 change nothing either. What the
    /// fields then read back as is 0xCDEF.
    #[test]
    fn sidr_rep_vendor_id_is_written_as_the_kernel_writes_it() {
        let mut expected = crate::new_mad(attr::SIDR_REP, 1, 0);
        expected[30..32].copy_from_slice(&[0x00, 0xcd]);
        expected[35] = 0xef;
        for ece_vendor_id in [0x00ab_cdef, 0xffab_cdef] {
            let rep = SidrRep {
                vendor_id: SidrRep::vendor_id_as_linux_sends(ece_vendor_id),
                ..SidrRep::default()
            };
            assert_eq!(rep.encode(1, 0), expected, "{ece_vendor_id:#x}");
        }
        assert_eq!(SidrRep::decode(&expected).unwrap().vendor_id, 0xcdef);
    }

    #[test]
    fn decode_rejects_info_length_over_72() {
        let mut mad = SidrRep::default().encode(1, 0);
        CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH.set(&mut mad, 73);
        assert!(matches!(
            SidrRep::decode(&mad),
            Err(DecodeError::FieldRange { .. })
        ));
    }

    #[test]
    fn fields_match_table_120_and_touch_only_their_bits() {
        check_table(vec![
            (CM_SIDR_REP_REQUESTID.into(), Be32(24, 0xffff_ffff)),
            (CM_SIDR_REP_STATUS.into(), U8(28, 0xff)),
            (
                CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH.into(),
                U8(29, 0xff),
            ),
            (CM_SIDR_REP_VENDOR_ID_H.into(), Be16(30, 0xffff)),
            (CM_SIDR_REP_QPN.into(), Be32(32, 0xffff_ff00)),
            (CM_SIDR_REP_VENDOR_ID_L.into(), U8(35, 0xff)),
            (CM_SIDR_REP_SERVICEID.into(), Be64(36)),
            (CM_SIDR_REP_Q_KEY.into(), Be32(44, 0xffff_ffff)),
            (CM_SIDR_REP_ADDITIONAL_INFORMATION.into(), Mem(48, 72)),
            (CM_SIDR_REP_PRIVATE_DATA.into(), Mem(120, 136)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_SIDR_REP_REQUESTID", CM_SIDR_REP_REQUESTID);
        crate::field::reference::field("CM_SIDR_REP_STATUS", CM_SIDR_REP_STATUS);
        crate::field::reference::field(
            "CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH",
            CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH,
        );
        crate::field::reference::field("CM_SIDR_REP_VENDOR_ID_H", CM_SIDR_REP_VENDOR_ID_H);
        crate::field::reference::field("CM_SIDR_REP_QPN", CM_SIDR_REP_QPN);
        crate::field::reference::field("CM_SIDR_REP_VENDOR_ID_L", CM_SIDR_REP_VENDOR_ID_L);
        crate::field::reference::field64("CM_SIDR_REP_SERVICEID", CM_SIDR_REP_SERVICEID);
        crate::field::reference::field("CM_SIDR_REP_Q_KEY", CM_SIDR_REP_Q_KEY);
        crate::field::reference::bytes(
            "CM_SIDR_REP_ADDITIONAL_INFORMATION",
            CM_SIDR_REP_ADDITIONAL_INFORMATION,
        );
        crate::field::reference::bytes("CM_SIDR_REP_PRIVATE_DATA", CM_SIDR_REP_PRIVATE_DATA);
    }
}
