//! The messages between `ibcmd` and a process's library, one per
//! `SOCK_SEQPACKET` message: a 4-byte header (protocol version, little-endian
//! u16; message kind; a zero byte) and the kind's fields, little-endian.
//! Both ends are this crate, so the format changes only with [`VERSION`]; a
//! message of another version, an unknown kind or the wrong length is
//! refused as a whole.

use crate::cm::device::Port;
use crate::transport::sysfs::{GidEntry, GidType, LinkLayer};
use crate::transport::{IdSlice, MadAddr};
use crate::wire::{MAD_SIZE, Mad};

/// The protocol version both ends must speak.
pub const VERSION: u16 = 1;
/// The longest message: a registration answer with full tables.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// The longest message a process sends: a `Send`, its header (4 bytes),
/// port (1), address (29: DLID, SL, P_Key index, GRH flag, DGID, SGID
/// index, hop limit, traffic class, flow label) and MAD. (A `Register` with
/// the longest device name takes 74.) The daemon's receive slots are this
/// long: a longer message is no message of this version.
pub const MAX_TO_DAEMON: usize = 4 + 1 + 29 + MAD_SIZE;
/// At most this many P_Keys and GIDs per port cross the socket.
const MAX_TABLE: usize = 256;
/// Longest device name (`IB_DEVICE_NAME_MAX`).
const MAX_NAME: usize = 64;

/// What a process asks of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToDaemon {
    /// The first message: this process uses `device`.
    Register { pid: u32, device: String },
    /// `ib_cm_listen` on the device: `service_id` (`IB_CM_ASSIGN_SERVICE_ID`:
    /// the daemon picks one), `port` 0 for every port. Answered by
    /// [`ToClient::Listened`] with the same `seq`.
    Listen {
        seq: u32,
        service_id: u64,
        mask: u64,
        port: u8,
    },
    /// The listener of `service_id` is gone.
    Unlisten { service_id: u64 },
    /// One MAD to send from `port` to `addr`.
    Send {
        port: u8,
        addr: MadAddr,
        mad: Box<Mad>,
    },
    /// The daemon's counters, answered by [`ToClient::Stats`].
    Stats { seq: u32 },
}

/// What the daemon tells a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToClient {
    /// The answer to `Register`: 0 and the process's comm ID slice and the
    /// device, or a negative errno (then the rest is empty).
    Registered {
        status: i32,
        slice: IdSlice,
        device: DeviceInfo,
    },
    /// The answer to `Listen`: 0 and the service ID listened on, or a
    /// negative errno (`-EBUSY`: another process listens on it).
    Listened {
        seq: u32,
        status: i32,
        service_id: u64,
    },
    /// A MAD received on `port` from `addr` (the address to reply to).
    Recv {
        port: u8,
        addr: MadAddr,
        mad: Box<Mad>,
    },
    /// The answer to `Stats`: counter names and values.
    Stats {
        seq: u32,
        counters: Vec<(String, u64)>,
    },
}

/// What a process's engine needs to know of a device the daemon serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    pub node_guid: u64,
    pub ack_delay: u8,
    pub ports: Vec<Port>,
}

impl DeviceInfo {
    /// What a process learns of a port of the in-process fabric served by an
    /// in-process switch (tests).
    #[cfg(test)]
    pub(crate) fn of_loop(me: crate::transport::loopback::LoopIdentity) -> Self {
        Self {
            node_guid: me.node_guid,
            ack_delay: 15,
            ports: vec![Port {
                port_num: 1,
                lid: me.lid,
                pkey: 0xffff,
                pkeys: vec![0xffff],
                sm_lid: 0,
                sm_sl: 0,
                link_layer: LinkLayer::InfiniBand,
                mtu: 5,
                gids: vec![GidEntry {
                    index: 0,
                    gid: me.gid,
                    gid_type: GidType::Ib,
                }],
            }],
        }
    }
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    Short,
    Version(u16),
    Kind(u8),
    Trailing,
    Field,
}

