//! What the kernel tells about an RDMA device in `/sys/class/infiniband`:
//! node GUID, ports, their state, LID, P_Key and GID tables.

use std::fs;
use std::path::{Path, PathBuf};

use crate::errno::{CmResult, ENODEV};

/// The root of the RDMA device tree.
pub const SYS_INFINIBAND: &str = "/sys/class/infiniband";

/// The link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    InfiniBand,
    /// RoCE: every MAD needs a GRH.
    Ethernet,
}

/// The type of one GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    Ib,
    RoceV1,
    RoceV2,
}

/// One valid GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u8,
    pub gid: [u8; 16],
    pub gid_type: GidType,
}

/// One port as sysfs describes it.
#[derive(Debug, Clone)]
pub struct SysPort {
    pub port_num: u8,
    pub active: bool,
    pub lid: u16,
    /// The LID mask count (LMC): the port answers to 2^lmc LIDs from `lid`.
    pub lmc: u8,
    /// Where the subnet manager (and its SA) is: InfiniBand ports only.
    pub sm_lid: u16,
    pub sm_sl: u8,
    pub link_layer: LinkLayer,
    pub pkey: u16,
    /// The P_Key table, by index (empty slots are 0).
    pub pkeys: Vec<u16>,
    pub gids: Vec<GidEntry>,
    /// The active path MTU as an IB MTU code (`enum ib_mtu`: 1 = 256 … 5 =
    /// 4096): on RoCE from the netdev's MTU as the kernel computes it
    /// (`iboe_get_mtu`), else 4096.
    pub mtu: u8,
}

/// A device as sysfs describes it.
#[derive(Debug, Clone)]
pub struct SysDevice {
    pub name: String,
    pub node_guid: u64,
    pub ports: Vec<SysPort>,
}

fn read(path: &Path) -> Option<String> {
    super::umad::read_text_file(path).map(|s| s.trim().to_owned())
}

/// `0123:4567:89ab:cdef` (node GUIDs) or a 39-character GID, as bytes.
fn parse_hex_groups<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits: String = text.chars().filter(|c| *c != ':').collect();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn parse_hex_u16(text: &str) -> Option<u16> {
    u16::from_str_radix(text.trim_start_matches("0x"), 16).ok()
}

fn read_gids(port_dir: &Path) -> Vec<GidEntry> {
    let mut gids = Vec::new();
    for index in 0..=u8::MAX {
        let Some(text) = read(&port_dir.join(format!("gids/{index}"))) else {
            break;
        };
        let Some(gid) = parse_hex_groups::<16>(&text) else {
            continue;
        };
        if gid == [0; 16] {
            continue; // an empty slot
        }
        let gid_type = match read(&port_dir.join(format!("gid_attrs/types/{index}"))).as_deref() {
            Some("RoCE v2") => GidType::RoceV2,
            Some("IB/RoCE v1") | Some("RoCE v1") => GidType::RoceV1,
            _ => GidType::Ib,
        };
        gids.push(GidEntry {
            index,
            gid,
            gid_type,
        });
    }
    gids
}

/// The P_Key table: `pkeys/0`, `pkeys/1`, … up to the first missing entry.
fn read_pkeys(port_dir: &Path) -> Vec<u16> {
    (0..=u16::MAX)
        .map_while(|index| read(&port_dir.join(format!("pkeys/{index}"))))
        .map(|text| parse_hex_u16(&text).unwrap_or(0))
        .collect()
}

/// `iboe_get_mtu()`: the largest IB MTU that fits an Ethernet MTU once the
/// RoCE headers (GRH, UDP, BTH, XRC and atomic extended headers, ICRC: 96
/// bytes) are taken off.
pub fn iboe_mtu(eth_mtu: u32) -> u8 {
    match eth_mtu.saturating_sub(96) {
        4096.. => 5,
        2048..=4095 => 4,
        1024..=2047 => 3,
        512..=1023 => 2,
        256..=511 => 1,
        _ => 0,
    }
}

/// The MTU of the netdev behind a RoCE port's GID 0.
fn netdev_mtu(port_dir: &Path) -> Option<u32> {
    let ndev = read(&port_dir.join("gid_attrs/ndevs/0"))?;
    if ndev.is_empty() || ndev.contains('/') {
        return None;
    }
    read(&Path::new("/sys/class/net").join(ndev).join("mtu"))?
        .parse()
        .ok()
}

