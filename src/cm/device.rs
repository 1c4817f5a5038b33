//! Devices: the library's `struct ib_device`, one per opened RDMA device.
//!
//! `loopN` is a device of the in-process fabric; any other name is an RDMA
//! device under `/sys/class/infiniband`, reached through libibumad.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;

use super::counters::{Counter, PortCounters};
use super::event_fd::EventQueue;
use super::mra::AutoMra;
use super::path::{Path, REC_TYPE_IB, REC_TYPE_ROCE_V1, REC_TYPE_ROCE_V2};
use super::trace::{self, Dir};
use super::worker;
use super::worker::EAGAIN;
use crate::errno::{CmResult, EHOSTUNREACH, EINVAL, EIO, ENETDOWN, ENODEV, EOPNOTSUPP};
use crate::refusal::{Rule, invalid, refuse};
use crate::sa::cache::{self, PathCache, PortId, PortView};
use crate::sa::query::{self, Completion, NewQuery, Timing};
use crate::sa::{self, MGMT_CLASS_SA, PathQuery};
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::port_watch::{self, Change, LivePorts, PortPoller};
use crate::transport::switch::{Registered, SwitchTransport};
use crate::transport::sysfs::{self, GidEntry, GidType, LinkLayer, PortState};
use crate::transport::umad::UmadTransport;
use crate::transport::{LostFn, MadAddr, MadTransport, RecvFn};
use crate::wire::Mad;

/// IB MTU 4096 (`IB_MTU_4096`), what loop ports report.
const IB_MTU_4096: u8 = 5;
/// IB rate 10 Gb/s (`IB_RATE_10_GBPS`).
const IB_RATE_10_GBPS: u8 = 3;
/// The CA ACK delay of loop devices, and of real ones whose delay cannot be
/// read (no libibverbs): what rdma_rxe reports (sysfs does not show it).
const CA_ACK_DELAY: u8 = 15;
/// The packet lifetime rdma_cm gives RoCE paths (`CMA_IBOE_PACKET_LIFETIME`).
const ROCE_PACKET_LIFETIME: u8 = 16;
/// The hop limit of a routed RoCE path.
const ROCE_HOP_LIMIT: u8 = 64;
/// The default partition.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// One port of a device. Its LID, SM LID and SM SL are as read when the
/// device opened; what they are now (a port is read again while open,
/// `port_watch`) is [`Device::port_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub port_num: u8,
    pub lid: u16,
    pub pkey: u16,
    /// The P_Key table, by index.
    pub pkeys: Vec<u16>,
    /// Where the SM's SA answers path queries (InfiniBand ports; 0: no SM).
    pub sm_lid: u16,
    pub sm_sl: u8,
    pub link_layer: LinkLayer,
    /// The active MTU (`enum ib_mtu` code).
    pub mtu: u8,
    /// The valid entries of the GID table.
    pub gids: Vec<GidEntry>,
}

impl Port {
    /// The table index of `gid`.
    pub fn gid_index(&self, gid: &[u8; 16]) -> Option<u8> {
        self.gids.iter().find(|g| &g.gid == gid).map(|g| g.index)
    }

    /// The GID at table index `index`.
    pub fn gid(&self, index: u8) -> Option<[u8; 16]> {
        self.gids.iter().find(|g| g.index == index).map(|g| g.gid)
    }

    /// The P_Key index MADs of partition `pkey` are sent with, as the
    /// kernel's `ib_find_cached_pkey`: the same partition (low 15 bits), a
    /// full member preferred.
    pub fn pkey_index(&self, pkey: u16) -> Option<u16> {
        let same_partition = |p: &&u16| *p & 0x7fff == pkey & 0x7fff && *p & 0x7fff != 0;
        let full = self
            .pkeys
            .iter()
            .position(|p| same_partition(&p) && p & 0x8000 != 0);
        full.or_else(|| self.pkeys.iter().position(|p| same_partition(&p)))
            .map(|i| i as u16)
    }

