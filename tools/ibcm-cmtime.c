// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * ibcm-cmtime - connection setup and teardown benchmark for libib_cm,
 * shaped like rdma-core's cmtime (librdmacm/examples/cmtime.c).
 *
 * Three modes:
 *
 *   (default)           one process: active ids on -d connect to a listener
 *                       on -D (loop0/loop1 of the in-process fabric, or two
 *                       real devices opened by the same process)
 *   --server            the passive side alone: listens on -D, answers REQs
 *                       with a REP and DREQs with a DREP, until a client says
 *                       it is done (a farewell REQ it rejects) or a signal
 *   --client GID        the active side alone: connects N times through -d to
 *                       the server whose port has that GID
 *
 * No QPs: this tool never creates a QP. The QPNs in REQ and REP are made up
 * (unique per connection), so the numbers are the CM's alone; rdma-core's
 * cmtime creates a QP per connection and goes through rdma_cm.
 *
 * Each phase starts its operation for every connection back to back and
 * stamps each connection's start (here) and completion (in the CM handler,
 * on the library's event thread). So a row of the table gives both the
 * phase's throughput and each connection's latency under that load. With
 * --sequential every connection runs all four phases alone before the next
 * starts, so the latencies are latencies, not queueing:
 *
 *   create id   ib_create_cm_id() of the active ids
 *   connect     ib_send_cm_req() until ESTABLISHED: REQ, REP from the
 *               passive handler, RTU from the active handler; in one process
 *               until RTU_RECEIVED on the passive side too, with --client
 *               until the active side has sent its RTU (as cmtime's client
 *               sees RDMA_CM_EVENT_ESTABLISHED)
 *   disconnect  ib_send_cm_dreq() until DREP_RECEIVED, the DREP sent by
 *               the passive handler: the whole DREQ/DREP round trip, as
 *               cmtime timed it up to rdma-core v51
 *   destroy     ib_destroy_cm_id() of the connection's ids (the active id
 *               only with --client)
 *
 * Before the timed run, one untimed warm-up connection goes through all four
 * phases (as in cmtime since rdma-core v52; --no-warmup leaves it out).
 *
 * In the one-process phased mode the tool also reads /proc/self/statm
 * before the ids are created and once every connection is established, and
 * reports the growth of the resident set per connection and per cm_id.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/ib_cm.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PROG "ibcm-cmtime"

#define NSEC_PER_USEC	1000ULL
#define NSEC_PER_MSEC	1000000ULL
#define NSEC_PER_SEC	1000000000ULL

#define DEFAULT_CONNS		1000
/* Keeps both sides' QPNs distinct and within 24 bits. */
#define MAX_CONNS		1000000
#define PORT_NUM		1
#define SERVICE_ID		0x1234
#define ACTIVE_QPN_BASE		0x1000
#define PASSIVE_QPN_FLAG	0x800000
#define QPN_MASK		0xffffff
/* rdma_cm's CMA_CM_RESPONSE_TIMEOUT (4096 ms a try) and CMA_MAX_CM_RETRIES. */
#define CM_RESPONSE_TIMEOUT	20
#define MAX_CM_RETRIES		15
/* GIDs a server lists (ibcm_query_gid index 0 ..). */
#define MAX_GIDS		16

/*
 * The client's last REQ carries this connection index: the server rejects it
 * and exits. Its retries are short, so a client whose server is gone does
 * not wait long for the answer.
 */
#define FAREWELL_INDEX		0xffffffffu
#define FAREWELL_QPN		0x7fffff
#define FAREWELL_TIMEOUT	16	/* 4.096 us * 2^16 = 268 ms a try */
#define FAREWELL_RETRIES	3
#define FAREWELL_WAIT_NS	(5 * NSEC_PER_SEC)

/* A phase that has not finished by then has lost something: give up. */
#define PHASE_TIMEOUT_NS	(60 * NSEC_PER_SEC)
#define PHASE_TIMEOUT_PER_CONN_NS NSEC_PER_MSEC
/* How often the main thread looks at a running phase (progress, timeout). */
#define POLL_INTERVAL_NS	(100 * NSEC_PER_MSEC)
/* Runs this long (tens of seconds) get a progress line every 10% without -p. */
#define PROGRESS_MIN_CONNS	100000
/* Messages about single connections; the counts are always complete. */
#define MAX_ERROR_MESSAGES	10
/* How long cleanup waits for ids the library still destroys. */
#define CLOSE_RETRY_MS		5000

enum mode {
	MODE_LOCAL,
	MODE_SERVER,
	MODE_CLIENT,
};

static const char *const mode_name[] = {
	[MODE_LOCAL]	= "local",
	[MODE_SERVER]	= "server",
	[MODE_CLIENT]	= "client",
};

enum phase {
	PHASE_CREATE,
	PHASE_CONNECT,
	PHASE_DISCONNECT,
	PHASE_DESTROY,
	NR_PHASES
};

static const char *const phase_name[NR_PHASES] = {
	[PHASE_CREATE]		= "create id",
	[PHASE_CONNECT]		= "connect",
	[PHASE_DISCONNECT]	= "disconnect",
	[PHASE_DESTROY]		= "destroy",
};

#define NR_EVENT_TYPES	(IB_CM_SIDR_REP_RECEIVED + 1)

static const char *const event_name[NR_EVENT_TYPES] = {
	[IB_CM_REQ_ERROR]		= "REQ_ERROR",
	[IB_CM_REQ_RECEIVED]		= "REQ_RECEIVED",
	[IB_CM_REP_ERROR]		= "REP_ERROR",
	[IB_CM_REP_RECEIVED]		= "REP_RECEIVED",
	[IB_CM_RTU_RECEIVED]		= "RTU_RECEIVED",
	[IB_CM_USER_ESTABLISHED]	= "USER_ESTABLISHED",
	[IB_CM_DREQ_ERROR]		= "DREQ_ERROR",
	[IB_CM_DREQ_RECEIVED]		= "DREQ_RECEIVED",
	[IB_CM_DREP_RECEIVED]		= "DREP_RECEIVED",
	[IB_CM_TIMEWAIT_EXIT]		= "TIMEWAIT_EXIT",
	[IB_CM_MRA_RECEIVED]		= "MRA_RECEIVED",
	[IB_CM_REJ_RECEIVED]		= "REJ_RECEIVED",
	[IB_CM_LAP_ERROR]		= "LAP_ERROR",
	[IB_CM_LAP_RECEIVED]		= "LAP_RECEIVED",
	[IB_CM_APR_RECEIVED]		= "APR_RECEIVED",
	[IB_CM_SIDR_REQ_ERROR]		= "SIDR_REQ_ERROR",
	[IB_CM_SIDR_REQ_RECEIVED]	= "SIDR_REQ_RECEIVED",
	[IB_CM_SIDR_REP_RECEIVED]	= "SIDR_REP_RECEIVED",
};

/* One connection: its two ids and its timestamps in every phase. */
struct conn {
	struct ib_cm_id *active;
	/* Set by the passive REQ handler under bench.reg_lock. */
	struct ib_cm_id *passive;
	uint64_t start[NR_PHASES];
	uint64_t end[NR_PHASES];
	/* connect: how many sides reached ESTABLISHED (done at sides_needed). */
	atomic_uint sides_up;
	/* The first outcome of a phase (done or failed) is the one counted. */
	atomic_bool settled[NR_PHASES];
};

/* What the table shows for one phase. */
struct phase_result {
	bool valid;
	double total_ms;
	double conn_per_sec;
	double avg_us;
	double min_us;
	double p50_us;
	double p99_us;
	double max_us;
};

/* Resident set of this process, in bytes, at the points the run reads it. */
struct memory {
	bool valid;
	uint64_t before;	/* devices open, listener up, no connection id */
	uint64_t created;	/* every active id created (IDLE) */
	uint64_t connected;	/* every connection established */
};

