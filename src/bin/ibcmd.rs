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

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ib_cm::switch::proto::{MAX_MESSAGE, ToClient, ToDaemon};
use ib_cm::switch::{Quotas, SeqPacket, Switch, SwitchConfig};
use ib_cm::transport::switch::socket_path;

struct Options {
    socket: PathBuf,
    /// `--mode`; 0660 when not given.
    mode: Option<u32>,
    group: Option<String>,
    /// `--user`: whom the daemon becomes once its files are open.
    user: Option<String>,
    timewait: Duration,
    /// `--quota NAME=N`: what one user may make the daemon hold.
    quotas: Quotas,
    /// `--path-cache-ttl MS`: how long the host's path cache keeps an SA
    /// answer (0: no cache); else `IBCM_PATH_CACHE_TTL_MS` or its default.
    path_cache_ttl: Option<Duration>,
    stats: bool,
    devices: Vec<String>,
}

const USAGE: &str = "usage: ibcmd [--socket PATH] [--mode OCTAL] [--group NAME|GID] \
                     [--user NAME|UID] [--timewait SECONDS] [--quota NAME=N]... \
                     [--path-cache-ttl MS] [DEVICE...]\n       \
                     ibcmd --stats [--socket PATH]";

/// The socket's mode without `--mode`: the owner and the group may connect.
const DEFAULT_MODE: u32 = 0o660;

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        socket: socket_path(),
        mode: None,
        group: None,
        user: None,
        timewait: SwitchConfig::default().timewait,
        quotas: Quotas::default(),
        path_cache_ttl: None,
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
                o.mode = Some(u32::from_str_radix(&v, 8).map_err(|_| format!("bad mode {v}"))?);
            }
            "--group" => o.group = Some(value("--group")?),
            "--user" => o.user = Some(value("--user")?),
            "--timewait" => {
                let v = value("--timewait")?;
                let secs: f64 = v.parse().map_err(|_| format!("bad timewait {v}"))?;
                o.timewait = Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())?;
            }
            "--quota" => set_quota(&mut o.quotas, &value("--quota")?)?,
            "--path-cache-ttl" => {
                let v = value("--path-cache-ttl")?;
                let ms: u32 = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("--path-cache-ttl {v}: 0 to 4294967295 ms"))?;
                o.path_cache_ttl = Some(Duration::from_millis(u64::from(ms)));
            }
            "--stats" => o.stats = true,
            "-h" | "--help" => return Err(String::new()),
            a if a.starts_with('-') => return Err(format!("unknown option {a}")),
            device => o.devices.push(device.to_owned()),
        }
    }
    Ok(o)
}

/// `NAME=N` of `--quota`: one of the per-user quotas (docs/ibcmd.md,
/// "Quotas"); `slices=0` means a quarter of the slices.
fn set_quota(quotas: &mut Quotas, setting: &str) -> Result<(), String> {
    let (name, n) = setting
        .split_once('=')
        .ok_or(format!("--quota {setting}: NAME=N expected"))?;
    let n: usize = n
        .parse()
        .map_err(|_| format!("--quota {setting}: {n} is not a count"))?;
    if n == 0 && name != "slices" {
        return Err(format!("--quota {setting}: a user needs at least one"));
    }
    let field = match name {
        "connections" => &mut quotas.connections,
        "registrations" => &mut quotas.registrations,
        "slices" => &mut quotas.slices,
        "listens" => &mut quotas.listens,
        _ => {
            return Err(format!(
                "--quota {setting}: no quota {name} (connections, registrations, slices, listens)"
            ));
        }
    };
    *field = n;
    Ok(())
}

/// Where the kernel caps a socket's send buffer without CAP_NET_ADMIN.
const WMEM_MAX: &str = "/proc/sys/net/core/wmem_max";

/// Raises `net.core.wmem_max` to the buffer the daemon asks for towards
/// each process, while it may (root, before `--user`), never lowers it:
/// the daemon no longer forces its buffers past it (a tenant could pin
/// them), and a 208 KiB one (some 160 MADs) loses a burst of REQs to one
/// process. Said when it changes the host; the shipped unit does it before
/// the sandbox (which makes /proc/sys read-only), so failing is quiet.
fn raise_wmem_max() {
    let want = ib_cm::switch::CLIENT_SEND_BUFFER;
    let Some(now) = std::fs::read_to_string(WMEM_MAX)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    else {
        return;
    };
    if now < want && std::fs::write(WMEM_MAX, want.to_string()).is_ok() {
        eprintln!(
            "ibcmd: raised net.core.wmem_max from {now} to {want} (each process's socket buffer)"
        );
    }
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

/// A user the daemon may become: its UID and the GID of its passwd entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UserIds {
    uid: u32,
    gid: u32,
}

