// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * ibcm-loopbench - closed-loop connect+disconnect cycles through libib_cm.
 *
 * W slots each run whole connection lifecycles one after the other, for a
 * fixed time: the main thread creates an active id and sends its REQ; the
 * active handler answers the REP with an RTU and at once sends a DREQ; the
 * passive handler answers the REQ with a REP and the DREQ with a DREP; the
 * DREP_RECEIVED handler stamps the cycle done and returns non-zero, so the
 * library destroys the active id; the main thread starts the slot's next
 * cycle. Passive ids are destroyed at their TIMEWAIT_EXIT.
 *
 * Cycles/s is the steady-state rate of whole lifecycles (create id, REQ, REP,
 * RTU, DREQ, DREP, destroy) with W of them in flight. With -w 1 each cycle
 * runs alone, and the per-cycle times are latencies:
 *
 *   cycle       ib_create_cm_id() .. DREP_RECEIVED
 *   connect     ib_create_cm_id() .. REP_RECEIVED on the active side
 *   dreq->drep  ib_send_cm_dreq() (in the REP handler, on the library's
 *               worker thread) .. DREP_RECEIVED
 *
 * With --poll US the main thread looks for finished slots for up to US
 * microseconds before it sleeps on its condition variable, as perftest's
 * latency tests poll their CQ. With -w 1 the cycle rate then shows the
 * library's latency without the tool's own wake-up: on a virtual machine
 * whose idle vCPUs halt, a futex wake-up costs 5-6 us, half a cycle.
 *
 * With --chain the DREP_RECEIVED handler starts the slot's next cycle
 * itself, on the library's worker thread: no thread hands work to another,
 * and the rate is the library's own cost of a whole lifecycle.
 *
 * No QPs: like ibcm-cmtime, this tool never creates one; QPNs are made up.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include <rdma/ib_cm.h>

#define PROG "ibcm-loopbench"

#define NSEC_PER_USEC	1000ULL
#define NSEC_PER_MSEC	1000000ULL
#define NSEC_PER_SEC	1000000000ULL

#define PORT_NUM		1
#define SERVICE_ID		0x5107
/* Active QPNs cycle through 1 .. 0x7fffff; the passive one adds 0x800000. */
#define QPN_LIMIT		0x800000u
#define PASSIVE_QPN_FLAG	0x800000u
#define MAX_WINDOW		100000
/* Samples kept per metric; cycles beyond are counted, not sampled. */
#define MAX_SAMPLES		(4u << 20)
/* A run in which nothing completes for this long has lost a message. */
#define STALL_NS		(30 * NSEC_PER_SEC)
/* How long the end of the run waits for passive ids to leave timewait. */
#define DRAIN_NS		(10 * NSEC_PER_SEC)

struct slot {
	struct ib_cm_id *active;
	uint64_t t_start;	/* before ib_create_cm_id */
	uint64_t t_rep;		/* REP_RECEIVED */
	uint64_t t_dreq;	/* before ib_send_cm_dreq */
	uint64_t t_drep;	/* DREP_RECEIVED */
	bool failed;
	bool counted;		/* --chain: the handler counted it already */
};

struct samples {
	uint64_t *v;
	size_t n;
};

static struct {
	const char *active_dev_name;
	const char *passive_dev_name;
	unsigned int window;
	double seconds;
	unsigned int poll_us;
	bool chain;
	bool json;

	struct ib_device *active_dev;
	struct ib_device *passive_dev;
	struct ib_cm_id *listener;
	struct sa_path_rec path;
	struct slot *slots;
	atomic_uint next_qpn;
	/* No cycle starts after it (set before the first starts). */
	uint64_t deadline;

	/* Finished slots, queued by handlers for the main thread. */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned int *done_q;
	unsigned int done_head;
	/* Written under lock; --poll also reads it without (atomically). */
	unsigned int done_count;
	bool main_waiting;

