//! Processes registering and leaving, and their listens: slices, quotas, and
//! who may listen on a privileged rdma_cm port.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use super::{
    CM_ASSIGN_SERVICE_ID, Client, ClientId, Listen, MAX_LISTENS_PER_PROCESS, SERVICE_ID_AGN_MASK,
    Slice, State, Switch, SwitchCounter, Uid,
};
use crate::errno::{CmResult, EACCES, EAGAIN, EBUSY, EINVAL, ENODEV, ENOMEM};
use crate::log::Level;
use crate::os::seqpacket::{PeerCred, SeqPacket};
use crate::switch::path_cache::SaWaits;
use crate::switch::proto::DeviceInfo;
use crate::switch::rules::RoutedRequests;
use crate::transport::IdSlice;

impl Switch {
    /// Registers a process for `device`: its number, its slice and what it
    /// needs of the device. `-ENODEV` for a device not served, `-EAGAIN`
    /// while every slice is owned or in timewait.
    pub fn register(
        &self,
        conn: Arc<SeqPacket>,
        cred: PeerCred,
        device: &str,
    ) -> CmResult<(ClientId, IdSlice, DeviceInfo)> {
        let info = self
            .devices
            .read()
            .get(device)
            .map(|d| d.info_now())
            .ok_or(ENODEV)?;
        let mut st = self.state.lock();
        let now = Instant::now();
        let n = st.slices.len();
        let quotas = self.config.quotas;
        let usage = st.users.get(&cred.uid).copied().unwrap_or_default();
        if usage.registrations >= quotas.registrations {
            drop(st);
            self.refuse_over_quota(|| {
                format!(
                    "process {} (uid {}) refused: its user has {} processes registered (quota \
                     registrations={})",
                    cred.pid, cred.uid, usage.registrations, quotas.registrations
                )
            });
            return Err(EAGAIN);
        }
        // Whoever may connect may register, but one user may not take every
        // slice: registering and leaving (one MAD each, so the slice needs
        // its timewait) 4095 times took a few seconds and locked every other
        // user out for the timewait.
        let max_slices = self.max_slices_per_user(n);
        if self.slices_of_user(&st, cred.uid, now) >= max_slices {
            drop(st);
            self.refuse_over_quota(|| {
                format!(
                    "process {} (uid {}) refused: its user holds {max_slices} comm ID slices, \
                     owned or in timewait (quota slices)",
                    cred.pid, cred.uid
                )
            });
            return Err(EAGAIN);
        }
        let start = st.next_slice;
        let index = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| i != 0)
            .find(|&i| match st.slices[i] {
                Slice::Free => true,
                Slice::TimeWait(until, _) => until <= now,
                Slice::Owned(_) => false,
            })
            .ok_or(EAGAIN)?;
        let client = st.next_client;
        st.next_client += 1;
        st.slices[index] = Slice::Owned(client);
        st.next_slice = (index + 1) % n;
        st.users.entry(cred.uid).or_default().registrations += 1;
        st.clients.insert(
            client,
            Client {
                device: device.to_owned(),
                slice: index,
                conn,
                cred,
                used: false,
                listening: HashSet::new(),
                listen_refusal_logged: false,
                losses: Arc::default(),
                reqs: RoutedRequests::default(),
                sidr_reqs: RoutedRequests::default(),
                sa_waits: SaWaits::new(),
            },
        );
        drop(st);
        self.count(SwitchCounter::Registered);
        let slice = self.slice_of(index);
        self.tenant_log(Level::Info, || {
            format!(
                "process {} (uid {}, gid {}) registered for {device}: comm IDs {:#010x}..={:#010x}",
                cred.pid,
                cred.uid,
                cred.gid,
                slice.base,
                slice.base | slice.mask()
            )
        });
        Ok((client, slice, info))
    }

    /// Counts a refusal by a user's quota and says so, rate-limited.
    fn refuse_over_quota(&self, what: impl FnOnce() -> String) {
        self.count(SwitchCounter::OverQuota);
        self.tenant_log(Level::Warn, what);
    }

    /// The slices user `uid`'s processes own or left in timewait.
    fn slices_of_user(&self, st: &State, uid: Uid, now: Instant) -> usize {
        st.slices
            .iter()
            .filter(|s| match **s {
                Slice::Free => false,
                Slice::Owned(c) => st.clients.get(&c).is_some_and(|c| c.cred.uid == uid),
                Slice::TimeWait(until, owner) => owner == uid && until > now,
            })
            .count()
    }

    /// [`Quotas::slices`], or a quarter of the `n` slices (1023 of 4095):
    /// it takes four users of the socket's group to lock the others out.
    ///
    /// [`Quotas::slices`]: super::Quotas::slices
    fn max_slices_per_user(&self, n: usize) -> usize {
        match self.config.quotas.slices {
            0 => ((n - 1) / 4).max(1),
            quota => quota,
        }
    }

    /// The process went away (its socket closed): its listens end at once,
    /// its slice is answered statelessly and freed after the timewait. It
    /// costs what the process held, not a scan of every process's.
    pub fn unregister(&self, client: ClientId) {
        let mut st = self.state.lock();
        let st = &mut *st;
        let Some(gone) = st.clients.remove(&client) else {
            return;
        };
        // A slice no peer ever saw a comm ID of is free at once: else one
        // process registering and leaving in a loop would keep every slice
        // in timewait, and every other process out, without any connection.
        st.slices[gone.slice] = if gone.used {
            Slice::TimeWait(Instant::now() + self.config.timewait, gone.cred.uid)
        } else {
            Slice::Free
        };
        let mut key = (gone.device, 0);
        for &service_id in &gone.listening {
            key.1 = service_id;
            st.listens.remove(&key);
        }
        st.sa.forget(client, &gone.sa_waits);
        if let Some(usage) = st.users.get_mut(&gone.cred.uid) {
            usage.registrations -= 1;
            usage.listens -= gone.listening.len();
            usage.requests = usage
                .requests
                .saturating_sub(gone.reqs.len() + gone.sidr_reqs.len());
            if usage.registrations == 0 {
                st.users.remove(&gone.cred.uid);
            }
        }
        let (pid, device) = (gone.cred.pid, key.0);
        self.count(SwitchCounter::Gone);
        self.tenant_log(Level::Info, || {
            format!(
                "process {pid} left {device}: its comm IDs are answered statelessly for {:?}",
                self.config.timewait
            )
        });
    }

    /// `ib_cm_listen` of a process: exact match (`mask` all ones), every port
    /// (0) or one. `-EBUSY` when another process listens on it already,
    /// `-ENOMEM` beyond `MAX_LISTENS_PER_PROCESS` or its user's
    /// [`Quotas::listens`].
    ///
    /// Invariant (it makes the process's Unlistens exact, even the one after
    /// a Listen whose answer came too late): a Listen on a service ID the
    /// process holds only counts, never refused, not even at the cap; so a
    /// refused Listen means the process holds no count there, and an
    /// Unlisten from it for that ID is ignored.
    ///
    /// [`Quotas::listens`]: super::Quotas::listens
    pub fn listen(&self, client: ClientId, service_id: u64, mask: u64, port: u8) -> CmResult<u64> {
        if mask != u64::MAX {
            return Err(EINVAL);
        }
        // The kernel's cm_init_listen: the assigned range is the CM's alone,
        // else a process could take the IDs others are about to be given.
        if service_id & SERVICE_ID_AGN_MASK == CM_ASSIGN_SERVICE_ID
            && service_id != CM_ASSIGN_SERVICE_ID
        {
            return Err(EINVAL);
        }
        // rdma_cm's service IDs of ports below 1024 need what binding such a
        // port needs (cma_use_port: CAP_NET_BIND_SERVICE, else -EACCES):
        // else any tenant could take a root service's port while it is down
        // and get its clients' REQs and private data.
        if let Some(port) = privileged_rdma_cm_port(service_id) {
            let cred = self.state.lock().clients.get(&client).ok_or(EINVAL)?.cred;
            if !may_bind_privileged(cred) {
                self.tenant_log(Level::Warn, || {
                    format!(
                        "process {} (uid {}) may not listen on {service_id:#x}, rdma_cm's port \
                         {port} (below 1024: CAP_NET_BIND_SERVICE needed): -EACCES",
                        cred.pid, cred.uid
                    )
                });
                return Err(EACCES);
            }
        }
        let mut st = self.state.lock();
        let st = &mut *st;
        let c = st.clients.get_mut(&client).ok_or(EINVAL)?;
        let assign = service_id == CM_ASSIGN_SERVICE_ID;
        let key = (c.device.clone(), service_id);
        if !assign {
            match st.listens.get_mut(&key) {
                Some(l) if l.client == client => {
                    l.count += 1;
                    return Ok(service_id);
                }
                Some(_) => return Err(EBUSY),
                None => {}
            }
        }
        let usage = st.users.entry(c.cred.uid).or_default();
        let quota = self.config.quotas.listens;
        if c.listening.len() >= MAX_LISTENS_PER_PROCESS || usage.listens >= quota {
            // The kernel's errno when cm_init_listen cannot allocate.
            let (cred, device, held) = (c.cred, c.device.clone(), c.listening.len());
            let user_held = usage.listens;
            if std::mem::replace(&mut c.listen_refusal_logged, true) {
                self.count(SwitchCounter::OverQuota);
                return Err(ENOMEM);
            }
            self.refuse_over_quota(|| {
                format!(
                    "process {} (uid {}) on {device} holds {held} listens, its user {user_held} \
                     (at most {MAX_LISTENS_PER_PROCESS} a process, quota listens={quota}): \
                     a listen refused with -ENOMEM",
                    cred.pid, cred.uid
                )
            });
            return Err(ENOMEM);
        }
        let key = if assign {
            let assigned = st.next_service_id;
            st.next_service_id += 1;
            (key.0, assigned)
        } else {
            key
        };
        usage.listens += 1;
        c.listening.insert(key.1);
        let service_id = key.1;
        st.listens.insert(
            key,
            Listen {
                client,
                port,
                count: 1,
            },
        );
        Ok(service_id)
    }

    /// The end of one of the process's listens on `service_id`; ignored for
    /// a service ID it does not hold (see [`Self::listen`]).
    pub fn unlisten(&self, client: ClientId, service_id: u64) {
        let mut st = self.state.lock();
        let st = &mut *st;
        let Some(c) = st.clients.get_mut(&client) else {
            return;
        };
        let key = (c.device.clone(), service_id);
        let Some(l) = st.listens.get_mut(&key).filter(|l| l.client == client) else {
            return;
        };
        l.count -= 1;
        if l.count == 0 {
            st.listens.remove(&key);
            c.listening.remove(&service_id);
            if let Some(usage) = st.users.get_mut(&c.cred.uid) {
                usage.listens -= 1;
            }
        }
    }
}

/// The port of an rdma_cm service ID below 1024: `(port space << 16) +
/// port` (`cma_get_service_id`) in the port spaces IPoIB, TCP, UDP and IB.
fn privileged_rdma_cm_port(service_id: u64) -> Option<u16> {
    const PORT_SPACES: [u64; 4] = [0x0002, 0x0106, 0x0111, 0x013f];
    let port = (service_id & 0xffff) as u16;
    (PORT_SPACES.contains(&(service_id >> 16)) && port < 1024).then_some(port)
}

/// Whether process `cred` may bind a port below 1024: root, or
/// CAP_NET_BIND_SERVICE in its effective set (`/proc/PID/status`, read as
/// the kernel had it then; a process the daemon cannot see, as under the
/// unit's `ProtectProc=invisible`, has none).
fn may_bind_privileged(cred: PeerCred) -> bool {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    cred.uid == 0
        || std::fs::read_to_string(format!("/proc/{}/status", cred.pid))
            .ok()
            .and_then(|status| {
                let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
                u64::from_str_radix(hex.trim(), 16).ok()
            })
            .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}
