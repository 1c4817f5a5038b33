//! Received MADs: checked, then dispatched by attribute (`cm_recv_handler`).

use std::sync::Arc;
use std::time::Instant;

use std::sync::atomic::Ordering;

use super::counters::Counter;
use super::device::Device;
use super::id::CmIdPriv;
use super::trace::{self, Dir};
use super::{apr, drep, dreq, lap, mra, rej, rep, req, rtu, sidr};
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
    pub mad: Arc<Mad>,
    /// When the transport handed it to the engine, not when the worker took
    /// it: what tells a peer's retransmission from the fabric's copy
    /// (`mra::PeerMsg`) when the worker was held meanwhile.
    pub arrived: Instant,
}

impl Received {
    /// `cm_get_bth_pkey()`: the P_Key of the packet this came in, from the
    /// port's table at the index it arrived with (`None` if the index is
    /// not in the table).
    pub fn bth_pkey(&self) -> Option<u16> {
        let port = self.device.port(self.port).ok()?;
        port.pkeys.get(usize::from(self.addr.pkey_index)).copied()
    }

    /// Sends `mad` back to where this MAD came from (`cm_alloc_response_msg`).
    pub fn reply(&self, mad: &Mad) {
        // A lost reply is what the wire does too; the peer retries.
        let _ = self.device.send(self.port, &self.addr, mad);
    }

    /// A reply to a retransmission (the kernel's `CM_DIRECT_RETRY_CTX`): the
    /// kernel books it as a message plus one retry, and so does this.
    /// Whether it was sent.
    pub fn reply_to_retry(&self, mad: &Mad) -> bool {
        let sent = self.device.send(self.port, &self.addr, mad).is_ok();
        if sent {
            let attr_id = super::device::mad_attr_id(mad);
            self.device.count(self.port, Counter::TxMsgs, attr_id);
            self.device.count(self.port, Counter::TxRetries, attr_id);
        }
        sent
    }

    /// Counts this MAD as a duplicate (`cm_rx_duplicates`).
    pub fn duplicate(&self, attr_id: u16) {
        self.log_drop(&"duplicate");
        self.device.count(self.port, Counter::RxDuplicates, attr_id);
    }

    /// `cm_acquire_id()` in the tables of the engine this MAD came to.
    pub fn acquire_id(&self, local_id: u32, remote_id: u32) -> Option<Arc<CmIdPriv>> {
        self.device.cm.tables().acquire_id(local_id, remote_id)
    }

    /// Counts this MAD as dropped: no connection wants it (the kernel drops
    /// these silently).
    pub fn unmatched(&self) {
        self.log_drop(&"unmatched");
        self.count_unmatched();
    }

    /// Counts this MAD as dropped (unmatched): it names a connection, but
    /// not this side's QP.
    pub fn wrong_qpn(&self) {
        self.log_drop(&"wrong QPN");
        self.count_unmatched();
    }

    fn count_unmatched(&self) {
        if let Ok(c) = self.device.counters(self.port) {
            c.rx_unmatched.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts this request as dropped: its listener's backlog is full.
    pub fn listen_overflow(&self) {
        self.log_drop(&"listen backlog full");
        if let Ok(c) = self.device.counters(self.port) {
            c.rx_listen_overflows.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts this MAD as dropped: malformed.
    pub fn malformed(&self) {
        self.log_drop(&"malformed");
        malformed(&self.device, self.port);
    }

    fn log_drop(&self, reason: &dyn std::fmt::Display) {
        trace::dropped(
            &self.device.name,
            self.port,
            &self.addr,
            &self.mad[..],
            reason,
        );
    }
}

fn malformed(device: &Device, port: u8) {
    if let Ok(c) = device.counters(port) {
        c.rx_malformed.fetch_add(1, Ordering::Relaxed);
    }
}

/// Dispatches one received MAD. Anything that is not a well-formed CM MAD of a
/// handled attribute is dropped.
pub fn recv_handler(device: &Arc<Device>, port: u8, addr: MadAddr, mad: Arc<Mad>) {
    recv_handler_at(device, port, addr, mad, Instant::now());
}

/// [`recv_handler`] for a MAD that arrived at `arrived`.
pub fn recv_handler_at(
    device: &Arc<Device>,
    port: u8,
    addr: MadAddr,
    mad: Arc<Mad>,
    arrived: Instant,
) {
    if crate::pcap::enabled() {
        crate::pcap::record(&addr.dgid, &device.source_gid(port, addr.sgid_index), &mad);
    }
    trace::mad(Dir::Recv, &device.name, port, &addr, &mad[..]);
    let header = match parse_header(&mad[..]) {
        Ok((header, _)) => header,
        Err(e) => {
            trace::dropped(
                &device.name,
                port,
                &addr,
                &mad[..],
                &format_args!("malformed: {e}"),
            );
            malformed(device, port);
            return;
        }
    };
    device.count(port, Counter::RxMsgs, header.attr_id);
    let work = Received {
        device: device.clone(),
        port,
        addr,
        tid: header.tid,
        mad,
        arrived,
    };
    match header.attr_id {
        attr::REQ => req::req_handler(work),
        attr::REP => rep::rep_handler(work),
        attr::RTU => rtu::rtu_handler(work),
        attr::REJ => rej::rej_handler(work),
        attr::DREQ => dreq::dreq_handler(work),
        attr::DREP => drep::drep_handler(work),
        attr::MRA => mra::mra_handler(work),
        attr::SIDR_REQ => sidr::sidr_req_handler(work),
        attr::SIDR_REP => sidr::sidr_rep_handler(work),
        attr::LAP => lap::lap_handler(work),
        attr::APR => apr::apr_handler(work),
        _ => work.malformed(),
    }
}
