//! One declarative description per CM message, and the code made from it.
//!
//! A message module describes its message once, in a `cm_message!` table: the
//! struct's name, its attribute ID and IBTA table, and for every field its
//! name, Rust type, doc comment and where it sits on the wire (the
//! `Field` / `Field64` / `FieldBytes` descriptor, under the kernel's macro
//! name). The macro makes the descriptor consts, the struct, its `Default`
//! (every field as a zeroed MAD holds it) and `encode` / `decode`.
//!
//! What is not one descriptor per field stays explicit, beside the table:
//! how a value converts is the `WireValue` impl of its type (bools, the
//! enums, whose decode fails on a reserved value, and `ReqPath` over its
//! `PathFields`, in `req.rs`); a field's spec can add a bound that decode
//! checks before anything else, split one value over several wire fields, or
//! take it from the MAD header.
//!
//! A field's spec, between the braces after its type, is one of:
//!
//! - `CM_X: Field = Field::new(off, width)`: one wire field, declared as the
//!   public const `CM_X`; `, max N` after it makes decode refuse a value above
//!   `N` (with `DecodeError::FieldRange` naming `CM_X`) before any other field
//!   is converted.
//! - `split >> 16 CM_X_H: Field = …, >> 0 CM_X_L: Field = …`: a `u32` spread
//!   over several wire fields, each holding the value shifted right as given.
//! - `Group { member => CM_X: Field = …, … }`: a nested struct (a `ReqPath`)
//!   whose members sit in the consts given, collected in a `Group` of
//!   descriptors (`PathFields`).
//! - `header attr_mod`: the MAD header's attribute modifier (ECE).

use crate::field::{Field, Field64, FieldBytes};
use crate::{DecodeError, Mad, MsgResponse};

/// How a value of a message struct's field goes into and comes out of its
/// wire descriptor `D`: the conversion the generated `encode` and `decode`
/// apply to the field.
pub(crate) trait WireValue<D>: Sized {
    /// Writes `self` through `d`; bits beyond the field's width are dropped.
    fn put(&self, d: &D, mad: &mut Mad);
    /// Reads the value through `d`; `name`, the descriptor's const name, is
    /// what a `DecodeError` for a reserved value names.
    fn take(d: &D, name: &'static str, mad: &Mad) -> Result<Self, DecodeError>;
}

/// The value a field has in a zeroed MAD: what the generated `Default` gives
/// it (`[0; N]` where an array has no `Default`).
pub(crate) trait Zero {
    /// The zero value.
    fn zero() -> Self;
}

macro_rules! zero_is_default {
    ($($t:ty),*) => {
        $(impl Zero for $t {
            fn zero() -> Self {
                Self::default()
            }
        })*
    };
}
zero_is_default!(u8, u16, u32, u64, bool, MsgResponse);

impl<const N: usize> Zero for [u8; N] {
    fn zero() -> Self {
        [0; N]
    }
}

// Inlined, like `Field`'s accessors: every descriptor is a const, so each
// field's conversion folds into its loads and stores.
impl WireValue<Field> for u32 {
    #[inline(always)]
    fn put(&self, d: &Field, mad: &mut Mad) {
        d.set(mad, *self);
    }
    #[inline(always)]
    fn take(d: &Field, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.get(mad))
    }
}

impl WireValue<Field> for u16 {
    #[inline(always)]
    fn put(&self, d: &Field, mad: &mut Mad) {
        d.set(mad, (*self).into());
    }
    #[inline(always)]
    fn take(d: &Field, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.get(mad) as u16)
    }
}

impl WireValue<Field> for u8 {
    #[inline(always)]
    fn put(&self, d: &Field, mad: &mut Mad) {
        d.set(mad, (*self).into());
    }
    #[inline(always)]
    fn take(d: &Field, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.get(mad) as u8)
    }
}

/// A one-bit flag: `true` is 1; any nonzero value decodes as `true`.
impl WireValue<Field> for bool {
    #[inline(always)]
    fn put(&self, d: &Field, mad: &mut Mad) {
        d.set(mad, (*self).into());
    }
    #[inline(always)]
    fn take(d: &Field, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.get(mad) != 0)
    }
}

impl WireValue<Field64> for u64 {
    #[inline(always)]
    fn put(&self, d: &Field64, mad: &mut Mad) {
        d.set(mad, *self);
    }
    #[inline(always)]
    fn take(d: &Field64, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.get(mad))
    }
}

