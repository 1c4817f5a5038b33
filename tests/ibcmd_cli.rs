//! `ibcmd`'s command line run as a process (issue 30).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ib_cm::switch::SeqPacket;

/// `ibcmd --stats` (`print_stats`) gives up on a daemon that never answers,
/// as the library does after 10 s (`ANSWER_TIMEOUT`): waiting with no
/// timeout against a daemon that does not accept (its accept loop gone or
/// sleeping on EMFILE, stopped, wedged), the tool an administrator runs to
/// look at it would hang for ever, and so would every script that runs it
/// (ibfabric.privs, daemon_faults.sh).
#[test]
fn ibcmd_stats_gives_up_on_a_daemon_that_never_answers() {
    let dir = std::env::temp_dir().join(format!("ibcmd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wedged.sock");
    let _ = std::fs::remove_file(&path);
    // A daemon's socket that nobody accepts on: the connection waits in its
    // backlog.
    let _listener = SeqPacket::listen(&path).unwrap();
    let mut stats = Command::new(env!("CARGO_BIN_EXE_ibcmd"))
        .args(["--stats", "--socket"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let limit = Duration::from_secs(30);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = stats.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if status.is_none() {
        let _ = stats.kill();
        let _ = stats.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    let status = status.unwrap_or_else(|| {
        panic!("ibcmd --stats still waits after {limit:?} for a daemon that never answers")
    });
    assert!(!status.success(), "no answer is not a success");
}
