//! MRA, Message Receipt Acknowledgement (IBTA Vol.1 Table 107, `struct cm_mra_msg`).

use super::field::{Field, FieldBytes};
use super::{DecodeError, Mad, MsgResponse, attr, new_mad};

pub const CM_MRA_LOCAL_COMM_ID: Field = Field::new(0, 32);
pub const CM_MRA_REMOTE_COMM_ID: Field = Field::new(4, 32);
pub const CM_MRA_MESSAGE_MRAED: Field = Field::new(8, 2);
pub const CM_MRA_SERVICE_TIMEOUT: Field = Field::new(9, 5);
pub const CM_MRA_PRIVATE_DATA: FieldBytes<222> = FieldBytes::new(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MsgResponse,
    /// 5 bits, 4.096 µs * 2^value; K7.2 always sends 24.
    pub service_timeout: u8,
    pub private_data: [u8; 222],
}

impl Default for Mra {
    fn default() -> Self {
        Self {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_mraed: MsgResponse::Req,
            service_timeout: 0,
            private_data: [0; 222],
        }
    }
}

impl Mra {
    /// Encodes as `cm_format_mra()` does.
    pub fn encode(&self, tid: u64) -> Mad {
        let mut mad = new_mad(attr::MRA, tid, 0);
        CM_MRA_LOCAL_COMM_ID.set(&mut mad, self.local_comm_id);
        CM_MRA_REMOTE_COMM_ID.set(&mut mad, self.remote_comm_id);
        CM_MRA_MESSAGE_MRAED.set(&mut mad, self.message_mraed as u32);
        CM_MRA_SERVICE_TIMEOUT.set(&mut mad, self.service_timeout.into());
        CM_MRA_PRIVATE_DATA.set(&mut mad, &self.private_data);
        mad
    }

    /// Decodes the CM data of a MAD whose header `parse_header` already accepted.
    /// Fails only for the reserved "message MRAed" value 3.
    pub fn decode(mad: &Mad) -> Result<Self, DecodeError> {
        let mraed = CM_MRA_MESSAGE_MRAED.get(mad);
        Ok(Self {
            local_comm_id: CM_MRA_LOCAL_COMM_ID.get(mad),
            remote_comm_id: CM_MRA_REMOTE_COMM_ID.get(mad),
            message_mraed: MsgResponse::from_wire("CM_MRA_MESSAGE_MRAED", mraed)?,
            service_timeout: CM_MRA_SERVICE_TIMEOUT.get(mad) as u8,
            private_data: CM_MRA_PRIVATE_DATA.get(mad),
        })
    }
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
