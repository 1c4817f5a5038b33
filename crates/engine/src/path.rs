//! Paths (the engine's `sa_path_rec`) and the kernel's IBA time arithmetic.

/// Path record types (`enum sa_path_rec_type`): `SA_PATH_REC_TYPE_IB`, an InfiniBand path.
pub const REC_TYPE_IB: i32 = 0;
/// `SA_PATH_REC_TYPE_ROCE_V1`: a RoCE v1 path.
pub const REC_TYPE_ROCE_V1: i32 = 1;
/// `SA_PATH_REC_TYPE_ROCE_V2`: a RoCE v2 path.
pub const REC_TYPE_ROCE_V2: i32 = 2;
/// `IB_LID_PERMISSIVE`: what a REQ carries as LIDs when the path is routed.
pub const LID_PERMISSIVE: u16 = 0xffff;

/// A path between two ports: the fields of `struct sa_path_rec` the CM uses,
/// in host order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Path {
    /// Destination GID: the remote port's.
    pub dgid: [u8; 16],
    /// Source GID: the local port's.
    pub sgid: [u8; 16],
    /// Destination LID.
    pub dlid: u16,
    /// Source LID.
    pub slid: u16,
    /// The service ID the path is for.
    pub service_id: u64,
    /// GRH flow label, 20 bits.
    pub flow_label: u32,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// 1 if the path is reversible (the path record's `Reversible` bit).
    pub reversible: u8,
    /// How many paths a query asks for (`NumbPath`).
    pub numb_path: u8,
    /// Partition key.
    pub pkey: u16,
    /// Service level, 4 bits.
    pub sl: u8,
    /// Path MTU, `enum ib_mtu`.
    pub mtu: u8,
    /// Static rate, `enum ib_rate`.
    pub rate: u8,
    /// Packet lifetime as an IBA time value (4.096 µs · 2^value).
    pub packet_life_time: u8,
    /// One of the `REC_TYPE_*` (`enum sa_path_rec_type`).
    pub rec_type: i32,
}

/// The largest IBA time value (4.096 µs · 2^31): every time field of a CM
/// message and of a QP's attributes is 5 bits wide.
pub const MAX_IBA_TIME: u8 = 31;

/// An IBA time value as a 5-bit field holds it. A larger one (a path record's
/// packet lifetime is 6 bits, a caller's fields are bytes) saturates at 31
/// instead of wrapping to its low bits, as the kernel's would.
pub fn iba_time(t: u8) -> u8 {
    t.min(MAX_IBA_TIME)
}

/// `cm_convert_to_ms()`: 4.096 µs · 2^t, approximated as the kernel does
/// (`1 << max(t - 8, 0)`), with t saturated at 31: at most 2^23 ms (about
/// 2 h 20 min). The kernel shifts by the raw value, undefined from 39 on.
pub fn convert_to_ms(t: u8) -> u32 {
    1 << iba_time(t).saturating_sub(8)
}

/// `ib_send_cm_req()`'s retransmission interval: twice the primary path's
/// packet lifetime plus the remote CM response timeout, at most 3 · 2^23 ms
/// (the kernel's int overflows from a lifetime of 38 on).
pub fn req_timeout_ms(packet_life_time: u8, remote_cm_response_timeout: u8) -> u32 {
    2 * convert_to_ms(packet_life_time) + convert_to_ms(remote_cm_response_timeout)
}

/// `cm_init_av_by_path()`'s ACK timeout: the path's packet lifetime + 1,
/// saturated at 31 (the kernel's u8 sum wraps: 255 gives 0, "no timeout").
pub fn av_timeout(packet_life_time: u8) -> u8 {
    iba_time(packet_life_time.saturating_add(1))
}

/// `cm_ack_timeout()`: the local ACK timeout from the peer's CA ACK delay and
/// the path's packet lifetime, capped at 31.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let mut ack = u32::from(packet_life_time) + 1;
    let delay = u32::from(ca_ack_delay);
    if ack >= delay {
        ack += u32::from(delay >= ack - 1);
    } else {
        ack = delay + u32::from(ack >= delay - 1);
    }
    ack.min(u32::from(MAX_IBA_TIME)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convert_to_ms_matches_the_kernels_table() {
        assert_eq!(convert_to_ms(0), 1);
        assert_eq!(convert_to_ms(8), 1);
        assert_eq!(convert_to_ms(9), 2);
        assert_eq!(convert_to_ms(19), 2048);
        assert_eq!(convert_to_ms(20), 4096);
        assert_eq!(convert_to_ms(31), 1 << 23);
    }

    #[test]
    fn ack_timeout_matches_the_specs_worked_example() {
        // packet_life_time 18, ack delay 15 => 19 (timewait 2048 ms).
        assert_eq!(ack_timeout(15, 18), 19);
        assert_eq!(ack_timeout(0, 0), 2);
        assert_eq!(ack_timeout(20, 0), 20);
        assert_eq!(ack_timeout(31, 31), 31);
    }
}
