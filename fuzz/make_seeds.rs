//! Writes the seed corpora with the crate's own encoders:
//!
//! - `corpus/decode/`: one valid 256-byte MAD per message shape (REQ RC / UC /
//!   XRC with and without an alternate path, MRA, REJ of several reasons, REP,
//!   RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, and LAP / APR / ClassPortInfo
//!   attributes with plausible bodies laid out as in IBTA Vol.1 ch. 12), plus
//!   a few the codec must refuse (short, bad header, reserved values);
//! - `corpus/receive/`: inputs of the `receive` target's format
//!   (`ib_cm_fuzz::format`): each message aimed at the connection states
//!   whose handler branches it exercises, with the IDs patched in;
//! - `corpus/switch/`: scripts of the `switch` target's format
//!   (`ib_cm_fuzz::switch::Script`): each connection flow through the daemon
//!   (passive and active side, REJ, SIDR, SA query, stateless answers, a
//!   tenant leaving), and the hijacks of issue 30 that the daemon must drop
//!   (another tenant's REP, REJ and MRA for a REQ routed elsewhere, a REP to
//!   another address or a second REP, a second SIDR_REP).
//!
//! Run from fuzz/: `cargo run --example make_seeds` (replaces both
//! directories' contents). Deterministic: the same files every time.

use std::fs;
use std::path::Path;

use ib_cm::wire::{
    self, Drep, Dreq, Mad, Mra, MsgResponse, Rej, Rep, Req, ReqPath, Rtu, SidrRep, SidrReq,
    TransportType, attr,
};
use ib_cm_fuzz::format::*;
use ib_cm_fuzz::switch::{Attr, Id, MadSpec, Op, Script, Service};

const GUID_A: u64 = 0x0002_c903_00ab_000b;
const GUID_B: u64 = 0x0002_c903_00ab_000c;

fn gid(guid: u64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&guid.to_be_bytes());
    g
}

fn path(lid_a: u16, lid_b: u16) -> ReqPath {
    ReqPath {
        local_lid: lid_a,
        remote_lid: lid_b,
        local_gid: gid(GUID_A),
        remote_gid: gid(GUID_B),
        flow_label: 0,
        packet_rate: 3,
        traffic_class: 0,
        hop_limit: 0,
        sl: 0,
        subnet_local: true,
        local_ack_timeout: 16,
    }
}

fn pd<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out[..bytes.len()].copy_from_slice(bytes);
    out
}

fn req(transport: TransportType, alternate: bool, plans: &[u8]) -> Req {
    Req {
        attr_mod: 0,
        local_comm_id: 0x1111_2222,
        service_id: 0x1234,
        local_ca_guid: GUID_A,
        local_qpn: 0x000a11,
        responder_resources: if transport == TransportType::Xrc {
            0
        } else {
            4
        },
        initiator_depth: 2,
        remote_cm_response_timeout: 20,
        transport_service_type: transport,
        starting_psn: 0x1000,
        local_cm_response_timeout: 20,
        retry_count: if transport == TransportType::Xrc {
            0
        } else {
            7
        },
        pkey: 0xffff,
        path_mtu: 5,
        rnr_retry_count: if transport == TransportType::Xrc {
            0
        } else {
            6
        },
        max_cm_retries: 15,
        extended_transport_type: u8::from(transport == TransportType::Xrc),
        primary_path: path(11, 12),
        alternate_path: if alternate {
            path(13, 14)
        } else {
            ReqPath::default()
        },
        private_data: pd(plans),
        ..Req::default()
    }
}

fn rep(plan: u8) -> Rep {
    Rep {
        local_comm_id: 0x3333_4444,
        remote_comm_id: 0x1111_2222,
        local_qpn: 0x000b22,
        starting_psn: 0x2000,
        responder_resources: 2,
        initiator_depth: 4,
        target_ack_delay: 15,
        rnr_retry_count: 5,
        local_ca_guid: GUID_B,
        private_data: pd(&[plan]),
        ..Rep::default()
    }
}

fn rtu() -> Rtu {
    Rtu {
        local_comm_id: 0x1111_2222,
        remote_comm_id: 0x3333_4444,
        ..Rtu::default()
    }
}