/* What a server saw; counted by its handlers. */
struct server_counts {
	atomic_uint reqs;
	atomic_uint established;
	atomic_uint dreqs;
	atomic_uint timewait_exits;
	atomic_uint rejected;
};

static struct {
	/* Options. */
	enum mode mode;
	unsigned int nr_conns;
	const char *active_dev_name;
	const char *passive_dev_name;
	const char *peer_gid_text;
	union ib_gid peer_gid;
	bool json;
	bool progress;
	bool sequential;
	bool warmup;

	/* Sides of a connection that must be ESTABLISHED for connect. */
	unsigned int sides_needed;

	struct ib_device *active_dev;
	struct ib_device *passive_dev;
	struct ib_cm_id *listener;
	struct sa_path_rec path;
	struct conn *conns;

	uint64_t phase_start[NR_PHASES];
	/* Connections done or failed in a phase, and how many of them failed. */
	atomic_uint settled[NR_PHASES];
	atomic_uint failed[NR_PHASES];
	struct phase_result result[NR_PHASES];
	struct memory memory;

	/* Failure and unexpected events, by type. */
	atomic_uint bad_events[NR_EVENT_TYPES];
	atomic_uint unexpected;
	atomic_uint messages;

	/* The main thread sleeps on `done` until a phase is settled. */
	pthread_mutex_t lock;
	pthread_cond_t done;

	/*
	 * Cleanup must see every passive id: a REQ handler registers its
	 * id only while shutting_down is false, both under reg_lock.
	 */
	pthread_mutex_t reg_lock;
	atomic_bool shutting_down;

	/* --server: live passive ids by connection index (under reg_lock). */
	struct ib_cm_id **server_ids;
	struct server_counts server;
	/* The client said it is done, or a signal came. */
	atomic_bool server_done;
	volatile sig_atomic_t signalled;