impl<const N: usize> WireValue<FieldBytes<N>> for [u8; N] {
    #[inline(always)]
    fn put(&self, d: &FieldBytes<N>, mad: &mut Mad) {
        d.set(mad, self);
    }
    #[inline(always)]
    fn take(d: &FieldBytes<N>, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.get(mad))
    }
}

/// The 2-bit "message MRAed / rejected" field; decode fails for the reserved 3.
impl WireValue<Field> for MsgResponse {
    #[inline(always)]
    fn put(&self, d: &Field, mad: &mut Mad) {
        d.set(mad, *self as u32);
    }
    #[inline(always)]
    fn take(d: &Field, name: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        MsgResponse::from_wire(name, d.get(mad))
    }
}

/// A `u32` spread over `K` wire fields (REP's and SIDR_REP's vendor ID): each
/// field holds the value shifted right by its shift, and they are or-ed back
/// together shifted left.
pub(crate) struct Split<const K: usize>(pub(crate) [(Field, u32); K]);

impl<const K: usize> WireValue<Split<K>> for u32 {
    #[inline(always)]
    fn put(&self, d: &Split<K>, mad: &mut Mad) {
        for (field, shift) in &d.0 {
            field.set(mad, *self >> shift);
        }
    }
    #[inline(always)]
    fn take(d: &Split<K>, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(d.0
            .iter()
            .fold(0, |value, (field, shift)| value | field.get(mad) << shift))
    }
}

/// The MAD header's attribute modifier, big-endian at MAD bytes 20..24: where
/// a REQ or REP carries `ece.attr_mod` (`cm_format_mad_ece_hdr`).
pub(crate) struct AttrMod;

impl WireValue<AttrMod> for u32 {
    #[inline(always)]
    fn put(&self, _: &AttrMod, mad: &mut Mad) {
        mad[20..24].copy_from_slice(&self.to_be_bytes());
    }
    #[inline(always)]
    fn take(_: &AttrMod, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
        Ok(u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]))
    }
}

