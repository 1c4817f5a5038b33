//! Entry points for fuzzers and soak tests: not part of the C API, not stable.

use std::sync::Arc;

use super::device::Device;
use super::recv::recv_handler;
use crate::transport::MadAddr;
use crate::wire::{MAD_SIZE, Mad};

/// Hands `bytes` to `device` as a MAD received on port 1 from `from`, exactly
/// as a transport would (a MAD is 256 bytes: shorter input is zero-padded,
/// longer input cut). Runs the receive path on the calling thread; events it
/// produces go to the worker as usual.
pub fn receive(device: &Arc<Device>, from: MadAddr, bytes: &[u8]) {
    let mut mad: Mad = [0; MAD_SIZE];
    let n = bytes.len().min(MAD_SIZE);
    mad[..n].copy_from_slice(&bytes[..n]);
    recv_handler(device, 1, from, Arc::new(mad));
}

/// The address a loop device's MADs come from (to make `receive` look like
/// traffic from `peer`).
pub fn address_of(peer: &Device) -> MadAddr {
    MadAddr {
        dlid: peer.ports[0].lid,
        dgid: peer.ports[0].gids[0].gid,
        ..MadAddr::default()
    }
}
