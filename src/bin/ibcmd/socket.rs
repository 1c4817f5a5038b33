//! The daemon's listening socket: the one systemd passes (socket
//! activation), else bound at `--socket` with its group and mode.

use std::path::PathBuf;

use ib_cm::switch::SeqPacket;

use crate::cli::Options;

/// The socket's mode without `--mode`: the owner and the group may connect.
const DEFAULT_MODE: u32 = 0o660;

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

/// The listening socket: the one systemd passed (its socket unit's: set up,
/// and removed, by systemd), else bound here at `--socket`, to be removed
/// at exit.
pub(crate) struct Listening {
    pub(crate) socket: SeqPacket,
    pub(crate) path: PathBuf,
    pub(crate) bound_here: bool,
}

pub(crate) fn listening(
    o: &Options,
    inherited: Option<std::os::fd::OwnedFd>,
) -> Result<Listening, String> {
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
