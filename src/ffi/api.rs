//! The kernel API of `<rdma/ib_cm.h>`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{
    Refused, api, bounded_private_data, err_ptr, event, live_device, live_id, path, with_id,
    with_id_and_private_data,
};
use crate::abi::{
    CIntEventType, CIntRejReason, data_size, ib_cm_handler, ib_cm_id, ib_cm_rep_param,
    ib_cm_req_param, ib_cm_sidr_rep_param, ib_cm_sidr_req_param, ib_device, ibv_ah_attr,
    ibv_gid_raw, ibv_global_route, ibv_qp_attr,
};
use crate::cm::id::Handler;
use crate::cm::{self, RepParams, ReqParams, SidrRepParams, SidrReqParams};
use crate::errno::EIO;
use crate::refusal::{Rule, above, invalid, null};

/// Creates an IDLE cm_id on `device` whose events go to `cm_handler`.
/// Returns `ERR_PTR(-EINVAL)` for a device that is not open.
#[unsafe(no_mangle)]
pub extern "C" fn ib_create_cm_id(
    device: *mut ib_device,
    cm_handler: ib_cm_handler,
    context: *mut c_void,
) -> *mut ib_cm_id {
    api("ib_create_cm_id", err_ptr(EIO), || {
        let device = live_device(device)?;
        let handler: Handler = Arc::new(event::call_c_handler);
        let id = cm::create_id(&device, handler).map_err(Refused::on_device(&device))?;
        let public = &id.public;
        public
            .cm_handler
            .store(cm_handler.map_or(0, |f| f as usize), Ordering::Release);
        public.context.store(context as usize, Ordering::Release);
        Ok(id.addr() as *mut ib_cm_id)
    })
}

/// Returns the listener for `service_id` (`__be64`) on `device` that uses
/// `cm_handler` and has no context, sharing it (each caller destroys it
/// once), or creates one with a NULL context. `ERR_PTR(-EINVAL)` when the
/// listener on that service ID has another handler or a context, for a NULL
/// `cm_handler`, or for a device that is not open.
#[unsafe(no_mangle)]
pub extern "C" fn ib_cm_insert_listen(
    device: *mut ib_device,
    cm_handler: ib_cm_handler,
    service_id: u64,
) -> *mut ib_cm_id {
    api("ib_cm_insert_listen", err_ptr(EIO), || {
        let device = live_device(device)?;
        let handler: Handler = Arc::new(event::call_c_handler);
        let key = cm_handler.map_or(0, |f| f as usize);
        let id = cm::insert_listen(&device, handler, key, u64::from_be(service_id))
            .map_err(Refused::on_device(&device))?;
        Ok(id.addr() as *mut ib_cm_id)
    })
}

/// Destroys a cm_id (see the README for what is sent in each state). Waits
/// for a running handler of the id unless called from inside it. A pointer
/// that is not a live cm_id (NULL, already destroyed) is ignored; a destroyed
/// id's address is not given to a new id before 1024 more ids were destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn ib_destroy_cm_id(cm_id: *mut ib_cm_id) {
    api("ib_destroy_cm_id", (), || {
        cm::destroy_id(&live_id(cm_id)?, 0);
        Ok(())
    })
}

/// Listens for REQs to `service_id` (`__be64`; `IB_CM_ASSIGN_SERVICE_ID` picks
/// one, readable in `cm_id->service_id`).
#[unsafe(no_mangle)]
pub extern "C" fn ib_cm_listen(cm_id: *mut ib_cm_id, service_id: u64) -> c_int {
    with_id("ib_cm_listen", cm_id, |id| {
        cm::listen(id, u64::from_be(service_id))
    })
}

/// Sends a REQ.
///
/// # Safety
/// `param`, if not NULL, points to a valid `struct ib_cm_req_param` whose
/// non-NULL pointers point to what their types say.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_req(
    cm_id: *mut ib_cm_id,
    param: *mut ib_cm_req_param,
) -> c_int {
    with_id("ib_send_cm_req", cm_id, |id| {
        // SAFETY: NULL is checked; otherwise the caller's promise.
        let p = unsafe { param.as_ref() }.ok_or_else(|| null("param"))?;
        // SAFETY: as above, for the paths the parameters point to.
        let primary = unsafe { p.primary_path.as_ref() }.ok_or_else(|| null("primary_path"))?;
        // SAFETY: as above.
        let alternate = unsafe { p.alternate_path.as_ref() };
        // SAFETY: the caller's promise for `private_data`.
        let pd = unsafe {
            bounded_private_data(
                p.private_data,
                p.private_data_len,
                data_size::REQ_PRIVATE_DATA_SIZE,
                "private_data_len",
            )
        }?;
        let params = ReqParams {
            primary_path: path::from_c(primary),
            alternate_path: alternate.map(path::from_c),
            service_id: u64::from_be(p.service_id),
            qp_num: p.qp_num,
            qp_type: p.qp_type.0,
            starting_psn: p.starting_psn,
            private_data: pd.unwrap_or_default().to_vec(),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            flow_control: p.flow_control != 0,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq != 0,
            ece: (p.ece.vendor_id, p.ece.attr_mod),
        };
        cm::send_req(id, &params)
    })
}

