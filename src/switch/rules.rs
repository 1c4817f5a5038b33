//! What a tenant may send through the daemon: the identity every CM MAD
//! carries must be one the daemon gave that tenant (its slice of comm IDs)
//! or routed to it (a REQ or SIDR_REQ it received, from that address).
//!
//! The rule follows what the remote side's matching accepts (the kernel's
//! handlers in cm.c). A REP (`cm_rep_handler`), a REJ whose MessageRejected
//! is REQ and an MRA whose MessageMRAed is REQ (`cm_acquire_rejected_id`,
//! `cm_acquire_mraed_id`) are matched by the remote comm ID alone,
//! `cm_acquire_id(remote, 0)`: the requester's id does not know ours yet.
//! So they may answer only a request the daemon routed to the sender, and
//! only towards the address it came from. A SIDR_REP is matched by request
//! ID alone: the same. Everything else is matched by both comm IDs
//! (`cm_acquire_id(remote, local)`), or a REJ "timeout" by the ARI's node
//! GUID and its LocalCommID (`cm_find_remote_id`): a local comm ID in the
//! sender's slice binds those to the sender's own connections, and a REQ's
//! or REP's CA GUID (the peer's stale-connection key, with the QPN) and a
//! REJ "timeout"'s ARI must be the device's own node GUID; the QPN of a
//! REQ, a REP or a successful SIDR_REP (the other half of that key) must be
//! a QP of a process of the sender's user ([`check_qp`]).
//! docs/ibcmd.md has this as a table.

use std::collections::{HashMap, VecDeque};
use std::io;

use super::qp_owner::QpOwner;
use crate::os::seqpacket::PeerCred;
use crate::transport::{IdSlice, MadAddr};
use crate::wire::mra::CM_MRA_MESSAGE_MRAED;
use crate::wire::rej::{CM_REJ_ARI, CM_REJ_MESSAGE_REJECTED, CM_REJ_REASON};
use crate::wire::rep::{CM_REP_LOCAL_CA_GUID, CM_REP_LOCAL_EE_CONTEXT_NUMBER, CM_REP_LOCAL_QPN};
use crate::wire::req::{CM_REQ_LOCAL_CA_GUID, CM_REQ_LOCAL_QPN};
use crate::wire::sidr_rep::{CM_SIDR_REP_QPN, CM_SIDR_REP_STATUS};
use crate::wire::{Mad, attr};

/// Offsets in a MAD (header included) of the comm IDs: LocalCommID (a
/// SIDR message's RequestID) and RemoteCommID.
pub(super) const LOCAL_COMM_ID: usize = 24;
pub(super) const REMOTE_COMM_ID: usize = 28;

/// MessageRejected / MessageMRAed: the message a REJ or MRA answers.
const MSG_REQ: u32 = 0;
const MSG_REP: u32 = 1;
const MSG_OTHER: u32 = 2;

