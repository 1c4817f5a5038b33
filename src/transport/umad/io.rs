//! Receiving and sending MADs on a port: its reader, and `umad_send`.

use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::last_errno;
use super::loader::{IbMadAddr, Lib, UserMad};
use super::port::PortHandle;
use crate::errno::{CmResult, Errno};
use crate::ibcm_log;
use crate::transport::batch;
use crate::transport::{MadAddr, RecvFn};
use crate::wire::{GSI_QPN, MAD_HDR_SIZE as MAD_HEADER_LEN, MAD_SIZE, Mad, QP1_QKEY};

/// How long the MAD layer keeps an SA query on its agent's wait list for the
/// answer (the engine's own tries are shorter: a late answer to an earlier
/// try still matches, by TID). It expires as a send completion with a
/// timeout status, which the reader drops.
const SA_SEND_TIMEOUT_MS: c_int = 10_000;

/// The reader of one port: its own thread, or the CM worker ([`worker_poll`]).
///
/// [`worker_poll`]: super::worker_poll
pub(super) struct Reader {
    pub(super) lib: &'static Lib,
    pub(super) fd: c_int,
    pub(super) simulated: bool,
    /// MADs read per poll: where a read finds the fd empty without waiting,
    /// [`BURST`] for a reader thread and [`WORKER_DRAIN`] for the worker;
    /// else 1.
    ///
    /// [`BURST`]: crate::transport::batch::BURST
    /// [`WORKER_DRAIN`]: super::poll_set::WORKER_DRAIN
    pub(super) burst: usize,
    pub(super) wake: c_int,
    pub(super) port_num: u8,
    pub(super) dev: String,
    pub(super) dead: Arc<AtomicBool>,
    pub(super) recv: RecvFn,
}

impl Reader {
    /// Receives MADs until close wakes it or the port goes away.
    pub(super) fn run(self) {
        loop {
            match self.wait() {
                Ok(false) => continue,
                Ok(true) => {}
                Err(None) => return, // closed
                Err(Some(e)) => return self.port_gone(e),
            }
            if let Err(e) = batch::receive_batch(|| self.receive_burst()) {
                return self.port_gone(e);
            }
        }
    }

    /// Reads what the port has, up to [`BURST`] MADs, with one `poll` before
    /// them all: the read that finds the fd empty ends the burst. A
    /// simulated port reads one per poll, as it always did (umad2sim's poll
    /// ticks every 100 ms).
    ///
    /// [`BURST`]: crate::transport::batch::BURST
    pub(super) fn receive_burst(&self) -> CmResult {
        for _ in 0..self.burst {
            if !self.receive()? {
                break;
            }
        }
        Ok(())
    }

