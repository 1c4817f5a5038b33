//! Whose QP a tenant's REQ, REP or SIDR_REP names.
//!
//! The peer keys its connections by (remote QPN, remote CA GUID): the
//! kernel's `cm_match_req` and `cm_rep_handler` look a REQ's or REP's
//! LocalQPN up in `remote_qp_table`, and a hit is a stale connection the
//! peer rejects and disconnects. Every tenant of a device shares its CA GUID,
//! so a tenant naming another's QPN would make the peer tear down that
//! tenant's connection. The daemon asks the kernel who owns the QP
//! ([`KernelQps`], RDMA netlink resource tracking) and sends the MAD only
//! when a process of its tenant's user does (`rules::check_qp`).

use std::collections::HashMap;
use std::io;
#[cfg(test)]
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::os::rdma_netlink::{self, KernelQpOwner};

/// Who owns a QP of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpOwner {
    /// A process: its PID (thread group ID) and effective user ID.
    Process { pid: u32, uid: u32 },
    /// The kernel: a ULP's QP or the MAD layer's QP0/QP1.
    Kernel,
    /// Nobody: the device has no such QP, or its creator has exited.
    Nobody,
}

/// Tells the owner of a device's QPs.
pub trait QpOwners: Send + Sync {
    /// The owner of QP `qpn`, which a MAD leaving `port` names. An error
    /// when the question could not be answered (the MAD is then refused).
    fn owner(&self, port: u8, qpn: u32) -> io::Result<QpOwner>;
}

/// A dump of the device's QP table is asked for at most this often: a QP
/// still in RESET (no port yet) is only found by a dump, which costs the
/// driver a query per QP, so a tenant naming such QPs in a loop must not
/// turn into a dump per MAD.
const DUMP_INTERVAL: Duration = Duration::from_millis(50);
/// A dump answers for QPs it holds this long.
const DUMP_FRESH: Duration = Duration::from_millis(200);

/// The kernel's own record of a real RDMA device's QPs.
pub struct KernelQps {
    index: u32,
    dumps: Dumps,
}

/// The device's QP table as the last dump gave it, dumped again at most
/// every [`DUMP_INTERVAL`].
#[derive(Default)]
struct Dumps {
    last: Mutex<Option<Dump>>,
}

/// The device's QP table as one dump gave it.
struct Dump {
    at: Instant,
    owners: HashMap<u32, KernelQpOwner>,
    /// The errno it stopped part way with: `owners` holds the QPs listed
    /// before (each as the kernel told it), a QP not there is unknown.
    failed: Option<i32>,
}

