// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * umad-floor - the least a userspace CM can do per connection over umad.
 *
 * Issue 14 names the floor of a userspace CM: one umad write per MAD sent and
 * one read per MAD received. This tool is that floor and nothing else: no
 * library, no state machine, no timers. It exchanges the
 * five MADs of a connection's life (REQ, REP, RTU, DREQ, DREP; CM class 0x07,
 * method Send, 256 bytes each) with the pattern of `ibcm-cmtime --client`:
 *
 *   connect     every REQ written at once; each REP read is answered with an
 *               RTU; the phase ends when every REP is in
 *   disconnect  every DREQ written at once; the server answers each with a
 *               DREP; the phase ends when every DREP is in
 *
 * One thread, one port: a poll() per wait, then reads until EAGAIN, so each
 * wake-up costs a poll and one empty read besides a read per MAD (both are
 * counted and reported). With
 * --threads, the threads of a CM library instead: a reader thread polls and
 * reads the port and hands each burst to a worker thread through a queue
 * (a mutex and a condition variable), the worker answers (RTU, REP, DREP),
 * and the client's main thread writes the requests and sleeps until the
 * worker has every answer, as ibcm-cmtime's does. The difference between the
 * two modes is what that architecture costs, with no CM in it. With
 * --worker-reads, one thread polls, reads and answers (the worker reading the
 * port itself) while the main thread sleeps as with --threads: the
 * difference to --threads is the reader-to-worker hop alone.
 *
 * --relay (with any of the three) puts a MAD switch's hop in front of the
 * receiving side, as ibcmd does for issue 12: a relay process (forked at
 * start) owns the port's CM agent, and for each MAD it reads writes one
 * message to this process over a SOCK_SEQPACKET socket (1 MiB send buffer,
 * as ibcmd asks); this process reads the socket where it would read the port,
 * with recvmmsg as the library's switch reader does (one call per burst, up
 * to 64 messages: in the thread modes MSG_WAITFORONE with no poll, else a
 * poll first), and sends everything itself with a send-only agent, REPs too
 * (ibcm behind ibcmd sends its REPs through the daemon). The relay routes
 * nothing and keeps no state: it is the least any switch does per received
 * MAD. --relay --threads is the shape of a library process behind ibcmd (a
 * reader thread on the socket, a worker), --relay --worker-reads the best a
 * process behind a switch could do. Against the same mode without --relay
 * it bounds what a daemon hop costs on a given harness. What a
 * run of this costs in a VM (its rate, its process's and the whole VM's CPU)
 * is what any CM on umad pays before its own work; the rest of a CM's cost
 * is the engine's. Side by side with the kernel CM, it says how much of a
 * gap an engine can close at all (scripts/perf/side-by-side-2vm.sh).
 *
 *   server: umad-floor --server -d rxe0       (exits after the client's "bye")
 *   client: umad-floor --client ::ffff:10.78.0.2 -d rxe0 -c 1000 [--json]
 *
 * RoCE only (the client picks the port's first IPv4-mapped RoCE v2 GID, as
 * ibcm_init_path does). Needs the port's CM agent: not where the kernel CM
 * (ib_cm) is loaded. A phase with no new answer for a second writes the
 * missing requests again (counted per phase as "resent": a run that resent
 * is no floor, the summary flags it); the server answers every copy. An
 * answer of the other phase or to a copy is counted as "late" and otherwise
 * ignored. The payload's first four bytes (a comm ID's place) carry the
 * connection's index; the transaction ID's low 32 bits are the attribute's
 * low byte and the index, so no two MADs in flight share one (ib_umad
 * refuses a send whose TID is still queued, and sets the high 32 bits
 * itself). Nothing else in a message means anything.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <infiniband/umad.h>

#define PROG		"umad-floor"
#define PORT_NUM	1
#define MAD_SIZE	256
#define CM_CLASS	0x07
#define CM_VERSION	2
#define METHOD_SEND	0x03
#define QP1_QKEY	0x80010000u
#define ROCE_HOP_LIMIT	64
#define RESEND_MS	1000
#define GIVE_UP_MS	60000
#define MAX_CONNS	1000000
#define BURST		64
#define RELAY_SNDBUF	(1 << 20)	/* ibcmd's CLIENT_SEND_BUFFER */
#define RELAY_DRAIN	1024		/* a relay's reads per wake-up, at most */
#define RELAY_BATCH	64		/* messages per recvmmsg, as the library's */

/* CM attribute IDs (kernel-cm-spec.md); BYE is REJ's, told apart by mode. */
enum attr { REQ = 0x0010, REJ_BYE = 0x0012, REP = 0x0013, RTU = 0x0014,
	    DREQ = 0x0015, DREP = 0x0016 };

