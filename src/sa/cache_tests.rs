//! The path cache on the in-process fabric: loop devices that ask their
//! paths of the tests' fake SA (`Device::ask_sa_for_paths`), as real ports
//! ask theirs. Every count of queries is the fake SA's, never the cache's.

use std::sync::Arc;
use std::sync::mpsc::{channel, sync_channel};
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use super::cache::{self, Backoff, Config, PathCache, PortView};
use super::pathrec::PathQuery;
use super::query::{Completion, Timing};
use super::tests::{Answer, FakeSa, SA_TESTS, WAIT};
use crate::abi::ib_cm_event_type::IB_CM_REQ_ERROR;
use crate::cm::device::Device;
use crate::cm::tests::{Pair, loop_name, wait_until};
use crate::errno::EINVAL;
use crate::transport::MadTransport;
use crate::transport::loopback::LoopIdentity;
use crate::wire::attr;

/// Backoff waits short enough for tests, long enough to be seen.
const QUICK_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(10),
    max: Duration::from_millis(40),
    retries: 5,
};

fn config(ttl: Duration, max_entries: usize) -> Config {
    Config {
        ttl,
        max_entries,
        busy: QUICK_BACKOFF,
    }
}

/// A destination GID on the fabric (whether or not its device is open: the
/// fake SA answers for any).
fn dest(n: u16) -> [u8; 16] {
    LoopIdentity::from_lid(3000 + n).unwrap().gid
}

/// A loop device whose paths come from the fake SA through `cache`.
struct Fixture {
    device: Arc<Device>,
    cache: Arc<PathCache>,
    _serial: MutexGuard<'static, ()>,
}

impl Fixture {
    fn new(cache: Arc<PathCache>) -> Self {
        let serial = SA_TESTS.lock();
        let device = crate::cm::open_device(&loop_name()).unwrap();
        device.ask_sa_for_paths(cache.clone());
        Fixture {
            device,
            cache,
            _serial: serial,
        }
    }

    fn with(config: Config) -> Self {
        Self::new(Arc::new(PathCache::new(config)))
    }

    fn path(&self, n: u16) -> crate::errno::CmResult<crate::cm::path::Path> {
        self.device.init_path(1, &dest(n))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = crate::cm::close_device(&self.device);
    }
}

#[test]
fn a_path_asked_twice_is_asked_of_the_sa_once() {
    let f = Fixture::new(crate::cm::Cm::process().path_cache().clone());
    let sa = FakeSa::open(Answer::Numbered);
    let first = f.path(1).unwrap();
    let second = f.path(1).unwrap();
    assert_eq!(sa.queries(), 1);
    assert_eq!(first, second);
    assert_eq!((first.dlid, first.dgid), (1, dest(1)));
}

#[test]
fn concurrent_askers_share_one_query_and_all_get_its_answer() {
    const ASKERS: u64 = 8;
    let f = Fixture::with(Config::default());
    let (release, hold) = sync_channel(1);
    let sa = FakeSa::scripted(Answer::Numbered, 0, Some(hold));
    let askers: Vec<_> = (0..ASKERS)
        .map(|_| {
            let device = f.device.clone();
            std::thread::spawn(move || device.init_path(1, &dest(1)))
        })
        .collect();
    // The SA holds its answer until every other asker waits for it.
    wait_until("the other askers wait for the query in flight", || {
        f.cache.counters().coalesced == ASKERS - 1
    });
    release.send(()).unwrap();
    for asker in askers {
        assert_eq!(asker.join().unwrap().map(|p| p.dlid), Ok(1));
    }
    assert_eq!(sa.queries(), 1);
}

#[test]
fn concurrent_askers_share_the_error_of_the_query_in_flight() {
    const ASKERS: u64 = 4;
    let f = Fixture::with(Config::default());
    let (release, hold) = sync_channel(1);
    let sa = FakeSa::scripted(Answer::NoRecords, 0, Some(hold));
    let askers: Vec<_> = (0..ASKERS)
        .map(|_| {
            let device = f.device.clone();
            std::thread::spawn(move || device.init_path(1, &dest(1)))
        })
        .collect();
    wait_until("the other askers wait for the query in flight", || {
        f.cache.counters().coalesced == ASKERS - 1
    });
    release.send(()).unwrap();
    for asker in askers {
        assert_eq!(asker.join().unwrap(), Err(EINVAL));
    }
    assert_eq!(sa.queries(), 1);
}

