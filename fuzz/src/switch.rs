//! The harness of the `switch` fuzz target: `ibcmd`'s routing core
//! ([`ib_cm::switch::Switch`]) between several tenants and the wire, and an
//! oracle of its own that says which MADs may leave.
//!
//! # The world
//!
//! Each input builds a fresh switch (so a finding reproduces from its input
//! alone) serving one or two fake devices, whose transport ([`Wire`]) records
//! every MAD the daemon sends, and registers 2-4 tenants through
//! `Switch::register`, each with one end of a socket pair; the harness keeps
//! the other end and reads what the daemon delivers (`ToClient::Recv`).
//!
//! # One input
//!
//! A setup byte (tenants, devices), then up to [`MAX_OPS`] operations
//! ([`Op`]): a tenant's Listen / Unlisten, a tenant's Send (encoded as the
//! protocol's `ToDaemon::Send`, decoded again and handed to
//! `Switch::outbound` as the daemon's connection thread does), a MAD from
//! the wire (`Switch::inbound`), a tenant leaving and registering again, and
//! raw bytes through `ToDaemon::decode` (a message that decodes is handled as
//! the daemon would, one that does not ends the tenant's connection, as it
//! does in the daemon). MADs are built structurally ([`MadSpec`]): the
//! attribute, MessageX, and comm IDs chosen among the tenants' slices, the
//! REQ / SIDR_REQ IDs already delivered to a tenant, IDs that left on the
//! wire and raw values, so a second tenant's REP / REJ / MRA for a REQ routed
//! elsewhere is a few mutations away. [`Op::write`] is the inverse of
//! [`Op::read`]: the seeds (`make_seeds.rs`) are written with it.
//!
//! # The oracle
//!
//! Written from the daemon's matching rule (docs/ibcmd.md, issue 30) and
//! from what the harness saw, never from the daemon's state:
//!
//! - a tenant's slice is what `Switch::register` gave it;
//! - a REQ (SIDR_REQ) is routed to a tenant when the harness read it from
//!   that tenant's socket, with the port and reply address of its
//!   `ToClient::Recv`; while it is open the tenant may answer it as it
//!   likes (a REP, again from a new id, an MRA, a REJ: only its own
//!   connection is at stake); a REJ of it the daemon let through ends it, so
//!   does the requester's RTU or REJ that the tenant got, and a SIDR_REP
//!   ends a SIDR_REQ; routed again after its end, a REQ is a new one;
//! - during a tenant's Send at most one MAD leaves, on the tenant's device,
//!   exactly the MAD, port and address the tenant gave (an SA query: its TID
//!   replaced), and only if [`Tenant::may_send`] allows it; a MAD that does
//!   not leave is counted in `tx_spoofed` or `tx_refused`;
//! - during a MAD from the wire at most one MAD leaves: the daemon's
//!   stateless answer to it (REJ "invalid service ID" for a REQ, DREP for a
//!   DREQ, both with the comm IDs swapped, SIDR_REP "unsupported" for a
//!   SIDR_REQ), same TID, to the port and address it came from, and only if
//!   no tenant got the MAD; what tenants get is that MAD as it came, and a
//!   MAD for a comm ID (not a REQ / SIDR_REQ) only reaches the owner of the
//!   ID's slice (a REJ "timeout" with remote comm ID 0 may reach every
//!   tenant of the device);
//! - nothing reaches a tenant's socket but during a MAD from the wire, and a
//!   tenant that left sends nothing.
//!
//! Any violation panics with what was sent, by whom, and why the rule
//! forbids it.
//!
//! Where the rule can be read two ways the oracle takes the reading that
//! allows more (it must not flag what the daemon may rightly do): answered
//! and rejected REQs are kept per (comm ID, port, address).
//!
//! The harness reads every tenant's socket after each MAD from the wire that
//! the daemon counts as handed to a tenant (`rx_to_listener`,
//! `rx_to_owner`, `rx_sa_answers`), and all of them at the end of the input
//! (a message then is one the daemon did not count, or sent at another
//! time): a socket never fills, which would make the daemon drop a REQ it
//! still counts as routed. The sockets are kept from one input to the next
//! (empty); the daemon cannot tell. Set `IBCM_LOG=error` when running it:
//! the daemon logs each MAD it drops (fuzz/run.sh does).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use ib_cm::errno::{CmResult, EINVAL};
use ib_cm::switch::proto::{DeviceInfo, ToClient, ToDaemon};
use ib_cm::switch::{ClientId, PeerCred, SeqPacket, Switch, SwitchConfig, SwitchCounter};
use ib_cm::transport::{IdSlice, MadAddr, MadTransport};
use ib_cm::wire::{MAD_SIZE, MGMT_CLASS_CM, Mad, attr, new_mad, parse_header};

/// The low bits of a comm ID that a tenant picks.
const SLICE_BITS: u8 = 24;
/// Operations per input at most.
pub const MAX_OPS: usize = 32;
/// The services most MADs ask for.
pub const SERVICES: [u64; 2] = [0x1234, 0x1235];
/// `IB_CM_ASSIGN_SERVICE_ID`: the daemon assigns from here.
pub const ASSIGN: u64 = 0x0200_0000_0000_0000;
/// The SA's management class.
pub const MGMT_CLASS_SA: u8 = 0x03;
const SA_ATTR_PATH_RECORD: u16 = 0x0035;
/// SubnAdmGet, SubnAdmGetTable (path queries: allowed), SubnAdmSet,
/// SubnAdmDelete (refused).
const SA_METHODS: [u8; 4] = [0x01, 0x12, 0x02, 0x15];
/// The CM attributes, in the order an input's attribute byte picks them.
pub const CM_ATTRS: [u16; 11] = [
    attr::REQ,
    attr::MRA,
    attr::REJ,
    attr::REP,
    attr::RTU,
    attr::DREQ,
    attr::DREP,
    attr::SIDR_REQ,
    attr::SIDR_REP,
    attr::LAP,
    attr::APR,
];
/// Offsets in a MAD of the fields the rule reads.
const LOCAL_COMM_ID: usize = 24;
const REMOTE_COMM_ID: usize = 28;
const SERVICE_ID: usize = 32;
/// MessageRejected (REJ) / MessageMRAed (MRA): byte 32, bits 7..6.
const MESSAGE_X: usize = 32;
const REJ_REASON: usize = 34;
/// A SIDR_REP's status byte.
const SIDR_STATUS: usize = 28;
/// Where an input's body bytes go: past every field the rule or routing
/// reads.
const BODY: usize = 40;
/// `IB_CM_REJ_TIMEOUT`, `IB_CM_REJ_INVALID_SERVICE_ID`, `IB_SIDR_UNSUPPORTED`.
const REJ_TIMEOUT: u16 = 4;
const REJ_INVALID_SERVICE_ID: u16 = 8;
const SIDR_UNSUPPORTED: u8 = 1;