/// Sends a REP in answer to a received REQ.
///
/// # Safety
/// `param`, if not NULL, points to a valid `struct ib_cm_rep_param`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_rep(
    cm_id: *mut ib_cm_id,
    param: *mut ib_cm_rep_param,
) -> c_int {
    with_id("ib_send_cm_rep", cm_id, |id| {
        // SAFETY: NULL is checked; otherwise the caller's promise.
        let p = unsafe { param.as_ref() }.ok_or_else(|| null("param"))?;
        // SAFETY: the caller's promise for `private_data`.
        let pd = unsafe {
            bounded_private_data(
                p.private_data,
                p.private_data_len,
                data_size::REP_PRIVATE_DATA_SIZE,
                "private_data_len",
            )
        }?;
        let params = RepParams {
            qp_num: p.qp_num,
            starting_psn: p.starting_psn,
            private_data: pd.unwrap_or_default().to_vec(),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            failover_accepted: p.failover_accepted,
            flow_control: p.flow_control != 0,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq != 0,
            ece: (p.ece.vendor_id, p.ece.attr_mod),
        };
        cm::send_rep(id, &params)
    })
}

/// Sends an RTU: the active side's connection is established.
///
/// # Safety
/// A non-NULL `private_data` points to `private_data_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_rtu(
    cm_id: *mut ib_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    let max = data_size::RTU_PRIVATE_DATA_SIZE;
    // SAFETY: the caller's promise, forwarded.
    unsafe {
        with_id_and_private_data(
            "ib_send_cm_rtu",
            cm_id,
            private_data,
            private_data_len,
            max,
            |id, pd| cm::send_rtu(id, pd.unwrap_or_default()),
        )
    }
}

/// Sends a DREQ: asks the peer to disconnect an established connection.
/// `-EINVAL` if the data is longer than 220 bytes or the id is not
/// ESTABLISHED; a DREQ that cannot be sent puts the id in timewait.
///
/// # Safety
/// A non-NULL `private_data` points to `private_data_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_dreq(
    cm_id: *mut ib_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    let max = data_size::DREQ_PRIVATE_DATA_SIZE;
    // SAFETY: the caller's promise, forwarded.
    unsafe {
        with_id_and_private_data(
            "ib_send_cm_dreq",
            cm_id,
            private_data,
            private_data_len,
            max,
            cm::send_dreq,
        )
    }
}

/// Sends a DREP in answer to a DREQ. The id enters timewait even if sending
/// fails. `-EINVAL` if the data is longer than 224 bytes or the id is not in
/// DREQ_RCVD.
///
/// # Safety
/// A non-NULL `private_data` points to `private_data_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_drep(
    cm_id: *mut ib_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    let max = data_size::DREP_PRIVATE_DATA_SIZE;
    // SAFETY: the caller's promise, forwarded.
    unsafe {
        with_id_and_private_data(
            "ib_send_cm_drep",
            cm_id,
            private_data,
            private_data_len,
            max,
            cm::send_drep,
        )
    }
}

/// Sends a REJ during connection setup. `-EINVAL` for more than 148 bytes of
/// private data, more than 72 of ARI, a reason outside 0..=65535, or a state
/// that has nothing to reject.
///
/// # Safety
/// A non-NULL `ari` points to `ari_length` bytes, a non-NULL `private_data` to
/// `private_data_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_rej(
    cm_id: *mut ib_cm_id,
    reason: CIntRejReason,
    ari: *mut c_void,
    ari_length: u8,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    with_id("ib_send_cm_rej", cm_id, |id| {
        // SAFETY: the caller's promise.
        let pd = unsafe {
            bounded_private_data(
                private_data,
                private_data_len,
                data_size::REJ_PRIVATE_DATA_SIZE,
                "private_data_len",
            )
        }?;
        // SAFETY: the caller's promise.
        let ari = unsafe {
            bounded_private_data(ari, ari_length, data_size::REJ_ARI_LENGTH, "ari_length")
        }?;
        // The wire field is 16 bits; the kernel would truncate, this refuses.
        let reason = u16::try_from(reason.0)
            .map_err(|_| invalid(Rule::value("reason", reason.0, "is not 0 to 65535")))?;
        cm::send_rej(id, reason, ari.unwrap_or_default(), pd.unwrap_or_default())
    })
}

