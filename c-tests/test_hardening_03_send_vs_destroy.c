/*
 * Issue 10, point 3: ib_send_cm_req / ib_send_cm_sidr_req racing
 * ib_destroy_cm_id on the same id. Either the send comes first (then destroy
 * cancels it: REQ_SENT is left with a REJ(TIMEOUT), SIDR_REQ_SENT silently)
 * or it gets -EINVAL; never does a request leave for an id that destroy has
 * already finished with. Such an orphan shows as a REQ the passive side never
 * sees rejected, and as a retransmission timer nobody cancels (the timeouts
 * here are hours long, so no orphan timer expires during the test). In a
 * round one thread sends again and again while the other destroys the id
 * (every send after the first is -EINVAL, unless destroy has set the id IDLE
 * again).
 */
#include "common.h"

#include <pthread.h>

#define ROUNDS 20000
#define BUDGET_MS 4000 /* per kind; fewer rounds under valgrind */
#define MAX_CHILDREN (4 * ROUNDS)
#define SIDR_SERVICE (SERVICE_ID + 1) /* nobody listens: UNSUPPORTED */

static pthread_barrier_t go, done;
static struct ib_cm_id *volatile victim;
static atomic_int stop, kind, round_over, sent, other;
static struct ib_cm_req_param req;
static struct ib_cm_sidr_req_param sidr;

static struct ib_cm_id **children;
static atomic_int n_children, n_rejected;

/* B's listener: records its new ids; never answers. */
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

static int active_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  (void)cm_id;
  (void)event;
  return 0;
}

static void *sender(void *arg) {
  (void)arg;
  for (;;) {
    pthread_barrier_wait(&go);
    if (atomic_load(&stop))
      return NULL;
    while (!atomic_load(&round_over)) {
      int r;
      if (atomic_load(&kind) == 0) {
        req.qp_num = next_qpn(); /* a new QP each time: no stale connection */
        r = ib_send_cm_req(victim, &req);
      } else {
        r = ib_send_cm_sidr_req(victim, &sidr);
      }
      if (r == 0)
        atomic_fetch_add(&sent, 1);
      else if (r != -EINVAL)
        atomic_fetch_add(&other, 1);
    }
    pthread_barrier_wait(&done);
  }
}

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

static int race(int k, int *n_sent) {
  atomic_store(&kind, k);
  atomic_store(&sent, 0);
  int rounds = 0;
  unsigned seed = 1;
  for (long long t0 = now_ms(); rounds < ROUNDS && now_ms() - t0 < BUDGET_MS; rounds++) {
    victim = create_id(dev_a, active_handler, NULL);
    atomic_store(&round_over, 0);
    pthread_barrier_wait(&go);
    for (volatile unsigned spin = rnd(&seed) % 2000; spin > 0; spin--)
      ;
    ib_destroy_cm_id(victim);
    atomic_store(&round_over, 1);
    pthread_barrier_wait(&done);
  }
  *n_sent = atomic_load(&sent);
  CHECK_EQ(atomic_load(&other), 0);
  return rounds;
}

static void wait_quiet(struct ibcm_stats *st) {
  for (long long t0 = now_ms();; sleep_ms(1)) {
    CHECK_EQ(ibcm_get_stats(st), 0);
    if (st->queued == 0 && atomic_load(&n_children) == atomic_load(&n_rejected))
      return;
    if (now_ms() - t0 > TIMEOUT_MS)
      return;
  }
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
  CHECK_EQ(pthread_create(&t, NULL, sender, NULL), 0);

  int req_sent, sidr_sent;
  int req_rounds = race(0, &req_sent);
  struct ibcm_stats st;
  wait_quiet(&st);
  int orphan_reqs = atomic_load(&n_children) - atomic_load(&n_rejected);
  int req_timers = (int)st.timers;
  int sidr_rounds = race(1, &sidr_sent);
  wait_quiet(&st);
  int sidr_timers = (int)st.timers - req_timers;

  atomic_store(&stop, 1);
  pthread_barrier_wait(&go);
  CHECK_EQ(pthread_join(t, NULL), 0);
  printf("REQ: %d rounds, %d sent, %d never rejected, %d timers left; "
         "SIDR_REQ: %d rounds, %d sent, %d timers left\n",
         req_rounds, req_sent, orphan_reqs, req_timers, sidr_rounds, sidr_sent,
         sidr_timers);
  CHECK_EQ(orphan_reqs, 0);
  CHECK_EQ(req_timers, 0);
  CHECK_EQ(sidr_timers, 0);

  for (int i = 0; i < atomic_load(&n_children); i++)
    ib_destroy_cm_id(children[i]);
  ib_destroy_cm_id(listener);
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 0);
  free(children);
  pthread_barrier_destroy(&go);
  pthread_barrier_destroy(&done);
  test_finish();
  puts("no request leaves for a destroyed id: OK");
  return 0;
}
