//! Why a call of the C API was refused. The check that refuses a call names
//! the rule it broke ([`refuse`]); the C boundary (`ffi`) writes one line for
//! the call, at `info`, naming the function, what it was called on, the rule
//! and what it returns:
//!
//! ```text
//! ib_cm: info: ib_send_cm_dreq: id 0x1a2b3c4d/0x00000000 on loop0: in REQ_SENT, needs ESTABLISHED (-EINVAL)
//! ```
//!
//! The rule travels beside the errno as C's `errno` does: per thread, from
//! the check to the boundary. So the engine's functions keep returning a
//! plain [`Errno`] and each rule is checked in one place, where the state it
//! needs is known (the engine knows "in REQ_SENT, needs ESTABLISHED", the
//! boundary the function's name). A rule is plain data, recorded only while
//! `info` lines are wanted and formatted only when its line is written: a
//! call that succeeds costs one thread-local store ([`begin`]).

use std::cell::Cell;
use std::fmt;
use std::net::Ipv6Addr;

use crate::abi::ib_cm_state;
use crate::errno::Errno;
use crate::log::{Level, enabled};

/// A rule a call broke, as its log line says it.
#[derive(Clone, Copy, Debug)]
pub enum Rule {
    /// `param is NULL`
    Null(&'static str),
    /// `in REQ_SENT, needs ESTABLISHED`
    State {
        is: ib_cm_state,
        needs: &'static str,
    },
    /// `private_data_len 221 > 220`
    Above {
        field: &'static str,
        value: usize,
        max: usize,
    },
    /// `<field> <value> <rule>`: `qp_type 0 is not RC, UC or XRC_INI`.
    Value {
        field: &'static str,
        value: i64,
        rule: &'static str,
    },
    /// The same with the value in hex: `cm_id 0x55d0c0a0 is not a live
    /// cm_id`, `service_id 0x…`, P_Keys.
    Hex {
        field: &'static str,
        value: u64,
        rule: &'static str,
    },
    /// `primary_path sgid fe80::1 is not a GID of the device`
    Gid {
        field: &'static str,
        gid: [u8; 16],
        rule: &'static str,
    },
    /// A rule with no value to show: `already open`.
    Text(&'static str),
    /// `2 ids left: 1 ESTABLISHED, 1 TIMEWAIT`
    IdsLeft(IdCensus),
}

/// A device's cm_ids by state, for the refusal of its close.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdCensus {
    /// Every id of the device, some maybe not yet visible to C (a new id
    /// while its REQ is taken apart).
    pub total: usize,
    /// The ids C can see, by `enum ib_cm_state` value.
    pub by_state: [u32; 16],
}

impl Rule {
    /// `<field> <value> <rule>`.
    pub fn value(field: &'static str, value: impl Into<i64>, rule: &'static str) -> Self {
        let value = value.into();
        Rule::Value { field, value, rule }
    }

    /// `<field> 0x<value> <rule>`.
    pub fn hex(field: &'static str, value: impl Into<u64>, rule: &'static str) -> Self {
        let value = value.into();
        Rule::Hex { field, value, rule }
    }

    /// `<field> <gid> <rule>`.
    pub fn gid(field: &'static str, gid: [u8; 16], rule: &'static str) -> Self {
        Rule::Gid { field, gid, rule }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rule::Null(what) => write!(f, "{what} is NULL"),
            Rule::State { is, needs } => {
                write!(f, "in {}, needs {needs}", crate::cm::state_name(is))
            }
            Rule::Above { field, value, max } => write!(f, "{field} {value} > {max}"),
            Rule::Value { field, value, rule } => write!(f, "{field} {value} {rule}"),
            Rule::Hex { field, value, rule } => write!(f, "{field} {value:#x} {rule}"),
            Rule::Gid { field, gid, rule } => write!(f, "{field} {} {rule}", Ipv6Addr::from(gid)),
            Rule::Text(text) => f.write_str(text),
            Rule::IdsLeft(census) => census.fmt(f),
        }
    }
}

