//! The ports of open RDMA devices, read again while they are open: the SM
//! can move (a new SM LID or SL), give a port another LID, and a link can go
//! down and come back, and what was asked of the SA before such a change
//! (the path cache's answers; the SM LID queries go to) is wrong after it.
//!
//! The library has no port events without libibverbs (`ibv_get_async_event`),
//! so it reads each port's `state`, `lid`, `sm_lid` and `sm_sl` from sysfs
//! every `IBCM_PORT_POLL_MS` (1000 ms by default; 0: never) on a thread of
//! its own (`ibcm-ports`), and again before an SA query when the last read
//! is older than that. A thread, not a timer on the worker: on a real HCA a
//! read of these files is a query of the device (`ib_query_port`, a
//! firmware command on mlx5) that must not hold up received MADs.
//!
//! [`LivePorts`] keeps what was last read; whoever owns the ports (a device
//! of the library, a device `ibcmd` serves) decides what a change drops.
//! Lock order: a port's lock is a leaf, and no lock is held across a read.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::sysfs::{self, PortState};

/// How often ports are read when `IBCM_PORT_POLL_MS` is not set.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(1000);

/// `IBCM_PORT_POLL_MS`, read once: how often ports are read again; `None`
/// (0) turns the reading off, and a change is then seen only by a device
/// opened anew.
pub fn poll_interval() -> Option<Duration> {
    static INTERVAL: LazyLock<Option<Duration>> = LazyLock::new(|| {
        let value = crate::os::sys::secure_var_os(c"IBCM_PORT_POLL_MS");
        parse_interval(value.as_deref().and_then(|v| v.to_str()))
    });
    *INTERVAL
}

/// The interval a value of `IBCM_PORT_POLL_MS` sets: milliseconds, 0 to
/// 4294967295 (0: off); another value keeps the default, with a warning.
fn parse_interval(value: Option<&str>) -> Option<Duration> {
    let Some(value) = value else {
        return Some(DEFAULT_POLL_INTERVAL);
    };
    match value.trim().parse::<u32>() {
        Ok(0) => None,
        Ok(ms) => Some(Duration::from_millis(u64::from(ms))),
        Err(_) => {
            crate::ibcm_log!(
                Warn,
                "IBCM_PORT_POLL_MS={value:?} is not 0 to 4294967295 ms: {} ms",
                DEFAULT_POLL_INTERVAL.as_millis()
            );
            Some(DEFAULT_POLL_INTERVAL)
        }
    }
}

/// Where a device's ports are read (`root/name/ports/N/…`), and how often.
#[derive(Debug, Clone)]
struct Source {
    root: PathBuf,
    name: String,
    interval: Duration,
}

/// A port that changes this many times within [`FLAP_WINDOW`] is warned
/// about (once a window): each change drops its cached paths, so a port
/// that keeps changing (two SMs fighting for master, a link going down and
/// up) defeats the path cache, and its changes are only info lines.
const FLAP_CHANGES: u32 = 5;
const FLAP_WINDOW: Duration = Duration::from_secs(60);

/// One port's last read.
struct Live {
    state: PortState,
    read_at: Instant,
    /// When the current [`FLAP_WINDOW`] began, and the changes seen in it.
    window_start: Instant,
    window_changes: u32,
    /// A failed read was logged; the next success clears it.
    unreadable_said: bool,
    /// A read succeeded since the device opened.
    read_once: bool,
}

struct LivePort {
    port_num: u8,
    live: Mutex<Live>,
    /// A read is under way: another reader skips rather than waits, and two
    /// reads never store their results out of order.
    reading: AtomicBool,
    changes: AtomicU64,
    failed_reads: AtomicU64,
}

/// A port that changed between two reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub port_num: u8,
    pub old: PortState,
    pub new: PortState,
}

impl std::fmt::Display for Change {
    /// `port 1: sm_lid 0x1 -> 0x5, state ACTIVE -> DOWN`: what changed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (old, new) = (self.old, self.new);
        write!(f, "port {}:", self.port_num)?;
        let mut sep = " ";
        let state = |active: bool| if active { "ACTIVE" } else { "not ACTIVE" };
        if old.lid != new.lid {
            write!(f, "{sep}lid {:#x} -> {:#x}", old.lid, new.lid)?;
            sep = ", ";
        }
        if old.sm_lid != new.sm_lid {
            write!(f, "{sep}sm_lid {:#x} -> {:#x}", old.sm_lid, new.sm_lid)?;
            sep = ", ";
        }
        if old.sm_sl != new.sm_sl {
            write!(f, "{sep}sm_sl {} -> {}", old.sm_sl, new.sm_sl)?;
            sep = ", ";
        }
        if old.active != new.active {
            write!(
                f,
                "{sep}state {} -> {}",
                state(old.active),
                state(new.active)
            )?;
        }
        Ok(())
    }
}

