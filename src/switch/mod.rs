//! `ibcmd`, the CM MAD switch: one daemon owns the umad agent of each port,
//! and every process on the host keeps its own engine behind it. To a
//! process's library the daemon is just another transport
//! ([`crate::transport::switch`]); to the daemon a process is a socket, a
//! slice of the local comm ID space and the service IDs it listens on.
//! `src/bin/ibcmd/` is the thin binary around [`Switch`]; the protocol is
//! [`proto`]; routing is [`routing`].

mod path_cache;
pub mod proto;
mod qp_owner;
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

use crate::errno::{CmResult, EIO, Errno};
use crate::ibcm_log;
use proto::DeviceInfo;
use qp_owner::{KernelQps, QpOwners};

impl Switch {
    /// Serves RDMA device `name`: every ACTIVE port through umad, read
    /// again every `IBCM_PORT_POLL_MS` (`transport::port_watch`). The
    /// kernel's resource tracking (RDMA netlink) tells whose QPs its
    /// tenants name; a device the kernel does not know (a simulated one:
    /// umad2sim) is served without that check, and says so.
    pub fn add_rdma_device(self: &Arc<Self>, name: &str) -> CmResult {
        let qp_owners: Option<Arc<dyn QpOwners>> = match KernelQps::of_device(name) {
            Ok(Some(qps)) => Some(Arc::new(qps)),
            Ok(None) => {
                ibcm_log!(
                    Warn,
                    "ibcmd: {name}: the kernel's RDMA netlink does not know this device (a simulated \
                     one?): the QPNs its tenants name are not checked"
                );
                None
            }
            // No RDMA netlink at all: ib_core is not loaded, so no kernel
            // device has QPs to name.
            Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => {
                ibcm_log!(
                    Warn,
                    "ibcmd: {name}: this kernel has no RDMA netlink (ib_core not loaded): the QPNs \
                     its tenants name are not checked"
                );
                None
            }
            Err(e) => {
                ibcm_log!(
                    Error,
                    "ibcmd: {name}: cannot ask the kernel whose QPs its tenants name (RDMA netlink: \
                     {e}); not serving it"
                );
                return Err(e.raw_os_error().map_or(EIO, Errno));
            }
        };
        let sysfs = Some(crate::transport::sysfs::SYS_INFINIBAND);
        self.add_watched_device(name, qp_owners, sysfs, |recv| {
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
mod tests_daemon_resources;
#[cfg(test)]
mod tests_path_cache;
#[cfg(test)]
mod tests_qp_naming;
#[cfg(test)]
mod tests_server;
#[cfg(test)]
mod tests_tenants;
