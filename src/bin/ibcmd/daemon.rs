//! The daemon's start and run: the devices served, the socket, privileges
//! dropped, the accept thread, and the stop at SIGTERM, SIGINT or SIGHUP.

use ib_cm::switch::{Switch, SwitchConfig};

use crate::cli::Options;
use crate::privileges::{drop_privileges, user_ids_of};
use crate::socket::listening;
use crate::stats::print_stats;

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

pub(crate) fn run(o: Options) -> Result<(), String> {
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