struct msg {
	struct ib_user_mad hdr;
	uint8_t mad[MAD_SIZE];
};

/* What one phase of the client saw. */
struct phase_stats {
	uint64_t resent;	/* requests written again */
	uint64_t late;		/* answers to a copy, or of the other phase */
	double total_ms;
};

static struct {
	int fd, agent;
	/* --relay: the socket to the relay (read instead of fd), its pid */
	bool relay;
	int rx_fd;
	pid_t relay_pid;
	int relay_status;	/* its wait status once reaped; -1 (not an exit) before */
	bool stopping;		/* atomic: the relay is being stopped, not lost */
	struct relay_counts *rc;	/* shared with the relay, which alone writes */
	const char *dev;
	unsigned int conns;
	bool json;
	/* atomic: the reader, the worker and the main thread count */
	uint64_t sent, received, ignored, polls, empty_reads;
	uint64_t in_flight;	/* a copy's answer or request not written: one is queued */
	uint64_t by_attr[8];	/* server: received, by attribute - REQ */
	/* client, under `lock` */
	struct ib_mad_addr peer;
	uint16_t expect;	/* the answer this phase waits for */
	struct phase_stats *phase;
	uint8_t *answered;	/* per connection: this phase's answer is in */
	unsigned int done;	/* answers in, this phase */
	/* under `lock` */
	bool bye;		/* server: the client's farewell came */
	bool failed;		/* a --threads thread failed (server and client) */
	/* --threads: the reader's queue to the worker */
	enum { ONE_THREAD, READER_WORKER, WORKER_READS } threads;
	pthread_mutex_t lock;
	pthread_cond_t queued, finished;
	struct item *queue;
	size_t head, tail, cap;
} fl = { .fd = -1, .rx_fd = -1, .relay_status = -1, .conns = 1000, .lock = PTHREAD_MUTEX_INITIALIZER,
	 .queued = PTHREAD_COND_INITIALIZER };

/* What the relay did, in memory it shares with the tool (read once reaped). */
struct relay_counts {
	uint64_t forwarded;	/* MADs written to the socket */
	uint64_t would_block;	/* of them, found the socket full first (ibcmd drops those) */
	uint64_t polls;
};

/* A received CM MAD, as far as this tool cares. */
struct item {
	struct ib_mad_addr from;
	uint16_t attr;
	uint32_t index;
};

/* Handles one received MAD: 1 if it was a new answer, 0 if not, -1 on error. */
typedef int got_fn(const struct ib_mad_addr *from, uint16_t attr, uint32_t index);

#define COUNT(counter) __atomic_fetch_add(&fl.counter, 1, __ATOMIC_RELAXED)
#define LOAD(counter) ((unsigned long long)__atomic_load_n(&fl.counter, __ATOMIC_RELAXED))

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void put_be16(uint8_t *p, uint16_t v) { v = htobe16(v); memcpy(p, &v, 2); }
static void put_be32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static uint16_t get_be16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return be16toh(v); }
static uint32_t get_be32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }

/*
 * Opens the port with the CM agent (`cm_agent`: receives the port's CM
 * MADs; only one per port may) or a send-only agent (no class: the kernel
 * hands it nothing, its sends go out as any other's).
 */
static int open_agent(bool cm_agent)
{
	long mask[16 / sizeof(long)] = { 0 };

	if (umad_init() < 0) {
		fprintf(stderr, PROG ": umad_init failed\n");
		return -1;
	}
	fl.fd = umad_open_port(fl.dev, PORT_NUM);
	if (fl.fd < 0) {
		fprintf(stderr, PROG ": umad_open_port(%s, %d): %s\n", fl.dev,
			PORT_NUM, strerror(-fl.fd));
		return -1;
	}
	mask[METHOD_SEND / (8 * sizeof(long))] |= 1L << (METHOD_SEND % (8 * sizeof(long)));
	fl.agent = cm_agent ? umad_register(fl.fd, CM_CLASS, CM_VERSION, 0, mask) :
			      umad_register(fl.fd, 0, 0, 0, NULL);
	if (fl.agent < 0) {
		fprintf(stderr, PROG ": umad_register(%s): %s%s\n",
			cm_agent ? "CM class" : "send-only", strerror(-fl.agent),
			cm_agent ? " (is ib_cm loaded?)" : "");
		return -1;
	}
	return 0;
}

