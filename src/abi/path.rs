//! GIDs, paths (`struct sa_path_rec`), ECE, and the opaque device and GID
//! attribute handles.

use super::CIntPathRecType;

/// `union ib_gid` (kernel `ib_verbs.h`): 16 bytes, network order.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ib_gid {
    pub raw: [u8; 16],
    pub global: ib_gid_global,
}

/// The `global` view of `union ib_gid`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ib_gid_global {
    /// `__be64`
    pub subnet_prefix: u64,
    /// `__be64`
    pub interface_id: u64,
}

/// Opaque: the library's device handle, from `ibcm_open_device()`.
pub struct ib_device {
    _opaque: (),
}

/// Opaque: kernel GID attribute. Userspace has none; these pointers are always NULL.
pub struct ib_gid_attr {
    _opaque: (),
}

/// `struct sa_path_rec_ib`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sa_path_rec_ib {
    /// `__be16`
    pub dlid: u16,
    /// `__be16`
    pub slid: u16,
    pub raw_traffic: u8,
}

/// `struct sa_path_rec_roce`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sa_path_rec_roce {
    pub route_resolved: bool,
    pub dmac: [u8; 6],
}

/// `struct sa_path_rec_opa`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct sa_path_rec_opa {
    /// `__be32`
    pub dlid: u32,
    /// `__be32`
    pub slid: u32,
    pub raw_traffic: u8,
    pub l2_8B: u8,
    pub l2_10B: u8,
    pub l2_9B: u8,
    pub l2_16B: u8,
    pub qos_type: u8,
    pub qos_priority: u8,
}

/// The link-layer part of `struct sa_path_rec` (an anonymous union in the kernel).
#[repr(C)]
#[derive(Clone, Copy)]
pub union sa_path_rec_link {
    pub ib: sa_path_rec_ib,
    pub roce: sa_path_rec_roce,
    pub opa: sa_path_rec_opa,
}

/// `struct sa_path_rec` (kernel `ib_sa.h`), 88 bytes. Multi-byte fields are
/// big-endian as in the kernel (`__be16 pkey`, `__be32 flow_label`, …).
/// The kernel's anonymous union is named `link` here: C has `path.link.ib.dlid`
/// where kernel code writes `path.ib.dlid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sa_path_rec {
    pub dgid: ib_gid,
    pub sgid: ib_gid,
    /// `__be64`
    pub service_id: u64,
    /// `__be32`
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: u8,
    pub numb_path: u8,
    /// `__be16`
    pub pkey: u16,
    /// `__be16`
    pub qos_class: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
    pub link: sa_path_rec_link,
    pub rec_type: CIntPathRecType,
    pub flags: u32,
}

/// `struct rdma_ucm_ece` (uapi `rdma_user_cm.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rdma_ucm_ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}
