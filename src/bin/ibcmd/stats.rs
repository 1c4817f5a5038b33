//! `ibcmd --stats`: the running daemon's counters, asked for on its socket.

use std::path::Path;
use std::time::Duration;

use ib_cm::switch::SeqPacket;
use ib_cm::switch::proto::{MAX_MESSAGE, ToClient, ToDaemon};

/// `--stats`: the running daemon's counters, one `name value` a line.
pub(crate) fn print_stats(socket: &Path) -> Result<(), String> {
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
