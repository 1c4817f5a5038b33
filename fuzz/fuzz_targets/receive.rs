//! Target (b): the whole receive path. Arbitrary MADs go into a device that
//! has live connections in every state; see `ib_cm_fuzz` (fuzz/src/lib.rs)
//! for the input format, the connection set and the leak checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ib_cm_fuzz::run_input(data);
});
