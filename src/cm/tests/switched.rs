//! The engine behind the MAD switch: device B's port is owned by an
//! in-process `ibcmd` (a `Switch` serving a loop port on a real socket), and
//! B's engine reaches it through the switch transport, as a process does.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::cm::{send_drep, send_dreq};
use crate::errno::{EBUSY, ENODEV};
use crate::switch::proto::DeviceInfo;
use crate::switch::{SeqPacket, Switch, SwitchConfig};
use crate::transport::switch::TEST_SOCKETS;

/// An in-process daemon serving loop device `index`'s port as `ibswN`.
pub(super) struct Daemon {
    pub(super) switch: Arc<Switch>,
    pub(super) name: String,
    socket: PathBuf,
}

impl Daemon {
    pub(super) fn start(index: u32) -> Self {
        Self::start_with(index, SwitchConfig::default())
    }

    fn start_with(index: u32, config: SwitchConfig) -> Self {
        let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
        let name = format!("ibsw{index}");
        let switch = Switch::new(config);
        switch
            .add_device(&name, |recv| {
                let info = DeviceInfo::of_loop(me);
                Ok((
                    info,
                    LoopTransport::open(me, recv)? as Arc<dyn MadTransport>,
                ))
            })
            .unwrap();
        let socket =
            std::env::temp_dir().join(format!("ibcm-test-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = SeqPacket::listen(&socket).unwrap();
        let s = switch.clone();
        std::thread::spawn(move || s.accept_loop(&listener));
        TEST_SOCKETS.lock().push((name.clone(), socket.clone()));
        Self {
            switch,
            name,
            socket,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.switch.close();
        TEST_SOCKETS.lock().retain(|(d, _)| *d != self.name);
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[test]
fn a_connection_through_the_switch_uses_the_slice_and_disconnects_with_private_data() {
    let daemon = Daemon::start(3200);
    let b = super::super::open_device(&daemon.name).unwrap();
    let slice = b.id_slice().expect("a slice from the switch");
    let pair = Pair::open(b);
    let passive = pair.connect();
    let passive_id = passive.lock().inner.local_id;
    assert!(
        slice.contains(passive_id),
        "{passive_id:#x} outside {slice:?}"
    );
    // The listen is the daemon's too: no other process gets the service ID.
    let other = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    assert_eq!(super::super::listen(&other, SERVICE_ID), Err(EBUSY));

    let (dreq_pd, drep_pd) = (pattern(220, 3), pattern(224, 4));
    let answer = drep_pd.clone();
    pair.rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(move |id, _| {
            send_drep(id, Some(&answer)).unwrap();
            0
        }),
    );
    send_dreq(&pair.active, Some(&dreq_pd)).unwrap();
    let got = pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(got.private_data.unwrap(), dreq_pd);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), drep_pd);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);

    // The daemon goes away: the device's calls fail with -ENODEV.
    drop(daemon);
    wait_until("the switch transport sees the daemon gone", || {
        super::super::listen(&other, SERVICE_ID + 1) == Err(ENODEV)
    });
    pair.finish(&[&passive, &other]);
}

/// `ib_cm_insert_listen` racing itself through the switch: both callers ask
/// the daemon, one inserts the listener and the other shares it, so the
/// loser's grant must be given back. The daemon counts a process's listens
/// per service ID: a grant never given back keeps the service ID from every
/// other process after the shared listener's last user destroyed it.
#[test]
fn insert_listen_racing_itself_gives_back_the_losers_listen() {
    use crate::cm::insert_listen;
    use crate::switch::PeerCred;
    const SHARED: u64 = 0x5ea2;
    let daemon = Daemon::start(3213);
    let b = super::super::open_device(&daemon.name).unwrap();
    let pair = Pair::open(b);
    let h = pair.rec.handler();
    let (conn, _) = SeqPacket::pair().unwrap();
    let cred = PeerCred {
        pid: 4343,
        uid: 4343,
        gid: 4343,
    };
    let (other, _, _) = daemon
        .switch
        .register(Arc::new(conn), cred, &daemon.name)
        .unwrap();
    for round in 0..40 {
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (device, h, barrier) = (pair.b.clone(), h.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    insert_listen(&device, h, 0x1111, SHARED).unwrap()
                })
            })
            .collect();
        let ids: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(ids[0].addr(), ids[1].addr(), "round {round}: one listener");
        for id in &ids {
            super::super::destroy_id(id, 0);
        }
        assert_eq!(
            daemon.switch.listen(other, SHARED, u64::MAX, 0),
            Ok(SHARED),
            "round {round}: the destroyed shared listener's service ID is still held in the daemon"
        );
        daemon.switch.unlisten(other, SHARED);
    }
    daemon.switch.unregister(other);
    pair.finish(&[]);
}