/* Writes one message; a full socket is counted, then waited for. */
static int relay_send(int sock, const void *buf, size_t len)
{
	if (send(sock, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
		goto sent;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return -1;
	fl.rc->would_block++;
	if (send(sock, buf, len, MSG_NOSIGNAL) < 0)
		return -1;
sent:
	fl.rc->forwarded++;
	return 0;
}

/*
 * --relay, in the forked relay process: owns the CM agent and writes each
 * MAD it reads to `sock` as one message (the header and the MAD, as ibcmd
 * hands a MAD on), blocking when the socket is full (a floor drops nothing;
 * ibcmd would count the loss). Says 0 (or -1) on `sock` once the agent is
 * registered. Ends when the other end closes, or with its parent.
 */
static int relay_main(int sock, pid_t parent)
{
	struct pollfd p[2] = { { .events = POLLIN }, { .fd = sock, .events = POLLIN } };
	int status;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		return 1;
	status = open_agent(true);
	if (send(sock, &status, sizeof(status), MSG_NOSIGNAL) != sizeof(status) || status)
		return 1;
	p[0].fd = fl.fd;
	for (;;) {
		fl.rc->polls++;
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, PROG ": relay: poll: %s\n", strerror(errno));
			return 1;
		}
		if (p[1].revents)	/* the other end closed (or wrote: it never does) */
			return 0;
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			fprintf(stderr, PROG ": relay: the port went away\n");
			return 1;
		}
		for (int n = 0; n < RELAY_DRAIN; n++) {
			struct msg m;
			int len = MAD_SIZE, ret = umad_recv(fl.fd, &m, &len, 0);

			if (ret == -EAGAIN || ret == -EWOULDBLOCK)
				break;
			if (ret < 0) {
				fprintf(stderr, PROG ": relay: umad_recv: %s\n", strerror(-ret));
				return 1;
			}
			if (relay_send(sock, &m, sizeof(m.hdr) + (size_t)len))
				return errno == EPIPE ? 0 : 1;
		}
	}
}

/* --relay: forks the relay, then opens a send-only agent for this process. */
static int start_relay(void)
{
	int sv[2], size = RELAY_SNDBUF, status = -1;
	pid_t parent = getpid();

	fl.rc = mmap(NULL, sizeof(*fl.rc), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		     -1, 0);
	if (fl.rc == MAP_FAILED) {
		fprintf(stderr, PROG ": mmap: %s\n", strerror(errno));
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		fprintf(stderr, PROG ": socketpair: %s\n", strerror(errno));
		return -1;
	}
	/* The relay's end sends: its buffer holds what this process has not read. */
	if (setsockopt(sv[1], SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)))
		setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	fflush(NULL);
	fl.relay_pid = fork();
	if (fl.relay_pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		return -1;
	}
	if (fl.relay_pid == 0) {
		close(sv[0]);
		_exit(relay_main(sv[1], parent));
	}
	close(sv[1]);
	fl.rx_fd = sv[0];
	if (recv(fl.rx_fd, &status, sizeof(status), 0) != sizeof(status) || status) {
		fprintf(stderr, PROG ": the relay did not start\n");
		return -1;
	}
	return open_agent(false);
}

static int open_port(void)
{
	return fl.relay ? start_relay() : open_agent(true);
}

/*
 * --relay: shuts the socket down (the fd stays valid for a thread still
 * waiting on it), so that the relay ends, and reaps it: its CPU then counts
 * in this process's children, as /usr/bin/time reports it, and its counters
 * and exit status can be reported. Also when the relay ended by itself.
 */
static void stop_relay(void)
{
	if (!fl.relay || fl.relay_pid <= 0)
		return;
	__atomic_store_n(&fl.stopping, true, __ATOMIC_RELAXED);
	shutdown(fl.rx_fd, SHUT_RDWR);
	while (waitpid(fl.relay_pid, &fl.relay_status, 0) < 0 && errno == EINTR)
		;
	fl.relay_pid = 0;
}

/* The relay's exit code once reaped (-1: killed by a signal). */
static int relay_exit(void)
{
	return WIFEXITED(fl.relay_status) ? WEXITSTATUS(fl.relay_status) : -1;
}

/* The relay closed its socket before the tool stopped it. */
static int relay_lost(void)
{
	if (!__atomic_load_n(&fl.stopping, __ATOMIC_RELAXED))
		fprintf(stderr, PROG ": the relay closed its socket\n");
	return -1;
}

/*
 * One received message of `len` bytes of MAD: counted, ignored unless it is
 * a good CM MAD, else handed to `got`, whose answer adds to `*fresh`.
 * Returns 1 for a CM MAD, 0 for one ignored, -1 if `got` failed.
 */
