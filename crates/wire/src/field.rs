//! Field descriptors mirroring the kernel's `CM_FIELD*_LOC` macros (ibta_vol1_c12.h, iba.h).
//!
//! Offsets are CM-data byte offsets as in the IBTA tables; the 24-byte MAD header is added here,
//! exactly as `CM_FIELD*_LOC` adds `sizeof(struct ib_mad_hdr)`. A field is read and written through
//! the same big-endian container the kernel uses, so `set` can never touch a neighbouring field.

use std::ops::Range;

use super::{MAD_HDR_SIZE, MAD_SIZE, Mad};

/// A field of 1..=32 bits inside one big-endian 8-, 16- or 32-bit container.
///
/// The container follows the kernel's choice by width: `CM_FIELD8_LOC` / `CM_FIELD_BLOC` for up to
/// 8 bits, `CM_FIELD16_LOC` for up to 16, `CM_FIELD32_LOC` otherwise. The container is aligned to its
/// size (`off & ~1`, `off & ~3`) and the field starts `(off % size) * 8 + bit` bits below its MSB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    cm_offset: usize,
    /// First bit inside the byte at `cm_offset`, IBTA numbering (0 = MSB); only `bits` sets it.
    bit: u32,
    width: u32,
}

impl Field {
    /// `CM_FIELD8_LOC` / `CM_FIELD16_LOC` / `CM_FIELD32_LOC(struct, cm_offset, width)`.
    pub const fn new(cm_offset: usize, width: u32) -> Self {
        Self::bits(cm_offset, 0, width)
    }

    /// `CM_FIELD_BLOC(struct, cm_offset, bit, width)`: a sub-byte field starting at IBTA bit `bit`.
    pub const fn bits(cm_offset: usize, bit: u32, width: u32) -> Self {
        let field = Self {
            cm_offset,
            bit,
            width,
        };
        // Evaluated at compile time for the `const` tables, so a typo there fails the build.
        assert!(width >= 1 && width <= 32, "field width must be 1..=32");
        assert!(
            bit == 0 || bit + width <= 8,
            "a bit-offset field must stay in its byte"
        );
        assert!(
            field.first_bit() + width <= field.size() as u32 * 8,
            "field overflows its container"
        );
        assert!(
            field.mad_offset() + field.size() <= MAD_SIZE,
            "field beyond the MAD"
        );
        field
    }

    /// Container size in bytes, chosen by width as the kernel's `CM_FIELD{8,16,32}_LOC` are.
    pub const fn size(&self) -> usize {
        match self.width {
            0..=8 => 1,
            9..=16 => 2,
            _ => 4,
        }
    }

    /// MAD offset of the (aligned) container.
    pub const fn mad_offset(&self) -> usize {
        MAD_HDR_SIZE + (self.cm_offset & !(self.size() - 1))
    }

    /// The field's width in bits.
    pub const fn width(&self) -> u32 {
        self.width
    }

    /// The largest value the field holds (all `width` bits set).
    pub const fn max_value(&self) -> u32 {
        u32::MAX >> (32 - self.width)
    }

    /// The field's bits within the container value, as the kernel's `GENMASK(...)`.
    pub const fn mask(&self) -> u32 {
        (u32::MAX >> (32 - self.width)) << self.shift()
    }

    /// Reads the field (host order, right-aligned).
    ///
    /// Inlined: every field is a `const`, so a REQ's forty `set`s fold into
    /// a few loads and stores (out of line they were a tenth of the worker's
    /// time in `ibcm-loopbench -w 1`).
    #[inline(always)]
    pub fn get(&self, mad: &Mad) -> u32 {
        (self.container(mad) & self.mask()) >> self.shift()
    }

