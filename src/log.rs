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

/// The level `IBCM_LOG` asks for.
pub fn max_level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        match crate::ffi::sys::secure_var_os(c"IBCM_LOG")
            .as_deref()
            .and_then(|v| v.to_str())
        {
            Some("error") => Level::Error,
            Some("info") => Level::Info,
            Some("debug") => Level::Debug,
            _ => Level::Warn,
        }
    })
}

pub fn enabled(level: Level) -> bool {
    level <= max_level()
}

/// Writes one line, `ib_cm: <level>: <message>`, in one `write(2)` so lines
/// of different threads do not interleave; a failed write is ignored.
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    let tag = match level {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "info",
        Level::Debug => "debug",
    };
    write_line(&mut std::io::stderr(), tag, args);
}

fn write_line(out: &mut impl Write, tag: &str, args: std::fmt::Arguments<'_>) {
    let mut line = LineBuf::new();
    // A `LineBuf` never fails a write: it truncates.
    let _ = std::fmt::write(&mut line, format_args!("ib_cm: {tag}: {args}"));
    let _ = out.write_all(line.finish());
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
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        self.truncated |= n < s.len();
        Ok(())
    }
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
    fn hardening_06_a_failed_log_write_is_ignored() {
        write_line(&mut Full, "error", format_args!("lost {}", 1));
        let mut out = Vec::new();
        write_line(&mut out, "warning", format_args!("kept {}", 2));
        assert_eq!(out, b"ib_cm: warning: kept 2\n");
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