/// The ports of one device as last read: their LID, SM LID, SM SL and
/// whether they are ACTIVE.
pub struct LivePorts {
    /// Unset: nothing to read (a loop device, unless a test gives it
    /// files; any device with `IBCM_PORT_POLL_MS=0`).
    source: OnceLock<Source>,
    ports: Vec<LivePort>,
}

impl LivePorts {
    /// `ports` as read when the device opened; read again once
    /// [`Self::read_from`] says where.
    pub fn new(ports: impl IntoIterator<Item = (u8, PortState)>) -> Self {
        let now = Instant::now();
        LivePorts {
            source: OnceLock::new(),
            ports: ports
                .into_iter()
                .map(|(port_num, state)| LivePort {
                    port_num,
                    live: Mutex::new(Live {
                        state,
                        read_at: now,
                        window_start: now,
                        window_changes: 0,
                        unreadable_said: false,
                        read_once: false,
                    }),
                    reading: AtomicBool::new(false),
                    changes: AtomicU64::new(0),
                    failed_reads: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// Reads the ports of device `name` under `root` from now on, again
    /// before an SA query when the last read is older than `interval`
    /// (once; later calls do nothing).
    pub fn read_from(&self, root: impl Into<PathBuf>, name: &str, interval: Duration) {
        let _ = self.source.set(Source {
            root: root.into(),
            name: name.to_owned(),
            interval,
        });
    }

    fn port(&self, port_num: u8) -> Option<&LivePort> {
        self.ports.iter().find(|p| p.port_num == port_num)
    }

    /// Port `port_num` as last read.
    pub fn state(&self, port_num: u8) -> Option<PortState> {
        self.port(port_num).map(|p| p.live.lock().state)
    }

    /// How many changes of `port_num` were seen, and how many reads of it
    /// failed.
    pub fn counts(&self, port_num: u8) -> (u64, u64) {
        self.port(port_num).map_or((0, 0), |p| {
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
            (load(&p.changes), load(&p.failed_reads))
        })
    }

    /// Reads every port now: the ones that changed.
    pub fn refresh_all(&self) -> Vec<Change> {
        self.ports.iter().filter_map(|p| self.refresh(p)).collect()
    }

    /// Reads `port_num` if its last read is older than the interval (an SA
    /// query is about to go to its SM): the change, if it changed.
    pub fn refresh_if_stale(&self, port_num: u8) -> Option<Change> {
        let interval = self.source.get()?.interval;
        let port = self.port(port_num)?;
        if port.live.lock().read_at.elapsed() < interval {
            return None;
        }
        self.refresh(port)
    }

    /// Reads `port`: its change, if any. A read that fails changes
    /// nothing (logged once until a read succeeds again) but counts as a
    /// read, so that askers do not retry it at once one after another.
    fn refresh(&self, port: &LivePort) -> Option<Change> {
        let source = self.source.get()?;
        if port.reading.swap(true, Ordering::Acquire) {
            return None;
        }
        let read = sysfs::read_port_state(&source.root, &source.name, port.port_num);
        let mut live = port.live.lock();
        live.read_at = Instant::now();
        let change = match read {
            None => {
                port.failed_reads.fetch_add(1, Ordering::Relaxed);
                let first = !std::mem::replace(&mut live.unreadable_said, true);
                let read_once = live.read_once;
                drop(live);
                if first {
                    say_unreadable(source, port.port_num, read_once);
                }
                None
            }
            Some(new) => {
                live.unreadable_said = false;
                live.read_once = true;
                let old = std::mem::replace(&mut live.state, new);
                let flapping = old != new && live.count_change();
                drop(live);
                if flapping {
                    say_flapping(source, port.port_num);
                }
                (old != new).then(|| {
                    port.changes.fetch_add(1, Ordering::Relaxed);
                    Change {
                        port_num: port.port_num,
                        old,
                        new,
                    }
                })
            }
        };
        port.reading.store(false, Ordering::Release);
        change
    }
}

impl Live {
    /// Counts a change in the current window: true when it is the one that
    /// makes the port flapping (said once a window).
    fn count_change(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.window_start) >= FLAP_WINDOW {
            (self.window_start, self.window_changes) = (now, 0);
        }
        self.window_changes += 1;
        self.window_changes == FLAP_CHANGES
    }
}

/// A port changed [`FLAP_CHANGES`] times within [`FLAP_WINDOW`].
fn say_flapping(source: &Source, port_num: u8) {
    crate::ibcm_log!(
        Warn,
        "{} port {port_num}: changed {FLAP_CHANGES} times in less than {} s (an SM that keeps moving, a link going down and up?): each change drops the port's cached paths",
        source.name,
        FLAP_WINDOW.as_secs()
    );
}

/// A port's files could not be read (said once until they can again): a
/// warning for a port that could be read before (going away?); for one never
/// read here (a process of `ibcmd`'s in a container without the host's
/// sysfs) only an info line, since its daemon watches the port.
fn say_unreadable(source: &Source, port_num: u8, read_once: bool) {
    let (name, root) = (&source.name, source.root.display());
    if read_once {
        crate::ibcm_log!(
            Warn,
            "{name} port {port_num}: cannot read the port's state, LID or SM in {root} any more: keeping what was read before"
        );
    } else {
        crate::ibcm_log!(
            Info,
            "{name} port {port_num}: cannot read the port's state, LID or SM in {root}: its changes are not seen here"
        );
    }
}

/// Something whose ports the watcher thread reads.
pub trait PortPoller: Send + Sync {
    /// Reads its ports again and acts on what changed; false once it is
    /// closed (the watcher forgets it).
    fn poll_ports(&self) -> bool;
}

/// What a watcher thread polls (the process's: [`WATCHED`]; a test's own).
struct Watched {
    pollers: Vec<Weak<dyn PortPoller>>,
    running: bool,
    /// Tests: the next start of the thread fails with `EAGAIN`.
    #[cfg(test)]
    fail_next_spawn: bool,
}

impl Watched {
    const fn new() -> Self {
        Watched {
            pollers: Vec::new(),
            running: false,
            #[cfg(test)]
            fail_next_spawn: false,
        }
    }
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched::new());

/// Has the watcher thread poll `poller` every [`poll_interval`] from now
/// on, until it is dropped or closed (nothing with the interval 0). The
/// thread runs while there is something to watch. When it cannot start
/// (`EAGAIN`), the device opens all the same (its ports are read before an
/// SA query when their last read is stale), and the next `watch` tries
/// again, for every poller since.
pub fn watch(poller: Weak<dyn PortPoller>) {
    watch_in(&WATCHED, poller);
}

/// [`watch`] with the pollers of `set`.
fn watch_in(set: &'static Mutex<Watched>, poller: Weak<dyn PortPoller>) {
    let Some(interval) = poll_interval() else {
        return;
    };
    let mut watched = set.lock();
    watched.pollers.push(poller);
    if watched.running {
        return;
    }
    #[cfg(test)]
    let fail = std::mem::take(&mut watched.fail_next_spawn);
    #[cfg(not(test))]
    let fail = false;
    match spawn(set, interval, fail) {
        Ok(()) => watched.running = true,
        Err(e) => {
            // Kept: a later watch whose thread starts polls them too. Those
            // gone are dropped here, so that failures do not pile up.
            watched.pollers.retain(|p| p.strong_count() > 0);
            drop(watched);
            crate::ibcm_log!(
                Error,
                "cannot start the port watcher thread: {e}; ports are read again only before an SA query, until a device opened later starts it"
            );
        }
    }
}

/// Starts the watcher thread of `set` (`fail`: as if it could not, tests).
fn spawn(set: &'static Mutex<Watched>, interval: Duration, fail: bool) -> std::io::Result<()> {
    if fail {
        return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
    }
    std::thread::Builder::new()
        .name("ibcm-ports".into())
        .spawn(move || {
            crate::os::sys::block_all_signals();
            run(set, interval);
        })
        .map(drop)
}

/// The watcher thread: polls every watched poller each `interval`, and ends
/// when none is left (the next `watch` starts it again).
fn run(set: &'static Mutex<Watched>, interval: Duration) {
    loop {
        std::thread::sleep(interval);
        let pollers: Vec<Arc<dyn PortPoller>> = {
            let mut watched = set.lock();
            watched.pollers.retain(|p| p.strong_count() > 0);
            if watched.pollers.is_empty() {
                watched.running = false;
                return;
            }
            watched.pollers.iter().filter_map(Weak::upgrade).collect()
        };
        for poller in pollers {
            if !poller.poll_ports() {
                let gone = Arc::downgrade(&poller);
                set.lock().pollers.retain(|p| !p.ptr_eq(&gone));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::sysfs::read_port_state;
    use std::fs;
    use std::path::Path;

    /// A poller that counts its polls.
    #[derive(Default)]
    struct Counting(AtomicU64);

    impl PortPoller for Counting {
        fn poll_ports(&self) -> bool {
            self.0.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    fn polls(p: &Counting) -> u64 {
        p.0.load(Ordering::Relaxed)
    }

    /// A device opened when the watcher thread could not start (`EAGAIN`)
    /// is not forgotten: the next open starts the thread for every device
    /// watched, not its own only, and the first one's ports are polled.
    #[test]
    fn a_device_watched_when_the_thread_could_not_start_is_polled_once_it_does() {
        if poll_interval().is_none() {
            return; // IBCM_PORT_POLL_MS=0: nothing is ever polled.
        }
        // A set of this test's own: the process's may have a thread
        // running for another test's device.
        static SET: Mutex<Watched> = Mutex::new(Watched::new());
        let (first, second) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
        SET.lock().fail_next_spawn = true;
        let weak = |p: &Arc<Counting>| {
            let p: Arc<dyn PortPoller> = p.clone();
            Arc::downgrade(&p)
        };
        watch_in(&SET, weak(&first));
        assert!(!SET.lock().running, "the thread started");
        watch_in(&SET, weak(&second));
        let start = Instant::now();
        while polls(&second) == 0 && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(polls(&second) > 0, "the thread never polled");
        assert!(polls(&first) > 0, "the first poller was forgotten");
    }

    const ACTIVE: PortState = PortState {
        lid: 3,
        sm_lid: 1,
        sm_sl: 0,
        active: true,
    };

    /// Port 1 of `mlx5_0` under `root`, as sysfs shows it.
    fn write_port(root: &Path, state: &str, lid: &str, sm_lid: &str, sm_sl: &str) {
        let dir = root.join("mlx5_0/ports/1");
        fs::create_dir_all(&dir).unwrap();
        for (file, text) in [
            ("state", state),
            ("lid", lid),
            ("sm_lid", sm_lid),
            ("sm_sl", sm_sl),
        ] {
            fs::write(dir.join(file), format!("{text}\n")).unwrap();
        }
    }

    fn temp_root(test: &str) -> PathBuf {
        std::env::temp_dir().join(format!("ibcm-port-watch-{}-{test}", std::process::id()))
    }

    #[test]
    fn the_interval_variable_is_milliseconds_and_zero_turns_it_off() {
        assert_eq!(parse_interval(None), Some(DEFAULT_POLL_INTERVAL));
        assert_eq!(parse_interval(Some("0")), None);
        assert_eq!(
            parse_interval(Some(" 250 ")),
            Some(Duration::from_millis(250))
        );
        assert_eq!(parse_interval(Some("-1")), Some(DEFAULT_POLL_INTERVAL));
        assert_eq!(parse_interval(Some("1s")), Some(DEFAULT_POLL_INTERVAL));
    }

    #[test]
    fn a_ports_state_is_read_from_its_files() {
        let root = temp_root("read");
        write_port(&root, "4: ACTIVE", "0x3", "0x1", "0");
        assert_eq!(read_port_state(&root, "mlx5_0", 1), Some(ACTIVE));
        write_port(&root, "1: DOWN", "0x0", "0x0", "0");
        let down = read_port_state(&root, "mlx5_0", 1).unwrap();
        assert!(!down.active);
        assert_eq!((down.lid, down.sm_lid), (0, 0));
        assert_eq!(read_port_state(&root, "mlx5_0", 2), None, "no such port");
        write_port(&root, "ACTIVE", "0x3", "0x1", "0");
        assert_eq!(read_port_state(&root, "mlx5_0", 1), None, "no state number");
        write_port(&root, "4: ACTIVE", "0x3", "0x1", "sixteen");
        assert_eq!(read_port_state(&root, "mlx5_0", 1), None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn only_a_read_that_differs_is_a_change_and_a_failed_one_is_none() {
        let root = temp_root("change");
        write_port(&root, "4: ACTIVE", "0x3", "0x1", "0");
        let ports = LivePorts::new([(1, ACTIVE)]);
        assert_eq!(ports.refresh_all(), [], "no source yet: nothing read");
        ports.read_from(&root, "mlx5_0", Duration::from_secs(3600));
        assert_eq!(ports.refresh_all(), []);
        write_port(&root, "4: ACTIVE", "0x3", "0x5", "2");
        let change = ports.refresh_all();
        let moved = PortState {
            sm_lid: 5,
            sm_sl: 2,
            ..ACTIVE
        };
        assert_eq!(
            change,
            [Change {
                port_num: 1,
                old: ACTIVE,
                new: moved
            }]
        );
        assert_eq!(
            change[0].to_string(),
            "port 1: sm_lid 0x1 -> 0x5, sm_sl 0 -> 2"
        );
        assert_eq!(ports.state(1), Some(moved));
        fs::remove_file(root.join("mlx5_0/ports/1/lid")).unwrap();
        assert_eq!(ports.refresh_all(), []);
        assert_eq!(ports.state(1), Some(moved), "a failed read keeps the last");
        assert_eq!(ports.counts(1), (1, 1));
        assert_eq!(ports.refresh_if_stale(1), None, "read just now");
        fs::remove_dir_all(&root).unwrap();
    }
}