fn dreq(plan: u8) -> Dreq {
    Dreq {
        local_comm_id: 0x1111_2222,
        remote_comm_id: 0x3333_4444,
        remote_qpn: 0x000b22,
        private_data: pd(&[plan]),
    }
}

fn drep() -> Drep {
    Drep {
        local_comm_id: 0x3333_4444,
        remote_comm_id: 0x1111_2222,
        ..Drep::default()
    }
}

fn rej(reason: u16, rejected: MsgResponse, ari: &[u8]) -> Rej {
    Rej {
        local_comm_id: 0x3333_4444,
        remote_comm_id: 0x1111_2222,
        message_rejected: rejected,
        rejected_info_length: ari.len() as u8,
        reason,
        ari: pd(ari),
        private_data: pd(b"no"),
    }
}

fn mra(mraed: MsgResponse) -> Mra {
    Mra {
        local_comm_id: 0x3333_4444,
        remote_comm_id: 0x1111_2222,
        message_mraed: mraed,
        service_timeout: 24,
        ..Mra::default()
    }
}

/// A MAD of an attribute this codec has no struct for, body bytes at CM
/// offsets (IBTA Vol.1 Tables 114, 115: LAP, APR).
fn raw(attr_id: u16, tid: u64, body: &[(usize, &[u8])]) -> Mad {
    let mut mad = wire::new_mad(attr_id, tid, 0);
    for (off, bytes) in body {
        mad[24 + off..24 + off + bytes.len()].copy_from_slice(bytes);
    }
    mad
}

fn sidr_req(plan: u8) -> SidrReq {
    SidrReq {
        request_id: 0x5555_0001,
        pkey: 0xffff,
        service_id: 0x1234,
        private_data: pd(&[plan, b's', b'i', b'd', b'r']),
    }
}

fn sidr_rep(status: u8) -> SidrRep {
    SidrRep {
        request_id: 0x5555_0001,
        status,
        info_length: 4,
        vendor_id: 0,
        qpn: 0x000b22,
        service_id: 0x1234,
        qkey: 0x8001_0000,
        info: pd(b"info"),
        private_data: pd(b"ok"),
    }
}

fn lap() -> Mad {
    // Local / remote comm ID, remote QPN, response timeout, alternate path.
    raw(
        attr::LAP,
        0x0000_0001_0000_0200,
        &[
            (0, &0x1111_2222u32.to_be_bytes()),
            (4, &0x3333_4444u32.to_be_bytes()),
            (12, &[0x00, 0x0b, 0x22, 20 << 3]),
            (20, &13u16.to_be_bytes()),
            (22, &14u16.to_be_bytes()),
            (24, &gid(GUID_A)),
            (40, &gid(GUID_B)),
            (56, &[0, 0, 0, 3, 0, 0, 0x08, 0x80]),
        ],
    )
}

fn apr() -> Mad {
    // Local / remote comm ID, info length, AP status (0 = loaded).
    raw(
        attr::APR,
        0x0000_0001_0000_0200,
        &[
            (0, &0x3333_4444u32.to_be_bytes()),
            (4, &0x1111_2222u32.to_be_bytes()),
            (8, &[0, 0]),
        ],
    )
}

