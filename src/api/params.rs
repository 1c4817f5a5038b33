//! What a REQ and a REP carry, with rdma_cm's defaults.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

use super::types::{Path, QpType};
use crate::cm::{RepParams, ReqParams};

/// A connection request (`struct ib_cm_req_param`), made with
/// [`ConnectRequest::builder`].
#[derive(Clone, Debug)]
pub struct ConnectRequest {
    pub(super) params: ReqParams,
    pub(super) rtu_private_data: Vec<u8>,
}

/// Builds a [`ConnectRequest`]. Unset fields take the values the kernel's
/// rdma_cm sends (`cma_connect_ib`): RC, a random starting PSN, CM response
/// timeouts of 20 (4.096 µs · 2^20, about 4.3 s) both ways, 15 CM retries,
/// transport and RNR retry counts of 7, flow control on, one responder
/// resource and an initiator depth of one. With those a REQ nobody answers
/// fails after about 70 s: tests and impatient callers set shorter ones.
#[derive(Clone, Debug)]
pub struct ConnectRequestBuilder {
    request: ConnectRequest,
}

impl ConnectRequest {
    /// A request for `service_id` (host order) from QP `qp_num`, along
    /// `path` (from [`Device::path_to`](super::Device::path_to)).
    pub fn builder(path: Path, service_id: u64, qp_num: u32) -> ConnectRequestBuilder {
        ConnectRequestBuilder {
            request: ConnectRequest {
                params: ReqParams {
                    primary_path: path.0,
                    alternate_path: None,
                    service_id,
                    qp_num,
                    qp_type: QpType::Rc.to_raw(),
                    starting_psn: random_psn(),
                    private_data: Vec::new(),
                    responder_resources: 1,
                    initiator_depth: 1,
                    remote_cm_response_timeout: 20,
                    flow_control: true,
                    local_cm_response_timeout: 20,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    max_cm_retries: 15,
                    srq: false,
                    ece: (0, 0),
                },
                rtu_private_data: Vec::new(),
            },
        }
    }
}

impl ConnectRequestBuilder {
    /// The finished request.
    pub fn build(self) -> ConnectRequest {
        self.request
    }

    /// An alternate path (same P_Key and MTU as the primary one).
    pub fn alternate_path(mut self, path: Path) -> Self {
        self.request.params.alternate_path = Some(path.0);
        self
    }

    /// The QP type (RC by default).
    pub fn qp_type(mut self, qp_type: QpType) -> Self {
        self.request.params.qp_type = qp_type.to_raw();
        self
    }

    /// The REQ's starting PSN (24 bits; random by default). As in the
    /// kernel, this side's QP receives from it (its RTR `rq_psn`) and the
    /// peer's sends from it (the peer's RTS `sq_psn`).
    pub fn starting_psn(mut self, psn: u32) -> Self {
        self.request.params.starting_psn = psn;
        self
    }

    /// The REQ's private data: up to 92 bytes (more is refused with
    /// `EINVAL` when the request is sent).
    pub fn private_data(mut self, data: &[u8]) -> Self {
        self.request.params.private_data = data.to_vec();
        self
    }

    /// The private data of the RTU that [`Device::connect`](super::Device::connect)
    /// sends: up to 224 bytes.
    pub fn rtu_private_data(mut self, data: &[u8]) -> Self {
        self.request.rtu_private_data = data.to_vec();
        self
    }

    /// Responder resources offered (RDMA reads the peer may have in flight).
    pub fn responder_resources(mut self, n: u8) -> Self {
        self.request.params.responder_resources = n;
        self
    }

    /// Initiator depth (RDMA reads this side may have in flight).
    pub fn initiator_depth(mut self, n: u8) -> Self {
        self.request.params.initiator_depth = n;
        self
    }

    /// How long the peer may take to answer (IBA time exponent, 0-31).
    pub fn remote_cm_response_timeout(mut self, t: u8) -> Self {
        self.request.params.remote_cm_response_timeout = t;
        self
    }

    /// How long this side takes to answer (IBA time exponent, 0-31).
    pub fn local_cm_response_timeout(mut self, t: u8) -> Self {
        self.request.params.local_cm_response_timeout = t;
        self
    }

