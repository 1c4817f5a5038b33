//! XRC (issue 10 point 12): the REP of an XRC target carries its QPN in the
//! Local EE Context Number (`cm_format_rep`), and an XRC initiator reads the
//! peer's QPN from there (`cm_rep_handler`, `cm_rep_get_qpn`). The peer here is
//! a raw endpoint that speaks as the kernel does.

use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::cm::event::EventParam;
use crate::cm::qp_attr::QPS_RTR;
use crate::cm::{create_id, init_qp_attr, listen, send_dreq, send_rep, send_req, send_rtu};
use crate::wire::{Dreq, Rej, Rep, Req, ReqPath, TransportType, parse_header};

/// The QPN of the raw peer's XRC target QP, as its REP carries it.
const TGT_QPN: u32 = 0x00c0de;
/// The QPN of the raw peer's XRC initiator QP, as its REQ carries it.
const INI_QPN: u32 = 0x00abcd;

/// A REQ for an XRC connection, as the kernel's `cm_format_req` makes it for
/// `IB_QPT_XRC_INI`.
fn xrc_req(raw: &Raw, to: &Device, local_comm_id: u32, qpn: u32) -> Req {
    Req {
        // A subnet-local path from the raw port to `to`'s GID (a REQ for a
        // GID that is not the receiver's is rejected with INVALID_GID).
        primary_path: ReqPath {
            local_lid: raw.me.lid,
            remote_lid: to.ports[0].lid,
            local_gid: raw.me.gid,
            remote_gid: to.ports[0].gids[0].gid,
            subnet_local: true,
            ..ReqPath::default()
        },
        local_comm_id,
        service_id: SERVICE_ID,
        local_ca_guid: raw.me.node_guid,
        local_qpn: qpn,
        pkey: 0xffff, // the port's: a REQ in another partition is rejected
        initiator_depth: 1,
        transport_service_type: TransportType::Xrc,
        extended_transport_type: 1,
        starting_psn: 0x3000,
        path_mtu: 5,
        max_cm_retries: 3,
        remote_cm_response_timeout: 12,
        local_cm_response_timeout: 12,
        ..Req::default()
    }
}

#[test]
fn xrc_tgt_rep_carries_the_qpn_in_the_eecn_as_the_kernel() {
    let b = crate::cm::open_device(&loop_name()).unwrap();
    let rec = Arc::new(Recorder::default());
    // The caller asks for flow control, an initiator depth and no SRQ: for an
    // XRC target the kernel writes none of them.
    rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(|id, _| {
            let p = RepParams {
                flow_control: true,
                srq: false,
                ..rep_params(&[])
            };
            send_rep(id, &p).unwrap();
            0
        }),
    );
    let listener = create_id(&b, rec.handler()).unwrap();
    listen(&listener, SERVICE_ID).unwrap();
    let raw = Raw::open();
    raw.send_to(&b, &xrc_req(&raw, &b, 0x0102_0304, INI_QPN).encode(9));
    let passive = rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let mad = raw.wait_for(1);
    assert_eq!(
        parse_header(&mad).unwrap().0.attr_id,
        crate::wire::attr::REP
    );
    let local_id = passive.lock().inner.local_id.to_be_bytes();
    #[rustfmt::skip]
    let golden: [u8; 28] = [
        local_id[0], local_id[1], local_id[2], local_id[3], // local comm ID
        0x01, 0x02, 0x03, 0x04, // remote comm ID: the REQ's
        0, 0, 0, 0,             // local Q_Key: never set
        0, 0, 0, 0,             // local QPN: 0 for XRC_TGT; vendor ID H
        0x00, 0x0b, 0x22, 0,    // local EECN: the QPN; vendor ID M
        0x00, 0x20, 0x00, 0,    // starting PSN; vendor ID L
        2,                      // responder resources
        0,                      // initiator depth: not for XRC_TGT
        15 << 3,                // target ACK delay 15, failover 0, flow control 0
        (5 << 5) | 0x10,        // RNR retry count 5, SRQ forced to 1
    ];
    assert_eq!(mad[24..52], golden, "REP bytes 24..52");
    assert_eq!(Rep::decode(&mad).unwrap().local_ca_guid, b.node_guid);
    // The target keeps its QPN for the DREQs it will check.
    assert_eq!(passive.lock().inner.local_qpn, PASSIVE_QPN);
    crate::cm::destroy_id(&passive, 0);
    crate::cm::destroy_id(&listener, 0);
    crate::cm::close_device(&b).unwrap();
}

/// An XRC initiator on device A connected to the raw peer, which answers as
/// the kernel's XRC target: its QPN only in the EECN.
struct XrcIni {
    a: Arc<Device>,
    raw: Raw,
    rec: Arc<Recorder>,
    /// REP_RECEIVED's `remote_qpn`, one per event.
    event_qpns: Arc<Mutex<Vec<u32>>>,
    /// How many MADs the raw peer has received so far.
    got: usize,
}

