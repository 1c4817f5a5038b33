//! `ibcmd`'s command line: its options, their parsing (`--quota NAME=N`
//! included) and the usage text.

use std::path::PathBuf;
use std::time::Duration;

use ib_cm::switch::{Quotas, SwitchConfig};
use ib_cm::transport::switch::socket_path;

/// What the command line asks for.
pub(crate) struct Options {
    pub(crate) socket: PathBuf,
    /// `--mode`; 0660 when not given.
    pub(crate) mode: Option<u32>,
    pub(crate) group: Option<String>,
    /// `--user`: whom the daemon becomes once its files are open.
    pub(crate) user: Option<String>,
    pub(crate) timewait: Duration,
    /// `--quota NAME=N`: what one user may make the daemon hold.
    pub(crate) quotas: Quotas,
    /// `--path-cache-ttl MS`: how long the host's path cache keeps an SA
    /// answer (0: no cache); else `IBCM_PATH_CACHE_TTL_MS` or its default.
    pub(crate) path_cache_ttl: Option<Duration>,
    pub(crate) stats: bool,
    pub(crate) devices: Vec<String>,
}

pub(crate) const USAGE: &str = "usage: ibcmd [--socket PATH] [--mode OCTAL] [--group NAME|GID] \
                     [--user NAME|UID] [--timewait SECONDS] [--quota NAME=N]... \
                     [--path-cache-ttl MS] [DEVICE...]\n       \
                     ibcmd --stats [--socket PATH]";

pub(crate) fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
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
}
