//! MADs a process sends: checked, path queries through the host's cache, sent.

use super::{ClientId, Recipient, SaServed, State, Switch, SwitchCounter};
use crate::errno::{CmResult, EAGAIN, EINVAL, ENODEV, EPERM};
use crate::switch::path_cache::{Asked, SaPort};
use crate::switch::rules::{
    LOCAL_COMM_ID, REMOTE_COMM_ID, Refusal, Sender, attr_id, be32, check_qp, check_send, named_qpns,
};
use crate::transport::MadAddr;
use crate::wire::sa::MGMT_CLASS_SA;
use crate::wire::{MGMT_CLASS_CM, Mad, attr};

impl Switch {
    /// A MAD a process sends from `port` to `addr`: sent when the identity
    /// it carries is the process's (`rules::check_send`), else dropped,
    /// counted and logged (rate-limited) with the process's credentials.
    /// `-EPERM` for a spoofed one, `-EINVAL` for one the switch does not
    /// carry.
    pub fn outbound(&self, client: ClientId, port: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        let mut mad = *mad;
        // A path query to an SM the port had before goes to the one it has.
        let mut addr = *addr;
        let addr = &mut addr;
        // Whose QPs it names, asked of the kernel before the state lock.
        let qp_refusal = named_qpns(&mad).find_map(|qpn| self.qp_refusal(client, port, qpn));
        let (transport, verdict, sa_served) = {
            let mut st = self.state.lock();
            let st = &mut *st;
            let Some(c) = st.clients.get_mut(&client) else {
                return Err(EINVAL);
            };
            let slice = self.slice_of(c.slice);
            let (device, cred) = (c.device.clone(), c.cred);
            let (transport, node_guid) = self
                .devices
                .read()
                .get(&device)
                .map(|d| (Some(d.transport.clone()), d.info.node_guid))
                .unwrap_or_default();
            let verdict = match mad[1] {
                // Path queries only: SubnAdmSet/Delete (a multicast leave, a
                // service record removed) would give every process the SA
                // access of the port, which needs umad access without ibcmd.
                MGMT_CLASS_SA if is_path_query(&mad) => Ok(()),
                MGMT_CLASS_CM if let Some(why) = qp_refusal => Err((why, device, cred, slice)),
                MGMT_CLASS_CM => {
                    let held = c.reqs.len() + c.sidr_reqs.len();
                    let sender = Sender {
                        slice,
                        node_guid,
                        reqs: &mut c.reqs,
                        sidr_reqs: &mut c.sidr_reqs,
                    };
                    let verdict = check_send(sender, port, addr, &mad);
                    // A REJ of a REQ, a SIDR_REP end theirs.
                    let closed = held - (c.reqs.len() + c.sidr_reqs.len());
                    if let Some(usage) = st.users.get_mut(&cred.uid) {
                        usage.requests = usage.requests.saturating_sub(closed);
                    }
                    // A peer may know one of its comm IDs now: its slice
                    // needs the timewait when it goes.
                    c.used |= verdict.is_ok() && slice.contains(be32(&mad, LOCAL_COMM_ID));
                    verdict.map_err(|why| (why, device, cred, slice))
                }
                _ => Err((Refusal::Unknown, device, cred, slice)),
            };
            let mut sa_served = None;
            if verdict.is_ok() && mad[1] == MGMT_CLASS_SA {
                sa_served = self.track_sa_query(st, client, port, addr, &mut mad);
            }
            (transport, verdict, sa_served)
        };
        match sa_served {
            Some(SaServed::Waits) => return Ok(()),
            Some(SaServed::Answered(to, answer, from)) => {
                self.hand_sa_answer(client, &to, &from, *answer);
                return Ok(());
            }
            None => {}
        }
        if let Err((why, device, cred, slice)) = verdict {
            if let Refusal::QpUnchecked(qpn) = why {
                self.count_loss(SwitchCounter::TxRefused, || {
                    format!(
                        "refused a {} of process {} (uid {}) on {device}: {} (QPN {qpn:#08x})",
                        attr::name(attr_id(&mad)),
                        cred.pid,
                        cred.uid,
                        why.why()
                    )
                });
                return Err(EAGAIN);
            }
            if !why.is_spoof() {
                self.count(SwitchCounter::TxRefused);
                return Err(EINVAL);
            }
            // Counted; said the 1st, 2nd, 4th… time: a tenant sending
            // spoofed MADs in a loop cannot flood the log.
            self.count_loss(SwitchCounter::TxSpoofed, || {
                format!(
                    "dropped a {} from process {} (uid {}, gid {}) on {device}: {} (local comm \
                     ID {:#010x}, remote comm ID {:#010x}{}; its slice {:#010x}..={:#010x})",
                    attr::name(attr_id(&mad)),
                    cred.pid,
                    cred.uid,
                    cred.gid,
                    why.why(),
                    be32(&mad, LOCAL_COMM_ID),
                    be32(&mad, REMOTE_COMM_ID),
                    why.qpn()
                        .map(|q| format!(", QPN {q:#08x}"))
                        .unwrap_or_default(),
                    slice.base,
                    slice.base | slice.mask()
                )
            });
            return Err(EPERM);
        }
        let Some(transport) = transport else {
            self.count(SwitchCounter::TxRefused);
            return Err(ENODEV);
        };
        match transport.send(port, &*addr, &mad) {
            Ok(()) => {
                self.count(SwitchCounter::TxSent);
                if mad[1] == MGMT_CLASS_SA {
                    self.count(SwitchCounter::TxSaQueries);
                }
                Ok(())
            }
            Err(e) => {
                self.count_loss(SwitchCounter::TxRefused, || {
                    format!(
                        "a {} of client {client} was not sent on port {port}: {}",
                        attr::name(attr_id(&mad)),
                        std::io::Error::from_raw_os_error(e.0)
                    )
                });
                Err(e)
            }
        }
    }

