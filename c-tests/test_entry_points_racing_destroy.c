/*
 * Issue 10, point 3: an entry point racing ib_destroy_cm_id on the same id
 * must not bring it back to life. In each round one thread calls the entry
 * point again and again while the other destroys the id (after the first
 * success every further call is -EINVAL, unless destroy has set the id IDLE
 * again); whoever wins, once destroy has returned:
 *
 *  - ib_cm_listen: the service ID is free (a fresh ib_cm_listen on it
 *    succeeds; each round uses its own, so every lost round is counted);
 *  - ib_send_cm_req: no REQ has left that destroy did not cancel: the
 *    passive side sees every REQ rejected (REJ TIMEOUT, what destroy sends
 *    from REQ_SENT), and no retransmission timer is left;
 *  - ib_send_cm_sidr_req: likewise no timer is left (nobody listens, the
 *    SIDR_REP says UNSUPPORTED and finds no id).
 *
 * The request timeouts are hours long, so no orphan's timer expires during
 * the test; afterwards no id is left.
 */
#include "common.h"

#include <pthread.h>

#define ROUNDS 20000
#define BUDGET_MS 4000 /* per kind; fewer rounds under valgrind */
#define MAX_CHILDREN (4 * ROUNDS)
#define SIDR_SERVICE (SERVICE_ID + 1)      /* nobody listens: UNSUPPORTED */
#define LISTEN_SERVICES (SERVICE_ID + 0x1000) /* one per round */

enum kind { LISTEN, REQ, SIDR_REQ };

static pthread_barrier_t go, done;
static struct ib_cm_id *volatile victim;
static volatile uint64_t round_service_id;
static atomic_int stop, kind, round_over, succeeded, other;
static struct ib_cm_req_param req;
static struct ib_cm_sidr_req_param sidr;

static struct ib_cm_id **children;
static atomic_int n_children, n_rejected;

/* B's REQ listener: records its new ids; never answers. */
static int passive_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (event->event == IB_CM_REQ_RECEIVED) {
    int n = atomic_fetch_add(&n_children, 1);
    CHECK(n < MAX_CHILDREN);
    children[n] = cm_id;
  } else if (event->event == IB_CM_REJ_RECEIVED) {
    CHECK_EQ(event->param.rej_rcvd.reason, IB_CM_REJ_TIMEOUT);
    atomic_fetch_add(&n_rejected, 1);
  }
  return 0;
}

static int silent_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  (void)cm_id;
  (void)event;
  return 0;
}

static int call_entry_point(void) {
  switch (atomic_load(&kind)) {
  case LISTEN:
    return ib_cm_listen(victim, htobe64(round_service_id));
  case REQ:
    req.qp_num = next_qpn(); /* a new QP each time: no stale connection */
    return ib_send_cm_req(victim, &req);
  default:
    return ib_send_cm_sidr_req(victim, &sidr);
  }
}

static void *caller(void *arg) {
  (void)arg;
  for (;;) {
    pthread_barrier_wait(&go);
    if (atomic_load(&stop))
      return NULL;
    unsigned fails = 0;
    while (!atomic_load(&round_over)) {
      int r = call_entry_point();
      if (r == 0)
        atomic_fetch_add(&succeeded, 1);
      else if (r != -EINVAL)
        atomic_fetch_add(&other, 1);
      /* -EINVAL comes at once, with no system call: a yield now and then
       * lets the destroying thread run under valgrind (one thread at a
       * time), while the calls still race destroy's window natively. */
      else if ((++fails & 15) == 0)
        sched_yield();
    }
    pthread_barrier_wait(&done);
  }
}

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

/* Runs the rounds of one kind; returns how many service IDs stayed taken
 * after destroy returned (LISTEN only). */