impl Dump {
    fn answer(&self, qpn: u32) -> io::Result<Option<KernelQpOwner>> {
        match (self.owners.get(&qpn), self.failed) {
            (Some(owner), _) => Ok(Some(owner.clone())),
            (None, None) => Ok(None),
            (None, Some(errno)) => Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// A dump of the QP table: the owners it listed and how it ended.
type QpTable = (HashMap<u32, KernelQpOwner>, io::Result<()>);

impl KernelQps {
    /// The kernel's QP records of device `name`; None when the kernel has
    /// no such device (a simulated fabric's: nobody can check its QPs).
    pub fn of_device(name: &str) -> io::Result<Option<Self>> {
        Ok(rdma_netlink::device_index(name)?.map(|index| Self {
            index,
            dumps: Dumps::default(),
        }))
    }

    /// The owner of `qpn` from a recent dump of the QP table.
    fn dumped(&self, qpn: u32) -> io::Result<Option<KernelQpOwner>> {
        self.dumps.owner(
            qpn,
            || rdma_netlink::qp_owners(self.index),
            std::thread::sleep,
        )
    }
}

impl Dumps {
    /// The owner of `qpn` from a recent table, or from a new one `dump`
    /// gives (after `sleep`ing out the interval since the last).
    fn owner(
        &self,
        qpn: u32,
        dump: impl FnOnce() -> QpTable,
        sleep: impl FnOnce(Duration),
    ) -> io::Result<Option<KernelQpOwner>> {
        let asked = Instant::now();
        let mut last = self.last.lock();
        if let Some(dump) = last.as_ref() {
            let age = dump.at.elapsed();
            if let Some(owner) = dump.owners.get(&qpn).filter(|_| age < DUMP_FRESH) {
                return Ok(Some(owner.clone()));
            }
            if age < DUMP_INTERVAL {
                // A QP made since that dump (a REQ's own, just created):
                // a new dump once the interval is over, rather than a
                // refusal that waits for the REQ's retransmission. Slept
                // without the lock (other tenants' lookups are answered
                // meanwhile, not queued behind this one); a dump another
                // lookup took meanwhile is after this QP was made, so it
                // answers this one too.
                drop(last);
                sleep(DUMP_INTERVAL - age);
                last = self.last.lock();
                if let Some(dump) = last.as_ref().filter(|d| d.at >= asked) {
                    return dump.answer(qpn);
                }
            }
        }
        // Its time is when it began: it holds every QP made before then.
        // One that failed is kept too: it spaces the next as any other
        // (a dump that always fails, on mlx5 a DCT left in RESET, must not
        // become a dump per MAD), and it tells the QPs it listed.
        let at = Instant::now();
        let (owners, outcome) = dump();
        let failed = outcome.err().map(|e| e.raw_os_error().unwrap_or(libc::EIO));
        let dump = Dump { at, owners, failed };
        let answer = dump.answer(qpn);
        *last = Some(dump);
        answer
    }
}

impl QpOwners for KernelQps {
    fn owner(&self, port: u8, qpn: u32) -> io::Result<QpOwner> {
        let owner = match rdma_netlink::qp_owner(self.index, port, qpn) {
            Ok(owner) => owner,
            // The QP exists but is not on `port`: still in RESET (its port
            // is set by the move to INIT), or on another port.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => self.dumped(qpn)?,
            Err(e) => return Err(e),
        };
        self.resolve(owner)
    }
}

impl KernelQps {
    /// Who `owner` is. The kernel records the thread that created an
    /// object and forgets its PID once that thread exits (a setup thread
    /// of a pool): such a QP is its PD's creator's, and such a PD its user
    /// context's (the process that opened the device); one with none of
    /// them alive is nobody's.
    fn resolve(&self, mut owner: Option<KernelQpOwner>) -> io::Result<QpOwner> {
        // QP -> PD -> context: at most two steps up.
        for _ in 0..3 {
            match owner {
                None | Some(KernelQpOwner::Orphan(None)) => return Ok(QpOwner::Nobody),
                Some(KernelQpOwner::Kernel(_)) => return Ok(QpOwner::Kernel),
                Some(KernelQpOwner::Task(tid)) => return task_owner(tid),
                Some(KernelQpOwner::Orphan(Some(parent))) => {
                    owner = rdma_netlink::parent_owner(self.index, parent)?;
                }
            }
        }
        Ok(QpOwner::Nobody)
    }
}

/// The process and user of task `tid` (the kernel records the creating
/// thread, which may be any thread of the process).
fn task_owner(tid: u32) -> io::Result<QpOwner> {
    let status = match std::fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(status) => status,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(QpOwner::Nobody),
        Err(e) => return Err(e),
    };
    parse_status(&status).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADMSG))
}

/// `Tgid:` and the effective ID of `Uid:` (real, effective, saved, fs) of a
/// /proc/PID/status.
fn parse_status(status: &str) -> Option<QpOwner> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|rest| rest.split_whitespace().collect::<Vec<_>>())
    };
    let pid = field("Tgid:")?.first()?.parse().ok()?;
    let uid = field("Uid:")?.get(1)?.parse().ok()?;
    Some(QpOwner::Process { pid, uid })
}

/// A fixed table, for the in-process fabric's tests: what a kernel would
/// say of the QPs of a loop device.
#[cfg(test)]
#[derive(Default)]
pub struct FixedQps(pub Mutex<HashMap<u32, QpOwner>>);