    /// RoCE ports send every MAD with a GRH.
    pub fn is_roce(&self) -> bool {
        self.link_layer == LinkLayer::Ethernet
    }
}

/// An open device.
pub struct Device {
    pub name: String,
    pub node_guid: u64,
    /// `local_ca_ack_delay` (goes into REP TargetACKDelay and the REQ's local
    /// ACK timeout, and so sets the timewait): the device's own, as
    /// `ibv_query_device` reports it; 15 on loop devices (rxe's), so timewait
    /// lasts 128 ms. A DREQ retransmitted within that (a short
    /// `remote_cm_response_timeout`) gets the DREP again; one retried later
    /// (rdma_cm's 4 s) finds the id IDLE and is dropped, as in the kernel.
    pub ack_delay: u8,
    pub ports: Vec<Port>,
    /// The upper 32 TID bits of MADs this device starts (the kernel MAD agent's
    /// `hi_tid`; on real ports the kernel rewrites them anyway).
    pub hi_tid: u32,
    /// This device, for the SA queries that send on it later.
    me: Weak<Device>,
    transport: Arc<dyn MadTransport>,
    /// Set once by `close`. Every send holds it for reading, so close waits
    /// for a send in progress and no send reaches the transport after it.
    closed: RwLock<bool>,
    /// Set once when the transport reports its way to the wire gone for
    /// good (the MAD switch daemon died), before the flush of the ids is
    /// queued.
    lost: AtomicBool,
    /// One set per port, in `ports` order.
    counters: Vec<PortCounters>,
    /// How many cm_ids of this device exist; it cannot close before they go.
    pub(super) ids: AtomicUsize,
    /// Received MADs of this device waiting for the worker, and how many may
    /// ([`worker::RX_QUEUE_CAP`]; tests lower it).
    rx_queued: AtomicUsize,
    rx_queue_cap: AtomicUsize,
    /// Where handlers of this device's ids run: the worker (the default), or
    /// the application's thread in `ibcm_process_events` (FD mode).
    pub events: EventQueue,
    /// A cache of its own, set by tests of the in-process fabric: its loop
    /// ports then ask their paths of the fake SA through it, as real ports
    /// ask theirs through the process's cache.
    own_path_cache: OnceLock<Arc<PathCache>>,
    /// What a duplicate REQ or REP its user has not answered gets
    /// (`AutoMra::to_bits`): `IBCM_AUTO_MRA`, or what a test set.
    auto_mra: AtomicU8,
    /// Its ports' LID, SM LID, SM SL and state as last read: what SA
    /// queries and the path cache go by (read again on an RDMA device).
    live: LivePorts,
}

/// What a device is made of before its transport opens.
pub struct Identity {
    pub node_guid: u64,
    pub ack_delay: u8,
    pub ports: Vec<Port>,
}

impl Device {
    /// Opens `name`: `loopN` on the in-process fabric, else an RDMA device.
    pub fn open(name: &str) -> CmResult<Arc<Device>> {
        match LoopIdentity::from_name(name) {
            Some(me) => Self::open_loop(name, me, LinkLayer::InfiniBand, CA_ACK_DELAY),
            None => {
                if let Some(registered) = crate::transport::switch::register(name)? {
                    return Self::open_switched(name, registered);
                }
                let (sys, identity) = rdma_identity(name)?;
                let device = Self::open_with(name, identity, |recv, _| {
                    Ok(
                        UmadTransport::open(&sys, recv, Some(super::worker::ports_changed))?
                            as Arc<dyn MadTransport>,
                    )
                })?;
                device.watch_ports(sysfs::SYS_INFINIBAND);
                Ok(device)
            }
        }
    }