/// `user` (a name, or a UID if it is a number) in `passwd` (the text of
/// /etc/passwd): its UID and primary GID.
fn find_user(passwd: &str, user: &str) -> Option<UserIds> {
    let by_uid = user.parse::<u32>().ok();
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let uid = fields.nth(1)?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        let found = by_uid.map_or(name == user, |wanted| uid == wanted);
        found.then_some(UserIds { uid, gid })
    })
}

/// `--user`'s IDs from /etc/passwd (where systemd-sysusers puts the
/// shipped `ibcmd`); root is refused: it would keep every privilege.
fn user_ids_of(user: &str) -> Result<UserIds, String> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
    let ids =
        find_user(&passwd, user).ok_or(format!("--user {user}: no such user in /etc/passwd"))?;
    if ids.uid == 0 {
        return Err(format!(
            "--user {user}: that is root, which keeps every privilege"
        ));
    }
    Ok(ids)
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
    let mode = o.mode.unwrap_or(DEFAULT_MODE);
    std::fs::set_permissions(&o.socket, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", o.socket.display()))?;
    Ok(listener)
}

/// `--stats`: the running daemon's counters, one `name value` a line.
fn print_stats(socket: &Path) -> Result<(), String> {
    // A daemon that never accepts or answers must not hang the caller (a
    // script): 10 s, as the library waits.
    let patience = Duration::from_secs(10);
    let conn = SeqPacket::connect_within(socket, Some(patience))
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    conn.set_recv_timeout(Some(patience))
        .map_err(|e| e.to_string())?;
    conn.send(&ToDaemon::Stats { seq: 1 }.encode(), true)
        .map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = conn.recv(&mut buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            format!("{}: no answer within {patience:?}", socket.display())
        }
        _ => e.to_string(),
    })?;
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

/// The listening socket: the one systemd passed (its socket unit's: set up,
/// and removed, by systemd), else bound here at `--socket`, to be removed
/// at exit.
struct Listening {
    socket: SeqPacket,
    path: PathBuf,
    bound_here: bool,
}

fn listening(o: &Options, inherited: Option<std::os::fd::OwnedFd>) -> Result<Listening, String> {
    let Some(fd) = inherited else {
        return Ok(Listening {
            socket: bind(o)?,
            path: o.socket.clone(),
            bound_here: true,
        });
    };
    if o.mode.is_some() || o.group.is_some() {
        eprintln!(
            "ibcmd: --mode and --group ignored: the socket is systemd's (its unit sets them)"
        );
    }
    let path = std::os::fd::AsFd::as_fd(&fd);
    let path = ib_cm::switch::unix_socket_path(path).unwrap_or_else(|| "descriptor 3".into());
    Ok(Listening {
        socket: SeqPacket::from(fd),
        path,
        bound_here: false,
    })
}

/// What `status` (one thread's /proc/self/task/TID/status) shows left of
/// root in a process that became `ids`: a real, effective, saved or
/// filesystem UID or GID not the user's, a capability in the permitted,
/// effective or ambient set, no `no_new_privs`. Empty when nothing is.
fn privileges_left(status: &str, ids: UserIds) -> Vec<String> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let all_are = |name: &str, id: u32| {
        field(name).is_some_and(|v| {
            let mut ids = v.split_whitespace();
            ids.clone().count() == 4 && ids.all(|x| x.parse() == Ok(id))
        })
    };
    let mut left = Vec::new();
    if !all_are("Uid", ids.uid) {
        left.push(format!("Uid {}", field("Uid").unwrap_or("unknown")));
    }
    if !all_are("Gid", ids.gid) {
        left.push(format!("Gid {}", field("Gid").unwrap_or("unknown")));
    }
    for caps in ["CapPrm", "CapEff", "CapAmb"] {
        let empty = field(caps).and_then(|v| u64::from_str_radix(v, 16).ok()) == Some(0);
        if !empty {
            left.push(format!("{caps} {}", field(caps).unwrap_or("unknown")));
        }
    }
    if field("NoNewPrivs") != Some("1") {
        left.push(format!(
            "NoNewPrivs {}",
            field("NoNewPrivs").unwrap_or("unknown")
        ));
    }
    left
}