	/* --client: the answer to the farewell REQ. */
	atomic_bool farewell_answered;
} bench = {
	.mode = MODE_LOCAL,
	.nr_conns = DEFAULT_CONNS,
	.active_dev_name = "loop0",
	.passive_dev_name = "loop1",
	.sides_needed = 2,
	.warmup = true,
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static uint32_t active_qpn(unsigned int index)
{
	return (ACTIVE_QPN_BASE + index) & QPN_MASK;
}

static uint32_t passive_qpn(unsigned int index)
{
	return (PASSIVE_QPN_FLAG | index) & QPN_MASK;
}

static unsigned int conn_index(const struct conn *conn)
{
	return (unsigned int)(conn - bench.conns);
}

/* A message for the user; thread-safe (stdio locks the stream). */
static void __attribute__((format(printf, 1, 2))) msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	flockfile(stderr);
	fputs(PROG ": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	funlockfile(stderr);
	va_end(ap);
}

/*
 * A message about one connection. A systematic failure would print one per
 * connection, so only the first few are shown; the counts say the rest.
 */
static void __attribute__((format(printf, 1, 2))) conn_msg(const char *fmt, ...)
{
	unsigned int n = atomic_fetch_add(&bench.messages, 1);
	char buf[256];
	va_list ap;

	if (n >= MAX_ERROR_MESSAGES)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	msg("%s%s", buf, n + 1 == MAX_ERROR_MESSAGES ?
	    " (further messages about single connections not shown)" : "");
}

/* The text of a library return (-errno); handlers call it too, hence _r. */
static const char *err_str(int ret, char *buf, size_t len)
{
	return strerror_r(-ret, buf, len);
}

/* A library call for one connection failed with `ret` (-errno). */
static void conn_call_failed(enum phase phase, const struct conn *conn,
			     const char *call, int ret)
{
	char buf[128];

	conn_msg("%s: %s (connection %u): %s", phase_name[phase], call,
		 conn_index(conn), err_str(ret, buf, sizeof(buf)));
}

static void wake_main(void)
{
	pthread_mutex_lock(&bench.lock);
	pthread_cond_broadcast(&bench.done);
	pthread_mutex_unlock(&bench.lock);
}

/*
 * Records the outcome of `phase` for `conn` at time `end`. Only the first
 * outcome counts: a connection that failed is not done later, or the
 * reverse. The release in the fetch_add publishes end[] to the main thread,
 * which waits for all connections (or, with --sequential, for each one).
 */
static void conn_settle(struct conn *conn, enum phase phase, bool ok,
			uint64_t end)
{
	unsigned int settled;

	if (atomic_exchange(&conn->settled[phase], true))
		return;
	conn->end[phase] = end;
	if (!ok)
		atomic_fetch_add(&bench.failed[phase], 1);
	settled = atomic_fetch_add_explicit(&bench.settled[phase], 1,
					    memory_order_acq_rel) + 1;
	if (bench.sequential || settled == bench.nr_conns)
		wake_main();
}

/* One side of `conn` is ESTABLISHED; the connection is when enough are. */
static void conn_side_up(struct conn *conn)
{
	uint64_t now = now_ns();

	if (atomic_fetch_add(&conn->sides_up, 1) + 1 == bench.sides_needed)
		conn_settle(conn, PHASE_CONNECT, true, now);
}

/* Counts a failure event; `detail` gets what the event says about it. */
static void describe_failure(const struct ib_cm_event *event, char *detail,
			     size_t len)
{
	detail[0] = '\0';
	atomic_fetch_add(&bench.bad_events[event->event], 1);
	switch (event->event) {
	case IB_CM_REJ_RECEIVED:
		snprintf(detail, len, ": reason %d (%s)",
			 event->param.rej_rcvd.reason,
			 ibcm_reject_msg(event->param.rej_rcvd.reason));
		break;
	case IB_CM_REQ_ERROR:
	case IB_CM_REP_ERROR:
	case IB_CM_DREQ_ERROR:
		snprintf(detail, len, ": send status %d",
			 event->param.send_status);
		break;
	default:
		break;
	}
}

/* An event that ends `phase` for `conn` in failure. */
static void failure_event(enum phase phase, struct conn *conn,
			  const char *side, const struct ib_cm_event *event)
{
	char detail[160];

	describe_failure(event, detail, sizeof(detail));
	conn_msg("%s: %s side of connection %u: %s%s", phase_name[phase], side,
		 conn_index(conn), event_name[event->event], detail);
	conn_settle(conn, phase, false, now_ns());
}

/* An event this benchmark never causes: the library misbehaved. */
static void unexpected_event(const char *side, struct ib_cm_id *cm_id,
			     const struct ib_cm_event *event)
{
	unsigned int type = event->event;

	atomic_fetch_add(&bench.unexpected, 1);
	if (type < NR_EVENT_TYPES) {
		atomic_fetch_add(&bench.bad_events[type], 1);
		conn_msg("unexpected %s on %s id %p (state %d)",
			 event_name[type], side, (void *)cm_id, cm_id->state);
	} else {
		conn_msg("unknown event %u on %s id %p", type, side,
			 (void *)cm_id);
	}
}

static int active_handler(struct ib_cm_id *cm_id,
			  const struct ib_cm_event *event)
{
	struct conn *conn = cm_id->context;
	uint32_t qpn;
	int ret;

	/* Cleanup after a failure: what ids do now is of no interest. */
	if (atomic_load(&bench.shutting_down))
		return 0;

	switch (event->event) {
	case IB_CM_REP_RECEIVED:
		qpn = event->param.rep_rcvd.remote_qpn;
		if (qpn != passive_qpn(conn_index(conn))) {
			atomic_fetch_add(&bench.unexpected, 1);
			conn_msg("connect: REP for connection %u carries QPN %#x, not %#x",
				 conn_index(conn), qpn,
				 passive_qpn(conn_index(conn)));
			conn_settle(conn, PHASE_CONNECT, false, now_ns());
			break;
		}
		ret = ib_send_cm_rtu(cm_id, NULL, 0);
		if (ret) {
			conn_call_failed(PHASE_CONNECT, conn, "ib_send_cm_rtu",
					 ret);
			conn_settle(conn, PHASE_CONNECT, false, now_ns());
			break;
		}
		conn_side_up(conn);
		break;
	case IB_CM_DREP_RECEIVED:
		conn_settle(conn, PHASE_DISCONNECT, true, now_ns());
		break;
	case IB_CM_REQ_ERROR:
	case IB_CM_REJ_RECEIVED:
		failure_event(PHASE_CONNECT, conn, "active", event);
		break;
	case IB_CM_DREQ_ERROR:
		failure_event(PHASE_DISCONNECT, conn, "active", event);
		break;
	case IB_CM_MRA_RECEIVED:	/* the peer wants more time: it has it */
	case IB_CM_TIMEWAIT_EXIT:	/* the ids are destroyed anyway */
		break;
	default:
		unexpected_event("active", cm_id, event);
		break;
	}
	return 0;
}

/* The connection index a REQ carries in its first 4 bytes of private data. */
static bool req_index(const struct ib_cm_event *event, unsigned int *index)
{
	uint32_t be_index;

	if (!event->private_data)
		return false;
	memcpy(&be_index, event->private_data, sizeof(be_index));
	*index = be32toh(be_index);
	return true;
}

/* Answers the REQ of connection `index` with a REP. */
static int send_rep(struct ib_cm_id *cm_id, const struct ib_cm_event *event,
		    unsigned int index)
{
	const struct ib_cm_req_event_param *req = &event->param.req_rcvd;
	struct ib_cm_rep_param rep;

	memset(&rep, 0, sizeof(rep));
	rep.qp_num = passive_qpn(index);
	rep.responder_resources = req->responder_resources;
	rep.initiator_depth = req->initiator_depth;
	rep.flow_control = req->flow_control;
	rep.rnr_retry_count = req->rnr_retry_count;
	return ib_send_cm_rep(cm_id, &rep);
}

/*
 * A new passive id for the connection named by the REQ's private data. A
 * non-zero return makes the library reject the REQ and destroy the id: only
 * for ids that were not registered, so cleanup never destroys one twice.
 */
static int passive_req(struct ib_cm_id *cm_id, const struct ib_cm_event *event)
{
	const struct ib_cm_req_event_param *req = &event->param.req_rcvd;
	struct conn *conn;
	unsigned int index;
	bool taken, registered = false;
	int ret;

	if (!req_index(event, &index)) {
		unexpected_event("passive", cm_id, event);
		return 1;
	}
	/* Index nr_conns is the warm-up connection. */
	if (index > bench.nr_conns || req->remote_qpn != active_qpn(index)) {
		atomic_fetch_add(&bench.unexpected, 1);
		conn_msg("connect: REQ for connection %u with QPN %#x: no such connection",
			 index, req->remote_qpn);
		return 1;
	}
	conn = &bench.conns[index];

	pthread_mutex_lock(&bench.reg_lock);
	taken = conn->passive != NULL;
	if (!taken && !atomic_load(&bench.shutting_down)) {
		conn->passive = cm_id;
		cm_id->context = conn;
		registered = true;
	}
	pthread_mutex_unlock(&bench.reg_lock);
	if (!registered) {
		if (taken) {
			atomic_fetch_add(&bench.unexpected, 1);
			conn_msg("connect: second REQ_RECEIVED for connection %u",
				 index);
		}
		return 1;
	}

	ret = send_rep(cm_id, event, index);
	if (ret) {
		conn_call_failed(PHASE_CONNECT, conn, "ib_send_cm_rep", ret);
		conn_settle(conn, PHASE_CONNECT, false, now_ns());
	}
	return 0;
}

static int passive_handler(struct ib_cm_id *cm_id,
			   const struct ib_cm_event *event)
{
	struct conn *conn = cm_id->context;
	int ret;

	/* A REQ's id must be registered or rejected, even during cleanup. */
	if (event->event == IB_CM_REQ_RECEIVED)
		return passive_req(cm_id, event);
	if (atomic_load(&bench.shutting_down))
		return 0;

	switch (event->event) {
	case IB_CM_RTU_RECEIVED:
		conn_side_up(conn);
		break;
	case IB_CM_DREQ_RECEIVED:
		ret = ib_send_cm_drep(cm_id, NULL, 0);
		if (ret) {
			conn_call_failed(PHASE_DISCONNECT, conn,
					 "ib_send_cm_drep", ret);
			conn_settle(conn, PHASE_DISCONNECT, false, now_ns());
		}
		break;
	case IB_CM_REP_ERROR:
	case IB_CM_REJ_RECEIVED:
		failure_event(PHASE_CONNECT, conn, "passive", event);
		break;
	case IB_CM_TIMEWAIT_EXIT:
		break;
	default:
		unexpected_event("passive", cm_id, event);
		break;
	}
	return 0;
}

/*
 * --server: takes the id of connection `index` out of the registry if it is
 * `cm_id`. The one who takes it destroys it: a handler by returning
 * non-zero, or cleanup.
 */
static bool server_take(struct ib_cm_id *cm_id, unsigned int index)
{
	bool mine;

	pthread_mutex_lock(&bench.reg_lock);
	mine = bench.server_ids[index] == cm_id;
	if (mine)
		bench.server_ids[index] = NULL;
	pthread_mutex_unlock(&bench.reg_lock);
	return mine;
}

/* --server: a REQ, the farewell one included. */
static int server_req(struct ib_cm_id *cm_id, const struct ib_cm_event *event)
{
	const struct ib_cm_req_event_param *req = &event->param.req_rcvd;
	unsigned int index;
	bool registered = false;
	char buf[128];
	int ret;

	if (!req_index(event, &index)) {
		unexpected_event("server", cm_id, event);
		return 1;
	}
	if (index == FAREWELL_INDEX) {
		/* Rejected (consumer defined) by the library: non-zero. */
		atomic_store(&bench.server_done, true);
		wake_main();
		return 1;
	}
	atomic_fetch_add(&bench.server.reqs, 1);
	/* A client's warm-up connection may be number MAX_CONNS. */
	if (index > MAX_CONNS || req->remote_qpn != active_qpn(index)) {
		atomic_fetch_add(&bench.server.rejected, 1);
		conn_msg("server: REQ for connection %u with QPN %#x: not one of ours",
			 index, req->remote_qpn);
		return 1;
	}

	pthread_mutex_lock(&bench.reg_lock);
	if (!bench.server_ids[index] && !atomic_load(&bench.shutting_down)) {
		bench.server_ids[index] = cm_id;
		cm_id->context = (void *)(uintptr_t)index;
		registered = true;
	}
	pthread_mutex_unlock(&bench.reg_lock);
	if (!registered) {
		atomic_fetch_add(&bench.server.rejected, 1);
		if (!atomic_load(&bench.shutting_down))
			conn_msg("server: second REQ for connection %u while the first one lives",
				 index);
		return 1;
	}

	ret = send_rep(cm_id, event, index);
	if (ret) {
		conn_msg("server: ib_send_cm_rep (connection %u): %s", index,
			 err_str(ret, buf, sizeof(buf)));
		atomic_fetch_add(&bench.server.rejected, 1);
		return server_take(cm_id, index);
	}
	return 0;
}

/*
 * --server: the passive side of every connection. Ids are destroyed when
 * their connection is over: at TIMEWAIT_EXIT, or after a failure.
 */
static int server_handler(struct ib_cm_id *cm_id,
			  const struct ib_cm_event *event)
{
	unsigned int index = (unsigned int)(uintptr_t)cm_id->context;
	char detail[160], buf[128];
	int ret;

	if (event->event == IB_CM_REQ_RECEIVED)
		return server_req(cm_id, event);

	switch (event->event) {
	case IB_CM_RTU_RECEIVED:
		atomic_fetch_add(&bench.server.established, 1);
		return 0;
	case IB_CM_DREQ_RECEIVED:
		ret = ib_send_cm_drep(cm_id, NULL, 0);
		if (ret) {
			conn_msg("server: ib_send_cm_drep (connection %u): %s",
				 index, err_str(ret, buf, sizeof(buf)));
			return server_take(cm_id, index);
		}
		atomic_fetch_add(&bench.server.dreqs, 1);
		return 0;
	case IB_CM_TIMEWAIT_EXIT:
		atomic_fetch_add(&bench.server.timewait_exits, 1);
		return server_take(cm_id, index);
	case IB_CM_REP_ERROR:
	case IB_CM_REJ_RECEIVED:
		describe_failure(event, detail, sizeof(detail));
		if (!atomic_load(&bench.shutting_down))
			conn_msg("server: connection %u: %s%s", index,
				 event_name[event->event], detail);
		return server_take(cm_id, index);
	default:
		unexpected_event("server", cm_id, event);
		return 0;
	}
}

/* --client: the farewell REQ's id; any answer will do. */
static int farewell_handler(struct ib_cm_id *cm_id,
			    const struct ib_cm_event *event)
{
	(void)cm_id;
	switch (event->event) {
	case IB_CM_REJ_RECEIVED:
	case IB_CM_REQ_ERROR:
	case IB_CM_REP_RECEIVED:
		atomic_store(&bench.farewell_answered, true);
		wake_main();
		break;
	default:
		break;
	}
	return 0;
}

/* Prints "phase: done/total (pct%)" when `done` reaches *next. */
static void show_progress(enum phase phase, unsigned int done,
			  unsigned int *next)
{
	unsigned int step = bench.nr_conns / 10 ? bench.nr_conns / 10 : 1;

	if (!bench.progress || done < *next)
		return;
	msg("%s: %u/%u (%u%%)", phase_name[phase], done, bench.nr_conns,
	    (unsigned int)((uint64_t)done * 100 / bench.nr_conns));
	*next = (done / step + 1) * step;
	if (*next > bench.nr_conns)
		*next = bench.nr_conns;
}

static struct timespec ns_to_timespec(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / NSEC_PER_SEC),
		.tv_nsec = (long)(ns % NSEC_PER_SEC),
	};

	return ts;
}