/// Tells the CM about a QP event: `IB_EVENT_COMM_EST` establishes a passive
/// connection whose RTU has not arrived (`-EISCONN` if already established);
/// `IB_EVENT_PATH_MIG` (the QP migrated to its alternate path) makes the
/// alternate path the connection's path for the CM's own MADs (`-EINVAL`
/// unless ESTABLISHED with no LAP pending). Any other event: `-EINVAL`.
#[unsafe(no_mangle)]
pub extern "C" fn ib_cm_notify(cm_id: *mut ib_cm_id, event: CIntEventType) -> c_int {
    with_id("ib_cm_notify", cm_id, |id| cm::notify(id, event.0))
}

/// The kernel's text for a reject reason; "unrecognized reason" otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_reject_msg(reason: c_int) -> *const c_char {
    reject_msg(reason).as_ptr()
}

fn reject_msg(reason: c_int) -> &'static CStr {
    const STRS: [&CStr; 36] = [
        c"unrecognized reason",
        c"no QP",
        c"no EEC",
        c"no resources",
        c"timeout",
        c"unsupported",
        c"invalid comm ID",
        c"invalid comm instance",
        c"invalid service ID",
        c"invalid transport type",
        c"stale conn",
        c"RDC not exist",
        c"invalid GID",
        c"invalid LID",
        c"invalid SL",
        c"invalid traffic class",
        c"invalid hop limit",
        c"invalid packet rate",
        c"invalid alt GID",
        c"invalid alt LID",
        c"invalid alt SL",
        c"invalid alt traffic class",
        c"invalid alt hop limit",
        c"invalid alt packet rate",
        c"port CM redirect",
        c"port redirect",
        c"invalid MTU",
        c"insufficient resp resources",
        c"consumer defined",
        c"invalid RNR retry",
        c"duplicate local comm ID",
        c"invalid class version",
        c"invalid flow label",
        c"invalid alt flow label",
        c"unrecognized reason",
        c"vendor option is not supported",
    ];
    usize::try_from(reason)
        .ok()
        .and_then(|i| STRS.get(i))
        .copied()
        .unwrap_or(STRS[0])
}

/// Asks for more time (Linux ≥ 6.16): from REQ_RCVD (or REP_RCVD) the id moves
/// to MRA_REQ_SENT (MRA_REP_SENT), and an ESTABLISHED id that received a LAP
/// (lap_state LAP_RCVD) to lap_state MRA_LAP_SENT; the peer's next duplicate
/// REQ (REP, LAP) is answered with an MRA, service timeout 24. No MAD is sent
/// now. `-EINVAL` in any other state.
#[unsafe(no_mangle)]
pub extern "C" fn ib_prepare_cm_mra(cm_id: *mut ib_cm_id) -> c_int {
    with_id("ib_prepare_cm_mra", cm_id, cm::prepare_mra)
}

/// Sends a SIDR_REQ: which UD QP serves `param->service_id`? Retransmitted
/// every `param->timeout_ms` up to `param->max_cm_retries` times, then
/// `IB_CM_SIDR_REQ_ERROR`. `-EINVAL` without a path, with more than 216 bytes
/// of private data, or if the id is not IDLE.
///
/// # Safety
/// `param`, if not NULL, points to a valid `struct ib_cm_sidr_req_param`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_sidr_req(
    cm_id: *mut ib_cm_id,
    param: *mut ib_cm_sidr_req_param,
) -> c_int {
    with_id("ib_send_cm_sidr_req", cm_id, |id| {
        // SAFETY: NULL is checked; otherwise the caller's promise.
        let p = unsafe { param.as_ref() }.ok_or_else(|| null("param"))?;
        // SAFETY: as above, for the path.
        let path = unsafe { p.path.as_ref() }.ok_or_else(|| null("path"))?;
        // SAFETY: the caller's promise for `private_data`.
        let pd = unsafe {
            bounded_private_data(
                p.private_data,
                p.private_data_len,
                data_size::SIDR_REQ_PRIVATE_DATA_SIZE,
                "private_data_len",
            )
        }?;
        let timeout_ms = u32::try_from(p.timeout_ms)
            .map_err(|_| above("timeout_ms", p.timeout_ms as usize, u32::MAX as usize))?;
        let params = SidrReqParams {
            path: path::from_c(path),
            service_id: u64::from_be(p.service_id),
            timeout_ms,
            private_data: pd.unwrap_or_default().to_vec(),
            max_cm_retries: p.max_cm_retries,
        };
        cm::send_sidr_req(id, &params)
    })
}

