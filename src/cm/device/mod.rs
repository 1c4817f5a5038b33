//! Devices: the library's `struct ib_device`, one per opened RDMA device.
//!
//! `loopN` is a device of the in-process fabric; any other name is an RDMA
//! device under `/sys/class/infiniband`, reached through libibumad.
//!
//! Here the device and its port, what it sends and counts; how one opens
//! in `open.rs`, its paths (`ibcm_init_path`, SA path queries, ports read
//! again) in `paths.rs`.

mod open;
mod paths;

pub use open::open_for_switch;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;

use super::counters::{Counter, PortCounters};
use super::engine::Cm;
use super::event_fd::EventQueue;
use super::mra::AutoMra;
use super::trace::{self, Dir};
use crate::errno::{CmResult, ENODEV};
use crate::refusal::{Rule, invalid};
use crate::sa::cache::PathCache;
use crate::sa::query;
use crate::transport::loopback::LoopTransport;
use crate::transport::port_watch::LivePorts;
use crate::transport::sysfs::{GidEntry, LinkLayer, PortState};
use crate::transport::{MadAddr, MadTransport};
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
    /// The engine it was opened in: its ids, MADs and timers are that
    /// engine's.
    pub cm: Arc<Cm>,
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
    /// ([`worker::RX_QUEUE_CAP`](super::worker::RX_QUEUE_CAP); tests lower it).
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
        query::flush(&self.cm, self as *const Device as usize);
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

/// The attribute ID of an encoded MAD.
pub fn mad_attr_id(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}