/*
 * Waits until `target` connections are settled in `phase` (done or failed)
 * or `deadline` passes: a lost message must not hang the run. Returns how
 * many are settled.
 */
static unsigned int wait_settled(enum phase phase, unsigned int target,
				 uint64_t deadline, bool progress)
{
	unsigned int step = bench.nr_conns / 10 ? bench.nr_conns / 10 : 1;
	unsigned int next = step, settled;
	struct timespec until;
	uint64_t now;

	pthread_mutex_lock(&bench.lock);
	for (;;) {
		settled = atomic_load(&bench.settled[phase]);
		if (settled >= target)
			break;
		now = now_ns();
		if (now >= deadline)
			break;
		if (progress)
			show_progress(phase, settled, &next);

		until = ns_to_timespec(deadline - now < POLL_INTERVAL_NS ?
				       deadline : now + POLL_INTERVAL_NS);
		pthread_cond_timedwait(&bench.done, &bench.lock, &until);
	}
	pthread_mutex_unlock(&bench.lock);
	if (progress && settled >= target)
		show_progress(phase, settled, &next);
	return settled;
}

/* Waits until every connection is settled in `phase`; -1 on any failure. */
static int wait_phase(enum phase phase)
{
	uint64_t timeout = PHASE_TIMEOUT_NS +
			   bench.nr_conns * PHASE_TIMEOUT_PER_CONN_NS;
	unsigned int settled, failed;

	settled = wait_settled(phase, bench.nr_conns,
			       bench.phase_start[phase] + timeout, true);
	failed = atomic_load(&bench.failed[phase]);
	if (settled < bench.nr_conns) {
		msg("%s: timed out after %.1f s: %u of %u connections completed, %u failed",
		    phase_name[phase], (double)timeout / NSEC_PER_SEC,
		    settled - failed, bench.nr_conns, failed);
		return -1;
	}
	if (failed) {
		msg("%s: %u of %u connections failed", phase_name[phase],
		    failed, bench.nr_conns);
		return -1;
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Fills bench.result[phase] from the connections' timestamps. */
static int compute_result(enum phase phase)
{
	struct phase_result *r = &bench.result[phase];
	unsigned int n = bench.nr_conns;
	uint64_t *lat, last_end = 0, sum = 0, total;

	lat = malloc(n * sizeof(*lat));
	if (!lat) {
		msg("%s: out of memory for the results", phase_name[phase]);
		return -1;
	}
	for (unsigned int i = 0; i < n; i++) {
		const struct conn *conn = &bench.conns[i];

		lat[i] = conn->end[phase] - conn->start[phase];
		sum += lat[i];
		if (conn->end[phase] > last_end)
			last_end = conn->end[phase];
	}
	qsort(lat, n, sizeof(*lat), cmp_u64);

	/*
	 * Like cmtime: from the phase's start to its last completion. One
	 * connection at a time, the phases interleave: the sum of the
	 * connections' times is the phase's time.
	 */
	total = bench.sequential ? sum : last_end - bench.phase_start[phase];
	r->total_ms = (double)total / NSEC_PER_MSEC;
	r->conn_per_sec = total ? (double)n * NSEC_PER_SEC / (double)total : 0;
	r->avg_us = (double)sum / n / NSEC_PER_USEC;
	r->min_us = (double)lat[0] / NSEC_PER_USEC;
	/* Nearest-rank percentiles. */
	r->p50_us = (double)lat[(n * 50 + 99) / 100 - 1] / NSEC_PER_USEC;
	r->p99_us = (double)lat[(n * 99 + 99) / 100 - 1] / NSEC_PER_USEC;
	r->max_us = (double)lat[n - 1] / NSEC_PER_USEC;
	r->valid = true;
	free(lat);
	return 0;
}

/* This process's resident set in bytes (/proc/self/statm); 0 if unknown. */
static uint64_t rss_bytes(void)
{
	unsigned long size, resident;
	FILE *f = fopen("/proc/self/statm", "r");
	int n;

	if (!f)
		return 0;
	n = fscanf(f, "%lu %lu", &size, &resident);
	fclose(f);
	if (n != 2)
		return 0;
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The REQ every connection sends; qp_num and the index are set per REQ. */
static void init_req(struct ib_cm_req_param *req, uint32_t *be_index)
{
	memset(req, 0, sizeof(*req));
	req->primary_path = &bench.path;
	req->service_id = htobe64(SERVICE_ID);
	req->qp_type = IB_QPT_RC;
	/* The connection's index, for the passive side to find it by. */
	req->private_data = be_index;
	req->private_data_len = sizeof(*be_index);
	req->responder_resources = 1;
	req->initiator_depth = 1;
	req->remote_cm_response_timeout = CM_RESPONSE_TIMEOUT;
	req->local_cm_response_timeout = CM_RESPONSE_TIMEOUT;
	req->retry_count = 7;
	req->rnr_retry_count = 7;
	req->max_cm_retries = MAX_CM_RETRIES;
}

/* Creates the active id of connection `i`, timed. */
static int create_one(unsigned int i)
{
	struct conn *conn = &bench.conns[i];
	struct ib_cm_id *id;

	conn->start[PHASE_CREATE] = now_ns();
	id = ib_create_cm_id(bench.active_dev, active_handler, conn);
	conn->end[PHASE_CREATE] = now_ns();
	if (IS_ERR(id)) {
		conn_call_failed(PHASE_CREATE, conn, "ib_create_cm_id",
				 (int)PTR_ERR(id));
		return -1;
	}
	conn->active = id;
	return 0;
}

/* Sends the REQ of connection `i`; a failure settles it. */
static void connect_one(unsigned int i, struct ib_cm_req_param *req,
			uint32_t *be_index)
{
	struct conn *conn = &bench.conns[i];
	int ret;

	/*
	 * The library checks a DREQ's QPN against the one in the REP and
	 * detects stale connections by (GUID, QPN): every connection needs
	 * its own.
	 */
	req->qp_num = active_qpn(i);
	*be_index = htobe32(i);
	conn->start[PHASE_CONNECT] = now_ns();
	ret = ib_send_cm_req(conn->active, req);
	if (ret) {
		conn_call_failed(PHASE_CONNECT, conn, "ib_send_cm_req", ret);
		conn_settle(conn, PHASE_CONNECT, false, now_ns());
	}
}

/* Sends the DREQ of connection `i`; a failure settles it. */
static void disconnect_one(unsigned int i)
{
	struct conn *conn = &bench.conns[i];
	int ret;

	conn->start[PHASE_DISCONNECT] = now_ns();
	ret = ib_send_cm_dreq(conn->active, NULL, 0);
	if (ret) {
		conn_call_failed(PHASE_DISCONNECT, conn, "ib_send_cm_dreq",
				 ret);
		conn_settle(conn, PHASE_DISCONNECT, false, now_ns());
	}
}

/* Takes the passive id of `conn` out of the registry (NULL if none). */
static struct ib_cm_id *conn_take_passive(struct conn *conn)
{
	struct ib_cm_id *id;

	pthread_mutex_lock(&bench.reg_lock);
	id = conn->passive;
	conn->passive = NULL;
	pthread_mutex_unlock(&bench.reg_lock);
	return id;
}

/* Destroys the ids of connection `i`, timed. */
static void destroy_one(unsigned int i)
{
	struct conn *conn = &bench.conns[i];
	struct ib_cm_id *passive = conn_take_passive(conn);

	conn->start[PHASE_DESTROY] = now_ns();
	ib_destroy_cm_id(conn->active);
	if (passive)
		ib_destroy_cm_id(passive);
	conn->end[PHASE_DESTROY] = now_ns();
	conn->active = NULL;
}

static int run_create(void)
{
	unsigned int next = bench.nr_conns;

	bench.phase_start[PHASE_CREATE] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++)
		if (create_one(i))
			return -1;
	show_progress(PHASE_CREATE, bench.nr_conns, &next);
	return 0;
}

static int run_connect(void)
{
	struct ib_cm_req_param req;
	uint32_t be_index;

	init_req(&req, &be_index);
	bench.phase_start[PHASE_CONNECT] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++)
		connect_one(i, &req, &be_index);
	return wait_phase(PHASE_CONNECT);
}

static int run_disconnect(void)
{
	bench.phase_start[PHASE_DISCONNECT] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++)
		disconnect_one(i);
	return wait_phase(PHASE_DISCONNECT);
}

