//! LAP: `cm_lap_handler()`. The peer proposes an alternate path for an
//! established connection.
//!
//! The kernel only receives LAPs: `ib_send_cm_lap()` (and `ib_send_cm_apr()`,
//! the answer) were removed in 2019, so a user can take the path into its QP
//! (`ib_cm_init_qp_attr` RTS) and ask for time (`ib_prepare_cm_mra`), but has
//! no way to answer; the id stays in lap_state LAP_RCVD (or MRA_LAP_SENT).

use super::event::{CmEvent, EventParam};
use super::id::Locked;
use super::mra::format_mra;
use super::path::{Path, REC_TYPE_IB};
use super::recv::Received;
use super::req::{av_from_path, path_from_wire};
use super::worker::queue_event;
use crate::abi::ib_cm_event_type::IB_CM_LAP_RECEIVED;
use crate::abi::ib_cm_lap_state::*;
use crate::abi::ib_cm_state::IB_CM_ESTABLISHED;
use crate::wire::lap::CM_LAP_PRIVATE_DATA;
use crate::wire::{Lap, MsgResponse, attr};

/// Whether `work` arrived on a RoCE port. The kernel takes no alternate path
/// messages there ("Currently Alternate path messages are not supported for
/// RoCE link layer"), and neither does this library.
pub(super) fn on_roce_port(work: &Received) -> bool {
    work.device.port(work.port).is_ok_and(|p| p.is_roce())
}

/// `cm_format_path_from_lap()`: the alternate path as this side sees it
/// (the LAP's "local" is the peer), in the connection's partition and MTU.
fn path_from_lap(l: &Locked, lap: &Lap) -> Path {
    let base = Path {
        reversible: 1,
        pkey: l.inner.pkey,
        mtu: l.inner.path_mtu,
        rec_type: REC_TYPE_IB,
        ..Path::default()
    };
    path_from_wire(&lap.alternate_path, &base)
}

/// `cm_lap_handler()`.
pub fn lap_handler(work: Received) {
    if on_roce_port(&work) {
        work.unmatched();
        return;
    }
    let Ok(lap) = Lap::decode(&work.mad) else {
        work.malformed();
        return;
    };
    let Some(id) = work.acquire_id(lap.remote_comm_id, lap.local_comm_id) else {
        work.unmatched();
        return;
    };
    let mut l = id.lock();
    let alternate_path = path_from_lap(&l, &lap);
    // `cm_init_av_by_path()`: the alternate path must leave from one of our
    // GIDs; otherwise the LAP is dropped before anything changes.
    let Some(port) = id.device.port_by_gid(&alternate_path.sgid) else {
        work.unmatched();
        return;
    };
    let alt_av = av_from_path(port, &alternate_path);
    // As in the kernel, both addresses change before the state is checked,
    // so even a LAP that is then dropped redirects the connection's MADs:
    // `cm_init_av_for_lap()` points `av` at the LAP's sender (its address
    // only: no static rate, the ACK timeout stays), and `alt_av` takes the
    // proposed path.
    l.inner.av.port_num = work.port;
    l.inner.av.addr = work.addr;
    l.inner.av.rate = 0;
    l.inner.alt_av = alt_av;
    if l.state() != IB_CM_ESTABLISHED {
        work.unmatched();
        return;
    }
    match l.lap_state() {
        s if s == IB_CM_LAP_UNINIT as i32 || s == IB_CM_LAP_IDLE as i32 => {}
        s if s == IB_CM_MRA_LAP_SENT as i32 => {
            // The user asked for time (ib_prepare_cm_mra): the repeated LAP
            // gets an MRA with the stored TID (the first LAP's).
            work.duplicate(attr::LAP);
            work.reply_to_retry(&format_mra(&l, MsgResponse::Other));
            return;
        }
        s if s == IB_CM_LAP_RCVD as i32 => {
            work.duplicate(attr::LAP); // the user has not answered yet
            return;
        }
        // LAP_SENT, MRA_LAP_RCVD: we proposed a path ourselves (unreachable
        // since the kernel removed ib_send_cm_lap()).
        _ => {
            work.unmatched();
            return;
        }
    }
    l.set_lap_state(IB_CM_LAP_RCVD);
    l.inner.tid = work.tid;
    drop(l);
    queue_event(
        &id,
        CmEvent::with_private_data(
            IB_CM_LAP_RECEIVED,
            EventParam::LapRcvd(Box::new(alternate_path)),
            work.mad,
            CM_LAP_PRIVATE_DATA.mad_range(),
        ),
    );
}
