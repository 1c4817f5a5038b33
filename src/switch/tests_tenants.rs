//! The daemon as a boundary between tenants (issue 30).
//!
//! Each test here tries something a tenant of `ibcmd` could do to another
//! tenant's connections, or to the daemon, with only what
//! `rules::check_send` lets it send, and checks that it cannot (each
//! failed on main 2f88ee9): name another tenant's QP or another host's GUID,
//! flood the others with REJ timeouts or evict their requests, cost the
//! daemon more than a user's quota, silence another's loss warnings, take a
//! privileged rdma_cm port. The remote side is the library's engine where
//! the attack goes through the peer's matching (it does what the kernel's
//! cm.c does: `cm_match_req`, `cm_rep_handler`, `cm_acquire_rejected_id`);
//! the rest uses raw clients on socket pairs, as src/switch/tests.rs does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::proto::DeviceInfo;
use super::qp_owner::{FixedQps, QpOwner, QpOwners};
use super::tests::{Client, user};
use super::{PeerCred, SeqPacket, Switch, SwitchConfig, SwitchCounter};
use crate::abi::ib_cm_event_type::{
    IB_CM_DREQ_RECEIVED, IB_CM_REJ_RECEIVED, IB_CM_REQ_RECEIVED, IB_CM_RTU_RECEIVED,
};
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_TIMEOUT;
use crate::abi::ib_cm_state::IB_CM_ESTABLISHED;
use crate::cm::tests::{
    PASSIVE_QPN, Pair, Raw, Recorder, SERVICE_ID, loop_name, rep_params, wait_state,
};
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::switch::TEST_SOCKETS;
use crate::transport::{IdSlice, MadAddr, MadTransport};
use crate::wire::{Mad, MsgResponse, Rej, Rep, Req, ReqPath, Rtu, TransportType, attr, new_mad};

/// An in-process daemon serving loop device `index`'s port as `ibswN` on a
/// real socket, so that an engine opened on `ibswN` goes through it (as
/// src/cm/tests/switched.rs's `Daemon`).
pub(super) struct Daemon {
    pub(super) switch: Arc<Switch>,
    pub(super) name: String,
    socket: PathBuf,
    pub(super) me: LoopIdentity,
}

impl Daemon {
    fn start(index: u32) -> Self {
        Self::start_with_qps(index, None)
    }

