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
//! how a value converts is the `WireValue` impl of its type (the
//! `conversions!` table below for integers and bools, byte arrays as they are; the enums
//! through their own `from_wire`, in `lib.rs` and `req.rs`, which refuses a
//! reserved value; `ReqPath` over its `PathFields`, in `req.rs`); a field's
//! spec can add a bound that decode checks before anything else, split one
//! value over several wire fields, or take it from the MAD header.
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
//!
//! A description that cannot be right does not build: a mistyped width or
//! type would otherwise make a codec that cuts bits off without a word, and
//! only a golden test that happens to use a large value would notice. Each
//! field's descriptor is a `const`, so `Field::new` and friends (field.rs)
//! already refuse a field outside its container or beyond the MAD; the
//! macro adds, as `const _: () = assert!(…)` items:
//!
//! - a field narrower than its type needs (an enum's largest discriminant)
//!   or wider than its type holds (a `u8` in 9 bits; a `bool` in more than
//!   one), by the `Widths` of the type's conversion;
//! - a `max N` that does not fit the field's width, or is its largest
//!   value and so refuses nothing;
//! - a `split` whose parts reach above the `u32`'s bit 31, hold the same
//!   bit twice, or leave a bit between 0 and the highest unheld.

use crate::field::{Field, Field64, FieldBytes};
use crate::{DecodeError, Mad, MsgResponse, ReqPath, TransportType};

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

