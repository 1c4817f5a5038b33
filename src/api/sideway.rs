//! [`QpAttributes`] applied to a QP of the [`sideway`] verbs crate (feature
//! `sideway`): what `ibv_modify_qp(qp, &attr, mask)` does with the output
//! of `ib_cm_init_qp_attr` in C. Why sideway, and why a whole
//! `ibv_qp_attr`: [`QpAttributes::apply_to`].

use rdma_mummy_sys::{
    ibv_ah_attr, ibv_gid, ibv_global_route, ibv_mig_state, ibv_qp_attr, ibv_qp_cap, ibv_qp_state,
};
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePair, QueuePairAttribute};

use super::qp::{AddressVector, QpAttributes, QpState};
use crate::cm::qp_attr::mask;

impl QpAttributes {
    /// These attributes as sideway's (feature `sideway`): every field that
    /// is `Some`, under its `IBV_QP_*` bit; the other fields zero, their
    /// bits clear.
    ///
    /// The bits come from the fields, not from
    /// [`mask`](QpAttributes::mask): the fields are the caller's to change
    /// (the passive side sets [`rq_psn`](QpAttributes::rq_psn) before its
    /// REP, a caller may add [`min_rnr_timer`](QpAttributes::min_rnr_timer)
    /// or drop [`alternate`](QpAttributes::alternate)), and a bit without
    /// its field would hand the driver a zero (port 0, MTU 0: `EINVAL`), a
    /// field without its bit would be ignored. As the CM hands them out the
    /// two agree.
    ///
    /// They go in as a whole `ibv_qp_attr` ([`QueuePairAttribute::from`])
    /// rather than through sideway's setters: those have nothing for the
    /// alternate path, the path migration state, or an address's static
    /// rate, flow label and traffic class, all of which
    /// `ib_cm_init_qp_attr` may set.
    pub fn to_sideway(&self) -> QueuePairAttribute {
        let (attr, mask) = self.ibv_modify_args();
        // The IBV_QP_* bits are below bit 31: the mask fits an i32.
        QueuePairAttribute::from(&attr, mask as i32)
    }

    /// The `ibv_qp_attr` and the `IBV_QP_*` mask that go to
    /// `ibv_modify_qp`.
    fn ibv_modify_args(&self) -> (ibv_qp_attr, u32) {
        let alternate = self.alternate;
        let attr = ibv_qp_attr {
            qp_state: self.state.map_or(ibv_qp_state::IBV_QPS_RESET, qp_state),
            cur_qp_state: ibv_qp_state::IBV_QPS_RESET,
            path_mtu: self.path_mtu.unwrap_or_default().into(),
            path_mig_state: if self.rearm_path_migration {
                ibv_mig_state::IBV_MIG_REARM
            } else {
                ibv_mig_state::IBV_MIG_MIGRATED
            },
            qkey: 0,
            rq_psn: self.rq_psn.unwrap_or_default(),
            sq_psn: self.sq_psn.unwrap_or_default(),
            dest_qp_num: self.dest_qp_num.unwrap_or_default(),
            qp_access_flags: self.access_flags.unwrap_or_default(),
            cap: ibv_qp_cap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            ah_attr: ah_attr(self.address.as_ref()),
            alt_ah_attr: ah_attr(alternate.as_ref().map(|a| &a.address)),
            pkey_index: self.pkey_index.unwrap_or_default(),
            alt_pkey_index: alternate.map_or(0, |a| a.pkey_index),
            en_sqd_async_notify: 0,
            sq_draining: 0,
            max_rd_atomic: self.max_rd_atomic.unwrap_or_default(),
            max_dest_rd_atomic: self.max_dest_rd_atomic.unwrap_or_default(),
            min_rnr_timer: self.min_rnr_timer.unwrap_or_default(),
            port_num: self.port_num.unwrap_or_default(),
            timeout: self.timeout.unwrap_or_default(),
            retry_cnt: self.retry_cnt.unwrap_or_default(),
            rnr_retry: self.rnr_retry.unwrap_or_default(),
            // uverbs' modify_qp refuses an alternate path whose port is not
            // its address's. Unlike the C door (ffi's write_qp_attr), which
            // leaves `alt_port_num` as the caller's ibv_qp_attr had it, as
            // the kernel does: this ibv_qp_attr starts from zero.
            alt_port_num: alternate.map_or(0, |a| a.port_num.unwrap_or(a.address.port_num)),
            alt_timeout: alternate.map_or(0, |a| a.timeout),
            rate_limit: 0,
        };
        (attr, self.ibv_mask())
    }

