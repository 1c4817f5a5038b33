/*
 * The kernel's SA API (<rdma/ib_sa.h>) through the C ABI, on the in-process
 * fabric, where no SA answers: bad arguments and their errnos; a query that
 * times out calls back once with -ETIMEDOUT after its retries; a cancelled
 * one once with -EINTR, never again; cancelling a finished query does
 * nothing; closing the device flushes its queries (-EINTR);
 * ib_sa_unregister_client waits for a callback in progress.
 */
#include "common.h"

#include <rdma/ib_sa.h>

#include <pthread.h>
#include <time.h>

static struct ib_sa_client client;

/* What one query's callback saw. */
struct outcome {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int calls, status;
  unsigned num_prs;
  int resp_null, on_caller_thread;
  /* A blocking callback: waits until `release` (test of unregister). */
  int block, entered, release, returned;
};

static pthread_t main_thread;

static void outcome_init(struct outcome *o) {
  memset(o, 0, sizeof(*o));
  pthread_mutex_init(&o->lock, NULL);
  pthread_cond_init(&o->cond, NULL);
}

static void callback(int status, struct sa_path_rec *resp, unsigned int num_prs, void *context) {
  struct outcome *o = context;
  pthread_mutex_lock(&o->lock);
  o->calls++;
  o->status = status;
  o->num_prs = num_prs;
  o->resp_null = resp == NULL;
  o->on_caller_thread = pthread_equal(pthread_self(), main_thread);
  o->entered = 1;
  pthread_cond_broadcast(&o->cond);
  while (o->block && !o->release)
    pthread_cond_wait(&o->cond, &o->lock);
  o->returned = 1;
  pthread_cond_broadcast(&o->cond);
  pthread_mutex_unlock(&o->lock);
}

/* Waits (bounded) until the callback of `o` ran once. */
static void wait_called(struct outcome *o) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += TIMEOUT_MS / 1000;
  pthread_mutex_lock(&o->lock);
  while (!o->entered)
    CHECK(pthread_cond_timedwait(&o->cond, &o->lock, &until) == 0);
  pthread_mutex_unlock(&o->lock);
}

static int calls(struct outcome *o) {
  pthread_mutex_lock(&o->lock);
  int n = o->calls;
  pthread_mutex_unlock(&o->lock);
  return n;
}

static struct sa_path_rec query_rec(void) {
  struct sa_path_rec rec;
  memset(&rec, 0, sizeof(rec));
  rec.sgid = gid_a;
  rec.dgid = gid_b;
  rec.pkey = htobe16(0xffff);
  rec.numb_path = 1;
  rec.reversible = 1;
  rec.rec_type = SA_PATH_REC_TYPE_IB;
  return rec;
}

static const ib_sa_comp_mask MASK = IB_SA_PATH_REC_DGID | IB_SA_PATH_REC_SGID |
                                    IB_SA_PATH_REC_NUMB_PATH | IB_SA_PATH_REC_PKEY;

static int start(struct ib_device *dev, unsigned long timeout_ms, struct outcome *o,
                 struct ib_sa_query **q) {
  struct sa_path_rec rec = query_rec();
  return ib_sa_path_rec_get(&client, dev, 1, &rec, MASK, timeout_ms, GFP_KERNEL, callback, o, q);
}

static void bad_arguments(void) {
  struct sa_path_rec rec = query_rec();
  struct ib_sa_query *q = NULL;
  struct ib_sa_client stranger;
  memset(&stranger, 0, sizeof(stranger));
  struct outcome o;
  outcome_init(&o);
#define GET(cl, dev, port, r, cb, qp)                                                      \
  ib_sa_path_rec_get(cl, dev, port, r, MASK, 100, GFP_KERNEL, cb, &o, qp)
  CHECK_EQ(GET(NULL, dev_a, 1, &rec, callback, &q), -EINVAL);
  CHECK_EQ(GET(&stranger, dev_a, 1, &rec, callback, &q), -EINVAL);
  CHECK_EQ(GET(&client, NULL, 1, &rec, callback, &q), -EINVAL);
  CHECK_EQ(GET(&client, dev_a, 1, NULL, callback, &q), -EINVAL);
  CHECK_EQ(GET(&client, dev_a, 1, &rec, NULL, &q), -EINVAL);
  CHECK_EQ(GET(&client, dev_a, 1, &rec, callback, NULL), -EINVAL);
  CHECK_EQ(GET(&client, dev_a, 2, &rec, callback, &q), -EINVAL);
  CHECK_EQ(GET(&client, dev_a, 0x101, &rec, callback, &q), -EINVAL);
  rec.rec_type = SA_PATH_REC_TYPE_ROCE_V2;
  CHECK_EQ(GET(&client, dev_a, 1, &rec, callback, &q), -EINVAL);
  rec.rec_type = SA_PATH_REC_TYPE_OPA;
  CHECK_EQ(GET(&client, dev_a, 1, &rec, callback, &q), -EINVAL);
#undef GET
  CHECK(q == NULL);
  /* Harmless: unknown ids, NULL clients, an unregistered client. */
  ib_sa_cancel_query(-1, NULL);
  ib_sa_cancel_query(12345, (struct ib_sa_query *)&stranger);
  ib_sa_register_client(NULL);
  ib_sa_unregister_client(NULL);
  ib_sa_unregister_client(&stranger);
  CHECK_EQ(calls(&o), 0);
}

