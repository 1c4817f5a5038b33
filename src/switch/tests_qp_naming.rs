//! Which QPs a tenant may name (the rule of 4688931: "a tenant's REQ, REP or
//! successful SIDR_REP must name a QP of its own process or user"), in every
//! field the peer keys its connections by: an XRC target's LocalEECN, and a
//! process that now has the tenant's old PID. Each test fails on 4688931.

use std::sync::Arc;
use std::time::Duration;

use super::SwitchCounter;
use super::qp_owner::QpOwner;
use super::tests_tenants::{
    StaleSetup, addr_of, attr_of, be32, qp_daemon, req_naming, sent_and_spoofed, victims_qp,
};
use crate::abi::ib_qp_type;
use crate::cm::tests::PASSIVE_QPN;
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{MadAddr, MadTransport};
use crate::wire::{Rep, Req, attr};

/// A QP of the attacker's own process (so the QPN a MAD names in the field
/// the daemon checks is one it may name).
const ATTACKER_QPN: u32 = 0x000c0d;

/// A REP names two QPNs, and the peer keys its connection by the one its
/// own QP type says: an XRC initiator's peer is an XRC target, whose QPN
/// `cm_format_rep` puts in the Local EE Context Number, and `cm_rep_handler`
/// takes it from there (`cm_rep_get_qpn`: the REP's LocalEECN when the
/// requester is `IB_QPT_XRC_INI`) into `cm_insert_remote_qpn`. So the daemon
/// checks the LocalEECN too: checking only the LocalQPN, a tenant answering
/// an XRC REQ with its own QP in LocalQPN and another tenant's QPN in
/// LocalEECN would make the peer take the other tenant's connection for
/// stale and DREQ it.
#[test]
fn a_rep_naming_another_tenants_qpn_as_its_xrc_target_is_dropped() {
    let qps = victims_qp();
    qps.0.lock().insert(
        ATTACKER_QPN,
        QpOwner::Process {
            pid: std::process::id(),
            uid: 4747,
        },
    );
    let mut s = StaleSetup::with_qps(3900, qps);
    const ATTACKER_SERVICE: u64 = 0x5353;
    assert_eq!(s.attacker.listen(ATTACKER_SERVICE), Ok(ATTACKER_SERVICE));
    // H connects to the attacker's service with an XRC initiator (a job of
    // the attacker's user on H): the REQ is routed to the attacker.
    let xrc = crate::cm::create_id(&s.pair.a, s.pair.rec.handler()).unwrap();
    let mut params = s.pair.req_params();
    params.service_id = ATTACKER_SERVICE;
    params.qp_type = ib_qp_type::IB_QPT_XRC_INI as i32;
    params.qp_num = 0x00c1c1;
    crate::cm::send_req(&xrc, &params).unwrap();
    let routed = s.attacker.got();
    assert_eq!(attr_of(&routed), attr::REQ);
    let spoofed = s.daemon.switch.counter(SwitchCounter::TxSpoofed);
    let attack = Rep {
        local_comm_id: s.attacker_slice.base | 3,
        remote_comm_id: be32(&routed, 24),
        local_qpn: ATTACKER_QPN,
        local_eecn: PASSIVE_QPN,
        srq: true,
        local_ca_guid: s.pair.b.node_guid,
        ..Rep::default()
    };
    s.attacker.send_mad(&attack.encode(1), &addr_of(&s.pair.a));
    s.attacker.sync();
    let dropped = s.daemon.switch.counter(SwitchCounter::TxSpoofed) > spoofed;
    let torn_down = s.victim_disconnected_within(Duration::from_secs(2));
    assert!(
        dropped && !torn_down,
        "a REP of tenant uid 4747 naming its own QPN {ATTACKER_QPN:#x} and, as its XRC \
         target, the QPN of another tenant's connection was {} and the remote host {} that \
         connection",
        if dropped { "dropped" } else { "sent" },
        if torn_down { "disconnected" } else { "kept" },
    );
    crate::cm::destroy_id(&xrc, 0);
    s.finish();
}

