//! [`QpAttributes`] applied to a QP of the [`sideway`] verbs crate (feature
//! `sideway`): what `ibv_modify_qp(qp, &attr, mask)` does with the output
//! of `ib_cm_init_qp_attr` in C. Why sideway, and why a whole
//! `ibv_qp_attr`: [`QpAttributes::apply_to`].

use rdma_mummy_sys::{
    ibv_ah_attr, ibv_gid, ibv_global_route, ibv_mig_state, ibv_qp_attr, ibv_qp_cap, ibv_qp_state,
};
use sideway::ibverbs::queue_pair::{ModifyQueuePairError, QueuePair, QueuePairAttribute};

use super::qp::{AddressVector, QpAttributes, QpState};

impl QpAttributes {
    /// These attributes as sideway's (feature `sideway`): every field the
    /// kernel set, under its bit of [`mask`](QpAttributes::mask); the other
    /// fields zero.
    ///
    /// They go in as a whole `ibv_qp_attr` ([`QueuePairAttribute::from`])
    /// rather than through sideway's setters: those have nothing for the
    /// alternate path, the path migration state, or an address's static
    /// rate, flow label and traffic class, all of which
    /// `ib_cm_init_qp_attr` may set.
    pub fn to_sideway(&self) -> QueuePairAttribute {
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
            alt_port_num: alternate.and_then(|a| a.port_num).unwrap_or_default(),
            alt_timeout: alternate.map_or(0, |a| a.timeout),
            rate_limit: 0,
        };
        // The IBV_QP_* bits are below bit 31: the mask fits an i32.
        QueuePairAttribute::from(&attr, self.mask as i32)
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
}