/// Reads the big-endian u32 at `at`.
pub(super) fn be32(mad: &Mad, at: usize) -> u32 {
    u32::from_be_bytes(mad[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn attr_id(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

/// The far end a request came from, as an answer must address it: the port
/// it arrived on and the reply address's LID, and GID when it had a GRH
/// (RoCE, a routed path). The engine answers a REQ with exactly the address
/// it came with (`cm_init_av_for_response`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Peer {
    port: u8,
    dlid: u16,
    dgid: Option<[u8; 16]>,
}

impl Peer {
    pub(super) fn port(&self) -> u8 {
        self.port
    }

    pub(super) fn of(port: u8, addr: &MadAddr) -> Self {
        Self {
            port,
            dlid: addr.dlid,
            dgid: addr.grh.then_some(addr.dgid),
        }
    }
}

/// A request the daemon routed to a process, by the requester's comm ID (a
/// SIDR_REQ's request ID) and where it came from.
type RequestKey = (u32, Peer);

/// The requests routed to one process that it may still answer, kept per
/// requester address (a flood from one address, such as another tenant's
/// REQs through this host's own port, forgets only that address's oldest),
/// at most [`Self::PER_PEER`] from one address and [`Self::MAX`] in all (then
/// the oldest of the address with the most). A requester whose REQ was
/// forgotten retransmits it, which routes it again.
#[derive(Default)]
pub(super) struct RoutedRequests {
    /// Each open request → its place in its address's queue.
    open: HashMap<RequestKey, u64>,
    /// Per requester address, oldest first; an entry whose sequence number
    /// no longer matches `open` was closed or routed again since, skipped.
    order: HashMap<Peer, VecDeque<(u32, u64)>>,
    next: u64,
}

impl RoutedRequests {
    /// More requests in progress than a server answers at once (an
    /// all-to-all of 128 hosts x 64 processes sends one process 8,191
    /// REQs), and a bound on what a flood of REQs makes the daemon keep for
    /// one process: about 140 bytes each, 2.2 MiB. A user's processes
    /// together are bound by `Quotas::requests`.
    pub(super) const MAX: usize = 1 << 14;
    /// From one requester address: a host's processes' REQs to one server.
    pub(super) const PER_PEER: usize = 1 << 12;

    /// A request routed to the process (again: a retransmission changes
    /// nothing). Returns how many it holds now minus before
    /// (1, 0 for a retransmission, or less when it forgot some).
    pub(super) fn insert(&mut self, id: u32, from: Peer) -> isize {
        let key = (id, from);
        if self.open.contains_key(&key) {
            return 0;
        }
        let before = self.open.len();
        let seq = self.next;
        self.next += 1;
        self.open.insert(key, seq);
        let queue = self.order.entry(from).or_default();
        queue.push_back((id, seq));
        // A queue longer than its share is compacted (closed entries
        // dropped), then its oldest forgotten: at the share, each new
        // request from that address costs a pass over its 4,096 entries
        // (some microseconds), which only that address's flood pays.
        if queue.len() > Self::PER_PEER {
            let open = &mut self.open;
            queue.retain(|(id, s)| is_live(open, (*id, from), *s));
            while queue.len() > Self::PER_PEER {
                if let Some((old, _)) = queue.pop_front() {
                    open.remove(&(old, from));
                }
            }
        }
        while self.open.len() > Self::MAX {
            self.forget_oldest_of_the_busiest();
        }
        self.open.len() as isize - before as isize
    }

    /// Forgets the oldest open request from `from`.
    fn forget_oldest(&mut self, from: Peer) {
        let Some(queue) = self.order.get_mut(&from) else {
            return;
        };
        while let Some((id, seq)) = queue.pop_front() {
            if is_live(&self.open, (id, from), seq) {
                self.open.remove(&(id, from));
                break;
            }
        }
        if queue.is_empty() {
            self.order.remove(&from);
        }
    }

    /// Forgets the oldest request of the address with the most queued.
    pub(super) fn forget_oldest_of_the_busiest(&mut self) {
        let busiest = self
            .order
            .iter()
            .max_by_key(|(_, queue)| queue.len())
            .map(|(peer, _)| *peer);
        if let Some(peer) = busiest {
            let had = self.open.len();
            self.forget_oldest(peer);
            if self.open.len() == had {
                // Only closed entries were queued there.
                self.order.remove(&peer);
            }
        }
    }

    /// Whether request `id` from `from` is open.
    pub(super) fn is_open(&self, id: u32, from: Peer) -> bool {
        self.open.contains_key(&(id, from))
    }

    /// The request is over for the process (rejected, established, one
    /// SIDR_REP): no answer that the requester matches by its comm ID alone
    /// may follow. Its queue entry goes when it comes to the front.
    pub(super) fn close(&mut self, id: u32, from: Peer) {
        self.open.remove(&(id, from));
    }

    /// How many are open.
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    /// How many places the queues hold, closed ones included (tests).
    #[cfg(test)]
    pub(super) fn order_len(&self) -> usize {
        self.order.values().map(VecDeque::len).sum()
    }
}

/// Whether the queue entry (`key`, `seq`) is the request's current one.
fn is_live(open: &HashMap<RequestKey, u64>, key: RequestKey, seq: u64) -> bool {
    open.get(&key) == Some(&seq)
}

/// `IB_CM_REJ_TIMEOUT`: a REJ the peer matches by its ARI's node GUID.
const REJ_TIMEOUT: u32 = crate::abi::ib_cm_rej_reason::IB_CM_REJ_TIMEOUT as u32;

/// What a process may answer: its slice and the requests routed to it.
pub(super) struct Sender<'a> {
    pub slice: IdSlice,
    /// The node GUID of the device it sends from: the only CA GUID its REQs
    /// and REPs may carry, and the only one in its REJ "timeout"'s ARI.
    pub node_guid: u64,
    pub reqs: &'a mut RoutedRequests,
    pub sidr_reqs: &'a mut RoutedRequests,
}

/// Why a MAD of a process was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Its local comm ID (request ID) is not in the sender's slice.
    NotInSlice,
    /// It answers, by the requester's comm ID alone, a request that was not
    /// routed to the sender from that address, or that it may no longer
    /// answer that way.
    NotRoutedHere,
    /// A MessageRejected / MessageMRAed value with no meaning (3): the
    /// remote drops it.
    BadMessageX,
    /// A CA GUID (a REQ's or REP's LocalCAGUID, a REJ "timeout"'s ARI)
    /// that is not the device's: the peer keys stale-connection checks
    /// (`cm_match_req`, `cm_rep_handler`) and REJ "timeout"s
    /// (`cm_find_remote_id`) by it, so another host's GUID acts on the
    /// peer's connections to that host.
    OtherGuid,
    /// A QPN (a REQ's LocalQPN, a REP's LocalQPN or LocalEECN, a successful
    /// SIDR_REP's QPN) of a QP no process of the sender's user owns: the peer keys
    /// stale-connection checks by it, so another tenant's QPN makes the peer
    /// disconnect that tenant.
    NotItsQp(u32),
    /// Whose QP it names could not be asked of the kernel: refused, as
    /// nothing says it is the sender's.
    QpUnchecked(u32),
    /// Not a CM attribute a process sends.
    Unknown,
}

impl Refusal {
    /// Spoofed (`tx_spoofed`), or just not something the switch carries
    /// (`tx_refused`).
    pub(super) fn is_spoof(self) -> bool {
        !matches!(self, Refusal::Unknown | Refusal::QpUnchecked(_))
    }

    /// The QPN the refusal is about.
    pub(super) fn qpn(self) -> Option<u32> {
        match self {
            Refusal::NotItsQp(qpn) | Refusal::QpUnchecked(qpn) => Some(qpn),
            _ => None,
        }
    }

    pub(super) fn why(self) -> &'static str {
        match self {
            Refusal::NotInSlice => "its comm ID is not in its slice",
            Refusal::NotRoutedHere => {
                "it answers a request the daemon did not route to it from that address"
            }
            Refusal::BadMessageX => "its MessageRejected/MessageMRAed is 3",
            Refusal::OtherGuid => "it names a CA GUID that is not its device's",
            Refusal::NotItsQp(_) => "it names a QP that is not its user's",
            Refusal::QpUnchecked(_) => "the kernel could not say whose QP it names",
            Refusal::Unknown => "not a CM message a process sends",
        }
    }
}