fn read_port(port_dir: &Path, port_num: u8) -> SysPort {
    let link_layer = match read(&port_dir.join("link_layer")).as_deref() {
        Some("Ethernet") => LinkLayer::Ethernet,
        _ => LinkLayer::InfiniBand,
    };
    let mut gids = read_gids(port_dir);
    if link_layer == LinkLayer::InfiniBand {
        for g in &mut gids {
            g.gid_type = GidType::Ib;
        }
    }
    let mtu = match link_layer {
        LinkLayer::Ethernet => netdev_mtu(port_dir).map_or(3, iboe_mtu),
        LinkLayer::InfiniBand => 5,
    };
    SysPort {
        mtu,
        port_num,
        active: read(&port_dir.join("state")).is_some_and(|s| s.ends_with("ACTIVE")),
        lid: read(&port_dir.join("lid"))
            .and_then(|s| parse_hex_u16(&s))
            .unwrap_or(0),
        lmc: read(&port_dir.join("lid_mask_count"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        sm_lid: read(&port_dir.join("sm_lid"))
            .and_then(|s| parse_hex_u16(&s))
            .unwrap_or(0),
        sm_sl: read(&port_dir.join("sm_sl"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        link_layer,
        pkey: read(&port_dir.join("pkeys/0"))
            .and_then(|s| parse_hex_u16(&s))
            .unwrap_or(0xffff),
        pkeys: read_pkeys(port_dir),
        gids,
    }
}

/// What of a port can change while a device is open: the SM moves (a new
/// SM LID or SL), the SM gives the port another LID, the link goes down and
/// comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortState {
    pub lid: u16,
    pub sm_lid: u16,
    pub sm_sl: u8,
    pub active: bool,
}

/// Port `port_num` of device `name` under `root` as it is now: `None` when
/// one of its files cannot be read or says nothing this code understands
/// (the device is going away, say), so that nothing is concluded from a
/// failed read. Four small reads; under ibsim, umad2sim serves them.
pub fn read_port_state(root: &Path, name: &str, port_num: u8) -> Option<PortState> {
    let dir = root.join(name).join("ports").join(port_num.to_string());
    let state = read(&dir.join("state"))?;
    // "4: ACTIVE", "1: DOWN", …: the number is the IBA port state.
    let (number, _) = state.split_once(':')?;
    Some(PortState {
        active: number.trim().parse::<u8>().ok()? == 4,
        lid: parse_hex_u16(&read(&dir.join("lid"))?)?,
        sm_lid: parse_hex_u16(&read(&dir.join("sm_lid"))?)?,
        sm_sl: read(&dir.join("sm_sl"))?.parse().ok()?,
    })
}

/// Reads device `name` under `root` (normally [`SYS_INFINIBAND`]).
pub fn read_device(root: &Path, name: &str) -> CmResult<SysDevice> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(ENODEV);
    }
    let dir: PathBuf = root.join(name);
    let node_guid = read(&dir.join("node_guid"))
        .and_then(|s| parse_hex_groups::<8>(&s))
        .map(u64::from_be_bytes)
        .ok_or(ENODEV)?;
    let mut ports = Vec::new();
    if let Ok(entries) = fs::read_dir(dir.join("ports")) {
        for entry in entries.flatten() {
            if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
                ports.push(read_port(&entry.path(), n));
            }
        }
    }
    ports.sort_by_key(|p| p.port_num);
    Ok(SysDevice {
        name: name.to_owned(),
        node_guid,
        ports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fake rxe0 like the one rdma_rxe creates on a veth.
    fn fake_rxe(root: &Path) {
        let port = root.join("rxe0/ports/1");
        fs::create_dir_all(port.join("gids")).unwrap();
        fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        fs::create_dir_all(port.join("pkeys")).unwrap();
        fs::write(root.join("rxe0/node_guid"), "5054:00ff:fe90:6ca2\n").unwrap();
        fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        fs::write(port.join("lid"), "0x0\n").unwrap();
        fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        fs::write(port.join("pkeys/0"), "0xffff\n").unwrap();
        fs::write(
            port.join("gids/0"),
            "fe80:0000:0000:0000:5054:00ff:fe90:6ca2\n",
        )
        .unwrap();
        fs::write(port.join("gid_attrs/types/0"), "IB/RoCE v1\n").unwrap();
        fs::write(
            port.join("gids/1"),
            "0000:0000:0000:0000:0000:ffff:0a4d:0001\n",
        )
        .unwrap();
        fs::write(port.join("gid_attrs/types/1"), "RoCE v2\n").unwrap();
        fs::write(
            port.join("gids/2"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();
    }

    #[test]
    fn iboe_mtu_matches_the_kernel() {
        assert_eq!(iboe_mtu(1500), 3);
        assert_eq!(iboe_mtu(9000), 5);
        assert_eq!(iboe_mtu(4200), 5);
        assert_eq!(iboe_mtu(4000), 4);
        assert_eq!(iboe_mtu(300), 0);
    }

    #[test]
    fn read_device_parses_a_roce_port_and_its_gid_table() {
        let root = std::env::temp_dir().join(format!("ibcm-sysfs-{}", std::process::id()));
        fake_rxe(&root);
        let dev = read_device(&root, "rxe0").unwrap();
        assert_eq!(dev.node_guid, 0x5054_00ff_fe90_6ca2);
        let port = &dev.ports[0];
        assert!(port.active);
        assert_eq!(port.link_layer, LinkLayer::Ethernet);
        assert_eq!(port.pkey, 0xffff);
        assert_eq!(port.pkeys, [0xffff]);
        assert_eq!(port.gids.len(), 2);
        assert_eq!(port.gids[1].gid_type, GidType::RoceV2);
        assert_eq!(port.gids[1].gid[10..], [0xff, 0xff, 10, 77, 0, 1]);
        assert_eq!(port.mtu, 3); // no netdev here: the 1500-byte default
        assert_eq!(read_device(&root, "rxe9").err(), Some(ENODEV));
        assert_eq!(read_device(&root, "../etc").err(), Some(ENODEV));
        fs::remove_dir_all(&root).unwrap();
    }
}
