//! MAD transports: how a device's CM MADs reach the wire.
//!
//! `loopback` is the in-process fabric (devices `loop0`, `loop1`, …). Every
//! transport carries whole 256-byte MADs; received ones go to the engine through
//! a [`RecvFn`].
pub mod batch;
mod direct_route;
pub mod loopback;
pub mod port_watch;
pub mod switch;
pub mod sysfs;
#[allow(unsafe_code)] // libibumad, loaded at run time
pub mod umad;

use std::sync::Arc;

use crate::errno::{CmResult, EOPNOTSUPP};

use crate::wire::Mad;

/// The address of a MAD: the fields of `ib_mad_addr` / an address handle that
/// the CM needs, for sending, and as reported with a received MAD (then it is
/// the address to reply to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadAddr {
    pub dlid: u16,
    pub sl: u8,
    pub pkey_index: u16,
    pub grh: bool,
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

/// Called by a transport for every MAD it receives: (port number, reply
/// address, MAD). Shared, because on the in-process fabric the receiver gets
/// the very buffer the sender keeps for retransmission.
pub type RecvFn = Arc<dyn Fn(u8, MadAddr, Arc<Mad>) + Send + Sync>;

/// Called once by a transport whose way to the wire is gone for good while
/// the device is open (the MAD switch daemon went away), never for `close`.
/// The engine then flushes every cm_id of the device in progress.
pub type LostFn = Arc<dyn Fn() + Send + Sync>;

/// The part of the local communication ID space a process may use when
/// several share a port through the MAD switch (`ibcmd`): the IDs whose top
/// `32 - bits` bits are those of `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdSlice {
    pub base: u32,
    pub bits: u8,
}

impl IdSlice {
    /// The bits a process chooses freely.
    pub fn mask(&self) -> u32 {
        1u32.checked_shl(u32::from(self.bits))
            .map_or(u32::MAX, |n| n - 1)
    }

    pub fn contains(&self, local_id: u32) -> bool {
        local_id & !self.mask() == self.base
    }
}

/// One device's way to the wire.
pub trait MadTransport: Send + Sync {
    /// Sends one MAD from `port_num` to `addr` (QP1, the GSI Q_Key). Never blocks
    /// on the peer.
    fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult;

    /// Sends a MAD the sender keeps (a tracked MAD): a transport that hands
    /// buffers over instead of copying them may share it.
    fn send_shared(&self, port_num: u8, addr: &MadAddr, mad: &Arc<Mad>) -> CmResult {
        self.send(port_num, addr, mad)
    }

    /// Fault injection: drop the next `count` MADs of `attr_id` this device sends.
    fn drop_next(&self, _attr_id: u16, _count: u32) -> CmResult {
        Err(EOPNOTSUPP)
    }

    /// The local comm IDs this process may use on the device: all of them
    /// (`None`) unless the MAD switch gave it a slice.
    fn id_slice(&self) -> Option<IdSlice> {
        None
    }

    /// `ib_cm_listen` of `service_id` on the device, where listens are shared
    /// with other processes (the MAD switch): the service ID listened on
    /// (the switch assigns `IB_CM_ASSIGN_SERVICE_ID`'s), `-EBUSY` when
    /// another process holds it. `Ok(None)`: this process alone decides.
    fn listen(&self, _service_id: u64) -> CmResult<Option<u64>> {
        Ok(None)
    }

    /// The listener of `service_id` is gone.
    fn unlisten(&self, _service_id: u64) {}

    /// Stops receiving; called once when the device is closed.
    fn close(&self);

    /// The in-process fabric's extras (fault injection, counts), if this is it.
    fn as_loop(&self) -> Option<&loopback::LoopTransport> {
        None
    }
}