static void run_destroy(void)
{
	unsigned int next = bench.nr_conns;

	bench.phase_start[PHASE_DESTROY] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++)
		destroy_one(i);
	show_progress(PHASE_DESTROY, bench.nr_conns, &next);
}

/* Waits for connection `i` to settle in `phase`; -1 if it failed or hung. */
static int wait_one(enum phase phase, unsigned int i)
{
	uint64_t deadline = now_ns() + PHASE_TIMEOUT_NS;

	if (wait_settled(phase, i + 1, deadline, false) < i + 1) {
		msg("%s: connection %u timed out after %.0f s",
		    phase_name[phase], i,
		    (double)PHASE_TIMEOUT_NS / NSEC_PER_SEC);
		return -1;
	}
	if (atomic_load(&bench.failed[phase])) {
		msg("%s: connection %u failed", phase_name[phase], i);
		return -1;
	}
	return 0;
}

/* --sequential: every connection runs the four phases alone. */
static int run_sequential(void)
{
	unsigned int step = bench.nr_conns / 10 ? bench.nr_conns / 10 : 1;
	struct ib_cm_req_param req;
	uint32_t be_index;

	init_req(&req, &be_index);
	for (int p = 0; p < NR_PHASES; p++)
		bench.phase_start[p] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++) {
		if (create_one(i))
			return -1;
		connect_one(i, &req, &be_index);
		if (wait_one(PHASE_CONNECT, i))
			return -1;
		disconnect_one(i);
		if (wait_one(PHASE_DISCONNECT, i))
			return -1;
		destroy_one(i);
		if (bench.progress && ((i + 1) % step == 0 || i + 1 == bench.nr_conns))
			msg("sequential: %u/%u connections (%u%%)", i + 1,
			    bench.nr_conns,
			    (unsigned int)((uint64_t)(i + 1) * 100 / bench.nr_conns));
	}
	return 0;
}

static struct ib_device *open_device(const char *name)
{
	struct ib_device *dev = ibcm_open_device(name);
	char buf[128];

	if (IS_ERR(dev)) {
		msg("cannot open device %s: %s", name,
		    err_str((int)PTR_ERR(dev), buf, sizeof(buf)));
		return NULL;
	}
	return dev;
}

/* The listener on the passive device, its events to `handler`. */
static int listen_on_passive(ib_cm_handler handler)
{
	char buf[128];
	int ret;

	bench.listener = ib_create_cm_id(bench.passive_dev, handler, NULL);
	if (IS_ERR(bench.listener)) {
		msg("ib_create_cm_id(%s) for the listener: %s",
		    bench.passive_dev_name,
		    err_str((int)PTR_ERR(bench.listener), buf, sizeof(buf)));
		bench.listener = NULL;
		return -1;
	}
	ret = ib_cm_listen(bench.listener, htobe64(SERVICE_ID));
	if (ret) {
		msg("ib_cm_listen(%#x): %s", SERVICE_ID,
		    err_str(ret, buf, sizeof(buf)));
		return -1;
	}
	return 0;
}

/*
 * Devices, the path between them, the listener (not with --client), the
 * connection array (not with --server).
 */
static int setup(void)
{
	union ib_gid passive_gid;
	char buf[128];
	int ret;

	if (bench.mode != MODE_SERVER) {
		bench.active_dev = open_device(bench.active_dev_name);
		if (!bench.active_dev)
			return -1;
	}
	if (bench.mode != MODE_CLIENT) {
		bench.passive_dev = open_device(bench.passive_dev_name);
		if (!bench.passive_dev)
			return -1;
	}
	if (bench.mode == MODE_SERVER) {
		bench.server_ids = calloc(MAX_CONNS + 1,
					  sizeof(*bench.server_ids));
		if (!bench.server_ids) {
			msg("out of memory for the server's connection table");
			return -1;
		}
		return listen_on_passive(server_handler);
	}

	if (bench.mode == MODE_CLIENT) {
		passive_gid = bench.peer_gid;
	} else {
		ret = ibcm_query_gid(bench.passive_dev, PORT_NUM, 0,
				     &passive_gid);
		if (ret) {
			msg("ibcm_query_gid(%s, port %d): %s",
			    bench.passive_dev_name, PORT_NUM,
			    err_str(ret, buf, sizeof(buf)));
			return -1;
		}
	}
	ret = ibcm_init_path(bench.active_dev, PORT_NUM, &passive_gid,
			     &bench.path);
	if (ret) {
		msg("ibcm_init_path(%s -> %s): %s", bench.active_dev_name,
		    bench.mode == MODE_CLIENT ? bench.peer_gid_text :
		    bench.passive_dev_name, err_str(ret, buf, sizeof(buf)));
		return -1;
	}

	/* The last one is the warm-up connection. */
	bench.conns = calloc(bench.nr_conns + 1, sizeof(*bench.conns));
	if (!bench.conns) {
		msg("out of memory for %u connections", bench.nr_conns);
		return -1;
	}
	for (unsigned int i = 0; i <= bench.nr_conns; i++) {
		atomic_init(&bench.conns[i].sides_up, 0);
		for (int p = 0; p < NR_PHASES; p++)
			atomic_init(&bench.conns[i].settled[p], false);
	}

	if (bench.mode == MODE_CLIENT)
		return 0;
	return listen_on_passive(passive_handler);
}

