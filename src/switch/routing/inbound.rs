//! Received MADs: which process each is for, and what the daemon answers itself.

use super::{
    ClientId, REJ_INVALID_SERVICE_ID, Recipient, Route, SERVICE_ID_OF_REQ, SIDR_UNSUPPORTED, Slice,
    State, Switch, SwitchCounter,
};
use crate::ibcm_log;
use crate::switch::proto::ToClient;
use crate::switch::rules::{LOCAL_COMM_ID, Peer, REMOTE_COMM_ID, be32};
use crate::transport::MadAddr;
use crate::wire::sa::MGMT_CLASS_SA;
use crate::wire::{Drep, Mad, MsgResponse, Rej, SidrRep, attr, parse_header};

/// What a MAD received on `device` `port` that no process got was: the
/// warning `Switch::count_loss` gives.
fn lost_inbound(device: &str, port: u8, mad: &Mad, e: std::io::Error) -> String {
    format!(
        "a {} received on {device} port {port} was lost, its process's socket refused it: {e}",
        attr::name(u16::from_be_bytes([mad[16], mad[17]]))
    )
}

fn be64(mad: &Mad, at: usize) -> u64 {
    u64::from_be_bytes(mad[at..at + 8].try_into().expect("8 bytes"))
}

/// A REQ or SIDR_REQ its listener will get: what that process may answer
/// by the requester's comm ID alone (`rules`), towards `from`. At its
/// user's [`Quotas::requests`], the process's own oldest goes first (one
/// user's floods cost only its own processes).
///
/// [`Quotas::requests`]: super::Quotas::requests
fn remember_req(st: &mut State, device: &str, from: Peer, attr_id: u16, mad: &Mad, quota: usize) {
    let service_id = be64(mad, SERVICE_ID_OF_REQ);
    let Some(client) = st
        .listens
        .get(&(device.to_owned(), service_id))
        .filter(|l| l.port == 0 || l.port == from.port())
        .map(|l| l.client)
    else {
        return;
    };
    let Some(c) = st.clients.get_mut(&client) else {
        return;
    };
    let usage = st.users.entry(c.cred.uid).or_default();
    let held = c.reqs.len() + c.sidr_reqs.len();
    let received = match attr_id {
        attr::REQ => &mut c.reqs,
        _ => &mut c.sidr_reqs,
    };
    if received.is_open(be32(mad, LOCAL_COMM_ID), from) {
        return; // a retransmission: nothing new to keep
    }
    if usage.requests >= quota {
        // Its user's other processes may hold the quota: then this one
        // keeps none it cannot (its requesters retransmit).
        if received.len() == 0 {
            return;
        }
        received.forget_oldest_of_the_busiest();
    }
    received.insert(be32(mad, LOCAL_COMM_ID), from);
    let now = c.reqs.len() + c.sidr_reqs.len();
    usage.requests = (usage.requests + now).saturating_sub(held);
}

/// A REJ "timeout" with remote comm ID 0 arrived on `device` from `from`:
/// it goes to the process whose routed REQ it gives up (its LocalCommID,
/// from that address), which may not answer it after; nobody's is dropped.
fn rej_timeout_for_a_request(st: &mut State, device: &str, from: Peer, mad: &Mad) -> Route {
    let requester = be32(mad, LOCAL_COMM_ID);
    let Some(c) = st
        .clients
        .values_mut()
        .find(|c| c.device == device && c.reqs.is_open(requester, from))
    else {
        return Route::Drop;
    };
    c.reqs.close(requester, from);
    if let Some(usage) = st.users.get_mut(&c.cred.uid) {
        usage.requests = usage.requests.saturating_sub(1);
    }
    Route::To(Recipient::of(c), SwitchCounter::RxToOwner)
}