static int take(const struct msg *m, int len, got_fn *got, int *fresh)
{
	int ret;

	COUNT(received);
	if (m->hdr.status || len < 28 || m->mad[1] != CM_CLASS) {
		COUNT(ignored);
		return 0;
	}
	ret = got(&m->hdr.addr, get_be16(&m->mad[16]), get_be32(&m->mad[24]));
	if (ret < 0)
		return -1;
	*fresh += ret;
	return 1;
}

/*
 * drain() for --relay: the socket, as the library's switch reader reads
 * the daemon's (recvmmsg, up to RELAY_BATCH a call; a short batch means it
 * is empty). With `ms` < 0 (the thread modes) no poll: the first call
 * blocks for one message (MSG_WAITFORONE), else a poll of `ms` first.
 */
static int drain_relay(int ms, got_fn *got, int max)
{
	struct msg m[RELAY_BATCH];
	struct iovec iov[RELAY_BATCH];
	struct mmsghdr h[RELAY_BATCH];
	int flags = MSG_WAITFORONE, n = 0, fresh = 0;

	if (ms >= 0) {
		struct pollfd p = { .fd = fl.rx_fd, .events = POLLIN };
		int ready;

		COUNT(polls);
		ready = poll(&p, 1, ms);
		if (ready < 0 && errno != EINTR) {
			fprintf(stderr, PROG ": poll: %s\n", strerror(errno));
			return -1;
		}
		if (ready <= 0)
			return 0;
		flags = MSG_DONTWAIT;
	}
	while (n < max) {
		int want = max - n < RELAY_BATCH ? max - n : RELAY_BATCH, got_n;

		for (int i = 0; i < want; i++) {
			iov[i] = (struct iovec){ .iov_base = &m[i], .iov_len = sizeof(m[i]) };
			h[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[i], .msg_iovlen = 1 } };
		}
		got_n = recvmmsg(fl.rx_fd, h, (unsigned int)want, flags, NULL);
		flags = MSG_DONTWAIT;
		if (got_n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				COUNT(empty_reads);
				break;
			}
			if (errno == EINTR)
				continue;
			if (__atomic_load_n(&fl.stopping, __ATOMIC_RELAXED))
				return -1;
			fprintf(stderr, PROG ": recvmmsg from the relay: %s\n", strerror(errno));
			return -1;
		}
		if (got_n == 0)
			return relay_lost();
		for (int i = 0; i < got_n; i++) {
			int len = (int)h[i].msg_len - (int)sizeof(m[i].hdr), ret;

			if (h[i].msg_len == 0)	/* end of file: the relay is gone */
				return relay_lost();
			ret = take(&m[i], len, got, &fresh);
			if (ret < 0)
				return -1;
			n += ret;
		}
		if (got_n < want)	/* the socket is empty: no empty read needed */
			break;
	}
	return fresh;
}

/*
 * One write: a CM MAD `attr` for connection `index` to `to`. Returns 0, or
 * -errno (reported here unless it is -EINVAL on a resend: ib_umad's answer
 * when the same TID is still queued, i.e. the last copy is still in flight).
 */
static int send_mad(const struct ib_mad_addr *to, uint16_t attr, uint32_t index, bool resend)
{
	struct msg m;
	uint64_t tid = htobe64((uint64_t)(attr & 0xff) << 24 | index);

	memset(&m, 0, sizeof(m));
	m.hdr.agent_id = (uint32_t)fl.agent;
	m.hdr.length = MAD_SIZE;
	m.hdr.addr = *to;
	m.mad[0] = 1;			/* base version */
	m.mad[1] = CM_CLASS;
	m.mad[2] = CM_VERSION;
	m.mad[3] = METHOD_SEND;
	memcpy(&m.mad[8], &tid, 8);
	put_be16(&m.mad[16], attr);
	put_be32(&m.mad[24], index);	/* where a local comm ID goes */
	if (umad_send(fl.fd, fl.agent, &m, MAD_SIZE, 0, 0) < 0) {
		int err = errno;

		if (!(resend && err == EINVAL))
			fprintf(stderr, PROG ": umad_send: %s\n", strerror(err));
		return -err;
	}
	COUNT(sent);
	return 0;
}

/*
 * Waits up to `ms` for the port, then reads until EAGAIN (at most `max` CM
 * MADs), calling `got` for each. Returns the new answers among them (what
 * `got` says), or -1.
 */