/// The errnos `ib_cm_insert_listen` returns through `ibcmd` are the
/// daemon's, as `ib_cm_listen`'s are (`-EBUSY` when another process listens
/// on the service ID), and its page lists them: a page listing only EINVAL
/// and EIO leaves a caller unable to tell "taken elsewhere" from a
/// programming error.
#[test]
fn insert_listen_through_the_switch_returns_what_its_page_lists() {
    use crate::cm::insert_listen;
    use crate::switch::PeerCred;
    const TAKEN: u64 = 0x5ea3;
    let daemon = Daemon::start(3214);
    let b = super::super::open_device(&daemon.name).unwrap();
    let pair = Pair::open(b);
    let (conn, _) = SeqPacket::pair().unwrap();
    let cred = PeerCred {
        pid: 4344,
        uid: 4344,
        gid: 4344,
    };
    let (other, _, _) = daemon
        .switch
        .register(Arc::new(conn), cred, &daemon.name)
        .unwrap();
    assert_eq!(daemon.switch.listen(other, TAKEN, u64::MAX, 0), Ok(TAKEN));
    let got = insert_listen(&pair.b, pair.rec.handler(), 0x1111, TAKEN).map(|_| ());
    assert_eq!(got, Err(EBUSY));
    let page = include_str!("../../../man/man3/ib_cm_insert_listen.3");
    let errors = page.split(".SH ERRORS").nth(1).unwrap();
    let errors = errors.split("\n.SH ").next().unwrap();
    for errno in ["EBUSY", "ENOMEM", "ENODEV", "ETIMEDOUT", "ENOBUFS"] {
        assert!(
            errors.contains(&format!(".B {errno}")),
            "ib_cm_insert_listen(3) ERRORS does not list {errno}"
        );
    }
    let listen_page = include_str!("../../../man/man3/ib_cm_listen.3");
    assert!(
        listen_page.contains(".B ENOBUFS"),
        "ib_cm_listen(3) ERRORS does not list ENOBUFS (the socket to ibcmd stayed full)"
    );
    daemon.switch.unlisten(other, TAKEN);
    daemon.switch.unregister(other);
    pair.finish(&[]);
}

/// With every local comm ID of the process's slice in use (through `ibcmd`
/// a process has 2^slice_bits of them), `ib_create_cm_id` fails with
/// `ERR_PTR(-EBUSY)` (`alloc_local_id`), and its page lists that errno (not
/// only EINVAL and EIO, nor that the kernel's `-ENOMEM` is never returned).
#[test]
fn create_id_with_the_slice_used_up_returns_what_its_page_lists() {
    let config = SwitchConfig {
        slice_bits: 8,
        ..SwitchConfig::default()
    };
    let daemon = Daemon::start_with(3215, config);
    let b = super::super::open_device(&daemon.name).unwrap();
    let rec = Arc::new(Recorder::default());
    let mut ids = Vec::new();
    let err = loop {
        match super::super::create_id(&b, rec.handler()) {
            Ok(id) => ids.push(id),
            Err(e) => break e,
        }
        assert!(ids.len() <= 256, "more ids than the slice has comm IDs");
    };
    assert_eq!((ids.len(), err), (256, EBUSY));
    let page = include_str!("../../../man/man3/ib_create_cm_id.3");
    let errors = page.split(".SH ERRORS").nth(1).unwrap();
    let errors = errors.split("\n.SH ").next().unwrap();
    assert!(
        errors.contains(".B EBUSY"),
        "ib_create_cm_id(3) ERRORS does not list EBUSY"
    );
    for id in &ids {
        super::super::destroy_id(id, 0);
    }
    super::super::close_device(&b).unwrap();
}

// ---- The daemon dies (issue 12): one flush event per id in progress ----

/// How long a tracked MAD waits for its answer here (2^16 · 4.096 µs, about
/// 256 ms): long enough that the daemon is gone well before a retry is due.
const SLOW_CM_RESPONSE: u8 = 16;

