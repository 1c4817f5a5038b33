//! A port read again while its device is open (`transport::port_watch`): a
//! loop device whose paths come from the tests' fake SA reads its port from
//! files under a temporary directory, laid out as sysfs lays them out, and
//! the test changes them. Every count of queries is a fake SA's.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use parking_lot::MutexGuard;

use super::cache::{Config, PathCache};
use super::tests::{Answer, FakeSa, SA_TESTS};
use crate::cm::device::Device;
use crate::cm::tests::{loop_name, wait_until};
use crate::log::capture::Capture;
use crate::transport::loopback::LoopIdentity;
use crate::transport::port_watch::PortPoller;

/// Where the SM goes: a LID no test device has (they count up from 101).
const NEW_SM_LID: u16 = LoopIdentity::SM_LID - 1;
/// Long enough that only the test's own `poll_ports` reads the port.
const NOT_STALE: Duration = Duration::from_secs(3600);

fn dest(n: u16) -> [u8; 16] {
    LoopIdentity::from_lid(3000 + n).unwrap().gid
}

/// A loop device that asks the fake SA through a cache of its own and reads
/// its port 1 from files the test writes.
struct Fixture {
    device: Arc<Device>,
    cache: Arc<PathCache>,
    port_dir: PathBuf,
    root: PathBuf,
    _serial: MutexGuard<'static, ()>,
}

impl Fixture {
    fn new(interval: Duration) -> Self {
        let serial = SA_TESTS.lock();
        let device = crate::cm::open_device(&loop_name()).unwrap();
        let cache = Arc::new(PathCache::new(Config::default()));
        device.ask_sa_for_paths(cache.clone());
        let root = std::env::temp_dir().join(format!(
            "ibcm-port-watch-{}-{}",
            std::process::id(),
            device.name
        ));
        let port_dir = root.join(&device.name).join("ports/1");
        fs::create_dir_all(&port_dir).unwrap();
        let f = Fixture {
            cache,
            port_dir,
            root,
            _serial: serial,
            device,
        };
        // The port as the device opened it.
        let port = &f.device.ports[0];
        f.write("state", "4: ACTIVE");
        f.write("lid", &format!("{:#x}", port.lid));
        f.write("sm_lid", &format!("{:#x}", port.sm_lid));
        f.write("sm_sl", "0");
        f.device.read_ports_from(&f.root, interval);
        f
    }

    fn write(&self, file: &str, text: &str) {
        fs::write(self.port_dir.join(file), format!("{text}\n")).unwrap();
    }

    fn path(&self, n: u16) -> crate::errno::CmResult<u16> {
        self.device.init_path(1, &dest(n)).map(|p| p.dlid)
    }

    /// Changes seen and failed reads of port 1.
    fn counts(&self) -> (u64, u64) {
        self.device.port_watch_counts(1)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = crate::cm::close_device(&self.device);
        let _ = fs::remove_dir_all(&self.root);
    }
}

#[test]
fn an_sm_that_moved_drops_the_ports_paths_and_the_next_query_goes_to_it() {
    let f = Fixture::new(NOT_STALE);
    let old_sm = FakeSa::open(Answer::Numbered);
    let new_sm = FakeSa::open_at(NEW_SM_LID, Answer::Numbered);
    assert_eq!(f.path(1), Ok(1));
    assert_eq!(f.path(2), Ok(2));
    assert!(f.device.poll_ports());
    assert_eq!(f.counts(), (0, 0), "nothing changed");
    assert_eq!(f.path(1), Ok(1), "kept");
    f.write("sm_lid", &format!("{NEW_SM_LID:#x}"));
    assert!(f.device.poll_ports());
    assert_eq!(f.counts(), (1, 0));
    assert_eq!(f.cache.counters().invalidations, 2, "both answers dropped");
    assert_eq!(f.path(1), Ok(1), "the new SM's first answer");
    assert_eq!((old_sm.queries(), new_sm.queries()), (2, 1));
    let port = &f.device.ports[0];
    assert_eq!(f.device.port_state(port).sm_lid, NEW_SM_LID);
    assert!(f.device.poll_ports());
    assert_eq!(f.path(1), Ok(1), "cached again, not dropped again");
    assert_eq!(f.cache.counters().invalidations, 2);
}

#[test]
fn a_new_lid_drops_the_ports_paths() {
    let f = Fixture::new(NOT_STALE);
    let sa = FakeSa::open(Answer::Numbered);
    assert_eq!(f.path(1), Ok(1));
    f.write("lid", &format!("{:#x}", f.device.ports[0].lid + 7));
    assert!(f.device.poll_ports());
    assert_eq!(f.counts(), (1, 0));
    assert_eq!(f.path(1), Ok(2), "asked again");
    assert_eq!(sa.queries(), 2);
}

