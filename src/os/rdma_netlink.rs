//! Who owns a QP, as the kernel's RDMA resource tracking says: the RDMA
//! netlink family's NLDEV commands (what `rdma resource show qp` asks),
//! spoken directly over a `NETLINK_RDMA` socket.
//!
//! `ibcmd` asks it before it sends a tenant's REQ, REP or SIDR_REP: the QPN
//! such a MAD carries is how the peer keys its connections (the kernel's
//! stale-connection check, `cm_match_req` / `cm_rep_handler`), so a tenant
//! may only name a QP of its own (docs/ibcmd.md, "What a tenant may send").
//!
//! Built on rustix's netlink sockets: no `unsafe` of our own. Every socket
//! has a receive timeout: a kernel that does not answer costs a refusal, not
//! a thread.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::sockopt::{self, Timeout};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType};

/// `RDMA_NL_NLDEV` (rdma_netlink.h): the device/resource client.
const RDMA_NL_NLDEV: u16 = 5;
const RDMA_NLDEV_CMD_GET: u16 = 1;
const RDMA_NLDEV_CMD_RES_QP_GET: u16 = 10;
const RDMA_NLDEV_CMD_RES_PD_GET: u16 = 14;
const RDMA_NLDEV_CMD_RES_CTX_GET: u16 = 22;
const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
const RDMA_NLDEV_ATTR_PORT_INDEX: u16 = 3;
const RDMA_NLDEV_ATTR_RES_QP: u16 = 19;
const RDMA_NLDEV_ATTR_RES_QP_ENTRY: u16 = 20;
const RDMA_NLDEV_ATTR_RES_LQPN: u16 = 21;
const RDMA_NLDEV_ATTR_RES_PID: u16 = 28;
const RDMA_NLDEV_ATTR_RES_KERN_NAME: u16 = 29;
const RDMA_NLDEV_ATTR_RES_PDN: u16 = 60;
const RDMA_NLDEV_ATTR_RES_CTXN: u16 = 64;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NLMSG_HDRLEN: usize = 16;

/// How long the kernel may take to answer one request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// A dump's messages are at most a page or two each (NLMSG_GOODSIZE).
const RECV_BUFFER: usize = 64 * 1024;

/// The owner the kernel records for a QP (`fill_res_name_pid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelQpOwner {
    /// A user QP: the task that created it (a thread ID: it may be any
    /// thread of the process).
    Task(u32),
    /// A kernel QP (a ULP, the MAD layer's QP0/QP1): its module's name.
    Kernel(String),
    /// A user object whose creating thread has exited (the kernel reports
    /// no PID for it): the parent object it names, if any, whose creator
    /// may still be there (a QP's PD, a PD's user context).
    Orphan(Option<Parent>),
}

/// The object a user object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    /// A protection domain (a QP's).
    Pd(u32),
    /// A user context, one process's open device (a PD's).
    Context(u32),
}

/// The RDMA netlink index of device `name`, or None when the kernel has no
/// such device (a simulated one: umad2sim, the loop fabric).
pub fn device_index(name: &str) -> io::Result<Option<u32>> {
    let mut found = None;
    let request = message(RDMA_NLDEV_CMD_GET, NLM_F_REQUEST | NLM_F_DUMP, &[]);
    exchange(&request, true, |attrs| {
        let mut index = None;
        let mut dev_name = None;
        for (kind, value) in attributes(attrs) {
            match kind {
                RDMA_NLDEV_ATTR_DEV_INDEX => index = u32_of(value),
                RDMA_NLDEV_ATTR_DEV_NAME => dev_name = str_of(value),
                _ => {}
            }
        }
        if dev_name == Some(name) {
            found = index;
        }
    })?;
    Ok(found)
}