    /// Why `client` may not name QP `qpn` in a MAD leaving `port`: None when
    /// it may, or when that is not checked (root, which may open umad and
    /// send anything anyway; a device whose QPs nobody can tell); asked of
    /// the device's [`QpOwners`] out of the state lock.
    ///
    /// [`QpOwners`]: crate::switch::qp_owner::QpOwners
    fn qp_refusal(&self, client: ClientId, port: u8, qpn: u32) -> Option<Refusal> {
        let (device, cred) = {
            let st = self.state.lock();
            let c = st.clients.get(&client)?;
            (c.device.clone(), c.cred)
        };
        if cred.uid == 0 {
            return None;
        }
        let owners = self.devices.read().get(&device)?.qp_owners.clone()?;
        check_qp(cred, qpn, owners.owner(port, qpn)).err()
    }

    /// A path query of `client` from `port` to `addr`, through the host's
    /// path cache (`path_cache`): `None` when it goes to the SA, with a TID
    /// of the daemon's (the processes' own TIDs collide) remembered to route
    /// the answer back; else answered from the cache, or waiting for the
    /// same query in flight. A query to an SM the port had before goes to
    /// the one it has now (`addr` is changed), and its answer is handed
    /// back as from the LID asked ([`FormerSms`]).
    ///
    /// [`FormerSms`]: crate::switch::path_cache::FormerSms
    fn track_sa_query(
        &self,
        st: &mut State,
        client: ClientId,
        port: u8,
        addr: &mut MadAddr,
        mad: &mut Mad,
    ) -> Option<SaServed> {
        let c = st.clients.get_mut(&client)?;
        let mut alias = None;
        let sa_port = self.devices.read().get(&c.device).and_then(|d| {
            let now = d.live.state(port);
            let in_process = d.transport.as_loop().is_some();
            if let Some(to) = now.and_then(|n| d.former_sms.redirect(port, addr, n, in_process)) {
                alias = Some(addr.dlid);
                *addr = to;
            }
            SaPort::of(&d.info, now, port, addr)
        });
        match st
            .sa
            .ask(client, &mut c.sa_waits, sa_port, (addr.dlid, alias), mad)
        {
            Asked::Send => None,
            Asked::Waits => Some(SaServed::Waits),
            Asked::Answered(answer, from) => {
                Some(SaServed::Answered(Recipient::of(c), answer, from))
            }
        }
    }
}

/// SubnAdmGet or SubnAdmGetTable of PathRecord: what the library's SA
/// client sends (`ib_sa_path_rec_get`).
fn is_path_query(mad: &Mad) -> bool {
    use crate::wire::sa::{ATTR_PATH_RECORD, METHOD_GET, METHOD_GET_TABLE};
    matches!(mad[3], METHOD_GET | METHOD_GET_TABLE)
        && u16::from_be_bytes([mad[16], mad[17]]) == ATTR_PATH_RECORD
}