/* ibcm_close_device() until the library has let go of its last id. */
static int close_device(struct ib_device *dev, const char *name)
{
	char buf[128];
	int ret;

	for (int waited_ms = 0;; waited_ms++) {
		ret = ibcm_close_device(dev);
		/*
		 * After a failed phase, ids the library destroys for us
		 * (rejected REQs) may still be on their way out.
		 */
		if (ret != -EBUSY || waited_ms == CLOSE_RETRY_MS)
			break;
		usleep(1000);
	}
	if (ret) {
		msg("ibcm_close_device(%s): %s", name,
		    err_str(ret, buf, sizeof(buf)));
		return -1;
	}
	return 0;
}

/*
 * Says what the device lost or sent again, when it did: a run slower than
 * expected often is one whose MADs waited for a retransmission (a full
 * receive queue, a full listen backlog, a lossy link).
 */
static void report_losses(struct ib_device *dev, const char *name)
{
	struct ibcm_counters c;
	uint64_t retries = 0;

	if (ibcm_get_counters(dev, PORT_NUM, &c))
		return;
	for (size_t i = 0; i < ARRAY_SIZE(c.cm_tx_retries); i++)
		retries += c.cm_tx_retries[i];
	if (!retries && !c.rx_dropped && !c.rx_listen_overflows)
		return;
	msg("%s: %llu retransmissions (REQ %llu, DREQ %llu), %llu received MADs dropped by a full receive queue, %llu REQs not taken by a full listen backlog",
	    name, (unsigned long long)retries,
	    (unsigned long long)c.cm_tx_retries[IBCM_CNT_REQ],
	    (unsigned long long)c.cm_tx_retries[IBCM_CNT_DREQ],
	    (unsigned long long)c.rx_dropped,
	    (unsigned long long)c.rx_listen_overflows);
}

/*
 * Destroys whatever exists, in any state the run stopped in. Handlers
 * ignore events from here on, and REQs that arrive now are rejected.
 */
static int cleanup(void)
{
	int ret = 0;

	pthread_mutex_lock(&bench.reg_lock);
	atomic_store(&bench.shutting_down, true);
	pthread_mutex_unlock(&bench.reg_lock);

	if (bench.listener)
		ib_destroy_cm_id(bench.listener);
	if (bench.conns) {
		for (unsigned int i = 0; i <= bench.nr_conns; i++) {
			struct conn *conn = &bench.conns[i];
			struct ib_cm_id *passive = conn_take_passive(conn);

			if (conn->active)
				ib_destroy_cm_id(conn->active);
			if (passive)
				ib_destroy_cm_id(passive);
		}
	}
	if (bench.server_ids) {
		for (unsigned int i = 0; i <= MAX_CONNS; i++) {
			struct ib_cm_id *id;

			if (!bench.server_ids[i])
				continue;
			pthread_mutex_lock(&bench.reg_lock);
			id = bench.server_ids[i];
			bench.server_ids[i] = NULL;
			pthread_mutex_unlock(&bench.reg_lock);
			if (id)
				ib_destroy_cm_id(id);
		}
	}
	if (bench.active_dev)
		report_losses(bench.active_dev, bench.active_dev_name);
	if (bench.passive_dev && bench.passive_dev != bench.active_dev)
		report_losses(bench.passive_dev, bench.passive_dev_name);
	if (bench.active_dev &&
	    close_device(bench.active_dev, bench.active_dev_name))
		ret = -1;
	if (bench.passive_dev &&
	    close_device(bench.passive_dev, bench.passive_dev_name))
		ret = -1;
	free(bench.conns);
	bench.conns = NULL;
	free(bench.server_ids);
	bench.server_ids = NULL;
	return ret;
}

/* Reports failure events by type; returns how many there were. */
static unsigned int report_bad_events(void)
{
	unsigned int total = 0, n;
	char line[512] = "";
	size_t len = 0;

	for (int type = 0; type < NR_EVENT_TYPES; type++) {
		n = atomic_load(&bench.bad_events[type]);
		if (!n)
			continue;
		total += n;
		if (len < sizeof(line))
			len += snprintf(line + len, sizeof(line) - len,
					" %s=%u", event_name[type], n);
	}
	if (total)
		msg("failure events:%s", line);
	n = atomic_load(&bench.unexpected);
	if (n)
		msg("%u unexpected events or messages", n);
	return total + n;
}

/* Bytes of resident set growth per connection and per cm_id. */
static void memory_per(const struct memory *m, double *per_conn,
		       double *per_id, double *per_idle_id)
{
	unsigned int ids_per_conn = bench.mode == MODE_LOCAL ? 2 : 1;
	double grown = (double)m->connected - (double)m->before;

	*per_conn = grown / bench.nr_conns;
	*per_id = grown / ((double)bench.nr_conns * ids_per_conn);
	*per_idle_id = ((double)m->created - (double)m->before) / bench.nr_conns;
}

/* True for a device of the in-process fabric: "loop" and a number. */
static bool is_loop_device(const char *name)
{
	return strncmp(name, "loop", 4) == 0 && name[4] >= '0' && name[4] <= '9';
}

/*
 * What the table measured, so that it reads alone: the devices and the
 * fabric, the count and the mode, what each phase times and what its
 * columns mean.
 */
static void print_header(void)
{
	bool local = bench.mode == MODE_LOCAL;
	bool loop = is_loop_device(bench.active_dev_name) &&
		    (!local || is_loop_device(bench.passive_dev_name));

	printf(PROG ": %u connections from %s to %s on %s,\n", bench.nr_conns,
	       bench.active_dev_name,
	       local ? bench.passive_dev_name : bench.peer_gid_text,
	       loop ? "the in-process fabric" : "RDMA devices");
	printf("  %s, %s%s\n",
	       local ? "both sides in this process" :
	       "the active side in this process, the server elsewhere",
	       bench.sequential ? "one connection at a time" : "phase by phase",
	       bench.warmup ? ", after one untimed warm-up connection" : "");
	printf("  %-11s ib_create_cm_id() of each connection's active id\n",
	       phase_name[PHASE_CREATE]);
	printf("  %-11s ib_send_cm_req() until %s\n", phase_name[PHASE_CONNECT],
	       local ? "both ids are ESTABLISHED (REQ, REP, RTU)" :
	       "this side has sent its RTU (REQ, REP, RTU)");
	printf("  %-11s ib_send_cm_dreq() until DREP_RECEIVED (DREQ, DREP)\n",
	       phase_name[PHASE_DISCONNECT]);
	printf("  %-11s ib_destroy_cm_id() of %s\n", phase_name[PHASE_DESTROY],
	       local ? "each connection's two ids" : "each connection's id");
	if (bench.sequential) {
		printf("  each connection goes through the four phases alone: its latencies (avg to max)\n"
		       "  include no queueing; total(ms) is their sum; ops/s = %u / total\n",
		       bench.nr_conns);
		return;
	}
	printf("  each phase starts its operation for all %u connections at once (back to back),\n"
	       "  then waits for the last to complete: total(ms) runs from the first start to the\n"
	       "  last completion, ops/s = %u / total; an operation's latency (avg to max) runs\n"
	       "  from its start to its completion, so in connect and disconnect it includes the\n"
	       "  time spent queued behind the operations started before it\n",
	       bench.nr_conns, bench.nr_conns);
}

