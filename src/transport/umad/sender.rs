//! Send-only umad agents, for a process the MAD switch serves.

use std::ffi::CString;

use parking_lot::RwLock;

use super::loader::loaded;
use super::port::{AgentClass, PortHandle, may_open_umad, open_handle, register};
use crate::errno::{CmResult, EINVAL, ENODEV};
use crate::ibcm_log;
use crate::transport::MadAddr;
use crate::wire::Mad;

/// Send-only agents (no class: the kernel hands them no unsolicited MAD)
/// on the ports of a device whose CM class another process receives: the
/// MAD switch's, `ibcmd`. A process it serves that may open umad itself
/// sends its CM MADs with one write of its own instead of a write to the
/// daemon's socket, the daemon's read and the daemon's write
/// ([`crate::transport::switch`] decides which).
pub struct UmadSender {
    /// Emptied by `close`: a send after it finds no port.
    ports: RwLock<Vec<PortHandle>>,
}

impl UmadSender {
    /// A send-only agent on each of `port_nums` of `dev`; `None` (logged at
    /// debug level) when umad cannot be opened here, e.g. without access to
    /// `/dev/infiniband/umad*`, or on umad2sim, whose routing of a second
    /// agent per port is its own.
    pub fn open(dev: &str, port_nums: &[u8]) -> Option<Self> {
        let opened = (|| {
            if !port_nums.iter().all(|&p| may_open_umad(dev, p)) {
                return Err(crate::errno::EACCES);
            }
            let lib = loaded().map_err(|&(e, _)| e)?;
            let name = CString::new(dev).map_err(|_| EINVAL)?;
            port_nums
                .iter()
                .map(|&port_num| {
                    let mut handle = open_handle(lib, &name, port_num)?;
                    if handle.simulated {
                        return Err(crate::errno::EOPNOTSUPP);
                    }
                    let send_only = AgentClass {
                        mgmt_class: 0,
                        version: 0,
                        method_mask: [0, 0],
                    };
                    handle.agent_id = Some(register(lib, handle.fd, &send_only)?);
                    Ok(handle)
                })
                .collect::<CmResult<Vec<_>>>()
        })();
        match opened {
            Ok(ports) => Some(Self {
                ports: RwLock::new(ports),
            }),
            Err(e) => {
                ibcm_log!(
                    Debug,
                    "{dev}: no send-only umad agent ({e:?}): CM MADs go through the MAD switch"
                );
                None
            }
        }
    }

    /// Writes `mad` from `port_num`: `-ENODEV` once closed.
    pub fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let ports = self.ports.read();
        let Some(port) = ports.iter().find(|p| p.port_num == port_num) else {
            return Err(if ports.is_empty() { ENODEV } else { EINVAL });
        };
        port.post(addr, mad)
    }

    /// Unregisters the agents and closes the fds, once sends in progress
    /// are done.
    pub fn close(&self) {
        self.ports.write().clear();
    }
}
