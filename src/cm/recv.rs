//! Received MADs: checked, then dispatched by attribute (`cm_recv_handler`).

use std::sync::Arc;

use super::device::Device;
use super::{drep, dreq, rej, rep, req, rtu};
use crate::transport::MadAddr;
use crate::wire::{Mad, attr, parse_header};

/// A received CM MAD and where it came from (the kernel's `cm_work` with its
/// `mad_recv_wc`).
pub struct Received {
    pub device: Arc<Device>,
    pub port: u8,
    /// The address to reply to.
    pub addr: MadAddr,
    pub tid: u64,
    pub mad: Box<Mad>,
}

impl Received {
    /// Sends `mad` back to where this MAD came from (`cm_alloc_response_msg`).
    pub fn reply(&self, mad: &Mad) {
        // A lost reply is what the wire does too; the peer retries.
        let _ = self.device.send(self.port, &self.addr, mad);
    }
}

/// Dispatches one received MAD. Anything that is not a well-formed CM MAD of a
/// handled attribute is dropped.
pub fn recv_handler(device: &Arc<Device>, port: u8, addr: MadAddr, mad: Box<Mad>) {
    let Ok((header, _)) = parse_header(&mad[..]) else {
        return;
    };
    let work = Received {
        device: device.clone(),
        port,
        addr,
        tid: header.tid,
        mad,
    };
    match header.attr_id {
        attr::REQ => req::req_handler(work),
        attr::REP => rep::rep_handler(work),
        attr::RTU => rtu::rtu_handler(work),
        attr::REJ => rej::rej_handler(work),
        attr::DREQ => dreq::dreq_handler(work),
        attr::DREP => drep::drep_handler(work),
        _ => {}
    }
}