/// The owner of QP `qpn` on device `index`, asked by the QP's port (the
/// kernel's QP lookup needs one): None when the device has no such QP.
/// `Err(EAGAIN)` when the QP exists but is not on `port` (a QP still in
/// RESET has no port yet): ask [`qp_owners`] then.
pub fn qp_owner(index: u32, port: u8, qpn: u32) -> io::Result<Option<KernelQpOwner>> {
    let request = message(
        RDMA_NLDEV_CMD_RES_QP_GET,
        NLM_F_REQUEST,
        &[
            (RDMA_NLDEV_ATTR_DEV_INDEX, index),
            (RDMA_NLDEV_ATTR_PORT_INDEX, u32::from(port)),
            (RDMA_NLDEV_ATTR_RES_LQPN, qpn),
        ],
    );
    let mut owner = None;
    match exchange(&request, false, |attrs| owner = owner_in(attrs)) {
        Ok(()) => Ok(owner),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Every QP of device `index` and its owner (one dump: each QP is queried
/// by the driver, so this is for what [`qp_owner`] cannot answer), and how
/// the dump ended: an error when it stopped part way (a QP the driver could
/// not query ends it), the table then holding the QPs listed before.
pub fn qp_owners(index: u32) -> (HashMap<u32, KernelQpOwner>, io::Result<()>) {
    let request = message(
        RDMA_NLDEV_CMD_RES_QP_GET,
        NLM_F_REQUEST | NLM_F_DUMP,
        &[(RDMA_NLDEV_ATTR_DEV_INDEX, index)],
    );
    let mut owners = HashMap::new();
    let outcome = exchange(&request, true, |attrs| {
        for (kind, table) in attributes(attrs) {
            if kind != RDMA_NLDEV_ATTR_RES_QP {
                continue;
            }
            for (kind, entry) in attributes(table) {
                if kind != RDMA_NLDEV_ATTR_RES_QP_ENTRY {
                    continue;
                }
                let qpn = attributes(entry)
                    .find(|(k, _)| *k == RDMA_NLDEV_ATTR_RES_LQPN)
                    .and_then(|(_, v)| u32_of(v));
                if let (Some(qpn), Some(owner)) = (qpn, owner_in(entry)) {
                    owners.insert(qpn, owner);
                }
            }
        }
    });
    (owners, outcome)
}

/// The owner a QP entry's attributes name (None if it has no LQPN: not a
/// QP entry).
fn owner_in(attrs: &[u8]) -> Option<KernelQpOwner> {
    let lqpn = attributes(attrs).any(|(kind, _)| kind == RDMA_NLDEV_ATTR_RES_LQPN);
    lqpn.then(|| owner_of(attrs, RDMA_NLDEV_ATTR_RES_PDN, Parent::Pd))
}

/// The owner a resource entry's attributes name: its task, the kernel, or
/// (its task gone) the parent object `parent_attr` names.
fn owner_of(attrs: &[u8], parent_attr: u16, parent: fn(u32) -> Parent) -> KernelQpOwner {
    let mut owner = None;
    let mut up = None;
    for (kind, value) in attributes(attrs) {
        match kind {
            RDMA_NLDEV_ATTR_RES_PID => owner = u32_of(value).map(KernelQpOwner::Task),
            RDMA_NLDEV_ATTR_RES_KERN_NAME => {
                owner = Some(KernelQpOwner::Kernel(
                    str_of(value).unwrap_or("?").to_owned(),
                ))
            }
            k if k == parent_attr => up = u32_of(value).map(parent),
            _ => {}
        }
    }
    owner.unwrap_or(KernelQpOwner::Orphan(up))
}

/// The owner of `parent` on device `index` (a PD names its user context as
/// its own parent; a context has none). None when the device has no such
/// object.
pub fn parent_owner(index: u32, parent: Parent) -> io::Result<Option<KernelQpOwner>> {
    let (command, id_attr, id, up_attr): (u16, u16, u32, u16) = match parent {
        Parent::Pd(pdn) => (
            RDMA_NLDEV_CMD_RES_PD_GET,
            RDMA_NLDEV_ATTR_RES_PDN,
            pdn,
            RDMA_NLDEV_ATTR_RES_CTXN,
        ),
        Parent::Context(ctxn) => (
            RDMA_NLDEV_CMD_RES_CTX_GET,
            RDMA_NLDEV_ATTR_RES_CTXN,
            ctxn,
            // A context names no parent.
            u16::MAX,
        ),
    };
    let request = message(
        command,
        NLM_F_REQUEST,
        &[(RDMA_NLDEV_ATTR_DEV_INDEX, index), (id_attr, id)],
    );
    let mut owner = None;
    match exchange(&request, false, |attrs| {
        owner = Some(owner_of(attrs, up_attr, Parent::Context))
    }) {
        Ok(()) => Ok(owner),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A request: the header and u32 attributes.
fn message(command: u16, flags: u16, attrs: &[(u16, u32)]) -> Vec<u8> {
    let kind = (RDMA_NL_NLDEV << 10) | command;
    let len = NLMSG_HDRLEN + attrs.len() * 8;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence number
    m.extend_from_slice(&0u32.to_ne_bytes()); // port ID: the kernel fills it
    for &(attr, value) in attrs {
        m.extend_from_slice(&8u16.to_ne_bytes());
        m.extend_from_slice(&attr.to_ne_bytes());
        m.extend_from_slice(&value.to_ne_bytes());
    }
    m
}

/// Sends `request` and hands the attributes of each answer to `each`, until
/// the dump's end (`dump`) or the one answer; an NLMSG_ERROR is the errno
/// it carries.
fn exchange(request: &[u8], dump: bool, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let socket = open()?;
    rustix::net::sendto(
        &socket,
        request,
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut buffer = vec![0u8; RECV_BUFFER];
    loop {
        let (len, full) = rustix::net::recv(&socket, &mut buffer[..], RecvFlags::TRUNC)?;
        if full > len {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        let mut rest = &buffer[..len];
        while rest.len() >= NLMSG_HDRLEN {
            let size = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
            let kind = u16::from_ne_bytes([rest[4], rest[5]]);
            if size < NLMSG_HDRLEN || size > rest.len() {
                return Err(io::Error::from_raw_os_error(libc::EBADMSG));
            }
            let body = &rest[NLMSG_HDRLEN..size];
            match kind {
                // A dump's end carries its outcome: a negative errno when
                // it failed part way (the table then is not whole).
                NLMSG_DONE => {
                    let errno = body
                        .get(..4)
                        .map_or(0, |b| -i32::from_ne_bytes(b.try_into().expect("4")));
                    return if errno > 0 {
                        Err(io::Error::from_raw_os_error(errno))
                    } else {
                        Ok(())
                    };
                }
                NLMSG_ERROR => {
                    let errno = body.get(..4).map_or(libc::EBADMSG, |b| {
                        -i32::from_ne_bytes(b.try_into().expect("4"))
                    });
                    return if errno == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(errno))
                    };
                }
                _ => {
                    // The NLDEV answers have no family header: attributes
                    // follow the netlink header directly.
                    each(body);
                    if !dump {
                        return Ok(());
                    }
                }
            }
            rest = &rest[align(size).min(rest.len())..];
        }
    }
}

fn open() -> io::Result<OwnedFd> {
    let socket = rustix::net::socket(AddressFamily::NETLINK, SocketType::RAW, Some(netlink::RDMA))?;
    sockopt::set_socket_timeout(&socket, Timeout::Recv, Some(ANSWER_TIMEOUT))?;
    Ok(socket)
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// The (type, payload) pairs of a run of netlink attributes; a malformed
/// one ends the run.
fn attributes(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < 4 {
            return None;
        }
        let len = usize::from(u16::from_ne_bytes([data[0], data[1]]));
        let kind = u16::from_ne_bytes([data[2], data[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > data.len() {
            return None;
        }
        let value = &data[4..len];
        data = &data[align(len).min(data.len())..];
        Some((kind, value))
    })
}

fn u32_of(value: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(value.get(..4)?.try_into().ok()?))
}

fn str_of(value: &[u8]) -> Option<&str> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(value);
        a.resize(align(a.len()), 0);
        a
    }

    #[test]
    fn a_user_qp_entry_names_its_task_and_a_kernel_one_its_module() {
        let mut user = attr(RDMA_NLDEV_ATTR_RES_LQPN, &0x11u32.to_ne_bytes());
        user.extend(attr(RDMA_NLDEV_ATTR_RES_PID, &4242u32.to_ne_bytes()));
        assert_eq!(owner_in(&user), Some(KernelQpOwner::Task(4242)));
        let mut kernel = attr(RDMA_NLDEV_ATTR_RES_LQPN, &1u32.to_ne_bytes());
        kernel.extend(attr(RDMA_NLDEV_ATTR_RES_KERN_NAME, b"ib_core\0"));
        assert_eq!(
            owner_in(&kernel),
            Some(KernelQpOwner::Kernel("ib_core".into()))
        );
        // A creating thread gone: no PID attribute; its PD named.
        let mut orphan = attr(RDMA_NLDEV_ATTR_RES_LQPN, &0x12u32.to_ne_bytes());
        assert_eq!(owner_in(&orphan), Some(KernelQpOwner::Orphan(None)));
        orphan.extend(attr(RDMA_NLDEV_ATTR_RES_PDN, &3u32.to_ne_bytes()));
        assert_eq!(
            owner_in(&orphan),
            Some(KernelQpOwner::Orphan(Some(Parent::Pd(3))))
        );
        // A PD whose creator is gone names its user context.
        let pd = attr(RDMA_NLDEV_ATTR_RES_CTXN, &7u32.to_ne_bytes());
        assert_eq!(
            owner_of(&pd, RDMA_NLDEV_ATTR_RES_CTXN, Parent::Context),
            KernelQpOwner::Orphan(Some(Parent::Context(7)))
        );
        // Not a QP entry.
        assert_eq!(
            owner_in(&attr(RDMA_NLDEV_ATTR_RES_PID, &1u32.to_ne_bytes())),
            None
        );
    }

    #[test]
    fn a_malformed_attribute_ends_the_run_instead_of_reading_past_it() {
        let mut data = attr(RDMA_NLDEV_ATTR_RES_LQPN, &7u32.to_ne_bytes());
        // Length 200 in a 8-byte remainder.
        data.extend_from_slice(&200u16.to_ne_bytes());
        data.extend_from_slice(&RDMA_NLDEV_ATTR_RES_PID.to_ne_bytes());
        data.extend_from_slice(&[0; 4]);
        let seen: Vec<_> = attributes(&data).map(|(k, _)| k).collect();
        assert_eq!(seen, [RDMA_NLDEV_ATTR_RES_LQPN]);
    }

    #[test]
    fn a_device_the_kernel_does_not_have_has_no_index() {
        // This machine may have no RDMA at all (then netlink answers with
        // no device, or the family is missing: EPROTONOSUPPORT).
        match device_index("ibcm-no-such-device") {
            Ok(index) => assert_eq!(index, None),
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::EPROTONOSUPPORT | libc::ENOENT | libc::EOPNOTSUPP)
                ),
                "{e}"
            ),
        }
    }
}
