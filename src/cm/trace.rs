//! What `IBCM_LOG=info|debug` says (the kernel's ib_cm tracepoints,
//! include/trace/events/ib_cm.h, as lines on stderr). One line per event, in
//! the format ib_cm(7) documents, stable for grep:
//!
//! ```text
//! info:  id 0x<local>/0x<remote> <dev>:<port> OLD -> NEW (<why>)
//! info:  id 0x<local>/0x<remote> <dev> event <EVENT> (state <STATE>)
//! info:  id 0x<local>/0x<remote> <dev>:<port> retry <ATTR> (<n> left)
//! info:  id 0x<local>/0x<remote> <dev>:<port> timeout <ATTR>
//! info:  drop <ATTR> tid 0x<tid> <ids> port <port> from <peer> len <len> on <dev>: <reason>
//! info:  unsent <ATTR> tid 0x<tid> <ids> port <port> to <peer> len <len> on <dev>: errno <n>
//! debug: send|recv <ATTR> tid 0x<tid> <ids> port <port> to|from <peer> len <len> on <dev>
//! ```
//!
//! `<ids>` is `local 0x… remote 0x…` (the MAD's two comm IDs, host order),
//! or `request 0x…` for SIDR. A line about a MAD sent, and the sender's
//! state change, are written before the MAD goes to the transport: on the
//! in-process fabric the peer's worker may take it at once, and its lines
//! must not come first. Every function here is called behind the
//! `ibcm_log!` level check, so nothing is formatted below the level; they
//! read what they print from the MAD and the id's public fields, take no
//! lock and do not allocate.

use std::fmt;
use std::net::Ipv6Addr;
use std::sync::atomic::Ordering;

use super::event::CmEvent;
use super::id::{CmIdPriv, Locked};
use crate::abi::{ib_cm_event_type, ib_cm_state};
use crate::errno::Errno;
use crate::ibcm_log;
use crate::transport::MadAddr;
use crate::wire::{Mad, attr};

/// `id 0x<local>/0x<remote>`, from the C-visible fields (readable without
/// the id lock).
pub struct CommIds<'a>(pub &'a CmIdPriv);

impl fmt::Display for CommIds<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.0.public;
        let local = u32::from_be(p.local_id.load(Ordering::Relaxed));
        let remote = u32::from_be(p.remote_id.load(Ordering::Relaxed));
        write!(f, "id {local:#010x}/{remote:#010x}")
    }
}

/// `id 0x…/0x… <dev>:<port>` of a locked id.
struct IdOnPort<'a, 'b>(&'a Locked<'b>);

impl fmt::Display for IdOnPort<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self.0;
        let dev = &l.id.device.name;
        write!(f, "{} {dev}:{}", CommIds(l.id), l.inner.av.port_num)
    }
}

/// A state change (`Locked::set_state`).
pub fn state_change(l: &Locked, old: ib_cm_state, new: ib_cm_state, why: &str) {
    ibcm_log!(
        Info,
        "{} {} -> {} ({why})",
        IdOnPort(l),
        state_name(old),
        state_name(new)
    );
}

/// An event about to be handed to the id's handler.
pub fn event(id: &CmIdPriv, event: &CmEvent) {
    ibcm_log!(
        Info,
        "{} {} event {} (state {})",
        CommIds(id),
        id.device.name,
        event_name(event.event),
        state_name(id.state())
    );
}

/// The tracked MAD is sent again (`timeout_sends`).
pub fn retry(l: &Locked, attr_id: u16, retries_left: u8) {
    ibcm_log!(
        Info,
        "{} retry {} ({retries_left} left)",
        IdOnPort(l),
        attr::name(attr_id)
    );
}

/// The tracked MAD went unanswered, or a retry of it could not be sent
/// (`IB_WC_RESP_TIMEOUT_ERR`).
pub fn timeout(l: &Locked, mad: &Mad) {
    ibcm_log!(Info, "{} timeout {}", IdOnPort(l), attr::name(attr_id(mad)));
}

/// Which way a MAD went.
#[derive(Clone, Copy)]
pub enum Dir {
    Send,
    Recv,
}

/// A MAD sent or received.
pub fn mad(dir: Dir, dev: &str, port: u8, peer: &MadAddr, mad: &[u8]) {
    let (verb, to) = match dir {
        Dir::Send => ("send", "to"),
        Dir::Recv => ("recv", "from"),
    };
    ibcm_log!(
        Debug,
        "{verb} {} {to} {} len {} on {dev}",
        MadSummary(mad, port),
        Peer(peer),
        mad.len()
    );
}

/// A MAD whose `send` line was written, refused by the transport.
pub fn unsent(dev: &str, port: u8, peer: &MadAddr, mad: &[u8], err: Errno) {
    ibcm_log!(
        Info,
        "unsent {} to {} len {} on {dev}: errno {}",
        MadSummary(mad, port),
        Peer(peer),
        mad.len(),
        err.0
    );
}

/// A received MAD dropped, and why.
pub fn dropped(dev: &str, port: u8, peer: &MadAddr, mad: &[u8], reason: &dyn fmt::Display) {
    ibcm_log!(
        Info,
        "drop {} from {} len {} on {dev}: {reason}",
        MadSummary(mad, port),
        Peer(peer),
        mad.len()
    );
}

/// `<ATTR> tid 0x… <ids> port <port>`, read from the raw bytes (a MAD too
/// short for a field shows it as 0).
struct MadSummary<'a>(&'a [u8], u8);

