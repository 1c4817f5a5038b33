//! Refused calls of the C API say why (issue 31, point 2): one line at
//! `info` per refused call, naming the function and the rule it broke,
//! rate limited per function. Called through the exported functions, as C
//! calls them; the lines are captured in-process (`log::capture`), by the
//! test's own devices and, for calls on no device, by the function's name.
//! The tests take turns ([`serial`]): the rate limits are the process's.

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::Instant;

use super::api::*;
use super::device::*;
use super::sa::{ib_sa_path_rec_get, ib_sa_register_client};
use crate::abi::{
    CIntEventType, CIntQpType, CIntRejReason, CIntSidrStatus, ib_cm_id, ib_cm_rep_param,
    ib_cm_req_param, ib_cm_sidr_rep_param, ib_cm_sidr_req_param, ib_device, ib_event_type, ib_gid,
    ib_qp_type, ibcm_counters, ibv_qp_attr, rdma_ucm_ece, sa_path_rec,
};
use crate::cm::id::CmIdPriv;
use crate::cm::tests::{ACTIVE_QPN, Pair, SERVICE_ID};
use crate::log::capture::Capture;
use crate::log::{BURST, REFILL};
use crate::wire::attr;

/// One test at a time, each starting with full rate-limit buckets: a test
/// that counts lines must not lose one to another's refusals.
fn serial() -> parking_lot::MutexGuard<'static, ()> {
    static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let turn = SERIAL.lock();
    crate::log::reset_rate_limits();
    turn
}

fn c_id(id: &Arc<CmIdPriv>) -> *mut ib_cm_id {
    id.addr() as *mut ib_cm_id
}

fn c_device(device: &Arc<crate::cm::device::Device>) -> *mut ib_device {
    Arc::as_ptr(device) as *mut ib_device
}

/// `id 0x<local>/0x<remote> on <dev>: `, as a line names an id.
fn about(id: &Arc<CmIdPriv>) -> String {
    format!("{} on {}: ", crate::cm::CommIds(id), id.device.name)
}

/// `ib_send_cm_dreq` with `len` bytes of private data.
fn send_dreq(cm_id: *mut ib_cm_id, len: u8) -> i32 {
    let data = [0u8; 255];
    // SAFETY: `data` holds `len` readable bytes for the call.
    unsafe { ib_send_cm_dreq(cm_id, data.as_ptr().cast::<c_void>(), len) }
}

/// The one captured line that holds all of `parts`.
fn one_line(capture: &Capture, parts: &[&str]) -> String {
    let lines = capture.lines_with(parts);
    assert_eq!(lines.len(), 1, "lines with {parts:?}: {lines:?}");
    lines[0].clone()
}

#[test]
fn refusals_a_wrong_state_names_the_state_and_the_one_needed() {
    let _serial = serial();
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name]);
    // The REQ is lost: the id stays in REQ_SENT.
    pair.a.drop_next(attr::REQ, 1).unwrap();
    crate::cm::send_req(&pair.active, &pair.req_params()).unwrap();
    assert_eq!(send_dreq(c_id(&pair.active), 0), -libc::EINVAL);
    let line = one_line(&capture, &["ib_send_cm_dreq: "]);
    assert_eq!(
        line,
        format!(
            "ib_cm: info: ib_send_cm_dreq: {}in REQ_SENT, needs ESTABLISHED (-EINVAL)\n",
            about(&pair.active)
        )
    );
    pair.finish(&[]);
}

#[test]
fn refusals_a_length_over_the_limit_names_both() {
    let _serial = serial();
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name]);
    let passive = pair.connect();
    assert_eq!(send_dreq(c_id(&pair.active), 221), -libc::EINVAL);
    let line = one_line(&capture, &["ib_send_cm_dreq: "]);
    assert!(
        line.ends_with(&format!(
            "ib_send_cm_dreq: {}private_data_len 221 > 220 (-EINVAL)\n",
            about(&pair.active)
        )),
        "{line}"
    );
    // Refused before anything changed: 220 bytes still disconnect.
    assert_eq!(send_dreq(c_id(&pair.active), 220), 0);
    pair.finish(&[&passive]);
}