#[cfg(test)]
impl QpOwners for FixedQps {
    fn owner(&self, _port: u8, qpn: u32) -> io::Result<QpOwner> {
        Ok(self.0.lock().get(&qpn).cloned().unwrap_or(QpOwner::Nobody))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::mpsc;

    fn table(entries: &[(u32, u32)]) -> HashMap<u32, KernelQpOwner> {
        entries
            .iter()
            .map(|&(qpn, tid)| (qpn, KernelQpOwner::Task(tid)))
            .collect()
    }

    fn fresh(owners: HashMap<u32, KernelQpOwner>) -> Dumps {
        Dumps {
            last: Mutex::new(Some(Dump {
                at: Instant::now(),
                owners,
                failed: None,
            })),
        }
    }

    /// A lookup the fresh dump answers does not wait for another's sleep.
    /// A REQ naming a QP made since the last dump that slept out the
    /// interval holding the device's dump lock would make every other
    /// tenant's lookup wait behind it, even one the fresh dump answers; a
    /// tenant with N connections naming new QPs in a loop would make each
    /// other tenant's REQ wait N x 50 ms.
    #[test]
    fn a_lookup_the_fresh_dump_answers_does_not_wait_for_anothers_sleep() {
        let dumps = Arc::new(fresh(table(&[(7, 70)])));
        let (sleeping, asleep) = mpsc::channel();
        let (wake, woken) = mpsc::channel::<()>();
        let sleeper = {
            let dumps = dumps.clone();
            std::thread::spawn(move || {
                dumps.owner(
                    8,
                    || (table(&[(7, 70), (8, 80)]), Ok(())),
                    |_| {
                        sleeping.send(()).unwrap();
                        let _ = woken.recv();
                    },
                )
            })
        };
        asleep.recv_timeout(Duration::from_secs(10)).unwrap();
        let (answer, answered) = mpsc::channel();
        let other = {
            let dumps = dumps.clone();
            std::thread::spawn(move || {
                let owner = dumps.owner(7, || (HashMap::new(), Ok(())), |_| {});
                answer.send(owner.unwrap()).unwrap();
            })
        };
        let meanwhile = answered.recv_timeout(Duration::from_secs(10));
        wake.send(()).unwrap();
        other.join().unwrap();
        assert_eq!(
            sleeper.join().unwrap().unwrap(),
            Some(KernelQpOwner::Task(80))
        );
        assert_eq!(
            meanwhile.ok(),
            Some(Some(KernelQpOwner::Task(70))),
            "QP 7's lookup waited for QP 8's sleep"
        );
    }

    /// A dump that failed is remembered, and the next one waits out the
    /// interval: otherwise the next lookup would dump again at once, and
    /// with a dump that always fails (on mlx5 a DCT left in RESET fails
    /// `ib_query_qp`, which ends every dump of the table,
    /// `res_get_common_dumpit`) each MAD naming a QP not on its port would
    /// cost a full dump, what `DUMP_INTERVAL` is there to prevent.
    #[test]
    fn a_failed_dump_still_spaces_the_next_one() {
        let dumps = Dumps::default();
        let failed = || {
            (
                HashMap::new(),
                Err(io::Error::from_raw_os_error(libc::EINVAL)),
            )
        };
        assert!(dumps.owner(8, failed, |_| {}).is_err());
        let waited = std::cell::Cell::new(None);
        let mut dumped_after = None;
        let _ = dumps.owner(
            8,
            || {
                dumped_after = Some(waited.get().is_some());
                failed()
            },
            |d| waited.set(Some(d)),
        );
        assert_eq!(dumped_after, Some(true), "dumped again without waiting");
        let waited = waited.get();
        assert!(waited.is_some_and(|d| d > Duration::ZERO && d <= DUMP_INTERVAL));
    }

    /// A dump that stopped part way still answers for the QPs it listed
    /// (whose owners it told right): refusing every QP would let one
    /// tenant's unqueryable QP refuse every tenant's REQ naming a QP in
    /// RESET. A QP it did not list stays refused, as unchecked.
    #[test]
    fn a_dump_that_stopped_part_way_answers_for_the_qps_it_listed() {
        let dumps = Dumps::default();
        let partial = || {
            (
                table(&[(7, 70)]),
                Err(io::Error::from_raw_os_error(libc::EINVAL)),
            )
        };
        assert_eq!(
            dumps.owner(7, partial, |_| {}).unwrap(),
            Some(KernelQpOwner::Task(70))
        );
        let unlisted = dumps.owner(9, partial, |_| {});
        assert_eq!(unlisted.unwrap_err().raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn the_owner_of_a_task_is_its_thread_group_and_effective_user() {
        let status = "Name:\tibcm-worker\nTgid:\t4100\nPid:\t4107\nPPid:\t1\n\
                      Uid:\t1000\t2000\t2000\t2000\nGid:\t100\t100\t100\t100\n";
        assert_eq!(
            parse_status(status),
            Some(QpOwner::Process {
                pid: 4100,
                uid: 2000
            })
        );
        assert_eq!(parse_status("Name:\tx\n"), None);
    }

    #[test]
    fn every_thread_of_this_process_is_owned_by_this_process() {
        use std::os::unix::fs::MetadataExt;
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || wait.recv());
        let me = std::process::id();
        let uid = std::fs::metadata("/proc/self").unwrap().uid();
        let tids: Vec<u32> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
            .collect();
        assert!(tids.len() >= 2, "{tids:?}");
        for tid in tids {
            assert_eq!(
                task_owner(tid).unwrap(),
                QpOwner::Process { pid: me, uid },
                "thread {tid}"
            );
        }
        drop(stop);
        let _ = thread.join();
    }
}