/// Answers a SIDR_REQ (the id from `IB_CM_SIDR_REQ_RECEIVED`); the id is IDLE
/// afterwards. `-EINVAL` for more than 72 bytes of info or 136 of private
/// data, a status outside 0..255, or another state. If the SIDR_REP cannot
/// be sent, the send's error (`-ENETDOWN`, …) and the id stays in
/// SIDR_REQ_RCVD, as in the kernel: call again, or destroy the id.
///
/// # Safety
/// `param`, if not NULL, points to a valid `struct ib_cm_sidr_rep_param`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_sidr_rep(
    cm_id: *mut ib_cm_id,
    param: *mut ib_cm_sidr_rep_param,
) -> c_int {
    with_id("ib_send_cm_sidr_rep", cm_id, |id| {
        // SAFETY: NULL is checked; otherwise the caller's promise.
        let p = unsafe { param.as_ref() }.ok_or_else(|| null("param"))?;
        // SAFETY: the caller's promise for `info` and `private_data`.
        let (info, pd) = unsafe {
            (
                bounded_private_data(
                    p.info,
                    p.info_length,
                    data_size::SIDR_REP_INFO_LENGTH,
                    "info_length",
                )?,
                bounded_private_data(
                    p.private_data,
                    p.private_data_len,
                    data_size::SIDR_REP_PRIVATE_DATA_SIZE,
                    "private_data_len",
                )?,
            )
        };
        let status = u8::try_from(p.status.0)
            .map_err(|_| invalid(Rule::value("status", p.status.0, "is not 0 to 255")))?;
        let params = SidrRepParams {
            qp_num: p.qp_num,
            qkey: p.qkey,
            status,
            info: info.unwrap_or_default().to_vec(),
            private_data: pd.unwrap_or_default().to_vec(),
            ece: (p.ece.vendor_id, p.ece.attr_mod),
        };
        cm::send_sidr_rep(id, &params)
    })
}

/// Fills the attributes that move a QP to `qp_attr->qp_state` (INIT, RTR or
/// RTS) for this connection, and their `IBV_QP_*` mask, as the kernel does.
/// `-EINVAL` for another QP state, a connection state that has no such
/// attributes yet, or NULL pointers.
///
/// # Safety
/// `qp_attr` and `qp_attr_mask`, if not NULL, point to a `struct ibv_qp_attr`
/// and an `int` the caller owns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_cm_init_qp_attr(
    cm_id: *mut ib_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    with_id("ib_cm_init_qp_attr", cm_id, |id| {
        // SAFETY: NULL is checked; otherwise the caller's promise.
        let (attr, mask) = unsafe { (qp_attr.as_mut(), qp_attr_mask.as_mut()) };
        let attr = attr.ok_or_else(|| null("qp_attr"))?;
        let mask = mask.ok_or_else(|| null("qp_attr_mask"))?;
        let a = cm::init_qp_attr(id, attr.qp_state)?;
        write_qp_attr(attr, &a);
        *mask = a.mask as c_int;
        Ok(())
    })
}