impl fmt::Display for IdCensus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.total == 1 { "" } else { "s" };
        write!(f, "{} id{plural} left", self.total)?;
        let mut sep = ": ";
        let mut seen = 0;
        for (state, &n) in self.by_state.iter().enumerate() {
            if n != 0 {
                let name = crate::cm::state_name(crate::cm::id::state_from_i32(state as i32));
                write!(f, "{sep}{n} {name}")?;
                sep = ", ";
                seen += n as usize;
            }
        }
        if self.total > seen {
            write!(f, "{sep}{} being set up", self.total - seen)?;
        }
        Ok(())
    }
}

thread_local! {
    /// The rule that refused the current call of this thread, with its errno.
    static RECORDED: Cell<Option<(Errno, Rule)>> = const { Cell::new(None) };
    /// Set while a call of the Rust API runs ([`for_call`]): its error names
    /// the rule whether or not `info` lines are wanted.
    static FOR_RUST_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Whether rules are wanted: their lines are written (or captured), or a
/// call of the Rust API returns them in its error.
fn wanted() -> bool {
    FOR_RUST_CALL.with(Cell::get) || enabled(Level::Info)
}

/// Runs `f`, an engine call made by the Rust API (`crate::api`), with rules
/// recorded whatever the log level; a refusal comes back with its rule.
pub fn for_call<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, (Errno, Option<Rule>)> {
    /// Puts the flag back as it was, also when `f` unwinds.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            FOR_RUST_CALL.with(|w| w.set(self.0));
        }
    }
    begin();
    let restore = Restore(FOR_RUST_CALL.with(|w| w.replace(true)));
    let result = f();
    drop(restore);
    result.map_err(|e| (e, take(e)))
}

/// `errno`, with `rule` recorded as the reason for the current call's log
/// line: `return Err(refuse(EINVAL, Rule::Null("param")))`.
pub fn refuse(errno: Errno, rule: Rule) -> Errno {
    if wanted() {
        RECORDED.with(|r| r.set(Some((errno, rule))));
    }
    errno
}

/// [`refuse`] for a rule that costs something to build (a census of ids):
/// built only if its line is wanted.
pub fn refuse_with(errno: Errno, rule: impl FnOnce() -> Rule) -> Errno {
    if wanted() {
        RECORDED.with(|r| r.set(Some((errno, rule()))));
    }
    errno
}

/// `EINVAL`, for `rule`.
pub fn invalid(rule: Rule) -> Errno {
    refuse(crate::errno::EINVAL, rule)
}

/// `EINVAL` for an id that is not in a state the call needs.
pub fn wrong_state(is: ib_cm_state, needs: &'static str) -> Errno {
    refuse(crate::errno::EINVAL, Rule::State { is, needs })
}

/// `EINVAL` for a length (or another value) over its limit.
pub fn above(field: &'static str, value: usize, max: usize) -> Errno {
    refuse(crate::errno::EINVAL, Rule::Above { field, value, max })
}

/// `EINVAL` for a NULL pointer the call needs.
pub fn null(what: &'static str) -> Errno {
    refuse(crate::errno::EINVAL, Rule::Null(what))
}

/// A call of the C API begins: a rule left from an earlier call (whose
/// error an engine path ignored) is not this call's.
pub fn begin() {
    RECORDED.with(|r| r.set(None));
}

/// The rule that refused this call with `errno`, if the check recorded one.
pub fn take(errno: Errno) -> Option<Rule> {
    RECORDED
        .with(Cell::take)
        .and_then(|(e, rule)| (e == errno).then_some(rule))
}

/// An errno as a C caller sees it returned: `-EINVAL`.
pub struct Neg(pub Errno);