    /// The `IBV_QP_*` mask of the fields that are `Some`: not the engine's
    /// [`mask`](QpAttributes::mask), on purpose ([`QpAttributes::to_sideway`]).
    fn ibv_mask(&self) -> u32 {
        [
            (self.state.is_some(), mask::STATE),
            (self.access_flags.is_some(), mask::ACCESS_FLAGS),
            (self.pkey_index.is_some(), mask::PKEY_INDEX),
            (self.port_num.is_some(), mask::PORT),
            (self.address.is_some(), mask::AV),
            (self.path_mtu.is_some(), mask::PATH_MTU),
            (self.timeout.is_some(), mask::TIMEOUT),
            (self.retry_cnt.is_some(), mask::RETRY_CNT),
            (self.rnr_retry.is_some(), mask::RNR_RETRY),
            (self.rq_psn.is_some(), mask::RQ_PSN),
            (self.max_rd_atomic.is_some(), mask::MAX_QP_RD_ATOMIC),
            (self.alternate.is_some(), mask::ALT_PATH),
            (self.min_rnr_timer.is_some(), mask::MIN_RNR_TIMER),
            (self.sq_psn.is_some(), mask::SQ_PSN),
            (self.max_dest_rd_atomic.is_some(), mask::MAX_DEST_RD_ATOMIC),
            (self.rearm_path_migration, mask::PATH_MIG_STATE),
            (self.dest_qp_num.is_some(), mask::DEST_QPN),
        ]
        .into_iter()
        .filter(|&(set, _)| set)
        .fold(0, |bits, (_, bit)| bits | bit)
    }

    /// Applies these attributes to `qp`, a QP of the [`sideway`] verbs
    /// crate (feature `sideway`), in one `ibv_modify_qp`. sideway's error
    /// says which attribute the driver refused, when it can tell.
    ///
    /// The active side moves its QP to INIT once the REQ is out (the CM
    /// has the attributes from REQ_SENT on), to RTR and RTS on the REP; the
    /// passive side to INIT and RTR on the REQ, before its REP, and to RTS
    /// once established. As in the kernel, the CM learns the passive
    /// side's receive PSN from the REP it sends: an RTR before the REP
    /// takes the REP's [`starting_psn`](crate::Reply::starting_psn) as its
    /// [`rq_psn`](QpAttributes::rq_psn), as rdma_cm and IPoIB-CM do.
    ///
    /// Why sideway rather than the `ibverbs` crate: sideway's
    /// [`QueuePair::modify`] takes any attribute set with its mask, as the
    /// CM hands them out; `ibverbs` moves its QPs through INIT, RTR and RTS
    /// itself in `handshake()`, with attributes of its own, so the CM's
    /// (the peer's PSN, the path's MTU, the timeouts, the alternate path)
    /// have nowhere to go. sideway's `rdma-mummy-sys` builds a small C shim
    /// with cmake and bindgen (libclang) and opens `libibverbs.so.1` with
    /// `dlopen` at run time: nothing links libibverbs, and the feature is
    /// off unless asked for. `examples/rc_pingpong.rs` connects two RC QPs
    /// this way and sends data over them.
    ///
    /// ```no_run
    /// use ib_cm::{ConnectRequest, Device, IncomingRequest, QpState, Reply};
    /// use sideway::ibverbs::queue_pair::QueuePair;
    ///
    /// // The active side: REQ, INIT; REP, RTR, RTS; RTU.
    /// fn connect(
    ///     device: &Device,
    ///     request: ConnectRequest,
    ///     qp: &mut impl QueuePair,
    /// ) -> Result<ib_cm::Connection, Box<dyn std::error::Error>> {
    ///     let pending = device.request(request)?;
    ///     pending.qp_attributes(QpState::Init)?.apply_to(qp)?;
    ///     let replied = pending.wait_reply()?;
    ///     replied.qp_attributes(QpState::Rtr)?.apply_to(qp)?;
    ///     replied.qp_attributes(QpState::Rts)?.apply_to(qp)?;
    ///     Ok(replied.confirm(b"")?)
    /// }
    ///
    /// // The passive side: INIT, RTR (from the REP's PSN); REP; RTU, RTS.
    /// fn accept(
    ///     incoming: IncomingRequest,
    ///     qp: &mut impl QueuePair,
    /// ) -> Result<ib_cm::Connection, Box<dyn std::error::Error>> {
    ///     let reply = Reply::new(qp.qp_number());
    ///     incoming.qp_attributes(QpState::Init)?.apply_to(qp)?;
    ///     let mut rtr = incoming.qp_attributes(QpState::Rtr)?;
    ///     rtr.rq_psn = Some(reply.starting_psn);
    ///     rtr.apply_to(qp)?;
    ///     let connection = incoming.reply(reply)?.wait_established()?;
    ///     connection.qp_attributes(QpState::Rts)?.apply_to(qp)?;
    ///     Ok(connection)
    /// }
    /// ```
    pub fn apply_to<Q: QueuePair + ?Sized>(&self, qp: &mut Q) -> Result<(), ModifyQueuePairError> {
        qp.modify(&self.to_sideway())
    }
}

