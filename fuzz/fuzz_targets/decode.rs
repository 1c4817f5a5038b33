//! Target (a): the CM MAD codec.
//!
//! `parse_header` on the raw input (any length), then every message decoder on
//! the input as one 256-byte MAD (zero-padded or cut). Properties checked:
//!
//! - nothing panics, and every `DecodeError` formats;
//! - `parse_header` accepts exactly the buffers of at least 256 bytes whose
//!   first four bytes are a CM Send header, and reports the header's TID,
//!   attribute ID and modifier as they are on the wire;
//! - for every decoder that accepts the MAD: `decode(encode(x)) == x`, the
//!   encoded MAD has a valid CM header with the message's attribute ID (and
//!   the TID it was given), and re-encoding is stable
//!   (`encode(decode(encode(x))) == encode(x)`);
//! - decoding only drops bits: the encoded MAD's bytes are the input's bytes
//!   with some bits cleared (reserved bits, the header's status and
//!   class-specific fields), never set.
#![no_main]

use ib_cm::wire::{
    self, BASE_VERSION, CM_CLASS_VERSION, DecodeError, MAD_HDR_SIZE, MAD_SIZE, METHOD_SEND,
    MGMT_CLASS_CM, Mad, attr,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    check_parse_header(data);
    let mut mad: Mad = [0; MAD_SIZE];
    let n = data.len().min(MAD_SIZE);
    mad[..n].copy_from_slice(&data[..n]);
    let tid = u64::from_be_bytes(mad[8..16].try_into().unwrap());

    round_trip(&mad, tid, attr::REQ, wire::Req::decode, |x, t| x.encode(t));
    round_trip(&mad, tid, attr::MRA, wire::Mra::decode, |x, t| x.encode(t));
    round_trip(&mad, tid, attr::REJ, wire::Rej::decode, |x, t| x.encode(t));
    round_trip(&mad, tid, attr::REP, wire::Rep::decode, |x, t| x.encode(t));
    round_trip(&mad, tid, attr::RTU, wire::Rtu::decode, |x, t| x.encode(t));
    round_trip(&mad, tid, attr::DREQ, wire::Dreq::decode, |x, t| {
        x.encode(t)
    });
    round_trip(&mad, tid, attr::DREP, wire::Drep::decode, |x, t| {
        x.encode(t)
    });
    round_trip(&mad, tid, attr::SIDR_REQ, wire::SidrReq::decode, |x, t| {
        x.encode(t)
    });
    // SIDR_REP carries the ECE attribute modifier as an encode argument.
    let attr_mod = u32::from_be_bytes(mad[20..24].try_into().unwrap());
    let sidr_rep_encode = |x: &wire::SidrRep, t| x.encode(t, attr_mod);
    round_trip(
        &mad,
        tid,
        attr::SIDR_REP,
        wire::SidrRep::decode,
        sidr_rep_encode,
    );
    let _ = attr::name(u16::from_be_bytes([mad[16], mad[17]]));
});

fn check_parse_header(data: &[u8]) {
    let valid = data.len() >= MAD_SIZE
        && data[0] == BASE_VERSION
        && data[1] == MGMT_CLASS_CM
        && data[2] == CM_CLASS_VERSION
        && data[3] == METHOD_SEND;
    match wire::parse_header(data) {
        Ok((header, mad)) => {
            assert!(
                valid,
                "parse_header accepted a bad header: {:02x?}",
                &data[..4]
            );
            assert_eq!(&mad[..], &data[..MAD_SIZE]);
            assert_eq!(
                header.tid,
                u64::from_be_bytes(data[8..16].try_into().unwrap())
            );
            assert_eq!(header.attr_id, u16::from_be_bytes([data[16], data[17]]));
            assert_eq!(
                header.attr_mod,
                u32::from_be_bytes(data[20..24].try_into().unwrap())
            );
        }
        Err(e) => {
            assert!(!valid, "parse_header rejected a valid header: {e:?}");
            let _ = e.to_string();
            if data.len() < MAD_SIZE {
                assert_eq!(e, DecodeError::Short { len: data.len() });
            }
        }
    }
}

/// Checks the decode/encode properties for one message type.
fn round_trip<T: PartialEq + std::fmt::Debug>(
    mad: &Mad,
    tid: u64,
    attr_id: u16,
    decode: fn(&Mad) -> Result<T, DecodeError>,
    encode: impl Fn(&T, u64) -> Mad,
) {
    let x = match decode(mad) {
        Ok(x) => x,
        Err(e) => {
            let _ = e.to_string();
            assert!(
                matches!(e, DecodeError::FieldRange { .. }),
                "{}: a body decoder failed with {e:?}",
                attr::name(attr_id)
            );
            return;
        }
    };
    let encoded = encode(&x, tid);
    let (header, _) = wire::parse_header(&encoded).unwrap_or_else(|e| {
        panic!(
            "{}: encode made a MAD parse_header rejects: {e}",
            attr::name(attr_id)
        )
    });
    assert_eq!(
        header.attr_id,
        attr_id,
        "{}: wrong attribute ID",
        attr::name(attr_id)
    );
    assert_eq!(header.tid, tid, "{}: TID not kept", attr::name(attr_id));
    let again = decode(&encoded).unwrap_or_else(|e| {
        panic!(
            "{}: decode(encode(x)) failed: {e:?}\nx = {x:?}",
            attr::name(attr_id)
        )
    });
    assert_eq!(again, x, "{}: decode(encode(x)) != x", attr::name(attr_id));
    assert_eq!(
        encode(&again, tid)[..],
        encoded[..],
        "{}: encoding is not stable",
        attr::name(attr_id)
    );
    // Decoding keeps or drops each bit, never invents one: every set bit of
    // the encoded body was set in the input (the header's fixed bytes and
    // attribute ID are the encoder's own).
    for i in MAD_HDR_SIZE..MAD_SIZE {
        assert_eq!(
            encoded[i] & !mad[i],
            0,
            "{}: byte {i} of the re-encoded MAD has bits the input had not \
             (input {:#04x}, encoded {:#04x})",
            attr::name(attr_id),
            mad[i],
            encoded[i]
        );
    }
    // Header: TID and (for REQ/REP, which carry the ECE attribute modifier)
    // the modifier come from the input; everything else is the constant header.
    assert_eq!(encoded[8..16], mad[8..16]);
    if matches!(attr_id, attr::REQ | attr::REP | attr::SIDR_REP) {
        assert_eq!(
            encoded[20..24],
            mad[20..24],
            "{}: attr_mod lost",
            attr::name(attr_id)
        );
    }
}