fn class_port_info() -> Mad {
    let mut mad = raw(
        attr::CLASS_PORT_INFO,
        0x0000_0001_0000_0300,
        &[(0, &[1, 2])],
    );
    mad[3] = 0x01; // Get: not a Send, the codec refuses it
    mad
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::write(dir.join(name), bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn decode_seeds(dir: &Path) {
    let tid = 0x0000_0001_2211_1100;
    let seeds: Vec<(&str, Mad)> = vec![
        (
            "req-rc",
            req(TransportType::Rc, false, b"hello").encode(tid),
        ),
        (
            "req-rc-alt-path",
            req(TransportType::Rc, true, &[]).encode(tid),
        ),
        ("req-uc", req(TransportType::Uc, false, &[]).encode(tid)),
        ("req-xrc-ece", {
            let mut r = req(TransportType::Xrc, false, &[]);
            r.vendor_id = 0x15b3;
            r.attr_mod = 1;
            r.encode(tid)
        }),
        ("mra-req", mra(MsgResponse::Req).encode(tid)),
        ("mra-rep", mra(MsgResponse::Rep).encode(tid)),
        ("mra-other", mra(MsgResponse::Other).encode(tid)),
        ("rej-consumer", rej(28, MsgResponse::Req, &[]).encode(tid)),
        (
            "rej-timeout-ari",
            rej(4, MsgResponse::Rep, &GUID_B.to_be_bytes()).encode(tid),
        ),
        ("rej-stale", rej(10, MsgResponse::Other, &[]).encode(tid)),
        (
            "rej-ari-72",
            rej(7, MsgResponse::Req, &[0x5a; 72]).encode(tid),
        ),
        ("rep", rep(PLAN_NORMAL).encode(tid)),
        ("rep-ece-srq", {
            let mut r = rep(PLAN_NORMAL);
            r.vendor_id = 0x00ab_cdef;
            r.attr_mod = 0x1234_5678;
            r.srq = true;
            r.failover_accepted = 1;
            r.end_to_end_flow_control = true;
            r.encode(tid)
        }),
        ("rtu", rtu().encode(tid)),
        ("dreq", dreq(PLAN_NORMAL).encode(tid)),
        ("drep", drep().encode(tid)),
        ("sidr-req", sidr_req(PLAN_NORMAL).encode(tid)),
        ("sidr-rep", sidr_rep(0).encode(tid, 0)),
        ("sidr-rep-ece-reject", {
            let mut r = sidr_rep(2);
            r.vendor_id = 0x15b3;
            r.info_length = 72;
            r.info = [0x11; 72];
            r.encode(tid, 1)
        }),
        ("bad-sidr-rep-info-length", {
            let mut m = sidr_rep(0).encode(tid, 0);
            wire::sidr_rep::CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH.set(&mut m, 73);
            m
        }),
        ("lap", lap()),
        ("apr", apr()),
        ("class-port-info-get", class_port_info()),
        ("bad-req-transport-2", {
            let mut m = req(TransportType::Rc, false, &[]).encode(tid);
            wire::req::CM_REQ_TRANSPORT_SERVICE_TYPE.set(&mut m, 2);
            m
        }),
        ("bad-rej-info-length", {
            let mut m = rej(28, MsgResponse::Req, &[]).encode(tid);
            wire::rej::CM_REJ_REJECTED_INFO_LENGTH.set(&mut m, 100);
            m
        }),
    ];
    for (name, mad) in &seeds {
        write(dir, name, mad);
    }
    write(dir, "short-255", &rtu().encode(tid)[..255]);
    let mut long = dreq(PLAN_NORMAL).encode(tid).to_vec();
    long.extend_from_slice(&[0xee; 40]);
    write(dir, "dreq-trailing-bytes", &long);
}

/// One record of the receive format (attribute kept as encoded).
fn record(sel: u8, flags: u8, mad: &Mad) -> Vec<u8> {
    record_as(sel, flags, ATTR_KEEP, mad)
}

/// One record whose attribute ID the harness overrides (`attr` 1..=11).
fn record_as(sel: u8, flags: u8, attr: u8, mad: &Mad) -> Vec<u8> {
    let mut r = vec![sel, flags, attr];
    r.extend_from_slice(mad);
    r
}

fn receive_seeds(dir: &Path) {
    let tid = 0x0000_0001_2211_1100;
    let peer = PATCH_PEER | FIX_HEADER;
    let remote_only = PATCH_REMOTE_ONLY | FIX_HEADER;
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        // A new connection on each listener, answered normally / held / rejected / destroyed.
        (
            "req-new-to-b",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        (
            "req-new-to-a",
            record(
                S_A_LISTEN,
                0,
                &req(TransportType::Uc, false, &[]).encode(tid),
            ),
        ),
        (
            "req-new-hold",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Rc, false, &[PLAN_HOLD]).encode(tid),
            ),
        ),
        (
            "req-new-reject",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Rc, false, &[PLAN_REJECT]).encode(tid),
            ),
        ),
        (
            "req-new-destroy",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Rc, false, &[PLAN_DESTROY]).encode(tid),
            ),
        ),
        (
            "req-new-enomem",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Xrc, false, &[PLAN_ENOMEM]).encode(tid),
            ),
        ),
        ("req-unknown-service", {
            let mut r = req(TransportType::Rc, false, &[]);
            r.service_id = 0x9999;
            record(S_B_LISTEN, 0, &r.encode(tid))
        }),
        // Duplicate REQs in REQ_RCVD / REP_SENT / TIMEWAIT, and a stale QPN.
        (
            "req-dup-req-rcvd",
            record(
                S_B_REQ_RCVD,
                peer,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        (
            "req-dup-rep-sent",
            record(
                S_B_REP_SENT,
                peer,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        (
            "req-dup-timewait",
            record(
                S_B_TIMEWAIT,
                peer,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        (
            "req-stale-qpn",
            record(
                S_B_ESTABLISHED,
                remote_only,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        (
            "req-stale-qpn-rep-rcvd",
            record(
                S_B_REP_SENT,
                remote_only,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        // REP: to REQ_SENT (accepted), duplicate to ESTABLISHED, to a held REQ_SENT.
        (
            "rep-to-req-sent",
            record(
                S_A_REQ_SENT_LOST,
                remote_only,
                &rep(PLAN_NORMAL).encode(tid),
            ),
        ),
        (
            "rep-to-req-sent-hold",
            record(S_A_REQ_SENT, remote_only, &rep(PLAN_HOLD).encode(tid)),
        ),
        (
            "rep-to-req-sent-reject",
            record(
                S_A_REQ_SENT_REP_LOST,
                remote_only,
                &rep(PLAN_REJECT).encode(tid),
            ),
        ),
        (
            "rep-dup-established",
            record(S_A_ESTABLISHED, peer, &rep(PLAN_NORMAL).encode(tid)),
        ),
        (
            "rep-dup-rep-rcvd",
            record(S_A_REP_RCVD, peer, &rep(PLAN_NORMAL).encode(tid)),
        ),
        // RTU: to REP_SENT (establishes), duplicate to ESTABLISHED.
        (
            "rtu-to-rep-sent",
            record(S_B_REP_SENT, peer, &rtu().encode(tid)),
        ),
        (
            "rtu-to-rep-sent-rtu-lost",
            record(S_B_REP_SENT_RTU_LOST, peer, &rtu().encode(tid)),
        ),
        (
            "rtu-dup-established",
            record(S_B_ESTABLISHED, peer, &rtu().encode(tid)),
        ),
        // REJ in each state that takes one.
        (
            "rej-req-sent",
            record(
                S_A_REQ_SENT_LOST,
                remote_only,
                &rej(28, MsgResponse::Req, &[]).encode(tid),
            ),
        ),
        (
            "rej-rep-sent",
            record(
                S_B_REP_SENT_LOST,
                peer,
                &rej(28, MsgResponse::Rep, &[]).encode(tid),
            ),
        ),
        (
            "rej-rep-rcvd-stale",
            record(
                S_A_REP_RCVD,
                peer,
                &rej(10, MsgResponse::Other, &[]).encode(tid),
            ),
        ),
        (
            "rej-req-rcvd",
            record(
                S_B_REQ_RCVD,
                peer,
                &rej(28, MsgResponse::Other, &[]).encode(tid),
            ),
        ),
        (
            "rej-dreq-sent",
            record(
                S_A_DREQ_SENT_LOST,
                peer,
                &rej(28, MsgResponse::Other, &[]).encode(tid),
            ),
        ),
        (
            "rej-established",
            record(
                S_B_ESTABLISHED,
                peer,
                &rej(28, MsgResponse::Other, &[]).encode(tid),
            ),
        ),
        (
            "rej-timeout-ari",
            record(
                S_B_REP_SENT,
                peer,
                &rej(4, MsgResponse::Rep, &GUID_A.to_be_bytes()).encode(tid),
            ),
        ),
        // DREQ: established (answered / held / destroy), DREQ_SENT (simultaneous),
        // TIMEWAIT (DREP again), DREQ_RCVD (duplicate), REP_SENT, unknown, wrong QPN.
        (
            "dreq-established",
            record(S_B_ESTABLISHED, peer, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        (
            "dreq-established-hold",
            record(S_A_ESTABLISHED, peer, &dreq(PLAN_HOLD).encode(tid)),
        ),
        (
            "dreq-established-destroy",
            record(S_B_XRC_ESTABLISHED, peer, &dreq(PLAN_DESTROY).encode(tid)),
        ),
        (
            "dreq-dreq-sent",
            record(S_A_DREQ_SENT_LOST, peer, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        (
            "dreq-timewait",
            record(S_B_TIMEWAIT, peer, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        (
            "dreq-dreq-rcvd",
            record(S_B_DREQ_RCVD, peer, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        (
            "dreq-rep-sent",
            record(S_B_REP_SENT_RTU_LOST, peer, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        (
            "dreq-unknown",
            record(S_A_IDLE, 0, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        (
            "dreq-wrong-qpn",
            record(
                S_B_ESTABLISHED,
                PATCH_REFLECTED | FIX_HEADER,
                &dreq(PLAN_NORMAL).encode(tid),
            ),
        ),
        // DREP: to DREQ_SENT, to DREQ_RCVD, to ESTABLISHED (dropped).
        (
            "drep-dreq-sent",
            record(S_A_DREQ_SENT, peer, &drep().encode(tid)),
        ),
        (
            "drep-dreq-rcvd",
            record(S_B_DREQ_RCVD, peer, &drep().encode(tid)),
        ),
        (
            "drep-established",
            record(S_A_ESTABLISHED, peer, &drep().encode(tid)),
        ),
        // Attributes the engine drops, patched to live connections.
        // SIDR: to each listener (answered / held / rejected / destroyed / no
        // such service), duplicate, and SIDR_REPs to the waiting requester.
        (
            "sidr-req-new",
            record(S_B_LISTEN, 0, &sidr_req(PLAN_NORMAL).encode(tid)),
        ),
        (
            "sidr-req-new-to-a",
            record(S_A_LISTEN, 0, &sidr_req(PLAN_REJECT).encode(tid)),
        ),
        (
            "sidr-req-hold",
            record(S_B_LISTEN, 0, &sidr_req(PLAN_HOLD).encode(tid)),
        ),
        (
            "sidr-req-destroy",
            record(S_B_LISTEN, 0, &sidr_req(PLAN_DESTROY).encode(tid)),
        ),
        ("sidr-req-unsupported", {
            let mut r = sidr_req(PLAN_NORMAL);
            r.service_id = 0x9999;
            record(S_B_LISTEN, 0, &r.encode(tid))
        }),
        (
            "sidr-req-dup",
            record(S_B_SIDR_REQ_RCVD, peer, &sidr_req(PLAN_NORMAL).encode(tid)),
        ),
        (
            "sidr-rep-to-sent",
            record(S_A_SIDR_REQ_SENT, peer, &sidr_rep(0).encode(tid, 0)),
        ),
        (
            "sidr-rep-to-idle",
            record(S_A_IDLE, peer, &sidr_rep(1).encode(tid, 0)),
        ),
        // MRA: to REQ_SENT / REP_SENT (stretch the timeout), duplicates, and
        // duplicate REQ / REP to an id that prepared one.
        (
            "mra-req-to-req-sent",
            record(
                S_A_REQ_SENT_LOST,
                remote_only,
                &mra(MsgResponse::Req).encode(tid),
            ),
        ),
        (
            "mra-rep-to-rep-sent",
            record(S_B_REP_SENT, peer, &mra(MsgResponse::Rep).encode(tid)),
        ),
        (
            "mra-dup-mra-req-rcvd",
            record(
                S_A_MRA_REQ_RCVD,
                remote_only,
                &mra(MsgResponse::Req).encode(tid),
            ),
        ),
        (
            "mra-other-established",
            record(S_A_ESTABLISHED, peer, &mra(MsgResponse::Other).encode(tid)),
        ),
        (
            "req-dup-mra-req-sent",
            record(
                S_B_MRA_REQ_SENT,
                peer,
                &req(TransportType::Rc, false, &[]).encode(tid),
            ),
        ),
        (
            "rep-dup-mra-rep-sent",
            record(S_A_MRA_REP_SENT, peer, &rep(PLAN_NORMAL).encode(tid)),
        ),
        (
            "rtu-to-mra-rep-rcvd",
            record(S_B_MRA_REP_RCVD, peer, &rtu().encode(tid)),
        ),
        (
            "rej-mra-req-rcvd",
            record(
                S_A_MRA_REQ_RCVD,
                remote_only,
                &rej(28, MsgResponse::Req, &[]).encode(tid),
            ),
        ),
        (
            "req-new-mra",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Rc, false, &[PLAN_MRA]).encode(tid),
            ),
        ),
        (
            "req-new-rep-mra",
            record(
                S_B_LISTEN,
                0,
                &req(TransportType::Rc, false, &[PLAN_NORMAL, PLAN_MRA]).encode(tid),
            ),
        ),
        ("lap-established", record(S_B_ESTABLISHED, peer, &lap())),
        ("apr-established", record(S_A_ESTABLISHED, peer, &apr())),
        ("class-port-info", record(S_A_IDLE, 0, &class_port_info())),
        // From an address nobody has, and delivered to the wrong device.
        (
            "dreq-from-nowhere",
            record(
                S_B_ESTABLISHED,
                peer | FROM_NOWHERE,
                &dreq(PLAN_NORMAL).encode(tid),
            ),
        ),
        (
            "rtu-cross",
            record(S_A_ESTABLISHED, peer | CROSS, &rtu().encode(tid)),
        ),
        // Attribute override: a DREQ body sent as a REJ.
        (
            "override-rej",
            record_as(S_B_ESTABLISHED, peer, 3, &dreq(PLAN_NORMAL).encode(tid)),
        ),
        // Sequences: a new connection driven by the fuzzer (the newest
        // fuzz-made id is selector NSLOTS): REQ held, then its REJ; REQ, RTU, DREQ.
        (
            "seq-req-rej",
            [
                record(
                    S_B_LISTEN,
                    0,
                    &req(TransportType::Rc, false, &[PLAN_HOLD]).encode(tid),
                ),
                record(NSLOTS, peer, &rej(28, MsgResponse::Other, &[]).encode(tid)),
            ]
            .concat(),
        ),
        (
            "seq-req-rtu-dreq",
            [
                record(
                    S_B_LISTEN,
                    0,
                    &req(TransportType::Rc, false, &[]).encode(tid),
                ),
                record(NSLOTS, peer, &rtu().encode(tid)),
                record(NSLOTS, peer, &dreq(PLAN_NORMAL).encode(tid)),
                record(NSLOTS, peer, &dreq(PLAN_NORMAL).encode(tid)),
            ]
            .concat(),
        ),
    ];
    for (name, bytes) in &seeds {
        write(dir, name, bytes);
    }
}

/// A CM MAD of `attr_id` with MessageX `x`.
fn cm_x(attr_id: u16, x: u8, local: Id, remote: Id) -> MadSpec {
    MadSpec {
        message_x: x,
        ..MadSpec::cm(attr_id, local, remote)
    }
}

fn cm(attr_id: u16, local: Id, remote: Id) -> MadSpec {
    MadSpec::cm(attr_id, local, remote)
}

fn send(who: u8, addr: u8, mad: MadSpec) -> Op {
    Op::Send {
        who,
        port: 1,
        addr,
        mad,
    }
}

fn from_wire(addr: u8, mad: MadSpec) -> Op {
    Op::Inbound {
        who: 0,
        port: 1,
        addr,
        mad,
    }
}

fn listen(who: u8, service: Service) -> Op {
    Op::Listen {
        who,
        service,
        port: 0,
        masked: false,
    }
}

/// The remote host's comm ID of its REQ / SIDR_REQ.
const PEER_ID: Id = Id::Raw(0x1111_2222);

/// A REQ for service `SERVICES[0]` arrives from address 0, for tenant 0
/// that listens on it.
fn req_to_tenant_0() -> Vec<Op> {
    vec![
        listen(0, Service::Known(0)),
        from_wire(0, cm(attr::REQ, PEER_ID, Id::Zero)),
    ]
}

fn script(tenants: usize, ops: Vec<Op>) -> Script {
    Script {
        tenants,
        devices: 1,
        ops,
    }
}

fn switch_seeds(dir: &Path) {
    let own = Id::Own(1);
    let peer_req = Id::Delivered(0);
    let rej = |x: u8, local: Id, reason: u16| MadSpec {
        reason,
        ..cm_x(attr::REJ, x, local, peer_req)
    };
    let seeds: Vec<(&str, Script)> = vec![
        (
            "passive-connect-disconnect",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![
                        send(0, 0, cm_x(attr::MRA, 0, own, peer_req)),
                        send(0, 0, cm(attr::REP, own, peer_req)),
                        from_wire(0, cm(attr::RTU, PEER_ID, own)),
                        send(0, 0, cm(attr::DREQ, own, peer_req)),
                        from_wire(0, cm(attr::DREP, PEER_ID, own)),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "active-connect-disconnect",
            script(
                2,
                vec![
                    send(1, 1, cm(attr::REQ, Id::Own(2), Id::Zero)),
                    from_wire(1, cm(attr::MRA, Id::Raw(0x3333_4444), Id::Tenant(1, 2))),
                    from_wire(1, cm(attr::REP, Id::Raw(0x3333_4444), Id::Tenant(1, 2))),
                    send(1, 1, cm(attr::RTU, Id::Own(2), Id::Raw(0x3333_4444))),
                    from_wire(1, cm(attr::DREQ, Id::Raw(0x3333_4444), Id::Tenant(1, 2))),
                    send(1, 1, cm(attr::DREP, Id::Own(2), Id::Raw(0x3333_4444))),
                ],
            ),
        ),
        (
            "passive-reject",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![
                        send(0, 0, rej(0, Id::Zero, 28)),
                        // Rejected: no REP for it after.
                        send(0, 0, cm(attr::REP, own, peer_req)),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "passive-reject-after-mra",
            script(
                3,
                [
                    req_to_tenant_0(),
                    vec![
                        send(0, 0, cm_x(attr::MRA, 0, own, peer_req)),
                        send(0, 0, rej(0, own, 28)),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "sidr",
            script(
                2,
                vec![
                    listen(1, Service::Known(1)),
                    from_wire(
                        2,
                        MadSpec {
                            service: Service::Known(1),
                            ..cm(attr::SIDR_REQ, PEER_ID, Id::Zero)
                        },
                    ),
                    send(1, 2, cm(attr::SIDR_REP, Id::SidrDelivered(0), Id::Zero)),
                    send(0, 0, cm(attr::SIDR_REQ, own, Id::Zero)),
                    from_wire(0, cm(attr::SIDR_REP, Id::Tenant(0, 1), Id::Zero)),
                ],
            ),
        ),
        (
            "assigned-service",
            script(
                2,
                vec![
                    listen(1, Service::Assign),
                    from_wire(
                        3,
                        MadSpec {
                            service: Service::Assigned(0),
                            ..cm(attr::REQ, PEER_ID, Id::Zero)
                        },
                    ),
                    send(1, 3, cm(attr::REP, own, peer_req)),
                    Op::Unlisten {
                        who: 1,
                        service: Service::Assigned(0),
                    },
                ],
            ),
        ),
        (
            "stateless-answers",
            script(
                2,
                vec![
                    from_wire(
                        0,
                        MadSpec {
                            service: Service::Raw(0x9999),
                            ..cm(attr::REQ, PEER_ID, Id::Zero)
                        },
                    ),
                    from_wire(1, cm(attr::DREQ, PEER_ID, Id::Raw(0x0abc_0001))),
                    from_wire(
                        2,
                        MadSpec {
                            service: Service::Raw(0x9999),
                            ..cm(attr::SIDR_REQ, PEER_ID, Id::Zero)
                        },
                    ),
                    from_wire(
                        0,
                        MadSpec {
                            reason: 4, // timeout, for nobody: every tenant
                            ..cm(attr::REJ, PEER_ID, Id::Zero)
                        },
                    ),
                ],
            ),
        ),
        (
            "sa-path-query",
            script(
                2,
                vec![
                    send(0, 0, MadSpec::cm(0, Id::Zero, Id::Zero)),
                    send(
                        0,
                        0,
                        MadSpec {
                            attr: Attr::Sa(0),
                            ..MadSpec::cm(0, Id::Zero, Id::Zero)
                        },
                    ),
                    from_wire(
                        0,
                        MadSpec {
                            attr: Attr::Sa(0),
                            ..MadSpec::cm(0, Id::Zero, Id::Zero)
                        },
                    ),
                    send(
                        1,
                        0,
                        MadSpec {
                            attr: Attr::Sa(2), // SubnAdmSet: refused
                            ..MadSpec::cm(0, Id::Zero, Id::Zero)
                        },
                    ),
                ],
            ),
        ),
        (
            "tenant-leaves",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![
                        Op::Rejoin { who: 0 },
                        // Its successor got no REQ.
                        send(0, 0, cm(attr::REP, own, peer_req)),
                        from_wire(0, cm(attr::DREQ, PEER_ID, Id::Seen(0))),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "raw-messages",
            script(
                2,
                vec![
                    Op::Raw {
                        who: 0,
                        bytes: ib_cm::switch::proto::ToDaemon::Stats { seq: 1 }.encode(),
                    },
                    Op::Raw {
                        who: 1,
                        bytes: ib_cm::switch::proto::ToDaemon::Listen {
                            seq: 2,
                            service_id: 0x1234,
                            mask: u64::MAX,
                            port: 0,
                        }
                        .encode(),
                    },
                    Op::Raw {
                        who: 0,
                        bytes: vec![1, 0, 4, 0, 1],
                    },
                ],
            ),
        ),
        // The hijacks of issue 30: each MAD below must be dropped.
        (
            "hijack-rep",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![send(1, 0, cm(attr::REP, own, peer_req))],
                ]
                .concat(),
            ),
        ),
        (
            "hijack-rej",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![
                        send(1, 0, rej(0, own, 28)),
                        send(1, 0, rej(0, Id::Zero, 28)),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "hijack-mra",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![send(1, 0, cm_x(attr::MRA, 0, own, peer_req))],
                ]
                .concat(),
            ),
        ),
        (
            "rep-to-another-address",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![send(0, 1, cm(attr::REP, own, peer_req))],
                ]
                .concat(),
            ),
        ),
        (
            "second-rep-other-id",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![
                        send(0, 0, cm(attr::REP, own, peer_req)),
                        send(0, 0, cm(attr::REP, own, peer_req)),
                        send(0, 0, cm(attr::REP, Id::Own(2), peer_req)),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "rej-req-after-rep",
            script(
                2,
                [
                    req_to_tenant_0(),
                    vec![
                        send(0, 0, cm(attr::REP, own, peer_req)),
                        send(0, 0, rej(0, own, 28)),
                    ],
                ]
                .concat(),
            ),
        ),
        (
            "second-sidr-rep",
            script(
                2,
                vec![
                    listen(1, Service::Known(1)),
                    from_wire(
                        2,
                        MadSpec {
                            service: Service::Known(1),
                            ..cm(attr::SIDR_REQ, PEER_ID, Id::Zero)
                        },
                    ),
                    send(1, 2, cm(attr::SIDR_REP, Id::SidrDelivered(0), Id::Zero)),
                    send(1, 2, cm(attr::SIDR_REP, Id::SidrDelivered(0), Id::Zero)),
                ],
            ),
        ),
        (
            "message-x-3",
            script(
                2,
                vec![
                    send(0, 0, cm_x(attr::MRA, 3, own, Id::Zero)),
                    send(0, 0, cm_x(attr::REJ, 3, own, Id::Zero)),
                ],
            ),
        ),
    ];
    for (name, script) in &seeds {
        let bytes = script.write();
        assert_eq!(
            &Script::read(&bytes),
            script,
            "{name}: the format round trip"
        );
        write(dir, name, &bytes);
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, make) in [
        ("decode", decode_seeds as fn(&Path)),
        ("receive", receive_seeds),
        ("switch", switch_seeds),
    ] {
        let dir = root.join(target);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        make(&dir);
        let n = fs::read_dir(&dir).unwrap().count();
        println!("{}: {n} seeds", dir.display());
    }
}