static void print_table(void)
{
	const struct memory *m = &bench.memory;
	double per_conn, per_id, per_idle_id;
	bool any = false;

	for (int p = 0; p < NR_PHASES; p++)
		any |= bench.result[p].valid;
	if (!any)
		return;
	print_header();
	printf("%-12s %11s %11s %10s %10s %10s %10s %10s\n", "phase",
	       "total(ms)", "ops/s", "avg(us)", "min(us)", "p50(us)",
	       "p99(us)", "max(us)");
	for (int p = 0; p < NR_PHASES; p++) {
		const struct phase_result *r = &bench.result[p];

		if (!r->valid)
			continue;
		printf("%-12s %11.2f %11.0f %10.2f %10.2f %10.2f %10.2f %10.2f\n",
		       phase_name[p], r->total_ms, r->conn_per_sec, r->avg_us,
		       r->min_us, r->p50_us, r->p99_us, r->max_us);
	}
	if (m->valid) {
		memory_per(m, &per_conn, &per_id, &per_idle_id);
		printf("memory: RSS %.1f MiB before, %.1f MiB with %u connections established: %.0f bytes/connection, %.0f bytes/cm_id (%u cm_ids); %.0f bytes per IDLE id\n",
		       (double)m->before / (1 << 20),
		       (double)m->connected / (1 << 20), bench.nr_conns,
		       per_conn, per_id,
		       bench.nr_conns * (bench.mode == MODE_LOCAL ? 2 : 1),
		       per_idle_id);
	}
}

/* A JSON string: device names come from the command line. */
static void print_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void print_json_failures(void)
{
	bool first = true;

	printf("  \"failure_events\": {");
	for (int type = 0; type < NR_EVENT_TYPES; type++) {
		unsigned int n = atomic_load(&bench.bad_events[type]);

		if (!n)
			continue;
		printf("%s\"%s\": %u", first ? "" : ", ", event_name[type], n);
		first = false;
	}
	printf("},\n  \"unexpected\": %u\n}\n", atomic_load(&bench.unexpected));
}

static void print_json(bool ok)
{
	const struct memory *m = &bench.memory;
	double per_conn, per_id, per_idle_id;
	bool first = true;

	printf("{\n  \"tool\": \"" PROG "\",\n  \"mode\": \"%s\",\n",
	       mode_name[bench.mode]);
	printf("  \"sequential\": %s,\n  \"connections\": %u,\n",
	       bench.sequential ? "true" : "false", bench.nr_conns);
	printf("  \"active_device\": ");
	print_json_string(bench.mode == MODE_SERVER ? "" :
			  bench.active_dev_name);
	printf(",\n  \"passive_device\": ");
	print_json_string(bench.mode == MODE_CLIENT ? "" :
			  bench.passive_dev_name);
	if (bench.mode == MODE_CLIENT) {
		printf(",\n  \"peer_gid\": ");
		print_json_string(bench.peer_gid_text);
	}
	printf(",\n  \"status\": \"%s\",\n  \"phases\": [", ok ? "ok" : "failed");
	for (int p = 0; p < NR_PHASES; p++) {
		const struct phase_result *r = &bench.result[p];

		if (!r->valid)
			continue;
		printf("%s\n    {\"phase\": \"%s\", \"total_ms\": %.3f, "
		       "\"conn_per_sec\": %.1f, \"avg_us\": %.3f, "
		       "\"min_us\": %.3f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
		       "\"max_us\": %.3f}",
		       first ? "" : ",", phase_name[p], r->total_ms,
		       r->conn_per_sec, r->avg_us, r->min_us, r->p50_us,
		       r->p99_us, r->max_us);
		first = false;
	}
	printf("%s],\n", first ? "" : "\n  ");
	if (m->valid) {
		memory_per(m, &per_conn, &per_id, &per_idle_id);
		printf("  \"memory\": {\"rss_before\": %llu, \"rss_created\": %llu, "
		       "\"rss_connected\": %llu, \"bytes_per_connection\": %.1f, "
		       "\"bytes_per_cm_id\": %.1f, \"bytes_per_idle_id\": %.1f},\n",
		       (unsigned long long)m->before,
		       (unsigned long long)m->created,
		       (unsigned long long)m->connected, per_conn, per_id,
		       per_idle_id);
	}
	print_json_failures();
}

static void print_server_summary(bool ok)
{
	struct server_counts *s = &bench.server;

	if (!bench.json) {
		printf("server: %u REQs, %u established, %u DREQs answered, %u timewaits ended, %u rejected\n",
		       atomic_load(&s->reqs), atomic_load(&s->established),
		       atomic_load(&s->dreqs), atomic_load(&s->timewait_exits),
		       atomic_load(&s->rejected));
		return;
	}
	printf("{\n  \"tool\": \"" PROG "\",\n  \"mode\": \"server\",\n");
	printf("  \"passive_device\": ");
	print_json_string(bench.passive_dev_name);
	printf(",\n  \"status\": \"%s\",\n", ok ? "ok" : "failed");
	printf("  \"reqs\": %u, \"established\": %u, \"dreqs_answered\": %u, "
	       "\"timewait_exits\": %u, \"rejected\": %u,\n",
	       atomic_load(&s->reqs), atomic_load(&s->established),
	       atomic_load(&s->dreqs), atomic_load(&s->timewait_exits),
	       atomic_load(&s->rejected));
	print_json_failures();
}

static void on_signal(int sig)
{
	(void)sig;
	bench.signalled = 1;
}

/* --server: says where it listens, then waits for the farewell or a signal. */
static int serve(void)
{
	struct sigaction sa;
	union ib_gid gid;
	char text[INET6_ADDRSTRLEN];
	struct timespec until;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL)) {
		msg("sigaction: %s", strerror(errno));
		return -1;
	}

	for (int i = 0; i < MAX_GIDS; i++) {
		if (ibcm_query_gid(bench.passive_dev, PORT_NUM, i, &gid))
			break;
		if (!inet_ntop(AF_INET6, gid.raw, text, sizeof(text)))
			continue;
		msg("server: %s port %d GID index %d: %s",
		    bench.passive_dev_name, PORT_NUM, i, text);
	}
	msg("server: listening on %s, service %#x", bench.passive_dev_name,
	    SERVICE_ID);

	pthread_mutex_lock(&bench.lock);
	while (!atomic_load(&bench.server_done) && !bench.signalled) {
		until = ns_to_timespec(now_ns() + POLL_INTERVAL_NS);
		pthread_cond_timedwait(&bench.done, &bench.lock, &until);
	}
	pthread_mutex_unlock(&bench.lock);
	msg("server: %s", bench.signalled ? "signalled, stopping" :
	    "the client is done, stopping");
	return 0;
}

/*
 * --client: tells the server the run is over with a REQ it rejects. Waits
 * a few seconds for the answer; a server that is gone is not an error.
 */