    /// An RDMA device whose ports the MAD switch (`ibcmd`) owns: the
    /// identity is the one it sent.
    fn open_switched(name: &str, registered: Registered) -> CmResult<Arc<Device>> {
        let identity = Identity {
            node_guid: registered.device.node_guid,
            ack_delay: registered.device.ack_delay,
            ports: registered.device.ports.clone(),
        };
        let device = Self::open_with(name, identity, |recv, lost| {
            Ok(SwitchTransport::start(name, registered, recv, lost)? as Arc<dyn MadTransport>)
        })?;
        // The daemon's ports are this host's: their sysfs is ours to read.
        device.watch_ports(sysfs::SYS_INFINIBAND);
        Ok(device)
    }

    /// A device of the in-process fabric: one port of `link_layer`.
    fn open_loop(
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
        Self::open_with(name, identity, |recv, _| {
            Ok(LoopTransport::open(me, recv)? as Arc<dyn MadTransport>)
        })
    }

    /// A loop device whose port says Ethernet: the engine tests of branches
    /// the kernel takes only on RoCE ports (the fabric itself is the same).
    #[cfg(test)]
    pub fn open_loop_as_roce(name: &str) -> CmResult<Arc<Device>> {
        let me = LoopIdentity::from_name(name).ok_or(EINVAL)?;
        Self::open_loop(name, me, LinkLayer::Ethernet, CA_ACK_DELAY)
    }

    /// A loop device with the CA ACK delay of a real device other than rxe
    /// (the engine tests of what the delay sets).
    #[cfg(test)]
    pub fn open_loop_with_ack_delay(name: &str, ack_delay: u8) -> CmResult<Arc<Device>> {
        let me = LoopIdentity::from_name(name).ok_or(EINVAL)?;
        Self::open_loop(name, me, LinkLayer::InfiniBand, ack_delay)
    }

    /// Builds the device around the transport `open` makes; received MADs go
    /// to the worker with a reference to this device, and so does the news
    /// that the transport lost the wire (umad and loop transports never
    /// report it: a removed umad port fails its sends instead).
    fn open_with(
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
                        query::deliver(Arc::as_ptr(&device) as usize, addr.dlid, &mad);
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

    /// What this device answers a duplicate REQ or REP with while its user
    /// has not answered (`mra::auto_mra`).
    pub fn auto_mra(&self) -> AutoMra {
        AutoMra::from_bits(self.auto_mra.load(Ordering::Relaxed))
    }

    /// Sets [`Device::auto_mra`] (tests: `IBCM_AUTO_MRA` is read once per
    /// process).
    #[cfg(test)]
    pub fn set_auto_mra(&self, setting: AutoMra) {
        self.auto_mra.store(setting.to_bits(), Ordering::Relaxed);
    }

    pub fn port(&self, port_num: u8) -> CmResult<&Port> {
        self.ports
            .iter()
            .find(|p| p.port_num == port_num)
            .ok_or_else(|| no_port(port_num))
    }

    /// The port that has `gid` in its GID table.
    pub fn port_by_gid(&self, gid: &[u8; 16]) -> Option<&Port> {
        self.ports.iter().find(|p| p.gid_index(gid).is_some())
    }

    /// Sends one MAD; counted in `cm_tx_msgs` once the transport took it.
    /// `-ENODEV` once the device is closed (or its port gone).
    pub fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        self.send_with(port_num, addr, mad, |t| t.send(port_num, addr, mad))
    }

    /// Sends a MAD this side keeps for retransmission: the in-process fabric
    /// hands the same buffer to the receiver instead of a copy.
    pub fn send_shared(&self, port_num: u8, addr: &MadAddr, mad: &Arc<Mad>) -> CmResult {
        self.send_with(port_num, addr, mad, |t| t.send_shared(port_num, addr, mad))
    }

