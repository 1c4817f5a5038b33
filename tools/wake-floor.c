// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * wake-floor - what `ibcm-loopbench -w 1` pays with no CM at all.
 *
 * ibcm-loopbench -w 1 runs one connection lifecycle at a time: its main
 * thread starts a cycle (ib_create_cm_id, ib_send_cm_req: work queued for
 * the library's worker thread, which looks for work for 50 us, yielding,
 * before it sleeps), the worker runs the whole lifecycle in its handlers, and
 * the last handler signals the main thread, which sleeps on a condition
 * variable meanwhile. This tool does exactly those two hand-offs and nothing
 * else: the main thread queues a request under a mutex and signals the
 * worker's condition variable (as the library's queue does), the worker
 * takes it (spinning with sched_yield for up to 50 us before it sleeps, as
 * the library's worker does), busy-waits --work NS nanoseconds (0 by
 * default: no CM at all), and signals the main thread's condition variable
 * under its mutex (as loopbench's DREP handler does). With --poll US the main
 * thread looks for the answer for up to US microseconds first, yielding, as
 * loopbench -p does.
 *
 * Cycles/s with --work 0 is the ceiling of `ibcm-loopbench -w 1` for any
 * CM whose handlers run on a thread of their own (the kernel's CM runs them
 * on a workqueue too) on this machine; with --work set to the library's own
 * cost of a lifecycle (`ibcm-loopbench -w 1 --chain`: 1e9 / its cycles/s)
 * it is what -w 1 would be if the hand-offs cost nothing more here.
 *
 * usage: wake-floor [-t SECONDS] [--work NS] [--poll US] [--json]
 */

#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "wake-floor"
#define SPIN_NS 50000ULL /* the library worker's look for work (worker/thread.rs SPIN) */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static struct {
	/* main -> worker: the library's work queue */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	atomic_uint_fast64_t pushed; /* requests queued (the library's PUSHED) */
	uint64_t taken;              /* under qlock */
	bool stop;                   /* under qlock */
	/* worker -> main: loopbench's slot */
	pthread_mutex_t dlock;
	pthread_cond_t dcond;
	atomic_uint_fast64_t done;
	uint64_t work_ns;
} wf = {
	.qlock = PTHREAD_MUTEX_INITIALIZER,
	.qcond = PTHREAD_COND_INITIALIZER,
	.dlock = PTHREAD_MUTEX_INITIALIZER,
	.dcond = PTHREAD_COND_INITIALIZER,
};

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wf.qlock);
	for (;;) {
		bool spun = false;
		while (!wf.stop && wf.taken == atomic_load(&wf.pushed)) {
			if (!spun) {
				/* worker/thread.rs spin_for_work: yield until work or 50 us */
				spun = true;
				uint64_t seen = atomic_load(&wf.pushed);
				pthread_mutex_unlock(&wf.qlock);
				uint64_t until = now_ns() + SPIN_NS;
				while (atomic_load(&wf.pushed) == seen && now_ns() < until)
					sched_yield();
				pthread_mutex_lock(&wf.qlock);
				continue;
			}
			pthread_cond_wait(&wf.qcond, &wf.qlock);
		}
		if (wf.stop)
			break;
		wf.taken++;
		pthread_mutex_unlock(&wf.qlock);
		/* The handlers' work: a busy wait of --work NS. */
		if (wf.work_ns) {
			uint64_t until = now_ns() + wf.work_ns;
			while (now_ns() < until)
				;
		}
		/* loopbench's DREP_RECEIVED handler: stamp, signal the main thread. */
		pthread_mutex_lock(&wf.dlock);
		atomic_fetch_add(&wf.done, 1);
		pthread_cond_signal(&wf.dcond);
		pthread_mutex_unlock(&wf.dlock);
		pthread_mutex_lock(&wf.qlock);
	}
	pthread_mutex_unlock(&wf.qlock);
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: " PROG " [-t SECONDS] [--work NS] [--poll US] [--json]\n");
}

int main(int argc, char **argv)
{
	double seconds = 2.0;
	unsigned long poll_us = 0;
	bool json = false;
	static const struct option opts[] = {
		{"time", required_argument, NULL, 't'},
		{"work", required_argument, NULL, 'W'},
		{"poll", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "t:p:h", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			seconds = strtod(optarg, NULL);
			break;
		case 'W':
			wf.work_ns = strtoull(optarg, NULL, 10);
			break;
		case 'p':
			poll_us = strtoul(optarg, NULL, 10);
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !(seconds > 0 && seconds <= 3600)) {
		usage(stderr);
		return 2;
	}

	pthread_t t;
	int rc = pthread_create(&t, NULL, worker, NULL);
	if (rc) {
		fprintf(stderr, PROG ": pthread_create: %s\n", strerror(rc));
		return 1;
	}
	uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9);
	uint64_t cycles = 0, slept = 0;
	while (now_ns() < end) {
		/* ib_send_cm_req: queue the work, signal the worker (it may sleep). */
		pthread_mutex_lock(&wf.qlock);
		atomic_fetch_add(&wf.pushed, 1);
		pthread_mutex_unlock(&wf.qlock);
		pthread_cond_signal(&wf.qcond);
		cycles++;
		if (poll_us) {
			uint64_t until = now_ns() + poll_us * 1000;
			while (atomic_load(&wf.done) != cycles && now_ns() < until)
				sched_yield();
		}
		if (atomic_load(&wf.done) == cycles)
			continue;
		slept++;
		pthread_mutex_lock(&wf.dlock);
		while (atomic_load(&wf.done) != cycles)
			pthread_cond_wait(&wf.dcond, &wf.dlock);
		pthread_mutex_unlock(&wf.dlock);
	}
	double elapsed = (double)(now_ns() - start) / 1e9;
	pthread_mutex_lock(&wf.qlock);
	wf.stop = true;
	pthread_mutex_unlock(&wf.qlock);
	pthread_cond_signal(&wf.qcond);
	pthread_join(t, NULL);

	double rate = (double)cycles / elapsed;
	if (json)
		printf("{\"cycles\": %llu, \"seconds\": %.3f, \"cycles_per_sec\": %.0f, "
		       "\"work_ns\": %llu, \"poll_us\": %lu, \"main_slept\": %llu}\n",
		       (unsigned long long)cycles, elapsed, rate,
		       (unsigned long long)wf.work_ns, poll_us, (unsigned long long)slept);
	else
		printf("%llu cycles in %.3f s: %.0f cycles/s (work %llu ns per cycle, "
		       "main thread slept in %llu of them)\n",
		       (unsigned long long)cycles, elapsed, rate,
		       (unsigned long long)wf.work_ns, (unsigned long long)slept);
	return 0;
}
