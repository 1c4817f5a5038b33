// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * rdmacm-cmtime-noqp - the kernel CM through librdmacm, timed like
 * ibcm-cmtime, without QPs: the comparison point for ibcm-cmtime that takes
 * QP creation and QP state changes out of rdma-core's cmtime numbers.
 *
 *   server: rdmacm-cmtime-noqp -b ADDR
 *           accepts every CONNECT_REQUEST with a made-up QPN, answers every
 *           DISCONNECTED with rdma_disconnect (the DREP) and destroys the id;
 *           runs until killed
 *   client: rdmacm-cmtime-noqp -s SERVER -b ADDR [-c N] [--json]
 *           create id, resolve addr, resolve route, connect (rdma_connect
 *           with conn_param.qp_num set, no QP: on CONNECT_RESPONSE (the
 *           REP) rdma_establish() sends the RTU, and the connection counts
 *           as up), disconnect (rdma_disconnect until
 *           DISCONNECTED: the DREQ/DREP round trip, as cmtime <= v51
 *           timed it), destroy; each phase for all connections back to back
 *
 * The same table and JSON as ibcm-cmtime (create id / connect / disconnect /
 * destroy), plus the two rdma_cm-only steps. Not built by CMake (it needs
 * librdmacm-dev): scripts/perf/side-by-side.sh compiles it.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define PROG "rdmacm-cmtime-noqp"
#define NSEC_PER_SEC 1000000000ULL
#define FAKE_QPN_BASE 0x1000
#define TIMEOUT_MS 2000

enum step {
	S_CREATE, S_RESOLVE_ADDR, S_RESOLVE_ROUTE, S_CONNECT, S_DISCONNECT,
	S_DESTROY, NR_STEPS
};

static const char *const step_name[NR_STEPS] = {
	"create id", "resolve addr", "resolve route", "connect", "disconnect",
	"destroy",
};

struct node {
	struct rdma_cm_id *id;
	uint64_t t[NR_STEPS][2];
	int error;
};

static struct rdma_event_channel *channel;
static struct node *nodes;
static int nconns = 1000;
static const char *port = "7472";
static char *dst, *src;
static bool json;
static uint64_t window[NR_STEPS][2];
static atomic_int completed[NR_STEPS], errors;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void done(struct node *n, enum step s, bool ok)
{
	n->t[s][1] = now_ns();
	if (!ok) {
		n->error = 1;
		atomic_fetch_add(&errors, 1);
	}
	if (atomic_fetch_add(&completed[s], 1) + 1 == nconns) {
		pthread_mutex_lock(&lock);
		pthread_cond_broadcast(&cond);
		pthread_mutex_unlock(&lock);
	}
}

static void wait_step(enum step s)
{
	pthread_mutex_lock(&lock);
	while (atomic_load(&completed[s]) < nconns)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	window[s][1] = now_ns();
}

static void *client_events(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	while (!rdma_get_cm_event(channel, &ev)) {
		struct node *n = ev->id->context;

		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			done(n, S_RESOLVE_ADDR, true);
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
			done(n, S_RESOLVE_ADDR, false);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			done(n, S_RESOLVE_ROUTE, true);
			break;
		case RDMA_CM_EVENT_ROUTE_ERROR:
			done(n, S_RESOLVE_ROUTE, false);
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			/*
			 * No QP: librdmacm leaves the RTU to rdma_establish(),
			 * as it does with its own QP after moving it to RTS.
			 */
			rdma_ack_cm_event(ev);
			if (rdma_establish(n->id)) {
				perror(PROG ": rdma_establish");
				done(n, S_CONNECT, false);
			} else {
				done(n, S_CONNECT, true);
			}
			continue;
		case RDMA_CM_EVENT_ESTABLISHED:
			done(n, S_CONNECT, true);
			break;
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			fprintf(stderr, PROG ": %s (status %d)\n",
				rdma_event_str(ev->event), ev->status);
			done(n, S_CONNECT, false);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			done(n, S_DISCONNECT, ev->status == 0);
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	return NULL;
}

static int server(struct rdma_addrinfo *rai)
{
	struct rdma_conn_param param;
	struct rdma_cm_id *listen_id;
	struct rdma_cm_event *ev;

	if (rdma_create_id(channel, &listen_id, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen_id, rai->ai_src_addr) ||
	    rdma_listen(listen_id, 1024)) {
		perror(PROG ": listen");
		return 1;
	}
	fprintf(stderr, PROG ": server: listening\n");
	while (!rdma_get_cm_event(channel, &ev)) {
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type type = ev->event;

		if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			memset(&param, 0, sizeof(param));
			param.responder_resources = 1;
			param.initiator_depth = 1;
			param.rnr_retry_count = 7;
			param.qp_num = 0x800000 | (rand() & 0x7fffff);
			rdma_ack_cm_event(ev);
			if (rdma_accept(id, &param)) {
				perror(PROG ": rdma_accept");
				rdma_reject(id, NULL, 0);
				rdma_destroy_id(id);
			}
			continue;
		}
		rdma_ack_cm_event(ev);
		if (type == RDMA_CM_EVENT_DISCONNECTED) {
			rdma_disconnect(id);	/* the DREP */
			rdma_destroy_id(id);
		}
	}
	return 0;
}

