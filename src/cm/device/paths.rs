//! A device's paths: `ibcm_init_path` (RoCE, the in-process fabric, or
//! the SA through the path cache), the SA path queries it sends, and its
//! ports read again so that cached paths follow them.

use std::sync::Arc;

use super::{Device, IB_RATE_10_GBPS, Port, ROCE_HOP_LIMIT, ROCE_PACKET_LIFETIME, open_state};
use crate::cm::path::{Path, REC_TYPE_IB, REC_TYPE_ROCE_V1, REC_TYPE_ROCE_V2};
use crate::cm::worker;
use crate::cm::worker::EAGAIN;
use crate::errno::{CmResult, EHOSTUNREACH, EINVAL, EIO, ENODEV, EOPNOTSUPP};
use crate::refusal::{Rule, refuse};
use crate::sa::cache::{PathCache, PortId, PortView};
use crate::sa::query::{self, Completion, NewQuery, Timing};
use crate::sa::{self, PathQuery};
use crate::transport::MadAddr;
use crate::transport::loopback::LoopIdentity;
use crate::transport::port_watch::{self, Change, PortPoller};
use crate::transport::sysfs::{GidEntry, GidType, PortState};

impl Device {
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

    /// The cache this device's paths are kept in: its engine's (or a
    /// test's).
    pub fn path_cache(&self) -> &PathCache {
        self.own_path_cache
            .get()
            .unwrap_or_else(|| self.cm.path_cache())
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
    pub(super) fn watch_ports(self: &Arc<Self>, root: &str) {
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
        query::wait_for(&self.cm, |done| {
            self.path_query(port, *query, timing, done, None)
        })
        .map_err(|e| match e {
            sa::EINTR => ENODEV,
            EAGAIN | sa::ETIMEDOUT | EINVAL | ENODEV | EOPNOTSUPP | sa::BUSY => e,
            _ => EIO,
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
        query::submit_announced(&self.cm, new, announce)
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