mod kind {
    pub const REGISTER: u8 = 1;
    pub const LISTEN: u8 = 2;
    pub const UNLISTEN: u8 = 3;
    pub const SEND: u8 = 4;
    pub const STATS: u8 = 5;
    pub const REGISTERED: u8 = 0x81;
    pub const LISTENED: u8 = 0x82;
    pub const RECV: u8 = 0x84;
    pub const STATS_REPLY: u8 = 0x85;
}

struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8) -> Self {
        let mut buf = Vec::with_capacity(MAD_SIZE + 64);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&[kind, 0]);
        Self(buf)
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u16(v.len() as u16);
        self.0.extend_from_slice(v);
    }
    fn addr(&mut self, a: &MadAddr) {
        self.u16(a.dlid);
        self.u8(a.sl);
        self.u16(a.pkey_index);
        self.u8(u8::from(a.grh));
        self.0.extend_from_slice(&a.dgid);
        self.u8(a.sgid_index);
        self.u8(a.hop_limit);
        self.u8(a.traffic_class);
        self.u32(a.flow_label);
    }
    fn port(&mut self, p: &Port) {
        self.u8(p.port_num);
        self.u16(p.lid);
        self.u16(p.pkey);
        self.u16(p.sm_lid);
        self.u8(p.sm_sl);
        self.u8(match p.link_layer {
            LinkLayer::InfiniBand => 0,
            LinkLayer::Ethernet => 1,
        });
        self.u8(p.mtu);
        let pkeys = &p.pkeys[..p.pkeys.len().min(MAX_TABLE)];
        self.u16(pkeys.len() as u16);
        for &k in pkeys {
            self.u16(k);
        }
        let gids = &p.gids[..p.gids.len().min(MAX_TABLE)];
        self.u16(gids.len() as u16);
        for g in gids {
            self.u8(g.index);
            self.0.extend_from_slice(&g.gid);
            self.u8(match g.gid_type {
                GidType::Ib => 0,
                GidType::RoceV1 => 1,
                GidType::RoceV2 => 2,
            });
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let (head, rest) = self.0.split_at_checked(N).ok_or(ProtoError::Short)?;
        self.0 = rest;
        Ok(head.try_into().expect("split at N"))
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.take().map(u64::from_le_bytes)
    }
    fn bytes(&mut self) -> Result<&[u8], ProtoError> {
        let n = usize::from(self.u16()?);
        let (head, rest) = self.0.split_at_checked(n).ok_or(ProtoError::Short)?;
        self.0 = rest;
        Ok(head)
    }
    fn string(&mut self) -> Result<String, ProtoError> {
        let b = self.bytes()?;
        if b.len() > MAX_NAME {
            return Err(ProtoError::Field);
        }
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Field)
    }
    fn mad(&mut self) -> Result<Box<Mad>, ProtoError> {
        Ok(Box::new(self.take::<MAD_SIZE>()?))
    }
    fn addr(&mut self) -> Result<MadAddr, ProtoError> {
        Ok(MadAddr {
            dlid: self.u16()?,
            sl: self.u8()?,
            pkey_index: self.u16()?,
            grh: self.u8()? != 0,
            dgid: self.take()?,
            sgid_index: self.u8()?,
            hop_limit: self.u8()?,
            traffic_class: self.u8()?,
            flow_label: self.u32()?,
        })
    }
    fn port(&mut self) -> Result<Port, ProtoError> {
        let port_num = self.u8()?;
        let lid = self.u16()?;
        let pkey = self.u16()?;
        let sm_lid = self.u16()?;
        let sm_sl = self.u8()?;
        let link_layer = match self.u8()? {
            0 => LinkLayer::InfiniBand,
            1 => LinkLayer::Ethernet,
            _ => return Err(ProtoError::Field),
        };
        let mtu = self.u8()?;
        let pkeys = (0..self.u16()?.min(MAX_TABLE as u16))
            .map(|_| self.u16())
            .collect::<Result<_, _>>()?;
        let n = self.u16()?.min(MAX_TABLE as u16);
        let mut gids = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            gids.push(GidEntry {
                index: self.u8()?,
                gid: self.take()?,
                gid_type: match self.u8()? {
                    0 => GidType::Ib,
                    1 => GidType::RoceV1,
                    2 => GidType::RoceV2,
                    _ => return Err(ProtoError::Field),
                },
            });
        }
        Ok(Port {
            port_num,
            lid,
            pkey,
            pkeys,
            sm_lid,
            sm_sl,
            link_layer,
            mtu,
            gids,
        })
    }
    fn end(self) -> Result<(), ProtoError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::Trailing)
        }
    }
}

