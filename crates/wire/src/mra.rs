//! MRA, Message Receipt Acknowledgement (IBTA Vol.1 Table 107, `struct cm_mra_msg`).

use super::field::{Field, FieldBytes};
use super::message::cm_message;
use super::{DecodeError, Mad, MsgResponse, attr};

cm_message! {
    /// An MRA: "your message arrived, the answer will take longer", with the time to wait.
    pub struct Mra: attr::MRA, Table 107 {
        local_comm_id: u32 { CM_MRA_LOCAL_COMM_ID: Field = Field::new(0, 32) },
        remote_comm_id: u32 { CM_MRA_REMOTE_COMM_ID: Field = Field::new(4, 32) },
        /// The message acknowledged; decode fails for the reserved value 3.
        message_mraed: MsgResponse { CM_MRA_MESSAGE_MRAED: Field = Field::new(8, 2) },
        /// 5 bits, 4.096 µs * 2^value; K7.2 always sends 24.
        service_timeout: u8 { CM_MRA_SERVICE_TIMEOUT: Field = Field::new(9, 5) },
        private_data: [u8; 222] { CM_MRA_PRIVATE_DATA: FieldBytes<222> = FieldBytes::new(10) },
    }
    /// Encodes as `cm_format_mra()` does.
    pub fn encode(&self, tid: u64) -> Mad;
    /// Fails only for the reserved "message MRAed" value 3.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{Access::*, check_table};

    #[test]
    fn round_trip_with_distinct_and_max_values() {
        let distinct = Mra {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            message_mraed: MsgResponse::Rep,
            service_timeout: 24,
            private_data: std::array::from_fn(|i| i as u8 + 1),
        };
        let max = Mra {
            local_comm_id: u32::MAX,
            remote_comm_id: u32::MAX,
            message_mraed: MsgResponse::Other,
            service_timeout: 31,
            private_data: [0xff; 222],
        };
        for mra in [distinct, max] {
            assert_eq!(Mra::decode(&mra.encode(7)).unwrap(), mra);
        }
    }

    #[test]
    fn decode_rejects_reserved_message_mraed_3() {
        let mut mad = Mra::default().encode(1);
        CM_MRA_MESSAGE_MRAED.set(&mut mad, 3);
        let err = DecodeError::FieldRange {
            field: "CM_MRA_MESSAGE_MRAED",
            value: 3,
        };
        assert_eq!(Mra::decode(&mad), Err(err));
    }

    #[test]
    fn fields_match_table_107_and_touch_only_their_bits() {
        check_table(vec![
            (CM_MRA_LOCAL_COMM_ID.into(), Be32(24, 0xffff_ffff)),
            (CM_MRA_REMOTE_COMM_ID.into(), Be32(28, 0xffff_ffff)),
            (CM_MRA_MESSAGE_MRAED.into(), U8(32, 0xc0)),
            (CM_MRA_SERVICE_TIMEOUT.into(), U8(33, 0xf8)),
            (CM_MRA_PRIVATE_DATA.into(), Mem(34, 222)),
        ]);
    }
}

#[cfg(test)]
mod accessors_match_the_reference {
    use super::*;

    #[test]
    fn every_field_reads_and_writes_like_the_byte_loop_and_bit_by_bit_references() {
        crate::field::reference::field("CM_MRA_LOCAL_COMM_ID", CM_MRA_LOCAL_COMM_ID);
        crate::field::reference::field("CM_MRA_REMOTE_COMM_ID", CM_MRA_REMOTE_COMM_ID);
        crate::field::reference::field("CM_MRA_MESSAGE_MRAED", CM_MRA_MESSAGE_MRAED);
        crate::field::reference::field("CM_MRA_SERVICE_TIMEOUT", CM_MRA_SERVICE_TIMEOUT);
        crate::field::reference::bytes("CM_MRA_PRIVATE_DATA", CM_MRA_PRIVATE_DATA);
    }
}