static int drain(int ms, got_fn *got, int max)
{
	struct pollfd p = { .fd = fl.fd, .events = POLLIN };
	struct msg m;
	int n = 0, fresh = 0;

	if (fl.relay)
		return drain_relay(ms, got, max);
	COUNT(polls);
	if (poll(&p, 1, ms) < 0) {
		if (errno == EINTR)
			return 0;
		fprintf(stderr, PROG ": poll: %s\n", strerror(errno));
		return -1;
	}
	if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) {
		fprintf(stderr, PROG ": the port went away (poll revents %#x)\n", p.revents);
		return -1;
	}
	while (n < max) {
		int len = MAD_SIZE;
		int ret = umad_recv(fl.fd, &m, &len, 0);

		if (ret < 0) {
			if (ret == -EAGAIN || ret == -EWOULDBLOCK) {
				COUNT(empty_reads);
				break;
			}
			fprintf(stderr, PROG ": umad_recv: %s\n", strerror(-ret));
			return -1;
		}
		ret = take(&m, len, got, &fresh);
		if (ret < 0)
			return -1;
		n += ret;
	}
	return fresh;
}

/* ---- --threads: a reader thread hands bursts to a worker thread ---- */

static struct item burst[BURST];	/* the reader thread's alone */
static int burst_len;
static got_fn *worker_got;

static int to_burst(const struct ib_mad_addr *from, uint16_t attr, uint32_t index)
{
	burst[burst_len++] = (struct item){ .from = *from, .attr = attr, .index = index };
	return 0;
}

/* A thread failed: the main thread gives up (it reports, then exits). */
static void *thread_failed(void)
{
	pthread_mutex_lock(&fl.lock);
	fl.failed = true;
	pthread_cond_broadcast(&fl.finished);
	pthread_mutex_unlock(&fl.lock);
	return NULL;
}

/* Appends the reader's burst to the queue; false if out of memory. */
static bool enqueue_burst(void)
{
	if (fl.head == fl.tail) {
		fl.head = fl.tail = 0;
	} else if (fl.head > fl.cap / 2) {	/* keep the queue as long as the backlog */
		memmove(fl.queue, fl.queue + fl.head, (fl.tail - fl.head) * sizeof(*fl.queue));
		fl.tail -= fl.head;
		fl.head = 0;
	}
	for (int i = 0; i < burst_len; i++) {
		if (fl.tail == fl.cap) {	/* grow: a floor drops nothing */
			size_t cap = fl.cap ? 2 * fl.cap : 1024;
			struct item *q = realloc(fl.queue, cap * sizeof(*q));

			if (!q)
				return false;
			fl.queue = q;
			fl.cap = cap;
		}
		fl.queue[fl.tail++] = burst[i];
	}
	return true;
}

static void *reader(void *arg)
{
	(void)arg;
	for (;;) {
		bool was_empty, ok;

		burst_len = 0;
		if (drain(-1, to_burst, BURST) < 0)
			return thread_failed();
		if (!burst_len)
			continue;
		pthread_mutex_lock(&fl.lock);
		was_empty = fl.head == fl.tail;
		ok = enqueue_burst();
		pthread_mutex_unlock(&fl.lock);
		if (!ok)
			return thread_failed();
		if (was_empty)	/* one wake-up per burst, as the library's reader */
			pthread_cond_signal(&fl.queued);
	}
	return NULL;
}

static void *worker(void *arg)
{
	struct item batch[BURST];

	(void)arg;
	for (;;) {
		int n = 0;

		pthread_mutex_lock(&fl.lock);
		while (fl.head == fl.tail)
			pthread_cond_wait(&fl.queued, &fl.lock);
		while (n < BURST && fl.head < fl.tail)
			batch[n++] = fl.queue[fl.head++];
		pthread_mutex_unlock(&fl.lock);
		for (int i = 0; i < n; i++)
			if (worker_got(&batch[i].from, batch[i].attr, batch[i].index) < 0)
				return thread_failed();
	}
	return NULL;
}

/* --worker-reads: the thread that reads the port answers what it read. */
static void *reading_worker(void *arg)
{
	(void)arg;
	for (;;)
		if (drain(-1, worker_got, BURST) < 0)
			return thread_failed();
	return NULL;
}

static int start_threads(got_fn *got)
{
	pthread_t t;
	int err;

	worker_got = got;
	if (fl.threads == WORKER_READS)
		err = pthread_create(&t, NULL, reading_worker, NULL);
	else
		err = pthread_create(&t, NULL, worker, NULL) ||
		      pthread_create(&t, NULL, reader, NULL);
	if (err) {
		fprintf(stderr, PROG ": pthread_create failed\n");
		return -1;
	}
	return 0;
}

/* ---- server ---- */

/*
 * The server's answer to a request. A copy of a request can come while the
 * answer to the first is still queued in ib_umad, which then refuses the
 * second answer with -EINVAL (same TID): the first is on its way, counted.
 */
