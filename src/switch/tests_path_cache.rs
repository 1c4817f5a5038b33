//! The host's path cache (`path_cache`) on the in-process fabric: the
//! switch serves a loop device whose SM is another loop device, where the
//! test plays the SA; raw protocol clients play the tenants. Every count of
//! queries is the fake SA's, never the daemon's.

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::path_cache::SA_PENDING_MAX;
use super::proto::{DeviceInfo, ToClient};
use super::tests::Client;
use super::{Switch, SwitchConfig, SwitchCounter};
use crate::sa::PathQuery;
use crate::sa::cache;
use crate::transport::loopback::{LoopIdentity, LoopTransport};
use crate::transport::{MadAddr, MadTransport, RecvFn};
use crate::wire::Mad;

const WAIT: Duration = Duration::from_secs(10);
/// Where a PathRecord's DLID is in an SA answer.
const DLID_AT: usize = 56 + 40;
/// `MAD_STATUS_REQ_INVALID`-class error of the SA: no such path.
const NO_RECORDS: u16 = 0x0300;

/// The switch on loop device `index`, whose SM (and SA) is loop device
/// `index + 1`, played by the test.
struct Host {
    switch: Arc<Switch>,
    device: String,
    sa: Arc<LoopTransport>,
    to_sa: Receiver<Mad>,
    /// Where the tenants send their queries: the SM's LID and GID.
    sa_addr: MadAddr,
    /// Where the SA answers: the switch's port.
    switch_addr: MadAddr,
}

impl Host {
    fn new(index: u32, config: SwitchConfig) -> Self {
        let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
        let sm = LoopIdentity::from_name(&format!("loop{}", index + 1)).unwrap();
        let switch = Switch::new(config);
        let device = format!("loop{index}");
        switch
            .add_device(&device, |recv| {
                let transport = LoopTransport::open(me, recv)?;
                let mut info = DeviceInfo::of_loop(me);
                info.ports[0].sm_lid = sm.lid;
                Ok((info, transport as Arc<dyn MadTransport>))
            })
            .unwrap();
        let (tx, to_sa) = channel();
        let tx = Mutex::new(tx);
        let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
            let _ = tx.lock().unwrap().send(*mad);
        });
        let sa = LoopTransport::open(sm, recv).unwrap();
        Self {
            switch,
            device,
            sa,
            to_sa,
            sa_addr: MadAddr {
                dlid: sm.lid,
                dgid: sm.gid,
                ..MadAddr::default()
            },
            switch_addr: MadAddr {
                dlid: me.lid,
                dgid: me.gid,
                ..MadAddr::default()
            },
        }
    }

    fn with_ttl(index: u32, ttl: Duration) -> Self {
        let mut config = SwitchConfig::default();
        config.path_cache.ttl = ttl;
        Self::new(index, config)
    }

    /// A tenant, registered.
    fn tenant(&self) -> Client {
        let c = Client::connect(&self.switch);
        c.register(&self.device).expect("registered");
        c
    }

    /// `tenant` asks for the path to destination `n` with TID `tid`, and
    /// the daemon has handled it.
    fn ask(&self, tenant: &mut Client, n: u16, tid: u32) {
        tenant.send_mad(&query(n, tid), &self.sa_addr);
        tenant.sync();
    }

    /// `ask` to the SA at `sa`.
    fn ask_at(&self, tenant: &mut Client, sa: &MadAddr, n: u16, tid: u32) {
        tenant.send_mad(&query(n, tid), sa);
        tenant.sync();
    }

    /// The next query the SA received.
    fn sa_got(&self) -> Mad {
        self.to_sa.recv_timeout(WAIT).expect("a query at the SA")
    }

    /// The queries the SA received and not taken yet (every tenant synced).
    fn sa_queries_left(&self) -> usize {
        self.to_sa.try_iter().count()
    }

    /// The SA answers `query` with `status` and, for status 0, a path whose
    /// DLID is `dlid`.
    fn sa_answers(&self, query: &Mad, status: u16, dlid: u16) {
        let mut answer = *query;
        answer[3] = 0x81; // SubnAdmGetResp
        answer[4..6].copy_from_slice(&status.to_be_bytes());
        if status == 0 {
            answer[DLID_AT..DLID_AT + 2].copy_from_slice(&dlid.to_be_bytes());
        }
        self.sa.send(1, &self.switch_addr, &answer).unwrap();
    }

    fn counter(&self, counter: SwitchCounter) -> u64 {
        self.switch.counter(counter)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.sa.close();
        self.switch.close();
    }
}