/// `struct ib_cm_req_param` for `path` with `qp_type`.
fn req_param(path: &mut sa_path_rec, qp_type: i32) -> ib_cm_req_param {
    ib_cm_req_param {
        primary_path: path,
        primary_path_inbound: ptr::null_mut(),
        primary_path_outbound: ptr::null_mut(),
        alternate_path: ptr::null_mut(),
        ppath_sgid_attr: ptr::null(),
        service_id: SERVICE_ID.to_be(),
        qp_num: ACTIVE_QPN,
        qp_type: CIntQpType(qp_type),
        starting_psn: 1,
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        flow_control: 0,
        local_cm_response_timeout: 20,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: 3,
        srq: 0,
        ece: rdma_ucm_ece::default(),
    }
}

#[test]
fn refusals_a_bad_parameter_names_it_and_its_value() {
    let _serial = serial();
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name]);
    let mut path = super::path::to_c(&pair.req_params().primary_path);
    let mut p = req_param(&mut path, 0);
    // SAFETY: `p` and the path it points to live for the call.
    let rc = unsafe { ib_send_cm_req(c_id(&pair.active), &mut p) };
    assert_eq!(rc, -libc::EINVAL);
    let line = one_line(&capture, &["ib_send_cm_req: "]);
    assert!(
        line.ends_with(": qp_type 0 is not RC, UC or XRC_INI (-EINVAL)\n"),
        "{line}"
    );
    assert_eq!(pair.active.state(), crate::abi::ib_cm_state::IB_CM_IDLE);
    // The same parameters with an RC QP connect.
    p.qp_type = CIntQpType(ib_qp_type::IB_QPT_RC as i32);
    // SAFETY: as above.
    assert_eq!(unsafe { ib_send_cm_req(c_id(&pair.active), &mut p) }, 0);
    let passive = pair
        .rec
        .wait(None, crate::abi::ib_cm_event_type::IB_CM_REQ_RECEIVED)
        .new_id
        .unwrap();
    pair.rec.wait(
        Some(&passive),
        crate::abi::ib_cm_event_type::IB_CM_RTU_RECEIVED,
    );
    pair.finish(&[&passive]);
}

#[test]
fn refusals_a_null_or_stale_cm_id_is_named() {
    let _serial = serial();
    // Calls on no id name no device: captured by the function's name.
    let capture = Capture::of(&["ib_destroy_cm_id"]);
    let pair = Pair::new();
    let gone = crate::cm::create_id(&pair.a, pair.rec.handler()).unwrap();
    let stale = c_id(&gone);
    ib_destroy_cm_id(stale);
    drop(gone);
    ib_destroy_cm_id(stale);
    ib_destroy_cm_id(ptr::null_mut());
    let expect = format!(
        "ib_cm: info: ib_destroy_cm_id: cm_id {stale:p} is not a live cm_id (never one, or destroyed) (ignored)\n"
    );
    assert_eq!(one_line(&capture, &["ib_destroy_cm_id: cm_id 0x"]), expect);
    let null = one_line(&capture, &["ib_destroy_cm_id: cm_id is NULL"]);
    assert!(null.ends_with(" (ignored)\n"), "{null}");

    // A call that returns an errno says it.
    let capture = Capture::of(&["ib_cm_notify"]);
    let comm_est = CIntEventType(ib_event_type::IB_EVENT_COMM_EST as i32);
    assert_eq!(ib_cm_notify(stale, comm_est), -libc::EINVAL);
    let line = one_line(&capture, &["ib_cm_notify: cm_id "]);
    assert!(
        line.ends_with(" is not a live cm_id (never one, or destroyed) (-EINVAL)\n"),
        "{line}"
    );
    pair.finish(&[]);
}

#[test]
fn refusals_close_device_busy_counts_the_ids_left_by_state() {
    let _serial = serial();
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.b.name]);
    let passive = pair.connect();
    let idle = crate::cm::create_id(&pair.b, pair.rec.handler()).unwrap();
    assert_eq!(ibcm_close_device(c_device(&pair.b)), -libc::EBUSY);
    let line = one_line(&capture, &["ibcm_close_device: "]);
    assert_eq!(
        line,
        format!(
            "ib_cm: info: ibcm_close_device: {}: 3 ids left: 1 IDLE, 1 LISTEN, 1 ESTABLISHED (-EBUSY)\n",
            pair.b.name
        )
    );
    crate::cm::destroy_id(&idle, 0);
    pair.finish(&[&passive]);
}