impl fmt::Display for Neg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match errno_name(self.0.0) {
            Some(name) => write!(f, "-{name}"),
            None => write!(f, "-{}", self.0.0),
        }
    }
}

/// The name of an errno the library may return.
fn errno_name(e: i32) -> Option<&'static str> {
    const NAMES: [(i32, &str); 27] = [
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EINTR, "EINTR"),
        (libc::EIO, "EIO"),
        (libc::EAGAIN, "EAGAIN"),
        (libc::ENOMEM, "ENOMEM"),
        (libc::EACCES, "EACCES"),
        (libc::EFAULT, "EFAULT"),
        (libc::EBUSY, "EBUSY"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENODEV, "ENODEV"),
        (libc::EINVAL, "EINVAL"),
        (libc::ENFILE, "ENFILE"),
        (libc::EMFILE, "EMFILE"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EPIPE, "EPIPE"),
        (libc::EDEADLK, "EDEADLK"),
        (libc::ELIBACC, "ELIBACC"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::EADDRINUSE, "EADDRINUSE"),
        (libc::ENETDOWN, "ENETDOWN"),
        (libc::ECONNRESET, "ECONNRESET"),
        (libc::EISCONN, "EISCONN"),
        (libc::ETIMEDOUT, "ETIMEDOUT"),
        (libc::ECONNREFUSED, "ECONNREFUSED"),
        (libc::EHOSTUNREACH, "EHOSTUNREACH"),
        (libc::EOWNERDEAD, "EOWNERDEAD"),
    ];
    NAMES.iter().find(|(n, _)| *n == e).map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::ib_cm_state::*;
    use crate::errno::{EBUSY, EINVAL};

    #[test]
    fn each_rule_reads_as_its_log_line_says() {
        let state = Rule::State {
            is: IB_CM_REQ_SENT,
            needs: "ESTABLISHED",
        };
        assert_eq!(state.to_string(), "in REQ_SENT, needs ESTABLISHED");
        let long = Rule::Above {
            field: "private_data_len",
            value: 221,
            max: 220,
        };
        assert_eq!(long.to_string(), "private_data_len 221 > 220");
        let qp = Rule::Value {
            field: "qp_type",
            value: 0,
            rule: "is not RC, UC or XRC_INI",
        };
        assert_eq!(qp.to_string(), "qp_type 0 is not RC, UC or XRC_INI");
        let mut by_state = [0; 16];
        by_state[IB_CM_ESTABLISHED as usize] = 1;
        by_state[IB_CM_TIMEWAIT as usize] = 1;
        let census = IdCensus { total: 3, by_state };
        assert_eq!(
            Rule::IdsLeft(census).to_string(),
            "3 ids left: 1 ESTABLISHED, 1 TIMEWAIT, 1 being set up"
        );
        let gid = Rule::Gid {
            field: "sgid",
            gid: Ipv6Addr::LOCALHOST.octets(),
            rule: "is not a GID of the device",
        };
        assert_eq!(gid.to_string(), "sgid ::1 is not a GID of the device");
        assert_eq!(Neg(EBUSY).to_string(), "-EBUSY");
        assert_eq!(Neg(Errno(4095)).to_string(), "-4095");
    }

    #[test]
    fn a_rule_is_taken_once_and_only_for_its_errno() {
        let _capture = crate::log::capture::Capture::of(&["refusal-unit-test"]);
        begin();
        let e = refuse(EINVAL, Rule::Text("x"));
        assert_eq!(e, EINVAL);
        assert!(take(EBUSY).is_none(), "another errno's rule");
        assert!(take(EINVAL).is_none(), "taken by the look above");
        let _ = refuse(EINVAL, Rule::Text("y"));
        begin();
        assert!(take(EINVAL).is_none(), "left from an earlier call");
        let _ = refuse(EINVAL, Rule::Text("z"));
        assert!(matches!(take(EINVAL), Some(Rule::Text("z"))));
    }
}
