// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * umad-floor - the least a userspace CM can do per connection over umad.
 *
 * Issue 14 names the floor of a userspace CM: one umad write per MAD sent and
 * one read per MAD received. This tool is that floor and nothing else: no
 * library, no state machine, no timers, no second thread. It exchanges the
 * five MADs of a connection's life (REQ, REP, RTU, DREQ, DREP; CM class 0x07,
 * method Send, 256 bytes each) with the pattern of `ibcm-cmtime --client`:
 *
 *   connect     every REQ written at once; each REP read is answered with an
 *               RTU; the phase ends when every REP is in
 *   disconnect  every DREQ written at once; the server answers each with a
 *               DREP; the phase ends when every DREP is in
 *
 * One thread, one port, one poll() per wait and reads until EAGAIN. What a
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
 * (ib_cm) is loaded. A phase with answers missing after a second writes the
 * missing requests again (counted as "resent"); the server answers every copy.
 * The payload's first four bytes (a comm ID's place) carry the connection's
 * index; nothing else in a message means anything.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* CM attribute IDs (kernel-cm-spec.md); BYE is REJ's, told apart by mode. */
enum attr { REQ = 0x0010, REJ_BYE = 0x0012, REP = 0x0013, RTU = 0x0014,
	    DREQ = 0x0015, DREP = 0x0016 };

struct msg {
	struct ib_user_mad hdr;
	uint8_t mad[MAD_SIZE];
};

static struct {
	int fd, agent;
	const char *dev;
	unsigned int conns;
	bool json;
	uint64_t sent, received, resent, ignored;
	/* client */
	struct ib_mad_addr peer;
	uint8_t *answered;	/* per connection: this phase's answer is in */
} fl = { .fd = -1, .conns = 1000 };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int open_port(void)
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
	fl.agent = umad_register(fl.fd, CM_CLASS, CM_VERSION, 0, mask);
	if (fl.agent < 0) {
		fprintf(stderr, PROG ": umad_register(CM class): %s (is ib_cm loaded?)\n",
			strerror(-fl.agent));
		return -1;
	}
	return 0;
}

static void put_be16(uint8_t *p, uint16_t v) { v = htobe16(v); memcpy(p, &v, 2); }
static void put_be32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static uint16_t get_be16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return be16toh(v); }
static uint32_t get_be32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }

/* One write: a CM MAD `attr` for connection `index` to `to`. */
static int send_mad(const struct ib_mad_addr *to, uint16_t attr, uint32_t index)
{
	struct msg m;
	uint64_t tid = htobe64(((uint64_t)attr << 32) | index);

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
		fprintf(stderr, PROG ": umad_send: %s\n", strerror(errno));
		return -1;
	}
	fl.sent++;
	return 0;
}

/*
 * Waits up to `ms` for the port, then reads until EAGAIN, calling `got` for
 * each CM MAD. Returns the MADs read, or -1.
 */
static int drain(int ms, int (*got)(const struct ib_mad_addr *from, uint16_t attr,
				    uint32_t index))
{
	struct pollfd p = { .fd = fl.fd, .events = POLLIN };
	struct msg m;
	int n = 0;

	if (poll(&p, 1, ms) < 0 && errno != EINTR)
		return -1;
	for (;;) {
		int len = MAD_SIZE;
		int ret = umad_recv(fl.fd, &m, &len, 0);

		if (ret < 0) {
			if (ret == -EAGAIN || ret == -EWOULDBLOCK || errno == EAGAIN)
				return n;
			fprintf(stderr, PROG ": umad_recv: %s\n", strerror(-ret));
			return -1;
		}
		n++;
		fl.received++;
		if (m.hdr.status || m.mad[1] != CM_CLASS) {
			fl.ignored++;
			continue;
		}
		if (got(&m.hdr.addr, get_be16(&m.mad[16]), get_be32(&m.mad[24])))
			return -1;
	}
}

/* ---- server ---- */

static bool bye;

static int server_got(const struct ib_mad_addr *from, uint16_t attr, uint32_t index)
{
	switch (attr) {
	case REQ:
		return send_mad(from, REP, index);
	case DREQ:
		return send_mad(from, DREP, index);
	case REJ_BYE:
		bye = true;
		return 0;
	case RTU:
		return 0;
	default:
		fl.ignored++;
		return 0;
	}
}