/// B behind an in-process daemon that the test kills; A, its peer, a loop
/// device. The listener is on B (`Pair::open`).
fn switched_pair(index: u32) -> (Daemon, Pair) {
    let daemon = Daemon::start(index);
    let b = super::super::open_device(&daemon.name).unwrap();
    (daemon, Pair::open(b))
}

/// A REQ whose MADs wait [`SLOW_CM_RESPONSE`] for their answers, both ways.
fn slow_req(pair: &Pair) -> ReqParams {
    ReqParams {
        remote_cm_response_timeout: SLOW_CM_RESPONSE,
        local_cm_response_timeout: SLOW_CM_RESPONSE,
        ..pair.req_params()
    }
}

/// A REQ from B to a listener on A (created here, `SERVICE_ID` on A).
fn req_from_b(pair: &Pair) -> (Arc<CmIdPriv>, Arc<CmIdPriv>, ReqParams) {
    let listener = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
    super::super::listen(&listener, SERVICE_ID).unwrap();
    let active = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    let to_b = slow_req(pair).primary_path;
    let params = ReqParams {
        primary_path: Path {
            dgid: to_b.sgid,
            sgid: to_b.dgid,
            dlid: to_b.slid,
            slid: to_b.dlid,
            ..to_b
        },
        ..slow_req(pair)
    };
    (listener, active, params)
}

/// The daemon goes away; `id` gets `event` once, flushed, and is in `state`
/// when its handler runs; its tracked MAD is gone. Returns how many events
/// `id` had before.
fn expect_flush(
    pair: &Pair,
    daemon: Daemon,
    id: &Arc<CmIdPriv>,
    event: ib_cm_event_type,
    state: ib_cm_state,
) -> usize {
    let before = pair.rec.events_of(id).len();
    drop(daemon);
    let got = pair.rec.wait(Some(id), event);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_WR_FLUSH_ERR));
    assert_eq!(got.state, state);
    assert!(
        id.lock().inner.msg.is_none(),
        "a tracked MAD left to resend"
    );
    before
}

/// Waits past two retransmission periods of `id` (and the work they would
/// queue), then checks that `id` got exactly `after` since its first
/// `before` events.
fn expect_no_more(pair: &Pair, id: &Arc<CmIdPriv>, before: usize, after: &[ib_cm_event_type]) {
    let period = u64::from(id.lock().inner.timeout_ms.max(1));
    std::thread::sleep(Duration::from_millis(2 * period + 20));
    assert!(super::super::worker::wait_for_queued_work(
        crate::cm::Cm::process(),
        WAIT
    ));
    assert_eq!(&pair.rec.events_of(id)[before..], after);
}

