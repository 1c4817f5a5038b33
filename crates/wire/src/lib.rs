//! CM MAD wire codec: the 24-byte MAD header and one module per CM message.
//!
//! Layouts follow the kernel's `include/rdma/ibta_vol1_c12.h` (IBTA Vol.1 chapter 12), as tabulated
//! in `kernel-cm-spec.md` §3.4. Every message is a whole 256-byte MAD; bytes a message does not
//! use are zero, as in the kernel's `kzalloc`ed send buffers.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::fmt;

pub mod apr;
pub mod drep;
pub mod dreq;
pub mod errno;
pub mod field;
pub mod lap;
mod message;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rng;
pub mod rtu;
pub mod sa;
pub mod sidr_rep;
pub mod sidr_req;
#[cfg(test)]
mod test_util;

pub use apr::Apr;
pub use drep::Drep;
pub use dreq::Dreq;
pub use lap::Lap;
pub use mra::Mra;
pub use rej::Rej;
pub use rep::Rep;
pub use req::{Req, ReqPath, TransportType};
pub use rtu::Rtu;
pub use sidr_rep::SidrRep;
pub use sidr_req::SidrReq;

/// Size of every CM MAD (`IB_MGMT_MAD_HDR` + `IB_MGMT_MAD_DATA`, ib_mad.h).
pub const MAD_SIZE: usize = 256;
/// Size of the common MAD header (`struct ib_mad_hdr`); CM data starts right after it.
pub const MAD_HDR_SIZE: usize = 24;
/// One CM MAD on the wire.
pub type Mad = [u8; MAD_SIZE];

