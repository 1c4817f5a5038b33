//! Which MADs of a process behind ibcmd may go straight to the port with its
//! send-only agent, and which must go through the daemon's socket
//! (docs/ibcmd.md, "Sending: straight to the port when the process may").
//!
//! Two paths to one port may reorder what they carry: a MAD posted to the
//! daemon waits for the daemon to read it, a direct one leaves at once. The
//! kernel sends every CM MAD of a port through one agent, in order, so one
//! case matters: a passive side that sends its REP (through the daemon),
//! establishes with `ib_cm_notify(IB_EVENT_COMM_EST)` and sends a DREQ at
//! once. Were the DREQ to overtake the REP, a kernel peer still in REQ_SENT
//! would answer it with a stateless DREP and then accept the REP: a
//! connection open on one side only. So the MADs of a connection whose REP
//! went through the daemon follow it there until the peer has sent a MAD
//! for that connection (it has the REP then).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::wire::{MAD_HDR_SIZE, MGMT_CLASS_CM, Mad, attr};

/// Connections kept in order before old entries are looked at: the peers of
/// connections established with COMM_EST that never answer leave theirs.
const AWAITING_PRUNE_AT: usize = 4096;
/// An entry this old is dropped when pruning: the daemon wrote its REP long
/// before (it reads each process's socket as soon as it can).
const AWAITING_MAX_AGE: Duration = Duration::from_secs(60);