fn gid(n: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[15] = n;
    g
}

/// The addresses MADs come from and go to. Some differ only in fields the
/// rule does not compare (sl, P_Key index, hop limit; the DGID without a
/// GRH), so both readings of "the same address" are reached.
pub fn addrs() -> [MadAddr; 8] {
    let a = |dlid| MadAddr {
        dlid,
        ..MadAddr::default()
    };
    let with_gid = |dlid, n| MadAddr {
        grh: true,
        dgid: gid(n),
        ..a(dlid)
    };
    [
        a(0x11),
        a(0x12),
        with_gid(0x11, 1),
        with_gid(0x11, 2),
        MadAddr {
            sl: 3,
            pkey_index: 1,
            ..a(0x11)
        },
        MadAddr {
            dgid: gid(1),
            ..a(0x12)
        },
        MadAddr {
            hop_limit: 64,
            flow_label: 7,
            ..with_gid(0x11, 1)
        },
        a(0x13),
    ]
}

/// What the rule compares of two addresses: DLID, GRH, and the DGID when
/// there is a GRH.
type AddrKey = (u16, bool, [u8; 16]);

fn addr_key(a: &MadAddr) -> AddrKey {
    (a.dlid, a.grh, if a.grh { a.dgid } else { [0; 16] })
}

fn be32(mad: &Mad, at: usize) -> u32 {
    u32::from_be_bytes(mad[at..at + 4].try_into().expect("4 bytes"))
}

fn be16(mad: &Mad, at: usize) -> u16 {
    u16::from_be_bytes([mad[at], mad[at + 1]])
}

fn attr_of(mad: &Mad) -> u16 {
    be16(mad, 16)
}

fn message_x(mad: &Mad) -> u8 {
    mad[MESSAGE_X] >> 6
}

fn describe(mad: &Mad) -> String {
    let a = attr_of(mad);
    let mut s = format!(
        "class {:#04x} {} ({a:#06x}) tid {:#x} local {:#010x} remote {:#010x}",
        mad[1],
        if mad[1] == MGMT_CLASS_CM {
            attr::name(a)
        } else {
            "-"
        },
        u64::from_be_bytes(mad[8..16].try_into().expect("8 bytes")),
        be32(mad, LOCAL_COMM_ID),
        be32(mad, REMOTE_COMM_ID)
    );
    if mad[1] == MGMT_CLASS_CM && matches!(a, attr::REJ | attr::MRA) {
        let _ = write!(s, " MessageX {}", message_x(mad));
    }
    s
}

fn describe_addr(a: &MadAddr) -> String {
    if a.grh {
        format!("dlid {:#x} dgid ..{:02x}", a.dlid, a.dgid[15])
    } else {
        format!("dlid {:#x}", a.dlid)
    }
}

// ---------------------------------------------------------------------------
// The input format.

/// The input's bytes, read front to back; zeros once they run out.
pub struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head.to_vec()
    }
}

/// A comm ID (or SIDR request ID), chosen relative to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    Zero,
    /// In the sender's slice (a MAD from the wire: tenant 0's), low bits.
    Own(u8),
    /// In tenant `.0`'s slice (modulo the tenants), low bits `.1`.
    Tenant(u8, u8),
    /// The LocalCommID of the `.0`th REQ delivered to some tenant (modulo
    /// their number; 0 when none was).
    Delivered(u8),
    /// The request ID of a SIDR_REQ delivered to some tenant.
    SidrDelivered(u8),
    /// A LocalCommID that left on the wire in a tenant's MAD.
    Seen(u8),
    Raw(u32),
    /// In tenant `.0`'s slice, any low bits.
    InSlice(u8, u32),
}

