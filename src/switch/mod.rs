//! `ibcmd`, the CM MAD switch: one daemon owns the umad agent of each port,
//! and every process on the host keeps its own engine behind it. To a
//! process's library the daemon is just another transport
//! ([`crate::transport::switch`]); to the daemon a process is a socket, a
//! slice of the local comm ID space and the service IDs it listens on.
//! `src/bin/ibcmd.rs` is the thin binary around [`Switch`]; the protocol is
//! [`proto`]; routing is [`routing`].

pub mod proto;
pub mod routing;
mod rules;
mod server;

use std::sync::Arc;

pub use crate::os::seqpacket::{
    PeerCred, SeqPacket, block_termination_signals, wait_for_termination,
};
/// What the daemon's binary asks of the OS to run with least privilege.
pub use crate::os::sys::{
    become_user, can_become_root, group_ids, inherited_seqpacket_listener,
    set_no_new_privs_in_every_thread, supplementary_groups, unix_socket_path, user_ids,
};
pub use routing::{Admitted, ClientId, Quotas, Switch, SwitchConfig, SwitchCounter};
pub use server::CLIENT_SEND_BUFFER;

use crate::errno::CmResult;
use proto::DeviceInfo;

impl Switch {
    /// Serves RDMA device `name`: every ACTIVE port through umad.
    pub fn add_rdma_device(self: &Arc<Self>, name: &str) -> CmResult {
        self.add_device(name, |recv| {
            let (identity, transport) = crate::cm::device::open_for_switch(name, recv)?;
            let info = DeviceInfo {
                node_guid: identity.node_guid,
                ack_delay: identity.ack_delay,
                ports: identity.ports,
            };
            Ok((info, transport))
        })
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_review_a;
#[cfg(test)]
mod tests_review_b;
#[cfg(test)]
mod tests_server;
