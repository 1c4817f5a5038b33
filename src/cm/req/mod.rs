//! REQ: `ib_send_cm_req()` and `cm_req_handler()`.
//!
//! Here what both sides and the LAP and SIDR code use: a path's port and
//! address, a path of a REQ or LAP as the receiver sees it. The sending
//! side in `send_req.rs`, the receiving side (`cm_req_handler` and its
//! helpers) in `req_handler.rs`.

mod req_handler;
mod send_req;

pub use req_handler::req_handler;
pub use send_req::{ReqParams, send_req};

use super::device::{Device, Port};
use super::id::Av;
use super::path::{Path, av_timeout};
use crate::errno::{CmResult, ENOENT};
use crate::refusal::{Rule, invalid, refuse};
use crate::transport::MadAddr;
use crate::wire::ReqPath;

/// Whether `pkey` is in `port`'s P_Key table, as `ib_find_cached_pkey()`
/// compares: without the membership bit (a port whose table could not be
/// read has its one P_Key).
pub(super) fn pkey_is_on_port(port: &Port, pkey: u16) -> bool {
    if port.pkeys.is_empty() {
        return port.pkey & 0x7fff == pkey & 0x7fff;
    }
    port.pkey_index(pkey).is_some()
}

/// The port a path we send on leaves from (`cm_init_av_by_path`): the one
/// with its source GID (`-EINVAL` if none), which must have its P_Key
/// (`ib_find_cached_pkey`: `-ENOENT`).
pub(super) fn port_of_path<'d>(device: &'d Device, path: &Path) -> CmResult<&'d Port> {
    let port = device.port_by_gid(&path.sgid).ok_or_else(|| {
        let rule = "is not a GID of the device";
        invalid(Rule::gid("path sgid", path.sgid, rule))
    })?;
    if !pkey_is_on_port(port, path.pkey) {
        let rule = "is not in the port's P_Key table";
        return Err(refuse(ENOENT, Rule::hex("path pkey", path.pkey, rule)));
    }
    Ok(port)
}

/// The address of a path (`cm_init_av_by_path`): RoCE and routed paths need
/// a GRH, sent from the path's source GID. A RoCE address has no LID (the
/// kernel's `sa_path_get_dlid()` is 0 for RoCE records), which is also why
/// an alternate path never reaches a RoCE QP (`ib_cm_init_qp_attr`). On
/// InfiniBand the MADs go LID-routed with the path's SL and the P_Key index
/// of its partition (index 0 if the table lacks it, where the kernel's
/// `ib_find_cached_pkey` fails); a GRH as soon as the hop limit is not 0
/// (`ib_init_ah_attr_from_path`: `rec->hop_limit > 0`), even where the REQ
/// still calls the path subnet local (hop limit 1).
pub(super) fn av_from_path(port: &Port, path: &Path) -> Av {
    Av {
        port_num: port.port_num,
        addr: MadAddr {
            dlid: if port.is_roce() { 0 } else { path.dlid },
            sl: path.sl,
            pkey_index: port.pkey_index(path.pkey).unwrap_or(0),
            grh: port.is_roce() || path.hop_limit > 0,
            dgid: path.dgid,
            sgid_index: port.gid_index(&path.sgid).unwrap_or(0),
            hop_limit: path.hop_limit,
            traffic_class: path.traffic_class,
            flow_label: path.flow_label,
        },
        timeout: av_timeout(path.packet_life_time),
        rate: path.rate,
    }
}

/// A path of a REQ or LAP as the receiver sees it (the message's "local" side
/// is the peer), with what the message does not carry taken from `base`.
pub(super) fn path_from_wire(ap: &ReqPath, base: &Path) -> Path {
    Path {
        dgid: ap.local_gid,
        sgid: ap.remote_gid,
        dlid: ap.local_lid,
        slid: ap.remote_lid,
        flow_label: ap.flow_label,
        hop_limit: ap.hop_limit,
        traffic_class: ap.traffic_class,
        rate: ap.packet_rate,
        sl: ap.sl,
        packet_life_time: ap.local_ack_timeout - u8::from(ap.local_ack_timeout > 0),
        ..*base
    }
}

#[cfg(test)]
mod tests {
    use super::send_req::format_req_path;
    use super::*;
    use crate::cm::path::REC_TYPE_IB;
    use crate::transport::sysfs::{GidEntry, GidType, LinkLayer};
    use crate::wire::Req;