/// The `[N suppressed]` a line ends with, or 0.
fn suppressed(line: &str) -> u64 {
    line.rsplit_once(" [")
        .and_then(|(_, tail)| tail.strip_suffix(" suppressed]\n"))
        .map_or(0, |n| n.parse().unwrap())
}

#[test]
fn refusals_rate_limited_a_loop_of_refused_calls_logs_a_bounded_few() {
    let _serial = serial();
    const CALLS: usize = 10_000;
    let pair = Pair::new();
    let capture = Capture::of(&[&pair.a.name]);
    let id = c_id(&pair.active);
    let parts = [
        "ibcm_set_disconnect_timeout: ",
        "timeout_ms 0 is not 1 to 600000",
    ];
    let start = Instant::now();
    for _ in 0..CALLS {
        assert_eq!(ibcm_set_disconnect_timeout(id, 0, 1), -libc::EINVAL);
    }
    let elapsed = start.elapsed();
    let lines = capture.lines_with(&parts);
    // A burst, then one per REFILL of the loop's time (a slow machine earns
    // more, never without bound).
    let bound = BURST as usize + (elapsed.as_nanos() / REFILL.as_nanos()) as usize + 1;
    assert!(
        (BURST as usize..=bound).contains(&lines.len()),
        "{} lines for {CALLS} refused calls in {elapsed:?} (at most {bound})",
        lines.len()
    );
    // The next line written says how many were held back: every call is
    // accounted for.
    std::thread::sleep(REFILL);
    assert_eq!(ibcm_set_disconnect_timeout(id, 0, 1), -libc::EINVAL);
    let all = capture.lines_with(&parts);
    assert_eq!(all.len(), lines.len() + 1, "{:?}", all.last());
    let held_back: u64 = all.iter().map(|l| suppressed(l)).sum();
    assert!(held_back > 0, "{:?}", all.last());
    assert_eq!(lines.len() as u64 + held_back, CALLS as u64);
    pair.finish(&[]);
}