/// Runs as `ids` for good: no supplementary groups, the user's GID, its UID
/// (each for every thread), unless the process already is that user; then
/// checks that root cannot come back: `setuid(0)` fails, and every thread's
/// status shows the user's IDs, no capability and `no_new_privs`.
fn drop_privileges(user: &str, ids: UserIds) -> Result<(), String> {
    let who = format!("user {user} (uid {}, gid {})", ids.uid, ids.gid);
    let already =
        ib_cm::switch::user_ids() == [ids.uid; 3] && ib_cm::switch::group_ids() == [ids.gid; 3];
    if !already {
        ib_cm::switch::become_user(ids.uid, ids.gid).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                "; only root can change user"
            } else {
                ""
            };
            format!("cannot become {who}: {e}{hint}")
        })?;
        let groups = ib_cm::switch::supplementary_groups().map_err(|e| e.to_string())?;
        if !groups.iter().all(|&g| g == ids.gid) {
            return Err(format!("became {who} but kept the groups {groups:?}"));
        }
    }
    if ib_cm::switch::can_become_root() {
        return Err(format!("became {who} but setuid(0) succeeds"));
    }
    let tasks =
        std::fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))?;
    for task in tasks {
        let path = task.map_err(|e| e.to_string())?.path().join("status");
        let status =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let left = privileges_left(&status, ids);
        if !left.is_empty() {
            let thread = status.lines().find_map(|l| l.strip_prefix("Name:"));
            return Err(format!(
                "became {who} but {} (thread {}) shows {}",
                path.display(),
                thread.unwrap_or("unknown").trim(),
                left.join(", ")
            ));
        }
    }
    Ok(())
}