    fn ib_gid(port_guid: u64) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&port_guid.to_be_bytes());
        gid
    }

    /// Port 1 of Hca1 in c-tests/ibfabric/net.ibcm, with a second partition.
    fn hca1_port() -> Port {
        Port {
            port_num: 1,
            lid: 2,
            pkey: 0xffff,
            pkeys: vec![0xffff, 0x0001, 0x8001],
            sm_lid: 1,
            sm_sl: 0,
            link_layer: LinkLayer::InfiniBand,
            mtu: 5,
            gids: vec![GidEntry {
                index: 0,
                gid: ib_gid(0x10_0001),
                gid_type: GidType::Ib,
            }],
        }
    }

    /// The path OpenSM's SA gives from Hca1 (LID 2) to Hca2 (LID 7) there
    /// (`saquery -p`: mtu 0x84, rate 0x83, pkt_life 0x92), on SL 5.
    fn hca1_to_hca2() -> Path {
        Path {
            sgid: ib_gid(0x10_0001),
            dgid: ib_gid(0x10_0004),
            slid: 2,
            dlid: 7,
            pkey: 0x8001,
            sl: 5,
            mtu: 4,
            rate: 3,
            packet_life_time: 18,
            reversible: 1,
            rec_type: REC_TYPE_IB,
            ..Path::default()
        }
    }

    #[test]
    fn an_infiniband_path_is_lid_routed_without_grh_in_its_partition() {
        let av = av_from_path(&hca1_port(), &hca1_to_hca2());
        assert_eq!(av.addr.dlid, 7);
        assert_eq!(av.addr.sl, 5);
        assert!(!av.addr.grh, "no GRH inside the subnet");
        assert_eq!(av.addr.pkey_index, 2, "the full member of partition 1");
        let limited = Path {
            pkey: 0x0001,
            ..hca1_to_hca2()
        };
        assert_eq!(av_from_path(&hca1_port(), &limited).addr.pkey_index, 2);
    }

    /// Bytes 0x4c..0x78 of a REQ (IBA table 106: primary local/remote LID,
    /// GIDs, flow label, rate, traffic class, hop limit, SL, subnet local,
    /// local ACK timeout) as the kernel's `cm_format_req` writes them for
    /// an IB path inside the subnet.
    const GOLDEN_IB_PRIMARY_PATH: [u8; 44] = [
        0x00, 0x02, 0x00, 0x07, // local LID 2, remote LID 7
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x01, // local GID
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x04, // remote GID
        0x00, 0x00, 0x00, 0x03, // flow label 0, packet rate 3 (10 Gb/s)
        0x00, // traffic class
        0x00, // hop limit 0
        0x58, // SL 5, subnet local
        0x98, // local ACK timeout 19: cm_ack_timeout(15, 18)
    ];

    /// Hca1's port with a second GID (index 1) in a global subnet prefix, as
    /// a port behind an IB router has.
    fn routed_port() -> Port {
        let mut port = hca1_port();
        port.gids.push(GidEntry {
            index: 1,
            gid: routed_gid(0x10_0001),
            gid_type: GidType::Ib,
        });
        port
    }

    fn routed_gid(port_guid: u64) -> [u8; 16] {
        let mut gid = ib_gid(port_guid);
        gid[..8].copy_from_slice(&[0xfe, 0xc0, 0, 0, 0, 0, 0, 0x02]);
        gid
    }

    /// A path through an IB router, as an SA gives it: DLID the router's
    /// (LID 12), hop limit 64, a DGID in another subnet, a flow label and a
    /// traffic class.
    fn routed_path() -> Path {
        Path {
            sgid: routed_gid(0x10_0001),
            dgid: [
                0xfe, 0xc0, 0, 0, 0, 0, 0, 0x09, 0, 0, 0, 0, 0, 0x20, 0, 0x05,
            ],
            dlid: 12,
            hop_limit: 64,
            traffic_class: 0x28,
            flow_label: 0x12345,
            ..hca1_to_hca2()
        }
    }

    #[test]
    fn a_routed_path_is_addressed_with_a_grh() {
        let av = av_from_path(&routed_port(), &routed_path());
        let want = MadAddr {
            dlid: 12, // the router's LID: the GRH carries the rest of the way
            sl: 5,
            pkey_index: 2,
            grh: true,
            dgid: routed_path().dgid,
            sgid_index: 1, // the index of the path's SGID in the GID table
            hop_limit: 64,
            traffic_class: 0x28,
            flow_label: 0x12345,
        };
        assert_eq!(av.addr, want);
    }

    #[test]
    fn a_path_with_hop_limit_one_gets_a_grh_as_in_the_kernel() {
        // ib_init_ah_attr_from_path: a GRH for any hop limit above 0; the
        // REQ still says "subnet local" (cm_format_req: hop_limit <= 1).
        let one = Path {
            hop_limit: 1,
            ..hca1_to_hca2()
        };
        let av = av_from_path(&hca1_port(), &one);
        assert!(av.addr.grh);
        assert_eq!(
            (av.addr.dlid, av.addr.hop_limit, av.addr.sgid_index),
            (7, 1, 0)
        );
        assert!(format_req_path(&one, 15).subnet_local);
        assert!(!av_from_path(&hca1_port(), &hca1_to_hca2()).addr.grh);
    }

    /// The same bytes for the routed path: both LIDs permissive (the
    /// kernel's "work-around until there's a way to obtain remote LID
    /// info"), the flow label above the rate, the traffic class, hop limit
    /// 64, SL 5 and subnet local 0.
    const GOLDEN_ROUTED_PRIMARY_PATH: [u8; 44] = [
        0xff, 0xff, 0xff, 0xff, // local and remote LID: permissive
        0xfe, 0xc0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0x00, 0x10, 0x00, 0x01, // local GID
        0xfe, 0xc0, 0, 0, 0, 0, 0, 0x09, 0, 0, 0, 0, 0x00, 0x20, 0x00, 0x05, // remote GID
        0x12, 0x34, 0x50, 0x03, // flow label 0x12345 (20 bits), packet rate 3
        0x28, // traffic class
        0x40, // hop limit 64
        0x50, // SL 5, not subnet local
        0x98, // local ACK timeout 19
    ];

    #[test]
    fn a_routed_path_formats_the_req_as_the_kernel() {
        let req = Req {
            primary_path: format_req_path(&routed_path(), 15),
            ..Req::default()
        };
        let mad = req.encode(1);
        assert_eq!(mad[0x4c..0x78], GOLDEN_ROUTED_PRIMARY_PATH);
    }

    #[test]
    fn an_infiniband_path_formats_the_req_as_the_kernel() {
        let req = Req {
            primary_path: format_req_path(&hca1_to_hca2(), 15),
            ..Req::default()
        };
        let mad = req.encode(1);
        assert_eq!(mad[0x4c..0x78], GOLDEN_IB_PRIMARY_PATH);
    }
}