/// The widths of wire field `D` that a type's conversion is right for: what
/// the checks `cm_message!` makes hold each one-field description to.
pub(crate) trait Widths<D> {
    /// Narrower, `encode` would cut off values the type holds (an enum's
    /// largest discriminant).
    const NARROWEST: u32;
    /// Wider, `decode` would cut off what the field holds (`raw as u8`) or
    /// fold it into fewer values (a `bool`'s `raw != 0`).
    const WIDEST: u32;
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
zero_is_default!(u8, u16, u32, u64, bool, MsgResponse, TransportType, ReqPath);

impl<const N: usize> Zero for [u8; N] {
    fn zero() -> Self {
        [0; N]
    }
}

/// The conversions that cannot fail: `put` turns the value into what the
/// descriptor's `set` takes, `take` turns what its `get` gives back into the
/// value, and `widths` are its `Widths`. An integer field may be narrower
/// than its type: `encode` drops the bits above the width, as the kernel's
/// `FIELD_PREP` does (a 24-bit QPN from a `u32`). Inlined, like `Field`'s
/// accessors: every descriptor is a const, so each field's conversion folds
/// into its loads and stores.
macro_rules! conversions {
    ($($value:ty => $desc:ty, widths $narrowest:literal..=$widest:literal:
        put |$v:ident| $put:expr, take |$raw:ident| $take:expr;)*) => {
        $(impl WireValue<$desc> for $value {
            #[inline(always)]
            fn put(&self, d: &$desc, mad: &mut Mad) {
                let $v = *self;
                d.set(mad, $put);
            }
            #[inline(always)]
            fn take(d: &$desc, _: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
                let $raw = d.get(mad);
                Ok($take)
            }
        }
        impl Widths<$desc> for $value {
            const NARROWEST: u32 = $narrowest;
            const WIDEST: u32 = $widest;
        })*
    };
}
conversions! {
    u32 => Field, widths 1..=32: put |v| v, take |raw| raw;
    u16 => Field, widths 1..=16: put |v| v.into(), take |raw| raw as u16;
    u8 => Field, widths 1..=8: put |v| v.into(), take |raw| raw as u8;
    // A flag: `true` is 1; any nonzero value decodes as `true`.
    bool => Field, widths 1..=1: put |v| v.into(), take |raw| raw != 0;
    u64 => Field64, widths 64..=64: put |v| v, take |raw| raw;
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

/// The type already ties the array's length to the field's.
impl<const N: usize> Widths<FieldBytes<N>> for [u8; N] {
    const NARROWEST: u32 = N as u32 * 8;
    const WIDEST: u32 = N as u32 * 8;
}

/// The enums (`MsgResponse`, `TransportType`), each with its largest
/// variant: their discriminant on the wire; decode is the enum's own
/// `from_wire`, which refuses a reserved value, so a field wider than the
/// largest discriminant needs loses nothing unseen.
macro_rules! enum_conversions {
    ($($value:ident: $largest:ident),*) => {
        $(impl WireValue<Field> for $value {
            #[inline(always)]
            fn put(&self, d: &Field, mad: &mut Mad) {
                d.set(mad, *self as u32);
            }
            #[inline(always)]
            fn take(d: &Field, name: &'static str, mad: &Mad) -> Result<Self, DecodeError> {
                <$value>::from_wire(name, d.get(mad))
            }
        }
        impl Widths<Field> for $value {
            const NARROWEST: u32 = u32::BITS - ($value::$largest as u32).leading_zeros();
            const WIDEST: u32 = 32;
        })*
    };
}
enum_conversions!(MsgResponse: Other, TransportType: Xrc);

/// A `u32` spread over `K` wire fields (REP's and SIDR_REP's vendor ID): each
/// field holds the value shifted right by its shift, and they are or-ed back
/// together shifted left.
pub(crate) struct Split<const K: usize>(pub(crate) [(Field, u32); K]);

impl<const K: usize> Split<K> {
    /// The bits of the value part `i` holds (none for a shift past the
    /// `u32`, which `reaches_above_bit_31` refuses).
    const fn part_bits(&self, i: usize) -> u64 {
        let (field, shift) = self.0[i];
        if shift >= 32 {
            return 0;
        }
        ((1 << field.width()) - 1) << shift
    }

    /// Some part holds bits above the `u32`'s bit 31: `decode` would lose
    /// them (or overflow its shift).
    pub(crate) const fn reaches_above_bit_31(&self) -> bool {
        let mut i = 0;
        while i < K {
            let (field, shift) = self.0[i];
            if shift as u64 + field.width() as u64 > 32 {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Two parts hold the same bit of the value.
    pub(crate) const fn parts_overlap(&self) -> bool {
        let (mut held, mut i) = (0, 0);
        while i < K {
            if held & self.part_bits(i) != 0 {
                return true;
            }
            held |= self.part_bits(i);
            i += 1;
        }
        false
    }

    /// A bit between 0 and the highest one held is held by no part.
    pub(crate) const fn leaves_a_gap(&self) -> bool {
        let (mut held, mut i) = (0u64, 0);
        while i < K {
            held |= self.part_bits(i);
            i += 1;
        }
        held & (held + 1) != 0
    }
}

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
///     /// decode's doc, after "Decodes the CM data of a MAD whose header
///     /// `parse_header` already accepted."
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

    // The compile-time checks of a field's description (the module doc's
    // list): a wrong one fails the build instead of cutting bits off.
    (@checks $msg:ident $field:ident $fty:ty;
        split $($(#[$pdoc:meta])* >> $shift:literal $c:ident: $t:ty = $v:expr),+ $(,)?) => {
        const _: () = {
            let split = $crate::message::Split([$(($c, $shift)),+]);
            assert!(!split.reaches_above_bit_31(), concat!(stringify!($msg), "::",
                stringify!($field), ": a split part holds bits above the u32's bit 31"));
            assert!(!split.parts_overlap(), concat!(stringify!($msg), "::",
                stringify!($field), ": two split parts hold the same bit"));
            assert!(!split.leaves_a_gap(), concat!(stringify!($msg), "::",
                stringify!($field), ": the split parts' shifts leave a bit unheld"));
        };
    };
    (@checks $msg:ident $field:ident $fty:ty; header attr_mod) => {};
    // A group's members are checked by their descriptors' constructors; the
    // types they convert to are the group's impl's business.
    (@checks $msg:ident $field:ident $fty:ty;
        $group:ident { $($member:ident => $c:ident: $t:ty = $v:expr),+ $(,)? }) => {};
    (@checks $msg:ident $field:ident $fty:ty; $c:ident: $t:ty = $v:expr $(, max $max:expr)?) => {
        const _: () = {
            assert!($c.width() >= <$fty as $crate::message::Widths<$t>>::NARROWEST,
                concat!(stringify!($c), ": narrower than ", stringify!($fty),
                    " needs (encode would cut values off)"));
            assert!($c.width() <= <$fty as $crate::message::Widths<$t>>::WIDEST,
                concat!(stringify!($c), ": wider than ", stringify!($fty),
                    " holds (decode would cut the field off)"));
            $(assert!($max < $c.max_value(), concat!(stringify!($c), ": `max ",
                stringify!($max), "` is not below the field's largest value"));)?
        };
    };

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
        $($crate::message::cm_message!(@checks $msg $field $fty; $($spec)*);)*

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

            /// Decodes the CM data of a MAD whose header `parse_header` already accepted.
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

    /// The generated `Default` of message `M` is what a zeroed MAD decodes
    /// to, and encodes back to one.
    fn default_is_the_zeroed_mad<M: Default + PartialEq + std::fmt::Debug>(
        attr_id: u16,
        decode: fn(&Mad) -> Result<M, DecodeError>,
        encode: fn(&M) -> Mad,
    ) {
        let zeroed = new_mad(attr_id, 9, 0);
        let name = attr::name(attr_id);
        assert_eq!(decode(&zeroed), Ok(M::default()), "{name}: decode");
        assert_eq!(encode(&M::default()), zeroed, "{name}: encode");
    }

    /// No field's zero value is anything but zero bits.
    #[test]
    fn default_is_the_zeroed_mad_for_every_message() {
        default_is_the_zeroed_mad(attr::REQ, Req::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::MRA, Mra::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::REJ, Rej::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::REP, Rep::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::RTU, Rtu::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::DREQ, Dreq::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::DREP, Drep::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::LAP, Lap::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::APR, Apr::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::SIDR_REQ, SidrReq::decode, |m| m.encode(9));
        default_is_the_zeroed_mad(attr::SIDR_REP, SidrRep::decode, |m| m.encode(9, 0));
    }

    /// A `max` bound is checked before any field is converted, as the
    /// hand-written decoders did: a REJ whose ARI length and "message
    /// rejected" are both out of range is refused for the length; at the
    /// bound only the reserved 3 is left to refuse.
    #[test]
    fn bounds_are_checked_before_the_conversions_that_can_fail() {
        use crate::rej::{CM_REJ_MESSAGE_REJECTED, CM_REJ_REJECTED_INFO_LENGTH};
        let range = |field, value| Err(DecodeError::FieldRange { field, value });
        let mut mad = Rej::default().encode(1);
        CM_REJ_MESSAGE_REJECTED.set(&mut mad, 3);
        CM_REJ_REJECTED_INFO_LENGTH.set(&mut mad, 73);
        assert_eq!(Rej::decode(&mad), range("CM_REJ_REJECTED_INFO_LENGTH", 73));
        CM_REJ_REJECTED_INFO_LENGTH.set(&mut mad, 72);
        assert_eq!(Rej::decode(&mad), range("CM_REJ_MESSAGE_REJECTED", 3));
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

    /// What the generated split checks refuse: REP's and SIDR_REP's layouts
    /// pass; an overlap, a gap and a part above bit 31 are each caught.
    #[test]
    fn split_checks_refuse_overlaps_gaps_and_bits_above_31() {
        let (h8, m8, l8, h16) = (
            Field::new(15, 8),
            Field::new(19, 8),
            Field::new(23, 8),
            Field::new(6, 16),
        );
        let faults = |s: &Split<2>| {
            (
                s.reaches_above_bit_31(),
                s.parts_overlap(),
                s.leaves_a_gap(),
            )
        };
        let rep = Split([(h8, 16), (m8, 8), (l8, 0)]);
        assert_eq!(
            (
                rep.reaches_above_bit_31(),
                rep.parts_overlap(),
                rep.leaves_a_gap()
            ),
            (false, false, false)
        );
        assert_eq!(faults(&Split([(h16, 8), (l8, 0)])), (false, false, false));
        assert_eq!(faults(&Split([(h16, 4), (l8, 0)])), (false, true, false));
        assert_eq!(faults(&Split([(h16, 16), (l8, 0)])), (false, false, true));
        assert!(faults(&Split([(h16, 24), (l8, 0)])).0);
        assert!(faults(&Split([(h16, 40), (l8, 0)])).0);
    }

    /// An enum's narrowest field is what its largest discriminant needs.
    #[test]
    fn enums_need_the_bits_of_their_largest_discriminant() {
        assert_eq!(<MsgResponse as Widths<Field>>::NARROWEST, 2);
        assert_eq!(<TransportType as Widths<Field>>::NARROWEST, 2);
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
