//! The CM engine's parts that hold no I/O, no threads and no global state:
//! the timing wheel its retransmissions and timewaits run on, paths with
//! the IBA time arithmetic the kernel CM derives its timeouts from, and the
//! SA's PathRecord codec and the path cache's table (`sa`).
//!
//! Everything here is a value and takes the time as an input (`Instant`s and
//! `Duration`s handed in, never read from a clock it owns), so a test drives
//! it on a virtual clock. The state machine moves here from the root crate's
//! `cm` module message family by message family.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod path;
pub mod sa;
pub mod timer;
