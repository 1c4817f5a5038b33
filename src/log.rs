//! `IBCM_LOG=error|warn|info|debug`: one line per event on stderr. The level
//! is read once (with `secure_getenv`); the default is `warn`. Nothing is
//! formatted below the level.
//!
//! Logging never fails and never panics: a line that cannot be written (stderr
//! closed, on a full disk, a broken pipe) is lost. Nothing logs while a lazy
//! static is being initialised (a panic there would poison it for good).

use std::io::Write;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// The level `IBCM_LOG` asks for. A value that names no level means `warn`
/// and says so in one line, written once the level is known (nothing logs
/// while it is being set).
///
/// Inlined: every traced state change and MAD asks (a dozen times per
/// connection), and once the level is known the answer is one load.
#[inline]
pub fn max_level() -> Level {
    match LEVEL.get() {
        Some(level) => *level,
        None => read_level(),
    }
}

static LEVEL: OnceLock<Level> = OnceLock::new();

impl Level {
    /// The level's name, as `IBCM_LOG` takes it and ib_cm(7) writes it; each
    /// line carries it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

#[cold]
fn read_level() -> Level {
    let value = crate::os::sys::secure_var_os(c"IBCM_LOG");
    let asked = value.as_deref().map(parse_level);
    let mut first = false;
    let level = *LEVEL.get_or_init(|| {
        first = true;
        asked.flatten().unwrap_or(Level::Warn)
    });
    if first && let (Some(value), Some(None)) = (&value, asked) {
        // Debug-quoted: an environment value is written escaped, and cut.
        write(
            Level::Warn,
            format_args!("IBCM_LOG={value:?} is none of error, warn, info, debug: using warn"),
        );
    }
    level
}

/// A level's name in any case (`DEBUG`, as `RUST_LOG` takes it), or
/// `warning` (the tag warnings carried until issue 31); `None` for anything
/// else (`""`: unset).
fn parse_level(value: &std::ffi::OsStr) -> Option<Level> {
    let value = value.to_str()?;
    [
        ("error", Level::Error),
        ("warn", Level::Warn),
        ("warning", Level::Warn),
        ("info", Level::Info),
        ("debug", Level::Debug),
        ("", Level::Warn),
    ]
    .into_iter()
    .find(|(name, _)| value.eq_ignore_ascii_case(name))
    .map(|(_, level)| level)
}

#[inline]
pub fn enabled(level: Level) -> bool {
    level <= max_level() || capture::active()
}

/// Writes one line, `ib_cm: <level>: <message>`, in one `write(2)` so lines
/// of different threads do not interleave; a failed write is ignored.
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    let mut line = LineBuf::new();
    format_line(&mut line, level.name(), args);
    let line = line.finish();
    if level <= max_level() {
        to_stderr(line);
    }
    if capture::active() {
        capture::offer(line);
    }
}

/// [`write()`] for lines a program can provoke in a loop (a refused call):
/// each `key` (the function refused) gets `BURST` lines at once, then one
/// per `REFILL` (10 a second). Lines held back are counted, and the next
/// line of the key that is written ends with how many: `[9990 suppressed]`.
pub fn write_limited(key: &'static str, level: Level, args: std::fmt::Arguments<'_>) {
    let now = std::time::Instant::now();
    let suppressed = {
        let mut buckets = BUCKETS.lock();
        let i = match buckets.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                buckets.push((key, Bucket::new(now)));
                buckets.len() - 1
            }
        };
        match buckets[i].1.admit(now) {
            Some(suppressed) => suppressed,
            None => return,
        }
    };
    if suppressed == 0 {
        write(level, args);
    } else {
        write(level, format_args!("{args} [{suppressed} suppressed]"));
    }
}

/// Lines of one key written at once before [`write_limited`] holds any back.
pub(crate) const BURST: u32 = 10;
/// How long [`write_limited`] takes to earn one line back.
pub(crate) const REFILL: std::time::Duration = std::time::Duration::from_millis(100);