impl Switch {
    /// A MAD received on `device` `port`.
    pub fn inbound(&self, device: &str, port: u8, addr: MadAddr, mad: &Mad) {
        match self.route(device, port, addr, mad) {
            Route::To(to, counter) => {
                let msg = ToClient::Recv {
                    port,
                    addr,
                    mad: Box::new(*mad),
                };
                // Never wait for a process: a full socket loses the MAD, as
                // a full receive queue would; the sender retransmits.
                match to.conn.send(&msg.encode(), false) {
                    Ok(()) => self.count(counter),
                    Err(e) => self.count_client_loss(&to, || lost_inbound(device, port, mad, e)),
                }
            }
            Route::Answer(answer, counter) => {
                let transport = self.devices.read().get(device).map(|d| d.transport.clone());
                if let Some(t) = transport
                    && let Err(e) = t.send(port, &addr, &answer)
                {
                    ibcm_log!(
                        Warn,
                        "ibcmd: the {} answering a {} on {device} port {port} was not sent: {}",
                        attr::name(u16::from_be_bytes([answer[16], answer[17]])),
                        attr::name(u16::from_be_bytes([mad[16], mad[17]])),
                        std::io::Error::from_raw_os_error(e.0),
                    );
                }
                self.count(counter);
            }
            Route::Drop => self.count(SwitchCounter::RxDropped),
            Route::Done => {}
        }
    }

    fn route(&self, device: &str, port: u8, addr: MadAddr, mad: &Mad) -> Route {
        if mad[1] == MGMT_CLASS_SA {
            return self.route_sa_answer(&addr, mad);
        }
        let Ok((header, _)) = parse_header(mad) else {
            return Route::Drop;
        };
        let mut st = self.state.lock();
        let from = Peer::of(port, &addr);
        match header.attr_id {
            attr::REQ | attr::SIDR_REQ => {
                let quota = self.config.quotas.requests;
                remember_req(&mut st, device, from, header.attr_id, mad, quota);
            }
            // The REJ TIMEOUT of an active side destroyed in REQ_SENT names
            // no comm ID of ours (it never learnt it): the kernel finds the
            // id by the ARI's node GUID and the sender's comm ID
            // (cm_acquire_rejected_id). It is for the process its REQ was
            // routed to, and no other.
            attr::REJ if is_rej_timeout_for_nobody(mad) => {
                return rej_timeout_for_a_request(&mut st, device, from, mad);
            }
            // The requester has our REP (RTU), or gave up (REJ): its REQ may
            // no longer be answered by comm ID alone.
            attr::RTU | attr::REJ => self.end_req(&mut st, device, from, mad),
            _ => {}
        }
        let owner = |local_id: u32| {
            let Slice::Owned(client) = st.slices.get(self.slice_index(local_id))? else {
                return None;
            };
            let c = st.clients.get(client)?;
            (c.device == device).then(|| Route::To(Recipient::of(c), SwitchCounter::RxToOwner))
        };
        match header.attr_id {
            attr::REQ | attr::SIDR_REQ => {
                let service_id = be64(mad, SERVICE_ID_OF_REQ);
                let listener = st
                    .listens
                    .get(&(device.to_owned(), service_id))
                    .filter(|l| l.port == 0 || l.port == port)
                    .and_then(|l| st.clients.get(&l.client));
                match listener {
                    Some(c) => Route::To(Recipient::of(c), SwitchCounter::RxToListener),
                    None if header.attr_id == attr::REQ => no_listener_rej(mad, header.tid),
                    None => no_listener_sidr_rep(mad, header.tid, service_id),
                }
            }
            attr::SIDR_REP => owner(be32(mad, LOCAL_COMM_ID)).unwrap_or(Route::Drop),
            attr::REP | attr::RTU | attr::REJ | attr::MRA | attr::DREP | attr::LAP | attr::APR => {
                owner(be32(mad, REMOTE_COMM_ID)).unwrap_or(Route::Drop)
            }
            attr::DREQ => {
                owner(be32(mad, REMOTE_COMM_ID)).unwrap_or_else(|| stateless_drep(mad, header.tid))
            }
            _ => Route::Drop,
        }
    }

    /// An RTU or REJ for a connection of a process: the REQ it answers
    /// (its LocalCommID is the requester's) is over for that process.
    fn end_req(&self, st: &mut State, device: &str, from: Peer, mad: &Mad) {
        let Some(Slice::Owned(client)) = st.slices.get(self.slice_index(be32(mad, REMOTE_COMM_ID)))
        else {
            return;
        };
        if let Some(c) = st.clients.get_mut(client).filter(|c| c.device == device) {
            let had = c.reqs.len();
            c.reqs.close(be32(mad, LOCAL_COMM_ID), from);
            let closed = had - c.reqs.len();
            if let Some(usage) = st.users.get_mut(&c.cred.uid) {
                usage.requests = usage.requests.saturating_sub(closed);
            }
        }
    }