    /// Waits for a MAD (true), or nothing (false, a simulated port's tick);
    /// `Err(None)` once closed, `Err(Some(e))` when the port is gone.
    fn wait(&self) -> Result<bool, Option<Errno>> {
        let mut fds = [
            libc::pollfd {
                fd: self.fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // umad2sim's poll waits on its own fd only and ignores the others: a
        // simulated port polls it alone for a while, then the wake fd.
        let (count, timeout) = if self.simulated { (1, 100) } else { (2, -1) };
        // SAFETY: `count` valid pollfds; a real port has no timeout: only a
        // MAD or close wakes it.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), count, timeout) };
        if ready < 0 {
            let e = last_errno();
            return if e.0 == libc::EINTR {
                Ok(false)
            } else {
                Err(Some(e))
            };
        }
        if self.simulated {
            // SAFETY: one valid pollfd (a kernel fd: umad2sim passes it on).
            unsafe { libc::poll(&mut fds[1], 1, 0) };
        }
        if fds[1].revents != 0 {
            return Err(None);
        }
        let revents = fds[0].revents;
        if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            // What ib_umad's poll says once the device is removed.
            return Err(Some(crate::errno::EIO));
        }
        Ok(revents & libc::POLLIN != 0)
    }

    /// Reads one MAD and hands it on: false when there was none to read; an
    /// error only when the port is unusable.
    fn receive(&self) -> CmResult<bool> {
        let mut buf = UserMad {
            agent_id: 0,
            status: 0,
            timeout_ms: 0,
            retries: 0,
            length: 0,
            addr: IbMadAddr::default(),
            data: [0; MAD_SIZE],
        };
        let mut len = MAD_SIZE as c_int;
        // SAFETY: `buf` has room for the header and one MAD of `len` bytes.
        let rc =
            unsafe { (self.lib.recv)(self.fd, (&mut buf as *mut UserMad).cast(), &mut len, 0) };
        if rc < 0 {
            return match -rc {
                // Nothing there (after all), or a MAD too long for the CM
                // (ib_umad keeps it queued: the burst ends, as before).
                libc::EAGAIN | libc::EINTR | libc::ENOSPC => Ok(false),
                e => Err(Errno(e)),
            };
        }
        // umad2sim hands a MAD over as its sender wrote it (OpenSM writes an
        // SA answer's 56 + 64 bytes) and in a 288-byte buffer with its 64-byte
        // header, so the last 32 bytes of a full MAD never arrive: what is
        // missing stays zero here, as the end of a MAD the SA padded would be.
        let whole = if self.simulated {
            MAD_HEADER_LEN
        } else {
            MAD_SIZE
        };
        if buf.status != 0 || len < whole as c_int {
            ibcm_log!(
                Debug,
                "{} port {}: dropped a received MAD (status {}, {len} bytes)",
                self.dev,
                self.port_num,
                buf.status
            );
            return Ok(true); // a send completion or a short MAD: nothing for the CM
        }
        let a = buf.addr;
        let reply = MadAddr {
            dlid: u16::from_be(a.lid),
            sl: a.sl,
            pkey_index: a.pkey_index,
            grh: a.grh_present != 0,
            dgid: a.gid,
            sgid_index: a.gid_index,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
            flow_label: u32::from_be(a.flow_label),
        };
        (self.recv)(self.port_num, reply, Arc::new(buf.data));
        Ok(true)
    }

    /// The port is gone (the device was removed): stop reading and sending,
    /// and say so once.
    pub(super) fn port_gone(&self, e: Errno) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            ibcm_log!(
                Error,
                "{} port {}: the umad device is gone ({e:?}; device removed?): its CM MADs \
                 fail with -ENODEV from now on; destroy its cm_ids and close the device",
                self.dev,
                self.port_num
            );
        }
    }
}

impl PortHandle {
    /// Writes `mad` to `addr` from this port (one `umad_send`).
    pub(super) fn post(&self, addr: &MadAddr, mad: &Mad) -> CmResult {
        let (port, port_num) = (self, self.port_num);
        // The agent of the MAD's class: the SA's for path queries.
        let agent_id = if mad[1] == crate::sa::MGMT_CLASS_SA {
            port.sa_agent_id.ok_or(crate::errno::EOPNOTSUPP)?
        } else {
            port.agent_id.unwrap_or_default()
        };
        let mut buf = UserMad {
            agent_id,
            status: 0,
            timeout_ms: 0,
            retries: 0,
            length: MAD_SIZE as u32,
            addr: IbMadAddr {
                qpn: GSI_QPN.to_be(),
                qkey: QP1_QKEY.to_be(),
                lid: addr.dlid.to_be(),
                sl: addr.sl,
                path_bits: 0,
                grh_present: u8::from(addr.grh),
                gid_index: addr.sgid_index,
                hop_limit: addr.hop_limit,
                traffic_class: addr.traffic_class,
                gid: addr.dgid,
                flow_label: addr.flow_label.to_be(),
                pkey_index: addr.pkey_index,
                reserved: [0; 6],
            },
            data: *mad,
        };
        // An SA query waits in the MAD layer for its answer: the kernel hands
        // a response MAD only to a send still on its agent's wait list
        // (`ib_find_send_mad`: a send with a timeout), and drops any other
        // non-RMPP response, which a single-record GetResp is. CM MADs are
        // Sends: no answer to match, so no timeout (the engine retransmits).
        let timeout_ms = if mad[1] == crate::sa::MGMT_CLASS_SA {
            SA_SEND_TIMEOUT_MS
        } else {
            0
        };
        // SAFETY: `buf` is a complete ib_user_mad with one MAD; write(2)
        // copies it, so the kernel keeps no reference after the call.
        let rc = unsafe {
            (port.lib.send)(
                port.fd,
                buf.agent_id as c_int,
                (&mut buf as *mut UserMad).cast(),
                MAD_SIZE as c_int,
                timeout_ms,
                0,
            )
        };
        if rc < 0 {
            // libibumad returns -EIO for any failed write; errno says why.
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(-rc);
            let e = Errno(if errno > 0 { errno } else { -rc });
            ibcm_log!(
                Debug,
                "umad send on port {port_num} to {addr:?} failed: {e:?}"
            );
            return Err(e);
        }
        Ok(())
    }
}