    /// A daemon that knows who owns the loop device's QPs (`qps`), as
    /// the kernel's resource tracking tells `ibcmd` on a real device.
    pub(super) fn start_with_qps(index: u32, qps: Option<Arc<FixedQps>>) -> Self {
        let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
        let name = format!("ibsw{index}");
        let switch = Switch::new(SwitchConfig::default());
        switch
            .add_device_with_qp_owners(&name, qps.map(|q| q as Arc<dyn QpOwners>), |recv| {
                let transport = LoopTransport::open(me, recv)?;
                Ok((DeviceInfo::of_loop(me), transport as Arc<dyn MadTransport>))
            })
            .unwrap();
        let socket =
            std::env::temp_dir().join(format!("ibcm-tenants-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = SeqPacket::listen(&socket).unwrap();
        let s = switch.clone();
        std::thread::spawn(move || s.accept_loop(&listener));
        TEST_SOCKETS.lock().push((name.clone(), socket.clone()));
        Self {
            switch,
            name,
            socket,
            me,
        }
    }

    /// The address a process of this daemon sends to, to reach its own port
    /// (a MAD to the port's own LID comes back in as a received one).
    pub(super) fn own_addr(&self) -> MadAddr {
        MadAddr {
            dlid: self.me.lid,
            dgid: self.me.gid,
            ..MadAddr::default()
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.switch.close();
        TEST_SOCKETS.lock().retain(|(d, _)| *d != self.name);
        let _ = std::fs::remove_file(&self.socket);
    }
}

pub(super) fn attr_of(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

pub(super) fn be32(mad: &Mad, at: usize) -> u32 {
    u32::from_be_bytes(mad[at..at + 4].try_into().unwrap())
}

/// The address of an engine's device, as a process sends to it.
pub(super) fn addr_of(device: &crate::cm::device::Device) -> MadAddr {
    MadAddr {
        dlid: device.ports[0].lid,
        dgid: device.ports[0].gids[0].gid,
        ..MadAddr::default()
    }
}

/// Whether `cond` comes true within `within` (polled).
fn comes_true(within: Duration, cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// A REJ "timeout" (1) of message `rejected`, whose ARI names `ari_guid`,
/// as `cm_destroy_id` sends one from REQ_SENT.
fn rej_timeout(local: u32, remote: u32, rejected: MsgResponse, ari_guid: u64) -> Mad {
    let mut ari = [0u8; 72];
    ari[..8].copy_from_slice(&ari_guid.to_be_bytes());
    Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: rejected,
        reason: IB_CM_REJ_TIMEOUT as u16,
        rejected_info_length: 8,
        ari,
        ..Rej::default()
    }
    .encode(0x7e)
}

fn req(local_comm_id: u32, service_id: u64) -> Mad {
    let mut mad = new_mad(attr::REQ, 7, 0);
    mad[24..28].copy_from_slice(&local_comm_id.to_be_bytes());
    mad[32..40].copy_from_slice(&service_id.to_be_bytes());
    mad
}

/// A REQ a tenant of `daemon` sends: the CA GUID of its device.
fn req_from(daemon: &Daemon, local_comm_id: u32, service_id: u64) -> Mad {
    let mut mad = req(local_comm_id, service_id);
    crate::wire::req::CM_REQ_LOCAL_CA_GUID.set(&mut mad, daemon.me.node_guid);
    mad
}

fn sidr_req(request_id: u32, service_id: u64) -> Mad {
    let mut mad = new_mad(attr::SIDR_REQ, 11, 0);
    mad[24..28].copy_from_slice(&request_id.to_be_bytes());
    mad[32..40].copy_from_slice(&service_id.to_be_bytes());
    mad
}

// ---- A REQ or REP naming another tenant's QPN, or another host's CA GUID,
// is dropped. The peer's cm_match_req (REQ) and cm_rep_handler (REP) look
// its LocalQPN and LocalCAGUID up in its remote_qp_table, keyed (remote QPN,
// remote CA GUID): a hit is a "stale connection": the peer answers REJ 10
// and sends a DREQ on the connection that holds the entry. Every tenant of
// the device shares its CA GUID, so a tenant let through naming another
// tenant's QPN would make the peer disconnect that tenant's connection
// (and, naming another host's CA GUID, any connection of the peer's to a
// third host).

/// The victim (an engine through the daemon) accepted a connection from the
/// remote host H (an engine on its own loop device); `attacker` is a tenant
/// of another user on the same daemon.
pub(super) struct StaleSetup {
    pub(super) daemon: Daemon,
    pub(super) pair: Pair,
    /// The victim's side of the connection (passive, through the daemon).
    passive: Arc<crate::cm::id::CmIdPriv>,
    pub(super) attacker: Client,
    pub(super) attacker_slice: IdSlice,
}

/// What the kernel would say of the victim's QP: a process of another user
/// (the victim's engine runs in this test process, as root: its own MADs
/// are not checked).
pub(super) fn victims_qp() -> Arc<FixedQps> {
    let qps = Arc::new(FixedQps::default());
    qps.0.lock().insert(
        PASSIVE_QPN,
        QpOwner::Process {
            pid: 0x7fff_0001,
            uid: 0,
        },
    );
    qps
}

impl StaleSetup {
    fn new(index: u32) -> Self {
        Self::with_qps(index, victims_qp())
    }

    /// The setup with a QP table that has the victim's QP and others.
    pub(super) fn with_qps(index: u32, qps: Arc<FixedQps>) -> Self {
        let daemon = Daemon::start_with_qps(index, Some(qps));
        let victim = crate::cm::open_device(&daemon.name).unwrap();
        assert!(
            victim.id_slice().is_some(),
            "the victim is behind the daemon"
        );
        // pair.a: the remote host H (active, QPN ACTIVE_QPN); pair.b: the
        // victim (passive, QPN PASSIVE_QPN), both CA GUIDs the devices'.
        let pair = Pair::open(victim);
        let passive = pair.connect();
        let attacker = Client::connect_as(&daemon.switch, user(4747));
        let attacker_slice = attacker.register(&daemon.name).unwrap();
        Self {
            daemon,
            pair,
            passive,
            attacker,
            attacker_slice,
        }
    }

    /// Whether the victim's connection was torn down (H sent it a DREQ).
    pub(super) fn victim_disconnected_within(&self, within: Duration) -> bool {
        comes_true(within, || {
            self.pair.rec.count(IB_CM_DREQ_RECEIVED) > 0
                || self.pair.active.state() != IB_CM_ESTABLISHED
        })
    }

    pub(super) fn finish(self) {
        let Self {
            daemon,
            pair,
            passive,
            ..
        } = self;
        pair.finish(&[&passive]);
        drop(daemon);
    }
}

#[test]
fn a_req_naming_another_tenants_qpn_is_dropped_and_its_connection_kept() {
    let mut s = StaleSetup::new(3800);
    let to_h = addr_of(&s.pair.a);
    // The attacker's REQ: its own comm ID (the only rule a REQ meets), any
    // service ID (cm_match_req checks for a stale connection before it looks
    // for a listener), the device's CA GUID and the victim's QPN (QPNs are
    // handed out in order on a device: a tenant that creates a QP sees where
    // the others' are).
    let spoofed = s.daemon.switch.counter(SwitchCounter::TxSpoofed);
    let attack = Req {
        local_comm_id: s.attacker_slice.base | 1,
        service_id: 0xdead,
        local_ca_guid: s.pair.b.node_guid,
        local_qpn: PASSIVE_QPN,
        ..Req::default()
    };
    s.attacker.send_mad(&attack.encode(1), &to_h);
    s.attacker.sync();
    let dropped = s.daemon.switch.counter(SwitchCounter::TxSpoofed) > spoofed;
    let torn_down = s.victim_disconnected_within(Duration::from_secs(2));
    assert!(
        dropped && !torn_down,
        "a REQ of tenant uid 4747 carrying the QPN of another tenant's connection was {} and \
         the remote host {} that connection (its DREQs received: {}; REJ 10 to the attacker: {})",
        if dropped { "dropped" } else { "sent" },
        if torn_down { "disconnected" } else { "kept" },
        s.pair.rec.count(IB_CM_DREQ_RECEIVED),
        s.attacker
            .received()
            .iter()
            .any(|m| attr_of(m) == attr::REJ && Rej::decode(m).unwrap().reason == 10),
    );
    s.finish();
}

#[test]
fn a_rep_naming_another_tenants_qpn_is_dropped_and_its_connection_kept() {
    let mut s = StaleSetup::new(3810);
    const ATTACKER_SERVICE: u64 = 0x5151;
    assert_eq!(s.attacker.listen(ATTACKER_SERVICE), Ok(ATTACKER_SERVICE));
    // H connects to the attacker's service (an ordinary connection: a job of
    // the attacker's user on H, say): the REQ is routed to the attacker,
    // which may answer it with a REP.
    let second = crate::cm::create_id(&s.pair.a, s.pair.rec.handler()).unwrap();
    let mut params = s.pair.req_params();
    params.service_id = ATTACKER_SERVICE;
    params.qp_num = 0x00c0c0;
    crate::cm::send_req(&second, &params).unwrap();
    let routed = s.attacker.got();
    assert_eq!(attr_of(&routed), attr::REQ);
    let spoofed = s.daemon.switch.counter(SwitchCounter::TxSpoofed);
    let attack = Rep {
        local_comm_id: s.attacker_slice.base | 2,
        remote_comm_id: be32(&routed, 24),
        local_qpn: PASSIVE_QPN,
        local_ca_guid: s.pair.b.node_guid,
        ..Rep::default()
    };
    s.attacker.send_mad(&attack.encode(1), &addr_of(&s.pair.a));
    s.attacker.sync();
    let dropped = s.daemon.switch.counter(SwitchCounter::TxSpoofed) > spoofed;
    let torn_down = s.victim_disconnected_within(Duration::from_secs(2));
    assert!(
        dropped && !torn_down,
        "a REP of tenant uid 4747 carrying the QPN of another tenant's connection was {} and \
         the remote host {} that connection",
        if dropped { "dropped" } else { "sent" },
        if torn_down { "disconnected" } else { "kept" },
    );
    crate::cm::destroy_id(&second, 0);
    s.finish();
}

#[test]
fn a_req_or_rep_naming_another_ca_guid_is_dropped() {
    // The same attack on connections between the peer and a third host: the
    // CA GUID of a REQ or REP is the sender's device's (cm_format_req,
    // cm_format_rep: id.device->node_guid); another value only serves to hit
    // another host's entries in the peer's tables.
    let daemon = Daemon::start(3820);
    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    assert_eq!(attacker.listen(0x5151), Ok(0x5151));
    // A peer whose REQ the daemon routes to the attacker (a job of the
    // attacker's user on that host).
    let peer = LoopIdentity::from_name("loop3829").unwrap();
    let peer_port = LoopTransport::open(peer, Arc::new(|_, _, _| {})).unwrap();
    peer_port
        .send(1, &daemon.own_addr(), &req(0x77, 0x5151))
        .unwrap();
    assert_eq!(attr_of(&attacker.got()), attr::REQ);
    let to = MadAddr {
        dlid: peer.lid,
        dgid: peer.gid,
        ..MadAddr::default()
    };
    let other_guid = peer.node_guid ^ 0x1;
    let foreign_req = Req {
        local_comm_id: slice.base | 1,
        service_id: 0xdead,
        local_ca_guid: other_guid,
        local_qpn: 0x77,
        ..Req::default()
    };
    attacker.send_mad(&foreign_req.encode(1), &to);
    let foreign_rep = Rep {
        local_comm_id: slice.base | 2,
        remote_comm_id: 0x77,
        local_ca_guid: other_guid,
        local_qpn: 0x78,
        ..Rep::default()
    };
    attacker.send_mad(&foreign_rep.encode(1), &to);
    attacker.sync();
    assert_eq!(
        daemon.switch.counter(SwitchCounter::TxSpoofed),
        2,
        "a REQ and a REP whose LocalCAGUID {other_guid:#x} is not the device's {:#x}: \
         {} of them sent",
        daemon.me.node_guid,
        daemon.switch.counter(SwitchCounter::TxSent)
    );
    peer_port.close();
}

// ---- A REJ "timeout" naming another host's node GUID is dropped. The peer
// matches it by the ARI's node GUID and the REJ's LocalCommID
// (cm_acquire_rejected_id → cm_find_remote_id), whatever its
// MessageRejected. The slice binds the LocalCommID to the sender only
// together with THIS device's GUID: with another host's GUID in the ARI, a
// comm ID of the sender's slice is that host's comm ID, and the REJ would
// tear down the peer's connection to it. A user may hold a quarter of the
// slices: a quarter of every other host's comm IDs.

#[test]
fn a_rej_timeout_naming_a_third_hosts_guid_is_dropped_and_its_connection_kept() {
    let daemon = Daemon::start(3830);
    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    // H: an engine listening; H2: a third host whose comm ID for its
    // connection to H happens to lie in the attacker's slice.
    let h = crate::cm::open_device(&loop_name()).unwrap();
    let rec = Arc::new(Recorder::default());
    rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(|id, _| {
            crate::cm::send_rep(id, &rep_params(&[])).unwrap();
            0
        }),
    );
    let listener = crate::cm::create_id(&h, rec.handler()).unwrap();
    crate::cm::listen(&listener, SERVICE_ID).unwrap();
    let h2 = Raw::open();
    let x = slice.base | 0x55;
    let h2_req = Req {
        primary_path: ReqPath {
            local_lid: h2.me.lid,
            remote_lid: h.ports[0].lid,
            local_gid: h2.me.gid,
            remote_gid: h.ports[0].gids[0].gid,
            subnet_local: true,
            ..ReqPath::default()
        },
        local_comm_id: x,
        service_id: SERVICE_ID,
        local_ca_guid: h2.me.node_guid,
        local_qpn: 0x00e2e2,
        pkey: 0xffff,
        transport_service_type: TransportType::Rc,
        starting_psn: 0x3000,
        path_mtu: 5,
        max_cm_retries: 3,
        remote_cm_response_timeout: 12,
        local_cm_response_timeout: 12,
        ..Req::default()
    };
    h2.send_to(&h, &h2_req.encode(9));
    let passive = rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let rep = Rep::decode(&h2.wait_for(1)).unwrap();
    let rtu = Rtu {
        local_comm_id: x,
        remote_comm_id: rep.local_comm_id,
        ..Rtu::default()
    };
    h2.send_to(&h, &rtu.encode(9));
    rec.wait(Some(&passive), IB_CM_RTU_RECEIVED);
    wait_state(&passive, IB_CM_ESTABLISHED);

    // The attacker's REJ: LocalCommID x is in its slice, so the daemon's
    // rule (REJ of "other": slice(local)) lets it through.
    let attack = rej_timeout(x, 0x1234_5678, MsgResponse::Other, h2.me.node_guid);
    attacker.send_mad(&attack, &addr_of(&h));
    attacker.sync();
    let spoofed = daemon.switch.counter(SwitchCounter::TxSpoofed);
    let torn_down = comes_true(Duration::from_secs(2), || {
        rec.count(IB_CM_REJ_RECEIVED) > 0 || passive.state() != IB_CM_ESTABLISHED
    });
    assert!(
        spoofed == 1 && !torn_down,
        "tenant uid 4747's REJ timeout naming host H2's node GUID was {} and H {} its \
         connection to H2 (state {:?})",
        if spoofed == 1 { "dropped" } else { "sent" },
        if torn_down { "tore down" } else { "kept" },
        passive.state()
    );
    crate::cm::destroy_id(&passive, 0);
    crate::cm::destroy_id(&listener, 0);
    crate::cm::close_device(&h).unwrap();
}

// ---- A received REJ "timeout" with RemoteCommID 0 goes to the process
// whose REQ it answers, not to every process of the device (Route::ToAll).
// Copied to all, a tenant could make one by sending a REJ timeout of its own
// comm ID to its own port's address (or from any host it runs on): one MAD
// from it, one MAD in the socket of each other tenant, which would fill
// (their real MADs then lost, rx_client_busy) while every engine looks each
// up. The daemon knows whose such a REJ can be: it answers a REQ the daemon
// routed (its LocalCommID is the REQ's, from that address), which
// RoutedRequests holds.

#[test]
fn a_tenants_rej_timeout_for_nobody_is_not_copied_to_every_other_tenant() {
    let daemon = Daemon::start(3840);
    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    let mut others: Vec<Client> = (0..5)
        .map(|i| {
            let c = Client::connect_as(&daemon.switch, user(5000 + i));
            c.register(&daemon.name).unwrap();
            c
        })
        .collect();
    const FLOOD: u32 = 50;
    for i in 0..FLOOD {
        let mad = rej_timeout(slice.base | i, 0, MsgResponse::Other, daemon.me.node_guid);
        attacker.send_mad(&mad, &daemon.own_addr());
    }
    attacker.sync();
    let copies: usize = others.iter_mut().map(|c| c.received().len()).sum();
    assert_eq!(
        copies,
        0,
        "{FLOOD} REJ timeouts of tenant uid 4747 (its own comm IDs, to its own port) put \
         {copies} MADs in the sockets of {} other tenants (rx_to_owner {})",
        others.len(),
        daemon.switch.counter(SwitchCounter::RxToOwner)
    );
}

#[test]
fn a_tenants_rej_timeouts_do_not_make_another_tenant_lose_its_req() {
    let daemon = Daemon::start(3845);
    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    // An honest server that reads its socket a little late.
    let mut server = Client::connect_as(&daemon.switch, user(5001));
    server.register(&daemon.name).unwrap();
    assert_eq!(server.listen(0x1000), Ok(0x1000));
    for i in 0..5000 {
        let mad = rej_timeout(slice.base | i, 0, MsgResponse::Other, daemon.me.node_guid);
        attacker.send_mad(&mad, &daemon.own_addr());
    }
    attacker.sync();
    // A client on a remote host connects to it.
    let client = LoopIdentity::from_name("loop3849").unwrap();
    let remote = LoopTransport::open(client, Arc::new(|_, _, _| {})).unwrap();
    remote
        .send(1, &daemon.own_addr(), &req(0x77, 0x1000))
        .unwrap();
    let got_req = server
        .received()
        .iter()
        .any(|m| attr_of(m) == attr::REQ && be32(m, 24) == 0x77);
    assert!(
        got_req,
        "the server lost the remote host's REQ: its socket was full of tenant uid 4747's \
         REJ timeouts (rx_client_busy {})",
        daemon.switch.counter(SwitchCounter::RxClientBusy)
    );
    remote.close();
}

#[test]
fn a_rej_timeout_for_a_routed_req_still_reaches_its_process() {
    // What the fix must keep (passes on main): the REJ timeout of a
    // requester destroyed in REQ_SENT reaches the process its REQ was
    // routed to.
    let daemon = Daemon::start(3850);
    let mut a = Client::connect_as(&daemon.switch, user(5100));
    a.register(&daemon.name).unwrap();
    assert_eq!(a.listen(0x1000), Ok(0x1000));
    let requester = LoopIdentity::from_name("loop3859").unwrap();
    let remote = LoopTransport::open(requester, Arc::new(|_, _, _| {})).unwrap();
    remote
        .send(1, &daemon.own_addr(), &req(0x77, 0x1000))
        .unwrap();
    assert_eq!(attr_of(&a.got()), attr::REQ);
    let gone = rej_timeout(0x77, 0, MsgResponse::Other, requester.node_guid);
    remote.send(1, &daemon.own_addr(), &gone).unwrap();
    assert_eq!(attr_of(&a.got()), attr::REJ);
    remote.close();
}

// ---- Another tenant's REQs do not evict the requests routed to a process.
// Were RoutedRequests to keep its 16,384 newest, whoever sent them, a tenant
// could send REQs of its own comm IDs to its own port for the victim's
// service: each routed to the victim and remembered there; after 16,384 of
// them the victim's honest REP to a remote host's REQ would be dropped as
// spoofed.

#[test]
fn another_tenants_reqs_do_not_evict_a_request_routed_to_a_process() {
    let daemon = Daemon::start(3860);
    let mut victim = Client::connect_as(&daemon.switch, user(5200));
    let victim_slice = victim.register(&daemon.name).unwrap();
    assert_eq!(victim.listen(0x1000), Ok(0x1000));
    let remote = LoopIdentity::from_name("loop3869").unwrap();
    let remote_transport = LoopTransport::open(remote, Arc::new(|_, _, _| {})).unwrap();
    remote_transport
        .send(1, &daemon.own_addr(), &req(0x77, 0x1000))
        .unwrap();
    assert_eq!(attr_of(&victim.got()), attr::REQ);

    let to_remote = MadAddr {
        dlid: remote.lid,
        dgid: remote.gid,
        ..MadAddr::default()
    };

    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    let flood = super::rules::RoutedRequests::MAX as u32;
    for i in 0..flood - 1 {
        attacker.send_mad(
            &req_from(&daemon, slice.base | i, 0x1000),
            &daemon.own_addr(),
        );
    }
    attacker.sync();
    // Up to here the remote host's REQ is still one the victim may answer
    // (an MRA of it passes, and changes nothing)...
    let mra = crate::wire::Mra {
        local_comm_id: victim_slice.base | 1,
        remote_comm_id: 0x77,
        message_mraed: MsgResponse::Req,
        ..crate::wire::Mra::default()
    };
    victim.send_mad(&mra.encode(7), &to_remote);
    victim.sync();
    assert_eq!(daemon.switch.counter(SwitchCounter::TxSpoofed), 0);
    // ... one more REQ of the attacker's and it is forgotten.
    attacker.send_mad(
        &req_from(&daemon, slice.base | flood, 0x1000),
        &daemon.own_addr(),
    );
    attacker.sync();
    let spoofed = daemon.switch.counter(SwitchCounter::TxSpoofed);
    let honest = Rep {
        local_comm_id: victim_slice.base | 1,
        remote_comm_id: 0x77,
        local_ca_guid: daemon.me.node_guid,
        ..Rep::default()
    };
    victim.send_mad(&honest.encode(7), &to_remote);
    victim.sync();
    assert_eq!(
        daemon.switch.counter(SwitchCounter::TxSpoofed),
        spoofed,
        "after {flood} REQs of tenant uid 4747 to its own port, the victim's REP to the remote \
         host's REQ was dropped as spoofed"
    );
    remote_transport.close();
}

// ---- What the requests routed to one user's processes cost is bounded per
// user (Quotas::requests), not only per process (2 x 16,384 entries): else a
// user's 256 registrations (Quotas::default) would make the daemon hold 256
// times that. A tenant fills its own processes' tables with REQs and
// SIDR_REQs of its own comm IDs sent to its own port.

/// This process's resident memory (VmRSS), in bytes.
fn resident() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Set in the child process that measures the routed requests' cost with a
/// heap of its own.
const MEASURING_CHILD: &str = "IBCM_ROUTED_REQUESTS_CHILD";

#[test]
fn the_requests_routed_to_one_users_processes_are_bounded_per_user() {
    if std::env::var_os(MEASURING_CHILD).is_some() {
        return measure_the_requests_routed_to_one_process();
    }
    // Measured in a fresh process: in this one the memory the tests before
    // freed is reused, and the resident size hardly moves (seen: the test
    // passed in a full run, failed alone).
    let name =
        "switch::tests_tenants::the_requests_routed_to_one_users_processes_are_bounded_per_user";
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(MEASURING_CHILD, "1")
        .output()
        .expect("the test binary runs again");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("routed req") || l.contains("routed REQs"))
        .collect();
    assert!(out.status.success(), "{}", said.join("\n"));
    assert!(!said.is_empty(), "the child measured nothing:\n{text}");
}

/// Fills one process's routed REQs and SIDR_REQs (its own, sent to its own
/// port) and asserts what a user's registrations would hold.
fn measure_the_requests_routed_to_one_process() {
    let daemon = Daemon::start(3870);
    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    assert_eq!(attacker.listen(0x2000), Ok(0x2000));
    let fill = super::rules::RoutedRequests::MAX as u32;
    // Warm up what a flood allocates anyway (socket buffers, log, counters).
    for i in 0..256 {
        attacker.send_mad(
            &req_from(&daemon, slice.base | 0x8_0000 | i, 0x2001),
            &daemon.own_addr(),
        );
    }
    attacker.sync();
    let before = resident();
    for i in 0..fill {
        attacker.send_mad(
            &req_from(&daemon, slice.base | i, 0x2000),
            &daemon.own_addr(),
        );
        attacker.send_mad(&sidr_req(slice.base | i, 0x2000), &daemon.own_addr());
    }
    attacker.sync();
    let after = resident();
    let per_process = after.saturating_sub(before);
    // Fixed: what a user's processes hold is bound by Quotas::requests,
    // whatever their number.
    let held = daemon.switch.requests_of(4747);
    let quota = super::Quotas::default().requests;
    assert!(held <= quota, "user 4747 holds {held} routed requests");
    let per_entry = per_process / held.max(1);
    let per_user = per_entry * quota;
    eprintln!(
        "one process's routed REQs and SIDR_REQs ({held} of {fill} each kept): {} KiB \
         resident, {per_entry} bytes each; one user's quota of {quota}: {} MiB",
        per_process / 1024,
        per_user >> 20
    );
    assert!(
        per_user <= 64 << 20,
        "one user's routed requests can make the daemon hold {} MiB ({per_entry} bytes each)",
        per_user >> 20,
    );
}

// ---- The quotas are configurable as their doc says: Quotas' doc says
// "`ibcmd --quota NAME=N` changes it (docs/ibcmd.md, "Quotas")", so ibcmd
// has that option and docs/ibcmd.md that section.

#[test]
fn the_quota_option_the_code_refers_to_exists() {
    let ibcmd = include_str!("../bin/ibcmd/cli.rs");
    let doc = include_str!("../../docs/ibcmd.md");
    assert!(
        ibcmd.contains("\"--quota\""),
        "ibcmd's command line has no --quota (Quotas' doc says `ibcmd --quota NAME=N`)"
    );
    assert!(
        doc.contains("## Quotas") || doc.contains("### Quotas"),
        "docs/ibcmd.md has no Quotas section (Quotas' doc refers to it)"
    );
}

// ---- One tenant's losses do not silence the warning of another's. The
// daemon's loss and stall warnings are said at the 1st, 2nd, 4th... time of
// a counter: were it shared by all tenants, a tenant that lets its own
// socket overflow (a REQ flood to its own listener) would move it on, and
// another tenant's lost MAD afterwards would not be logged.

#[test]
fn a_tenants_own_losses_do_not_silence_the_warning_of_another_tenants_loss() {
    let daemon = Daemon::start(3880);
    let log = crate::log::capture::Capture::of(&[&daemon.name]);
    let mut attacker = Client::connect_as(&daemon.switch, user(4747));
    let slice = attacker.register(&daemon.name).unwrap();
    assert_eq!(attacker.listen(0x3000), Ok(0x3000));
    // The attacker never reads: its socket fills, the rest is lost.
    let mut i = 0;
    while daemon.switch.counter(SwitchCounter::RxClientBusy) < 1500 {
        attacker.send_mad(
            &req_from(&daemon, slice.base | i, 0x3000),
            &daemon.own_addr(),
        );
        i += 1;
        assert!(i < 100_000, "the attacker's socket never filled");
    }
    // The attacker's REQs cross the loop fabric after its sync: wait until
    // its losses stop growing, so the next one is the victim's.
    let mut busy = daemon.switch.counter(SwitchCounter::RxClientBusy);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = daemon.switch.counter(SwitchCounter::RxClientBusy);
        if now == busy {
            break;
        }
        busy = now;
    }
    let lines_before = log.lines_with(&["was lost"]).len();
    // Now a victim that reads slowly loses one MAD.
    let mut victim = Client::connect_as(&daemon.switch, user(5300));
    victim.register(&daemon.name).unwrap();
    assert_eq!(victim.listen(0x3001), Ok(0x3001));
    let remote = LoopTransport::open(
        LoopIdentity::from_name("loop3889").unwrap(),
        Arc::new(|_, _, _| {}),
    )
    .unwrap();
    let mut n = 0u32;
    while daemon.switch.counter(SwitchCounter::RxClientBusy) == busy {
        remote
            .send(1, &daemon.own_addr(), &req(0x1000 + n, 0x3001))
            .unwrap();
        n += 1;
        assert!(n < 100_000, "the victim's socket never filled");
    }
    let lines_after = log.lines_with(&["was lost"]).len();
    assert!(
        lines_after > lines_before,
        "the victim's first lost MAD was not logged: rx_client_busy was at {busy} from \
         tenant uid 4747's own losses ({lines_before} lines)"
    );
    remote.close();
    drop(victim);
}

// ---- A privileged rdma_cm port is only for a privileged tenant, a policy
// the kernel has: rdma_cm's service IDs are (port space << 16) + port, and
// the kernel's rdma_cm lets only a process with CAP_NET_BIND_SERVICE bind a
// port below 1024 (cma_use_port: `snum < PROT_SOCK &&
// !capable(CAP_NET_BIND_SERVICE)` → -EACCES). A tenant that could listen on
// any service ID through ibcmd could take the ID of a root service's
// privileged port before that service starts (or while it restarts), get
// its clients' REQs with their private data, and answer them as that
// service.

/// rdma_cm's service ID of `port` in the TCP port space (RDMA_PS_TCP).
fn rdma_cm_tcp_service_id(port: u16) -> u64 {
    (0x0106u64 << 16) | u64::from(port)
}

#[test]
fn an_unprivileged_tenant_cannot_listen_on_a_privileged_rdma_cm_port() {
    use std::os::unix::process::CommandExt;
    let daemon = Daemon::start(3890);
    // An unprivileged process of user 4747 (a child set to that user when
    // the tests run as root: no capability left).
    let mut child = None;
    let cred = if runs_as_root() {
        let c = std::process::Command::new("sleep")
            .arg("30")
            .uid(4747)
            .gid(4747)
            .spawn()
            .expect("sleep as uid 4747");
        let pid = c.id() as i32;
        child = Some(c);
        PeerCred {
            pid,
            uid: 4747,
            gid: 4747,
        }
    } else {
        user(4747)
    };
    let mut tenant = Client::connect_as(&daemon.switch, cred);
    tenant.register(&daemon.name).unwrap();
    let unprivileged = rdma_cm_tcp_service_id(20049);
    assert_eq!(tenant.listen(unprivileged), Ok(unprivileged));
    let ssh = rdma_cm_tcp_service_id(22);
    let got = tenant.listen(ssh);
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_eq!(
        got,
        Err(-libc::EACCES),
        "an unprivileged tenant listens on {ssh:#018x}, rdma_cm's TCP port 22"
    );
}

/// Whether this test process runs as root (then it can make a child of
/// another user).
fn runs_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

// ---- The QP rule: whose QP a tenant names (rules::check_qp). The
// daemon asks the device's QpOwners (on a real device the kernel's RDMA
// netlink resource tracking; here a fixed table) and sends a REQ, a REP or a
// successful SIDR_REP only when the QP is its tenant's process's or user's.

/// A QP table, a daemon with it, and a tenant of user `uid`.
pub(super) fn qp_daemon(index: u32, uid: u32, qps: &[(u32, QpOwner)]) -> (Daemon, Client, IdSlice) {
    let table = Arc::new(FixedQps::default());
    table.0.lock().extend(qps.iter().cloned());
    let daemon = Daemon::start_with_qps(index, Some(table));
    let tenant = Client::connect_as(&daemon.switch, user(uid));
    let slice = tenant.register(&daemon.name).unwrap();
    (daemon, tenant, slice)
}

/// A REQ of the tenant's own: its slice, its device's CA GUID, QP `qpn`.
pub(super) fn req_naming(daemon: &Daemon, slice: IdSlice, qpn: u32) -> Mad {
    Req {
        local_comm_id: slice.base | 1,
        service_id: 0x5151,
        local_ca_guid: daemon.me.node_guid,
        local_qpn: qpn,
        ..Req::default()
    }
    .encode(1)
}

pub(super) fn sent_and_spoofed(daemon: &Daemon) -> (u64, u64) {
    (
        daemon.switch.counter(SwitchCounter::TxSent),
        daemon.switch.counter(SwitchCounter::TxSpoofed),
    )
}

#[test]
fn check_qp_a_tenant_may_name_a_qp_of_another_process_of_its_user() {
    let other_process = QpOwner::Process {
        pid: 0x7fff_0002,
        uid: 4747,
    };
    let (daemon, mut tenant, slice) = qp_daemon(3840, 4747, &[(0x100, other_process)]);
    tenant.send_mad(&req_naming(&daemon, slice, 0x100), &daemon.own_addr());
    tenant.sync();
    assert_eq!(sent_and_spoofed(&daemon), (1, 0));
}

#[test]
fn check_qp_a_kernel_qp_or_one_nobody_owns_is_not_a_tenants() {
    // QP1 (the MAD layer's), and a QPN no QP has: a tenant naming a QP that
    // does not exist yet would squat on the next tenant's.
    let (daemon, mut tenant, slice) = qp_daemon(3842, 4747, &[(1, QpOwner::Kernel)]);
    for qpn in [1, 0x4242] {
        tenant.send_mad(&req_naming(&daemon, slice, qpn), &daemon.own_addr());
    }
    tenant.sync();
    assert_eq!(sent_and_spoofed(&daemon), (0, 2));
}

/// Owners that cannot be asked (netlink refused, timed out), counting the
/// questions.
#[derive(Default)]
struct Unanswered(std::sync::atomic::AtomicUsize);

impl QpOwners for Unanswered {
    fn owner(&self, _: u8, _: u32) -> std::io::Result<QpOwner> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT))
    }
}