	/* --poll: looks that ended without a finished cycle. */
	uint64_t polls, polls_timed_out;

	atomic_uint live_passive;
	atomic_uint failures;
	atomic_uint messages;

	/* Under lock: --chain counts cycles on the worker thread. */
	uint64_t cycles;
	struct samples cycle, connect, dreq_rtt;
} lb = {
	.active_dev_name = "loop0",
	.passive_dev_name = "loop1",
	.window = 1000,
	.seconds = 2.0,
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void fail(const char *what, int ret)
{
	unsigned int n = atomic_fetch_add(&lb.failures, 1);

	if (n < 10)
		fprintf(stderr, PROG ": %s: %d (%s)\n", what, ret,
			ret < 0 ? strerror(-ret) : "event");
}

/* Hands slot `s` back to the main thread. */
static void slot_done(unsigned int s)
{
	bool wake;

	pthread_mutex_lock(&lb.lock);
	lb.done_q[(lb.done_head + lb.done_count) % lb.window] = s;
	__atomic_store_n(&lb.done_count, lb.done_count + 1, __ATOMIC_RELEASE);
	wake = lb.main_waiting;
	pthread_mutex_unlock(&lb.lock);
	if (wake)
		pthread_cond_signal(&lb.cond);
}

static int start_cycle(unsigned int s);
static void sample(struct samples *s, uint64_t v);

/* Counts a finished cycle and keeps its times; the caller holds lb.lock. */
static void count_cycle(const struct slot *slot)
{
	if (slot->failed || slot->counted)
		return;
	lb.cycles++;
	sample(&lb.cycle, slot->t_drep - slot->t_start);
	sample(&lb.connect, slot->t_rep - slot->t_start);
	sample(&lb.dreq_rtt, slot->t_drep - slot->t_dreq);
}

/* --chain: the slot's next cycle starts here, in the DREP handler; true if it did. */
static bool chain_next_cycle(unsigned int s)
{
	struct slot *slot = &lb.slots[s];

	pthread_mutex_lock(&lb.lock);
	count_cycle(slot);
	pthread_mutex_unlock(&lb.lock);
	slot->counted = true;
	if (now_ns() >= lb.deadline || atomic_load(&lb.failures))
		return false;
	if (start_cycle(s) == 0)
		return true;
	slot->failed = true;	/* start_cycle cleared the slot */
	return false;
}

static int active_handler(struct ib_cm_id *cm_id,
			  const struct ib_cm_event *event)
{
	unsigned int s = (unsigned int)(uintptr_t)cm_id->context;
	struct slot *slot = &lb.slots[s];
	int ret;

	switch (event->event) {
	case IB_CM_REP_RECEIVED:
		slot->t_rep = now_ns();
		ret = ib_send_cm_rtu(cm_id, NULL, 0);
		if (ret) {
			fail("ib_send_cm_rtu", ret);
			slot->failed = true;
			slot_done(s);
			return 1;
		}
		slot->t_dreq = now_ns();
		ret = ib_send_cm_dreq(cm_id, NULL, 0);
		if (ret) {
			fail("ib_send_cm_dreq", ret);
			slot->failed = true;
			slot_done(s);
			return 1;
		}
		return 0;
	case IB_CM_DREP_RECEIVED:
		slot->t_drep = now_ns();
		if (!lb.chain || !chain_next_cycle(s))
			slot_done(s);
		return 1;	/* the library destroys the id */
	case IB_CM_REQ_ERROR:
	case IB_CM_REJ_RECEIVED:
	case IB_CM_DREQ_ERROR:
		fail("active side failure event", (int)event->event);
		slot->failed = true;
		slot_done(s);
		return 1;
	default:
		return 0;
	}
}

static int passive_handler(struct ib_cm_id *cm_id,
			   const struct ib_cm_event *event)
{
	struct ib_cm_rep_param rep;
	int ret;

	switch (event->event) {
	case IB_CM_REQ_RECEIVED:
		memset(&rep, 0, sizeof(rep));
		rep.qp_num = event->param.req_rcvd.remote_qpn | PASSIVE_QPN_FLAG;
		rep.responder_resources = 1;
		rep.initiator_depth = 1;
		rep.rnr_retry_count = 7;
		ret = ib_send_cm_rep(cm_id, &rep);
		if (ret) {
			fail("ib_send_cm_rep", ret);
			return 1;
		}
		atomic_fetch_add(&lb.live_passive, 1);
		return 0;
	case IB_CM_DREQ_RECEIVED:
		ret = ib_send_cm_drep(cm_id, NULL, 0);
		if (ret)
			fail("ib_send_cm_drep", ret);
		return 0;
	case IB_CM_TIMEWAIT_EXIT:
		atomic_fetch_sub(&lb.live_passive, 1);
		return 1;
	case IB_CM_REP_ERROR:
	case IB_CM_REJ_RECEIVED:
		fail("passive side failure event", (int)event->event);
		atomic_fetch_sub(&lb.live_passive, 1);
		return 1;
	default:
		return 0;
	}
}

static int start_cycle(unsigned int s)
{
	struct slot *slot = &lb.slots[s];
	struct ib_cm_req_param req;
	struct ib_cm_id *id;
	uint32_t qpn;
	int ret;

	memset(slot, 0, sizeof(*slot));
	qpn = atomic_fetch_add(&lb.next_qpn, 1) % (QPN_LIMIT - 1) + 1;
	slot->t_start = now_ns();
	id = ib_create_cm_id(lb.active_dev, active_handler,
			     (void *)(uintptr_t)s);
	if (IS_ERR(id)) {
		fail("ib_create_cm_id", (int)PTR_ERR(id));
		return -1;
	}
	slot->active = id;

	memset(&req, 0, sizeof(req));
	req.primary_path = &lb.path;
	req.service_id = htobe64(SERVICE_ID);
	req.qp_num = qpn;
	req.qp_type = IB_QPT_RC;
	req.responder_resources = 1;
	req.initiator_depth = 1;
	req.remote_cm_response_timeout = 20;
	req.local_cm_response_timeout = 20;
	req.retry_count = 7;
	req.rnr_retry_count = 7;
	req.max_cm_retries = 15;
	ret = ib_send_cm_req(id, &req);
	if (ret) {
		fail("ib_send_cm_req", ret);
		ib_destroy_cm_id(id);
		return -1;
	}
	return 0;
}

static void sample(struct samples *s, uint64_t v)
{
	if (s->n < MAX_SAMPLES)
		s->v[s->n++] = v;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double pct_us(const struct samples *s, unsigned int pct)
{
	size_t rank;

	if (!s->n)
		return 0;
	rank = (s->n * pct + 99) / 100;
	return (double)s->v[rank ? rank - 1 : 0] / NSEC_PER_USEC;
}

static struct ib_device *open_device(const char *name)
{
	struct ib_device *dev = ibcm_open_device(name);

	if (IS_ERR(dev)) {
		fprintf(stderr, PROG ": cannot open %s: %s\n", name,
			strerror((int)-PTR_ERR(dev)));
		return NULL;
	}
	return dev;
}

static int setup(void)
{
	union ib_gid gid;
	int ret;

	lb.active_dev = open_device(lb.active_dev_name);
	lb.passive_dev = open_device(lb.passive_dev_name);
	if (!lb.active_dev || !lb.passive_dev)
		return -1;
	ret = ibcm_query_gid(lb.passive_dev, PORT_NUM, 0, &gid);
	if (!ret)
		ret = ibcm_init_path(lb.active_dev, PORT_NUM, &gid, &lb.path);
	if (ret) {
		fprintf(stderr, PROG ": path %s -> %s: %s\n", lb.active_dev_name,
			lb.passive_dev_name, strerror(-ret));
		return -1;
	}
	lb.listener = ib_create_cm_id(lb.passive_dev, passive_handler, NULL);
	if (IS_ERR(lb.listener)) {
		lb.listener = NULL;
		return -1;
	}
	ret = ib_cm_listen(lb.listener, htobe64(SERVICE_ID));
	if (ret) {
		fprintf(stderr, PROG ": ib_cm_listen: %s\n", strerror(-ret));
		return -1;
	}
	lb.slots = calloc(lb.window, sizeof(*lb.slots));
	lb.done_q = calloc(lb.window, sizeof(*lb.done_q));
	lb.cycle.v = malloc(MAX_SAMPLES * sizeof(uint64_t));
	lb.connect.v = malloc(MAX_SAMPLES * sizeof(uint64_t));
	lb.dreq_rtt.v = malloc(MAX_SAMPLES * sizeof(uint64_t));
	if (!lb.slots || !lb.done_q || !lb.cycle.v || !lb.connect.v ||
	    !lb.dreq_rtt.v) {
		fprintf(stderr, PROG ": out of memory\n");
		return -1;
	}
	return 0;
}

/*
 * --poll: waits up to poll_us for a finished slot without sleeping. It
 * yields between looks, as the library's worker does: the handler that
 * finishes the slot may need this very CPU.
 */
static void poll_for_done(void)
{
	uint64_t until;

	if (!lb.poll_us)
		return;
	lb.polls++;
	until = now_ns() + lb.poll_us * NSEC_PER_USEC;
	while (!__atomic_load_n(&lb.done_count, __ATOMIC_ACQUIRE)) {
		if (now_ns() >= until) {
			lb.polls_timed_out++;
			return;
		}
		sched_yield();
	}
}

/* A decimal number in [min, max], nothing else (no sign, no blanks). */
static bool parse_uint(const char *arg, unsigned long min, unsigned long max,
		       unsigned long *out)
{
	unsigned long long v;
	char *end;

	if (*arg < '0' || *arg > '9')
		return false;
	errno = 0;
	v = strtoull(arg, &end, 10);
	if (*end || errno || v < min || v > max)
		return false;
	*out = (unsigned long)v;
	return true;
}

/* Runs the cycles; returns the wall time from the first start to the end. */
static uint64_t run(void)
{
	unsigned int in_flight = 0, batch_n, *batch;
	uint64_t start, last_progress, now, cycles_seen = 0;
	struct timespec ts;

	batch = calloc(lb.window, sizeof(*batch));
	if (!batch)
		return 0;
	start = now_ns();
	lb.deadline = start + (uint64_t)(lb.seconds * NSEC_PER_SEC);
	last_progress = start;
	for (unsigned int s = 0; s < lb.window; s++)
		if (start_cycle(s) == 0)
			in_flight++;

	while (in_flight) {
		poll_for_done();
		pthread_mutex_lock(&lb.lock);
		while (!lb.done_count) {
			now = now_ns();
			if (lb.cycles != cycles_seen) {	/* --chain */
				cycles_seen = lb.cycles;
				last_progress = now;
			}
			if (now - last_progress > STALL_NS)
				break;
			lb.main_waiting = true;
			ts.tv_sec = (time_t)((now + 100 * NSEC_PER_MSEC) / NSEC_PER_SEC);
			ts.tv_nsec = (long)((now + 100 * NSEC_PER_MSEC) % NSEC_PER_SEC);
			pthread_cond_timedwait(&lb.cond, &lb.lock, &ts);
			lb.main_waiting = false;
		}
		batch_n = lb.done_count;
		for (unsigned int i = 0; i < batch_n; i++)
			batch[i] = lb.done_q[(lb.done_head + i) % lb.window];
		lb.done_head = (lb.done_head + batch_n) % lb.window;
		lb.done_count = 0;
		for (unsigned int i = 0; i < batch_n; i++)
			count_cycle(&lb.slots[batch[i]]);
		cycles_seen = lb.cycles;
		pthread_mutex_unlock(&lb.lock);

		now = now_ns();
		if (!batch_n) {
			fprintf(stderr, PROG ": stalled: %u cycles in flight, none finished for %.0f s\n",
				in_flight, (double)STALL_NS / NSEC_PER_SEC);
			free(batch);
			return 0;
		}
		last_progress = now;
		for (unsigned int i = 0; i < batch_n; i++) {
			if (now < lb.deadline && !atomic_load(&lb.failures) &&
			    start_cycle(batch[i]) == 0)
				continue;
			in_flight--;
		}
	}
	free(batch);
	return now_ns() - start;
}

/* Waits for passive ids to leave timewait, then closes everything. */
static int cleanup(void)
{
	uint64_t until = now_ns() + DRAIN_NS;
	int ret = 0;

	while (atomic_load(&lb.live_passive) && now_ns() < until)
		usleep(1000);
	if (atomic_load(&lb.live_passive)) {
		fprintf(stderr, PROG ": %u passive ids still alive\n",
			atomic_load(&lb.live_passive));
		return -1;
	}
	if (lb.listener)
		ib_destroy_cm_id(lb.listener);
	for (int i = 0; i < 5000; i++) {
		ret = 0;
		if (lb.active_dev && (ret = ibcm_close_device(lb.active_dev)) == 0)
			lb.active_dev = NULL;
		if (lb.passive_dev && (ret = ibcm_close_device(lb.passive_dev)) == 0)
			lb.passive_dev = NULL;
		if (!lb.active_dev && !lb.passive_dev)
			break;
		usleep(1000);
	}
	if (ret)
		fprintf(stderr, PROG ": ibcm_close_device: %s\n", strerror(-ret));
	return ret ? -1 : 0;
}

static void report(uint64_t wall, bool ok)
{
	double secs = (double)wall / NSEC_PER_SEC;
	double rate = secs > 0 ? (double)lb.cycles / secs : 0;
	struct samples *m[] = { &lb.cycle, &lb.connect, &lb.dreq_rtt };
	const char *names[] = { "cycle", "connect", "dreq->drep" };

	for (int i = 0; i < 3; i++)
		qsort(m[i]->v, m[i]->n, sizeof(uint64_t), cmp_u64);
	if (lb.json) {
		printf("{\n  \"tool\": \"" PROG "\",\n  \"window\": %u,\n  \"poll_us\": %u,\n  \"polls\": %llu,\n"
		       "  \"polls_timed_out\": %llu,\n  \"chain\": %s,\n"
		       "  \"seconds\": %.3f,\n  \"cycles\": %llu,\n"
		       "  \"cycles_per_sec\": %.1f,\n  \"failures\": %u,\n"
		       "  \"status\": \"%s\",\n  \"latency_us\": {",
		       lb.window, lb.poll_us, (unsigned long long)lb.polls,
		       (unsigned long long)lb.polls_timed_out,
		       lb.chain ? "true" : "false", secs, (unsigned long long)lb.cycles, rate,
		       atomic_load(&lb.failures), ok ? "ok" : "failed");
		for (int i = 0; i < 3; i++)
			printf("%s\n    \"%s\": {\"min\": %.3f, \"p50\": %.3f, "
			       "\"p99\": %.3f, \"max\": %.3f}",
			       i ? "," : "", names[i], pct_us(m[i], 0),
			       pct_us(m[i], 50), pct_us(m[i], 99),
			       pct_us(m[i], 100));
		printf("\n  }\n}\n");
		return;
	}
	printf("%llu connect+disconnect cycles in %.3f s with %u in flight%s: %.0f cycles/s%s\n",
	       (unsigned long long)lb.cycles, secs, lb.window,
	       lb.chain ? ", chained in the handler" : "", rate,
	       ok ? "" : " (FAILED)");
	printf("%-12s %10s %10s %10s %10s\n", "per cycle", "min(us)",
	       "p50(us)", "p99(us)", "max(us)");
	for (int i = 0; i < 3; i++)
		printf("%-12s %10.2f %10.2f %10.2f %10.2f\n", names[i],
		       pct_us(m[i], 0), pct_us(m[i], 50), pct_us(m[i], 99),
		       pct_us(m[i], 100));
	if (lb.poll_us)
		printf("polls: %llu, %llu of them found no finished cycle within %u us (the thread then slept)\n",
		       (unsigned long long)lb.polls,
		       (unsigned long long)lb.polls_timed_out, lb.poll_us);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " [-w window] [-t seconds] [-p us] [--chain] [-d dev] [-D dev]\n"
		"       [--json]\n"
		"\n"
		"Closed-loop connect+disconnect cycles through libib_cm: `window` slots\n"
		"each run create id, REQ/REP/RTU, DREQ/DREP, destroy, again and again\n"
		"for `seconds`. No QPs are created (made-up QPNs).\n"
		"\n"
		"  -w, --window N        cycles in flight (default 1000; 1 = one at a time)\n"
		"  -t, --seconds S       how long to start new cycles (default 2)\n"
		"  -p, --poll US         look for finished cycles for up to US microseconds\n"
		"                        before sleeping (default 0: sleep at once)\n"
		"      --chain           start each slot's next cycle in its DREP handler,\n"
		"                        on the library's thread\n"
		"  -d, --active-dev DEV  default loop0\n"
		"  -D, --passive-dev DEV default loop1\n"
		"      --json            JSON instead of text\n");
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "window", required_argument, NULL, 'w' },
		{ "seconds", required_argument, NULL, 't' },
		{ "poll", required_argument, NULL, 'p' },
		{ "chain", no_argument, NULL, 'c' },
		{ "active-dev", required_argument, NULL, 'd' },
		{ "passive-dev", required_argument, NULL, 'D' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long value;
	char *end;
	int opt;

	while ((opt = getopt_long(argc, argv, "w:t:p:d:D:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'w':
			if (!parse_uint(optarg, 1, MAX_WINDOW, &value)) {
				fprintf(stderr, PROG ": -w: 1 to %d\n", MAX_WINDOW);
				return -1;
			}
			lb.window = (unsigned int)value;
			break;
		case 't':
			lb.seconds = strtod(optarg, &end);
			if (*end || lb.seconds <= 0 || lb.seconds > 3600) {
				fprintf(stderr, PROG ": -t: seconds, more than 0\n");
				return -1;
			}
			break;
		case 'c':
			lb.chain = true;
			break;
		case 'p':
			if (!parse_uint(optarg, 0, 1000000, &value)) {
				fprintf(stderr, PROG ": -p: microseconds, 0 to 1000000\n");
				return -1;
			}
			lb.poll_us = (unsigned int)value;
			break;
		case 'd':
			lb.active_dev_name = optarg;
			break;
		case 'D':
			lb.passive_dev_name = optarg;
			break;
		case 'j':
			lb.json = true;
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
		usage(stderr);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t wall = 0;
	pthread_condattr_t attr;
	bool ok;

	if (parse_args(argc, argv))
		return EXIT_FAILURE;
	/* Deadlines are CLOCK_MONOTONIC, like every other time here. */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&lb.cond, &attr);
	pthread_condattr_destroy(&attr);
	pthread_mutex_init(&lb.lock, NULL);

	ok = setup() == 0;
	if (ok) {
		wall = run();
		ok = wall != 0 && !atomic_load(&lb.failures);
	}
	if (cleanup())
		ok = false;
	report(wall, ok);
	free(lb.slots);
	free(lb.done_q);
	free(lb.cycle.v);
	free(lb.connect.v);
	free(lb.dreq_rtt.v);
	return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