static int race(enum kind k, const char *name) {
  atomic_store(&kind, k);
  atomic_store(&succeeded, 0);
  int rounds = 0, taken_after = 0;
  unsigned seed = 1;
  for (long long t0 = now_ms(); rounds < ROUNDS && now_ms() - t0 < BUDGET_MS; rounds++) {
    round_service_id = LISTEN_SERVICES + (uint64_t)rounds;
    victim = create_id(k == LISTEN ? dev_b : dev_a, silent_handler, NULL);
    atomic_store(&round_over, 0);
    pthread_barrier_wait(&go);
    for (volatile unsigned spin = rnd(&seed) % 2000; spin > 0; spin--)
      ;
    ib_destroy_cm_id(victim);
    atomic_store(&round_over, 1);
    pthread_barrier_wait(&done);
    if (k == LISTEN) {
      struct ib_cm_id *fresh = create_id(dev_b, silent_handler, NULL);
      taken_after += ib_cm_listen(fresh, htobe64(round_service_id)) != 0;
      ib_destroy_cm_id(fresh);
    }
  }
  printf("%s: %d rounds, %d calls succeeded", name, rounds, atomic_load(&succeeded));
  CHECK_EQ(atomic_load(&other), 0);
  return taken_after;
}

/* Timers left once the fabric is quiet and every REQ that reached B was
 * rejected (bounded: an orphan REQ is never rejected). */
static unsigned long long timers_when_quiet(void) {
  struct ibcm_stats st;
  for (long long t0 = now_ms(); now_ms() - t0 < TIMEOUT_MS; sleep_ms(1)) {
    CHECK_EQ(ibcm_get_stats(&st), 0);
    if (st.queued == 0 && atomic_load(&n_children) == atomic_load(&n_rejected))
      break;
  }
  return st.timers;
}

int main(void) {
  test_init();
  children = calloc(MAX_CHILDREN, sizeof(*children));
  CHECK(children != NULL);
  struct ib_cm_id *listener = listen_b(SERVICE_ID, passive_handler, NULL);

  struct conn_opts o;
  conn_opts_default(&o);
  o.remote_cm_response_timeout = 31; /* 2^23 ms between retries */
  struct sa_path_rec path;
  conn_path(&path, &o);
  req_param_init(&req, &path, &o, 0);
  memset(&sidr, 0, sizeof(sidr));
  sidr.path = &path;
  sidr.service_id = htobe64(SIDR_SERVICE);
  sidr.timeout_ms = 3600 * 1000;
  sidr.max_cm_retries = 1;

  CHECK_EQ(pthread_barrier_init(&go, NULL, 2), 0);
  CHECK_EQ(pthread_barrier_init(&done, NULL, 2), 0);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, caller, NULL), 0);

  int taken_after = race(LISTEN, "ib_cm_listen");
  printf("; service ID still taken after destroy returned: %d rounds\n", taken_after);
  race(REQ, "ib_send_cm_req");
  unsigned long long req_timers = timers_when_quiet();
  int orphan_reqs = atomic_load(&n_children) - atomic_load(&n_rejected);
  printf("; REQs never rejected: %d; timers left: %llu\n", orphan_reqs, req_timers);
  race(SIDR_REQ, "ib_send_cm_sidr_req");
  unsigned long long sidr_timers = timers_when_quiet() - req_timers;
  printf("; timers left: %llu\n", sidr_timers);

  atomic_store(&stop, 1);
  pthread_barrier_wait(&go);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_EQ(taken_after, 0);
  CHECK_EQ(orphan_reqs, 0);
  CHECK_EQ(req_timers, 0);
  CHECK_EQ(sidr_timers, 0);

  for (int i = 0; i < atomic_load(&n_children); i++)
    ib_destroy_cm_id(children[i]);
  ib_destroy_cm_id(listener);
  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 0);
  free(children);
  pthread_barrier_destroy(&go);
  pthread_barrier_destroy(&done);
  test_finish();
  puts("no entry point revives an id being destroyed: OK");
  return 0;
}