/// A destination GID (the test's SA answers for any).
fn dest(n: u16) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[..2].copy_from_slice(&[0xfe, 0x80]);
    gid[14..].copy_from_slice(&n.to_be_bytes());
    gid
}

/// What the library sends for `ibcm_init_path` to destination `n`.
fn query(n: u16, tid: u32) -> Mad {
    let sgid = LoopIdentity::from_lid(1).unwrap().gid;
    PathQuery::between(sgid, dest(n), 0xffff).encode(tid)
}

/// An SA answer as a tenant got it: its TID, its status, the path's DLID.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    tid: u32,
    status: u16,
    dlid: u16,
}

fn ok(tid: u32, dlid: u16) -> Answer {
    Answer {
        tid,
        status: 0,
        dlid,
    }
}

fn error(tid: u32, status: u16) -> Answer {
    Answer {
        tid,
        status,
        dlid: 0,
    }
}

/// The next SA answer `tenant` got, and where it came from.
fn answer_from(tenant: &mut Client) -> (Answer, MadAddr) {
    let (addr, mad) = tenant.wait_for(|m| match m {
        ToClient::Recv { addr, mad, .. } => Some((*addr, **mad)),
        _ => None,
    });
    let be16 = |at: usize| u16::from_be_bytes([mad[at], mad[at + 1]]);
    let tid = u32::from_be_bytes(mad[12..16].try_into().unwrap());
    let answer = Answer {
        tid,
        status: be16(4),
        dlid: be16(DLID_AT),
    };
    (answer, addr)
}

/// The next SA answer `tenant` got.
fn answer(tenant: &mut Client) -> Answer {
    answer_from(tenant).0
}

