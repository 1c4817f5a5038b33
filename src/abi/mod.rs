//! The C types of `<rdma/ib_cm.h>`: the kernel's names, numbers and x86-64 layouts.
//!
//! Plain data shared by the engine (`cm`) and the C boundary (`ffi`); nothing
//! here dereferences a pointer.
//!
//! cbindgen generates the public header from these files. Every struct has
//! `const` layout assertions (`layout.rs`, and at the bottom of `counters.rs`
//! and `qp_attr.rs`); `c-tests/test_layout.c` asserts the same offsets from C
//! with `_Static_assert`.
//!
//! Enums that the *library* writes (states, event types) are real Rust enums.
//! Enum-typed values that *C code* writes (a `qp_type` in a request, a reject
//! reason, an `ib_event_type`) are received as `CInt*` wrappers: C may store any
//! `int` there, and reading an out-of-range value into a Rust enum would be
//! undefined behaviour. cbindgen renames each wrapper to its `enum` tag.
#![allow(non_camel_case_types, non_snake_case)]

mod counters;
mod enums;
mod event;
mod layout;
mod params;
mod path;
mod qp_attr;

pub use counters::*;
pub use enums::*;
pub use event::*;
pub use params::*;
pub use path::*;
pub use qp_attr::*;