#[test]
fn an_expired_answer_is_asked_again() {
    let ttl = Duration::from_millis(100);
    let f = Fixture::with(config(ttl, 16));
    let sa = FakeSa::open(Answer::Numbered);
    assert_eq!(f.path(1).unwrap().dlid, 1);
    std::thread::sleep(ttl * 2);
    assert_eq!(f.path(1).unwrap().dlid, 2, "the new answer is served");
    assert_eq!(sa.queries(), 2);
    assert_eq!(f.cache.counters().expirations, 1);
}

#[test]
fn a_port_event_drops_that_ports_answers_only() {
    let f = Fixture::with(Config::default());
    let other = crate::cm::open_device(&loop_name()).unwrap();
    other.ask_sa_for_paths(f.cache.clone());
    let sa = FakeSa::open(Answer::Numbered);
    f.path(1).unwrap();
    f.path(2).unwrap();
    other.init_path(1, &dest(1)).unwrap();
    assert_eq!(sa.queries(), 3);
    // A LID or SM change, or a client reregister, on the first device's port.
    f.device.port_changed(1);
    assert_eq!(f.path(1).unwrap().dlid, 4);
    assert_eq!(f.path(2).unwrap().dlid, 5);
    assert_eq!(other.init_path(1, &dest(1)).unwrap().dlid, 3, "kept");
    assert_eq!(sa.queries(), 5);
    assert_eq!(f.cache.counters().invalidations, 2);
    crate::cm::close_device(&other).unwrap();
}

#[test]
fn an_answer_of_a_port_that_looks_different_now_is_asked_again() {
    let f = Fixture::with(Config::default());
    let sa = FakeSa::open(Answer::Numbered);
    let port = f.device.ports[0].clone();
    let id = f.device.port_id(1);
    let ask = |n: u16, view: PortView| {
        let query = PathQuery::between(port.gids[0].gid, dest(n), port.pkey);
        f.cache
            .get(id, view, &query, true, || {
                f.device.query_path(&port, &query)
            })
            .map(|p| p.dlid)
    };
    let before = PortView {
        lid: port.lid,
        sm_lid: port.sm_lid,
        sm_sl: port.sm_sl,
    };
    assert_eq!(ask(1, before), Ok(1));
    assert_eq!(ask(2, before), Ok(2));
    assert_eq!(ask(1, before), Ok(1));
    // The port was read again (the device opened anew) with another LID:
    // every answer of the port goes, not only the one asked for.
    let relid = PortView {
        lid: port.lid + 1,
        ..before
    };
    assert_eq!(ask(1, relid), Ok(3));
    assert_eq!(ask(2, relid), Ok(4));
    let new_sm = PortView { sm_lid: 9, ..relid };
    assert_eq!(ask(2, new_sm), Ok(5));
    assert_eq!(sa.queries(), 5);
}

#[test]
fn a_req_timeout_on_the_path_makes_the_next_init_path_ask_again() {
    let _serial = SA_TESTS.lock();
    let pair = Pair::new();
    let cache = Arc::new(PathCache::new(Config::default()));
    pair.a.ask_sa_for_paths(cache.clone());
    let sa = FakeSa::open(Answer::Numbered);
    let b = pair.b.ports[0].gids[0].gid;
    pair.a.init_path(1, &dest(1)).unwrap();
    let params = pair.req_params();
    assert_eq!((params.primary_path.dgid, params.primary_path.dlid), (b, 2));
    assert_eq!(pair.a.init_path(1, &b).unwrap().dlid, 2, "cached");
    assert_eq!(sa.queries(), 2);
    pair.loop_a().drop_next(attr::REQ, 100).unwrap();
    crate::cm::send_req(&pair.active, &params).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_REQ_ERROR);
    assert_eq!(pair.a.init_path(1, &b).unwrap().dlid, 3, "asked again");
    assert_eq!(pair.a.init_path(1, &dest(1)).unwrap().dlid, 1, "kept");
    assert_eq!(sa.queries(), 3);
    pair.finish(&[]);
}