/// Makes a CM message's descriptor consts, struct, `Default`, `encode` and
/// `decode` from its one description (the module doc above gives the specs).
///
/// ```text
/// cm_message! {
///     /// struct doc
///     pub struct Dreq: attr::DREQ, Table 112 {
///         /// field doc (also the const's)
///         remote_qpn: u32 { CM_DREQ_REMOTE_QPN_EECN: Field = Field::new(8, 24) },
///         …
///     }
///     /// encode's doc
///     pub fn encode(&self, tid: u64) -> Mad;   // or (&self, tid: u64, attr_mod: u32)
///     /// decode's doc
///     pub fn decode(mad: &Mad) -> Result<Self, DecodeError>;
/// }
/// ```
macro_rules! cm_message {
    // The public consts a field's spec declares, documented from the field.
    (@consts $msg:ident $table:literal $field:ident $fty:ty; [$(#[$doc:meta])*]
        split $($(#[$pdoc:meta])* >> $shift:literal $c:ident: $t:ty = $v:expr),+ $(,)?) => {
        $(
            $(#[$pdoc])*
            #[doc = ""]
            #[doc = concat!("Holds [`", stringify!($msg), "::", stringify!($field), "`] `>> ",
                $shift, "` (IBTA Vol.1 Table ", $table, ").")]
            pub const $c: $t = $v;
        )+
    };
    (@consts $msg:ident $table:literal $field:ident $fty:ty; [$(#[$doc:meta])*]
        header attr_mod) => {};
    (@consts $msg:ident $table:literal $field:ident $fty:ty; [$(#[$doc:meta])*]
        $group:ident { $($member:ident => $c:ident: $t:ty = $v:expr),+ $(,)? }) => {
        $(
            #[doc = concat!("[`", stringify!($fty), "::", stringify!($member), "`] of [`",
                stringify!($msg), "::", stringify!($field), "`] (IBTA Vol.1 Table ", $table, ").")]
            pub const $c: $t = $v;
        )+
    };
    (@consts $msg:ident $table:literal $field:ident $fty:ty; [$(#[$doc:meta])*]
        $c:ident: $t:ty = $v:expr $(, max $max:expr)?) => {
        $(#[$doc])*
        #[doc = ""]
        #[doc = concat!("The wire field of [`", stringify!($msg), "::", stringify!($field),
            "`] (IBTA Vol.1 Table ", $table, ").")]
        pub const $c: $t = $v;
    };

    // The line a struct field's doc gets: where it is on the wire.
    (@field_doc split $($(#[$pdoc:meta])* >> $shift:literal $c:ident: $t:ty = $v:expr),+ $(,)?) => {
        concat!("Wire fields:\n" $(, "\n- [`", stringify!($c), "`]: the value `>> ", $shift, "`")+)
    };
    (@field_doc header attr_mod) => {
        "In the MAD header: its attribute modifier."
    };
    (@field_doc $group:ident { $($member:ident => $c:ident: $t:ty = $v:expr),+ $(,)? }) => {
        concat!("Wire fields:\n" $(, "\n- `", stringify!($member), "`: [`", stringify!($c), "`]")+)
    };
    (@field_doc $c:ident: $t:ty = $v:expr $(, max $max:expr)?) => {
        concat!("Wire field: [`", stringify!($c), "`].")
    };

    // The descriptor `WireValue` puts and takes a field's value through.
    (@desc split $($(#[$pdoc:meta])* >> $shift:literal $c:ident: $t:ty = $v:expr),+ $(,)?) => {
        $crate::message::Split([$(($c, $shift)),+])
    };
    (@desc header attr_mod) => {
        $crate::message::AttrMod
    };
    (@desc $group:ident { $($member:ident => $c:ident: $t:ty = $v:expr),+ $(,)? }) => {
        $group { $($member: $c),+ }
    };
    (@desc $c:ident: $t:ty = $v:expr $(, max $max:expr)?) => {
        $c
    };

    // The name a `DecodeError` from the field's conversion gives.
    (@name $field:ident; $c:ident: $t:ty = $v:expr $(, max $max:expr)?) => {
        stringify!($c)
    };
    (@name $field:ident; $($spec:tt)*) => {
        stringify!($field)
    };

    // The bound decode checks before converting any field.
    (@check $mad:ident; $c:ident: $t:ty = $v:expr, max $max:expr) => {
        let value = $c.get($mad);
        if value > $max {
            return Err($crate::DecodeError::FieldRange { field: stringify!($c), value });
        }
    };
    (@check $mad:ident; $($spec:tt)*) => {};

    (@attr_mod) => { 0 };
    (@attr_mod $attr_mod:ident) => { $attr_mod };

    (
        $(#[$sdoc:meta])*
        pub struct $msg:ident: $attr:path, Table $table:literal {
            $($(#[$fdoc:meta])* $field:ident: $fty:ty { $($spec:tt)* }),* $(,)?
        }
        $(#[$edoc:meta])*
        pub fn encode(&self, $tid:ident: u64 $(, $attr_mod:ident: u32)?) -> $encoded:ty;
        $(#[$ddoc:meta])*
        pub fn decode($mad:ident: &$input:ty) -> Result<Self, $error:ty>;
    ) => {
        $($crate::message::cm_message!(@consts $msg $table $field $fty; [$(#[$fdoc])*] $($spec)*);)*

        $(#[$sdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $msg {
            $(
                $(#[$fdoc])*
                #[doc = ""]
                #[doc = $crate::message::cm_message!(@field_doc $($spec)*)]
                pub $field: $fty,
            )*
        }

        /// Every field as a zeroed MAD holds it.
        impl Default for $msg {
            fn default() -> Self {
                Self {
                    $($field: $crate::message::Zero::zero(),)*
                }
            }
        }

        impl $msg {
            $(#[$edoc])*
            pub fn encode(&self, $tid: u64 $(, $attr_mod: u32)?) -> $encoded {
                let mut mad = $crate::new_mad(
                    $attr,
                    $tid,
                    $crate::message::cm_message!(@attr_mod $($attr_mod)?),
                );
                $(
                    $crate::message::WireValue::put(
                        &self.$field,
                        &$crate::message::cm_message!(@desc $($spec)*),
                        &mut mad,
                    );
                )*
                mad
            }

            $(#[$ddoc])*
            pub fn decode($mad: &$input) -> Result<Self, $error> {
                $($crate::message::cm_message!(@check $mad; $($spec)*);)*
                Ok(Self {
                    $(
                        $field: $crate::message::WireValue::take(
                            &$crate::message::cm_message!(@desc $($spec)*),
                            $crate::message::cm_message!(@name $field; $($spec)*),
                            $mad,
                        )?,
                    )*
                })
            }
        }
    };
}
pub(crate) use cm_message;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Apr, Drep, Dreq, Lap, Mra, Rej, Rep, Req, Rtu, SidrRep, SidrReq, attr, new_mad};

    /// The generated `Default` is what a zeroed MAD decodes to, and encodes
    /// back to one: no field's zero value is anything but zero bits.
    #[test]
    fn default_is_the_zeroed_mad_for_every_message() {
        let zeroed = |attr_id| new_mad(attr_id, 9, 0);
        assert_eq!(Req::decode(&zeroed(attr::REQ)), Ok(Req::default()));
        assert_eq!(Req::default().encode(9), zeroed(attr::REQ));
        assert_eq!(Mra::decode(&zeroed(attr::MRA)), Ok(Mra::default()));
        assert_eq!(Mra::default().encode(9), zeroed(attr::MRA));
        assert_eq!(Rej::decode(&zeroed(attr::REJ)), Ok(Rej::default()));
        assert_eq!(Rej::default().encode(9), zeroed(attr::REJ));
        assert_eq!(Rep::decode(&zeroed(attr::REP)), Ok(Rep::default()));
        assert_eq!(Rep::default().encode(9), zeroed(attr::REP));
        assert_eq!(Rtu::decode(&zeroed(attr::RTU)), Ok(Rtu::default()));
        assert_eq!(Rtu::default().encode(9), zeroed(attr::RTU));
        assert_eq!(Dreq::decode(&zeroed(attr::DREQ)), Ok(Dreq::default()));
        assert_eq!(Dreq::default().encode(9), zeroed(attr::DREQ));
        assert_eq!(Drep::decode(&zeroed(attr::DREP)), Ok(Drep::default()));
        assert_eq!(Drep::default().encode(9), zeroed(attr::DREP));
        assert_eq!(Lap::decode(&zeroed(attr::LAP)), Ok(Lap::default()));
        assert_eq!(Lap::default().encode(9), zeroed(attr::LAP));
        assert_eq!(Apr::decode(&zeroed(attr::APR)), Ok(Apr::default()));
        assert_eq!(Apr::default().encode(9), zeroed(attr::APR));
        let sidr_req = zeroed(attr::SIDR_REQ);
        assert_eq!(SidrReq::decode(&sidr_req), Ok(SidrReq::default()));
        assert_eq!(SidrReq::default().encode(9), sidr_req);
        let sidr_rep = zeroed(attr::SIDR_REP);
        assert_eq!(SidrRep::decode(&sidr_rep), Ok(SidrRep::default()));
        assert_eq!(SidrRep::default().encode(9, 0), sidr_rep);
    }

    /// A `max` bound is checked before any field is converted, as the
    /// hand-written decoders did: a REJ whose ARI length and "message
    /// rejected" are both out of range is refused for the length.
    #[test]
    fn bounds_are_checked_before_the_conversions_that_can_fail() {
        let mut mad = Rej::default().encode(1);
        crate::rej::CM_REJ_MESSAGE_REJECTED.set(&mut mad, 3);
        crate::rej::CM_REJ_REJECTED_INFO_LENGTH.set(&mut mad, 73);
        let err = DecodeError::FieldRange {
            field: "CM_REJ_REJECTED_INFO_LENGTH",
            value: 73,
        };
        assert_eq!(Rej::decode(&mad), Err(err));
        // At the bound it decodes; only the reserved 3 is left to refuse.
        crate::rej::CM_REJ_REJECTED_INFO_LENGTH.set(&mut mad, 72);
        let err = DecodeError::FieldRange {
            field: "CM_REJ_MESSAGE_REJECTED",
            value: 3,
        };
        assert_eq!(Rej::decode(&mad), Err(err));
    }

    /// A split value puts each part through its own field and ors them back.
    #[test]
    fn split_spreads_the_value_over_its_fields_and_back() {
        const HIGH: Field = Field::new(15, 8);
        const LOW: Field = Field::new(20, 16);
        let split = Split([(HIGH, 16), (LOW, 0)]);
        let mut mad = [0; crate::MAD_SIZE];
        0x00ab_cdefu32.put(&split, &mut mad);
        assert_eq!((HIGH.get(&mad), LOW.get(&mad)), (0xab, 0xcdef));
        assert_eq!(u32::take(&split, "split", &mad), Ok(0x00ab_cdef));
    }

    /// The attribute modifier sits big-endian in MAD bytes 20..24, where
    /// `new_mad` puts it.
    #[test]
    fn attr_mod_is_the_header_field_new_mad_writes() {
        let mad = new_mad(attr::REQ, 1, 0x0102_0304);
        assert_eq!(u32::take(&AttrMod, "attr_mod", &mad), Ok(0x0102_0304));
        let mut zeroed = new_mad(attr::REQ, 1, 0);
        0x0102_0304u32.put(&AttrMod, &mut zeroed);
        assert_eq!(zeroed, mad);
    }
}