/// Splits off the header: the kind, and a reader of the fields.
fn open(buf: &[u8]) -> Result<(u8, Reader<'_>), ProtoError> {
    let mut r = Reader(buf);
    let version = r.u16()?;
    if version != VERSION {
        return Err(ProtoError::Version(version));
    }
    let kind = r.u8()?;
    r.u8()?;
    Ok((kind, r))
}

impl ToDaemon {
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            Self::Register { pid, device } => {
                let mut w = Writer::new(kind::REGISTER);
                w.u32(*pid);
                w.bytes(device.as_bytes());
                w
            }
            Self::Listen {
                seq,
                service_id,
                mask,
                port,
            } => {
                let mut w = Writer::new(kind::LISTEN);
                w.u32(*seq);
                w.u64(*service_id);
                w.u64(*mask);
                w.u8(*port);
                w
            }
            Self::Unlisten { service_id } => {
                let mut w = Writer::new(kind::UNLISTEN);
                w.u64(*service_id);
                w
            }
            Self::Send { port, addr, mad } => send_or_recv(kind::SEND, *port, addr, mad),
            Self::Stats { seq } => {
                let mut w = Writer::new(kind::STATS);
                w.u32(*seq);
                w
            }
        };
        w.0
    }

    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let (k, mut r) = open(buf)?;
        let msg = match k {
            kind::REGISTER => Self::Register {
                pid: r.u32()?,
                device: r.string()?,
            },
            kind::LISTEN => Self::Listen {
                seq: r.u32()?,
                service_id: r.u64()?,
                mask: r.u64()?,
                port: r.u8()?,
            },
            kind::UNLISTEN => Self::Unlisten {
                service_id: r.u64()?,
            },
            kind::SEND => Self::Send {
                port: r.u8()?,
                addr: r.addr()?,
                mad: r.mad()?,
            },
            kind::STATS => Self::Stats { seq: r.u32()? },
            other => return Err(ProtoError::Kind(other)),
        };
        r.end()?;
        Ok(msg)
    }
}

fn send_or_recv(k: u8, port: u8, addr: &MadAddr, mad: &Mad) -> Writer {
    let mut w = Writer::new(k);
    w.u8(port);
    w.addr(addr);
    w.0.extend_from_slice(mad);
    w
}

