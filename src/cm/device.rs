//! Devices: the library's `struct ib_device`, one per opened RDMA device.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use super::path::{Path, REC_TYPE_IB};
use super::worker;
use crate::errno::{CmResult, EHOSTUNREACH, EINVAL, ENODEV};
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{MadAddr, MadTransport, RecvFn};
use crate::wire::Mad;

/// IB MTU 4096 (`IB_MTU_4096`), what loop ports report.
const IB_MTU_4096: u8 = 5;
/// IB rate 10 Gb/s (`IB_RATE_10_GBPS`).
const IB_RATE_10_GBPS: u8 = 3;
/// The CA ACK delay of loop devices: what rdma_rxe reports.
const LOOP_ACK_DELAY: u8 = 15;
/// The default partition.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// One port of a device.
#[derive(Debug, Clone, Copy)]
pub struct Port {
    pub port_num: u8,
    pub gid: [u8; 16],
    pub lid: u16,
    pub pkey: u16,
}

/// An open device.
pub struct Device {
    pub name: String,
    pub node_guid: u64,
    /// `local_ca_ack_delay` (goes into REP TargetACKDelay and the REQ's local
    /// ACK timeout, and so sets the timewait). Loop devices report rxe's 15:
    /// timewait then lasts 128 ms, long enough to answer a retransmitted DREQ.
    pub ack_delay: u8,
    pub ports: Vec<Port>,
    /// The upper 32 TID bits of MADs this device starts (the kernel MAD agent's
    /// `hi_tid`).
    pub hi_tid: u32,
    transport: Arc<dyn MadTransport>,
    /// How many cm_ids of this device exist; it cannot close before they go.
    pub(super) ids: AtomicUsize,
}

impl Device {
    /// Opens `name`: `loopN` is a device of the in-process fabric. Real RDMA
    /// devices come with the umad transport; until then `-ENODEV`.
    pub fn open(name: &str) -> CmResult<Arc<Device>> {
        let Some(me) = LoopIdentity::from_name(name) else {
            return Err(ENODEV);
        };
        let mut result = Ok(());
        let device = Arc::new_cyclic(|weak: &Weak<Device>| {
            let weak = weak.clone();
            let recv: RecvFn = Arc::new(move |port, addr, mad| {
                if let Some(device) = weak.upgrade() {
                    worker::queue_recv(device, port, addr, mad);
                }
            });
            let transport: Arc<dyn MadTransport> = match LoopTransport::open(me, recv) {
                Ok(t) => t,
                Err(e) => {
                    result = Err(e);
                    Arc::new(ClosedTransport)
                }
            };
            Device {
                name: name.to_owned(),
                node_guid: me.node_guid,
                ack_delay: LOOP_ACK_DELAY,
                ports: vec![Port {
                    port_num: 1,
                    gid: me.gid,
                    lid: me.lid,
                    pkey: DEFAULT_PKEY,
                }],
                hi_tid: 1,
                transport,
                ids: AtomicUsize::new(0),
            }
        });
        result.map(|()| device)
    }

    pub fn port(&self, port_num: u8) -> CmResult<&Port> {
        self.ports
            .iter()
            .find(|p| p.port_num == port_num)
            .ok_or(EINVAL)
    }

    /// The port whose GID is `gid`.
    pub fn port_by_gid(&self, gid: &[u8; 16]) -> Option<&Port> {
        self.ports.iter().find(|p| &p.gid == gid)
    }

    pub fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        self.transport.send(port_num, addr, mad)
    }

    pub fn drop_next(&self, attr_id: u16, count: u32) -> CmResult {
        self.transport.drop_next(attr_id, count)
    }

    /// The in-process fabric's extras, for loop devices.
    pub fn as_loop(&self) -> Option<&LoopTransport> {
        self.transport.as_loop()
    }

    pub fn id_count(&self) -> usize {
        self.ids.load(Ordering::Acquire)
    }

    /// Detaches from the fabric. The caller checked that no cm_id is left.
    pub fn close(&self) {
        self.transport.close();
    }

    /// `ibcm_init_path()`: a path from `port_num` to `dgid`.
    pub fn init_path(&self, port_num: u8, dgid: &[u8; 16]) -> CmResult<Path> {
        let port = self.port(port_num)?;
        let dest = LoopIdentity::from_gid(dgid).ok_or(EHOSTUNREACH)?;
        Ok(Path {
            dgid: *dgid,
            sgid: port.gid,
            dlid: dest.lid,
            slid: port.lid,
            service_id: 0,
            flow_label: 0,
            hop_limit: 0,
            traffic_class: 0,
            reversible: 1,
            numb_path: 1,
            pkey: port.pkey,
            sl: 0,
            mtu: IB_MTU_4096,
            rate: IB_RATE_10_GBPS,
            packet_life_time: 0,
            rec_type: REC_TYPE_IB,
        })
    }
}

/// Stands in for a transport that failed to open (the device is never handed out).
struct ClosedTransport;

impl MadTransport for ClosedTransport {
    fn send(&self, _port_num: u8, _addr: &MadAddr, _mad: &Mad) -> CmResult {
        Err(ENODEV)
    }

    fn close(&self) {}
}
