//! The worker's set of ports ([`PollSet`]) on socketpairs read by a stand-in
//! `umad_recv`, each test with a set of its own: ports that join or leave
//! while the worker waits, bursts, and reads by the thread that asks
//! (docs/experiments/README.md).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::AtomicU32;
use std::time::Duration;
use std::time::Instant;

use super::loader::Lib;
use super::poll_set::PollSet;
use super::*;
use crate::wire::MAD_SIZE;

/// `umad_recv` on a socketpair end: one `struct ib_user_mad` and MAD
/// per message, as ib_umad's read gives them.
unsafe extern "C" fn stand_in_recv(
    fd: c_int,
    buf: *mut c_void,
    len: *mut c_int,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: the reader passes its buffer, room for the header and
    // `*len` bytes, and `len` itself.
    let n = unsafe { libc::read(fd, buf, 64 + *len as usize) };
    if n < 0 {
        return -last_errno().0;
    }
    if n == 0 {
        return -libc::EIO;
    }
    // SAFETY: as above.
    unsafe { *len = n as c_int - 64 };
    0
}
unsafe extern "C" fn unused_open(_: *const c_char, _: c_int) -> c_int {
    -libc::ENOSYS
}
unsafe extern "C" fn unused_close(_: c_int) -> c_int {
    0
}
unsafe extern "C" fn unused_unregister(_: c_int, _: c_int) -> c_int {
    0
}
unsafe extern "C" fn unused_send(
    _: c_int,
    _: c_int,
    _: *mut c_void,
    _: c_int,
    _: c_int,
    _: c_int,
) -> c_int {
    -libc::ENOSYS
}

static STAND_IN: Lib = Lib {
    open_port: unused_open,
    close_port: unused_close,
    register2: None,
    register: None,
    unregister: unused_unregister,
    send: unused_send,
    recv: stand_in_recv,
};

/// One port: the end the set reads, the "wire" end, and the sequence
/// numbers (MAD bytes 8..12) of what its `RecvFn` got, in order.
struct Port {
    reader: Arc<Reader>,
    wire: OwnedFd,
    _read_end: OwnedFd,
    got: Arc<Mutex<Vec<u32>>>,
}

fn port() -> Port {
    let mut sv = [0; 2];
    // SAFETY: `sv` has room for the two fds; the result is checked.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    // SAFETY: two new fds that nothing else owns.
    let (read_end, wire) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let reader = Arc::new(Reader {
        lib: &STAND_IN,
        fd: read_end.as_raw_fd(),
        simulated: false,
        burst: WORKER_DRAIN,
        wake: -1,
        port_num: 1,
        dev: "stand-in".into(),
        dead: Arc::new(AtomicBool::new(false)),
        recv: Arc::new(move |_, _, mad: Arc<Mad>| {
            sink.lock()
                .push(u32::from_be_bytes(mad[8..12].try_into().unwrap()))
        }),
    });
    Port {
        reader,
        wire,
        _read_end: read_end,
        got,
    }
}

impl Port {
    /// A MAD numbered `seq` arrives on the port.
    fn arrive(&self, seq: u32) {
        let mut msg = [0u8; 64 + MAD_SIZE];
        msg[64 + 8..64 + 12].copy_from_slice(&seq.to_be_bytes());
        // SAFETY: writes the message from a live buffer.
        let n = unsafe { libc::write(self.wire.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        assert_eq!(n, msg.len() as isize, "{:?}", last_errno());
    }

    fn got(&self) -> Vec<u32> {
        self.got.lock().clone()
    }
}

fn set() -> &'static PollSet {
    Box::leak(Box::new(PollSet::new().unwrap()))
}

/// Polls `set` on a thread of its own until `stop`, as the worker does
/// (waiting with no timeout).
fn poller(set: &'static PollSet, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
    let polls = Arc::new(AtomicU32::new(0));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            set.poll(None).unwrap();
            polls.fetch_add(1, Ordering::Relaxed);
        }
        polls.load(Ordering::Relaxed)
    })
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < until, "not within 5 s: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn stop_poller(set: &'static PollSet, stop: &AtomicBool, thread: JoinHandle<u32>) {
    stop.store(true, Ordering::Release);
    set.wake();
    thread.join().unwrap();
}

