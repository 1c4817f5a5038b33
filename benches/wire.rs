//! Microbenchmarks: CM MAD encoding and decoding (`ib_cm::wire`), and
//! `ib_cm::cm::send_dreq` on an established in-process (loop) connection.
//!
//! `cargo bench --bench wire`. Nothing here asserts a time.
//!
//! The id lock: `send_dreq` checks the private data length, takes the id's
//! lock and does everything else under it (`send_dreq_locked`: format the
//! DREQ, hand it to the transport, arm the retransmission timer, set
//! DREQ_SENT). `send_dreq_locked` is private to the engine, so the hold time
//! itself cannot be timed from outside without changing `src/`. What is
//! measured instead: the whole `send_dreq` call (an upper bound on the hold
//! time) and an uncontended `lock()`/unlock of an id (the part of the call
//! that is not held time, besides a length comparison).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use parking_lot::{Condvar, Mutex};

use ib_cm::abi::ib_cm_event_type::*;
use ib_cm::abi::ib_qp_type;
use ib_cm::cm::event::{CmEvent, EventParam};
use ib_cm::cm::id::{CmIdPriv, Handler};
use ib_cm::cm::{self, RepParams, ReqParams};
use ib_cm::wire::{Dreq, Req, ReqPath, TransportType};

/// A REQ as the library sends one on a RoCE path (every field set).
fn sample_req() -> Req {
    let mut gid_a = [0u8; 16];
    gid_a[10] = 0xff;
    gid_a[11] = 0xff;
    gid_a[12..].copy_from_slice(&[10, 77, 0, 1]);
    let mut gid_b = gid_a;
    gid_b[15] = 2;
    let path = ReqPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: gid_a,
        remote_gid: gid_b,
        flow_label: 0,
        packet_rate: 3,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 17,
    };
    let mut private_data = [0u8; 92];
    private_data[..4].copy_from_slice(&0x0000_002au32.to_be_bytes());
    Req {
        local_comm_id: 0x1234_5678,
        service_id: 0x0106_0000_0000_1234,
        local_ca_guid: 0x0002_c903_00ab_0001,
        local_qpn: 0x1001,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        transport_service_type: TransportType::Rc,
        starting_psn: 0x00ab_cdef,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        primary_path: path,
        private_data,
        ..Req::default()
    }
}

fn sample_dreq() -> Dreq {
    Dreq {
        local_comm_id: 0x1234_5678,
        remote_comm_id: 0x9abc_def0,
        remote_qpn: 0x80_1001,
        private_data: [0x5a; 220],
    }
}

fn wire(c: &mut Criterion) {
    let req = sample_req();
    let req_mad = req.encode(0x0000_0001_7856_3412);
    let dreq = sample_dreq();
    let dreq_mad = dreq.encode(0x0000_0001_7856_3412);
    assert_eq!(Req::decode(&req_mad).unwrap(), req);
    assert_eq!(Dreq::decode(&dreq_mad).unwrap(), dreq);

    let mut g = c.benchmark_group("wire");
    g.bench_function("Req::encode", |b| {
        b.iter(|| black_box(&req).encode(black_box(0x0000_0001_7856_3412)))
    });
    g.bench_function("Req::decode", |b| {
        b.iter(|| Req::decode(black_box(&req_mad)))
    });
    g.bench_function("Dreq::encode", |b| {
        b.iter(|| black_box(&dreq).encode(black_box(0x0000_0001_7856_3412)))
    });
    g.bench_function("Dreq::decode", |b| {
        b.iter(|| Dreq::decode(black_box(&dreq_mad)))
    });
    g.finish();
}

/// Counts events and lets the bench wait for them.
#[derive(Default)]
struct Events {
    established: Mutex<u64>,
    dreps: Mutex<u64>,
    changed: Condvar,
}

impl Events {
    fn bump(&self, which: &Mutex<u64>) {
        *which.lock() += 1;
        self.changed.notify_all();
    }

    fn wait(&self, which: &Mutex<u64>, n: u64) {
        let mut count = which.lock();
        while *count < n {
            let timed_out = self
                .changed
                .wait_for(&mut count, Duration::from_secs(10))
                .timed_out();
            assert!(!timed_out, "no event in 10 s");
        }
    }
}