impl Id {
    fn read(r: &mut Bytes) -> Self {
        let b = r.u8();
        match b % 8 {
            0 => Id::Zero,
            1 => Id::Own(b >> 3),
            2 => Id::Tenant((b >> 3) & 3, b >> 5),
            3 => Id::Delivered(b >> 3),
            4 => Id::SidrDelivered(b >> 3),
            5 => Id::Seen(b >> 3),
            6 => Id::Raw(r.u32()),
            _ => Id::InSlice((b >> 3) & 3, r.u32()),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Id::Zero => out.push(0),
            Id::Own(low) => out.push(1 | low << 3),
            Id::Tenant(t, low) => out.push(2 | (t & 3) << 3 | low << 5),
            Id::Delivered(i) => out.push(3 | i << 3),
            Id::SidrDelivered(i) => out.push(4 | i << 3),
            Id::Seen(i) => out.push(5 | i << 3),
            Id::Raw(v) => {
                out.push(6);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Id::InSlice(t, v) => {
                out.push(7 | (t & 3) << 3);
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// A service ID, chosen relative to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// [`SERVICES`]`[.0]`.
    Known(u8),
    /// `IB_CM_ASSIGN_SERVICE_ID` itself (a Listen: "assign me one").
    Assign,
    /// The `.0`th service ID the daemon assigned (modulo their number).
    Assigned(u8),
    /// `ASSIGN + .0`: in the range the daemon assigns from.
    InAssignRange(u8),
    Raw(u64),
}

impl Service {
    fn read(r: &mut Bytes) -> Self {
        let b = r.u8();
        match b % 8 {
            0 | 1 => Service::Known(0),
            2 => Service::Known(1),
            3 => Service::Assign,
            4 | 5 => Service::Assigned(b >> 3),
            6 => Service::Raw(r.u64()),
            _ => Service::InAssignRange(b >> 3),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Service::Known(i) => out.push(if i == 0 { 0 } else { 2 }),
            Service::Assign => out.push(3),
            Service::Assigned(i) => out.push(4 | i << 3),
            Service::InAssignRange(i) => out.push(7 | i << 3),
            Service::Raw(v) => {
                out.push(6);
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// A port number: mostly 1 or 2 (the devices' ports), sometimes any.
fn read_port(r: &mut Bytes) -> u8 {
    let b = r.u8();
    match b % 8 {
        0..=3 => 1,
        4..=6 => 2,
        _ => b >> 3,
    }
}

fn write_port(port: u8, out: &mut Vec<u8>) {
    out.push(match port {
        1 => 0,
        2 => 4,
        p => 7 | (p & 31) << 3,
    });
}

/// Which kind of MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attr {
    /// A CM MAD of this attribute ID (the 11 CM messages, ClassPortInfo or
    /// anything).
    Cm(u16),
    /// An SA MAD: method [`SA_METHODS`]`[.0 % 4]`, PathRecord unless bit 2.
    Sa(u8),
}

/// A MAD, built from the input when it is sent or received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadSpec {
    pub attr: Attr,
    /// MessageRejected / MessageMRAed (REJ, MRA): 0..3.
    pub message_x: u8,
    /// Corrupts the header: byte 0 (base version), 2 (class version), 3
    /// (method) or 1 (class) by `.0 % 4`, set to `.0`.
    pub bad_header: Option<u8>,
    pub tid: u8,
    pub local: Id,
    pub remote: Id,
    /// A REQ's or SIDR_REQ's.
    pub service: Service,
    /// A REJ's.
    pub reason: u16,
    /// Bytes from offset 40 on.
    pub body: Vec<u8>,
}

impl MadSpec {
    /// A well-formed CM MAD of `attr_id` with these comm IDs.
    pub fn cm(attr_id: u16, local: Id, remote: Id) -> Self {
        Self {
            attr: Attr::Cm(attr_id),
            message_x: 0,
            bad_header: None,
            tid: 1,
            local,
            remote,
            service: Service::Known(0),
            reason: REJ_INVALID_SERVICE_ID,
            body: Vec::new(),
        }
    }

    fn read(r: &mut Bytes) -> Self {
        let kind = r.u8();
        let attr = match kind % 16 {
            k @ 0..=10 => Attr::Cm(CM_ATTRS[usize::from(k)]),
            11 => Attr::Cm(attr::CLASS_PORT_INFO),
            12 => Attr::Cm(r.u16()),
            13 => Attr::Sa(r.u8()),
            14 => Attr::Cm(attr::REP),
            _ => Attr::Cm(attr::REJ),
        };
        let flags = r.u8();
        let bad_header = (flags & 4 != 0).then(|| r.u8());
        let local = Id::read(r);
        let remote = Id::read(r);
        let service = match attr {
            Attr::Cm(attr::REQ | attr::SIDR_REQ) => Service::read(r),
            _ => Service::Known(0),
        };
        let reason = match attr {
            Attr::Cm(attr::REJ) => match r.u8() % 4 {
                0 => REJ_TIMEOUT,
                1 => REJ_INVALID_SERVICE_ID,
                2 => 28,
                _ => r.u16(),
            },
            _ => REJ_INVALID_SERVICE_ID,
        };
        let body = if flags & 8 != 0 {
            let n = usize::from(r.u8() % 32);
            r.take(n)
        } else {
            Vec::new()
        };
        Self {
            attr,
            message_x: flags & 3,
            bad_header,
            tid: flags >> 4,
            local,
            remote,
            service,
            reason,
            body,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self.attr {
            Attr::Cm(a) => match CM_ATTRS.iter().position(|&c| c == a) {
                Some(i) => out.push(i as u8),
                None if a == attr::CLASS_PORT_INFO => out.push(11),
                None => {
                    out.push(12);
                    out.extend_from_slice(&a.to_le_bytes());
                }
            },
            Attr::Sa(sel) => out.extend_from_slice(&[13, sel]),
        }
        out.push(
            (self.message_x & 3)
                | u8::from(self.bad_header.is_some()) << 2
                | u8::from(!self.body.is_empty()) << 3
                | (self.tid & 15) << 4,
        );
        out.extend(self.bad_header);
        self.local.write(out);
        self.remote.write(out);
        if matches!(self.attr, Attr::Cm(attr::REQ | attr::SIDR_REQ)) {
            self.service.write(out);
        }
        if self.attr == Attr::Cm(attr::REJ) {
            match self.reason {
                REJ_TIMEOUT => out.push(0),
                REJ_INVALID_SERVICE_ID => out.push(1),
                28 => out.push(2),
                r => {
                    out.push(3);
                    out.extend_from_slice(&r.to_le_bytes());
                }
            }
        }
        if !self.body.is_empty() {
            let n = self.body.len().min(31);
            out.push(n as u8);
            out.extend_from_slice(&self.body[..n]);
        }
    }
}

/// One operation of an input. `who` picks a tenant (or, for a MAD from the
/// wire, a device) modulo their number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Listen {
        who: u8,
        service: Service,
        port: u8,
        /// A mask other than all ones (refused: `-EINVAL`).
        masked: bool,
    },
    Unlisten {
        who: u8,
        service: Service,
    },
    Send {
        who: u8,
        port: u8,
        addr: u8,
        mad: MadSpec,
    },
    Inbound {
        who: u8,
        port: u8,
        addr: u8,
        mad: MadSpec,
    },
    /// The tenant's connection ends and it registers again.
    Rejoin {
        who: u8,
    },
    /// A protocol message from the tenant, as bytes.
    Raw {
        who: u8,
        bytes: Vec<u8>,
    },
}

impl Op {
    pub fn read(r: &mut Bytes) -> Self {
        let b = r.u8();
        let who = b >> 4;
        match b & 15 {
            0 | 14 => Op::Listen {
                who,
                service: Service::read(r),
                port: r.u8() % 3,
                masked: r.u8() >= 0xf8,
            },
            1 => Op::Unlisten {
                who,
                service: Service::read(r),
            },
            2..=6 | 15 => Op::Send {
                who,
                port: read_port(r),
                addr: r.u8(),
                mad: MadSpec::read(r),
            },
            7..=11 => Op::Inbound {
                who,
                port: read_port(r),
                addr: r.u8(),
                mad: MadSpec::read(r),
            },
            12 => Op::Rejoin { who },
            _ => {
                let n = usize::from(r.u16() % 512);
                Op::Raw {
                    who,
                    bytes: r.take(n),
                }
            }
        }
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let op = |kind: u8, who: u8| kind | (who & 15) << 4;
        match self {
            Op::Listen {
                who,
                service,
                port,
                masked,
            } => {
                out.push(op(0, *who));
                service.write(out);
                out.push(*port % 3);
                out.push(if *masked { 0xff } else { 0 });
            }
            Op::Unlisten { who, service } => {
                out.push(op(1, *who));
                service.write(out);
            }
            Op::Send {
                who,
                port,
                addr,
                mad,
            }
            | Op::Inbound {
                who,
                port,
                addr,
                mad,
            } => {
                let kind = if matches!(self, Op::Send { .. }) {
                    2
                } else {
                    7
                };
                out.push(op(kind, *who));
                write_port(*port, out);
                out.push(*addr);
                mad.write(out);
            }
            Op::Rejoin { who } => out.push(op(12, *who)),
            Op::Raw { who, bytes } => {
                out.push(op(13, *who));
                let n = bytes.len().min(511);
                out.extend_from_slice(&(n as u16).to_le_bytes());
                out.extend_from_slice(&bytes[..n]);
            }
        }
    }
}

/// An input: its setup and operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// 2..=4.
    pub tenants: usize,
    /// 1..=2; tenant `i` uses device `i % devices`.
    pub devices: usize,
    pub ops: Vec<Op>,
}

impl Script {
    pub fn read(data: &[u8]) -> Self {
        let mut r = Bytes(data);
        let setup = r.u8();
        let mut ops = Vec::new();
        while !r.is_empty() && ops.len() < MAX_OPS {
            ops.push(Op::read(&mut r));
        }
        Self {
            tenants: 2 + usize::from(setup & 3) % 3,
            devices: 1 + usize::from(setup >> 2 & 1),
            ops,
        }
    }

    pub fn write(&self) -> Vec<u8> {
        let mut out = vec![(self.tenants.clamp(2, 4) - 2) as u8 | ((self.devices == 2) as u8) << 2];
        for op in &self.ops {
            op.write(&mut out);
        }
        out
    }
}

// ---------------------------------------------------------------------------
// The world.

/// A fake device's way to the wire: records what the daemon sends.
#[derive(Default)]
pub struct Wire {
    sent: Mutex<Vec<(u8, MadAddr, Mad)>>,
}

impl Wire {
    fn take(&self) -> Vec<(u8, MadAddr, Mad)> {
        std::mem::take(&mut *self.sent.lock().expect("not poisoned"))
    }
}

impl MadTransport for Wire {
    /// Ports 1 and 2 exist; any other is refused, as umad refuses it.
    fn send(&self, port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        if !(1..=2).contains(&port_num) {
            return Err(EINVAL);
        }
        self.sent
            .lock()
            .expect("not poisoned")
            .push((port_num, *addr, *mad));
        Ok(())
    }

    fn close(&self) {}
}

/// A MAD from the wire: on `device` `port` from `addr`.
struct Arrival<'a> {
    device: usize,
    port: u8,
    addr: MadAddr,
    mad: &'a Mad,
}

/// A REQ or SIDR_REQ routed to a tenant: its sender's comm ID (request ID),
/// the port it came on, the address to reply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Routed {
    id: u32,
    port: u8,
    addr: AddrKey,
}

/// A registered tenant and what the harness saw of it.
struct Tenant {
    client: ClientId,
    slice: IdSlice,
    device: usize,
    conn: Connection,
    /// REQs routed to it, not rejected since; the LocalCommID of its REP
    /// once the daemon let one through.
    reqs: HashMap<Routed, Option<u32>>,
    /// SIDR_REQs routed to it, not answered yet.
    sidr_reqs: HashSet<Routed>,
    /// Its SA queries that left: the TID the daemon gave each (low 32 bits)
    /// → the tenant's own.
    sa_queries: HashMap<u32, u32>,
    /// The TIDs of all its SA queries, sent or not (the daemon remembers a
    /// query before the port takes it).
    sa_tried: HashSet<u32>,
}

impl Tenant {
    /// Whether the matching rule lets this tenant send the CM MAD `mad`
    /// from `port` to `addr`; if not, why.
    fn may_send(&self, port: u8, addr: &MadAddr, mad: &Mad) -> Result<(), String> {
        let a = attr_of(mad);
        let local = be32(mad, LOCAL_COMM_ID);
        let remote = be32(mad, REMOTE_COMM_ID);
        let routed = Routed {
            id: remote,
            port,
            addr: addr_key(addr),
        };
        let in_slice = |id: u32, what: &str| {
            if self.slice.contains(id) {
                Ok(())
            } else {
                Err(format!(
                    "its {what} {id:#010x} is not in the tenant's slice {:#010x}/{}",
                    self.slice.base, self.slice.bits
                ))
            }
        };
        let req_routed = || match self.reqs.get(&routed) {
            Some(&rep) => Ok(rep),
            None => Err(format!(
                "no REQ with LocalCommID {remote:#010x} was routed to this tenant on port \
                 {port} from {} (REQs routed to it: {})",
                describe_addr(addr),
                self.routed_list()
            )),
        };
        match a {
            attr::REQ | attr::RTU | attr::DREQ | attr::DREP | attr::LAP | attr::APR => {
                in_slice(local, "LocalCommID")
            }
            attr::SIDR_REQ => in_slice(local, "request ID"),
            attr::MRA | attr::REJ => match message_x(mad) {
                0 => {
                    // Routed to it and open: which answers it gives is its
                    // own affair (a REP, again from a new id, an MRA, a REJ).
                    req_routed()?;
                    if a == attr::REJ && local == 0 {
                        Ok(())
                    } else {
                        in_slice(local, "LocalCommID")
                    }
                }
                1 | 2 => in_slice(local, "LocalCommID"),
                _ => Err("MessageX 3 is invalid: the remote side drops it".into()),
            },
            attr::REP => {
                req_routed()?;
                in_slice(local, "LocalCommID")
            }
            attr::SIDR_REP => {
                let request = Routed {
                    id: local,
                    ..routed
                };
                if self.sidr_reqs.contains(&request) {
                    Ok(())
                } else {
                    Err(format!(
                        "no SIDR_REQ with request ID {local:#010x} from {} on port {port} is \
                         routed to this tenant and unanswered",
                        describe_addr(addr)
                    ))
                }
            }
            _ => Err("not a CM message a tenant sends".into()),
        }
    }

    /// What the daemon letting `mad` through changes.
    fn sent(&mut self, port: u8, addr: &MadAddr, mad: &Mad) {
        let local = be32(mad, LOCAL_COMM_ID);
        let routed = Routed {
            id: be32(mad, REMOTE_COMM_ID),
            port,
            addr: addr_key(addr),
        };
        match attr_of(mad) {
            attr::REP => {
                self.reqs.insert(routed, Some(local));
            }
            // Any REJ it sent for the connection ends what its REQ may be
            // answered with (the daemon's rule; a MessageX 3 never passes).
            attr::REJ => {
                self.reqs.remove(&routed);
            }
            attr::SIDR_REP => {
                self.sidr_reqs.remove(&Routed {
                    id: local,
                    ..routed
                });
            }
            _ => {}
        }
    }

    fn routed_list(&self) -> String {
        let mut l: Vec<String> = self
            .reqs
            .iter()
            .map(|(r, rep)| {
                format!(
                    "{:#010x} port {} dlid {:#x}{}{}",
                    r.id,
                    r.port,
                    r.addr.0,
                    if r.addr.1 { " grh" } else { "" },
                    if rep.is_some() { " (REP sent)" } else { "" }
                )
            })
            .collect();
        l.sort();
        if l.is_empty() {
            "none".into()
        } else {
            l.join(", ")
        }
    }
}

/// The switch, its devices and tenants, and what the harness learnt.
pub struct World {
    switch: Arc<Switch>,
    devices: Vec<String>,
    wires: Vec<Arc<Wire>>,
    tenants: Vec<Option<Tenant>>,
    /// Service IDs the daemon assigned.
    assigned: Vec<u64>,
    /// LocalCommIDs of REQs and request IDs of SIDR_REQs delivered.
    req_ids: Vec<u32>,
    sidr_ids: Vec<u32>,
    /// LocalCommIDs of tenants' MADs that left.
    seen_ids: Vec<u32>,
    /// Messages read from a tenant's socket.
    buf: Vec<u8>,
    /// The op being run (for messages).
    step: usize,
    /// [`Self::deliveries`] when the sockets were last read.
    delivered_count: u64,
}

/// Room for one `ToClient::Recv` (290 bytes) and then some.
const SLOT: usize = 1024;
const BURST: usize = 16;
/// How many IDs of each kind the world remembers.
const REMEMBER: usize = 64;

fn remember(list: &mut Vec<u32>, id: u32) {
    if list.len() < REMEMBER && !list.contains(&id) {
        list.push(id);
    }
}

impl World {
    pub fn new(tenants: usize, devices: usize) -> Self {
        // 256 slices instead of 4095: `register` scans them all, which under
        // the fuzzer's instrumentation was a third of the time; the rule does
        // not depend on their number, and a raw comm ID lands in a tenant's
        // slice more often.
        let switch = Switch::new(SwitchConfig {
            slice_bits: SLICE_BITS,
            ..SwitchConfig::default()
        });
        let mut world = Self {
            switch,
            devices: Vec::new(),
            wires: Vec::new(),
            tenants: Vec::new(),
            assigned: Vec::new(),
            req_ids: Vec::new(),
            sidr_ids: Vec::new(),
            seen_ids: Vec::new(),
            buf: vec![0; SLOT * BURST],
            step: 0,
            delivered_count: 0,
        };
        for d in 0..devices.clamp(1, 2) {
            let name = format!("fuzz{d}");
            let wire = Arc::new(Wire::default());
            let transport = wire.clone() as Arc<dyn MadTransport>;
            world
                .switch
                .add_device(&name, |_recv| Ok((DeviceInfo::default(), transport)))
                .expect("a fake device");
            world.devices.push(name);
            world.wires.push(wire);
        }
        for i in 0..tenants.clamp(2, 4) {
            let tenant = world.join(i, Connection::get());
            world.tenants.push(tenant);
        }
        world
    }

    /// Registers tenant `i` on a new connection (two users: tenants 0, 1 and
    /// 2, 3).
    fn join(&self, i: usize, conn: Connection) -> Option<Tenant> {
        let cred = PeerCred {
            pid: 4000 + i as i32,
            uid: 1000 + (i / 2) as u32,
            gid: 1000,
        };
        let device = i % self.devices.len();
        let registered = self
            .switch
            .register(conn.theirs.clone(), cred, &self.devices[device]);
        let Ok((client, slice, _)) = registered else {
            conn.put_back();
            return None;
        };
        Some(Tenant {
            client,
            slice,
            device,
            conn,
            reqs: HashMap::new(),
            sidr_reqs: HashSet::new(),
            sa_queries: HashMap::new(),
            sa_tried: HashSet::new(),
        })
    }

    pub fn run(&mut self, script: &Script) {
        for (step, op) in script.ops.iter().enumerate() {
            self.step = step;
            self.op(op);
        }
        for t in 0..self.tenants.len() {
            self.nothing_pending(t);
        }
    }

    /// Tenant `t`'s socket is empty: the harness read it after every MAD the
    /// daemon counted as delivered.
    fn nothing_pending(&mut self, t: usize) {
        if let Some(msg) = self.drain(t).first() {
            self.fail(format!(
                "tenant {t} got a message the daemon did not count as delivered, or \
                 outside a MAD from the wire: {msg:?}"
            ));
        }
    }

    fn fail(&self, why: String) -> ! {
        panic!("ib_cm_fuzz switch: op {}: {why}", self.step);
    }

    fn tenant_index(&self, who: u8) -> usize {
        usize::from(who) % self.tenants.len()
    }

    fn op(&mut self, op: &Op) {
        match op {
            Op::Listen {
                who,
                service,
                port,
                masked,
            } => {
                let t = self.tenant_index(*who);
                let mask = if *masked { u64::MAX << 8 } else { u64::MAX };
                let msg = ToDaemon::Listen {
                    seq: 0,
                    service_id: self.service(*service),
                    mask,
                    port: *port,
                };
                self.handle(t, msg);
            }
            Op::Unlisten { who, service } => {
                let t = self.tenant_index(*who);
                let msg = ToDaemon::Unlisten {
                    service_id: self.service(*service),
                };
                self.handle(t, msg);
            }
            Op::Send {
                who,
                port,
                addr,
                mad,
            } => {
                let t = self.tenant_index(*who);
                let mad = self.mad(mad, Some(t));
                let msg = ToDaemon::Send {
                    port: *port,
                    addr: addrs()[usize::from(*addr) % addrs().len()],
                    mad: Box::new(mad),
                };
                // Through the protocol's codec, as from the socket.
                let decoded = ToDaemon::decode(&msg.encode())
                    .unwrap_or_else(|e| self.fail(format!("a Send does not decode: {e:?}")));
                if decoded != msg {
                    self.fail(format!("a Send decodes as another: {decoded:?}"));
                }
                self.handle(t, decoded);
            }
            Op::Inbound {
                who,
                port,
                addr,
                mad,
            } => {
                let device = usize::from(*who) % self.devices.len();
                let mad = self.mad(mad, None);
                let addr = addrs()[usize::from(*addr) % addrs().len()];
                self.inbound(device, *port, addr, &mad);
            }
            Op::Rejoin { who } => {
                let t = self.tenant_index(*who);
                self.rejoin(t);
            }
            Op::Raw { who, bytes } => {
                let t = self.tenant_index(*who);
                match ToDaemon::decode(bytes) {
                    Ok(msg) => {
                        let again = ToDaemon::decode(&msg.encode());
                        if again.as_ref() != Ok(&msg) {
                            self.fail(format!("{msg:?} encodes to what decodes as {again:?}"));
                        }
                        self.handle(t, msg);
                    }
                    // The daemon ends a connection that sends a malformed
                    // message.
                    Err(_) => self.rejoin(t),
                }
            }
        }
    }

    /// A message of tenant `t`, handled as the daemon's connection thread
    /// handles it (`Switch::serve`).
    fn handle(&mut self, t: usize, msg: ToDaemon) {
        let Some(client) = self.tenants[t].as_ref().map(|x| x.client) else {
            return;
        };
        match msg {
            ToDaemon::Register { .. } => self.rejoin(t), // a second one ends it
            ToDaemon::Listen {
                service_id,
                mask,
                port,
                ..
            } => {
                let got = self.switch.listen(client, service_id, mask, port);
                if let Ok(id) = got
                    && service_id == ASSIGN
                    && !self.assigned.contains(&id)
                    && self.assigned.len() < REMEMBER
                {
                    self.assigned.push(id);
                }
                self.nothing_sent("a Listen");
            }
            ToDaemon::Unlisten { service_id } => {
                self.switch.unlisten(client, service_id);
                self.nothing_sent("an Unlisten");
            }
            ToDaemon::Send { port, addr, mad } => self.outbound(t, port, addr, &mad),
            ToDaemon::Stats { .. } => {
                let _ = self.switch.counters();
            }
        }
    }

    /// Tenant `t`'s connection ends; it registers again on a new one.
    fn rejoin(&mut self, t: usize) {
        self.nothing_pending(t);
        let Some(old) = self.tenants[t].take() else {
            return;
        };
        self.switch.unregister(old.client);
        // A tenant that left sends nothing, not even with its old number.
        let mut req = new_mad(attr::REQ, 1, 0);
        req[LOCAL_COMM_ID..LOCAL_COMM_ID + 4].copy_from_slice(&old.slice.base.to_be_bytes());
        let _ = self.switch.outbound(old.client, 1, &addrs()[0], &req);
        self.nothing_sent("a Send of a tenant that left");
        // Its socket is empty and the daemon let go of its end: the daemon
        // cannot tell it from a new one.
        let conn = if Arc::strong_count(&old.conn.theirs) == 1 {
            old.conn
        } else {
            Connection::get()
        };
        self.tenants[t] = self.join(t, conn);
    }

    fn nothing_sent(&self, during: &str) {
        for (d, wire) in self.wires.iter().enumerate() {
            if let Some((port, addr, mad)) = wire.take().first() {
                self.fail(format!(
                    "during {during} the daemon sent on {} port {port} to {}: {}",
                    self.devices[d],
                    describe_addr(addr),
                    describe(mad)
                ));
            }
        }
    }

    /// Which other tenants REQ `id` was routed to (for a message).
    fn routed_elsewhere(&self, t: usize, id: u32) -> String {
        let others: Vec<usize> = (0..self.tenants.len())
            .filter(|&u| {
                u != t
                    && self.tenants[u]
                        .as_ref()
                        .is_some_and(|x| x.reqs.keys().any(|r| r.id == id))
            })
            .collect();
        if others.is_empty() {
            String::new()
        } else {
            format!("; REQ {id:#010x} was routed to tenant {others:?}")
        }
    }

    /// The MADs from the wire the daemon says it handed to a tenant.
    fn deliveries(&self) -> u64 {
        [
            SwitchCounter::RxToListener,
            SwitchCounter::RxToOwner,
            SwitchCounter::RxSaAnswers,
        ]
        .into_iter()
        .map(|c| self.switch.counter(c))
        .sum()
    }

    fn refusals(&self) -> u64 {
        self.switch.counter(SwitchCounter::TxSpoofed)
            + self.switch.counter(SwitchCounter::TxRefused)
    }

    /// Tenant `t` sends `mad`: what leaves must be allowed.
    fn outbound(&mut self, t: usize, port: u8, addr: MadAddr, mad: &Mad) {
        let refused_before = self.refusals();
        let tenant = self.tenants[t].as_mut().expect("registered");
        if mad[1] == MGMT_CLASS_SA {
            tenant.sa_tried.insert(be32(mad, 12));
        }
        let client = tenant.client;
        let result = self.switch.outbound(client, port, &addr, mad);
        let mut sent: Vec<(usize, u8, MadAddr, Mad)> = Vec::new();
        for (d, wire) in self.wires.iter().enumerate() {
            sent.extend(wire.take().into_iter().map(|(p, a, m)| (d, p, a, m)));
        }
        let tenant = self.tenants[t].as_ref().expect("registered");
        let what = || {
            format!(
                "tenant {t} (slice {:#010x}/{}, {}) sent {} on port {port} to {}",
                tenant.slice.base,
                tenant.slice.bits,
                self.devices[tenant.device],
                describe(mad),
                describe_addr(&addr)
            )
        };
        let (device, wire_port, wire_addr, wire_mad) = match sent.as_slice() {
            [] => {
                if self.refusals() != refused_before + 1 {
                    self.fail(format!(
                        "{}: it did not leave (result {result:?}) and tx_spoofed + tx_refused \
                         went from {refused_before} to {}, not one more",
                        what(),
                        self.refusals()
                    ));
                }
                return;
            }
            [one] => *one,
            many => self.fail(format!("{}: {} MADs left", what(), many.len())),
        };
        if device != tenant.device || wire_port != port || wire_addr != addr {
            self.fail(format!(
                "{}: it left on {} port {wire_port} to {:?}",
                what(),
                self.devices[device],
                wire_addr
            ));
        }
        match mad[1] {
            MGMT_CLASS_CM => {
                if wire_mad != *mad {
                    self.fail(format!(
                        "{}: it left changed, as {}",
                        what(),
                        describe(&wire_mad)
                    ));
                }
                if let Err(why) = tenant.may_send(port, &addr, mad) {
                    self.fail(format!(
                        "{}: the daemon let it through, but the rule forbids it: {why}{}",
                        what(),
                        self.routed_elsewhere(t, be32(mad, REMOTE_COMM_ID))
                    ));
                }
            }
            MGMT_CLASS_SA => {
                let path_query =
                    matches!(mad[3], 0x01 | 0x12) && attr_of(mad) == SA_ATTR_PATH_RECORD;
                if !path_query {
                    self.fail(format!(
                        "{}: an SA MAD of method {:#04x} left; only path queries may",
                        what(),
                        mad[3]
                    ));
                }
                if wire_mad[..12] != mad[..12] || wire_mad[16..] != mad[16..] {
                    self.fail(format!(
                        "{}: the SA query left changed beyond its TID",
                        what()
                    ));
                }
            }
            class => self.fail(format!(
                "{}: a MAD of class {class:#04x} left; only CM and SA MADs may",
                what()
            )),
        }
        let tenant = self.tenants[t].as_mut().expect("registered");
        if mad[1] == MGMT_CLASS_CM {
            remember(&mut self.seen_ids, be32(mad, LOCAL_COMM_ID));
            tenant.sent(port, &addr, mad);
        } else {
            tenant.sa_queries.insert(be32(&wire_mad, 12), be32(mad, 12));
        }
    }

    /// `mad` arrives from the wire on `device` `port` from `addr`.
    fn inbound(&mut self, device: usize, port: u8, addr: MadAddr, mad: &Mad) {
        let name = self.devices[device].clone();
        self.switch.inbound(&name, port, addr, mad);
        let what = || {
            format!(
                "{} received on {name} port {port} from {}",
                describe(mad),
                describe_addr(&addr)
            )
        };
        let mut delivered = false;
        // Reading every socket after every MAD was a tenth of the time: only
        // when the daemon counts a delivery (the end of the input reads them
        // all, for one it did not count).
        let count = self.deliveries();
        let tenants = if count != self.delivered_count {
            self.delivered_count = count;
            self.tenants.len()
        } else {
            0
        };
        for t in 0..tenants {
            for msg in self.drain(t) {
                delivered = true;
                let arrival = Arrival {
                    device,
                    port,
                    addr,
                    mad,
                };
                self.delivered(t, &arrival, msg, &what);
            }
        }
        let mut sent: Vec<(usize, u8, MadAddr, Mad)> = Vec::new();
        for (d, wire) in self.wires.iter().enumerate() {
            sent.extend(wire.take().into_iter().map(|(p, a, m)| (d, p, a, m)));
        }
        match sent.as_slice() {
            [] => {}
            [(d, p, a, answer)] => {
                let why = if delivered {
                    Err("a tenant got the MAD, yet the daemon answered it too".to_owned())
                } else if (*d, *p, *a) != (device, port, addr) {
                    Err(format!(
                        "it left on {} port {p} to {}",
                        self.devices[*d],
                        describe_addr(a)
                    ))
                } else {
                    stateless_answer(mad, answer)
                };
                if let Err(why) = why {
                    self.fail(format!(
                        "{}: the daemon sent {}: {why}",
                        what(),
                        describe(answer)
                    ));
                }
            }
            many => self.fail(format!("{}: the daemon sent {} MADs", what(), many.len())),
        }
    }

    /// Tenant `t` got `msg` while a MAD came from the wire: it must be that
    /// MAD, for this tenant.
    fn delivered(&mut self, t: usize, arrival: &Arrival, msg: ToClient, what: &dyn Fn() -> String) {
        let Arrival {
            device,
            port,
            addr,
            mad,
        } = *arrival;
        let tenant = self.tenants[t].as_ref().expect("drained a tenant");
        let ToClient::Recv {
            port: got_port,
            addr: got_addr,
            mad: got,
        } = msg
        else {
            self.fail(format!("{}: tenant {t} got {msg:?}", what()));
        };
        if got_addr != addr {
            self.fail(format!("{}: tenant {t} got it from {got_addr:?}", what()));
        }
        if mad[1] == MGMT_CLASS_SA {
            self.sa_answer(t, mad, got_port, &got, what);
            return;
        }
        if tenant.device != device {
            self.fail(format!(
                "{}: tenant {t} of {} got it",
                what(),
                self.devices[tenant.device]
            ));
        }
        if got_port != port || *got != *mad {
            self.fail(format!(
                "{}: tenant {t} got it as port {got_port} {}",
                what(),
                describe(&got)
            ));
        }
        let routed = Routed {
            id: be32(mad, LOCAL_COMM_ID),
            port,
            addr: addr_key(&addr),
        };
        let a = attr_of(mad);
        let owner_id = match a {
            attr::REQ | attr::SIDR_REQ => None,
            attr::SIDR_REP => Some(be32(mad, LOCAL_COMM_ID)),
            _ => Some(be32(mad, REMOTE_COMM_ID)),
        };
        let for_everyone = a == attr::REJ
            && be32(mad, REMOTE_COMM_ID) == 0
            && be16(mad, REJ_REASON) == REJ_TIMEOUT;
        if let Some(id) = owner_id
            && !for_everyone
            && !tenant.slice.contains(id)
        {
            self.fail(format!(
                "{}: tenant {t} got it, but {id:#010x} is not in its slice {:#010x}/{}",
                what(),
                tenant.slice.base,
                tenant.slice.bits
            ));
        }
        let tenant = self.tenants[t].as_mut().expect("drained a tenant");
        match a {
            attr::REQ => {
                tenant.reqs.entry(routed).or_insert(None);
                remember(&mut self.req_ids, routed.id);
            }
            attr::SIDR_REQ => {
                tenant.sidr_reqs.insert(routed);
                remember(&mut self.sidr_ids, routed.id);
            }
            // The requester's RTU or REJ for the tenant's connection (its
            // LocalCommID is the requester's): the REQ is over; routed
            // again after, it is a new one (the engine answers a duplicate
            // REQ of an established connection with a stale REJ of it).
            attr::RTU | attr::REJ if !for_everyone => {
                tenant.reqs.remove(&routed);
            }
            _ => {}
        }
    }

    /// Tenant `t` got `got` (on `got_port`) for the SA MAD `mad` from the
    /// wire: the answer to a query of its own, with its own TID back, once.
    /// (The daemon matches the TID alone, not the device the query left
    /// from.)
    fn sa_answer(
        &mut self,
        t: usize,
        mad: &Mad,
        got_port: u8,
        got: &Mad,
        what: &dyn Fn() -> String,
    ) {
        let ours = be32(mad, 12);
        let theirs = be32(got, 12);
        let someone_elses =
            self.tenants.iter().enumerate().any(|(u, x)| {
                u != t && x.as_ref().is_some_and(|x| x.sa_queries.contains_key(&ours))
            });
        let tenant = self.tenants[t].as_mut().expect("drained a tenant");
        let answers = match tenant.sa_queries.remove(&ours) {
            Some(tid) => tid == theirs,
            // A query the port refused: the daemon remembers it all the same.
            None => !someone_elses && tenant.sa_tried.contains(&theirs),
        };
        if !answers || got_port != 0 || got[..12] != mad[..12] || got[16..] != mad[16..] {
            let queries = format!("{:?}", tenant.sa_queries);
            self.fail(format!(
                "{}: tenant {t} got it as port {got_port} {}; its queries that left and are \
                 unanswered (the daemon's TID: the tenant's): {queries}",
                what(),
                describe(got),
            ));
        }
    }

    /// Everything the daemon sent tenant `t` so far.
    fn drain(&mut self, t: usize) -> Vec<ToClient> {
        let Some(tenant) = self.tenants[t].as_ref() else {
            return Vec::new();
        };
        let mut lens = [0usize; BURST];
        let mut out = Vec::new();
        loop {
            let n = match tenant
                .conn
                .mine
                .recv_burst(&mut self.buf, SLOT, &mut lens, false)
            {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return out,
                Err(e) => self.fail(format!("reading tenant {t}'s socket: {e}")),
            };
            for (slot, &len) in self.buf.chunks(SLOT).zip(&lens[..n]) {
                if len == 0 || len > SLOT {
                    self.fail(format!("tenant {t} got a message of {len} bytes"));
                }
                match ToClient::decode(&slot[..len]) {
                    Ok(msg) => out.push(msg),
                    Err(e) => self.fail(format!("tenant {t} got a malformed message: {e:?}")),
                }
            }
            if n < BURST {
                return out;
            }
        }
    }

    fn service(&self, s: Service) -> u64 {
        match s {
            Service::Known(i) => SERVICES[usize::from(i) % SERVICES.len()],
            Service::Assign => ASSIGN,
            Service::Assigned(i) if !self.assigned.is_empty() => {
                self.assigned[usize::from(i) % self.assigned.len()]
            }
            Service::Assigned(_) => ASSIGN,
            Service::InAssignRange(i) => ASSIGN + u64::from(i),
            Service::Raw(v) => v,
        }
    }

    fn slice_of(&self, t: usize) -> Option<IdSlice> {
        self.tenants[t % self.tenants.len()]
            .as_ref()
            .map(|x| x.slice)
    }

    fn id(&self, id: Id, sender: Option<usize>) -> u32 {
        let pick = |list: &[u32], i: u8| {
            if list.is_empty() {
                0
            } else {
                list[usize::from(i) % list.len()]
            }
        };
        let in_slice =
            |t: usize, low: u32| self.slice_of(t).map_or(low, |s| s.base | (low & s.mask()));
        match id {
            Id::Zero => 0,
            Id::Own(low) => in_slice(sender.unwrap_or(0), u32::from(low)),
            Id::Tenant(t, low) => in_slice(usize::from(t), u32::from(low)),
            Id::Delivered(i) => pick(&self.req_ids, i),
            Id::SidrDelivered(i) => pick(&self.sidr_ids, i),
            Id::Seen(i) => pick(&self.seen_ids, i),
            Id::Raw(v) => v,
            Id::InSlice(t, low) => in_slice(usize::from(t), low),
        }
    }

    /// The MAD `spec` describes, its IDs resolved for `sender` (a tenant,
    /// or the wire).
    fn mad(&self, spec: &MadSpec, sender: Option<usize>) -> Mad {
        // Small: an SA answer's TID (low 32 bits) may be one the daemon gave.
        let tid = u64::from(spec.tid);
        let mut mad = match spec.attr {
            Attr::Cm(a) => new_mad(a, tid, 0),
            Attr::Sa(sel) => {
                let mut m = new_mad(0, tid, 0);
                m[1] = MGMT_CLASS_SA;
                m[3] = SA_METHODS[usize::from(sel % 4)];
                let a = if sel & 4 == 0 {
                    SA_ATTR_PATH_RECORD
                } else {
                    0x0038
                };
                m[16..18].copy_from_slice(&a.to_be_bytes());
                m
            }
        };
        mad[LOCAL_COMM_ID..LOCAL_COMM_ID + 4]
            .copy_from_slice(&self.id(spec.local, sender).to_be_bytes());
        mad[REMOTE_COMM_ID..REMOTE_COMM_ID + 4]
            .copy_from_slice(&self.id(spec.remote, sender).to_be_bytes());
        match spec.attr {
            Attr::Cm(attr::REQ | attr::SIDR_REQ) => {
                mad[SERVICE_ID..SERVICE_ID + 8]
                    .copy_from_slice(&self.service(spec.service).to_be_bytes());
            }
            Attr::Cm(attr::REJ | attr::MRA) => {
                mad[MESSAGE_X] = spec.message_x << 6;
                if spec.attr == Attr::Cm(attr::REJ) {
                    mad[REJ_REASON..REJ_REASON + 2].copy_from_slice(&spec.reason.to_be_bytes());
                }
            }
            _ => {}
        }
        let n = spec.body.len().min(MAD_SIZE - BODY);
        mad[BODY..BODY + n].copy_from_slice(&spec.body[..n]);
        if let Some(b) = spec.bad_header {
            mad[[0, 2, 3, 1][usize::from(b % 4)]] = b;
        }
        mad
    }
}

/// Whether `answer` is the daemon's stateless answer to `mad` (same TID,
/// comm IDs swapped / the same request ID); if not, why.
fn stateless_answer(mad: &Mad, answer: &Mad) -> Result<(), String> {
    let Ok((header, _)) = parse_header(mad) else {
        return Err("the MAD it answered is no CM MAD".into());
    };
    if parse_header(answer).map(|(h, _)| h.tid) != Ok(header.tid) {
        return Err("not a CM MAD with the TID of the one it answers".into());
    }
    let swapped = be32(answer, LOCAL_COMM_ID) == be32(mad, REMOTE_COMM_ID)
        && be32(answer, REMOTE_COMM_ID) == be32(mad, LOCAL_COMM_ID);
    let ok = match header.attr_id {
        attr::REQ => {
            attr_of(answer) == attr::REJ
                && swapped
                && message_x(answer) == 0
                && be16(answer, REJ_REASON) == REJ_INVALID_SERVICE_ID
        }
        attr::DREQ => attr_of(answer) == attr::DREP && swapped,
        attr::SIDR_REQ => {
            attr_of(answer) == attr::SIDR_REP
                && be32(answer, LOCAL_COMM_ID) == be32(mad, LOCAL_COMM_ID)
                && answer[SIDR_STATUS] == SIDR_UNSUPPORTED
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(
            "it is none of the stateless answers (REJ 8 to a REQ, DREP to a DREQ, both \
             with the comm IDs swapped; SIDR_REP unsupported to a SIDR_REQ)"
                .into(),
        )
    }
}

/// A tenant's connection to the daemon: the harness's end and the
/// daemon's.
struct Connection {
    mine: SeqPacket,
    theirs: Arc<SeqPacket>,
}

thread_local! {
    /// Connections of inputs run, empty: making and closing socket pairs
    /// was a sixth of the time.
    static SPARE: RefCell<Vec<Connection>> = const { RefCell::new(Vec::new()) };
}

impl Connection {
    fn get() -> Self {
        SPARE.with_borrow_mut(Vec::pop).unwrap_or_else(|| {
            let (mine, theirs) = SeqPacket::pair().expect("a socket pair");
            Self {
                mine,
                theirs: Arc::new(theirs),
            }
        })
    }

    /// For the next input, if the daemon holds no reference to it (and the
    /// caller saw it empty).
    fn put_back(self) {
        if Arc::strong_count(&self.theirs) == 1 {
            SPARE.with_borrow_mut(|spare| {
                if spare.len() < 8 {
                    spare.push(self);
                }
            });
        }
    }
}

impl World {
    /// Ends the input: the switch goes, the tenants' (empty) connections are
    /// kept for the next.
    fn finish(self) {
        drop(self.switch);
        for tenant in self.tenants.into_iter().flatten() {
            tenant.conn.put_back();
        }
    }
}

/// Runs one input; with `IBCM_FUZZ_TRACE` set, prints its operations first
/// (to read a finding).
pub fn run_input(data: &[u8]) {
    static TRACE: OnceLock<bool> = OnceLock::new();
    let script = Script::read(data);
    if *TRACE.get_or_init(|| std::env::var_os("IBCM_FUZZ_TRACE").is_some()) {
        eprintln!("{script:#?}");
    }
    let mut world = World::new(script.tenants, script.devices);
    world.run(&script);
    world.finish();
}