fn run(o: Options) -> Result<(), String> {
    if o.stats {
        return print_stats(&o.socket);
    }
    let user = match &o.user {
        Some(name) => Some((name.as_str(), user_ids_of(name)?)),
        None => None,
    };
    // Before any thread starts: only the main thread takes these signals.
    ib_cm::switch::block_termination_signals();
    if user.is_some() {
        ib_cm::switch::set_no_new_privs_in_every_thread()
            .map_err(|e| format!("cannot set no_new_privs: {e}"))?;
    }
    raise_wmem_max();
    let inherited = ib_cm::switch::inherited_seqpacket_listener()
        .map_err(|e| format!("the socket passed by systemd (LISTEN_FDS): {e}"))?;
    // The library's TTL and variable, unless the command line says.
    let mut path_cache = ib_cm::sa::cache::Config::from_env();
    if let Some(ttl) = o.path_cache_ttl {
        path_cache.ttl = ttl;
    }
    let switch = Switch::new(SwitchConfig {
        timewait: o.timewait,
        quotas: o.quotas,
        path_cache,
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
    let listener = listening(&o, inherited)?;
    // Every file the daemon needs is open: the umad devices (it never
    // reopens one), its socket. What is left (reading sysfs at start was
    // the last of it, pidfd_open, SO_PEERCRED) needs no privilege.
    match user {
        Some((name, ids)) => {
            drop_privileges(name, ids)?;
            eprintln!(
                "ibcmd: running as user {name} (uid {}, gid {}), no capabilities",
                ids.uid, ids.gid
            );
        }
        None if ib_cm::switch::user_ids()[1] == 0 => {
            eprintln!(
                "ibcmd: warning: running as root with its capabilities (--user drops them once the devices and the socket are open)"
            );
        }
        None => {}
    }
    eprintln!(
        "ibcmd: listening on {}{}",
        listener.path.display(),
        if listener.bound_here {
            ""
        } else {
            " (passed by systemd)"
        }
    );
    {
        let switch = switch.clone();
        let socket = listener.socket;
        std::thread::Builder::new()
            .name("ibcmd-accept".into())
            .spawn(move || switch.accept_loop(&socket))
            .map_err(|e| e.to_string())?;
    }
    let sig = ib_cm::switch::wait_for_termination();
    eprintln!("ibcmd: signal {sig}: stopping");
    // No new process finds the socket; connected ones see it close when
    // this process exits (they get -ENODEV from then on). A socket systemd
    // passed stays: its unit removes it. After --user the directory may
    // not let this process remove it either: said nowhere, since the next
    // ibcmd replaces a socket nobody listens on, and a library that finds
    // one (ECONNREFUSED) does as without a socket.
    if listener.bound_here {
        let _ = std::fs::remove_file(&listener.path);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Options, String> {
        parse(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn user_is_an_option_with_a_value() {
        let o = parsed("--user ibcmd --group ibcm mlx5_0").unwrap();
        assert_eq!(o.user.as_deref(), Some("ibcmd"));
        assert_eq!(
            o.group.as_deref(),
            Some("ibcm"),
            "--group stays the socket's"
        );
        assert_eq!(o.devices, ["mlx5_0"]);
        assert_eq!(
            parsed("--user 65534").unwrap().user.as_deref(),
            Some("65534")
        );
        assert_eq!(parsed("--user").err().unwrap(), "--user needs a value");
        assert_eq!(parsed("mlx5_0").unwrap().user, None, "root unless asked");
    }

    #[test]
    fn quotas_are_set_one_by_one_and_refused_when_meaningless() {
        let o = parsed("--quota connections=8 --quota listens=100 --quota slices=0").unwrap();
        let want = Quotas {
            connections: 8,
            listens: 100,
            slices: 0,
            ..Quotas::default()
        };
        assert_eq!(o.quotas, want);
        assert_eq!(parsed("rxe0").unwrap().quotas, Quotas::default());
        for bad in [
            "--quota listens",
            "--quota listens=-1",
            "--quota listens=0",
            "--quota threads=4",
            "--quota",
        ] {
            assert!(parsed(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_existing_options_keep_their_meaning() {
        let o = parsed("--socket /tmp/s --mode 0600 --group 7 --timewait 1.5 a b").unwrap();
        assert_eq!(o.socket, PathBuf::from("/tmp/s"));
        assert_eq!(o.mode, Some(0o600));
        assert_eq!(o.group.as_deref(), Some("7"));
        assert_eq!(o.timewait, Duration::from_millis(1500));
        assert_eq!(o.devices, ["a", "b"]);
        assert!(!o.stats);
        assert_eq!(parsed("").unwrap().mode, None, "0660 when bound");
        assert!(parsed("--stats --socket /tmp/s").unwrap().stats);
        assert_eq!(parsed("--mode 9").err().unwrap(), "bad mode 9");
        assert_eq!(parsed("--users x").err().unwrap(), "unknown option --users");
    }

    #[test]
    fn the_path_cache_ttl_is_milliseconds_and_0_turns_it_off() {
        assert_eq!(parsed("").unwrap().path_cache_ttl, None, "the default");
        let ttl = |line| parsed(line).unwrap().path_cache_ttl;
        assert_eq!(
            ttl("--path-cache-ttl 1500"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(ttl("--path-cache-ttl 0"), Some(Duration::ZERO));
        for bad in [
            "--path-cache-ttl",
            "--path-cache-ttl -1",
            "--path-cache-ttl 5m",
        ] {
            assert!(parsed(bad).is_err(), "{bad} accepted");
        }
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                          broken line\n\
                          ibcmd:x:998:997:CM MAD switch:/:/usr/sbin/nologin\n\
                          nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

    #[test]
    fn a_user_is_found_by_name_or_uid_with_its_primary_group() {
        let ibcmd = Some(UserIds { uid: 998, gid: 997 });
        assert_eq!(find_user(PASSWD, "ibcmd"), ibcmd);
        assert_eq!(find_user(PASSWD, "998"), ibcmd);
        assert_eq!(find_user(PASSWD, "65534").map(|u| u.gid), Some(65534));
        assert_eq!(find_user(PASSWD, "ibcm"), None, "a prefix is not a name");
        assert_eq!(find_user(PASSWD, "997"), None, "a GID is not a UID");
        assert_eq!(find_user(PASSWD, "broken line"), None);
    }

    #[test]
    fn root_is_not_a_user_to_drop_to() {
        assert!(user_ids_of("root").unwrap_err().contains("root"));
        assert!(user_ids_of("0").unwrap_err().contains("root"));
        assert!(
            user_ids_of("surely-no-such-user")
                .unwrap_err()
                .contains("no such user")
        );
    }

    /// The lines of /proc/PID/status the check reads, as Linux writes them.
    fn status(uid: &str, gid: &str, cap_eff: &str, no_new_privs: &str) -> String {
        format!(
            "Name:\tibcmd\nUid:\t{uid}\nGid:\t{gid}\nGroups:\t\n\
             CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
             CapEff:\t{cap_eff}\nCapBnd:\t000001ffffffffff\n\
             CapAmb:\t0000000000000000\nNoNewPrivs:\t{no_new_privs}\n"
        )
    }

    #[test]
    fn privileges_left_names_what_is_left_of_root() {
        let ids = UserIds {
            uid: 65534,
            gid: 65534,
        };
        let all = "65534\t65534\t65534\t65534";
        let none = "0000000000000000";
        assert!(privileges_left(&status(all, all, none, "1"), ids).is_empty());
        // A saved UID of 0 could be switched back to.
        let saved_root = "65534\t65534\t0\t65534";
        assert_eq!(
            privileges_left(&status(saved_root, all, none, "1"), ids),
            [format!("Uid {saved_root}")]
        );
        assert_eq!(
            privileges_left(&status(all, "0\t0\t0\t0", none, "1"), ids),
            ["Gid 0\t0\t0\t0"]
        );
        assert_eq!(
            privileges_left(&status(all, all, "0000000000000400", "1"), ids),
            ["CapEff 0000000000000400"]
        );
        assert_eq!(
            privileges_left(&status(all, all, none, "0"), ids),
            ["NoNewPrivs 0"]
        );
        // A field missing (another kernel's format) is not taken as empty.
        assert_eq!(
            privileges_left("Uid:\t1\t1\t1\t1\n", UserIds { uid: 1, gid: 1 }),
            [
                "Gid unknown",
                "CapPrm unknown",
                "CapEff unknown",
                "CapAmb unknown",
                "NoNewPrivs unknown"
            ]
        );
    }
}