/// `IBV_QPS_*` for `state`.
fn qp_state(state: QpState) -> ibv_qp_state::Type {
    match state {
        QpState::Init => ibv_qp_state::IBV_QPS_INIT,
        QpState::Rtr => ibv_qp_state::IBV_QPS_RTR,
        QpState::Rts => ibv_qp_state::IBV_QPS_RTS,
    }
}

/// `struct ibv_ah_attr` of `address` (zero without one).
fn ah_attr(address: Option<&AddressVector>) -> ibv_ah_attr {
    let a = address.copied().unwrap_or(AddressVector {
        dlid: 0,
        sl: 0,
        static_rate: 0,
        is_global: false,
        port_num: 0,
        dgid: Default::default(),
        flow_label: 0,
        sgid_index: 0,
        hop_limit: 0,
        traffic_class: 0,
    });
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.dgid.0 },
            flow_label: a.flow_label,
            sgid_index: a.sgid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: a.static_rate,
        is_global: a.is_global.into(),
        port_num: a.port_num,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::qp::AlternatePath;
    use crate::api::types::Gid;

    /// Every field lands in sideway's attribute under its own bit.
    #[test]
    fn every_field_reaches_sideways_attribute() {
        let address = AddressVector {
            dlid: 0x12,
            sl: 3,
            static_rate: 7,
            is_global: true,
            port_num: 1,
            dgid: Gid([0xfe; 16]),
            flow_label: 0x1_2345,
            sgid_index: 2,
            hop_limit: 64,
            traffic_class: 0x20,
        };
        let a = QpAttributes {
            mask: 0x1b_ffb9,
            state: Some(QpState::Rtr),
            access_flags: Some(0xe),
            pkey_index: Some(5),
            port_num: Some(1),
            address: Some(address),
            path_mtu: Some(3),
            dest_qp_num: Some(0xab_cdef),
            rq_psn: Some(0x12_3456),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(12),
            sq_psn: Some(0x65_4321),
            retry_cnt: Some(7),
            rnr_retry: Some(6),
            max_rd_atomic: Some(2),
            timeout: Some(14),
            alternate: None,
            rearm_path_migration: false,
        };
        let s = a.to_sideway();
        assert_eq!(s.state() as u32, ibv_qp_state::IBV_QPS_RTR);
        assert_eq!(s.access_flags().bits(), 0xe);
        assert_eq!(s.pkey_index(), 5);
        assert_eq!(s.port(), 1);
        assert_eq!(s.path_mtu() as u32, 3);
        assert_eq!(s.dest_qp_num(), 0xab_cdef);
        assert_eq!(s.rq_psn(), 0x12_3456);
        assert_eq!(s.sq_psn(), 0x65_4321);
        assert_eq!(s.max_dest_read_atomic(), 4);
        assert_eq!(s.max_read_atomic(), 2);
        assert_eq!(s.min_rnr_timer(), 12);
        assert_eq!(s.timeout(), 14);
        assert_eq!(s.retry_cnt(), 7);
        assert_eq!(s.rnr_retry(), 6);
    }

    /// An address keeps what sideway's setters have no room for.
    #[test]
    fn an_address_keeps_rate_flow_label_and_traffic_class() {
        let address = AddressVector {
            dlid: 0x12,
            sl: 3,
            static_rate: 7,
            is_global: true,
            port_num: 2,
            dgid: Gid([0xfe; 16]),
            flow_label: 0x1_2345,
            sgid_index: 4,
            hop_limit: 64,
            traffic_class: 0x20,
        };
        let ah = ah_attr(Some(&address));
        assert_eq!((ah.dlid, ah.sl, ah.static_rate), (0x12, 3, 7));
        assert_eq!((ah.is_global, ah.port_num, ah.src_path_bits), (1, 2, 0));
        assert_eq!(ah.grh.flow_label, 0x1_2345);
        assert_eq!(ah.grh.sgid_index, 4);
        assert_eq!(ah.grh.hop_limit, 64);
        assert_eq!(ah.grh.traffic_class, 0x20);
        let none = ah_attr(None);
        assert_eq!((none.dlid, none.is_global, none.port_num), (0, 0, 0));
    }

    /// A field `Some` goes to the driver with its bit, a field `None`
    /// without it, whatever `mask` says: the fields are public and the
    /// documented way to use them changes them (the passive side's
    /// `rq_psn`); a bit without its field would give the driver a zero
    /// (port 0, MTU 0: `EINVAL` from `ibv_modify_qp`), a field without its
    /// bit would be ignored silently.
    #[test]
    fn the_mask_follows_the_fields() {
        let kernel_rtr = QpAttributes {
            mask: mask::STATE
                | mask::AV
                | mask::PATH_MTU
                | mask::DEST_QPN
                | mask::RQ_PSN
                | mask::ALT_PATH,
            state: Some(QpState::Rtr),
            access_flags: None,
            pkey_index: None,
            port_num: None,
            address: Some(address(1)),
            path_mtu: Some(5),
            dest_qp_num: Some(0x12),
            rq_psn: Some(0x34),
            max_dest_rd_atomic: None,
            min_rnr_timer: None,
            sq_psn: None,
            retry_cnt: None,
            rnr_retry: None,
            max_rd_atomic: None,
            timeout: None,
            alternate: Some(AlternatePath {
                address: address(1),
                pkey_index: 0,
                port_num: Some(1),
                timeout: 14,
            }),
            rearm_path_migration: false,
        };
        let (_, bits) = kernel_rtr.ibv_modify_args();
        assert_eq!(bits, kernel_rtr.mask);

        // The caller adds what the kernel left out (an RC RTR's responder
        // side) and drops the alternate path it does not want.
        let mut rtr = kernel_rtr;
        rtr.max_dest_rd_atomic = Some(4);
        rtr.min_rnr_timer = Some(12);
        rtr.alternate = None;
        let (attr, bits) = rtr.ibv_modify_args();
        let want =
            (kernel_rtr.mask & !mask::ALT_PATH) | mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
        assert_eq!(bits, want, "{bits:#x} != {want:#x}");
        assert_eq!((attr.max_dest_rd_atomic, attr.min_rnr_timer), (4, 12));

        // A bit whose field is gone, and one no field stands for
        // (IBV_QP_CAP): neither goes to the driver.
        let mut odd = kernel_rtr;
        odd.mask |= mask::PORT | (1 << 19);
        odd.path_mtu = None;
        let (_, bits) = odd.ibv_modify_args();
        assert_eq!(bits, kernel_rtr.mask & !mask::PATH_MTU);

        // Re-arming path migration is a bit of its own.
        let mut rts = kernel_rtr;
        rts.rearm_path_migration = true;
        let (attr, bits) = rts.ibv_modify_args();
        assert_ne!(bits & mask::PATH_MIG_STATE, 0);
        assert_eq!(attr.path_mig_state, ibv_mig_state::IBV_MIG_REARM);
    }

    /// `ibv_modify_qp` with IBV_QP_ALT_PATH needs `alt_port_num` equal to
    /// the alternate address's port (uverbs' `modify_qp` refuses anything
    /// else with `EINVAL`): an alternate path whose own port is unknown
    /// takes its address's.
    #[test]
    fn an_alternate_path_without_a_port_takes_its_addresss() {
        let a = QpAttributes {
            mask: mask::ALT_PATH | mask::PATH_MIG_STATE,
            state: None,
            access_flags: None,
            pkey_index: None,
            port_num: None,
            address: None,
            path_mtu: None,
            dest_qp_num: None,
            rq_psn: None,
            max_dest_rd_atomic: None,
            min_rnr_timer: None,
            sq_psn: None,
            retry_cnt: None,
            rnr_retry: None,
            max_rd_atomic: None,
            timeout: None,
            alternate: Some(AlternatePath {
                address: address(2),
                pkey_index: 3,
                port_num: None,
                timeout: 18,
            }),
            rearm_path_migration: true,
        };
        let (attr, bits) = a.ibv_modify_args();
        assert_eq!(bits, mask::ALT_PATH | mask::PATH_MIG_STATE);
        assert_eq!((attr.alt_port_num, attr.alt_ah_attr.port_num), (2, 2));
        assert_eq!((attr.alt_pkey_index, attr.alt_timeout), (3, 18));
    }

    fn address(port_num: u8) -> AddressVector {
        AddressVector {
            dlid: 7,
            sl: 0,
            static_rate: 0,
            is_global: false,
            port_num,
            dgid: Gid([0; 16]),
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 0,
            traffic_class: 0,
        }
    }

    /// The attributes of real connections on the in-process fabric, for
    /// RC, UC and XRC, both sides, every step: the mask that goes to
    /// `ibv_modify_qp` is one the kernel's `qp_state_table`
    /// (`ib_modify_qp_is_ok`) accepts for the QP type and transition, each
    /// field under its bit is the one the CM computed, and the ports agree
    /// as uverbs' `modify_qp` checks (AV's port = PORT's; ALT_PATH's
    /// `alt_port_num` = its address's, not 0).
    #[test]
    fn loop_connections_pass_the_verbs_state_table() {
        use crate::api::{ConnectRequest, Device, QpType, Reply};
        use crate::cm::tests::loop_name;
        use std::time::Duration;
        const WAIT: Duration = Duration::from_secs(10);

        for (active_type, passive_type) in [
            (QpType::Rc, QpType::Rc),
            (QpType::Uc, QpType::Uc),
            (QpType::XrcIni, QpType::XrcTgt),
        ] {
            for alternate in [false, true] {
                let a = Device::open(&loop_name()).unwrap();
                let b = Device::open(&loop_name()).unwrap();
                let listener = b.listen(0x5eed).unwrap();
                let path = a.path_to(1, b.gid(1, 0).unwrap()).unwrap();
                let mut request = ConnectRequest::builder(path, 0x5eed, 0x111)
                    .qp_type(active_type)
                    .responder_resources(4)
                    .initiator_depth(4);
                if alternate {
                    request = request.alternate_path(path);
                }
                let pending = a.request(request.build()).unwrap();
                let mut steps = vec![(active_type, pending.qp_attributes(QpState::Init).unwrap())];
                let incoming = listener.accept_timeout(WAIT).unwrap();
                for state in [QpState::Init, QpState::Rtr] {
                    steps.push((passive_type, incoming.qp_attributes(state).unwrap()));
                }
                let sent = incoming.reply(Reply::new(0x222)).unwrap();
                let replied = pending.wait_reply().unwrap();
                for state in [QpState::Rtr, QpState::Rts] {
                    steps.push((active_type, replied.qp_attributes(state).unwrap()));
                }
                let _a_conn = replied.confirm(b"").unwrap();
                let b_conn = sent.wait_established().unwrap();
                steps.push((passive_type, b_conn.qp_attributes(QpState::Rts).unwrap()));

                for (qp_type, attrs) in steps {
                    let what = format!("{qp_type:?} alternate {alternate}: {attrs:?}");
                    check_against_verbs(qp_type, &attrs, &what);
                    assert_eq!(
                        attrs.alternate.is_some(),
                        alternate && attrs.state == Some(QpState::Rtr),
                        "{what}"
                    );
                }
            }
        }
    }

    /// `attrs` as `ib_modify_qp_is_ok` and uverbs' `modify_qp` see them.
    fn check_against_verbs(qp_type: crate::api::QpType, attrs: &QpAttributes, what: &str) {
        use crate::api::QpType;
        let (attr, bits) = attrs.ibv_modify_args();
        let common_rtr = mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN;
        let responder = mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
        let initiator = mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::MAX_QP_RD_ATOMIC;
        let (required, optional) = match (attrs.state, qp_type) {
            (Some(QpState::Init), _) => (mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS, 0),
            (Some(QpState::Rtr), QpType::Rc | QpType::XrcTgt) => (common_rtr | responder, 0),
            (Some(QpState::Rtr), _) => (common_rtr, 0),
            (Some(QpState::Rts), QpType::Uc) => (mask::SQ_PSN, 0),
            (Some(QpState::Rts), QpType::XrcTgt) => {
                (mask::TIMEOUT | mask::SQ_PSN, mask::MIN_RNR_TIMER)
            }
            (Some(QpState::Rts), QpType::Rc) => (initiator | mask::SQ_PSN, mask::MIN_RNR_TIMER),
            (Some(QpState::Rts), _) => (initiator | mask::SQ_PSN, 0),
            (None, _) => panic!("{what}: no state before a LAP"),
        };
        let optional = optional
            | match attrs.state {
                Some(QpState::Rtr) => mask::ALT_PATH | mask::ACCESS_FLAGS | mask::PKEY_INDEX,
                Some(QpState::Rts) => mask::ALT_PATH | mask::ACCESS_FLAGS | mask::PATH_MIG_STATE,
                _ => 0,
            };
        assert_ne!(bits & mask::STATE, 0, "{what}");
        assert_eq!(bits & required, required, "{what}: required bits missing");
        let allowed = required | optional | mask::STATE;
        assert_eq!(
            bits & !allowed,
            0,
            "{what}: bits ib_modify_qp_is_ok refuses"
        );
        assert_eq!(bits, attrs.mask, "{what}: not the kernel's mask");
        if let Some(port) = attrs.port_num {
            assert_ne!(port, 0, "{what}");
            assert_eq!(attr.port_num, port, "{what}");
        }
        if let Some(address) = attrs.address {
            assert_eq!(attr.ah_attr.port_num, address.port_num, "{what}");
            assert_eq!(attr.ah_attr.port_num, 1, "{what}: AV's port is the QP's");
            assert_eq!(attr.ah_attr.dlid, address.dlid, "{what}");
        }
        if let Some(alt) = attrs.alternate {
            assert_ne!(attr.alt_port_num, 0, "{what}");
            assert_eq!(attr.alt_port_num, attr.alt_ah_attr.port_num, "{what}");
            assert_eq!(attr.alt_ah_attr.dlid, alt.address.dlid, "{what}");
        }
        let fields = [
            (mask::PATH_MTU, attrs.path_mtu.map(u32::from), attr.path_mtu),
            (mask::DEST_QPN, attrs.dest_qp_num, attr.dest_qp_num),
            (mask::RQ_PSN, attrs.rq_psn, attr.rq_psn),
            (mask::SQ_PSN, attrs.sq_psn, attr.sq_psn),
            (mask::ACCESS_FLAGS, attrs.access_flags, attr.qp_access_flags),
            (
                mask::PKEY_INDEX,
                attrs.pkey_index.map(u32::from),
                attr.pkey_index.into(),
            ),
            (
                mask::TIMEOUT,
                attrs.timeout.map(u32::from),
                attr.timeout.into(),
            ),
            (
                mask::RETRY_CNT,
                attrs.retry_cnt.map(u32::from),
                attr.retry_cnt.into(),
            ),
            (
                mask::RNR_RETRY,
                attrs.rnr_retry.map(u32::from),
                attr.rnr_retry.into(),
            ),
            (
                mask::MAX_QP_RD_ATOMIC,
                attrs.max_rd_atomic.map(u32::from),
                attr.max_rd_atomic.into(),
            ),
            (
                mask::MAX_DEST_RD_ATOMIC,
                attrs.max_dest_rd_atomic.map(u32::from),
                attr.max_dest_rd_atomic.into(),
            ),
            (
                mask::MIN_RNR_TIMER,
                attrs.min_rnr_timer.map(u32::from),
                attr.min_rnr_timer.into(),
            ),
        ];
        for (bit, field, raw) in fields {
            assert_eq!(field.is_some(), bits & bit != 0, "{what}: bit {bit:#x}");
            if let Some(value) = field {
                assert_eq!(value, raw, "{what}: bit {bit:#x}");
            }
        }
        if let Some(mtu) = attrs.path_mtu {
            assert!((1..=5).contains(&mtu), "{what}: path MTU {mtu}");
        }
    }
}