/// A port that joins while the worker waits in `ppoll` without it (a
/// second device opened) is polled from then on.
#[test]
fn worker_reads_a_port_that_joins_while_it_waits() {
    let set = set();
    let first = port();
    set.register(first.reader.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let thread = poller(set, stop.clone());
    std::thread::sleep(Duration::from_millis(50)); // in ppoll on `first` alone
    let second = port();
    set.register(second.reader.clone());
    second.arrive(7);
    wait_until("the MAD of the port that joined is read", || {
        second.got() == [7]
    });
    stop_poller(set, &stop, thread);
}

/// `close`: once `deregister` returns, the worker holds no snapshot with
/// the port (it waited for one in progress) and never reads it again.
#[test]
fn worker_never_reads_a_port_once_deregistered() {
    let set = set();
    let p = port();
    set.register(p.reader.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let thread = poller(set, stop.clone());
    p.arrive(1);
    wait_until("the first MAD is read", || p.got() == [1]);
    std::thread::sleep(Duration::from_millis(20)); // back in ppoll on it
    set.deregister(std::slice::from_ref(&p.reader));
    let state = set.state.lock();
    assert!(
        state.holding.is_none_or(|h| h == state.generation),
        "the worker holds a snapshot older than the set"
    );
    drop(state);
    p.arrive(2);
    set.read_now();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(p.got(), [1], "a port read after it left the set");
    assert_eq!(set.count.load(Ordering::SeqCst), 0);
    stop_poller(set, &stop, thread);
}

/// A look drains the port past a reader thread's burst, so a backlog
/// waits in the device's bounded, counted queue rather than in ib_umad's
/// list.
#[test]
fn a_look_drains_past_a_reader_threads_burst() {
    let set = set();
    let p = port();
    set.register(p.reader.clone());
    let sent = u32::try_from(BURST).unwrap() + 36;
    for seq in 0..sent {
        p.arrive(seq);
    }
    set.poll(Some(Duration::ZERO)).unwrap();
    assert_eq!(p.got(), (0..sent).collect::<Vec<_>>());
}

/// What the port holds is read and handed on, in order, by the thread
/// that asks (`ib_cm_notify`, `close`), before that thread queues its own
/// work; the worker then finds the port empty.
#[test]
fn read_now_hands_on_what_the_port_holds_in_order() {
    let set = set();
    let p = port();
    set.register(p.reader.clone());
    for seq in [3, 1, 2] {
        p.arrive(seq);
    }
    set.read_now();
    assert_eq!(p.got(), [3, 1, 2]);
    set.poll(Some(Duration::ZERO)).unwrap();
    assert_eq!(p.got(), [3, 1, 2], "read twice");
}

/// A port whose fd hangs up (the device was removed) is gone and leaves
/// the set, so an idle worker does not wake for it again and again.
#[test]
fn a_port_that_hangs_up_leaves_the_set() {
    let set = set();
    let p = port();
    set.register(p.reader.clone());
    // SAFETY: shuts down the wire end this test owns.
    unsafe { libc::shutdown(p.wire.as_raw_fd(), libc::SHUT_RDWR) };
    set.poll(Some(Duration::from_secs(5))).unwrap();
    assert!(p.reader.dead.load(Ordering::Acquire));
    assert_eq!(set.count.load(Ordering::SeqCst), 0);
    assert!(set.state.lock().ports.is_empty());
}

/// `close` while the worker's `ppoll` has just seen the port readable:
/// `deregister` takes the port out and waits for the snapshot; the
/// worker, which then gets the lock, must not read the port any more
/// (that interleaving forced with the set's lock).
#[test]
fn a_port_is_not_read_once_it_has_left_even_by_a_poll_in_progress() {
    let set = set();
    let p = port();
    set.register(p.reader.clone());
    set.poll(Some(Duration::ZERO)).unwrap(); // takes register's wake-up
    let poller = std::thread::spawn(move || set.poll(None).unwrap());
    std::thread::sleep(Duration::from_millis(50)); // in ppoll on the port
    let held = set.state.lock();
    let r = p.reader.clone();
    let closer = std::thread::spawn(move || set.deregister(std::slice::from_ref(&r)));
    std::thread::sleep(Duration::from_millis(50)); // close waits for the lock
    p.arrive(1); // ppoll returns; the poller waits for the lock after close
    std::thread::sleep(Duration::from_millis(50));
    drop(held);
    closer.join().unwrap();
    poller.join().unwrap();
    assert_eq!(
        p.got(),
        [0u32; 0],
        "the port was read after it left the set"
    );
}