#[test]
fn daemon_gone_established_gets_dreq_error_then_timewait_exit() {
    let (daemon, pair) = switched_pair(3201);
    let passive = pair.connect();
    let before = expect_flush(&pair, daemon, &passive, IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    assert_eq!(passive.state(), IB_CM_IDLE);
    expect_no_more(
        &pair,
        &passive,
        before,
        &[IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT_EXIT],
    );
    // A, on the fabric, knows nothing of B's daemon.
    assert_eq!(pair.active.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn daemon_gone_req_sent_gets_req_error_and_idle() {
    let (daemon, pair) = switched_pair(3202);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // A never answers
    let (listener_a, active_b, params) = req_from_b(&pair);
    super::super::send_req(&active_b, &params).unwrap();
    let passive_a = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(active_b.state(), IB_CM_REQ_SENT);
    let before = expect_flush(&pair, daemon, &active_b, IB_CM_REQ_ERROR, IB_CM_IDLE);
    expect_no_more(&pair, &active_b, before, &[IB_CM_REQ_ERROR]);
    assert_eq!(active_b.state(), IB_CM_IDLE);
    pair.finish(&[&active_b, &listener_a, &passive_a]);
}

#[test]
fn daemon_gone_rep_rcvd_gets_req_error_and_idle() {
    let (daemon, pair) = switched_pair(3203);
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0)); // B sends no RTU
    let (listener_a, active_b, params) = req_from_b(&pair);
    super::super::send_req(&active_b, &params).unwrap();
    pair.rec.wait(Some(&active_b), IB_CM_REP_RECEIVED);
    let passive_a = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(active_b.state(), IB_CM_REP_RCVD);
    let before = expect_flush(&pair, daemon, &active_b, IB_CM_REQ_ERROR, IB_CM_IDLE);
    expect_no_more(&pair, &active_b, before, &[IB_CM_REQ_ERROR]);
    pair.finish(&[&active_b, &listener_a, &passive_a]);
}

#[test]
fn daemon_gone_rep_sent_gets_rep_error_and_idle() {
    let (daemon, pair) = switched_pair(3204);
    pair.rec.on(IB_CM_REP_RECEIVED, Arc::new(|_, _| 0)); // A sends no RTU
    super::super::send_req(&pair.active, &slow_req(&pair)).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(passive.state(), IB_CM_REP_SENT);
    let before = expect_flush(&pair, daemon, &passive, IB_CM_REP_ERROR, IB_CM_IDLE);
    expect_no_more(&pair, &passive, before, &[IB_CM_REP_ERROR]);
    pair.finish(&[&passive]);
}

#[test]
fn daemon_gone_req_rcvd_unanswered_gets_rep_error_and_idle() {
    let (daemon, pair) = switched_pair(3205);
    pair.rec.on(IB_CM_REQ_RECEIVED, Arc::new(|_, _| 0)); // B thinks it over
    super::super::send_req(&pair.active, &slow_req(&pair)).unwrap();
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    assert!(super::super::worker::wait_for_queued_work(
        crate::cm::Cm::process(),
        WAIT
    ));
    assert_eq!(passive.state(), IB_CM_REQ_RCVD);
    let before = expect_flush(&pair, daemon, &passive, IB_CM_REP_ERROR, IB_CM_IDLE);
    expect_no_more(&pair, &passive, before, &[IB_CM_REP_ERROR]);
    // Out of the remote tables as after a REP timeout: A's REQ retry (were
    // B reachable) would be a new request, not a duplicate.
    let l = passive.lock();
    assert!(!l.inner.remote_id_linked && !l.inner.remote_qpn_linked);
    drop(l);
    pair.finish(&[&passive]);
}

#[test]
fn daemon_gone_dreq_sent_gets_one_dreq_error_though_its_retry_was_armed() {
    let (daemon, pair) = switched_pair(3206);
    send_req_and_establish(&pair);
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    send_dreq(&passive, None).unwrap(); // A never answers (DREQ_RCVD)
    pair.rec.wait(Some(&pair.active), IB_CM_DREQ_RECEIVED);
    assert_eq!(passive.state(), IB_CM_DREQ_SENT);
    assert!(passive.lock().inner.msg.is_some(), "the DREQ is tracked");
    let before = expect_flush(&pair, daemon, &passive, IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    expect_no_more(
        &pair,
        &passive,
        before,
        &[IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT_EXIT],
    );
    pair.finish(&[&passive]);
}

/// The worker is busy when the daemon dies, and the DREQ's retransmission
/// falls due before it reaches the flush: the failed resend leaves the MAD
/// to the flush, so the one event is still IB_WC_WR_FLUSH_ERR.
#[test]
fn daemon_gone_a_retry_due_before_the_flush_leaves_the_mad_to_it() {
    let (daemon, pair) = switched_pair(3212);
    send_req_and_establish(&pair);
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    send_dreq(&passive, None).unwrap(); // A never answers (DREQ_RCVD)
    let retry_due = Instant::now() + Duration::from_millis(passive.lock().inner.timeout_ms.into());
    // A handler that holds the worker until the retry is due.
    let (started, release) = (
        Arc::new(std::sync::Barrier::new(2)),
        Arc::new(std::sync::Barrier::new(2)),
    );
    let (s, r) = (started.clone(), release.clone());
    let blocker = super::super::create_id(
        &pair.a,
        Arc::new(move |_, _| {
            s.wait();
            r.wait();
            0
        }),
    )
    .unwrap();
    super::super::worker::queue_event(&blocker, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    started.wait();
    let before = pair.rec.events_of(&passive).len();
    drop(daemon);
    wait_until("B's transport reports the loss", || pair.b.is_lost());
    std::thread::sleep(
        retry_due.saturating_duration_since(Instant::now()) + Duration::from_millis(20),
    );
    release.wait();
    let got = pair.rec.wait(Some(&passive), IB_CM_DREQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_WR_FLUSH_ERR));
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    expect_no_more(
        &pair,
        &passive,
        before,
        &[IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT_EXIT],
    );
    pair.finish(&[&passive, &blocker]);
}

#[test]
fn daemon_gone_dreq_rcvd_gets_dreq_error_and_timewait() {
    let (daemon, pair) = switched_pair(3207);
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap(); // B never answers
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(passive.state(), IB_CM_DREQ_RCVD);
    let before = expect_flush(&pair, daemon, &passive, IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);
    expect_no_more(
        &pair,
        &passive,
        before,
        &[IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT_EXIT],
    );
    pair.finish(&[&passive]);
}

#[test]
fn daemon_gone_sidr_req_sent_gets_sidr_req_error_and_idle() {
    let (daemon, pair) = switched_pair(3208);
    pair.rec.on(IB_CM_SIDR_REQ_RECEIVED, Arc::new(|_, _| 0)); // A never answers
    let (listener_a, requester_b, params) = req_from_b(&pair);
    let sidr = crate::cm::SidrReqParams {
        path: params.primary_path,
        service_id: SERVICE_ID,
        timeout_ms: 250,
        private_data: Vec::new(),
        max_cm_retries: 3,
    };
    crate::cm::send_sidr_req(&requester_b, &sidr).unwrap();
    let passive_a = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    assert_eq!(requester_b.state(), IB_CM_SIDR_REQ_SENT);
    let before = expect_flush(
        &pair,
        daemon,
        &requester_b,
        IB_CM_SIDR_REQ_ERROR,
        IB_CM_IDLE,
    );
    expect_no_more(&pair, &requester_b, before, &[IB_CM_SIDR_REQ_ERROR]);
    pair.finish(&[&requester_b, &listener_a, &passive_a]);
}

#[test]
fn daemon_gone_listener_idle_and_sidr_req_rcvd_get_nothing() {
    let (daemon, pair) = switched_pair(3209);
    pair.rec.on(IB_CM_SIDR_REQ_RECEIVED, Arc::new(|_, _| 0)); // B never answers
    let idle = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    let sidr = crate::cm::SidrReqParams {
        path: pair.req_params().primary_path,
        service_id: SERVICE_ID,
        timeout_ms: 250,
        private_data: Vec::new(),
        max_cm_retries: 3,
    };
    crate::cm::send_sidr_req(&pair.active, &sidr).unwrap();
    let sidr_b = pair.rec.wait(None, IB_CM_SIDR_REQ_RECEIVED).new_id.unwrap();
    assert!(super::super::worker::wait_for_queued_work(
        crate::cm::Cm::process(),
        WAIT
    ));
    assert_eq!(sidr_b.state(), IB_CM_SIDR_REQ_RCVD);
    let ids = [&pair.listener, &idle, &sidr_b];
    let before: Vec<usize> = ids.iter().map(|id| pair.rec.events_of(id).len()).collect();
    drop(daemon);
    wait_until("the switch transport sees the daemon gone", || {
        super::super::listen(&idle, SERVICE_ID + 1) == Err(ENODEV)
    });
    for (id, before) in ids.iter().zip(before) {
        expect_no_more(&pair, id, before, &[]);
    }
    assert_eq!(pair.listener.state(), IB_CM_LISTEN);
    let p = crate::cm::SidrRepParams::default();
    assert_eq!(crate::cm::send_sidr_rep(&sidr_b, &p), Err(ENODEV));
    pair.finish(&[&idle, &sidr_b]);
}

/// In FD mode the flush event waits in B's own queue: its handler runs in
/// `ibcm_process_events` on the application's thread, not on the worker.
#[test]
fn daemon_gone_in_fd_mode_the_event_waits_for_process_events() {
    use crate::abi::ibcm_event_mode::IBCM_EVENTS_FD;
    use crate::cm::worker::process_device_events;
    let daemon = Daemon::start(3211);
    let b = super::super::open_device(&daemon.name).unwrap();
    super::super::set_event_mode(&b, IBCM_EVENTS_FD).unwrap();
    let pair = Pair::open(b);
    super::super::send_req(&pair.active, &pair.req_params()).unwrap();
    wait_until("B is established", || {
        process_device_events(&pair.b, 16).unwrap();
        pair.rec.count(IB_CM_RTU_RECEIVED) == 1
    });
    let passive = pair.rec.wait(None, IB_CM_REQ_RECEIVED).new_id.unwrap();
    let before = pair.rec.events_of(&passive).len();
    drop(daemon);
    // The flush moved the id (under its lock, before queueing the event).
    wait_state(&passive, IB_CM_TIMEWAIT);
    assert!(super::super::worker::wait_for_queued_work(
        crate::cm::Cm::process(),
        WAIT
    ));
    assert_eq!(
        pair.rec.events_of(&passive).len(),
        before,
        "ran on the worker"
    );
    assert!(process_device_events(&pair.b, 1).unwrap() == 1);
    let got = pair.rec.wait(Some(&passive), IB_CM_DREQ_ERROR);
    assert_eq!(got.send_status, Some(ib_wc_status::IB_WC_WR_FLUSH_ERR));
    wait_until("TIMEWAIT_EXIT is delivered", || {
        process_device_events(&pair.b, 16).unwrap();
        pair.rec.events_of(&passive)[before..] == [IB_CM_DREQ_ERROR, IB_CM_TIMEWAIT_EXIT]
    });
    pair.finish(&[&passive]);
}

/// The daemon dies while another thread destroys half of B's established
/// ids: a destroyed id gets no event once `ib_destroy_cm_id` returned, at
/// most one DREQ_ERROR before; every other id exactly one.
#[test]
fn daemon_gone_while_ids_are_destroyed_gives_each_live_id_one_event() {
    const N: usize = 16;
    let (daemon, pair) = switched_pair(3210);
    // Each connection its own QPN on B too (a REP with one already used is
    // a stale connection to A).
    let next_qpn = Arc::new(AtomicU32::new(PASSIVE_QPN));
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |id, _| {
            let qp_num = next_qpn.fetch_add(1, Ordering::Relaxed);
            let params = RepParams {
                qp_num,
                ..rep_params(&[])
            };
            super::super::send_rep(id, &params).unwrap();
            0
        }),
    );
    let mut actives = Vec::new();
    for i in 0..N as u32 {
        let active = super::super::create_id(&pair.a, pair.rec.handler()).unwrap();
        let params = ReqParams {
            qp_num: ACTIVE_QPN + i,
            ..pair.req_params()
        };
        super::super::send_req(&active, &params).unwrap();
        actives.push(active);
    }
    wait_until("every connection is established", || {
        pair.rec.count(IB_CM_RTU_RECEIVED) == N
    });
    let passives: Vec<Arc<CmIdPriv>> = pair
        .rec
        .seen
        .lock()
        .iter()
        .filter_map(|s| s.new_id.clone())
        .collect();
    assert_eq!(passives.len(), N);
    let (doomed, live) = passives.split_at(N / 2);
    let go = Arc::new(std::sync::Barrier::new(2));
    let destroyer = {
        let (doomed, go, rec) = (doomed.to_vec(), go.clone(), pair.rec.clone());
        std::thread::spawn(move || {
            go.wait();
            doomed
                .iter()
                .map(|id| {
                    super::super::destroy_id(id, 0);
                    rec.events_of(id).len()
                })
                .collect::<Vec<_>>()
        })
    };
    go.wait();
    drop(daemon);
    let seen_at_destroy = destroyer.join().unwrap();
    for id in live {
        pair.rec.wait(Some(id), IB_CM_TIMEWAIT_EXIT);
    }
    assert!(super::super::worker::wait_for_queued_work(
        crate::cm::Cm::process(),
        WAIT
    ));
    let dreq_errors = |id: &Arc<CmIdPriv>| {
        let events = pair.rec.events_of(id);
        events.iter().filter(|&&e| e == IB_CM_DREQ_ERROR).count()
    };
    for id in live {
        assert_eq!(dreq_errors(id), 1, "{id:?}: {:?}", pair.rec.events_of(id));
    }
    for (id, seen) in doomed.iter().zip(seen_at_destroy) {
        assert_eq!(pair.rec.events_of(id).len(), seen, "an event after destroy");
        assert!(dreq_errors(id) <= 1);
    }
    let live: Vec<&Arc<CmIdPriv>> = live.iter().chain(&actives).collect();
    pair.finish(&live);
}

/// Connects A to B with the slow timeouts, B answering with a REP and A
/// with an RTU.
fn send_req_and_establish(pair: &Pair) {
    super::super::send_req(&pair.active, &slow_req(pair)).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REP_RECEIVED);
    wait_until("B is established", || {
        pair.rec.count(IB_CM_RTU_RECEIVED) == 1
    });
}
