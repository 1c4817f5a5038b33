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
//! sender's slice binds those to the sender's own connections.
//! docs/ibcmd.md has this as a table.

use std::collections::{HashMap, VecDeque};

use crate::transport::{IdSlice, MadAddr};
use crate::wire::mra::CM_MRA_MESSAGE_MRAED;
use crate::wire::rej::CM_REJ_MESSAGE_REJECTED;
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

/// The requests routed to one process that it may still answer, the oldest
/// forgotten beyond [`Self::MAX`] (a requester whose REQ was forgotten
/// retransmits it, which routes it again).
#[derive(Default)]
pub(super) struct RoutedRequests {
    /// Each open request → the LocalCommID of the REP the process answered
    /// it with, once it did (its retransmissions must carry the same), and
    /// its place in `order`.
    open: HashMap<RequestKey, (u64, Option<u32>)>,
    /// Oldest first; an entry whose sequence number no longer matches
    /// `open` was answered or routed again since, and is skipped.
    order: VecDeque<(RequestKey, u64)>,
    next: u64,
}

impl RoutedRequests {
    /// More requests in progress than a server answers at once (an
    /// all-to-all of 128 hosts x 64 processes sends one process 8,191
    /// REQs), and a bound on what a flood of REQs from the wire makes the
    /// daemon keep: about 80 bytes each, 1.3 MiB per process.
    pub(super) const MAX: usize = 1 << 14;

    /// A request routed to the process (again: a retransmission keeps what
    /// the process answered).
    pub(super) fn insert(&mut self, id: u32, from: Peer) {
        let key = (id, from);
        if self.open.contains_key(&key) {
            return;
        }
        let seq = self.next;
        self.next += 1;
        self.open.insert(key, (seq, None));
        self.order.push_back((key, seq));
        while self.open.len() > Self::MAX {
            match self.order.pop_front() {
                Some((old, seq)) if self.is_live(old, seq) => {
                    self.open.remove(&old);
                }
                Some(_) => {}
                None => break,
            }
        }
        // Entries of requests closed since: dropped once they are half of
        // `order`, so it stays within twice the bound, at O(1) a request.
        if self.order.len() > 2 * Self::MAX {
            let open = &self.open;
            self.order
                .retain(|(key, seq)| open.get(key).is_some_and(|(s, _)| s == seq));
        }
    }

    fn is_live(&self, key: RequestKey, seq: u64) -> bool {
        self.open.get(&key).is_some_and(|(s, _)| *s == seq)
    }

    /// What the process answered request `id` from `to` with: `None` when
    /// it is not open, `Some(None)` before any REP, `Some(Some(local))`
    /// after its REP of comm ID `local`.
    fn answered(&self, id: u32, to: Peer) -> Option<Option<u32>> {
        self.open.get(&(id, to)).map(|(_, rep)| *rep)
    }

    /// The request is over for the process (rejected, established, one
    /// SIDR_REP): no answer that the requester matches by its comm ID alone
    /// may follow.
    pub(super) fn close(&mut self, id: u32, from: Peer) {
        self.open.remove(&(id, from));
    }

    fn rep_sent(&mut self, id: u32, to: Peer, local: u32) {
        if let Some((_, rep)) = self.open.get_mut(&(id, to)) {
            *rep = Some(local);
        }
    }

    /// How many are open (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.open.len()
    }

    /// How many places `order` holds, stale ones included (tests).
    #[cfg(test)]
    pub(super) fn order_len(&self) -> usize {
        self.order.len()
    }
}

/// What a process may answer: its slice and the requests routed to it.
pub(super) struct Sender<'a> {
    pub slice: IdSlice,
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
    /// A REP whose LocalCommID differs from the REP the sender already
    /// answered that request with.
    OtherRep,
    /// A MessageRejected / MessageMRAed value with no meaning (3): the
    /// remote drops it.
    BadMessageX,
    /// Not a CM attribute a process sends.
    Unknown,
}

impl Refusal {
    /// Spoofed (`tx_spoofed`), or just not something the switch carries
    /// (`tx_refused`).
    pub(super) fn is_spoof(self) -> bool {
        !matches!(self, Refusal::Unknown)
    }

    pub(super) fn why(self) -> &'static str {
        match self {
            Refusal::NotInSlice => "its comm ID is not in its slice",
            Refusal::NotRoutedHere => {
                "it answers a request the daemon did not route to it from that address"
            }
            Refusal::OtherRep => "it answered that request with another comm ID before",
            Refusal::BadMessageX => "its MessageRejected/MessageMRAed is 3",
            Refusal::Unknown => "not a CM message a process sends",
        }
    }
}

/// Whether `sender` may send the CM MAD `mad` from `port` to `addr`; when it
/// may, what it changes is recorded (a REP binds its comm ID, a REJ of a
/// REQ and a SIDR_REP end the request).
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
    // A request routed here from `to` that no REP has answered yet.
    let unanswered = |reqs: &RoutedRequests| match reqs.answered(remote, to) {
        Some(None) => Ok(()),
        _ => Err(Refusal::NotRoutedHere),
    };
    match attr_id(mad) {
        attr::REQ | attr::RTU | attr::DREQ | attr::DREP | attr::LAP | attr::APR => {
            slice_only(local)
        }
        attr::SIDR_REQ => slice_only(local),
        attr::REP => {
            slice_only(local)?;
            match sender.reqs.answered(remote, to) {
                None => Err(Refusal::NotRoutedHere),
                Some(Some(earlier)) if earlier != local => Err(Refusal::OtherRep),
                Some(_) => {
                    sender.reqs.rep_sent(remote, to, local);
                    Ok(())
                }
            }
        }
        attr::MRA => match CM_MRA_MESSAGE_MRAED.get(mad) {
            MSG_REQ => {
                unanswered(sender.reqs)?;
                slice_only(local)
            }
            MSG_REP | MSG_OTHER => slice_only(local),
            _ => Err(Refusal::BadMessageX),
        },
        attr::REJ => match CM_REJ_MESSAGE_REJECTED.get(mad) {
            // From REQ_RCVD the engine sends LocalCommID 0 (the kernel's
            // cm_format_rej), from MRA_REQ_SENT its own; a stateless REJ
            // of a REQ (stale connection) the REQ's RemoteCommID, 0.
            MSG_REQ => {
                unanswered(sender.reqs)?;
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
            if sender.sidr_reqs.answered(local, to).is_none() {
                return Err(Refusal::NotRoutedHere);
            }
            sender.sidr_reqs.close(local, to);
            Ok(())
        }
        _ => Err(Refusal::Unknown),
    }
}