    /// How many times the CM resends a message nobody answers (0-15).
    pub fn max_cm_retries(mut self, n: u8) -> Self {
        self.request.params.max_cm_retries = n;
        self
    }

    /// End-to-end flow control of the QP.
    pub fn flow_control(mut self, on: bool) -> Self {
        self.request.params.flow_control = on;
        self
    }

    /// The transport retry count (0-7).
    pub fn retry_count(mut self, n: u8) -> Self {
        self.request.params.retry_count = n;
        self
    }

    /// The RNR retry count (0-7; 7 is infinite).
    pub fn rnr_retry_count(mut self, n: u8) -> Self {
        self.request.params.rnr_retry_count = n;
        self
    }

    /// Whether the QP uses an SRQ.
    pub fn srq(mut self, on: bool) -> Self {
        self.request.params.srq = on;
        self
    }

    /// Enhanced connection establishment: vendor ID (24 bits) and attribute
    /// modifier.
    pub fn ece(mut self, vendor_id: u32, attr_mod: u32) -> Self {
        self.request.params.ece = (vendor_id, attr_mod);
        self
    }
}

/// The answer to a connection request (`struct ib_cm_rep_param`). Start
/// from [`Reply::new`] and change what you need:
/// `Reply { private_data: b"hi".to_vec(), ..Reply::new(qp_num) }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// This side's QP number.
    pub qp_num: u32,
    /// The REP's starting PSN (24 bits). As in the kernel, this side's QP
    /// receives from it (its RTR `rq_psn`) and the requester's sends from
    /// it.
    pub starting_psn: u32,
    /// Up to 196 bytes.
    pub private_data: Vec<u8>,
    /// Responder resources offered.
    pub responder_resources: u8,
    /// Initiator depth.
    pub initiator_depth: u8,
    /// 0: the alternate path is accepted.
    pub failover_accepted: u8,
    /// End-to-end flow control of the QP.
    pub flow_control: bool,
    /// The RNR retry count (0-7).
    pub rnr_retry_count: u8,
    /// Whether the QP uses an SRQ.
    pub srq: bool,
    /// Enhanced connection establishment (vendor ID, attribute modifier).
    pub ece: (u32, u32),
}

impl Reply {
    /// A REP for QP `qp_num` with rdma_cm's values: a random starting PSN,
    /// one responder resource, an initiator depth of one, flow control on,
    /// an RNR retry count of 7, no private data.
    pub fn new(qp_num: u32) -> Self {
        Self {
            qp_num,
            starting_psn: random_psn(),
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            failover_accepted: 0,
            flow_control: true,
            rnr_retry_count: 7,
            srq: false,
            ece: (0, 0),
        }
    }

    pub(super) fn to_engine(&self) -> RepParams {
        RepParams {
            qp_num: self.qp_num,
            starting_psn: self.starting_psn,
            private_data: self.private_data.clone(),
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            failover_accepted: self.failover_accepted,
            flow_control: self.flow_control,
            rnr_retry_count: self.rnr_retry_count,
            srq: self.srq,
            ece: self.ece,
        }
    }
}

/// A random 24-bit PSN, as rdma_cm picks one (`get_random_u32() &
/// 0xffffff`): a per-thread generator seeded from std's randomly keyed
/// hasher is enough for that.
fn random_psn() -> u32 {
    thread_local! {
        /// A xorshift64* state per thread, seeded once from the standard
        /// library's random hash keys (never zero): a PSN costs a few
        /// instructions, not a SipHash per request.
        static STATE: Cell<u64> = Cell::new({
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(0);
            h.finish() | 1
        });
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as u32 & 0x00ff_ffff
    })
}

#[cfg(test)]
mod tests {
    use super::random_psn;

    #[test]
    fn psns_are_24_bits_and_differ() {
        let psns: std::collections::HashSet<u32> = (0..1000).map(|_| random_psn()).collect();
        assert!(psns.iter().all(|&psn| psn <= 0x00ff_ffff));
        // 1000 draws from 2^24 values: a repeat or two at most.
        assert!(psns.len() >= 995, "{} distinct of 1000", psns.len());
        let other = std::thread::spawn(random_psn).join().unwrap();
        assert!(other <= 0x00ff_ffff);
    }
}