/// An XRC target's REP names its QP in LocalEECN alone (`cm_format_rep`
/// leaves LocalQPN 0): the daemon checks that one, and every QPN a REP
/// names. (On a real device the kernel records an XRC target QP as its own,
/// "ib_uverbs" (`create_qp` makes it with no udata): such a REP of a
/// tenant is refused there; the table here says whose it is.)
#[test]
fn an_xrc_targets_rep_names_its_qp_in_local_eecn() {
    let own = QpOwner::Process {
        pid: 0x7fff_0004,
        uid: 4747,
    };
    let other = QpOwner::Process {
        pid: 0x7fff_0005,
        uid: 5858,
    };
    let (daemon, mut tenant, slice) =
        qp_daemon(3901, 4747, &[(0x400, own.clone()), (0x401, other)]);
    // A REQ routed to the tenant, which its REP answers.
    assert_eq!(tenant.listen(0x5454), Ok(0x5454));
    let peer = LoopIdentity::from_name("loop3909").unwrap();
    let peer_port = LoopTransport::open(peer, Arc::new(|_, _, _| {})).unwrap();
    let to_peer = MadAddr {
        dlid: peer.lid,
        dgid: peer.gid,
        ..Default::default()
    };
    let mut sent = 0;
    for (n, (local_qpn, local_eecn, passes)) in [
        (0, 0x400, true),      // an XRC target of its own
        (0, 0x401, false),     // another user's
        (0x400, 0x401, false), // its own QP, another user's target
        (0, 0, false),         // no QP at all
    ]
    .into_iter()
    .enumerate()
    {
        let remote = 0x90 + n as u32;
        let req = Req {
            local_comm_id: remote,
            service_id: 0x5454,
            local_ca_guid: peer.node_guid,
            local_qpn: 0x777,
            ..Req::default()
        };
        peer_port
            .send(1, &daemon.own_addr(), &req.encode(1))
            .unwrap();
        assert_eq!(attr_of(&tenant.got()), attr::REQ);
        let rep = Rep {
            local_comm_id: slice.base | (0x10 + n as u32),
            remote_comm_id: remote,
            local_qpn,
            local_eecn,
            srq: true,
            local_ca_guid: daemon.me.node_guid,
            ..Rep::default()
        };
        tenant.send_mad(&rep.encode(1), &to_peer);
        tenant.sync();
        sent += u64::from(passes);
        assert_eq!(
            sent_and_spoofed(&daemon),
            (sent, n as u64 + 1 - sent),
            "REP {n}: LocalQPN {local_qpn:#x}, LocalEECN {local_eecn:#x}"
        );
    }
    peer_port.close();
}

/// The tenant's PID is the one `SO_PEERCRED` gave when it connected; that
/// process may have exited since (its socket lives on in a child it
/// forked), and PIDs are handed out again in order, so a tenant can steer
/// its old PID to a process another user starts next. A rule that took a QP
/// of "the tenant's process" by PID alone would pass the QP of that other
/// user's process, whatever its user. A QP whose process has the tenant's
/// PID but not its user is exactly what such a reuse looks like: refused.
#[test]
fn a_qp_of_a_process_that_now_has_the_tenants_old_pid_is_not_its() {
    let pid_reused_by_another_user = QpOwner::Process {
        pid: std::process::id(),
        uid: 5858,
    };
    // The tenant (uid 4747) connected from this PID (`tests::user`).
    let (daemon, mut tenant, slice) = qp_daemon(3910, 4747, &[(0x500, pid_reused_by_another_user)]);
    tenant.send_mad(&req_naming(&daemon, slice, 0x500), &daemon.own_addr());
    tenant.sync();
    assert_eq!(
        sent_and_spoofed(&daemon),
        (0, 1),
        "a REQ of tenant uid 4747 naming a QP of a uid-5858 process that has the PID the \
         tenant connected from"
    );
}