/// Whether `sender` may send the CM MAD `mad` from `port` to `addr`; when it
/// may, what it changes is recorded (any REJ of the connection and a
/// SIDR_REP end the request).
pub(super) fn check_send(
    sender: Sender<'_>,
    port: u8,
    addr: &MadAddr,
    mad: &Mad,
) -> Result<(), Refusal> {
    let local = be32(mad, LOCAL_COMM_ID);
    let remote = be32(mad, REMOTE_COMM_ID);
    let to = Peer::of(port, addr);
    let in_slice = |id: u32| sender.slice.contains(id);
    let slice_only = |id: u32| {
        if in_slice(id) {
            Ok(())
        } else {
            Err(Refusal::NotInSlice)
        }
    };
    // A request routed here from `to` and still open. Which answers the
    // process gives it (a REP, again after a REP timeout from a new id, an
    // MRA, a REJ) is its own affair: only its own connection is at stake.
    let routed = |reqs: &RoutedRequests| {
        if reqs.is_open(remote, to) {
            Ok(())
        } else {
            Err(Refusal::NotRoutedHere)
        }
    };
    let own_guid = |guid: u64| {
        if guid == sender.node_guid {
            Ok(())
        } else {
            Err(Refusal::OtherGuid)
        }
    };
    match attr_id(mad) {
        attr::REQ => {
            slice_only(local)?;
            own_guid(CM_REQ_LOCAL_CA_GUID.get(mad))
        }
        attr::RTU | attr::DREQ | attr::DREP | attr::LAP | attr::APR => slice_only(local),
        attr::SIDR_REQ => slice_only(local),
        attr::REP => {
            slice_only(local)?;
            own_guid(CM_REP_LOCAL_CA_GUID.get(mad))?;
            routed(sender.reqs)
        }
        attr::MRA => match CM_MRA_MESSAGE_MRAED.get(mad) {
            MSG_REQ => {
                routed(sender.reqs)?;
                slice_only(local)
            }
            MSG_REP | MSG_OTHER => slice_only(local),
            _ => Err(Refusal::BadMessageX),
        },
        // A REJ "timeout" is matched by its ARI's node GUID and its
        // LocalCommID whatever its MessageRejected (cm_acquire_rejected_id).
        attr::REJ
            if CM_REJ_REASON.get(mad) == REJ_TIMEOUT
                && u64::from_be_bytes(CM_REJ_ARI.get(mad)[..8].try_into().expect("8 bytes"))
                    != sender.node_guid =>
        {
            Err(Refusal::OtherGuid)
        }
        attr::REJ => match CM_REJ_MESSAGE_REJECTED.get(mad) {
            // From REQ_RCVD the engine sends LocalCommID 0 (the kernel's
            // cm_format_rej), from MRA_REQ_SENT its own; a stateless REJ
            // of a REQ (stale connection) the REQ's RemoteCommID, 0.
            MSG_REQ => {
                routed(sender.reqs)?;
                if local != 0 {
                    slice_only(local)?;
                }
                sender.reqs.close(remote, to);
                Ok(())
            }
            MSG_REP | MSG_OTHER => {
                slice_only(local)?;
                // Its REJ of the connection ends what it may answer.
                sender.reqs.close(remote, to);
                Ok(())
            }
            _ => Err(Refusal::BadMessageX),
        },
        attr::SIDR_REP => {
            if !sender.sidr_reqs.is_open(local, to) {
                return Err(Refusal::NotRoutedHere);
            }
            sender.sidr_reqs.close(local, to);
            Ok(())
        }
        _ => Err(Refusal::Unknown),
    }
}

