// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * ibcm-cmtime - connection setup and teardown benchmark for libib_cm,
 * shaped like rdma-core's cmtime (librdmacm/examples/cmtime.c).
 *
 * Active ids on one device connect to a listener on a second device. Each
 * phase starts its operation for every connection back to back and stamps
 * each connection's start (here) and completion (in the CM handler, on the
 * library's event thread). So a row of the table gives both the phase's
 * throughput and each connection's latency under that load:
 *
 *   create id   ib_create_cm_id() of the active ids
 *   connect     ib_send_cm_req() until both sides are ESTABLISHED:
 *               REQ, REP from the passive handler, RTU from the active
 *               handler, RTU_RECEIVED on the passive side
 *   disconnect  ib_send_cm_dreq() until DREP_RECEIVED, the DREP sent by
 *               the passive handler: the whole DREQ/DREP round trip, as
 *               cmtime timed it up to rdma-core v51
 *   destroy     ib_destroy_cm_id() of both ids of a connection
 */

#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
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

/* A phase that has not finished by then has lost something: give up. */
#define PHASE_TIMEOUT_NS	(60 * NSEC_PER_SEC)
#define PHASE_TIMEOUT_PER_CONN_NS NSEC_PER_MSEC
/* How often the main thread looks at a running phase (progress, timeout). */
#define POLL_INTERVAL_NS	(100 * NSEC_PER_MSEC)
/* Runs this long get a progress line every 10% without -p. */
#define PROGRESS_MIN_CONNS	10000
/* Messages about single connections; the counts are always complete. */
#define MAX_ERROR_MESSAGES	10
/* How long cleanup waits for ids the library still destroys. */
#define CLOSE_RETRY_MS		5000

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
	/* connect: how many sides reached ESTABLISHED (done at 2). */
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

