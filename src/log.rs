//! `IBCM_LOG=error|warn|info|debug`: one line per event on stderr. The level
//! is read once; the default is `warn`. Nothing is formatted below the level.

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
    *LEVEL.get_or_init(|| match std::env::var("IBCM_LOG").as_deref() {
        Ok("error") => Level::Error,
        Ok("info") => Level::Info,
        Ok("debug") => Level::Debug,
        _ => Level::Warn,
    })
}

pub fn enabled(level: Level) -> bool {
    level <= max_level()
}

/// Writes one line: `ib_cm: <level>: <message>`.
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    let tag = match level {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "info",
        Level::Debug => "debug",
    };
    eprintln!("ib_cm: {tag}: {args}");
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