/// `IB_SIDR_SUCCESS`: the only SIDR_REP status whose QPN means something.
const SIDR_SUCCESS: u32 = 0;

/// The QPNs a CM MAD names as its sender's own: a REQ's LocalQPN, a
/// successful SIDR_REP's QPN (the requester sends datagrams to it), and a
/// REP's LocalQPN and LocalEECN: the peer keys its connection by the
/// LocalEECN when it is an XRC initiator, by the LocalQPN otherwise
/// (`cm_rep_get_qpn`), and the daemon does not know which it is. An XRC
/// target's REP leaves its LocalQPN 0 (`cm_format_rep`); a REP with both 0
/// names QPN 0, nobody's.
pub(super) fn named_qpns(mad: &Mad) -> impl Iterator<Item = u32> {
    let named = match attr_id(mad) {
        attr::REQ => [Some(CM_REQ_LOCAL_QPN.get(mad)), None],
        attr::REP => {
            let qpn = CM_REP_LOCAL_QPN.get(mad);
            let eecn = CM_REP_LOCAL_EE_CONTEXT_NUMBER.get(mad);
            [
                (qpn != 0 || eecn == 0).then_some(qpn),
                (eecn != 0).then_some(eecn),
            ]
        }
        attr::SIDR_REP if CM_SIDR_REP_STATUS.get(mad) == SIDR_SUCCESS => {
            [Some(CM_SIDR_REP_QPN.get(mad)), None]
        }
        _ => [None, None],
    };
    named.into_iter().flatten()
}

/// Whether process `cred` may name QP `qpn`, owned by `owner`: a QP of a
/// process of its user (its own, or one its user could act for anyway), and
/// none of the kernel's. Not by PID: `cred.pid` is the process that
/// connected, which may have exited since (its socket inherited by a child)
/// and its PID gone to a process of another user. A lookup that failed
/// refuses: nothing says the QP is the sender's.
pub(super) fn check_qp(
    cred: PeerCred,
    qpn: u32,
    owner: io::Result<QpOwner>,
) -> Result<(), Refusal> {
    match owner {
        Ok(QpOwner::Process { uid, .. }) if uid == cred.uid => Ok(()),
        Ok(_) => Err(Refusal::NotItsQp(qpn)),
        Err(_) => Err(Refusal::QpUnchecked(qpn)),
    }
}