/// One refused call of each exported function that can refuse one, with the
/// rule its line must name (a call no check named a rule for would say
/// `failed`). Not here: those of the tests above (`ib_send_cm_dreq`,
/// `ib_destroy_cm_id`, `ibcm_close_device`), `ibcm_reject_msg` (refuses
/// nothing), and the SA calls documented to do nothing (`ib_sa_unregister_client`
/// of an unknown client, `ib_sa_cancel_query` of a finished query).
#[test]
fn refusals_every_exported_function_names_the_rule_it_broke() {
    let _serial = serial();
    const FUNCTIONS: [&str; 34] = [
        "ib_create_cm_id",
        "ib_cm_insert_listen",
        "ib_destroy_cm_id",
        "ib_cm_listen",
        "ib_send_cm_req",
        "ib_send_cm_rep",
        "ib_send_cm_rtu",
        "ib_send_cm_dreq",
        "ib_send_cm_drep",
        "ib_send_cm_rej",
        "ib_cm_notify",
        "ib_prepare_cm_mra",
        "ib_send_cm_mra",
        "ib_send_cm_sidr_req",
        "ib_send_cm_sidr_rep",
        "ib_cm_init_qp_attr",
        "ibcm_set_disconnect_timeout",
        "ibcm_open_device",
        "ibcm_close_device",
        "ibcm_query_gid",
        "ibcm_init_path",
        "ibcm_loop_drop",
        "ibcm_get_counters",
        "ibcm_loop_set_loss",
        "ibcm_get_stats",
        "ibcm_get_path_cache_counters",
        "ibcm_set_event_mode",
        "ibcm_get_event_fd",
        "ibcm_process_events",
        "ib_sa_register_client",
        "ib_sa_path_rec_get",
        "ibcm_reject_msg",
        "ib_sa_unregister_client",
        "ib_sa_cancel_query",
    ];
    let exported = include_str!("../../c-tests/exported-symbols.txt");
    let mut listed: Vec<&str> = exported.lines().collect();
    let mut named = FUNCTIONS.to_vec();
    listed.sort_unstable();
    named.sort_unstable();
    assert_eq!(named, listed, "a function exported or gone: give it a case");

    // The SA tests refuse ib_sa_path_rec_get calls too.
    let _sa = crate::sa::tests::SA_TESTS.lock();
    let pair = Pair::new();
    // Calls on no device are captured by the function's name.
    let on_nothing = [
        "ib_create_cm_id",
        "ibcm_open_device",
        "ibcm_loop_drop",
        "ibcm_get_stats",
        "ibcm_get_path_cache_counters",
        "ib_sa_register_client",
    ];
    let mut keys = vec![pair.a.name.as_str()];
    keys.extend(on_nothing);
    let capture = Capture::of(&keys);
    let (id, dev) = (c_id(&pair.active), c_device(&pair.a));
    let data = [0u8; 255];
    let pd = data.as_ptr().cast::<c_void>();
    let mut path = super::path::to_c(&pair.req_params().primary_path);
    let mut gid = ib_gid { raw: [0; 16] };
    let mut counters = ibcm_counters::default();
    let mut qp_attr = ibv_qp_attr {
        qp_state: crate::cm::qp_attr::QPS_INIT,
        ..ibv_qp_attr::default()
    };
    let mut mask = 0;
    let mut rep = ib_cm_rep_param {
        qp_num: 1,
        starting_psn: 1,
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: 0,
        initiator_depth: 0,
        failover_accepted: 0,
        flow_control: 0,
        rnr_retry_count: 0,
        srq: 0,
        ece: rdma_ucm_ece::default(),
    };
    let mut sidr_req = ib_cm_sidr_req_param {
        path: ptr::null_mut(),
        sgid_attr: ptr::null(),
        service_id: 1,
        timeout_ms: 100,
        private_data: ptr::null(),
        private_data_len: 0,
        max_cm_retries: 0,
    };
    let mut sidr_rep = ib_cm_sidr_rep_param {
        qp_num: 1,
        qkey: 1,
        status: CIntSidrStatus(0),
        info: ptr::null(),
        info_length: 0,
        private_data: ptr::null(),
        private_data_len: 0,
        ece: rdma_ucm_ece::default(),
    };
    let mut query = ptr::null_mut();
    let assigned_range = (crate::cm::CM_ASSIGN_SERVICE_ID | 5).to_be();
    let open_twice = std::ffi::CString::new(pair.a.name.as_str()).unwrap();

    // Each call returned `-errno` and logged its one line: the function,
    // what it was called on, the rule, the errno.
    let (on_id, on_dev) = (about(&pair.active), format!("{}: ", pair.a.name));
    let refused = |name: &str, returned: i32, about: &str, rule: &str| {
        assert!(returned < 0, "{name} returned {returned}");
        let errno = crate::refusal::Neg(crate::errno::Errno(-returned));
        let line = one_line(&capture, &[&format!(" {name}: ")]);
        let expect = format!("ib_cm: info: {name}: {about}{rule} ({errno})\n");
        assert_eq!(line, expect);
    };
    let ptr_errno = |p: *mut ib_cm_id| p as isize as i32;
    let null: *mut c_void = ptr::null_mut();
    // Each pointer passed below is NULL, which the call checks, or points to
    // what its type says for the call.
    let returned = ib_create_cm_id(null.cast(), None, null.cast());
    refused("ib_create_cm_id", ptr_errno(returned), "", "device is NULL");
    let returned = ib_cm_insert_listen(dev, None, 1);
    refused(
        "ib_cm_insert_listen",
        ptr_errno(returned),
        &on_dev,
        "cm_handler is NULL",
    );
    refused(
        "ib_cm_listen",
        ib_cm_listen(id, assigned_range),
        &on_id,
        "service_id 0x200000000000005 is in the range IB_CM_ASSIGN_SERVICE_ID assigns from",
    );
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_req(id, null.cast()) };
    refused("ib_send_cm_req", returned, &on_id, "param is NULL");
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_rep(id, &mut rep) };
    refused(
        "ib_send_cm_rep",
        returned,
        &on_id,
        "in IDLE, needs REQ_RCVD or MRA_REQ_SENT",
    );
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_rtu(id, pd, 225) };
    refused(
        "ib_send_cm_rtu",
        returned,
        &on_id,
        "private_data_len 225 > 224",
    );
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_drep(id, ptr::null(), 0) };
    refused(
        "ib_send_cm_drep",
        returned,
        &on_id,
        "in IDLE, needs DREQ_RCVD",
    );
    let reason = CIntRejReason(65536);
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_rej(id, reason, null.cast(), 0, ptr::null(), 0) };
    refused(
        "ib_send_cm_rej",
        returned,
        &on_id,
        "reason 65536 is not 0 to 65535",
    );
    refused(
        "ib_cm_notify",
        ib_cm_notify(id, CIntEventType(99)),
        &on_id,
        "event 99 is not IB_EVENT_COMM_EST or IB_EVENT_PATH_MIG",
    );
    refused(
        "ib_prepare_cm_mra",
        ib_prepare_cm_mra(id),
        &on_id,
        "in IDLE, needs REQ_RCVD, REP_RCVD, or ESTABLISHED with a LAP received",
    );
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_mra(id, 0, pd, 223) };
    refused(
        "ib_send_cm_mra",
        returned,
        &on_id,
        "private_data_len 223 > 222",
    );
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_sidr_req(id, &mut sidr_req) };
    refused("ib_send_cm_sidr_req", returned, &on_id, "path is NULL");
    // SAFETY: as said above.
    let returned = unsafe { ib_send_cm_sidr_rep(id, &mut sidr_rep) };
    refused(
        "ib_send_cm_sidr_rep",
        returned,
        &on_id,
        "in IDLE, needs SIDR_REQ_RCVD",
    );
    // SAFETY: as said above.
    let returned = unsafe { ib_cm_init_qp_attr(id, &mut qp_attr, &mut mask) };
    refused(
        "ib_cm_init_qp_attr",
        returned,
        &on_id,
        "in IDLE, needs REQ_SENT to ESTABLISHED",
    );
    refused(
        "ibcm_set_disconnect_timeout",
        ibcm_set_disconnect_timeout(id, 600_001, 0),
        &on_id,
        "timeout_ms 600001 is not 1 to 600000",
    );
    // SAFETY: as said above.
    let returned = unsafe { ibcm_open_device(open_twice.as_ptr()) };
    let rule = format!("{:?}: already open in this process", pair.a.name);
    refused("ibcm_open_device", ptr_errno(returned.cast()), "", &rule);
    // SAFETY: as said above.
    let returned = unsafe { ibcm_query_gid(dev, 1, 5, &mut gid) };
    refused(
        "ibcm_query_gid",
        returned,
        &on_dev,
        "index 5 is an empty slot of the port's GID table",
    );
    // SAFETY: as said above.
    let returned = unsafe { ibcm_init_path(dev, 1, ptr::null(), &mut path) };
    refused("ibcm_init_path", returned, &on_dev, "dgid is NULL");
    refused(
        "ibcm_loop_drop",
        ibcm_loop_drop(null.cast(), 0x15, 1),
        "",
        "device is NULL",
    );
    // SAFETY: as said above.
    let returned = unsafe { ibcm_get_counters(dev, 7, &mut counters) };
    refused(
        "ibcm_get_counters",
        returned,
        &on_dev,
        "port_num 7 is not a port of the device",
    );
    refused(
        "ibcm_loop_set_loss",
        ibcm_loop_set_loss(dev, 101, 0),
        &on_dev,
        "drop_percent 101 > 100",
    );
    // SAFETY: as said above.
    let returned = unsafe { ibcm_get_stats(null.cast()) };
    refused("ibcm_get_stats", returned, "", "stats is NULL");
    // SAFETY: as said above.
    let returned = unsafe { ibcm_get_path_cache_counters(null.cast()) };
    refused(
        "ibcm_get_path_cache_counters",
        returned,
        "",
        "counters is NULL",
    );
    refused(
        "ibcm_set_event_mode",
        ibcm_set_event_mode(dev, 5),
        &on_dev,
        "mode 5 is not IBCM_EVENTS_WORKER (0) or IBCM_EVENTS_FD (1)",
    );
    refused(
        "ibcm_get_event_fd",
        ibcm_get_event_fd(dev),
        &on_dev,
        "in IBCM_EVENTS_WORKER mode, needs IBCM_EVENTS_FD",
    );
    refused(
        "ibcm_process_events",
        ibcm_process_events(dev, 0),
        &on_dev,
        "max 0 is less than 1",
    );
    // SAFETY: as said above.
    let returned = unsafe {
        ib_sa_path_rec_get(
            null.cast(),
            dev,
            1,
            &mut path,
            0,
            100,
            0,
            None,
            null.cast(),
            &mut query,
        )
    };
    refused("ib_sa_path_rec_get", returned, &on_dev, "callback is NULL");
    ib_sa_register_client(null.cast());
    let line = one_line(&capture, &["ib_cm: info: ib_sa_register_client: "]);
    assert!(line.ends_with(": client is NULL (ignored)\n"), "{line}");
    pair.finish(&[]);
}