static int answer(const struct ib_mad_addr *to, uint16_t attr, uint32_t index)
{
	int ret = send_mad(to, attr, index, true);

	if (ret == -EINVAL)
		COUNT(in_flight);
	return ret && ret != -EINVAL ? -1 : 0;
}

static int server_got(const struct ib_mad_addr *from, uint16_t attr, uint32_t index)
{
	if (attr >= REQ && attr < REQ + 8)
		COUNT(by_attr[attr - REQ]);
	switch (attr) {
	case REQ:
		return answer(from, REP, index);
	case DREQ:
		return answer(from, DREP, index);
	case REJ_BYE:
		pthread_mutex_lock(&fl.lock);
		fl.bye = true;
		pthread_cond_broadcast(&fl.finished);
		pthread_mutex_unlock(&fl.lock);
		return 0;
	case RTU:
		return 0;
	default:
		COUNT(ignored);
		return 0;
	}
}

static int serve(void)
{
	bool failed = false, bye = false;

	printf(PROG ": server: listening on %s port %d\n", fl.dev, PORT_NUM);
	fflush(stdout);
	if (fl.threads) {
		if (start_threads(server_got))
			return -1;
		pthread_mutex_lock(&fl.lock);
		while (!fl.bye && !fl.failed)
			pthread_cond_wait(&fl.finished, &fl.lock);
		failed = fl.failed;
		bye = fl.bye;
		pthread_mutex_unlock(&fl.lock);
	}
	while (!failed && !bye) {	/* one thread: fl.bye is this thread's */
		if (drain(-1, server_got, INT32_MAX) < 0)
			failed = true;
		bye = fl.bye;
	}
	stop_relay();
	if (fl.relay)
		printf(PROG ": server: relay forwarded %llu MADs (%llu found the socket full), "
		       "%llu polls, exit %d\n", (unsigned long long)fl.rc->forwarded,
		       (unsigned long long)fl.rc->would_block, (unsigned long long)fl.rc->polls,
		       relay_exit());
	printf(PROG ": server: %s; %llu MADs received (REQ %llu, RTU %llu, DREQ %llu), "
	       "%llu sent, %llu in flight, %llu ignored, %llu polls, %llu empty reads\n",
	       failed ? "failed" : "bye", LOAD(received), LOAD(by_attr[0]),
	       LOAD(by_attr[RTU - REQ]), LOAD(by_attr[DREQ - REQ]), LOAD(sent),
	       LOAD(in_flight), LOAD(ignored), LOAD(polls), LOAD(empty_reads));
	return failed || (fl.relay && relay_exit()) ? -1 : 0;
}

/* ---- client ---- */

static int client_got(const struct ib_mad_addr *from, uint16_t attr, uint32_t index)
{
	bool first;

	(void)from;
	if ((attr != REP && attr != DREP) || index >= fl.conns) {
		COUNT(ignored);
		return 0;
	}
	pthread_mutex_lock(&fl.lock);
	first = attr == fl.expect && !fl.answered[index];
	if (first) {
		fl.answered[index] = 1;
		if (++fl.done == fl.conns)
			pthread_cond_broadcast(&fl.finished);
	} else {
		fl.phase->late++;
	}
	pthread_mutex_unlock(&fl.lock);
	if (!first)
		return 0;
	if (attr == REP && send_mad(&fl.peer, RTU, index, false))
		return -1;
	return 1;
}

/*
 * Waits up to `ms` for answers: in this thread, or (--threads,
 * --worker-reads) for the worker's. Returns the new answers that came in
 * (0 also when only copies, late answers or nothing came), or -1.
 */
static int wait_answers(int ms)
{
	struct timespec until;
	unsigned int before;
	bool failed;
	int rc = 0;

	if (fl.threads == ONE_THREAD)
		return drain(ms, client_got, INT32_MAX);
	clock_gettime(CLOCK_MONOTONIC, &until);	/* `finished`'s clock */
	until.tv_sec += ms / 1000;
	until.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&fl.lock);
	before = fl.done;
	while (fl.done < fl.conns && fl.done == before && !fl.failed && rc == 0)
		rc = pthread_cond_timedwait(&fl.finished, &fl.lock, &until);
	before = fl.done - before;
	failed = fl.failed || (rc && rc != ETIMEDOUT);
	pthread_mutex_unlock(&fl.lock);
	return failed ? -1 : (int)before;
}

static unsigned int answers_in(void)
{
	unsigned int done;

	pthread_mutex_lock(&fl.lock);
	done = fl.done;
	pthread_mutex_unlock(&fl.lock);
	return done;
}