impl ToClient {
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            Self::Registered {
                status,
                slice,
                device,
            } => {
                let mut w = Writer::new(kind::REGISTERED);
                w.u32(*status as u32);
                w.u32(slice.base);
                w.u8(slice.bits);
                w.u64(device.node_guid);
                w.u8(device.ack_delay);
                w.u8(device.ports.len().min(usize::from(u8::MAX)) as u8);
                for p in device.ports.iter().take(usize::from(u8::MAX)) {
                    w.port(p);
                }
                w
            }
            Self::Listened {
                seq,
                status,
                service_id,
            } => {
                let mut w = Writer::new(kind::LISTENED);
                w.u32(*seq);
                w.u32(*status as u32);
                w.u64(*service_id);
                w
            }
            Self::Recv { port, addr, mad } => send_or_recv(kind::RECV, *port, addr, mad),
            Self::Stats { seq, counters } => {
                let mut w = Writer::new(kind::STATS_REPLY);
                w.u32(*seq);
                w.u16(counters.len() as u16);
                for (name, value) in counters {
                    w.bytes(name.as_bytes());
                    w.u64(*value);
                }
                w
            }
        };
        w.0
    }

    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let (k, mut r) = open(buf)?;
        let msg = match k {
            kind::REGISTERED => {
                let status = r.u32()? as i32;
                let slice = IdSlice {
                    base: r.u32()?,
                    bits: r.u8()?,
                };
                let node_guid = r.u64()?;
                let ack_delay = r.u8()?;
                let ports = (0..r.u8()?).map(|_| r.port()).collect::<Result<_, _>>()?;
                Self::Registered {
                    status,
                    slice,
                    device: DeviceInfo {
                        node_guid,
                        ack_delay,
                        ports,
                    },
                }
            }
            kind::LISTENED => Self::Listened {
                seq: r.u32()?,
                status: r.u32()? as i32,
                service_id: r.u64()?,
            },
            kind::RECV => Self::Recv {
                port: r.u8()?,
                addr: r.addr()?,
                mad: r.mad()?,
            },
            kind::STATS_REPLY => {
                let seq = r.u32()?;
                let counters = (0..r.u16()?)
                    .map(|_| Ok((r.string()?, r.u64()?)))
                    .collect::<Result<_, ProtoError>>()?;
                Self::Stats { seq, counters }
            }
            other => return Err(ProtoError::Kind(other)),
        };
        r.end()?;
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> Port {
        Port {
            port_num: 1,
            lid: 7,
            pkey: 0xffff,
            pkeys: vec![0xffff, 0x8001],
            sm_lid: 1,
            sm_sl: 0,
            link_layer: LinkLayer::InfiniBand,
            mtu: 5,
            gids: vec![GidEntry {
                index: 0,
                gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
                gid_type: GidType::Ib,
            }],
        }
    }

    #[test]
    fn every_message_round_trips() {
        let addr = MadAddr {
            dlid: 3,
            grh: true,
            dgid: [9; 16],
            flow_label: 0x12345,
            ..MadAddr::default()
        };
        let mut mad = [0u8; MAD_SIZE];
        mad[255] = 0xaa;
        for m in [
            ToDaemon::Register {
                pid: 42,
                device: "mlx5_0".into(),
            },
            ToDaemon::Listen {
                seq: 1,
                service_id: 0x1234,
                mask: !0,
                port: 0,
            },
            ToDaemon::Unlisten { service_id: 5 },
            ToDaemon::Send {
                port: 1,
                addr,
                mad: Box::new(mad),
            },
            ToDaemon::Stats { seq: 9 },
        ] {
            assert_eq!(ToDaemon::decode(&m.encode()), Ok(m));
        }
        for m in [
            ToClient::Registered {
                status: 0,
                slice: IdSlice {
                    base: 0x10_0000,
                    bits: 20,
                },
                device: DeviceInfo {
                    node_guid: 0x1122,
                    ack_delay: 15,
                    ports: vec![port()],
                },
            },
            ToClient::Listened {
                seq: 2,
                status: -16,
                service_id: 0,
            },
            ToClient::Recv {
                port: 1,
                addr,
                mad: Box::new(mad),
            },
            ToClient::Stats {
                seq: 3,
                counters: vec![("tx_spoofed".into(), 1)],
            },
        ] {
            assert_eq!(ToClient::decode(&m.encode()), Ok(m));
        }
    }

    #[test]
    fn bad_messages_are_refused() {
        let good = ToDaemon::Unlisten { service_id: 5 }.encode();
        let mut other_version = good.clone();
        other_version[0] = 2;
        assert_eq!(
            ToDaemon::decode(&other_version),
            Err(ProtoError::Version(2))
        );
        assert_eq!(ToDaemon::decode(&good[..5]), Err(ProtoError::Short));
        let mut long = good.clone();
        long.push(0);
        assert_eq!(ToDaemon::decode(&long), Err(ProtoError::Trailing));
        let mut unknown = good;
        unknown[2] = 0x7f;
        assert_eq!(ToDaemon::decode(&unknown), Err(ProtoError::Kind(0x7f)));
        assert_eq!(ToDaemon::decode(&[]), Err(ProtoError::Short));
    }
}