static struct {
	/* Options. */
	unsigned int nr_conns;
	const char *active_dev_name;
	const char *passive_dev_name;
	bool json;
	bool progress;

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
} bench = {
	.nr_conns = DEFAULT_CONNS,
	.active_dev_name = "loop0",
	.passive_dev_name = "loop1",
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
 * reverse. The release in the fetch_add publishes end[] to the main thread.
 */
static void conn_settle(struct conn *conn, enum phase phase, bool ok,
			uint64_t end)
{
	if (atomic_exchange(&conn->settled[phase], true))
		return;
	conn->end[phase] = end;
	if (!ok)
		atomic_fetch_add(&bench.failed[phase], 1);
	if (atomic_fetch_add_explicit(&bench.settled[phase], 1,
				      memory_order_acq_rel) + 1 == bench.nr_conns)
		wake_main();
}

/* One side of `conn` is ESTABLISHED; the connection is when both are. */
static void conn_side_up(struct conn *conn)
{
	uint64_t now = now_ns();

	if (atomic_fetch_add(&conn->sides_up, 1) + 1 == 2)
		conn_settle(conn, PHASE_CONNECT, true, now);
}

/* An event that ends `phase` for `conn` in failure. */
static void failure_event(enum phase phase, struct conn *conn,
			  const char *side, const struct ib_cm_event *event)
{
	char detail[160] = "";

	atomic_fetch_add(&bench.bad_events[event->event], 1);
	switch (event->event) {
	case IB_CM_REJ_RECEIVED:
		snprintf(detail, sizeof(detail), ": reason %d (%s)",
			 event->param.rej_rcvd.reason,
			 ibcm_reject_msg(event->param.rej_rcvd.reason));
		break;
	case IB_CM_REQ_ERROR:
	case IB_CM_REP_ERROR:
	case IB_CM_DREQ_ERROR:
		snprintf(detail, sizeof(detail), ": send status %d",
			 event->param.send_status);
		break;
	default:
		break;
	}
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

/*
 * A new passive id for the connection named by the REQ's private data. A
 * non-zero return makes the library reject the REQ and destroy the id: only
 * for ids that were not registered, so cleanup never destroys one twice.
 */
static int passive_req(struct ib_cm_id *cm_id, const struct ib_cm_event *event)
{
	const struct ib_cm_req_event_param *req = &event->param.req_rcvd;
	struct ib_cm_rep_param rep;
	struct conn *conn;
	uint32_t be_index;
	unsigned int index;
	bool taken, registered = false;
	int ret;

	if (!event->private_data) {
		unexpected_event("passive", cm_id, event);
		return 1;
	}
	memcpy(&be_index, event->private_data, sizeof(be_index));
	index = be32toh(be_index);
	if (index >= bench.nr_conns || req->remote_qpn != active_qpn(index)) {
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

	memset(&rep, 0, sizeof(rep));
	rep.qp_num = passive_qpn(index);
	rep.responder_resources = req->responder_resources;
	rep.initiator_depth = req->initiator_depth;
	rep.flow_control = req->flow_control;
	rep.rnr_retry_count = req->rnr_retry_count;
	ret = ib_send_cm_rep(cm_id, &rep);
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
 * Waits until every connection is settled in `phase` (done or failed), at
 * most the phase timeout: a lost message must not hang the run.
 */
static int wait_phase(enum phase phase)
{
	uint64_t timeout = PHASE_TIMEOUT_NS +
			   bench.nr_conns * PHASE_TIMEOUT_PER_CONN_NS;
	uint64_t deadline = bench.phase_start[phase] + timeout;
	unsigned int step = bench.nr_conns / 10 ? bench.nr_conns / 10 : 1;
	unsigned int next = step, settled, failed;
	struct timespec until;
	uint64_t now;

	pthread_mutex_lock(&bench.lock);
	for (;;) {
		settled = atomic_load(&bench.settled[phase]);
		if (settled >= bench.nr_conns)
			break;
		now = now_ns();
		if (now >= deadline)
			break;
		show_progress(phase, settled, &next);

		until = ns_to_timespec(deadline - now < POLL_INTERVAL_NS ?
				       deadline : now + POLL_INTERVAL_NS);
		pthread_cond_timedwait(&bench.done, &bench.lock, &until);
	}
	pthread_mutex_unlock(&bench.lock);

	failed = atomic_load(&bench.failed[phase]);
	if (settled < bench.nr_conns) {
		msg("%s: timed out after %.1f s: %u of %u connections completed, %u failed",
		    phase_name[phase], (double)timeout / NSEC_PER_SEC,
		    settled - failed, bench.nr_conns, failed);
		return -1;
	}
	show_progress(phase, settled, &next);
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

	/* Like cmtime: from the phase's start to its last completion. */
	total = last_end - bench.phase_start[phase];
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

static int run_create(void)
{
	unsigned int next = bench.nr_conns;

	bench.phase_start[PHASE_CREATE] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++) {
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
	}
	show_progress(PHASE_CREATE, bench.nr_conns, &next);
	return 0;
}

static int run_connect(void)
{
	struct ib_cm_req_param req;
	uint32_t be_index;
	int ret;

	memset(&req, 0, sizeof(req));
	req.primary_path = &bench.path;
	req.service_id = htobe64(SERVICE_ID);
	req.qp_type = IB_QPT_RC;
	/* The connection's index, for the passive side to find it by. */
	req.private_data = &be_index;
	req.private_data_len = sizeof(be_index);
	req.responder_resources = 1;
	req.initiator_depth = 1;
	req.remote_cm_response_timeout = CM_RESPONSE_TIMEOUT;
	req.local_cm_response_timeout = CM_RESPONSE_TIMEOUT;
	req.retry_count = 7;
	req.rnr_retry_count = 7;
	req.max_cm_retries = MAX_CM_RETRIES;

	bench.phase_start[PHASE_CONNECT] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++) {
		struct conn *conn = &bench.conns[i];

		/*
		 * The library checks a DREQ's QPN against the one in the REP
		 * and detects stale connections by (GUID, QPN): every
		 * connection needs its own.
		 */
		req.qp_num = active_qpn(i);
		be_index = htobe32(i);
		conn->start[PHASE_CONNECT] = now_ns();
		ret = ib_send_cm_req(conn->active, &req);
		if (ret) {
			conn_call_failed(PHASE_CONNECT, conn, "ib_send_cm_req",
					 ret);
			conn_settle(conn, PHASE_CONNECT, false, now_ns());
		}
	}
	return wait_phase(PHASE_CONNECT);
}

static int run_disconnect(void)
{
	int ret;

	bench.phase_start[PHASE_DISCONNECT] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++) {
		struct conn *conn = &bench.conns[i];

		conn->start[PHASE_DISCONNECT] = now_ns();
		ret = ib_send_cm_dreq(conn->active, NULL, 0);
		if (ret) {
			conn_call_failed(PHASE_DISCONNECT, conn,
					 "ib_send_cm_dreq", ret);
			conn_settle(conn, PHASE_DISCONNECT, false, now_ns());
		}
	}
	return wait_phase(PHASE_DISCONNECT);
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

static void run_destroy(void)
{
	unsigned int next = bench.nr_conns;

	bench.phase_start[PHASE_DESTROY] = now_ns();
	for (unsigned int i = 0; i < bench.nr_conns; i++) {
		struct conn *conn = &bench.conns[i];
		struct ib_cm_id *passive = conn_take_passive(conn);

		conn->start[PHASE_DESTROY] = now_ns();
		ib_destroy_cm_id(conn->active);
		ib_destroy_cm_id(passive);
		conn->end[PHASE_DESTROY] = now_ns();
		conn->active = NULL;
	}
	show_progress(PHASE_DESTROY, bench.nr_conns, &next);
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

/* Devices, the path between them, the listener, the connection array. */
static int setup(void)
{
	union ib_gid passive_gid;
	char buf[128];
	int ret;

	bench.active_dev = open_device(bench.active_dev_name);
	if (!bench.active_dev)
		return -1;
	bench.passive_dev = open_device(bench.passive_dev_name);
	if (!bench.passive_dev)
		return -1;

	ret = ibcm_query_gid(bench.passive_dev, PORT_NUM, 0, &passive_gid);
	if (ret) {
		msg("ibcm_query_gid(%s, port %d): %s", bench.passive_dev_name,
		    PORT_NUM, err_str(ret, buf, sizeof(buf)));
		return -1;
	}
	ret = ibcm_init_path(bench.active_dev, PORT_NUM, &passive_gid,
			     &bench.path);
	if (ret) {
		msg("ibcm_init_path(%s -> %s): %s", bench.active_dev_name,
		    bench.passive_dev_name, err_str(ret, buf, sizeof(buf)));
		return -1;
	}

	bench.conns = calloc(bench.nr_conns, sizeof(*bench.conns));
	if (!bench.conns) {
		msg("out of memory for %u connections", bench.nr_conns);
		return -1;
	}
	for (unsigned int i = 0; i < bench.nr_conns; i++) {
		atomic_init(&bench.conns[i].sides_up, 0);
		for (int p = 0; p < NR_PHASES; p++)
			atomic_init(&bench.conns[i].settled[p], false);
	}

	bench.listener = ib_create_cm_id(bench.passive_dev, passive_handler,
					 NULL);
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
		for (unsigned int i = 0; i < bench.nr_conns; i++) {
			struct conn *conn = &bench.conns[i];

			if (conn->active)
				ib_destroy_cm_id(conn->active);
			ib_destroy_cm_id(conn_take_passive(conn));
		}
	}
	if (bench.active_dev &&
	    close_device(bench.active_dev, bench.active_dev_name))
		ret = -1;
	if (bench.passive_dev &&
	    close_device(bench.passive_dev, bench.passive_dev_name))
		ret = -1;
	free(bench.conns);
	bench.conns = NULL;
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

static void print_table(void)
{
	bool any = false;

	for (int p = 0; p < NR_PHASES; p++)
		any |= bench.result[p].valid;
	if (!any)
		return;
	printf("%-12s %11s %11s %10s %10s %10s %10s %10s\n", "phase",
	       "total(ms)", "conn/s", "avg(us)", "min(us)", "p50(us)",
	       "p99(us)", "max(us)");
	for (int p = 0; p < NR_PHASES; p++) {
		const struct phase_result *r = &bench.result[p];

		if (!r->valid)
			continue;
		printf("%-12s %11.2f %11.0f %10.2f %10.2f %10.2f %10.2f %10.2f\n",
		       phase_name[p], r->total_ms, r->conn_per_sec, r->avg_us,
		       r->min_us, r->p50_us, r->p99_us, r->max_us);
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

static void print_json(bool ok)
{
	bool first = true;

	printf("{\n  \"tool\": \"" PROG "\",\n  \"connections\": %u,\n",
	       bench.nr_conns);
	printf("  \"active_device\": ");
	print_json_string(bench.active_dev_name);
	printf(",\n  \"passive_device\": ");
	print_json_string(bench.passive_dev_name);
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
	printf("%s],\n  \"failure_events\": {", first ? "" : "\n  ");
	first = true;
	for (int type = 0; type < NR_EVENT_TYPES; type++) {
		unsigned int n = atomic_load(&bench.bad_events[type]);

		if (!n)
			continue;
		printf("%s\"%s\": %u", first ? "" : ", ", event_name[type], n);
		first = false;
	}
	printf("},\n  \"unexpected\": %u\n}\n", atomic_load(&bench.unexpected));
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " [-c connections] [-d active_dev] [-D passive_dev] [-p] [--json]\n"
		"\n"
		"Times connection setup and teardown with libib_cm: create id, connect\n"
		"(REQ/REP/RTU), disconnect (DREQ/DREP) and destroy, each phase started\n"
		"for all connections back to back.\n"
		"\n"
		"  -c, --connections N   connections (default %d, at most %d)\n"
		"  -d, --active-dev DEV  device of the active side (default loop0)\n"
		"  -D, --passive-dev DEV device of the listener (default loop1)\n"
		"  -p, --progress        progress on stderr (default with %d+ connections)\n"
		"      --json            print the results as JSON instead of a table\n"
		"  -h, --help            this help\n",
		DEFAULT_CONNS, MAX_CONNS, PROGRESS_MIN_CONNS);
}

static int parse_args(int argc, char **argv)
{
	enum { OPT_JSON = 256 };
	static const struct option long_opts[] = {
		{ "connections", required_argument, NULL, 'c' },
		{ "active-dev", required_argument, NULL, 'd' },
		{ "passive-dev", required_argument, NULL, 'D' },
		{ "progress", no_argument, NULL, 'p' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool progress = false;
	unsigned long n;
	char *end;
	int opt;

	while ((opt = getopt_long(argc, argv, "c:d:D:ph", long_opts,
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
		case 'p':
			progress = true;
			break;
		case OPT_JSON:
			bench.json = true;
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

int main(int argc, char **argv)
{
	bool ok;

	if (parse_args(argc, argv) || init_sync())
		return EXIT_FAILURE;

	ok = setup() == 0 &&
	     run_create() == 0 && compute_result(PHASE_CREATE) == 0 &&
	     run_connect() == 0 && compute_result(PHASE_CONNECT) == 0 &&
	     run_disconnect() == 0 && compute_result(PHASE_DISCONNECT) == 0;
	if (ok) {
		run_destroy();
		ok = compute_result(PHASE_DESTROY) == 0;
	}
	/* Events may still come in during cleanup: count what the run saw. */
	if (report_bad_events())
		ok = false;
	if (cleanup())
		ok = false;

	if (bench.json)
		print_json(ok);
	else
		print_table();
	return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
