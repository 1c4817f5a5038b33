//! Target (c): `ibcmd`'s routing core between tenants and the wire. Each
//! input is a fresh switch with 2-4 tenants and a sequence of their Listens,
//! Sends, raw protocol messages, departures, and MADs from the wire; an
//! oracle written from the daemon's matching rule checks every MAD that
//! leaves. See `ib_cm_fuzz::switch` (fuzz/src/switch.rs) for the format and
//! the oracle.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ib_cm_fuzz::switch::run_input(data);
});
