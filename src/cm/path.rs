//! Paths (the engine's `sa_path_rec`) and the kernel's IBA time arithmetic.

/// Path record types (`enum sa_path_rec_type`).
pub const REC_TYPE_IB: i32 = 0;
pub const REC_TYPE_ROCE_V1: i32 = 1;
pub const REC_TYPE_ROCE_V2: i32 = 2;
/// `IB_LID_PERMISSIVE`: what a REQ carries as LIDs when the path is routed.
pub const LID_PERMISSIVE: u16 = 0xffff;

/// A path between two ports: the fields of `struct sa_path_rec` the CM uses,
/// in host order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Path {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub service_id: u64,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: u8,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu: u8,
    pub rate: u8,
    pub packet_life_time: u8,
    pub rec_type: i32,
}

/// `cm_convert_to_ms()`: 4.096 µs · 2^t, approximated as the kernel does.
pub fn convert_to_ms(iba_time: u8) -> u32 {
    1u32 << (i32::from(iba_time) - 8).clamp(0, 31)
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
    ack.min(31) as u8
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
