//! `ibcmd`, the CM MAD switch daemon: owns the CM agent of each port of the
//! RDMA devices it serves and switches CM MADs between them and the
//! processes using libib_cm on this host (see docs/ibcmd.md, ibcmd(8)).
//!
//!     ibcmd [--socket PATH] [--mode OCTAL] [--group NAME|GID]
//!           [--timewait SECONDS] [DEVICE...]
//!     ibcmd --stats [--socket PATH]
//!
//! Without DEVICE it serves every device under /sys/class/infiniband. It
//! runs in the foreground until SIGTERM, SIGINT or SIGHUP, and logs on
//! stderr (`IBCM_LOG=info` shows each registration).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ib_cm::switch::proto::{MAX_MESSAGE, ToClient, ToDaemon};
use ib_cm::switch::{SeqPacket, Switch, SwitchConfig};
use ib_cm::transport::switch::socket_path;

struct Options {
    socket: PathBuf,
    mode: u32,
    group: Option<String>,
    timewait: Duration,
    stats: bool,
    devices: Vec<String>,
}

const USAGE: &str = "usage: ibcmd [--socket PATH] [--mode OCTAL] [--group NAME|GID] \
                     [--timewait SECONDS] [DEVICE...]\n       ibcmd --stats [--socket PATH]";

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        socket: socket_path(),
        mode: 0o660,
        group: None,
        timewait: SwitchConfig::default().timewait,
        stats: false,
        devices: Vec::new(),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--socket" => o.socket = PathBuf::from(value("--socket")?),
            "--mode" => {
                let v = value("--mode")?;
                o.mode = u32::from_str_radix(&v, 8).map_err(|_| format!("bad mode {v}"))?;
            }
            "--group" => o.group = Some(value("--group")?),
            "--timewait" => {
                let v = value("--timewait")?;
                let secs: f64 = v.parse().map_err(|_| format!("bad timewait {v}"))?;
                o.timewait = Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())?;
            }
            "--stats" => o.stats = true,
            "-h" | "--help" => return Err(String::new()),
            a if a.starts_with('-') => return Err(format!("unknown option {a}")),
            device => o.devices.push(device.to_owned()),
        }
    }
    Ok(o)
}

/// The GID of `group`: a number, or a name in /etc/group.
fn group_id(group: &str) -> Option<u32> {
    if let Ok(gid) = group.parse() {
        return Some(gid);
    }
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == group).then_some(())?;
        fields.nth(1)?.parse().ok()
    })
}

/// Every device under /sys/class/infiniband.
fn all_devices() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ib_cm::transport::sysfs::SYS_INFINIBAND)
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Binds the socket: its directory made if missing, a stale socket of a
/// dead daemon replaced, a live one refused; then its group and mode.
fn bind(o: &Options) -> Result<SeqPacket, String> {
    if let Some(dir) = o.socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    if o.socket.exists() {
        if SeqPacket::connect(&o.socket).is_ok() {
            return Err(format!("another ibcmd serves {}", o.socket.display()));
        }
        let _ = std::fs::remove_file(&o.socket);
    }
    let listener =
        SeqPacket::listen(&o.socket).map_err(|e| format!("{}: {e}", o.socket.display()))?;
    if let Some(group) = &o.group {
        let gid = group_id(group).ok_or(format!("no group {group}"))?;
        std::os::unix::fs::chown(&o.socket, None, Some(gid))
            .map_err(|e| format!("chgrp {}: {e}", o.socket.display()))?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&o.socket, std::fs::Permissions::from_mode(o.mode))
        .map_err(|e| format!("chmod {}: {e}", o.socket.display()))?;
    Ok(listener)
}

/// `--stats`: the running daemon's counters, one `name value` a line.
fn print_stats(socket: &Path) -> Result<(), String> {
    let conn = SeqPacket::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    conn.send(&ToDaemon::Stats { seq: 1 }.encode(), true)
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = conn.recv(&mut buf).map_err(|e| e.to_string())?;
    match ToClient::decode(&buf[..n.min(buf.len())]) {
        Ok(ToClient::Stats { counters, .. }) => {
            for (name, value) in counters {
                println!("{name} {value}");
            }
            Ok(())
        }
        _ => Err("unexpected answer".into()),
    }
}

fn run(o: Options) -> Result<(), String> {
    if o.stats {
        return print_stats(&o.socket);
    }
    // Before any thread starts: only the main thread takes these signals.
    ib_cm::switch::block_termination_signals();
    let switch = Switch::new(SwitchConfig {
        timewait: o.timewait,
        ..SwitchConfig::default()
    });
    let devices = if o.devices.is_empty() {
        all_devices()
    } else {
        o.devices.clone()
    };
    for name in &devices {
        match switch.add_rdma_device(name) {
            Ok(()) => eprintln!("ibcmd: serving {name}"),
            Err(e) => eprintln!("ibcmd: cannot serve {name}: {e:?}"),
        }
    }
    if !devices.iter().any(|d| switch.has_device(d)) {
        return Err("no device to serve".into());
    }
    let listener = bind(&o)?;
    eprintln!("ibcmd: listening on {}", o.socket.display());
    {
        let switch = switch.clone();
        std::thread::Builder::new()
            .name("ibcmd-accept".into())
            .spawn(move || switch.accept_loop(&listener))
            .map_err(|e| e.to_string())?;
    }
    let sig = ib_cm::switch::wait_for_termination();
    eprintln!("ibcmd: signal {sig}: stopping");
    // No new process finds the socket; connected ones see it close when
    // this process exits (they get -ENODEV from then on).
    let _ = std::fs::remove_file(&o.socket);
    switch.close();
    Ok(())
}

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