/// Writes the fields `a.mask` names, and only those, as the kernel does.
fn write_qp_attr(attr: &mut ibv_qp_attr, a: &cm::QpAttr) {
    use cm::qp_attr::mask;
    if a.has(mask::ACCESS_FLAGS) {
        attr.qp_access_flags = a.qp_access_flags;
    }
    if a.has(mask::PKEY_INDEX) {
        attr.pkey_index = a.pkey_index;
    }
    if a.has(mask::PORT) {
        attr.port_num = a.port_num;
    }
    if a.has(mask::AV) {
        attr.ah_attr = ah_attr(&a.ah_attr);
    }
    if a.has(mask::ALT_PATH) {
        attr.alt_ah_attr = ah_attr(&a.alt_ah_attr);
        attr.alt_pkey_index = a.alt_pkey_index;
        if let Some(port) = a.alt_port() {
            attr.alt_port_num = port;
        }
        attr.alt_timeout = a.alt_timeout;
    }
    if a.has(mask::PATH_MIG_STATE) {
        attr.path_mig_state = a.path_mig_state;
    }
    if a.has(mask::PATH_MTU) {
        attr.path_mtu = c_int::from(a.path_mtu);
    }
    if a.has(mask::DEST_QPN) {
        attr.dest_qp_num = a.dest_qp_num;
    }
    if a.has(mask::RQ_PSN) {
        attr.rq_psn = a.rq_psn;
    }
    if a.has(mask::MAX_DEST_RD_ATOMIC) {
        attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if a.has(mask::MIN_RNR_TIMER) {
        attr.min_rnr_timer = a.min_rnr_timer;
    }
    if a.has(mask::SQ_PSN) {
        attr.sq_psn = a.sq_psn;
    }
    if a.has(mask::RETRY_CNT) {
        attr.retry_cnt = a.retry_cnt;
    }
    if a.has(mask::RNR_RETRY) {
        attr.rnr_retry = a.rnr_retry;
    }
    if a.has(mask::MAX_QP_RD_ATOMIC) {
        attr.max_rd_atomic = a.max_rd_atomic;
    }
    if a.has(mask::TIMEOUT) {
        attr.timeout = a.timeout;
    }
}

/// libibverbs' `struct ibv_ah_attr` for an engine address.
fn ah_attr(ah: &cm::qp_attr::AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid_raw(ah.dgid),
            flow_label: ah.flow_label,
            sgid_index: ah.sgid_index,
            hop_limit: ah.hop_limit,
            traffic_class: ah.traffic_class,
        },
        dlid: ah.dlid,
        sl: ah.sl,
        src_path_bits: 0,
        static_rate: ah.static_rate,
        is_global: u8::from(ah.is_global),
        port_num: ah.port_num,
    }
}

/// Bounds this id's disconnect (beyond the kernel): its future DREQs are
/// resent every `timeout_ms` (1 to 600,000) up to `max_retries` times, so a
/// DREQ nobody answers ends in `IB_CM_DREQ_ERROR` after
/// `(1 + max_retries) × timeout_ms` instead of the values from connection
/// setup. Timewait is unchanged. `-EINVAL` for a bad id or timeout.
#[unsafe(no_mangle)]
pub extern "C" fn ibcm_set_disconnect_timeout(
    cm_id: *mut ib_cm_id,
    timeout_ms: c_uint,
    max_retries: u8,
) -> c_int {
    with_id("ibcm_set_disconnect_timeout", cm_id, |id| {
        cm::set_disconnect_timeout(id, timeout_ms, max_retries)
    })
}

/// Linux ≤ 6.15: asks the peer for more time by sending an MRA now, with
/// `service_timeout` (5 bits on the wire) and `private_data` (up to 222
/// bytes): from REQ_RCVD (or REP_RCVD) the id moves to MRA_REQ_SENT
/// (MRA_REP_SENT), an ESTABLISHED id that received a LAP to lap_state
/// MRA_LAP_SENT. With `IB_CM_MRA_FLAG_DELAY` set in `service_timeout` nothing
/// is sent now, as with `ib_prepare_cm_mra`. Either way the peer's next
/// duplicate REQ (REP, LAP) is answered with the same MRA. `-EINVAL` for
/// more than 222 bytes of data or any other state; if the MRA cannot be sent,
/// the send's error and nothing changes. Linux 6.16 replaced this call with
/// `ib_prepare_cm_mra`.
///
/// # Safety
/// A non-NULL `private_data` points to `private_data_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ib_send_cm_mra(
    cm_id: *mut ib_cm_id,
    service_timeout: u8,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    let max = data_size::MRA_PRIVATE_DATA_SIZE;
    // SAFETY: the caller's promise, forwarded.
    unsafe {
        with_id_and_private_data(
            "ib_send_cm_mra",
            cm_id,
            private_data,
            private_data_len,
            max,
            |id, pd| cm::send_mra(id, service_timeout, pd),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::reject_msg;

    #[test]
    fn reject_msg_matches_kernel_strings_and_bounds() {
        assert_eq!(reject_msg(28), c"consumer defined");
        assert_eq!(reject_msg(35), c"vendor option is not supported");
        assert_eq!(reject_msg(34), c"unrecognized reason");
        assert_eq!(reject_msg(0), c"unrecognized reason");
        assert_eq!(reject_msg(-1), c"unrecognized reason");
        assert_eq!(reject_msg(36), c"unrecognized reason");
    }
}