/// One key's token bucket: few keys (the C API's functions), so a list.
static BUCKETS: parking_lot::Mutex<Vec<(&'static str, Bucket)>> =
    parking_lot::Mutex::new(Vec::new());

/// Every key starts afresh with a full bucket (tests that count lines).
#[cfg(test)]
pub fn reset_rate_limits() {
    BUCKETS.lock().clear();
}

/// A token bucket of [`BURST`] lines, one more per [`REFILL`].
#[derive(Debug)]
struct Bucket {
    tokens: u32,
    /// When the tokens were last counted: a part of a [`REFILL`] since is
    /// not lost.
    counted: std::time::Instant,
    /// Lines held back since the last one written.
    suppressed: u64,
}

impl Bucket {
    fn new(now: std::time::Instant) -> Self {
        Self {
            tokens: BURST,
            counted: now,
            suppressed: 0,
        }
    }

    /// Whether a line may be written at `now`: `Some(how many were held
    /// back before it)`, or `None` (held back, and counted).
    fn admit(&mut self, now: std::time::Instant) -> Option<u64> {
        let earned = now.saturating_duration_since(self.counted).as_nanos() / REFILL.as_nanos();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(BURST);
            self.counted = if self.tokens == BURST {
                now
            } else {
                self.counted + REFILL * earned
            };
        }
        if self.tokens == 0 {
            self.suppressed += 1;
            return None;
        }
        self.tokens -= 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Writes `line` to standard error without ever making the caller wait for
/// its reader: a regular file (or /dev/null) is written at once; a pipe, a
/// socket or a terminal, whose reader may stall (a supervisor, journald, a
/// terminal on ^S), gets the line through a bounded queue that one logger
/// thread writes out. The caller may hold an id lock or be the worker: a
/// stalled reader must stall nothing but the log. Lines beyond
/// `QUEUED_LINES`, or while no logger thread can be started, are lost.
fn to_stderr(line: &[u8]) {
    if crate::os::sys::stderr_never_blocks() {
        let _ = std::io::stderr().write_all(line);
        return;
    }
    let (queue, ready) = &*LOGGER;
    let mut q = queue.lock();
    if !q.started {
        // Started once; with every signal blocked, like the library's others.
        let spawned = std::thread::Builder::new()
            .name("ibcm-log".into())
            .spawn(|| {
                crate::os::sys::block_all_signals();
                drain_to_stderr();
            });
        if spawned.is_err() {
            return;
        }
        q.started = true;
    }
    if q.lines.len() < QUEUED_LINES {
        q.lines.push_back(line.to_vec());
        ready.notify_one();
    }
}

/// Lines waiting for the logger thread at most: 1 MiB or so of log.
const QUEUED_LINES: usize = 4096;

#[derive(Default)]
struct Logger {
    lines: std::collections::VecDeque<Vec<u8>>,
    started: bool,
}

static LOGGER: std::sync::LazyLock<(parking_lot::Mutex<Logger>, parking_lot::Condvar)> =
    std::sync::LazyLock::new(Default::default);

/// The logger thread: writes queued lines, blocking only itself.
fn drain_to_stderr() {
    let (queue, ready) = &*LOGGER;
    loop {
        let line = {
            let mut q = queue.lock();
            loop {
                if let Some(line) = q.lines.pop_front() {
                    break line;
                }
                ready.wait(&mut q);
            }
        };
        let _ = std::io::stderr().write_all(&line);
    }
}

/// `write` to any writer (for the tests of a failing one).
#[cfg(test)]
fn write_line(out: &mut impl Write, tag: &str, args: std::fmt::Arguments<'_>) {
    let mut line = LineBuf::new();
    format_line(&mut line, tag, args);
    let _ = out.write_all(line.finish());
}

fn format_line(line: &mut LineBuf, tag: &str, args: std::fmt::Arguments<'_>) {
    // A `LineBuf` never fails a write: it truncates.
    let _ = std::fmt::write(line, format_args!("ib_cm: {tag}: {args}"));
}

/// The longest line written; longer ones are cut, ending in `...`.
const MAX_LINE: usize = 512;

/// A line formatted on the stack: logging happens under id locks, where
/// allocating is best avoided.
struct LineBuf {
    buf: [u8; MAX_LINE],
    len: usize,
    truncated: bool,
}

impl LineBuf {
    fn new() -> Self {
        Self {
            buf: [0; MAX_LINE],
            len: 0,
            truncated: false,
        }
    }

    /// The line with its newline (and `...` before it if it was cut).
    fn finish(&mut self) -> &[u8] {
        const CUT: &[u8] = b"...\n";
        if self.truncated {
            self.len = self.len.min(MAX_LINE - CUT.len());
            // Never half a character: back off its continuation bytes.
            while self.len > 0 && self.buf[self.len] & 0xC0 == 0x80 {
                self.len -= 1;
            }
            self.buf[self.len..self.len + CUT.len()].copy_from_slice(CUT);
            self.len += CUT.len();
        } else {
            // `write_str` keeps one byte free for this.
            self.buf[self.len] = b'\n';
            self.len += 1;
        }
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for LineBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = MAX_LINE - 1 - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        self.truncated |= n < s.len();
        Ok(())
    }
}

/// Unit tests see every line, at every level, of the devices they name,
/// while their [`capture::Capture`] lives. Nothing of this is compiled into
/// the library.
#[cfg(test)]
pub mod capture {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use parking_lot::Mutex;

    static ACTIVE: AtomicUsize = AtomicUsize::new(0);
    /// The devices captured, and their lines. Only those: the engine's tests
    /// run in parallel on one worker thread, which must not wait on a long
    /// list being searched.
    static STATE: Mutex<(Vec<String>, Vec<String>)> = Mutex::new((Vec::new(), Vec::new()));

    pub fn active() -> bool {
        ACTIVE.load(Ordering::Relaxed) > 0
    }

    /// Keeps `line` if it is about a captured device (`loop3:1`, `loop3 event`,
    /// `on loop3`).
    pub(super) fn offer(line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let mut state = STATE.lock();
        let (devices, lines) = &mut *state;
        let of = |d: &String| {
            let name = d.as_str();
            line.contains(&format!(" {name}:"))
                || line.contains(&format!(" {name} "))
                || line.ends_with(&format!(" {name}\n"))
        };
        if devices.iter().any(of) {
            lines.push(line.into_owned());
        }
    }

    /// Captures the lines of some devices until dropped.
    pub struct Capture(Vec<String>);

    impl Capture {
        pub fn of(devices: &[&str]) -> Self {
            let devices: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
            STATE.lock().0.extend(devices.iter().cloned());
            ACTIVE.fetch_add(1, Ordering::Relaxed);
            Self(devices)
        }

        /// The lines captured so far that hold all of `parts`.
        pub fn lines_with(&self, parts: &[&str]) -> Vec<String> {
            let state = STATE.lock();
            let all = |l: &&String| parts.iter().all(|p| l.contains(p));
            state.1.iter().filter(all).cloned().collect()
        }
    }

    impl Drop for Capture {
        fn drop(&mut self) {
            ACTIVE.fetch_sub(1, Ordering::Relaxed);
            let mut state = STATE.lock();
            let (devices, lines) = &mut *state;
            for d in &self.0 {
                if let Some(i) = devices.iter().position(|x| x == d) {
                    devices.swap_remove(i);
                }
            }
            if devices.is_empty() {
                lines.clear();
            }
        }
    }
}

#[cfg(not(test))]
mod capture {
    /// Always false outside unit tests: the check compiles away.
    #[inline(always)]
    pub fn active() -> bool {
        false
    }

    pub(super) fn offer(_: &[u8]) {}
}

/// `ibcm_log!(Warn, "…", args)`.
#[macro_export]
macro_rules! ibcm_log {
    ($level:ident, $($arg:tt)*) => {
        if $crate::log::enabled($crate::log::Level::$level) {
            $crate::log::write($crate::log::Level::$level, format_args!($($arg)*));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer like stderr on a full disk.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
    }

    #[test]
    fn a_failed_log_write_is_ignored() {
        write_line(&mut Full, "error", format_args!("lost {}", 1));
        let mut out = Vec::new();
        write_line(&mut out, "warning", format_args!("kept {}", 2));
        assert_eq!(out, b"ib_cm: warning: kept 2\n");
    }

    #[test]
    fn ibcm_log_takes_any_case_and_the_warning_tag() {
        use std::ffi::OsStr;
        assert_eq!(parse_level(OsStr::new("DEBUG")), Some(Level::Debug));
        assert_eq!(parse_level(OsStr::new("Info")), Some(Level::Info));
        assert_eq!(parse_level(OsStr::new("warning")), Some(Level::Warn));
        assert_eq!(parse_level(OsStr::new("error")), Some(Level::Error));
        assert_eq!(parse_level(OsStr::new("")), Some(Level::Warn));
        assert_eq!(parse_level(OsStr::new("dbg")), None);
        assert_eq!(parse_level(OsStr::new("4")), None);
    }

    /// Issue 31, point 3: `IBCM_LOG=bogus` is warned about at the level the
    /// pages call `warn`, with that name (it said `warning`). The level is
    /// read once per process, so a child process of this test binary reads
    /// it (`the_level_read_by_a_child`), its stderr a file.
    #[test]
    fn an_ibcm_log_value_naming_no_level_warns_once_naming_warn() {
        let path = std::env::temp_dir().join(format!("ibcm-log-level-{}", std::process::id()));
        let stderr = std::fs::File::create(&path).unwrap();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "log::tests::the_level_read_by_a_child",
                "--test-threads=1",
            ])
            .env("IBCM_LOG", "bogus")
            .env("IBCM_LOG_TEST_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .status()
            .unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(status.success(), "the child failed: {written}");
        assert_eq!(
            written,
            "ib_cm: warn: IBCM_LOG=\"bogus\" is none of error, warn, info, debug: using warn\n"
        );
    }

    /// Only in the child of the test above: the level (warn), read as the
    /// library reads it.
    #[test]
    fn the_level_read_by_a_child() {
        if std::env::var_os("IBCM_LOG_TEST_CHILD").is_some() {
            assert_eq!(max_level(), Level::Warn);
            assert_eq!(max_level(), Level::Warn); // and warned only once
        }
    }

    /// ib_cm(7) names the levels `error`, `warn`, `info`, `debug`: each line
    /// carries its level by that name, which `IBCM_LOG` takes back.
    #[test]
    fn each_line_is_tagged_with_the_name_ibcm_log_takes() {
        use std::ffi::OsStr;
        let levels = [Level::Error, Level::Warn, Level::Info, Level::Debug];
        let names: Vec<&str> = levels.iter().map(|l| l.name()).collect();
        assert_eq!(names, ["error", "warn", "info", "debug"]);
        for level in levels {
            assert_eq!(parse_level(OsStr::new(level.name())), Some(level));
        }
    }

    #[test]
    fn a_line_cut_in_a_character_stays_utf8() {
        // "é" is two bytes: some cut lands between them, at either place.
        for pad in 0..4 {
            let mut out = Vec::new();
            let text = format!("{}{}", "x".repeat(pad), "é".repeat(400));
            write_line(&mut out, "info", format_args!("{text}"));
            assert!(out.ends_with(b"...\n"), "pad {pad}: not cut");
            assert!(
                std::str::from_utf8(&out).is_ok(),
                "pad {pad}: the cut split a character"
            );
        }
    }

    #[test]
    fn refusals_rate_limited_a_bucket_lets_a_burst_then_ten_a_second() {
        let t0 = std::time::Instant::now();
        let mut b = Bucket::new(t0);
        let admitted = (0..10_000).filter(|_| b.admit(t0).is_some()).count();
        assert_eq!(admitted, BURST as usize);
        // 250 ms later: two lines earned (the half is kept for the third),
        // the first says how many were held back.
        let later = t0 + REFILL * 5 / 2;
        assert_eq!(b.admit(later), Some(10_000 - u64::from(BURST)));
        assert_eq!(b.admit(later), Some(0));
        assert_eq!(b.admit(later), None);
        assert_eq!(b.admit(t0 + REFILL * 3), Some(1));
        // An hour of quiet earns a burst, not more.
        let quiet = t0 + std::time::Duration::from_secs(3600);
        let admitted = (0..100).filter(|_| b.admit(quiet).is_some()).count();
        assert_eq!(admitted, BURST as usize);
    }

    #[test]
    fn a_long_line_is_cut_and_still_ends_the_line() {
        let mut out = Vec::new();
        let long = "x".repeat(2 * MAX_LINE);
        write_line(&mut out, "info", format_args!("{long}"));
        assert_eq!(out.len(), MAX_LINE);
        assert!(out.starts_with(b"ib_cm: info: xxx"));
        assert!(out.ends_with(b"xxx...\n"));

        let mut out = Vec::new();
        let fits = "y".repeat(MAX_LINE - "ib_cm: info: ".len() - 1);
        write_line(&mut out, "info", format_args!("{fits}"));
        assert_eq!(out.len(), MAX_LINE);
        assert!(out.ends_with(b"yyy\n"));
    }
}