fn unanswered_daemon(index: u32) -> (Daemon, Arc<Unanswered>) {
    let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
    let name = format!("ibsw{index}");
    let switch = Switch::new(SwitchConfig::default());
    let owners = Arc::new(Unanswered::default());
    switch
        .add_device_with_qp_owners(&name, Some(owners.clone() as Arc<dyn QpOwners>), |recv| {
            let transport = LoopTransport::open(me, recv)?;
            Ok((DeviceInfo::of_loop(me), transport as Arc<dyn MadTransport>))
        })
        .unwrap();
    let socket = std::env::temp_dir().join(format!("ibcm-qp-{}-{name}.sock", std::process::id()));
    let daemon = Daemon {
        switch,
        name,
        socket,
        me,
    };
    (daemon, owners)
}

#[test]
fn check_qp_a_question_the_kernel_does_not_answer_refuses_the_mad() {
    let (daemon, owners) = unanswered_daemon(3843);
    let mut tenant = Client::connect_as(&daemon.switch, user(4747));
    let slice = tenant.register(&daemon.name).unwrap();
    tenant.send_mad(&req_naming(&daemon, slice, 0x100), &daemon.own_addr());
    tenant.sync();
    assert_eq!(owners.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(sent_and_spoofed(&daemon), (0, 0));
    assert_eq!(daemon.switch.counter(SwitchCounter::TxRefused), 1);
}

#[test]
fn check_qp_root_is_not_asked_about() {
    // Root may open umad and send any MAD without the daemon.
    let (daemon, owners) = unanswered_daemon(3844);
    let mut tenant = Client::connect_as(&daemon.switch, user(0));
    let slice = tenant.register(&daemon.name).unwrap();
    tenant.send_mad(&req_naming(&daemon, slice, 0x100), &daemon.own_addr());
    tenant.sync();
    assert_eq!(owners.0.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(sent_and_spoofed(&daemon), (1, 0));
}

#[test]
fn check_qp_a_sidr_rep_names_a_qp_only_when_it_answers_success() {
    let other_user = QpOwner::Process {
        pid: 0x7fff_0003,
        uid: 5858,
    };
    let (daemon, mut tenant, _) = qp_daemon(3845, 4747, &[(0x200, other_user)]);
    assert_eq!(tenant.listen(0x5252), Ok(0x5252));
    let peer = LoopIdentity::from_name("loop3849").unwrap();
    let peer_port = LoopTransport::open(peer, Arc::new(|_, _, _| {})).unwrap();
    let to_peer = MadAddr {
        dlid: peer.lid,
        dgid: peer.gid,
        ..MadAddr::default()
    };
    let answer = |request_id: u32, status: u8| {
        crate::wire::SidrRep {
            request_id,
            status,
            qpn: 0x200,
            service_id: 0x5252,
            ..crate::wire::SidrRep::default()
        }
        .encode(11, 0)
    };
    // Two SIDR_REQs routed to the tenant: it answers the first "success"
    // with another user's UD QP (the requester would send to it), the
    // second "service not supported" (status 1: its QPN means nothing).
    peer_port
        .send(1, &daemon.own_addr(), &sidr_req(0x61, 0x5252))
        .unwrap();
    assert_eq!(attr_of(&tenant.got()), attr::SIDR_REQ);
    tenant.send_mad(&answer(0x61, 0), &to_peer);
    tenant.sync();
    assert_eq!(sent_and_spoofed(&daemon), (0, 1));
    peer_port
        .send(1, &daemon.own_addr(), &sidr_req(0x62, 0x5252))
        .unwrap();
    assert_eq!(attr_of(&tenant.got()), attr::SIDR_REQ);
    tenant.send_mad(&answer(0x62, 1), &to_peer);
    tenant.sync();
    assert_eq!(sent_and_spoofed(&daemon), (1, 1));
    peer_port.close();
}
