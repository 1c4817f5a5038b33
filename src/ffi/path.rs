//! `struct sa_path_rec` ⇄ the engine's `Path`.

use crate::abi::{
    CIntPathRecType, ib_gid, sa_path_rec, sa_path_rec_ib, sa_path_rec_link, sa_path_rec_opa,
};
use crate::cm::path::Path;

/// Reads a C path record.
pub fn from_c(p: &sa_path_rec) -> Path {
    // SAFETY: every bit pattern of these plain-data unions is a valid `[u8; 16]`
    // / `sa_path_rec_ib` (integers only).
    let (dgid, sgid, ib) = unsafe { (p.dgid.raw, p.sgid.raw, p.link.ib) };
    Path {
        dgid,
        sgid,
        dlid: u16::from_be(ib.dlid),
        slid: u16::from_be(ib.slid),
        service_id: u64::from_be(p.service_id),
        flow_label: u32::from_be(p.flow_label),
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        reversible: p.reversible,
        numb_path: p.numb_path,
        pkey: u16::from_be(p.pkey),
        sl: p.sl,
        mtu: p.mtu,
        rate: p.rate,
        packet_life_time: p.packet_life_time,
        rec_type: p.rec_type.0,
    }
}

/// Builds a C path record (selectors "exactly", as the kernel's CM fills them).
pub fn to_c(p: &Path) -> sa_path_rec {
    const SELECTOR_EXACTLY: u8 = 2;
    // Zero the whole link-layer union first, then fill its IB member.
    let mut link = sa_path_rec_link {
        opa: sa_path_rec_opa {
            dlid: 0,
            slid: 0,
            raw_traffic: 0,
            l2_8B: 0,
            l2_10B: 0,
            l2_9B: 0,
            l2_16B: 0,
            qos_type: 0,
            qos_priority: 0,
        },
    };
    link.ib = sa_path_rec_ib {
        dlid: p.dlid.to_be(),
        slid: p.slid.to_be(),
        raw_traffic: 0,
    };
    sa_path_rec {
        dgid: ib_gid { raw: p.dgid },
        sgid: ib_gid { raw: p.sgid },
        service_id: p.service_id.to_be(),
        flow_label: p.flow_label.to_be(),
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        reversible: p.reversible,
        numb_path: p.numb_path,
        pkey: p.pkey.to_be(),
        qos_class: 0,
        sl: p.sl,
        mtu_selector: SELECTOR_EXACTLY,
        mtu: p.mtu,
        rate_selector: SELECTOR_EXACTLY,
        rate: p.rate,
        packet_life_time_selector: SELECTOR_EXACTLY,
        packet_life_time: p.packet_life_time,
        preference: 0,
        link,
        rec_type: CIntPathRecType(p.rec_type),
        flags: 0,
    }
}