    /// An SA answer goes to every process that waits for the query it
    /// answers (`path_cache`), each with its own TID back and the address
    /// it came from (the process takes an answer from the SM's LID only).
    fn route_sa_answer(&self, addr: &MadAddr, mad: &Mad) -> Route {
        let mut st = self.state.lock();
        let waiters = st.sa.answered(mad, addr);
        let to: Vec<_> = waiters
            .into_iter()
            .filter_map(|(client, theirs, alias)| {
                let c = st.clients.get(&client)?;
                Some((client, Recipient::of(c), theirs, alias))
            })
            .collect();
        drop(st);
        if to.is_empty() {
            return Route::Drop;
        }
        for (client, recipient, theirs, alias) in to {
            let mut answer = *mad;
            answer[12..16].copy_from_slice(&theirs.to_be_bytes());
            // One who asked the SM the port had before takes an answer
            // only from there.
            let from = MadAddr {
                dlid: alias.unwrap_or(addr.dlid),
                ..*addr
            };
            self.hand_sa_answer(client, &recipient, &from, answer);
        }
        Route::Done
    }

    /// Hands `answer` (its TID the process's) to process `client`.
    pub(super) fn hand_sa_answer(
        &self,
        client: ClientId,
        to: &Recipient,
        from: &MadAddr,
        answer: Mad,
    ) {
        let msg = ToClient::Recv {
            port: 0,
            addr: *from,
            mad: Box::new(answer),
        };
        match to.conn.send(&msg.encode(), false) {
            Ok(()) => self.count(SwitchCounter::RxSaAnswers),
            Err(e) => self.count_client_loss(to, || {
                format!("an SA answer for client {client} was lost, its socket refused it: {e}")
            }),
        }
    }
}

/// A REJ, reason timeout, with remote comm ID 0.
fn is_rej_timeout_for_nobody(mad: &Mad) -> bool {
    let timeout = crate::abi::ib_cm_rej_reason::IB_CM_REJ_TIMEOUT as u16;
    Rej::decode(mad).is_ok_and(|rej| rej.remote_comm_id == 0 && rej.reason == timeout)
}

/// The kernel's answer to a REQ nobody listens for (`cm_req_handler` →
/// `cm_issue_rej`): REJ, invalid service ID, with the REQ's comm IDs swapped.
fn no_listener_rej(mad: &Mad, tid: u64) -> Route {
    let rej = Rej {
        remote_comm_id: be32(mad, LOCAL_COMM_ID),
        local_comm_id: be32(mad, REMOTE_COMM_ID),
        message_rejected: MsgResponse::Req,
        reason: REJ_INVALID_SERVICE_ID,
        ..Rej::default()
    };
    Route::Answer(Box::new(rej.encode(tid)), SwitchCounter::RxStatelessRej)
}

/// The kernel's answer to a SIDR_REQ nobody listens for: SIDR_REP,
/// unsupported.
fn no_listener_sidr_rep(mad: &Mad, tid: u64, service_id: u64) -> Route {
    let rep = SidrRep {
        request_id: be32(mad, LOCAL_COMM_ID),
        status: SIDR_UNSUPPORTED,
        service_id,
        ..SidrRep::default()
    };
    Route::Answer(
        Box::new(rep.encode(tid, 0)),
        SwitchCounter::RxStatelessSidrRep,
    )
}

/// The kernel's answer to a DREQ for no connection (`cm_issue_drep`).
fn stateless_drep(mad: &Mad, tid: u64) -> Route {
    let drep = Drep {
        local_comm_id: be32(mad, REMOTE_COMM_ID),
        remote_comm_id: be32(mad, LOCAL_COMM_ID),
        ..Drep::default()
    };
    Route::Answer(Box::new(drep.encode(tid)), SwitchCounter::RxStatelessDrep)
}
