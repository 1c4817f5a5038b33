//! How a device opens: on the in-process fabric, on RDMA ports through
//! libibumad or through the MAD switch (`ibcmd`); what the switch serves of
//! one.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;

use super::{CA_ACK_DELAY, DEFAULT_PKEY, Device, IB_MTU_4096, Identity, Port, open_state};
use crate::cm::counters::PortCounters;
use crate::cm::engine::Cm;
use crate::cm::event_fd::EventQueue;
use crate::cm::mra::AutoMra;
use crate::cm::worker;
#[cfg(test)]
use crate::errno::EINVAL;
use crate::errno::{CmResult, EBUSY, ENETDOWN, ENODEV};
use crate::refusal::{Rule, refuse};
use crate::sa::MGMT_CLASS_SA;
use crate::sa::query;
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::port_watch::LivePorts;
use crate::transport::switch::{Registered, SwitchTransport};
use crate::transport::sysfs::{self, GidEntry, GidType, LinkLayer};
use crate::transport::umad::UmadTransport;
use crate::transport::{LostFn, MadAddr, MadTransport, RecvFn};
use crate::wire::Mad;

impl Device {
    /// Opens `name` in `cm`: `loopN` on the in-process fabric, else an RDMA
    /// device.
    pub fn open(cm: &Arc<Cm>, name: &str) -> CmResult<Arc<Device>> {
        match LoopIdentity::from_name(name) {
            Some(me) => Self::open_loop(cm, name, me, LinkLayer::InfiniBand, CA_ACK_DELAY),
            None => {
                if let Some(registered) = crate::transport::switch::register(name)? {
                    return Self::open_switched(cm, name, registered);
                }
                let (sys, identity) = rdma_identity(name)?;
                // The process's engine reads its umad ports on its worker;
                // another engine's get a reader thread each.
                let worker = cm
                    .reads_umad()
                    .then_some(crate::cm::worker::ports_changed as fn());
                let device = Self::open_with(cm, name, identity, |recv, _| {
                    Ok(UmadTransport::open(&sys, recv, worker)? as Arc<dyn MadTransport>)
                })?;
                device.watch_ports(sysfs::SYS_INFINIBAND);
                Ok(device)
            }
        }
    }

    /// An RDMA device whose ports the MAD switch (`ibcmd`) owns: the
    /// identity is the one it sent.
    fn open_switched(cm: &Arc<Cm>, name: &str, registered: Registered) -> CmResult<Arc<Device>> {
        let identity = Identity {
            node_guid: registered.device.node_guid,
            ack_delay: registered.device.ack_delay,
            ports: registered.device.ports.clone(),
        };
        let device = Self::open_with(cm, name, identity, |recv, lost| {
            Ok(SwitchTransport::start(name, registered, recv, lost)? as Arc<dyn MadTransport>)
        })?;
        // The daemon's ports are this host's: their sysfs is ours to read.
        device.watch_ports(sysfs::SYS_INFINIBAND);
        Ok(device)
    }

    /// A device of the in-process fabric: one port of `link_layer`.
    fn open_loop(
        cm: &Arc<Cm>,
        name: &str,
        me: LoopIdentity,
        link_layer: LinkLayer,
        ack_delay: u8,
    ) -> CmResult<Arc<Device>> {
        let gid_type = match link_layer {
            LinkLayer::Ethernet => GidType::RoceV2,
            _ => GidType::Ib,
        };
        let identity = Identity {
            node_guid: me.node_guid,
            ack_delay,
            ports: vec![Port {
                port_num: 1,
                lid: me.lid,
                pkey: DEFAULT_PKEY,
                pkeys: vec![DEFAULT_PKEY],
                sm_lid: LoopIdentity::SM_LID,
                sm_sl: 0,
                link_layer,
                mtu: IB_MTU_4096,
                gids: vec![GidEntry {
                    index: 0,
                    gid: me.gid,
                    gid_type,
                }],
            }],
        };
        Self::open_with(cm, name, identity, |recv, _| {
            // The fabric is the process's: open here, the engine's own
            // check (`open_device_in`) refused it before.
            let transport = LoopTransport::open(me, recv).map_err(|e| {
                if e == EBUSY {
                    let why = "already open in another engine of this process (one fabric)";
                    refuse(EBUSY, Rule::Text(why))
                } else {
                    e
                }
            })?;
            Ok(transport as Arc<dyn MadTransport>)
        })
    }

    /// A loop device whose port says Ethernet: the engine tests of branches
    /// the kernel takes only on RoCE ports (the fabric itself is the same).
    #[cfg(test)]
    pub fn open_loop_as_roce(cm: &Arc<Cm>, name: &str) -> CmResult<Arc<Device>> {
        let me = LoopIdentity::from_name(name).ok_or(EINVAL)?;
        Self::open_loop(cm, name, me, LinkLayer::Ethernet, CA_ACK_DELAY)
    }

    /// A loop device with the CA ACK delay of a real device other than rxe
    /// (the engine tests of what the delay sets).
    #[cfg(test)]
    pub fn open_loop_with_ack_delay(
        cm: &Arc<Cm>,
        name: &str,
        ack_delay: u8,
    ) -> CmResult<Arc<Device>> {
        let me = LoopIdentity::from_name(name).ok_or(EINVAL)?;
        Self::open_loop(cm, name, me, LinkLayer::InfiniBand, ack_delay)
    }