    fn send_with(
        &self,
        port_num: u8,
        addr: &MadAddr,
        mad: &Mad,
        send: impl FnOnce(&dyn MadTransport) -> CmResult,
    ) -> CmResult {
        let closed = self.closed.read();
        if *closed {
            return Err(ENODEV);
        }
        if crate::pcap::enabled() {
            crate::pcap::record(&self.source_gid(port_num, addr.sgid_index), &addr.dgid, mad);
        }
        // Before the hand-over: the peer may handle the MAD (and log its
        // `recv`) before the transport returns.
        trace::mad(Dir::Send, &self.name, port_num, addr, mad);
        if let Err(e) = send(&*self.transport) {
            trace::unsent(&self.name, port_num, addr, mad, e);
            return Err(e);
        }
        drop(closed);
        self.count(port_num, Counter::TxMsgs, mad_attr_id(mad));
        Ok(())
    }

    /// The GID MADs leave `port_num` from with source GID index `index`.
    pub fn source_gid(&self, port_num: u8, index: u8) -> [u8; 16] {
        self.port(port_num)
            .ok()
            .and_then(|p| p.gid(index).or_else(|| p.gids.first().map(|g| g.gid)))
            .unwrap_or_default()
    }

    /// The counters of `port_num`.
    pub fn counters(&self, port_num: u8) -> CmResult<&PortCounters> {
        let i = self
            .ports
            .iter()
            .position(|p| p.port_num == port_num)
            .ok_or_else(|| no_port(port_num))?;
        Ok(&self.counters[i])
    }

    pub fn count(&self, port_num: u8, counter: Counter, attr_id: u16) {
        if let Ok(c) = self.counters(port_num) {
            c.add(counter, attr_id);
        }
    }

    /// Takes a place in this device's receive queue, if it is not full.
    pub fn reserve_rx_slot(&self) -> bool {
        let cap = self.rx_queue_cap.load(Ordering::Relaxed);
        self.rx_queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok()
    }

    /// A smaller receive queue: tests fill it without holding up the worker
    /// that every test shares for long.
    #[cfg(test)]
    pub fn set_rx_queue_cap(&self, cap: usize) {
        self.rx_queue_cap.store(cap, Ordering::Relaxed);
    }

    /// A received MAD left the receive queue.
    pub fn release_rx_slot(&self) {
        self.rx_queued.fetch_sub(1, Ordering::AcqRel);
    }

