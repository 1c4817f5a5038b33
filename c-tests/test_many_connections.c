/*
 * Scale: 1,000 connections set up and torn down at once on one pair of
 * devices. All REQs are issued together, then all DREQs (even connections
 * disconnected by A, odd ones by B), and every event is counted: each
 * connection gets exactly REQ_RECEIVED, REP_RECEIVED, RTU_RECEIVED,
 * DREQ_RECEIVED, DREP_RECEIVED and two TIMEWAIT_EXITs, and no error, REJ or
 * retransmission-caused duplicate. Comm IDs are unique and cross-matched.
 */
#include "common.h"

#include <pthread.h>

/* 1,000 connections on loop devices; 200 on rxe, where every MAD crosses
 * an emulated wire. */
#define MAX_N 1000
#define N n_conns
static int n_conns = MAX_N;

static struct ib_cm_id *a_ids[MAX_N], *b_ids[MAX_N];
static pthread_mutex_t map_mu = PTHREAD_MUTEX_INITIALIZER;

/* The REQ's private data carries the connection's index. */
static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (event->event == IB_CM_REQ_RECEIVED) {
    uint32_t i;
    memcpy(&i, event->private_data, sizeof(i));
    CHECK(i < (uint32_t)N);
    pthread_mutex_lock(&map_mu);
    CHECK(b_ids[i] == NULL);
    b_ids[i] = cm_id;
    pthread_mutex_unlock(&map_mu);
  }
  record_event(cm_id, event);
  return default_reply(cm_id, event);
}

static int cmp_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

int main(void) {
  test_init();
  if (!devices_are_loop())
    n_conns = 200;
  struct ib_cm_id *listener = listen_b(SERVICE_ID, handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);
  /* A ULP's timeouts: 1 s between retries, so a busy CM (or valgrind) sees
   * no retransmissions, only what this test counts. */
  o.remote_cm_response_timeout = 18;
  o.local_cm_response_timeout = 18;
  o.max_cm_retries = 15;
  struct sa_path_rec path;
  conn_path(&path, &o);

  long long t0 = now_ms();
  for (uint32_t i = 0; i < (uint32_t)N; i++) {
    a_ids[i] = create_id(dev_a, handler, NULL);
    struct ib_cm_req_param req;
    req_param_init(&req, &path, &o, next_qpn());
    uint8_t pd[IB_CM_REQ_PRIVATE_DATA_SIZE] = {0};
    memcpy(pd, &i, sizeof(i));
    req.private_data = pd;
    req.private_data_len = sizeof(pd);
    CHECK_EQ(ib_send_cm_req(a_ids[i], &req), 0);
  }
  wait_count(IB_CM_RTU_RECEIVED, N, 60000);
  long long t_up = now_ms();

  uint32_t ids[2 * MAX_N];
  pthread_mutex_lock(&map_mu);
  for (int i = 0; i < N; i++) {
    struct ib_cm_id *a = a_ids[i], *b = b_ids[i];
    CHECK(b != NULL);
    CHECK_STATE(a, IB_CM_ESTABLISHED);
    CHECK_STATE(b, IB_CM_ESTABLISHED);
    CHECK(a->remote_id == b->local_id);
    CHECK(b->remote_id == a->local_id);
    ids[2 * i] = a->local_id;
    ids[2 * i + 1] = b->local_id;
  }
  pthread_mutex_unlock(&map_mu);
  qsort(ids, 2 * N, sizeof(ids[0]), cmp_u32);
  for (int i = 1; i < 2 * N; i++)
    CHECK(ids[i] != ids[i - 1]);
  CHECK_EQ(count_events(NULL, IB_CM_REQ_RECEIVED), N);
  CHECK_EQ(count_events(NULL, IB_CM_REP_RECEIVED), N);

  /* Tear down from alternating sides. */
  for (int i = 0; i < N; i++)
    CHECK_EQ(ib_send_cm_dreq(i % 2 ? b_ids[i] : a_ids[i], NULL, 0), 0);
  wait_count(IB_CM_TIMEWAIT_EXIT, 2 * N, 60000);
  long long t_down = now_ms();

  CHECK_EQ(count_events(NULL, IB_CM_REQ_RECEIVED), N);
  CHECK_EQ(count_events(NULL, IB_CM_REP_RECEIVED), N);
  CHECK_EQ(count_events(NULL, IB_CM_RTU_RECEIVED), N);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_RECEIVED), N);
  CHECK_EQ(count_events(NULL, IB_CM_DREP_RECEIVED), N);
  CHECK_EQ(count_events(NULL, IB_CM_TIMEWAIT_EXIT), 2 * N);
  CHECK_EQ(count_events(NULL, IB_CM_REQ_ERROR), 0);
  CHECK_EQ(count_events(NULL, IB_CM_REP_ERROR), 0);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_events(NULL, IB_CM_REJ_RECEIVED), 0);
  CHECK_EQ(count_events(NULL, IB_CM_USER_ESTABLISHED), 0);
  CHECK_EQ(count_id_events(listener), 0);
  for (int i = 0; i < N; i += 97) { /* spot checks per connection */
    struct ib_cm_id *dreq_side = i % 2 ? b_ids[i] : a_ids[i];
    struct ib_cm_id *drep_side = i % 2 ? a_ids[i] : b_ids[i];
    CHECK_EQ(count_events(drep_side, IB_CM_DREQ_RECEIVED), 1);
    CHECK_EQ(count_events(dreq_side, IB_CM_DREP_RECEIVED), 1);
    CHECK_EQ(count_events(a_ids[i], IB_CM_TIMEWAIT_EXIT), 1);
    CHECK_EQ(count_events(b_ids[i], IB_CM_TIMEWAIT_EXIT), 1);
  }
  for (int i = 0; i < N; i++) {
    CHECK_STATE(a_ids[i], IB_CM_IDLE);
    CHECK_STATE(b_ids[i], IB_CM_IDLE);
    ib_destroy_cm_id(a_ids[i]);
    ib_destroy_cm_id(b_ids[i]);
  }
  ib_destroy_cm_id(listener);
  test_finish();
  printf("%d connections: up in %lld ms, down in %lld ms: OK\n", N, t_up - t0,
         t_down - t_up);
  return 0;
}
