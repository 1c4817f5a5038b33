//! `--user`: the user the daemon becomes once its files are open, found in
//! /etc/passwd, and the check that nothing of root is left afterwards.

/// A user the daemon may become: its UID and the GID of its passwd entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UserIds {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
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
pub(crate) fn user_ids_of(user: &str) -> Result<UserIds, String> {
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
pub(crate) fn drop_privileges(user: &str, ids: UserIds) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