    /// Writes the low `width` bits of `value`; higher bits are dropped (like the kernel's
    /// `FIELD_PREP`) and the container's other bits are preserved.
    #[inline(always)]
    pub fn set(&self, mad: &mut Mad, value: u32) {
        let word = (self.container(mad) & !self.mask()) | ((value << self.shift()) & self.mask());
        let at = self.mad_offset();
        match self.size() {
            1 => mad[at] = word as u8,
            2 => mad[at..at + 2].copy_from_slice(&(word as u16).to_be_bytes()),
            _ => mad[at..at + 4].copy_from_slice(&word.to_be_bytes()),
        }
    }

    /// Bit position of the field's MSB counted from the container's MSB.
    const fn first_bit(&self) -> u32 {
        (self.cm_offset % self.size()) as u32 * 8 + self.bit
    }

    const fn shift(&self) -> u32 {
        self.size() as u32 * 8 - self.first_bit() - self.width
    }

    /// The big-endian container as a number.
    #[inline(always)]
    fn container(&self, mad: &Mad) -> u32 {
        let at = self.mad_offset();
        match self.size() {
            1 => u32::from(mad[at]),
            2 => u32::from(u16::from_be_bytes([mad[at], mad[at + 1]])),
            _ => u32::from_be_bytes([mad[at], mad[at + 1], mad[at + 2], mad[at + 3]]),
        }
    }
}

/// `CM_FIELD64_LOC`: a big-endian u64 at a 4-byte-aligned CM offset (read unaligned by the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field64 {
    cm_offset: usize,
}

impl Field64 {
    /// `CM_FIELD64_LOC(struct, cm_offset, 64)`; the offset must be 4-byte aligned.
    pub const fn new(cm_offset: usize) -> Self {
        assert!(
            cm_offset & 3 == 0,
            "IBA_FIELD64_LOC needs a 4-byte-aligned offset"
        );
        assert!(
            MAD_HDR_SIZE + cm_offset + 8 <= MAD_SIZE,
            "field beyond the MAD"
        );
        Self { cm_offset }
    }

    /// MAD offset of the field's first byte.
    pub const fn mad_offset(&self) -> usize {
        MAD_HDR_SIZE + self.cm_offset
    }

    /// The field's width in bits: 64.
    pub const fn width(&self) -> u32 {
        64
    }

    /// Reads the field (host order).
    #[inline(always)]
    pub fn get(&self, mad: &Mad) -> u64 {
        let at = self.mad_offset();
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&mad[at..at + 8]);
        u64::from_be_bytes(bytes)
    }

    /// Writes the field, big-endian.
    #[inline(always)]
    pub fn set(&self, mad: &mut Mad, value: u64) {
        let at = self.mad_offset();
        mad[at..at + 8].copy_from_slice(&value.to_be_bytes());
    }
}

/// `CM_FIELD_MLOC`: `N` raw bytes (GIDs, ARI, private data), copied verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldBytes<const N: usize> {
    cm_offset: usize,
}

impl<const N: usize> FieldBytes<N> {
    /// `CM_FIELD_MLOC(struct, cm_offset, N * 8)`.
    pub const fn new(cm_offset: usize) -> Self {
        assert!(
            MAD_HDR_SIZE + cm_offset + N <= MAD_SIZE,
            "field beyond the MAD"
        );
        Self { cm_offset }
    }

    /// The field's width in bits: `N * 8`.
    pub const fn width(&self) -> u32 {
        N as u32 * 8
    }

    /// The MAD bytes this field occupies.
    pub const fn mad_range(&self) -> Range<usize> {
        MAD_HDR_SIZE + self.cm_offset..MAD_HDR_SIZE + self.cm_offset + N
    }

    /// Copies the field's bytes out.
    #[inline(always)]
    pub fn get(&self, mad: &Mad) -> [u8; N] {
        let mut out = [0; N];
        out.copy_from_slice(&mad[self.mad_range()]);
        out
    }