fn passive_handler(ev: Arc<Events>) -> Handler {
    Arc::new(
        move |id: &Arc<CmIdPriv>, event: &CmEvent| match event.event {
            IB_CM_REQ_RECEIVED => {
                let EventParam::ReqRcvd(req) = &event.param else {
                    return 1;
                };
                let rep = RepParams {
                    qp_num: req.remote_qpn | 0x80_0000,
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    ..RepParams::default()
                };
                i32::from(cm::send_rep(id, &rep).is_err())
            }
            IB_CM_RTU_RECEIVED => {
                ev.bump(&ev.established);
                0
            }
            IB_CM_DREQ_RECEIVED => {
                let _ = cm::send_drep(id, None);
                0
            }
            IB_CM_TIMEWAIT_EXIT => 1, // done with it: the library destroys it
            _ => 0,
        },
    )
}

fn active_handler(ev: Arc<Events>) -> Handler {
    Arc::new(move |id: &Arc<CmIdPriv>, event: &CmEvent| {
        match event.event {
            IB_CM_REP_RECEIVED => {
                cm::send_rtu(id, &[]).expect("send_rtu");
            }
            IB_CM_DREP_RECEIVED => ev.bump(&ev.dreps),
            _ => {}
        }
        0
    })
}

/// A unique pair of loop device names for this process.
fn loop_names() -> (String, String) {
    static NEXT: AtomicU32 = AtomicU32::new(3000);
    let n = NEXT.fetch_add(2, Ordering::Relaxed);
    (format!("loop{n}"), format!("loop{}", n + 1))
}

fn send_dreq(c: &mut Criterion) {
    let (name_a, name_b) = loop_names();
    let a = cm::open_device(&name_a).expect("open active loop device");
    let b = cm::open_device(&name_b).expect("open passive loop device");
    let ev = Arc::new(Events::default());
    let listener = cm::create_id(&b, passive_handler(ev.clone())).expect("create_id");
    cm::listen(&listener, 0x5107).expect("listen");
    let path = a
        .init_path(1, &b.ports[0].gids[0].gid)
        .expect("path between the loop devices");
    let params = ReqParams {
        primary_path: path,
        service_id: 0x5107,
        qp_type: ib_qp_type::IB_QPT_RC as i32,
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        retry_count: 7,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        ..ReqParams::default()
    };
    let handler = active_handler(ev.clone());
    let mut qpn = 0u32;
    let mut connections = 0u64;

    let mut g = c.benchmark_group("cm");
    // Each sample needs a fresh established connection per iteration: keep
    // the run short.
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("send_dreq (established loop connection)", |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                qpn = qpn % 0x7f_fff0 + 1;
                let id = cm::create_id(&a, handler.clone()).expect("create_id");
                let p = ReqParams {
                    qp_num: qpn,
                    ..params.clone()
                };
                cm::send_req(&id, &p).expect("send_req");
                connections += 1;
                ev.wait(&ev.established, connections);
                let start = Instant::now();
                let ret = cm::send_dreq(black_box(&id), None);
                total += start.elapsed();
                ret.expect("send_dreq");
                ev.wait(&ev.dreps, connections);
                cm::destroy_id(&id, 0);
            }
            total
        })
    });
    // The part of send_dreq that is not under the lock: taking and dropping
    // an uncontended id lock.
    let idle = cm::create_id(&a, handler.clone()).expect("create_id");
    g.bench_function("CmIdPriv::lock+unlock (uncontended)", |bench| {
        bench.iter(|| drop(black_box(&idle).lock()))
    });
    g.finish();

    cm::destroy_id(&idle, 0);
    cm::destroy_id(&listener, 0);
    // Passive ids leave at their TIMEWAIT_EXIT (128 ms on loop devices).
    let deadline = Instant::now() + Duration::from_secs(5);
    while cm::close_device(&b).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = cm::close_device(&a);
}

criterion_group!(benches, wire, send_dreq);
criterion_main!(benches);