fn attr_id(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

/// The sender's comm ID (a SIDR_REQ's request ID): the first word of every
/// CM message.
fn local_comm_id(mad: &Mad) -> u32 {
    u32::from_be_bytes(
        mad[MAD_HDR_SIZE..MAD_HDR_SIZE + 4]
            .try_into()
            .expect("4 bytes"),
    )
}

/// The receiver's comm ID, the second word of every CM message but a REQ's
/// and a SIDR's.
fn remote_comm_id(mad: &Mad) -> u32 {
    u32::from_be_bytes(
        mad[MAD_HDR_SIZE + 4..MAD_HDR_SIZE + 8]
            .try_into()
            .expect("4 bytes"),
    )
}

/// The CM MADs a process may send itself once announced: not the MADs the
/// daemon keeps track of (a REP or REJ ends the daemon's memory of a REQ it
/// routed here, which it otherwise rejects when this process dies; a
/// SIDR_REP is allowed only for a SIDR_REQ it routed here), nor SA queries
/// (they get the daemon's TID), nor anything the engine does not send.
pub(super) fn goes_direct(mad: &Mad) -> bool {
    mad[1] == MGMT_CLASS_CM
        && matches!(
            attr_id(mad),
            attr::REQ
                | attr::MRA
                | attr::RTU
                | attr::DREQ
                | attr::DREP
                | attr::LAP
                | attr::APR
                | attr::SIDR_REQ
        )
}

fn is_cm(mad: &Mad, attr_id_: u16) -> bool {
    mad[1] == MGMT_CLASS_CM && attr_id(mad) == attr_id_
}

/// What the transport knows of where its MADs went.
#[derive(Default)]
pub(super) struct DirectRoute {
    /// The daemon has carried a MAD with a comm ID of this process's slice,
    /// so it knows the slice was seen by peers (a timewait when the process
    /// leaves): until then every MAD goes through it.
    announced: AtomicBool,
    /// Local comm IDs whose REP went through the daemon, and when, until
    /// the peer sends a MAD for the connection or this side rejects it.
    awaiting_peer: Mutex<HashMap<u32, Instant>>,
    /// `awaiting_peer.len()`, read without the lock by every send and
    /// receipt (zero on a side that sends no REPs).
    awaiting: AtomicUsize,
}

impl DirectRoute {
    /// Whether `mad` may go straight to the port rather than through the
    /// daemon.
    pub(super) fn may_go_direct(&self, mad: &Mad) -> bool {
        goes_direct(mad)
            && self.announced.load(Ordering::Acquire)
            && (attr_id(mad) == attr::SIDR_REQ
                || attr_id(mad) == attr::REQ
                || self.awaiting.load(Ordering::Acquire) == 0
                || !self.awaiting_peer.lock().contains_key(&local_comm_id(mad)))
    }

    /// `mad` was posted to the daemon.
    pub(super) fn sent_through_daemon(&self, mad: &Mad) {
        if goes_direct(mad) || is_cm(mad, attr::REP) {
            self.announced.store(true, Ordering::Release);
        }
        if is_cm(mad, attr::REP) {
            let mut awaiting = self.awaiting_peer.lock();
            if awaiting.len() >= AWAITING_PRUNE_AT {
                awaiting.retain(|_, sent| sent.elapsed() < AWAITING_MAX_AGE);
            }
            awaiting.insert(local_comm_id(mad), Instant::now());
            self.awaiting.store(awaiting.len(), Ordering::Release);
        } else if is_cm(mad, attr::REJ) {
            self.forget(local_comm_id(mad));
        }
    }

    /// `mad` came from the daemon: a MAD of the peer for a connection whose
    /// REP it has.
    pub(super) fn received(&self, mad: &Mad) {
        if mad[1] == MGMT_CLASS_CM
            && !matches!(attr_id(mad), attr::REQ | attr::SIDR_REQ | attr::SIDR_REP)
        {
            self.forget(remote_comm_id(mad));
        }
    }

    fn forget(&self, comm_id: u32) {
        if self.awaiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut awaiting = self.awaiting_peer.lock();
        awaiting.remove(&comm_id);
        self.awaiting.store(awaiting.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::new_mad;

    fn cm(attr_id: u16, local: u32, remote: u32) -> Mad {
        let mut mad = new_mad(attr_id, 1, 0);
        mad[MAD_HDR_SIZE..MAD_HDR_SIZE + 4].copy_from_slice(&local.to_be_bytes());
        mad[MAD_HDR_SIZE + 4..MAD_HDR_SIZE + 8].copy_from_slice(&remote.to_be_bytes());
        mad
    }

    #[test]
    fn direct_sends_leave_the_daemon_what_it_keeps_track_of() {
        for a in [
            attr::REQ,
            attr::MRA,
            attr::RTU,
            attr::DREQ,
            attr::DREP,
            attr::LAP,
            attr::APR,
            attr::SIDR_REQ,
        ] {
            assert!(goes_direct(&new_mad(a, 1, 0)), "{a:#x} goes direct");
        }
        for a in [
            attr::REP,
            attr::REJ,
            attr::SIDR_REP,
            attr::CLASS_PORT_INFO,
            0x0020,
        ] {
            assert!(!goes_direct(&new_mad(a, 1, 0)), "{a:#x} through the daemon");
        }
        // An SA query (class 0x03) with the attribute number of a REQ.
        let mut sa = new_mad(attr::REQ, 1, 0);
        sa[1] = crate::sa::MGMT_CLASS_SA;
        assert!(!goes_direct(&sa));
    }

    #[test]
    fn nothing_goes_direct_before_the_daemon_carried_a_mad_of_the_slice() {
        let route = DirectRoute::default();
        assert!(!route.may_go_direct(&cm(attr::REQ, 7, 0)));
        // A SIDR_REP announces nothing (its request ID is the peer's).
        route.sent_through_daemon(&cm(attr::SIDR_REP, 9, 0));
        assert!(!route.may_go_direct(&cm(attr::REQ, 7, 0)));
        route.sent_through_daemon(&cm(attr::REQ, 7, 0));
        assert!(route.may_go_direct(&cm(attr::REQ, 8, 0)));
        assert!(route.may_go_direct(&cm(attr::DREQ, 7, 70)));
    }

    /// The reordering above: REP, COMM_EST, DREQ on the passive side.
    #[test]
    fn a_dreq_after_a_rep_the_peer_has_not_answered_follows_it_through_the_daemon() {
        let route = DirectRoute::default();
        route.sent_through_daemon(&cm(attr::REP, 5, 50));
        assert!(
            !route.may_go_direct(&cm(attr::DREQ, 5, 50)),
            "behind its REP"
        );
        assert!(
            !route.may_go_direct(&cm(attr::LAP, 5, 50)),
            "behind its REP"
        );
        assert!(
            route.may_go_direct(&cm(attr::DREQ, 6, 60)),
            "another connection"
        );
        assert!(
            route.may_go_direct(&cm(attr::REQ, 5, 0)),
            "a REQ has no REP before it"
        );
        // A REQ from the peer (its comm ID 50, remote 0) says nothing of the REP.
        route.received(&cm(attr::REQ, 50, 0));
        assert!(!route.may_go_direct(&cm(attr::DREQ, 5, 50)));
        // The peer's RTU: it has the REP.
        route.received(&cm(attr::RTU, 50, 5));
        assert!(route.may_go_direct(&cm(attr::DREQ, 5, 50)));
        assert_eq!(route.awaiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_rej_after_the_rep_or_any_mad_of_the_peer_ends_the_wait() {
        let route = DirectRoute::default();
        route.sent_through_daemon(&cm(attr::REP, 5, 50));
        route.sent_through_daemon(&cm(attr::REP, 6, 60));
        route.sent_through_daemon(&cm(attr::REJ, 5, 50));
        assert!(route.may_go_direct(&cm(attr::DREQ, 5, 50)));
        // An MRA of the REP from the peer.
        route.received(&cm(attr::MRA, 60, 6));
        assert!(route.may_go_direct(&cm(attr::DREQ, 6, 60)));
        assert_eq!(route.awaiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn connections_whose_peer_never_answers_are_not_kept_for_ever() {
        let route = DirectRoute::default();
        for id in 0..AWAITING_PRUNE_AT as u32 {
            route.sent_through_daemon(&cm(attr::REP, id, 0));
        }
        // Make them all old.
        for sent in route.awaiting_peer.lock().values_mut() {
            let Some(old) = sent.checked_sub(AWAITING_MAX_AGE) else {
                return; // the monotonic clock is younger than that: cannot age them
            };
            *sent = old;
        }
        route.sent_through_daemon(&cm(attr::REP, 1 << 20, 0));
        assert_eq!(route.awaiting.load(Ordering::Relaxed), 1);
        assert!(!route.may_go_direct(&cm(attr::DREQ, 1 << 20, 0)));
        assert!(route.may_go_direct(&cm(attr::DREQ, 3, 0)));
    }
}