    /// Builds the device around the transport `open` makes; received MADs go
    /// to the worker with a reference to this device, and so does the news
    /// that the transport lost the wire (umad and loop transports never
    /// report it: a removed umad port fails its sends instead).
    fn open_with(
        cm: &Arc<Cm>,
        name: &str,
        identity: Identity,
        open: impl FnOnce(RecvFn, LostFn) -> CmResult<Arc<dyn MadTransport>>,
    ) -> CmResult<Arc<Device>> {
        let mut result = Ok(());
        let device = Arc::new_cyclic(|weak: &Weak<Device>| {
            let me = weak.clone();
            let gone = weak.clone();
            let weak = weak.clone();
            let recv: RecvFn = Arc::new(move |port, addr, mad| {
                if let Some(device) = weak.upgrade() {
                    if mad[1] == MGMT_CLASS_SA {
                        // An SA answer: completes its query here; only the
                        // query's callback waits for the worker.
                        let owner = Arc::as_ptr(&device) as usize;
                        query::deliver(&device.cm, owner, addr.dlid, &mad);
                    } else {
                        worker::queue_recv(device, port, addr, mad);
                    }
                }
            });
            let lost: LostFn = Arc::new(move || {
                if let Some(device) = gone.upgrade() {
                    device.lost.store(true, Ordering::Release);
                    worker::queue_device_lost(device);
                }
            });
            let transport = open(recv, lost).unwrap_or_else(|e| {
                result = Err(e);
                Arc::new(ClosedTransport)
            });
            Device {
                cm: cm.clone(),
                name: name.to_owned(),
                node_guid: identity.node_guid,
                ack_delay: identity.ack_delay,
                counters: identity
                    .ports
                    .iter()
                    .map(|_| PortCounters::default())
                    .collect(),
                live: LivePorts::new(identity.ports.iter().map(|p| (p.port_num, open_state(p)))),
                ports: identity.ports,
                hi_tid: 1,
                me,
                transport,
                closed: RwLock::new(false),
                lost: AtomicBool::new(false),
                ids: AtomicUsize::new(0),
                rx_queued: AtomicUsize::new(0),
                rx_queue_cap: AtomicUsize::new(worker::RX_QUEUE_CAP),
                events: EventQueue::default(),
                own_path_cache: OnceLock::new(),
                auto_mra: AtomicU8::new(AutoMra::from_env().to_bits()),
            }
        });
        result.map(|()| device)
    }
}

/// What sysfs and libibverbs tell of RDMA device `name`: `-ENETDOWN` when no
/// port is ACTIVE.
fn rdma_identity(name: &str) -> CmResult<(sysfs::SysDevice, Identity)> {
    let sys = sysfs::read_device(std::path::Path::new(sysfs::SYS_INFINIBAND), name)?;
    if !sys.ports.iter().any(|p| p.active) {
        crate::ibcm_log!(Error, "{name}: no port is ACTIVE");
        return Err(ENETDOWN);
    }
    let identity = Identity {
        node_guid: sys.node_guid,
        ack_delay: device_ack_delay(name),
        ports: sys
            .ports
            .iter()
            .filter(|p| p.active)
            .map(|p| Port {
                port_num: p.port_num,
                lid: p.lid,
                pkey: p.pkey,
                pkeys: p.pkeys.clone(),
                sm_lid: p.sm_lid,
                sm_sl: p.sm_sl,
                link_layer: p.link_layer,
                mtu: p.mtu,
                gids: p.gids.clone(),
            })
            .collect(),
    };
    Ok((sys, identity))
}

/// What the MAD switch serves of RDMA device `name`: its node GUID, CA ACK
/// delay and ACTIVE ports, and the umad transport of those ports, receiving
/// with `recv`.
pub fn open_for_switch(name: &str, recv: RecvFn) -> CmResult<(Identity, Arc<dyn MadTransport>)> {
    let (sys, identity) = rdma_identity(name)?;
    // The daemon has no CM worker: its ports keep their reader threads.
    let transport = UmadTransport::open(&sys, recv, None)? as Arc<dyn MadTransport>;
    Ok((identity, transport))
}

/// The CA ACK delay of RDMA device `name` (`ib_device.attrs.local_ca_ack_delay`
/// in the kernel), from libibverbs; 15 with a warning when it cannot be read.
fn device_ack_delay(name: &str) -> u8 {
    crate::transport::umad::verbs_local_ca_ack_delay(name).unwrap_or_else(|| {
        crate::ibcm_log!(
            Warn,
            "{name}: local_ca_ack_delay unknown (libibverbs.so.1 or its device missing): assuming {CA_ACK_DELAY}"
        );
        CA_ACK_DELAY
    })
}

/// Stands in for a transport that failed to open (the device is never handed out).
struct ClosedTransport;

impl MadTransport for ClosedTransport {
    fn send(&self, _port_num: u8, _addr: &MadAddr, _mad: &Mad) -> CmResult {
        Err(ENODEV)
    }

    fn close(&self) {}
}
