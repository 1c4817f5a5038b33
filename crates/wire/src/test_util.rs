//! Test helpers: MADs from hex dumps, and checks of field descriptors against the §3.4 tables.

use super::field::{Field, Field64, FieldBytes};
use super::{MAD_SIZE, Mad};

/// Parses a hex dump in the `decode_cm_pcap.py --hex` format (`0010: 00 15 ...`, 16 bytes a row).
/// Row labels are checked so a dropped or duplicated row cannot go unnoticed.
pub(crate) fn mad_from_dump(dump: &str) -> Mad {
    let mut mad = [0; MAD_SIZE];
    let mut len = 0;
    for line in dump.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (label, bytes) = line.split_once(':').expect("row label");
        assert_eq!(
            usize::from_str_radix(label, 16).unwrap(),
            len,
            "row {label} out of place"
        );
        for byte in bytes.split_whitespace() {
            mad[len] = u8::from_str_radix(byte, 16).unwrap();
            len += 1;
        }
    }
    assert_eq!(len, MAD_SIZE, "dump must hold a whole MAD");
    mad
}

/// The "access" column of a §3.4 table row: container and MAD offset (and mask).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Access {
    U8(usize, u8),
    Be16(usize, u16),
    Be32(usize, u32),
    Be64(usize),
    /// Raw bytes: MAD offset, length.
    Mem(usize, usize),
}

/// Writes all-ones (`true`) or all-zeros (`false`) into a field.
type Fill = Box<dyn Fn(&mut Mad, bool)>;

/// Any field descriptor, type-erased so one table can list them all.
pub(crate) struct Loc {
    fill: Fill,
    /// (container size, MAD offset, mask) as the descriptor computes them.
    layout: (usize, usize, u32),
}

impl From<Field> for Loc {
    fn from(f: Field) -> Self {
        Loc {
            fill: Box::new(move |mad, ones| f.set(mad, if ones { u32::MAX } else { 0 })),
            layout: (f.size(), f.mad_offset(), f.mask()),
        }
    }
}

impl From<Field64> for Loc {
    fn from(f: Field64) -> Self {
        Loc {
            fill: Box::new(move |mad, ones| f.set(mad, if ones { u64::MAX } else { 0 })),
            layout: (8, f.mad_offset(), 0),
        }
    }
}

impl<const N: usize> From<FieldBytes<N>> for Loc {
    fn from(f: FieldBytes<N>) -> Self {
        Loc {
            fill: Box::new(move |mad, ones| f.set(mad, &[if ones { 0xff } else { 0 }; N])),
            layout: (N, f.mad_range().start, 0),
        }
    }
}

/// For every row: the descriptor's container, offset and mask equal the table's, and filling the
/// field with ones (in a zero MAD) or zeros (in an all-ones MAD) changes exactly the table's bits.
/// Each row's (offset, mask) is unique, so failures name the row by its table value.
pub(crate) fn check_table(rows: Vec<(Loc, Access)>) {
    for (loc, access) in rows {
        // The table's bits as bytes: (MAD offset, big-endian mask bytes).
        let (at, mask): (usize, Vec<u8>) = match access {
            Access::U8(at, m) => (at, vec![m]),
            Access::Be16(at, m) => (at, m.to_be_bytes().to_vec()),
            Access::Be32(at, m) => (at, m.to_be_bytes().to_vec()),
            Access::Be64(at) => (at, vec![0xff; 8]),
            Access::Mem(at, len) => (at, vec![0xff; len]),
        };
        let table_mask = match access {
            Access::U8(_, m) => u32::from(m),
            Access::Be16(_, m) => u32::from(m),
            Access::Be32(_, m) => m,
            Access::Be64(_) | Access::Mem(..) => 0,
        };
        assert_eq!(
            loc.layout,
            (mask.len(), at, table_mask),
            "{access:?}: layout differs from table"
        );

        let mut ones_in_zero = [0; MAD_SIZE];
        (loc.fill)(&mut ones_in_zero, true);
        let mut zeros_in_ones = [0xff; MAD_SIZE];
        (loc.fill)(&mut zeros_in_ones, false);
        let mut expect_set = [0; MAD_SIZE];
        expect_set[at..at + mask.len()].copy_from_slice(&mask);
        assert_eq!(
            ones_in_zero, expect_set,
            "{access:?}: setting ones touched other bits"
        );
        let expect_cleared = expect_set.map(|b| !b);
        assert_eq!(
            zeros_in_ones, expect_cleared,
            "{access:?}: clearing touched other bits"
        );
    }
}