static void farewell(void)
{
	struct ib_cm_req_param req;
	uint32_t be_index;
	struct ib_cm_id *id;
	uint64_t deadline;
	struct timespec until;
	char buf[128];
	int ret;

	id = ib_create_cm_id(bench.active_dev, farewell_handler, NULL);
	if (IS_ERR(id))
		return;
	init_req(&req, &be_index);
	be_index = htobe32(FAREWELL_INDEX);
	req.qp_num = FAREWELL_QPN;
	req.remote_cm_response_timeout = FAREWELL_TIMEOUT;
	req.local_cm_response_timeout = FAREWELL_TIMEOUT;
	req.max_cm_retries = FAREWELL_RETRIES;
	ret = ib_send_cm_req(id, &req);
	if (ret) {
		msg("farewell: ib_send_cm_req: %s",
		    err_str(ret, buf, sizeof(buf)));
	} else {
		deadline = now_ns() + FAREWELL_WAIT_NS;
		pthread_mutex_lock(&bench.lock);
		while (!atomic_load(&bench.farewell_answered) &&
		       now_ns() < deadline) {
			until = ns_to_timespec(now_ns() + POLL_INTERVAL_NS);
			pthread_cond_timedwait(&bench.done, &bench.lock,
					       &until);
		}
		pthread_mutex_unlock(&bench.lock);
		if (!atomic_load(&bench.farewell_answered))
			msg("farewell: no answer from the server");
	}
	ib_destroy_cm_id(id);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " [-c connections] [-d active_dev] [-D passive_dev] [-s] [-p] [--json]\n"
		"       " PROG " --server [-D dev] [--json]\n"
		"       " PROG " --client GID [-d dev] [-c connections] [-s] [-p] [--json]\n"
		"\n"
		"Times connection setup and teardown with libib_cm, like rdma-core's cmtime:\n"
		"create id, connect (REQ/REP/RTU), disconnect (the whole DREQ/DREP round\n"
		"trip) and destroy, each phase started for all connections back to back.\n"
		"\n"
		"No QPs: this tool never creates a QP. REQs and REPs carry made-up QPNs, so\n"
		"the numbers are the CM's alone; rdma-core's cmtime creates and modifies a QP\n"
		"per connection and resolves addresses and routes through rdma_cm.\n"
		"\n"
		"Modes:\n"
		"  (default)             one process: -d connects to a listener on -D\n"
		"      --server          listen on -D and answer REQs (REP) and DREQs (DREP)\n"
		"                        until the client is done or SIGINT/SIGTERM\n"
		"      --client GID      connect through -d to the server whose port has this\n"
		"                        GID (IPv6 text: fe80::..., ::ffff:10.77.0.2)\n"
		"\n"
		"  -c, --connections N   connections (default %d, at most %d)\n"
		"  -d, --active-dev DEV  device of the active side (default loop0)\n"
		"  -D, --passive-dev DEV device of the listener (default loop1)\n"
		"  -s, --sequential      one connection at a time through all four phases:\n"
		"                        latencies without queueing; total = sum of them\n"
		"  -p, --progress        progress on stderr (default with %d+ connections)\n"
		"      --no-warmup       no untimed warm-up connection before the run\n"
		"      --json            print the results as JSON instead of a table\n"
		"  -h, --help            this help\n"
		"\n"
		"The one-process phased run also reports the growth of this process's\n"
		"resident set (/proc/self/statm) from before the ids are created to when\n"
		"every connection is established, per connection and per cm_id.\n"
		"When a device sent MADs again or dropped received ones, a line on\n"
		"stderr says how many (ibcm_get_counters).\n",
		DEFAULT_CONNS, MAX_CONNS, PROGRESS_MIN_CONNS);
}

static int parse_args(int argc, char **argv)
{
	enum { OPT_JSON = 256, OPT_SERVER, OPT_CLIENT, OPT_NO_WARMUP };
	static const struct option long_opts[] = {
		{ "connections", required_argument, NULL, 'c' },
		{ "active-dev", required_argument, NULL, 'd' },
		{ "passive-dev", required_argument, NULL, 'D' },
		{ "sequential", no_argument, NULL, 's' },
		{ "progress", no_argument, NULL, 'p' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "no-warmup", no_argument, NULL, OPT_NO_WARMUP },
		{ "server", no_argument, NULL, OPT_SERVER },
		{ "client", required_argument, NULL, OPT_CLIENT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool progress = false, server = false;
	unsigned long n;
	char *end;
	int opt;

	while ((opt = getopt_long(argc, argv, "c:d:D:sph", long_opts,
				  NULL)) != -1) {
		switch (opt) {
		case 'c':
			errno = 0;
			n = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' ||
			    n < 1 || n > MAX_CONNS) {
				msg("-c: expected 1 to %u connections, got '%s'",
				    MAX_CONNS, optarg);
				return -1;
			}
			bench.nr_conns = (unsigned int)n;
			break;
		case 'd':
			bench.active_dev_name = optarg;
			break;
		case 'D':
			bench.passive_dev_name = optarg;
			break;
		case 's':
			bench.sequential = true;
			break;
		case 'p':
			progress = true;
			break;
		case OPT_JSON:
			bench.json = true;
			break;
		case OPT_SERVER:
			server = true;
			break;
		case OPT_NO_WARMUP:
			bench.warmup = false;
			break;
		case OPT_CLIENT:
			if (inet_pton(AF_INET6, optarg, bench.peer_gid.raw) != 1) {
				msg("--client: '%s' is not a GID in IPv6 text form (e.g. fe80::2:c903:ab:2 or ::ffff:10.77.0.2)",
				    optarg);
				return -1;
			}
			bench.peer_gid_text = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_SUCCESS);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		msg("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return -1;
	}
	if (server && bench.peer_gid_text) {
		msg("--server and --client exclude each other");
		return -1;
	}
	if (server) {
		bench.mode = MODE_SERVER;
		if (bench.sequential) {
			msg("--sequential is the client's choice, not the server's");
			return -1;
		}
	} else if (bench.peer_gid_text) {
		bench.mode = MODE_CLIENT;
		bench.sides_needed = 1;
	}
	bench.progress = progress || bench.nr_conns >= PROGRESS_MIN_CONNS;
	return 0;
}

static int init_sync(void)
{
	pthread_condattr_t attr;

	/* Deadlines are CLOCK_MONOTONIC, like every other time here. */
	if (pthread_condattr_init(&attr) ||
	    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) ||
	    pthread_cond_init(&bench.done, &attr) ||
	    pthread_mutex_init(&bench.lock, NULL) ||
	    pthread_mutex_init(&bench.reg_lock, NULL)) {
		msg("cannot initialise pthread objects");
		return -1;
	}
	pthread_condattr_destroy(&attr);
	return 0;
}

/*
 * One untimed connection through all four phases first, as cmtime does since
 * rdma-core v52: the library's worker thread starts, its first allocations
 * and page faults happen, and the runs of 1 or 10 connections measure the
 * CM rather than the process's cold start.
 */
static int warm_up(void)
{
	unsigned int w = bench.nr_conns;
	struct ib_cm_req_param req;
	uint32_t be_index;
	int ret = -1;

	init_req(&req, &be_index);
	if (create_one(w))
		return -1;
	connect_one(w, &req, &be_index);
	if (wait_settled(PHASE_CONNECT, 1, now_ns() + PHASE_TIMEOUT_NS, false) < 1 ||
	    atomic_load(&bench.failed[PHASE_CONNECT]))
		goto out;
	disconnect_one(w);
	if (wait_settled(PHASE_DISCONNECT, 1, now_ns() + PHASE_TIMEOUT_NS, false) < 1 ||
	    atomic_load(&bench.failed[PHASE_DISCONNECT]))
		goto out;
	ret = 0;
out:
	destroy_one(w);
	if (ret)
		msg("the warm-up connection failed");
	for (int p = 0; p < NR_PHASES; p++) {
		atomic_store(&bench.settled[p], 0);
		atomic_store(&bench.failed[p], 0);
	}
	return ret;
}

/* The four phases, all connections at once in each. */
static bool run_phased(void)
{
	struct memory *m = &bench.memory;

	m->before = rss_bytes();
	if (run_create() || compute_result(PHASE_CREATE))
		return false;
	m->created = rss_bytes();
	if (run_connect() || compute_result(PHASE_CONNECT))
		return false;
	m->connected = rss_bytes();
	m->valid = m->before && m->created && m->connected;
	if (run_disconnect() || compute_result(PHASE_DISCONNECT))
		return false;
	run_destroy();
	return compute_result(PHASE_DESTROY) == 0;
}

static bool run_one_by_one(void)
{
	if (run_sequential())
		return false;
	for (int p = 0; p < NR_PHASES; p++)
		if (compute_result(p))
			return false;
	return true;
}

int main(int argc, char **argv)
{
	bool ok;

	if (parse_args(argc, argv) || init_sync())
		return EXIT_FAILURE;

	ok = setup() == 0;
	if (bench.mode == MODE_SERVER) {
		if (ok)
			ok = serve() == 0;
		if (report_bad_events())
			ok = false;
		if (cleanup())
			ok = false;
		print_server_summary(ok);
		return ok ? EXIT_SUCCESS : EXIT_FAILURE;
	}

	if (ok && bench.warmup)
		ok = warm_up() == 0;
	if (ok)
		ok = bench.sequential ? run_one_by_one() : run_phased();
	/* Events may still come in during cleanup: count what the run saw. */
	if (report_bad_events())
		ok = false;
	if (bench.mode == MODE_CLIENT && bench.active_dev)
		farewell();
	if (cleanup())
		ok = false;

	if (bench.json)
		print_json(ok);
	else
		print_table();
	return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