impl XrcIni {
    fn new() -> Self {
        let a = crate::cm::open_device(&loop_name()).unwrap();
        let rec = Arc::new(Recorder::default());
        let event_qpns: Arc<Mutex<Vec<u32>>> = Arc::default();
        let qpns = event_qpns.clone();
        rec.on(
            IB_CM_REP_RECEIVED,
            Arc::new(move |_, ev| {
                if let EventParam::RepRcvd(r) = &ev.param {
                    qpns.lock().push(r.remote_qpn);
                }
                0
            }),
        );
        Self {
            a,
            raw: Raw::open(),
            rec,
            event_qpns,
            got: 0,
        }
    }

    fn next_mad(&mut self) -> Mad {
        self.got += 1;
        self.raw.wait_for(self.got)
    }

    /// REQ from a new XRC_INI id, the kernel-style REP with `tgt_qpn`; the
    /// id after REP_RECEIVED (or a REJ if the REP was refused).
    fn connect(&mut self, peer_comm_id: u32, tgt_qpn: u32) -> Arc<CmIdPriv> {
        let id = create_id(&self.a, self.rec.handler()).unwrap();
        let p = ReqParams {
            primary_path: self.a.init_path(1, &self.raw.me.gid).unwrap(),
            service_id: SERVICE_ID,
            qp_num: ACTIVE_QPN,
            qp_type: ib_qp_type::IB_QPT_XRC_INI as i32,
            starting_psn: 0x1000,
            initiator_depth: 1,
            remote_cm_response_timeout: 12,
            local_cm_response_timeout: 12,
            max_cm_retries: 3,
            ..ReqParams::default()
        };
        send_req(&id, &p).unwrap();
        let req = Req::decode(&self.next_mad()).unwrap();
        assert_eq!(req.transport_service_type, TransportType::Xrc);
        let rep = Rep {
            local_comm_id: peer_comm_id,
            remote_comm_id: req.local_comm_id,
            local_eecn: tgt_qpn,
            starting_psn: 0x2000,
            responder_resources: 1,
            target_ack_delay: 15,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: self.raw.me.node_guid,
            ..Rep::default()
        };
        self.raw.send_to(&self.a, &rep.encode(1));
        id
    }

    /// `connect`, then REP_RECEIVED, A's RTU on the wire: ESTABLISHED.
    fn establish(&mut self, peer_comm_id: u32, tgt_qpn: u32) -> Arc<CmIdPriv> {
        let id = self.connect(peer_comm_id, tgt_qpn);
        let seen = self.rec.wait(Some(&id), IB_CM_REP_RECEIVED);
        assert_eq!(seen.state, IB_CM_REP_RCVD);
        send_rtu(&id, &[]).unwrap();
        let mad = self.next_mad();
        let attr_id = parse_header(&mad).unwrap().0.attr_id;
        assert_eq!(attr_id, crate::wire::attr::RTU, "{:?}", Rej::decode(&mad));
        assert_eq!(id.state(), IB_CM_ESTABLISHED);
        id
    }

    fn finish(self, ids: &[&Arc<CmIdPriv>]) {
        for id in ids {
            crate::cm::destroy_id(id, 0);
        }
        crate::cm::close_device(&self.a).unwrap();
    }
}

#[test]
fn xrc_ini_takes_the_remote_qpn_from_the_reps_eecn() {
    let mut ini = XrcIni::new();
    let id = ini.connect(0x1111, TGT_QPN);
    ini.rec.wait(Some(&id), IB_CM_REP_RECEIVED);
    assert_eq!(*ini.event_qpns.lock(), [TGT_QPN], "REP_RECEIVED remote_qpn");
    assert_eq!(id.lock().inner.remote_qpn, TGT_QPN);
    let rtr = init_qp_attr(&id, QPS_RTR).unwrap();
    assert_eq!(rtr.dest_qp_num, TGT_QPN, "RTR dest_qp_num");
    ini.finish(&[&id]);
}

#[test]
fn two_xrc_connections_to_one_node_do_not_collide() {
    let mut ini = XrcIni::new();
    let first = ini.establish(0x2221, TGT_QPN);
    // A second target QP of the same node: a new connection, not a stale one.
    let second = ini.establish(0x2222, TGT_QPN + 1);
    assert_eq!(first.state(), IB_CM_ESTABLISHED);
    assert_eq!(*ini.event_qpns.lock(), [TGT_QPN, TGT_QPN + 1]);
    ini.finish(&[&first, &second]);
}

#[test]
fn xrc_ini_dreq_carries_the_targets_qpn() {
    let mut ini = XrcIni::new();
    let id = ini.establish(0x3333, TGT_QPN);
    send_dreq(&id, None).unwrap();
    let dreq = Dreq::decode(&ini.next_mad()).unwrap();
    assert_eq!(dreq.remote_comm_id, 0x3333);
    assert_eq!(dreq.remote_qpn, TGT_QPN, "DREQ remote QPN");
    ini.finish(&[&id]);
}