impl fmt::Display for MadSummary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mad, port) = (self.0, self.1);
        let be32 = |at: usize| {
            mad.get(at..at + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let attr_id = mad
            .get(16..18)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
        let tid = (u64::from(be32(8)) << 32) | u64::from(be32(12));
        write!(f, "{} tid {tid:#018x} ", attr::name(attr_id))?;
        // Every CM message starts with its comm IDs (MAD offset 24: local,
        // 28: remote); SIDR's carry one request ID instead.
        match attr_id {
            attr::SIDR_REQ | attr::SIDR_REP => write!(f, "request {:#010x}", be32(24))?,
            _ => write!(f, "local {:#010x} remote {:#010x}", be32(24), be32(28))?,
        }
        write!(f, " port {port}")
    }
}

/// The peer: its GID when the MAD has a GRH, else its LID.
struct Peer<'a>(&'a MadAddr);

impl fmt::Display for Peer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0;
        if a.grh {
            write!(f, "{}", Ipv6Addr::from(a.dgid))
        } else {
            write!(f, "lid {:#06x}", a.dlid)
        }
    }
}

fn attr_id(mad: &Mad) -> u16 {
    super::device::mad_attr_id(mad)
}

/// A state's name as the kernel's tracepoints print it (`IB_CM_` dropped).
pub fn state_name(s: ib_cm_state) -> &'static str {
    use ib_cm_state::*;
    match s {
        IB_CM_IDLE => "IDLE",
        IB_CM_LISTEN => "LISTEN",
        IB_CM_REQ_SENT => "REQ_SENT",
        IB_CM_REQ_RCVD => "REQ_RCVD",
        IB_CM_MRA_REQ_SENT => "MRA_REQ_SENT",
        IB_CM_MRA_REQ_RCVD => "MRA_REQ_RCVD",
        IB_CM_REP_SENT => "REP_SENT",
        IB_CM_REP_RCVD => "REP_RCVD",
        IB_CM_MRA_REP_SENT => "MRA_REP_SENT",
        IB_CM_MRA_REP_RCVD => "MRA_REP_RCVD",
        IB_CM_ESTABLISHED => "ESTABLISHED",
        IB_CM_DREQ_SENT => "DREQ_SENT",
        IB_CM_DREQ_RCVD => "DREQ_RCVD",
        IB_CM_TIMEWAIT => "TIMEWAIT",
        IB_CM_SIDR_REQ_SENT => "SIDR_REQ_SENT",
        IB_CM_SIDR_REQ_RCVD => "SIDR_REQ_RCVD",
    }
}

/// An event's name without `IB_CM_`.
pub fn event_name(e: ib_cm_event_type) -> &'static str {
    use ib_cm_event_type::*;
    match e {
        IB_CM_REQ_ERROR => "REQ_ERROR",
        IB_CM_REQ_RECEIVED => "REQ_RECEIVED",
        IB_CM_REP_ERROR => "REP_ERROR",
        IB_CM_REP_RECEIVED => "REP_RECEIVED",
        IB_CM_RTU_RECEIVED => "RTU_RECEIVED",
        IB_CM_USER_ESTABLISHED => "USER_ESTABLISHED",
        IB_CM_DREQ_ERROR => "DREQ_ERROR",
        IB_CM_DREQ_RECEIVED => "DREQ_RECEIVED",
        IB_CM_DREP_RECEIVED => "DREP_RECEIVED",
        IB_CM_TIMEWAIT_EXIT => "TIMEWAIT_EXIT",
        IB_CM_MRA_RECEIVED => "MRA_RECEIVED",
        IB_CM_REJ_RECEIVED => "REJ_RECEIVED",
        IB_CM_LAP_ERROR => "LAP_ERROR",
        IB_CM_LAP_RECEIVED => "LAP_RECEIVED",
        IB_CM_APR_RECEIVED => "APR_RECEIVED",
        IB_CM_SIDR_REQ_ERROR => "SIDR_REQ_ERROR",
        IB_CM_SIDR_REQ_RECEIVED => "SIDR_REQ_RECEIVED",
        IB_CM_SIDR_REP_RECEIVED => "SIDR_REP_RECEIVED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::new_mad;

    #[test]
    fn a_mad_summary_names_the_attribute_tid_and_comm_ids() {
        let mut mad = new_mad(attr::DREQ, 0x1122_3344_5566_7788, 0);
        mad[24..28].copy_from_slice(&0x1a2b_3c4du32.to_be_bytes());
        mad[28..32].copy_from_slice(&0x5566_7788u32.to_be_bytes());
        assert_eq!(
            MadSummary(&mad, 1).to_string(),
            "DREQ tid 0x1122334455667788 local 0x1a2b3c4d remote 0x55667788 port 1"
        );
        let mut sidr = new_mad(attr::SIDR_REQ, 7, 0);
        sidr[24..28].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(
            MadSummary(&sidr, 2).to_string(),
            "SIDR_REQ tid 0x0000000000000007 request 0x00000009 port 2"
        );
    }

    #[test]
    fn a_short_mad_is_summarised_without_panicking() {
        assert_eq!(
            MadSummary(&[1, 7, 2, 3], 1).to_string(),
            "unknown tid 0x0000000000000000 local 0x00000000 remote 0x00000000 port 1"
        );
    }

    #[test]
    fn the_peer_is_a_gid_with_a_grh_else_a_lid() {
        let mut a = MadAddr {
            dlid: 2,
            ..MadAddr::default()
        };
        assert_eq!(Peer(&a).to_string(), "lid 0x0002");
        a.grh = true;
        a.dgid[0] = 0xfe;
        a.dgid[1] = 0x80;
        a.dgid[15] = 1;
        assert_eq!(Peer(&a).to_string(), "fe80::1");
    }
}