/// `IB_MGMT_BASE_VERSION`.
pub const BASE_VERSION: u8 = 1;
/// `IB_MGMT_CLASS_CM`.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `IB_CM_CLASS_VERSION` ("IB specification 1.2", cm_msgs.h).
pub const CM_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_SEND`: the kernel CM sends every message with this method.
pub const METHOD_SEND: u8 = 0x03;
/// The GSI's QP (QP1), where every CM and SA MAD goes.
pub const GSI_QPN: u32 = 1;
/// `IB_QP1_QKEY`: the GSI's Q_Key.
pub const QP1_QKEY: u32 = 0x8001_0000;

/// CM attribute IDs (include/rdma/ib_cm.h, ib_mad.h).
pub mod attr {
    /// `IB_MGMT_CLASSPORTINFO_ATTR_ID`: ClassPortInfo, the class's capabilities.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// `CM_REQ_ATTR_ID`: REQ.
    pub const REQ: u16 = 0x0010;
    /// `CM_MRA_ATTR_ID`: MRA.
    pub const MRA: u16 = 0x0011;
    /// `CM_REJ_ATTR_ID`: REJ.
    pub const REJ: u16 = 0x0012;
    /// `CM_REP_ATTR_ID`: REP.
    pub const REP: u16 = 0x0013;
    /// `CM_RTU_ATTR_ID`: RTU.
    pub const RTU: u16 = 0x0014;
    /// `CM_DREQ_ATTR_ID`: DREQ.
    pub const DREQ: u16 = 0x0015;
    /// `CM_DREP_ATTR_ID`: DREP.
    pub const DREP: u16 = 0x0016;
    /// `CM_SIDR_REQ_ATTR_ID`: SIDR_REQ.
    pub const SIDR_REQ: u16 = 0x0017;
    /// `CM_SIDR_REP_ATTR_ID`: SIDR_REP.
    pub const SIDR_REP: u16 = 0x0018;
    /// `CM_LAP_ATTR_ID`: LAP.
    pub const LAP: u16 = 0x0019;
    /// `CM_APR_ATTR_ID`: APR.
    pub const APR: u16 = 0x001A;

    /// Short name of an attribute ID, for logs; `"unknown"` for anything the CM does not define.
    pub fn name(attr: u16) -> &'static str {
        match attr {
            CLASS_PORT_INFO => "ClassPortInfo",
            REQ => "REQ",
            MRA => "MRA",
            REJ => "REJ",
            REP => "REP",
            RTU => "RTU",
            DREQ => "DREQ",
            DREP => "DREP",
            SIDR_REQ => "SIDR_REQ",
            SIDR_REP => "SIDR_REP",
            LAP => "LAP",
            APR => "APR",
            _ => "unknown",
        }
    }
}

/// The header fields that vary between CM MADs; the rest are the constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadHeader {
    /// Transaction ID (MAD bytes 8..16).
    pub tid: u64,
    /// Attribute ID (bytes 16..18): which message, `attr`.
    pub attr_id: u16,
    /// Attribute modifier (bytes 20..24); REQ and REP carry ECE in it.
    pub attr_mod: u32,
}

/// Which message an MRA or REJ refers to (`enum cm_msg_response`, cm_msgs.h); 3 is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MsgResponse {
    /// The REQ (`CM_MSG_RESPONSE_REQ`).
    #[default]
    Req = 0,
    /// The REP (`CM_MSG_RESPONSE_REP`).
    Rep = 1,
    /// Any other message (`CM_MSG_RESPONSE_OTHER`), e.g. a LAP for an MRA.
    Other = 2,
}

impl MsgResponse {
    /// Decodes the 2-bit wire value; `field` names the field for the error.
    fn from_wire(field: &'static str, value: u32) -> Result<Self, DecodeError> {
        match value {
            0 => Ok(Self::Req),
            1 => Ok(Self::Rep),
            2 => Ok(Self::Other),
            _ => Err(DecodeError::FieldRange { field, value }),
        }
    }
}

/// Why a received buffer is not a CM MAD this codec accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer than `MAD_SIZE` bytes.
    Short {
        /// The buffer's length.
        len: usize,
    },
    /// The base version is not `BASE_VERSION`; holds the one received.
    BaseVersion(u8),
    /// The management class is not `MGMT_CLASS_CM`; holds the one received.
    Class(u8),
    /// The class version is not `CM_CLASS_VERSION`; holds the one received.
    ClassVersion(u8),
    /// The method is not `METHOD_SEND`; holds the one received.
    Method(u8),
    /// A decoded field holds a reserved or impossible value.
    FieldRange {
        /// The field's descriptor const, e.g. `"CM_REJ_MESSAGE_REJECTED"`.
        field: &'static str,
        /// The value received.
        value: u32,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short { len } => write!(f, "MAD too short: {len} bytes, need {MAD_SIZE}"),
            Self::BaseVersion(v) => {
                write!(f, "MAD base version {v:#04x}, expected {BASE_VERSION:#04x}")
            }
            Self::Class(v) => write!(
                f,
                "management class {v:#04x}, expected {MGMT_CLASS_CM:#04x} (CM)"
            ),
            Self::ClassVersion(v) => write!(f, "CM class version {v}, expected {CM_CLASS_VERSION}"),
            Self::Method(v) => write!(f, "MAD method {v:#04x}, expected {METHOD_SEND:#04x} (Send)"),
            Self::FieldRange { field, value } => write!(f, "{field} value {value} is out of range"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A zeroed MAD with the CM header filled in as `cm_format_mad_hdr()` / `cm_format_mad_ece_hdr()`
/// do: status and class-specific 0, TID/attribute ID/attribute modifier big-endian.
pub fn new_mad(attr_id: u16, tid: u64, attr_mod: u32) -> Mad {
    let mut mad = [0; MAD_SIZE];
    mad[0] = BASE_VERSION;
    mad[1] = MGMT_CLASS_CM;
    mad[2] = CM_CLASS_VERSION;
    mad[3] = METHOD_SEND;
    mad[8..16].copy_from_slice(&tid.to_be_bytes());
    mad[16..18].copy_from_slice(&attr_id.to_be_bytes());
    mad[20..24].copy_from_slice(&attr_mod.to_be_bytes());
    mad
}

/// Checks that `buf` is a CM Send MAD and returns its header and the first 256 bytes.
///
/// Longer buffers are accepted (receive buffers may carry trailing bytes); only the first
/// `MAD_SIZE` are used. Status and the attribute ID are not checked: like `cm_recv_handler`,
/// the caller dispatches on `attr_id` and drops what it does not know.
pub fn parse_header(buf: &[u8]) -> Result<(MadHeader, &Mad), DecodeError> {
    let mad: &Mad = buf
        .get(..MAD_SIZE)
        .and_then(|b| b.try_into().ok())
        .ok_or(DecodeError::Short { len: buf.len() })?;
    if mad[0] != BASE_VERSION {
        return Err(DecodeError::BaseVersion(mad[0]));
    }
    if mad[1] != MGMT_CLASS_CM {
        return Err(DecodeError::Class(mad[1]));
    }
    if mad[2] != CM_CLASS_VERSION {
        return Err(DecodeError::ClassVersion(mad[2]));
    }
    if mad[3] != METHOD_SEND {
        return Err(DecodeError::Method(mad[3]));
    }
    let header = MadHeader {
        tid: u64::from_be_bytes([
            mad[8], mad[9], mad[10], mad[11], mad[12], mad[13], mad[14], mad[15],
        ]),
        attr_id: u16::from_be_bytes([mad[16], mad[17]]),
        attr_mod: u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]),
    };
    Ok((header, mad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_mad_fills_header_like_cm_format_mad_hdr() {
        let mad = new_mad(attr::DREQ, 0x0000_0005_4d3c_2b1a, 0x0102_0304);
        let expect_hdr = [
            0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x05, 0x4d, 0x3c, 0x2b, 0x1a, 0x00, 0x15,
            0, 0, 0x01, 0x02, 0x03, 0x04,
        ];
        assert_eq!(mad[..MAD_HDR_SIZE], expect_hdr);
        assert!(mad[MAD_HDR_SIZE..].iter().all(|&b| b == 0));
    }

    #[test]
    fn parse_header_round_trips_new_mad_and_ignores_trailing_bytes() {
        let mut buf = new_mad(attr::REP, 0x1122_3344_5566_7788, 0xdead_beef).to_vec();
        buf.extend_from_slice(&[0xaa; 40]);
        let (hdr, mad) = parse_header(&buf).unwrap();
        let expect = MadHeader {
            tid: 0x1122_3344_5566_7788,
            attr_id: attr::REP,
            attr_mod: 0xdead_beef,
        };
        assert_eq!(hdr, expect);
        assert_eq!(mad[..], buf[..MAD_SIZE]);
    }

    #[test]
    fn parse_header_rejects_each_bad_header_field() {
        let good = new_mad(attr::DREQ, 1, 0);
        let cases = [
            (0, 0x02, DecodeError::BaseVersion(0x02)),
            (1, 0x04, DecodeError::Class(0x04)),
            (2, 0x01, DecodeError::ClassVersion(0x01)),
            (3, 0x83, DecodeError::Method(0x83)),
        ];
        for (at, bad, expect) in cases {
            let mut mad = good;
            mad[at] = bad;
            assert_eq!(parse_header(&mad).unwrap_err(), expect);
        }
    }

    #[test]
    fn parse_header_rejects_255_byte_buffer() {
        let mad = new_mad(attr::DREQ, 1, 0);
        assert_eq!(
            parse_header(&mad[..255]).unwrap_err(),
            DecodeError::Short { len: 255 }
        );
        assert_eq!(
            parse_header(&[]).unwrap_err(),
            DecodeError::Short { len: 0 }
        );
    }

    #[test]
    fn attr_names_cover_every_cm_attribute() {
        assert_eq!(attr::name(attr::DREQ), "DREQ");
        assert_eq!(attr::name(attr::APR), "APR");
        assert_eq!(attr::name(attr::CLASS_PORT_INFO), "ClassPortInfo");
        assert_eq!(attr::name(0x0020), "unknown");
    }

    #[test]
    fn decode_error_display_names_the_problem() {
        let e = DecodeError::FieldRange {
            field: "CM_REJ_MESSAGE_REJECTED",
            value: 3,
        };
        assert_eq!(
            e.to_string(),
            "CM_REJ_MESSAGE_REJECTED value 3 is out of range"
        );
        assert_eq!(
            DecodeError::Short { len: 255 }.to_string(),
            "MAD too short: 255 bytes, need 256"
        );
    }
}