#[test]
fn a_busy_sa_gets_backoff_then_the_answer_with_few_queries() {
    let f = Fixture::with(config(cache::DEFAULT_TTL, 16));
    let sa = FakeSa::scripted(Answer::Numbered, 3, None);
    let start = Instant::now();
    assert_eq!(f.path(1).unwrap().dlid, 4);
    // At least half of each wait: 5 + 10 + 20 ms (a floor, not a speed).
    assert!(start.elapsed() >= Duration::from_millis(35), "no backoff");
    assert_eq!(sa.queries(), 4, "3 Busy answers and the record");
    assert_eq!(f.cache.counters().busy_backoffs, 3);
    assert_eq!(f.path(1).unwrap().dlid, 4, "cached");
    assert_eq!(sa.queries(), 4);
}

#[test]
fn an_sa_that_stays_busy_is_asked_a_bounded_number_of_times() {
    let f = Fixture::with(config(cache::DEFAULT_TTL, 16));
    let sa = FakeSa::scripted(Answer::Numbered, u32::MAX, None);
    assert_eq!(f.path(1), Err(EINVAL), "the kernel's errno for a status");
    let asked = u64::from(QUICK_BACKOFF.retries) + 1;
    assert_eq!(sa.queries(), asked);
    assert_eq!(f.path(1), Err(EINVAL));
    assert_eq!(sa.queries(), 2 * asked, "a Busy error is not cached");
}

#[test]
fn errors_are_not_served_from_the_cache() {
    let f = Fixture::with(Config::default());
    let sa = FakeSa::open(Answer::NoRecords);
    assert_eq!(f.path(1), Err(EINVAL));
    assert_eq!(f.path(1), Err(EINVAL));
    assert_eq!(sa.queries(), 2);
    assert!(f.cache.is_empty());
}

#[test]
fn with_a_ttl_of_zero_every_ask_is_a_query() {
    let f = Fixture::with(config(Duration::ZERO, 16));
    let sa = FakeSa::open(Answer::Numbered);
    for n in 1..=3 {
        assert_eq!(f.path(1).unwrap().dlid, n);
    }
    assert_eq!(sa.queries(), 3);
    assert!(f.cache.is_empty());
}

#[test]
fn past_max_entries_the_oldest_answer_goes_first() {
    let f = Fixture::with(config(cache::DEFAULT_TTL, 2));
    let sa = FakeSa::open(Answer::Numbered);
    for n in 1..=3 {
        assert_eq!(f.path(n).unwrap().dlid, n);
    }
    assert_eq!(f.cache.len(), 2);
    assert_eq!(f.path(2).unwrap().dlid, 2, "kept");
    assert_eq!(f.path(3).unwrap().dlid, 3, "kept");
    assert_eq!(sa.queries(), 3);
    assert_eq!(f.path(1).unwrap().dlid, 4, "evicted, asked again");
    assert_eq!(sa.queries(), 4);
    assert_eq!(f.cache.counters().evictions, 2);
}

#[test]
fn the_kernels_path_rec_get_stays_one_query_per_call() {
    let f = Fixture::with(Config::default());
    let sa = FakeSa::open(Answer::Numbered);
    f.path(1).unwrap();
    let query = PathQuery::between(f.device.ports[0].gids[0].gid, dest(1), 0xffff);
    let once = Timing {
        per_try: WAIT,
        retries: 0,
    };
    let (tx, outcomes) = channel();
    for _ in 0..2 {
        let tx = tx.clone();
        let done = Completion::Callback(Box::new(move |o| tx.send(o).unwrap()));
        f.device
            .start_path_query(1, query, once, done, None)
            .unwrap();
    }
    for _ in 0..2 {
        assert!(outcomes.recv_timeout(WAIT).unwrap().is_ok());
    }
    assert_eq!(sa.queries(), 3);
}

#[test]
fn a_busy_answer_reaches_a_path_rec_get_callback_as_einval() {
    let f = Fixture::with(Config::default());
    let sa = FakeSa::scripted(Answer::Numbered, 1, None);
    let query = PathQuery::between(f.device.ports[0].gids[0].gid, dest(1), 0xffff);
    let (tx, outcome) = channel();
    let done = Completion::Callback(Box::new(move |o| tx.send(o).unwrap()));
    let once = Timing {
        per_try: WAIT,
        retries: 0,
    };
    f.device
        .start_path_query(1, query, once, done, None)
        .unwrap();
    assert_eq!(outcome.recv_timeout(WAIT).unwrap(), Err(EINVAL));
    assert_eq!(sa.queries(), 1, "no backoff, no second query");
}