static int serve(void)
{
	printf(PROG ": server: listening on %s port %d\n", fl.dev, PORT_NUM);
	fflush(stdout);
	while (!bye)
		if (drain(-1, server_got) < 0)
			return -1;
	printf(PROG ": server: bye; %llu MADs received, %llu sent, %llu ignored\n",
	       (unsigned long long)fl.received, (unsigned long long)fl.sent,
	       (unsigned long long)fl.ignored);
	return 0;
}

/* ---- client ---- */

static unsigned int done;

static int client_got(const struct ib_mad_addr *from, uint16_t attr, uint32_t index)
{
	(void)from;
	if ((attr != REP && attr != DREP) || index >= fl.conns) {
		fl.ignored++;
		return 0;
	}
	if (fl.answered[index]) {
		fl.ignored++;	/* the answer to a copy */
		return 0;
	}
	fl.answered[index] = 1;
	done++;
	return attr == REP ? send_mad(&fl.peer, RTU, index) : 0;
}

/* One phase: every `ask` written, then answers read until all are in. */
static int run_phase(uint16_t ask, double *total_ms)
{
	uint64_t start = now_ns(), last = start;

	memset(fl.answered, 0, fl.conns);
	done = 0;
	for (unsigned int i = 0; i < fl.conns; i++)
		if (send_mad(&fl.peer, ask, i))
			return -1;
	while (done < fl.conns) {
		int n = drain(RESEND_MS, client_got);

		if (n < 0)
			return -1;
		if (n > 0) {
			last = now_ns();
			continue;
		}
		if (now_ns() - last > GIVE_UP_MS * 1000000ull) {
			fprintf(stderr, PROG ": %u of %u answers missing for %d ms\n",
				fl.conns - done, fl.conns, GIVE_UP_MS);
			return -1;
		}
		for (unsigned int i = 0; i < fl.conns; i++)
			if (!fl.answered[i]) {
				if (send_mad(&fl.peer, ask, i))
					return -1;
				fl.resent++;
			}
	}
	*total_ms = (double)(now_ns() - start) / 1e6;
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

static int client(const uint8_t dgid[16])
{
	double ms[2];
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
	if (!fl.answered)
		return -1;
	if (run_phase(REQ, &ms[0]) || run_phase(DREQ, &ms[1]))
		return -1;
	for (int i = 0; i < 3; i++)	/* a lost bye leaves the server up: three */
		send_mad(&fl.peer, REJ_BYE, 0);
	if (fl.json) {
		printf("{\n  \"mode\": \"client\",\n  \"tool\": \"" PROG "\",\n"
		       "  \"status\": \"ok\",\n  \"connections\": %u,\n"
		       "  \"mads_sent\": %llu,\n  \"mads_received\": %llu,\n"
		       "  \"resent\": %llu,\n  \"ignored\": %llu,\n  \"phases\": [\n"
		       "    { \"phase\": \"connect\", \"total_ms\": %.3f },\n"
		       "    { \"phase\": \"disconnect\", \"total_ms\": %.3f }\n  ]\n}\n",
		       fl.conns, (unsigned long long)fl.sent,
		       (unsigned long long)fl.received, (unsigned long long)fl.resent,
		       (unsigned long long)fl.ignored, ms[0], ms[1]);
	} else {
		printf("%u connections: connect %.1f ms = %.0f/s, disconnect %.1f ms = %.0f/s; "
		       "%llu MADs sent, %llu received, %llu resent\n",
		       fl.conns, ms[0], fl.conns / (ms[0] / 1000), ms[1],
		       fl.conns / (ms[1] / 1000), (unsigned long long)fl.sent,
		       (unsigned long long)fl.received, (unsigned long long)fl.resent);
	}
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " --server [-d dev]\n"
		"       " PROG " --client GID [-d dev] [-c connections] [--json]\n"
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
	if (open_port())
		return 1;
	return (server ? serve() : client(dgid)) ? 1 : 0;
}