#[test]
fn a_port_that_goes_down_and_comes_back_drops_its_paths_each_time() {
    let f = Fixture::new(NOT_STALE);
    let sa = FakeSa::open(Answer::Numbered);
    assert_eq!(f.path(1), Ok(1));
    f.write("state", "1: DOWN");
    assert!(f.device.poll_ports());
    assert!(!f.device.port_state(&f.device.ports[0]).active);
    assert_eq!(f.path(1), Ok(2), "asked again");
    f.write("state", "4: ACTIVE");
    assert!(f.device.poll_ports());
    assert_eq!(f.counts(), (2, 0));
    assert_eq!(f.path(1), Ok(3), "what was asked while down went too");
    assert_eq!(sa.queries(), 3);
}

#[test]
fn port_files_that_cannot_be_read_change_and_drop_nothing() {
    let f = Fixture::new(NOT_STALE);
    let sa = FakeSa::open(Answer::Numbered);
    assert_eq!(f.path(1), Ok(1));
    fs::remove_file(f.port_dir.join("sm_lid")).unwrap();
    f.write("lid", "not a lid");
    for _ in 0..5 {
        assert!(f.device.poll_ports());
    }
    assert_eq!(f.counts(), (0, 5), "five failed reads, no change");
    assert_eq!(f.path(1), Ok(1), "kept");
    // Readable again, as it was: still no change.
    f.write("sm_lid", &format!("{:#x}", f.device.ports[0].sm_lid));
    f.write("lid", &format!("{:#x}", f.device.ports[0].lid));
    assert!(f.device.poll_ports());
    assert_eq!(f.counts(), (0, 5));
    assert_eq!(f.path(1), Ok(1), "kept");
    assert_eq!(sa.queries(), 1);
    assert_eq!(f.cache.counters().invalidations, 0);
}

#[test]
fn an_sa_query_reads_a_port_whose_last_read_is_stale_first() {
    let interval = Duration::from_millis(20);
    let f = Fixture::new(interval);
    let old_sm = FakeSa::open(Answer::Numbered);
    let new_sm = FakeSa::open_at(NEW_SM_LID, Answer::Numbered);
    assert_eq!(f.path(1), Ok(1));
    f.write("sm_lid", &format!("{NEW_SM_LID:#x}"));
    std::thread::sleep(interval * 2);
    // Nobody polled: the query itself read the port.
    assert_eq!(f.path(2), Ok(1), "the new SM's first answer");
    assert_eq!((old_sm.queries(), new_sm.queries()), (1, 1));
    assert_eq!(f.counts(), (1, 0));
    assert_eq!(f.cache.counters().invalidations, 1);
}

#[test]
fn a_closed_device_is_not_polled_any_more() {
    let f = Fixture::new(NOT_STALE);
    crate::cm::close_device(&f.device).unwrap();
    assert!(!f.device.poll_ports());
}

/// An SM LID that alternates at every read (two SMs fighting for master)
/// drops every cached path at every poll, and each drop is an info line: at
/// the default level (warn) nothing would say that the cache is defeated.
/// Such a port is warned about, once, however often it flaps.
#[test]
fn a_port_whose_sm_flaps_at_every_poll_is_warned_about_once() {
    let f = Fixture::new(NOT_STALE);
    let capture = Capture::of(&[&f.device.name]);
    let sm_lids = [NEW_SM_LID, f.device.ports[0].sm_lid];
    for poll in 0..20 {
        f.write("sm_lid", &format!("{:#x}", sm_lids[poll % 2]));
        assert!(f.device.poll_ports());
    }
    assert_eq!(f.counts(), (20, 0), "every poll a change");
    let said = capture.lines_with(&["warn", "port 1", "changed 5 times"]);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("cached paths"), "{said:?}");
}

/// A query in flight to the old SM when the move is seen: its answer, from
/// the old SM's LID, goes to its asker but is not kept, since the port's
/// invalidation came after the query began; the next ask goes to the new
/// SM.
#[test]
fn an_answer_in_flight_from_the_old_sm_when_the_port_moves_is_handed_on_not_kept() {
    let f = Fixture::new(NOT_STALE);
    let (release, hold) = sync_channel(1);
    let old_sm = FakeSa::scripted(Answer::Numbered, 0, Some(hold));
    let new_sm = FakeSa::open_at(NEW_SM_LID, Answer::Numbered);
    let device = f.device.clone();
    let asker = std::thread::spawn(move || device.init_path(1, &dest(1)).map(|p| p.dlid));
    wait_until("the query at the old SM", || old_sm.queries() == 1);
    f.write("sm_lid", &format!("{NEW_SM_LID:#x}"));
    assert!(f.device.poll_ports());
    release.send(()).unwrap();
    assert_eq!(asker.join().unwrap(), Ok(1), "the old SM's answer");
    assert_eq!(f.path(1), Ok(1), "the new SM's first answer, not a hit");
    assert_eq!((old_sm.queries(), new_sm.queries()), (1, 1));
    assert_eq!(f.cache.counters().hits, 0);
}