static void row(enum step s, bool first)
{
	double total = (double)(window[s][1] - window[s][0]) / 1000.0, sum = 0;
	double min = 1e18, max = 0, us;

	for (int i = 0; i < nconns; i++) {
		us = (double)(nodes[i].t[s][1] - nodes[i].t[s][0]) / 1000.0;
		sum += us;
		if (us < min)
			min = us;
		if (us > max)
			max = us;
	}
	if (json)
		printf("%s\n    {\"phase\": \"%s\", \"total_ms\": %.3f, \"conn_per_sec\": %.1f, "
		       "\"avg_us\": %.3f, \"min_us\": %.3f, \"max_us\": %.3f}",
		       first ? "" : ",", step_name[s], total / 1000,
		       nconns / (total / 1e6), sum / nconns, min, max);
	else
		printf("%-13s %11.2f %11.0f %10.2f %10.2f %10.2f\n", step_name[s],
		       total / 1000, nconns / (total / 1e6), sum / nconns, min, max);
}

static int client(struct rdma_addrinfo *rai)
{
	struct rdma_conn_param param;
	pthread_t thread;
	int i;

	nodes = calloc(nconns, sizeof(*nodes));
	if (!nodes || pthread_create(&thread, NULL, client_events, NULL))
		return 1;

	fprintf(stderr, PROG ": %s\n", step_name[S_CREATE]);
	window[S_CREATE][0] = now_ns();
	for (i = 0; i < nconns; i++) {
		nodes[i].t[S_CREATE][0] = now_ns();
		if (rdma_create_id(channel, &nodes[i].id, &nodes[i], RDMA_PS_TCP)) {
			perror(PROG ": rdma_create_id");
			return 1;
		}
		nodes[i].t[S_CREATE][1] = now_ns();
	}
	window[S_CREATE][1] = now_ns();

	fprintf(stderr, PROG ": %s\n", step_name[S_RESOLVE_ADDR]);
	window[S_RESOLVE_ADDR][0] = now_ns();
	for (i = 0; i < nconns; i++) {
		nodes[i].t[S_RESOLVE_ADDR][0] = now_ns();
		if (rdma_resolve_addr(nodes[i].id, rai->ai_src_addr,
				      rai->ai_dst_addr, TIMEOUT_MS))
			done(&nodes[i], S_RESOLVE_ADDR, false);
	}
	wait_step(S_RESOLVE_ADDR);

	fprintf(stderr, PROG ": %s\n", step_name[S_RESOLVE_ROUTE]);
	window[S_RESOLVE_ROUTE][0] = now_ns();
	for (i = 0; i < nconns; i++) {
		nodes[i].t[S_RESOLVE_ROUTE][0] = now_ns();
		if (rdma_resolve_route(nodes[i].id, TIMEOUT_MS))
			done(&nodes[i], S_RESOLVE_ROUTE, false);
	}
	wait_step(S_RESOLVE_ROUTE);
	if (atomic_load(&errors))
		goto failed;

	fprintf(stderr, PROG ": %s\n", step_name[S_CONNECT]);
	window[S_CONNECT][0] = now_ns();
	for (i = 0; i < nconns; i++) {
		memset(&param, 0, sizeof(param));
		param.responder_resources = 1;
		param.initiator_depth = 1;
		param.retry_count = 7;
		param.rnr_retry_count = 7;
		param.qp_num = FAKE_QPN_BASE + i;	/* no QP: a made-up QPN */
		nodes[i].t[S_CONNECT][0] = now_ns();
		if (rdma_connect(nodes[i].id, &param)) {
			perror(PROG ": rdma_connect");
			done(&nodes[i], S_CONNECT, false);
		}
	}
	wait_step(S_CONNECT);
	if (atomic_load(&errors))
		goto failed;

	fprintf(stderr, PROG ": %s\n", step_name[S_DISCONNECT]);
	window[S_DISCONNECT][0] = now_ns();
	for (i = 0; i < nconns; i++) {
		nodes[i].t[S_DISCONNECT][0] = now_ns();
		if (rdma_disconnect(nodes[i].id))
			done(&nodes[i], S_DISCONNECT, false);
	}
	wait_step(S_DISCONNECT);

	fprintf(stderr, PROG ": %s\n", step_name[S_DESTROY]);
	window[S_DESTROY][0] = now_ns();
	for (i = 0; i < nconns; i++) {
		nodes[i].t[S_DESTROY][0] = now_ns();
		rdma_destroy_id(nodes[i].id);
		nodes[i].t[S_DESTROY][1] = now_ns();
	}
	window[S_DESTROY][1] = now_ns();

failed:
	if (json)
		printf("{\n  \"tool\": \"" PROG "\",\n  \"mode\": \"client\",\n"
		       "  \"connections\": %d,\n  \"status\": \"%s\",\n  \"phases\": [",
		       nconns, atomic_load(&errors) ? "failed" : "ok");
	else
		printf("%-13s %11s %11s %10s %10s %10s\n", "phase", "total(ms)",
		       "conn/s", "avg(us)", "min(us)", "max(us)");
	if (!atomic_load(&errors))
		for (int s = 0; s < NR_STEPS; s++)
			row(s, s == 0);
	if (json)
		printf("\n  ]\n}\n");
	return atomic_load(&errors) ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	struct rdma_addrinfo hints, *rai;
	int op, ret;

	while ((op = getopt_long(argc, argv, "s:b:c:p:", opts, NULL)) != -1) {
		switch (op) {
		case 's': dst = optarg; break;
		case 'b': src = optarg; break;
		case 'c': nconns = atoi(optarg); break;
		case 'p': port = optarg; break;
		case 'j': json = true; break;
		default:
			fprintf(stderr, "usage: " PROG " [-s server] [-b bind_addr] [-c conns] [-p port] [--json]\n"
				"No QPs: connections carry made-up QPNs (rdma_connect/rdma_accept qp_num).\n");
			return 2;
		}
	}
	if (nconns < 1)
		return 2;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	if (!dst)
		hints.ai_flags |= RAI_PASSIVE;
	if (dst && src) {
		/* rdma_getaddrinfo with a source: resolve both. */
		struct rdma_addrinfo shints = hints, *srai;

		shints.ai_flags = RAI_PASSIVE;
		if ((ret = rdma_getaddrinfo(src, NULL, &shints, &srai))) {
			fprintf(stderr, PROG ": %s: %s\n", src, gai_strerror(ret));
			return 1;
		}
		hints.ai_src_addr = srai->ai_src_addr;
		hints.ai_src_len = srai->ai_src_len;
	}
	ret = rdma_getaddrinfo(dst ? dst : src, port, &hints, &rai);
	if (ret) {
		fprintf(stderr, PROG ": rdma_getaddrinfo: %s\n", gai_strerror(ret));
		return 1;
	}
	channel = rdma_create_event_channel();
	if (!channel)
		return 1;
	return dst ? client(rai) : server(rai);
}
