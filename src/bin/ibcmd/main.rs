//! `ibcmd`, the CM MAD switch daemon: owns the CM agent of each port of the
//! RDMA devices it serves and switches CM MADs between them and the
//! processes using libib_cm on this host (see docs/ibcmd.md, ibcmd(8)).
//!
//!     ibcmd [--socket PATH] [--mode OCTAL] [--group NAME|GID]
//!           [--user NAME|UID] [--timewait SECONDS] [--path-cache-ttl MS]
//!           [DEVICE...]
//!     ibcmd --stats [--socket PATH]
//!
//! Without DEVICE it serves every device under /sys/class/infiniband. It
//! runs in the foreground until SIGTERM, SIGINT or SIGHUP, and logs on
//! stderr (`IBCM_LOG=info` shows each registration). With `--user` it opens
//! the umad devices and its socket (or takes the one systemd passes, by the
//! sd_listen_fds protocol) as root, then runs as that user, without
//! capabilities.

mod cli;
mod daemon;
mod privileges;
mod socket;
mod stats;

use std::process::ExitCode;

use cli::{USAGE, parse};
use daemon::run;

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ibcmd: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ibcmd: {e}");
            ExitCode::FAILURE
        }
    }
}