    /// Counts a received MAD dropped because the receive queue was full.
    pub fn count_rx_dropped(&self, port_num: u8) {
        if let Ok(c) = self.counters(port_num) {
            c.rx_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn drop_next(&self, attr_id: u16, count: u32) -> CmResult {
        self.transport.drop_next(attr_id, count)
    }

    /// The in-process fabric's extras, for loop devices.
    pub fn as_loop(&self) -> Option<&LoopTransport> {
        self.transport.as_loop()
    }

    /// The local comm IDs this process may use on the device (the MAD
    /// switch's slice), or all.
    pub fn id_slice(&self) -> Option<crate::transport::IdSlice> {
        self.transport.id_slice()
    }

    /// Registers a listen with the MAD switch, if the device goes through
    /// one: the service ID it gave, `-EBUSY` if another process has it.
    pub fn switch_listen(&self, service_id: u64) -> CmResult<Option<u64>> {
        self.transport.listen(service_id)
    }

    pub fn switch_unlisten(&self, service_id: u64) {
        self.transport.unlisten(service_id);
    }

    pub fn id_count(&self) -> usize {
        self.ids.load(Ordering::Acquire)
    }

    /// Detaches from the fabric once a send in progress is done; nothing is
    /// sent or received after. The caller checked that no cm_id is left.
    pub fn close(&self) {
        *self.closed.write() = true;
        self.transport.close();
        query::flush(self as *const Device as usize);
        // Events of destroyed ids only; dropped after the queue's lock.
        drop(self.events.close());
    }

    /// Whether the transport lost the wire for good (the MAD switch daemon
    /// died): its ids in progress are flushed (`lost::device_lost_handler`).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Whether `close` has begun: received MADs still queued are dropped.
    pub fn is_closed(&self) -> bool {
        *self.closed.read()
    }

    /// `ibcm_init_path()`: a path from `port_num` to `dgid`.
    pub fn init_path(&self, port_num: u8, dgid: &[u8; 16]) -> CmResult<Path> {
        let port = self.port(port_num)?;
        if port.is_roce() {
            return roce_path(port, dgid);
        }
        if self.as_loop().is_none() || self.own_path_cache.get().is_some() {
            return self.path_from_sa(port, dgid);
        }
        // The in-process fabric knows every LID.
        let dest = LoopIdentity::from_gid(dgid).ok_or_else(|| {
            let rule = "is not the GID of a loop device";
            refuse(EHOSTUNREACH, Rule::gid("dgid", *dgid, rule))
        })?;
        Ok(Path {
            dlid: dest.lid,
            slid: port.lid,
            ..port_path(port, port.gids[0].gid, *dgid)
        })
    }
}

/// A port's state as the device opens: only ACTIVE ports are opened.
fn open_state(port: &Port) -> PortState {
    PortState {
        lid: port.lid,
        sm_lid: port.sm_lid,
        sm_sl: port.sm_sl,
        active: true,
    }
}

/// `EINVAL` for a port the device does not have.
fn no_port(port_num: u8) -> crate::errno::Errno {
    let rule = "is not a port of the device";
    invalid(Rule::value("port_num", port_num, rule))
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

impl Device {
    /// An InfiniBand port's path to `dgid`, as `ibcm_init_path` gives it: from
    /// the path cache, which asks the SA once per destination (and again once
    /// the answer expired or was invalidated). A thread that may not wait for
    /// another's query (the worker: its timers drive every query's resends)
    /// asks by itself when the same query is in flight.
    fn path_from_sa(&self, port: &Port, dgid: &[u8; 16]) -> CmResult<Path> {
        let query = PathQuery::between(port.gids[0].gid, *dgid, port.pkey);
        self.read_port_if_stale(port.port_num);
        let now = self.port_state(port);
        let view = PortView {
            lid: now.lid,
            sm_lid: now.sm_lid,
            sm_sl: now.sm_sl,
        };
        let may_wait = !worker::on_worker();
        self.path_cache()
            .get(self.port_id(port.port_num), view, &query, may_wait, || {
                self.query_path(port, &query)
            })
            .map_err(sa::kernel_errno)
    }

    /// The cache this device's paths are kept in: the process's (or a test's).
    pub fn path_cache(&self) -> &PathCache {
        self.own_path_cache.get().unwrap_or(cache::process())
    }

    /// Port `port_num` as every process of the host knows it.
    pub fn port_id(&self, port_num: u8) -> PortId {
        PortId {
            node_guid: self.node_guid,
            port_num,
        }
    }

    /// Port `port_num` changed (its state, LID or SM), or its SM asked its
    /// clients to reregister: the paths cached for it go. The port watcher
    /// calls it when a read of the port differs from the one before
    /// (`port_watch`); a client reregister that changes none of them is not
    /// seen (it is a verbs async event only), and its answers live out
    /// their TTL.
    pub fn port_changed(&self, port_num: u8) {
        self.path_cache().invalidate_port(self.port_id(port_num));
    }

    /// `port`'s LID, SM LID, SM SL and state as last read.
    pub fn port_state(&self, port: &Port) -> PortState {
        self.live
            .state(port.port_num)
            .unwrap_or_else(|| open_state(port))
    }

    /// How many changes of port `port_num` were seen, and how many of its
    /// reads failed.
    pub fn port_watch_counts(&self, port_num: u8) -> (u64, u64) {
        self.live.counts(port_num)
    }

    /// Reads this RDMA device's ports again under `root` from now on:
    /// every `IBCM_PORT_POLL_MS` on the watcher thread, and before an SA
    /// query when the last read is older than that.
    fn watch_ports(self: &Arc<Self>, root: &str) {
        if let Some(interval) = port_watch::poll_interval() {
            self.live.read_from(root, &self.name, interval);
            let me: Arc<dyn PortPoller> = self.clone();
            port_watch::watch(Arc::downgrade(&me));
        }
    }

    /// Makes this device's ports read from the files of a test under
    /// `root` (as `root/<name>/ports/N/…`), again before a query when the
    /// last read is older than `interval`; the test reads them with
    /// [`PortPoller::poll_ports`].
    #[cfg(test)]
    pub fn read_ports_from(&self, root: &std::path::Path, interval: std::time::Duration) {
        self.live.read_from(root, &self.name, interval);
    }

    /// Reads port `port_num` before an SA query if its last read is older
    /// than the interval (the watcher thread is late, or off): not on the
    /// worker, which must not wait for a device's answer.
    fn read_port_if_stale(&self, port_num: u8) {
        if worker::on_worker() {
            return;
        }
        if let Some(change) = self.live.refresh_if_stale(port_num) {
            self.port_did_change(change);
        }
    }

    /// What a port that changed drops: its cached paths (SA queries go to
    /// its new SM from now on by themselves).
    fn port_did_change(&self, change: Change) {
        self.port_changed(change.port_num);
        crate::ibcm_log!(Info, "{} {change}; cached paths dropped", self.name);
    }

    /// A REQ from `port_num` to `dgid` timed out: the path may be stale, so
    /// the next `ibcm_init_path` to `dgid` asks the SA again.
    pub fn req_timed_out(&self, port_num: u8, dgid: &[u8; 16]) {
        self.path_cache()
            .invalidate_destination(self.port_id(port_num), dgid);
    }

    /// Makes this loop device's InfiniBand paths come from the fake SA of a
    /// test, through `cache`, as a real port's do (once; later calls do
    /// nothing).
    #[cfg(test)]
    pub fn ask_sa_for_paths(&self, cache: Arc<PathCache>) {
        let _ = self.own_path_cache.set(cache);
    }

    /// Asks the SA of `port`'s subnet for a path and waits for the answer
    /// (`ibcm_init_path`'s 4 tries of 500 ms): `-EAGAIN` while the port knows
    /// no SM, `-ETIMEDOUT` when the SA never answers, `-EINVAL` when it
    /// answers with an error ([`sa::BUSY`] for Busy), `-ENODEV` when the
    /// device closes (before the query, or its flush while it waits), `-EIO`
    /// when a send failed.
    pub fn query_path(&self, port: &Port, query: &PathQuery) -> CmResult<Path> {
        let timing = Timing::split(sa::DEFAULT_TIMEOUT_MS, sa::DEFAULT_RETRIES);
        query::wait_for(|done| self.path_query(port, *query, timing, done, None)).map_err(|e| {
            match e {
                sa::EINTR => ENODEV,
                EAGAIN | sa::ETIMEDOUT | EINVAL | ENODEV | EOPNOTSUPP | sa::BUSY => e,
                _ => EIO,
            }
        })
    }

    /// `ib_sa_path_rec_get()`: sends `query` to the SA of port `port_num`
    /// and returns the query's id and handle; `done` gets its outcome.
    /// `-EAGAIN` for a port with no SM known (or no SA: RoCE), as the
    /// kernel's SA client without an SM address handle.
    pub fn start_path_query(
        &self,
        port_num: u8,
        query: PathQuery,
        timing: Timing,
        done: Completion,
        client: Option<sa::client::ClientRef>,
    ) -> CmResult<(i32, usize)> {
        self.start_announced_path_query(port_num, query, timing, done, client, |_, _| {})
    }

    /// `start_path_query`, telling `announce` the query's id and handle
    /// before its first send (`query::submit_announced`).
    pub fn start_announced_path_query(
        &self,
        port_num: u8,
        query: PathQuery,
        timing: Timing,
        done: Completion,
        client: Option<sa::client::ClientRef>,
        announce: impl FnOnce(i32, usize),
    ) -> CmResult<(i32, usize)> {
        let port = self.port(port_num)?;
        let new = self.path_query(port, query, timing, done, client)?;
        query::submit_announced(new, announce)
    }

    /// A query to the SM of `port`, sent on this device.
    fn path_query(
        &self,
        port: &Port,
        query: PathQuery,
        timing: Timing,
        done: Completion,
        client: Option<sa::client::ClientRef>,
    ) -> CmResult<NewQuery> {
        self.read_port_if_stale(port.port_num);
        let now = self.port_state(port);
        if now.sm_lid == 0 || port.is_roce() {
            let rule = "the port knows no SM (a RoCE port has no SA)";
            return Err(refuse(EAGAIN, Rule::Text(rule)));
        }
        let sm = MadAddr {
            dlid: now.sm_lid,
            sl: now.sm_sl,
            // The in-process fabric delivers by GID.
            dgid: match self.as_loop() {
                Some(_) => LoopIdentity::from_lid(now.sm_lid).map_or([0; 16], |l| l.gid),
                None => [0; 16],
            },
            ..MadAddr::default()
        };
        let (me, port_num) = (self.me.clone(), port.port_num);
        Ok(NewQuery {
            owner: self as *const Device as usize,
            sa_lid: now.sm_lid,
            query,
            send: Arc::new(move |mad| {
                me.upgrade()
                    .ok_or(ENODEV)
                    .and_then(|d| d.send(port_num, &sm, mad))
            }),
            timing,
            done,
            client,
        })
    }
}

impl PortPoller for Device {
    /// Reads every port again (the watcher thread): each that changed drops
    /// its cached paths, logged once. False once the device is closed.
    fn poll_ports(&self) -> bool {
        if self.is_closed() {
            return false;
        }
        for change in self.live.refresh_all() {
            self.port_did_change(change);
        }
        true
    }
}

/// The attribute ID of an encoded MAD.
pub fn mad_attr_id(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

/// Whether `gid` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff]
}

/// A RoCE path as rdma_cm builds it: a source GID of the destination's kind
/// (IPv4-mapped or IPv6), RoCE v2 preferred, routed (hop limit 64), rdma_cm's
/// packet lifetime.
fn roce_path(port: &Port, dgid: &[u8; 16]) -> CmResult<Path> {
    let want_v4 = is_ipv4_mapped(dgid);
    let same_kind = |g: &&GidEntry| is_ipv4_mapped(&g.gid) == want_v4;
    let sgid = port
        .gids
        .iter()
        .filter(same_kind)
        .find(|g| g.gid_type == GidType::RoceV2)
        .or_else(|| port.gids.iter().find(same_kind))
        .ok_or_else(|| {
            let rule = "has no source GID of its kind (IPv4, IPv6) on the port";
            refuse(EHOSTUNREACH, Rule::gid("dgid", *dgid, rule))
        })?;
    Ok(Path {
        hop_limit: ROCE_HOP_LIMIT,
        packet_life_time: ROCE_PACKET_LIFETIME,
        rec_type: if sgid.gid_type == GidType::RoceV2 {
            REC_TYPE_ROCE_V2
        } else {
            REC_TYPE_ROCE_V1
        },
        ..port_path(port, sgid.gid, *dgid)
    })
}

/// What every path from `port` has: one reversible path in the port's
/// partition at its MTU, SL 0, 10 Gb/s; an IB record with no LIDs yet.
fn port_path(port: &Port, sgid: [u8; 16], dgid: [u8; 16]) -> Path {
    Path {
        dgid,
        sgid,
        reversible: 1,
        numb_path: 1,
        pkey: port.pkey,
        mtu: port.mtu,
        rate: IB_RATE_10_GBPS,
        rec_type: REC_TYPE_IB,
        ..Path::default()
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