/* No SA on loop: -ETIMEDOUT once, with no record. */
static void times_out(void) {
  struct outcome o;
  outcome_init(&o);
  struct ib_sa_query *q = NULL;
  int id = start(dev_a, 20, &o, &q);
  CHECK(id >= 0);
  CHECK(q != NULL);
  wait_called(&o);
  CHECK_EQ(o.status, -ETIMEDOUT);
  CHECK(o.resp_null);
  CHECK_EQ(o.num_prs, 0);
  CHECK(!o.on_caller_thread);
  ib_sa_cancel_query(id, q); /* finished: nothing */
  /* A later query's callback comes after anything the first could still
   * have queued: there is none. */
  struct outcome later;
  outcome_init(&later);
  struct ib_sa_query *q2;
  int id2 = start(dev_a, 20, &later, &q2);
  CHECK(id2 >= 0 && id2 != id);
  wait_called(&later);
  CHECK_EQ(calls(&o), 1);
  CHECK_EQ(calls(&later), 1);
}

/* Cancelled: -EINTR once, and never the timeout. */
static void cancelled(void) {
  struct outcome o;
  outcome_init(&o);
  struct ib_sa_query *q;
  int id = start(dev_a, 20, &o, &q);
  CHECK(id >= 0);
  ib_sa_cancel_query(id, q);
  ib_sa_cancel_query(id, q);
  wait_called(&o);
  CHECK_EQ(o.status, -EINTR);
  CHECK(o.resp_null);
  struct outcome later;
  outcome_init(&later);
  struct ib_sa_query *q2;
  CHECK(start(dev_a, 40, &later, &q2) >= 0);
  wait_called(&later); /* past the first query's own timeout */
  CHECK_EQ(later.status, -ETIMEDOUT);
  CHECK_EQ(calls(&o), 1);
}

/* A device closed with a query in flight flushes it: -EINTR. */
static void flushed_by_close(void) {
  struct ib_device *dev = ibcm_open_device("loop9");
  CHECK(!IS_ERR_OR_NULL(dev));
  struct outcome o;
  outcome_init(&o);
  struct ib_sa_query *q;
  CHECK(start(dev, 60000, &o, &q) >= 0);
  CHECK_EQ(ibcm_close_device(dev), 0);
  wait_called(&o);
  CHECK_EQ(o.status, -EINTR);
  CHECK_EQ(calls(&o), 1);
}

static atomic_int unregistered;

static void *unregister_thread(void *arg) {
  (void)arg;
  ib_sa_unregister_client(&client);
  atomic_store(&unregistered, 1);
  return NULL;
}

/* ib_sa_unregister_client returns only after a callback in progress. */
static void unregister_waits(void) {
  struct outcome o;
  outcome_init(&o);
  o.block = 1;
  struct ib_sa_query *q;
  int id = start(dev_a, 60000, &o, &q);
  CHECK(id >= 0);
  ib_sa_cancel_query(id, q);
  wait_called(&o);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, unregister_thread, NULL) == 0);
  struct timespec pause = {0, 50 * 1000 * 1000};
  nanosleep(&pause, NULL); /* a chance for a wrong unregister to return early */
  CHECK_EQ(atomic_load(&unregistered), 0);
  pthread_mutex_lock(&o.lock);
  o.release = 1;
  pthread_cond_broadcast(&o.cond);
  pthread_mutex_unlock(&o.lock);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK_EQ(atomic_load(&unregistered), 1);
  CHECK(o.returned);
  /* Unregistered: refused. */
  struct ib_sa_query *q2;
  CHECK_EQ(start(dev_a, 100, &o, &q2), -EINVAL);
}

int main(void) {
  require_loop();
  test_init();
  main_thread = pthread_self();
  ib_sa_register_client(&client);
  bad_arguments();
  times_out();
  cancelled();
  flushed_by_close();
  unregister_waits();
  test_finish();
  printf("test_sa_api: ok\n");
  return 0;
}