#[test]
fn two_tenants_asking_the_same_path_make_one_sa_query_and_both_get_its_answer() {
    let host = Host::new(3700, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    host.ask(&mut b, 1, 0xb2);
    let asked = host.sa_got();
    assert_eq!(host.sa_queries_left(), 0, "a second query reached the SA");
    host.sa_answers(&asked, 0, 77);
    let (got_a, from_a) = answer_from(&mut a);
    let (got_b, from_b) = answer_from(&mut b);
    assert_eq!(got_a, ok(0xa1, 77));
    assert_eq!(got_b, ok(0xb2, 77));
    assert_eq!(from_a.dlid, host.sa_addr.dlid, "from the SM's LID");
    assert_eq!(from_b.dlid, host.sa_addr.dlid, "from the SM's LID");
}

#[test]
fn a_tenant_asking_later_is_answered_from_the_cache_without_an_sa_query() {
    let host = Host::new(3710, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    let asked = host.sa_got();
    host.sa_answers(&asked, 0, 77);
    assert_eq!(answer(&mut a), ok(0xa1, 77));
    host.ask(&mut b, 1, 0xb2);
    let (got, from) = answer_from(&mut b);
    assert_eq!(got, ok(0xb2, 77));
    assert_eq!(from.dlid, host.sa_addr.dlid);
    assert_eq!(host.sa_queries_left(), 0, "the cached path was asked again");
    assert_eq!(host.counter(SwitchCounter::PathCacheHits), 1);
    assert_eq!(host.counter(SwitchCounter::PathCacheMisses), 1);
    assert_eq!(host.counter(SwitchCounter::TxSaQueries), 1);
}

#[test]
fn different_destinations_are_separate_sa_queries() {
    let host = Host::new(3720, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    host.ask(&mut b, 2, 0xb2);
    let first = host.sa_got();
    let second = host.sa_got();
    assert_eq!(host.sa_queries_left(), 0);
    host.sa_answers(&second, 0, 2);
    host.sa_answers(&first, 0, 1);
    assert_eq!(answer(&mut a), ok(0xa1, 1));
    assert_eq!(answer(&mut b), ok(0xb2, 2));
}

#[test]
fn an_sa_error_goes_to_every_waiter_and_is_not_cached() {
    let host = Host::new(3730, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    host.ask(&mut b, 1, 0xb2);
    let asked = host.sa_got();
    assert_eq!(host.sa_queries_left(), 0);
    host.sa_answers(&asked, NO_RECORDS, 0);
    assert_eq!(answer(&mut a), error(0xa1, NO_RECORDS));
    assert_eq!(answer(&mut b), error(0xb2, NO_RECORDS));
    // The next ask asks the SA again, and its success is kept.
    host.ask(&mut a, 1, 0xa3);
    let again = host.sa_got();
    host.sa_answers(&again, 0, 5);
    assert_eq!(answer(&mut a), ok(0xa3, 5));
    host.ask(&mut b, 1, 0xb4);
    assert_eq!(answer(&mut b), ok(0xb4, 5));
    assert_eq!(host.sa_queries_left(), 0);
    assert_eq!(host.counter(SwitchCounter::TxSaQueries), 2);
}

#[test]
fn with_ttl_0_every_ask_is_an_sa_query() {
    let host = Host::with_ttl(3740, Duration::ZERO);
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    host.ask(&mut b, 1, 0xb2);
    let first = host.sa_got();
    let second = host.sa_got();
    host.sa_answers(&first, 0, 1);
    host.sa_answers(&second, 0, 2);
    assert_eq!(answer(&mut a), ok(0xa1, 1));
    assert_eq!(answer(&mut b), ok(0xb2, 2));
    host.ask(&mut a, 1, 0xa3);
    let third = host.sa_got();
    host.sa_answers(&third, 0, 3);
    assert_eq!(answer(&mut a), ok(0xa3, 3));
    assert_eq!(host.sa_queries_left(), 0);
    assert_eq!(host.counter(SwitchCounter::PathCacheMisses), 3);
    assert_eq!(host.counter(SwitchCounter::PathCacheHits), 0);
    assert_eq!(host.counter(SwitchCounter::TxSaQueries), 3);
}

#[test]
fn an_expired_answer_is_asked_of_the_sa_again() {
    let ttl = Duration::from_millis(100);
    let host = Host::with_ttl(3750, ttl);
    let mut a = host.tenant();
    host.ask(&mut a, 1, 0xa1);
    let asked = host.sa_got();
    host.sa_answers(&asked, 0, 1);
    assert_eq!(answer(&mut a), ok(0xa1, 1));
    std::thread::sleep(ttl * 2);
    host.ask(&mut a, 1, 0xa2);
    let again = host.sa_got();
    host.sa_answers(&again, 0, 2);
    assert_eq!(answer(&mut a), ok(0xa2, 2), "the new answer");
    assert_eq!(host.counter(SwitchCounter::PathCacheExpirations), 1);
}

/// Waits until `switch`'s `counter` reaches `n`.
fn wait_counter(switch: &Switch, counter: SwitchCounter, n: u64) {
    let deadline = std::time::Instant::now() + WAIT;
    while switch.counter(counter) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} stays at {}",
            counter.name(),
            switch.counter(counter)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_tenant_leaving_while_waiting_leaks_nothing_and_the_other_waiter_gets_the_answer() {
    let host = Host::new(3760, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    host.ask(&mut b, 1, 0xb2);
    let shared = host.sa_got();
    // A also waits alone for another path.
    host.ask(&mut a, 2, 0xa3);
    let alone = host.sa_got();
    assert_eq!(host.switch.sa_in_flight(), 2);
    drop(a);
    wait_counter(&host.switch, SwitchCounter::Gone, 1);
    assert_eq!(host.switch.sa_in_flight(), 1, "nobody waits for A's own");
    host.sa_answers(&alone, 0, 2);
    host.sa_answers(&shared, 0, 1);
    assert_eq!(answer(&mut b), ok(0xb2, 1));
    assert_eq!(host.switch.sa_in_flight(), 0);
    assert_eq!(host.counter(SwitchCounter::RxSaAnswers), 1);
    // The shared answer is kept for whoever asks next.
    let mut c = host.tenant();
    host.ask(&mut c, 1, 0xc4);
    assert_eq!(answer(&mut c), ok(0xc4, 1));
    assert_eq!(host.sa_queries_left(), 0);
}

#[test]
fn a_tenants_waits_are_bounded_its_oldest_forgotten_and_anothers_kept() {
    let host = Host::new(3770, SwitchConfig::default());
    let (mut victim, mut flood) = (host.tenant(), host.tenant());
    host.ask(&mut victim, 0, 0xabcd);
    let victims = host.sa_got();
    // As many more destinations as the bound, and the victim's: the
    // flooder's first goes, its last SA_PENDING_MAX stay, the victim's too.
    let n = SA_PENDING_MAX as u16 + 1;
    for i in 1..=n {
        flood.send_mad(&query(i, u32::from(i)), &host.sa_addr);
    }
    flood.sync();
    let sent: Vec<Mad> = (1..=n).map(|_| host.sa_got()).collect();
    assert_eq!(host.switch.sa_in_flight(), SA_PENDING_MAX + 1);
    // The answer to the forgotten query reaches nobody.
    host.sa_answers(&sent[0], 0, 1);
    assert_eq!(host.counter(SwitchCounter::RxDropped), 1);
    host.sa_answers(&sent[1], 0, 2);
    assert_eq!(answer(&mut flood), ok(2, 2));
    host.sa_answers(&victims, 0, 9);
    assert_eq!(answer(&mut victim), ok(0xabcd, 9));
}

#[test]
fn a_waiters_retry_sends_the_query_in_flight_again() {
    let host = Host::new(3780, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    let lost = host.sa_got();
    host.ask(&mut b, 1, 0xb2);
    assert_eq!(host.sa_queries_left(), 0, "B waits for A's query");
    // The SA lost A's query: A's library sends it again, same TID.
    host.ask(&mut a, 1, 0xa1);
    let resent = host.sa_got();
    assert_eq!(resent, lost, "the same query, with the daemon's same TID");
    host.sa_answers(&resent, 0, 7);
    assert_eq!(answer(&mut a), ok(0xa1, 7));
    assert_eq!(answer(&mut b), ok(0xb2, 7));
    // Each got it once.
    assert!(a.got_nothing() && b.got_nothing());
    assert_eq!(host.counter(SwitchCounter::TxSaQueries), 2);
    assert_eq!(host.counter(SwitchCounter::PathCacheCoalesced), 2);
}

#[test]
fn an_sa_error_for_a_destination_drops_its_cached_answers() {
    let host = Host::new(3790, SwitchConfig::default());
    let mut a = host.tenant();
    host.ask(&mut a, 1, 0xa1);
    let asked = host.sa_got();
    host.sa_answers(&asked, 0, 1);
    assert_eq!(answer(&mut a), ok(0xa1, 1));
    // Another query for the same destination (another partition) fails.
    let sgid = LoopIdentity::from_lid(1).unwrap().gid;
    let other = PathQuery::between(sgid, dest(1), 0x8001).encode(0xa2);
    a.send_mad(&other, &host.sa_addr);
    let failing = host.sa_got();
    host.sa_answers(&failing, NO_RECORDS, 0);
    assert_eq!(answer(&mut a), error(0xa2, NO_RECORDS));
    assert_eq!(host.counter(SwitchCounter::PathCacheInvalidations), 1);
    host.ask(&mut a, 1, 0xa3);
    let again = host.sa_got();
    host.sa_answers(&again, 0, 3);
    assert_eq!(answer(&mut a), ok(0xa3, 3));
}

#[test]
fn queries_the_cache_does_not_serve_go_to_the_sa_each_time() {
    let host = Host::new(3796, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    // A SubnAdmGetTable, and a Get whose SM_Key is set: not plain Gets.
    let mut table = query(1, 0xa1);
    table[3] = 0x12;
    let mut keyed = query(1, 0xb2);
    keyed[36] = 1;
    a.send_mad(&table, &host.sa_addr);
    a.sync();
    b.send_mad(&keyed, &host.sa_addr);
    b.send_mad(&keyed, &host.sa_addr);
    b.sync();
    // A Get to another LID than the SM the daemon knows.
    let elsewhere = MadAddr {
        dlid: host.switch_addr.dlid,
        ..host.sa_addr
    };
    a.send_mad(&query(1, 0xa3), &elsewhere);
    a.sync();
    let asked: Vec<Mad> = (0..4).map(|_| host.sa_got()).collect();
    for (i, q) in asked.iter().enumerate() {
        host.sa_answers(q, 0, i as u16 + 1);
    }
    assert_eq!(answer(&mut a), ok(0xa1, 1));
    assert_eq!(answer(&mut b), ok(0xb2, 2));
    assert_eq!(answer(&mut b), ok(0xb2, 3));
    assert_eq!(answer(&mut a), ok(0xa3, 4));
    assert_eq!(host.counter(SwitchCounter::PathCacheMisses), 0);
    assert_eq!(host.counter(SwitchCounter::PathCacheHits), 0);
    assert_eq!(cache::DEFAULT_TTL, SwitchConfig::default().path_cache.ttl);
}

#[test]
fn a_new_asker_of_a_query_unanswered_for_a_while_sends_it_again() {
    let host = Host::new(3794, SwitchConfig::default());
    let (mut a, mut b) = (host.tenant(), host.tenant());
    host.ask(&mut a, 1, 0xa1);
    let lost = host.sa_got();
    // Past the daemon's bound on a send's answer (1 s): B's first try does
    // not wait out a try of its own for an answer that likely got lost.
    std::thread::sleep(Duration::from_millis(1100));
    host.ask(&mut b, 1, 0xb2);
    assert_eq!(
        host.sa_got(),
        lost,
        "sent again, with the daemon's same TID"
    );
    host.sa_answers(&lost, 0, 4);
    assert_eq!(answer(&mut a), ok(0xa1, 4));
    assert_eq!(answer(&mut b), ok(0xb2, 4));
}

/// A served port whose SM moves: its sysfs files under a directory of the
/// test's own (read by the daemon as the host's), the SM it has at first
/// being the host's fake SA, and a second SA at `loop{base+2}` that
/// becomes its SM with [`MovingSm::move_sm`].
struct MovingSm {
    root: std::path::PathBuf,
    port_dir: std::path::PathBuf,
    new_sm: LoopIdentity,
    /// What the second SA received.
    to_new_sa: Receiver<Mad>,
    new_sa: Arc<LoopTransport>,
}

impl MovingSm {
    fn new(host: &Host, base: u32, dir: &str) -> MovingSm {
        let me = LoopIdentity::from_name(&format!("loop{base}")).unwrap();
        let new_sm = LoopIdentity::from_name(&format!("loop{}", base + 2)).unwrap();
        let root = std::env::temp_dir().join(format!("{dir}-{}", std::process::id()));
        let port_dir = root.join(format!("loop{base}/ports/1"));
        std::fs::create_dir_all(&port_dir).unwrap();
        let (tx, to_new_sa) = channel();
        let tx = Mutex::new(tx);
        let recv: RecvFn = Arc::new(move |_, _, mad: Arc<Mad>| {
            let _ = tx.lock().unwrap().send(*mad);
        });
        let new_sa = LoopTransport::open(new_sm, recv).unwrap();
        let moving = MovingSm {
            root,
            port_dir,
            new_sm,
            to_new_sa,
            new_sa,
        };
        moving.write("state", "4: ACTIVE");
        moving.write("lid", &format!("{:#x}", me.lid));
        moving.write("sm_lid", &format!("{:#x}", host.sa_addr.dlid));
        moving.write("sm_sl", "0");
        host.switch.read_ports_from(&host.device, &moving.root);
        moving
    }

    fn write(&self, file: &str, text: &str) {
        std::fs::write(self.port_dir.join(file), format!("{text}\n")).unwrap();
    }

    /// The port's SM is now the second SA (the daemon sees it at its next
    /// poll).
    fn move_sm(&self) {
        self.write("sm_lid", &format!("{:#x}", self.new_sm.lid));
    }

    /// The second SA answers query `asked` with a path to `dlid`.
    fn answer(&self, host: &Host, asked: Mad, dlid: u16) {
        let mut answer_mad = asked;
        answer_mad[3] = 0x81;
        answer_mad[DLID_AT..DLID_AT + 2].copy_from_slice(&dlid.to_be_bytes());
        self.new_sa.send(1, &host.switch_addr, &answer_mad).unwrap();
    }
}

impl Drop for MovingSm {
    fn drop(&mut self) {
        self.new_sa.close();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The SM of the served port moves (its files, as sysfs lays them out,
/// say a new SM LID): the host's answers of that port go, a process that
/// registers now learns the new SM, and what is asked of the new SM is
/// cached again; a read that finds nothing new drops nothing.
#[test]
fn a_served_port_whose_sm_moved_drops_its_cached_paths_and_caches_the_new_sms() {
    let host = Host::new(3980, SwitchConfig::default());
    let moving = MovingSm::new(&host, 3980, "ibcm-ibcmd-ports");
    let (new_sm, to_new_sa) = (moving.new_sm, &moving.to_new_sa);
    let mut a = host.tenant();
    host.ask(&mut a, 1, 0xa1);
    let asked = host.sa_got();
    host.sa_answers(&asked, 0, 77);
    assert_eq!(answer(&mut a), ok(0xa1, 77));
    assert!(host.switch.poll_ports_now(&host.device));
    host.ask(&mut a, 1, 0xa2);
    assert_eq!(
        answer(&mut a),
        ok(0xa2, 77),
        "nothing changed: still cached"
    );
    assert_eq!(host.counter(SwitchCounter::PortChanges), 0);

    moving.move_sm();
    assert!(host.switch.poll_ports_now(&host.device));
    assert_eq!(host.counter(SwitchCounter::PortChanges), 1);
    assert_eq!(host.counter(SwitchCounter::PathCacheInvalidations), 1);
    // A process registering now is told the SM there is.
    let mut b = Client::connect(&host.switch);
    b.send(&super::proto::ToDaemon::Register {
        pid: 1,
        device: host.device.clone(),
    });
    let told = b.wait_for(|m| match m {
        ToClient::Registered { device, .. } => Some(device.ports[0].sm_lid),
        _ => None,
    });
    assert_eq!(told, new_sm.lid);
    // Its query to the new SM is a miss that reaches the new SA only.
    let to_new = MadAddr {
        dlid: new_sm.lid,
        dgid: new_sm.gid,
        ..MadAddr::default()
    };
    b.send_mad(&query(1, 0xb1), &to_new);
    b.sync();
    let asked = to_new_sa.recv_timeout(WAIT).expect("a query at the new SA");
    assert_eq!(host.sa_queries_left(), 0, "the old SM was asked");
    moving.answer(&host, asked, 88);
    assert_eq!(answer(&mut b), ok(0xb1, 88));
    host.ask_at(&mut a, &to_new, 1, 0xa3);
    assert_eq!(answer(&mut a), ok(0xa3, 88), "the new SM's answer, cached");
    assert!(to_new_sa.try_recv().is_err(), "asked again");
    assert_eq!(host.counter(SwitchCounter::PortChanges), 1);
}

/// A tenant registered before its port's SM moved was told the old SM LID,
/// and one that cannot read the host's sysfs (in a container) keeps sending
/// its path queries there: sent on to the old SM, uncached, they would time
/// out until the tenant reopened the device. The daemon sends a path query
/// to an SM LID the port had before to the SM it has now, through the
/// cache, and hands the answer back as from the LID the tenant asked (its
/// library takes an answer only from there).
#[test]
fn a_query_to_the_sm_a_port_had_before_goes_to_the_sm_it_has_now() {
    let host = Host::new(3990, SwitchConfig::default());
    let moving = MovingSm::new(&host, 3990, "ibcm-ibcmd-former-sm");
    let (new_sm, to_new_sa) = (moving.new_sm, &moving.to_new_sa);
    let mut a = host.tenant();
    moving.move_sm();
    assert!(host.switch.poll_ports_now(&host.device));
    // `a` asks the SM it was told of, which is not the SM any more.
    host.ask(&mut a, 1, 0xa1);
    let asked = to_new_sa
        .recv_timeout(Duration::from_secs(2))
        .expect("the query sent to the new SM");
    assert_eq!(host.sa_queries_left(), 0, "the old SM was asked");
    moving.answer(&host, asked, 88);
    let (got, from) = answer_from(&mut a);
    assert_eq!(got, ok(0xa1, 88));
    assert_eq!(from.dlid, host.sa_addr.dlid, "as from the SM it asked");
    // Cached: asked again, by it or by a tenant that knows the new SM.
    host.ask(&mut a, 1, 0xa2);
    let (got, from) = answer_from(&mut a);
    assert_eq!((got, from.dlid), (ok(0xa2, 88), host.sa_addr.dlid));
    let to_new = MadAddr {
        dlid: new_sm.lid,
        dgid: new_sm.gid,
        ..MadAddr::default()
    };
    host.ask_at(&mut a, &to_new, 1, 0xa3);
    let (got, from) = answer_from(&mut a);
    assert_eq!((got, from.dlid), (ok(0xa3, 88), new_sm.lid));
    assert!(to_new_sa.try_recv().is_err(), "asked again");
    assert_eq!(host.counter(SwitchCounter::PathCacheHits), 2);
    // A LID that was never the port's SM is not redirected.
    let elsewhere = LoopIdentity::from_name("loop3993").unwrap();
    let to_elsewhere = MadAddr {
        dlid: elsewhere.lid,
        dgid: elsewhere.gid,
        ..MadAddr::default()
    };
    host.ask_at(&mut a, &to_elsewhere, 1, 0xa4);
    assert!(
        to_new_sa.try_recv().is_err(),
        "redirected a query to another LID"
    );
}