    /// Copies `value` into the field.
    #[inline(always)]
    pub fn set(&self, mad: &mut Mad, value: &[u8; N]) {
        mad[self.mad_range()].copy_from_slice(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_follows_width_and_offset_like_iba_field_loc() {
        // IBA_FIELD32_LOC(off 5, 24): word at 4, GENMASK(23, 0).
        let f = Field::new(5, 24);
        assert_eq!((f.size(), f.mad_offset(), f.mask()), (4, 28, 0x00ff_ffff));
        // IBA_FIELD16_LOC(off 6, 16): BE16 at 6.
        let f = Field::new(6, 16);
        assert_eq!((f.size(), f.mad_offset(), f.mask()), (2, 30, 0xffff));
        // IBA_FIELD_BLOC(off 43, bit 5, 2): GENMASK(2, 1).
        let f = Field::bits(43, 5, 2);
        assert_eq!((f.size(), f.mad_offset(), f.mask()), (1, 67, 0x06));
    }

    #[test]
    fn set_masks_value_to_width_and_keeps_neighbours() {
        let mut mad = [0xff; MAD_SIZE];
        let f = Field::new(32, 24); // e.g. a QPN: top 24 bits of the word at MAD 56
        f.set(&mut mad, 0xab12_3456); // the 0xab does not fit and is dropped
        assert_eq!(mad[56..60], [0x12, 0x34, 0x56, 0xff]);
        assert_eq!(f.get(&mad), 0x12_3456);
        assert!(mad[..56].iter().chain(&mad[60..]).all(|&b| b == 0xff));
    }

    #[test]
    fn field64_and_bytes_are_big_endian_and_raw() {
        let mut mad = [0; MAD_SIZE];
        Field64::new(28).set(&mut mad, 0x0102_0304_0506_0708);
        assert_eq!(mad[52..60], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Field64::new(28).get(&mad), 0x0102_0304_0506_0708);
        FieldBytes::<4>::new(228).set(&mut mad, &[9, 8, 7, 6]);
        assert_eq!(mad[252..], [9, 8, 7, 6]);
        assert_eq!(FieldBytes::<4>::new(228).get(&mad), [9, 8, 7, 6]);
    }
}

/// Reference implementations each wire module checks every one of its fields
/// against, on random MADs and values: the byte loops the inlined accessors
/// replaced, and a bit-by-bit reading of the IBTA bit numbering.
#[cfg(test)]
pub(crate) mod reference {
    use super::*;
    use crate::rng::Rng;

    /// Random MADs per field: a handful under Miri, which interprets each
    /// byte of them (2,000 took minutes a field there).
    const ROUNDS: usize = if cfg!(miri) { 4 } else { 2000 };

    /// A MAD all ones, all zeros or random (so a field's neighbours are set
    /// and unset).
    fn random_mad(rng: &mut Rng) -> Mad {
        let kind = rng.below(4);
        std::array::from_fn(|_| match kind {
            0 => 0xff,
            1 => 0,
            _ => rng.next_u64() as u8,
        })
    }

    /// A value for a field: the extremes, one bit, or random (wider than most
    /// fields, whose `set` must drop the rest).
    fn random_u32(rng: &mut Rng) -> u32 {
        match rng.below(5) {
            0 => u32::MAX,
            1 => 0,
            2 => 1u32 << rng.below(32),
            _ => rng.next_u64() as u32,
        }
    }

    // The byte loops the accessors replaced (before a99da68), verbatim.
    fn old_container(f: &Field, mad: &Mad) -> u32 {
        let at = f.mad_offset();
        mad[at..at + f.size()]
            .iter()
            .fold(0, |word, &b| (word << 8) | u32::from(b))
    }
    fn old_get(f: &Field, mad: &Mad) -> u32 {
        (old_container(f, mad) & f.mask()) >> f.shift()
    }
    fn old_set(f: &Field, mad: &mut Mad, value: u32) {
        let word = (old_container(f, mad) & !f.mask()) | ((value << f.shift()) & f.mask());
        let at = f.mad_offset();
        let size = f.size();
        for (i, byte) in mad[at..at + size].iter_mut().enumerate() {
            *byte = (word >> (8 * (size - 1 - i))) as u8;
        }
    }

    // Independent bit-level reference: IBTA MSB-first bit numbering from the
    // field's first bit, (MAD_HDR_SIZE + cm_offset) * 8 + bit.
    fn bit_pos(f: &Field, i: u32) -> usize {
        (MAD_HDR_SIZE + f.cm_offset) * 8 + f.bit as usize + i as usize
    }
    fn bit_get(f: &Field, mad: &Mad) -> u32 {
        let mut v = 0u32;
        for i in 0..f.width {
            let p = bit_pos(f, i);
            v = (v << 1) | u32::from((mad[p / 8] >> (7 - p % 8)) & 1);
        }
        v
    }
    fn bit_set(f: &Field, mad: &mut Mad, value: u32) {
        for i in 0..f.width {
            let p = bit_pos(f, i);
            let b = ((value >> (f.width - 1 - i)) & 1) as u8;
            mad[p / 8] = (mad[p / 8] & !(1 << (7 - p % 8))) | (b << (7 - p % 8));
        }
    }

    pub(crate) fn field(name: &str, f: Field) {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (f.cm_offset as u64) << 8 ^ u64::from(f.bit));
        for _ in 0..ROUNDS {
            let mad = random_mad(&mut rng);
            let g = f.get(&mad);
            assert_eq!(g, old_get(&f, &mad), "{name}: get vs old");
            assert_eq!(g, bit_get(&f, &mad), "{name}: get vs bit ref");
            let v = random_u32(&mut rng);
            let (mut a, mut b, mut c) = (mad, mad, mad);
            f.set(&mut a, v);
            old_set(&f, &mut b, v);
            bit_set(&f, &mut c, v);
            assert_eq!(a, b, "{name}: set {v:#x} vs old");
            assert_eq!(a, c, "{name}: set {v:#x} vs bit ref");
            let m = if f.width == 32 {
                u32::MAX
            } else {
                (1 << f.width) - 1
            };
            assert_eq!(f.get(&a), v & m, "{name}: roundtrip");
        }
    }

    #[allow(clippy::needless_range_loop)]
    pub(crate) fn field64(name: &str, f: Field64) {
        let mut rng = Rng(0x1234_5678 ^ f.cm_offset as u64);
        for _ in 0..ROUNDS {
            let mad = random_mad(&mut rng);
            let at = MAD_HDR_SIZE + f.cm_offset;
            let r = mad[at..at + 8]
                .iter()
                .fold(0u64, |w, &b| (w << 8) | u64::from(b));
            assert_eq!(f.get(&mad), r, "{name}: get");
            let v = rng.next_u64();
            let (mut a, mut b) = (mad, mad);
            f.set(&mut a, v);
            for i in 0..8 {
                b[at + i] = (v >> (56 - 8 * i)) as u8;
            }
            assert_eq!(a, b, "{name}: set");
        }
    }

    #[allow(clippy::manual_memcpy, clippy::needless_range_loop)]
    pub(crate) fn bytes<const N: usize>(name: &str, f: FieldBytes<N>) {
        let mut rng = Rng(0xabcdef ^ f.cm_offset as u64 ^ (N as u64) << 20);
        for _ in 0..ROUNDS / 4 + 1 {
            let mad = random_mad(&mut rng);
            let at = MAD_HDR_SIZE + f.cm_offset;
            let g = f.get(&mad);
            for i in 0..N {
                assert_eq!(g[i], mad[at + i], "{name}: get");
            }
            let mut v = [0u8; N];
            for x in v.iter_mut() {
                *x = rng.next_u64() as u8;
            }
            let (mut a, mut b) = (mad, mad);
            f.set(&mut a, &v);
            for i in 0..N {
                b[at + i] = v[i];
            }
            assert_eq!(a, b, "{name}: set");
        }
    }
}