/* One phase: every `ask` written, then answers read until all are in. */
static int run_phase(uint16_t ask, uint16_t answer, struct phase_stats *stats)
{
	uint64_t start = now_ns(), last_new = start, last_ask = start;
	const uint64_t resend_ns = RESEND_MS * 1000000ull;

	pthread_mutex_lock(&fl.lock);
	memset(fl.answered, 0, fl.conns);
	fl.done = 0;
	fl.expect = answer;
	fl.phase = stats;
	pthread_mutex_unlock(&fl.lock);
	for (unsigned int i = 0; i < fl.conns; i++)
		if (send_mad(&fl.peer, ask, i, false))
			return -1;
	while (answers_in() < fl.conns) {
		/* A second since the last new answer and the last writing. */
		uint64_t quiet = last_new > last_ask ? last_new : last_ask, now = now_ns();
		int n = wait_answers(now - quiet < resend_ns ?
				     (int)((resend_ns - (now - quiet)) / 1000000) + 1 : 0);

		if (n < 0)
			return -1;
		now = now_ns();
		if (n > 0)
			last_new = now;
		if (n > 0 || now - quiet < resend_ns)
			continue;
		if (now - last_new > GIVE_UP_MS * 1000000ull) {
			fprintf(stderr, PROG ": %u of %u answers missing for %d ms\n",
				fl.conns - answers_in(), fl.conns, GIVE_UP_MS);
			return -1;
		}
		for (unsigned int i = 0; i < fl.conns; i++) {
			bool missing;
			int ret;

			pthread_mutex_lock(&fl.lock);
			missing = !fl.answered[i];
			pthread_mutex_unlock(&fl.lock);
			if (!missing)
				continue;
			ret = send_mad(&fl.peer, ask, i, true);
			if (ret && ret != -EINVAL)	/* -EINVAL: the last copy is in flight */
				return -1;
			if (ret) {
				COUNT(in_flight);
				continue;
			}
			pthread_mutex_lock(&fl.lock);
			stats->resent++;
			pthread_mutex_unlock(&fl.lock);
		}
		last_ask = now_ns();
	}
	stats->total_ms = (double)(now_ns() - start) / 1e6;
	return 0;
}

/* The port's first IPv4-mapped RoCE v2 GID, as ibcm_init_path picks. */
static int roce_v2_sgid_index(void)
{
	char path[256], text[64];

	for (int i = 0; i < 256; i++) {
		FILE *f;
		bool v2, mapped;

		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
			 fl.dev, PORT_NUM, i);
		f = fopen(path, "r");
		if (!f)
			continue;
		v2 = fgets(text, sizeof(text), f) && strncmp(text, "RoCE v2", 7) == 0;
		fclose(f);
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gids/%d",
			 fl.dev, PORT_NUM, i);
		f = fopen(path, "r");
		if (!f)
			continue;
		mapped = fgets(text, sizeof(text), f) &&
			 strncmp(text, "0000:0000:0000:0000:0000:ffff:", 30) == 0;
		fclose(f);
		if (v2 && mapped)
			return i;
	}
	fprintf(stderr, PROG ": %s port %d: no IPv4-mapped RoCE v2 GID\n", fl.dev, PORT_NUM);
	return -1;
}

static const char *const thread_names[] = { "one", "reader+worker", "worker-reads" };

static int client(const uint8_t dgid[16])
{
	static struct phase_stats ph[2];	/* fl.phase outlives this call */
	int sgid = roce_v2_sgid_index();

	if (sgid < 0)
		return -1;
	fl.peer = (struct ib_mad_addr){
		.qpn = htobe32(1),
		.qkey = htobe32(QP1_QKEY),
		.grh_present = 1,
		.gid_index = (uint8_t)sgid,
		.hop_limit = ROCE_HOP_LIMIT,
	};
	memcpy(fl.peer.gid, dgid, 16);
	fl.answered = calloc(fl.conns, 1);
	fl.phase = &ph[0];
	if (!fl.answered || (fl.threads && start_threads(client_got)))
		return -1;
	if (run_phase(REQ, REP, &ph[0]) || run_phase(DREQ, DREP, &ph[1]))
		return -1;
	for (uint32_t i = 0; i < 3; i++)	/* a lost bye leaves the server up: three */
		send_mad(&fl.peer, REJ_BYE, i, false);
	stop_relay();
	pthread_mutex_lock(&fl.lock);	/* the worker may still count a late answer */
	if (fl.json) {
		printf("{\n  \"mode\": \"client\",\n  \"tool\": \"" PROG "\",\n"
		       "  \"threads\": \"%s\",\n", thread_names[fl.threads]);
		if (fl.relay)
			printf("  \"relay\": { \"forwarded\": %llu, \"would_block\": %llu, "
			       "\"polls\": %llu, \"exit\": %d },\n",
			       (unsigned long long)fl.rc->forwarded,
			       (unsigned long long)fl.rc->would_block,
			       (unsigned long long)fl.rc->polls, relay_exit());
		printf("  \"status\": \"ok\",\n  \"connections\": %u,\n"
		       "  \"mads_sent\": %llu,\n  \"mads_received\": %llu,\n"
		       "  \"ignored\": %llu,\n  \"polls\": %llu,\n  \"empty_reads\": %llu,\n"
		       "  \"resent\": %llu,\n  \"in_flight\": %llu,\n  \"phases\": [\n",
		       fl.conns, LOAD(sent), LOAD(received),
		       LOAD(ignored), LOAD(polls), LOAD(empty_reads),
		       (unsigned long long)(ph[0].resent + ph[1].resent), LOAD(in_flight));
		for (int i = 0; i < 2; i++)
			printf("    { \"phase\": \"%s\", \"total_ms\": %.3f, \"resent\": %llu, "
			       "\"late\": %llu }%s\n", i ? "disconnect" : "connect",
			       ph[i].total_ms, (unsigned long long)ph[i].resent,
			       (unsigned long long)ph[i].late, i ? "" : ",");
		printf("  ]\n}\n");
	} else {
		printf("%u connections: connect %.1f ms = %.0f/s, disconnect %.1f ms = %.0f/s; "
		       "%llu MADs sent, %llu received, %llu resent, %llu polls, %llu empty reads\n",
		       fl.conns, ph[0].total_ms, fl.conns / (ph[0].total_ms / 1000), ph[1].total_ms,
		       fl.conns / (ph[1].total_ms / 1000), LOAD(sent), LOAD(received),
		       (unsigned long long)(ph[0].resent + ph[1].resent), LOAD(polls),
		       LOAD(empty_reads));
		if (fl.relay)
			printf("relay: forwarded %llu MADs (%llu found the socket full), "
			       "%llu polls, exit %d\n", (unsigned long long)fl.rc->forwarded,
			       (unsigned long long)fl.rc->would_block,
			       (unsigned long long)fl.rc->polls, relay_exit());
	}
	fflush(stdout);
	pthread_mutex_unlock(&fl.lock);
	return fl.relay && relay_exit() ? -1 : 0;
}

/* `finished` waits on CLOCK_MONOTONIC: a clock step must not cut a wait short. */
static int init_finished(void)
{
	pthread_condattr_t attr;

	if (pthread_condattr_init(&attr) || pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) ||
	    pthread_cond_init(&fl.finished, &attr)) {
		fprintf(stderr, PROG ": pthread_cond_init failed\n");
		return -1;
	}
	pthread_condattr_destroy(&attr);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " --server [-d dev] [--threads | --worker-reads] [--relay]\n"
		"       " PROG " --client GID [-d dev] [-c connections] [--threads | --worker-reads]\n"
		"                  [--relay] [--json]\n"
		"The five MADs of each connection over umad, nothing else (see the source).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", no_argument, NULL, 'S' },
		{ "client", required_argument, NULL, 'C' },
		{ "dev", required_argument, NULL, 'd' },
		{ "connections", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "threads", no_argument, NULL, 'T' },
		{ "worker-reads", no_argument, NULL, 'W' },
		{ "relay", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	bool server = false;
	const char *peer = NULL;
	uint8_t dgid[16];
	char *end;
	int opt;

	fl.dev = "rxe0";
	while ((opt = getopt_long(argc, argv, "d:c:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'S': server = true; break;
		case 'C': peer = optarg; break;
		case 'd': fl.dev = optarg; break;
		case 'j': fl.json = true; break;
		case 'T': fl.threads = READER_WORKER; break;
		case 'W': fl.threads = WORKER_READS; break;
		case 'R': fl.relay = true; break;
		case 'c': {
			unsigned long v;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || optarg[0] < '0' || optarg[0] > '9' ||
			    v < 1 || v > MAX_CONNS) {
				fprintf(stderr, PROG ": -c takes 1..%d\n", MAX_CONNS);
				return 2;
			}
			fl.conns = (unsigned int)v;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (server == !!peer || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (peer && inet_pton(AF_INET6, peer, dgid) != 1) {
		fprintf(stderr, PROG ": %s is not a GID (IPv6 notation)\n", peer);
		return 2;
	}
	if (init_finished() || open_port())
		return 1;
	return (server ? serve() : client(dgid)) ? 1 : 0;
}
