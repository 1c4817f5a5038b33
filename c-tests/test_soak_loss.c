/*
 * Loss and duplication soak: 10,000 connections set up and torn down on the
 * in-process fabric while 30 % of the MADs of every type are dropped and 5 %
 * duplicated, in both directions. Half are disconnected from the active side,
 * half from the passive side; half carry DREQ/DREP private data.
 *
 * Every id must end the way the kernel's state machine allows: set up and
 * then IB_CM_TIMEWAIT_EXIT (after DREP_RECEIVED, DREQ_RECEIVED, or the
 * documented IB_CM_DREQ_ERROR when every retry of a DREQ was lost), or a
 * documented setup failure (IB_CM_REQ_ERROR, IB_CM_REJ_RECEIVED on A,
 * IB_CM_REP_ERROR on B). A REQ that reaches B only after A gave up and the
 * connection was torn down is refused by the handler (counted), so no id is
 * left that nobody destroys. Private
 * data that arrives is checked byte for byte. At the end the library holds
 * zero cm_ids, zero timers and zero queued MADs.
 */
#include "common.h"

#define CONNS 10000
#define BATCH 500
#define DROP_PERCENT 30
#define DUP_PERCENT 5

enum outcome { PENDING, DONE, SETUP_FAILED };

struct soak_conn {
  uint32_t index;
  struct ib_cm_id *a;
  /* B's id: NULL until its first REQ_RECEIVED claims it, TORN once the test
   * has torn the connection down (no id of B then is the test's to destroy). */
  _Atomic(struct ib_cm_id *) b;
  atomic_int a_up, b_up;           /* REP_RECEIVED (A), RTU/USER_EST (B) */
  atomic_int a_exit, b_exit;       /* TIMEWAIT_EXIT seen */
  atomic_int a_setup_failed;       /* REQ_ERROR or REJ_RECEIVED on A */
  atomic_int b_setup_failed;       /* REP_ERROR on B: every REP/RTU round lost */
  atomic_int dreq_errors;          /* DREQ_ERROR on either side */
  atomic_int bad_data;             /* private data that did not match */
};

static struct soak_conn conns[CONNS];
static atomic_int b_created;
static atomic_int late_reqs; /* REQs that came after their connection's passive id */
static atomic_int mras;      /* automatic MRAs received */
static atomic_int reqs_after_teardown; /* first REQ_RECEIVEDs after A gave up and was destroyed */

/* Stored in soak_conn.b by the teardown: no REQ_RECEIVED may claim it after. */
static struct ib_cm_id torn_sentinel;
#define TORN (&torn_sentinel)

static int with_data(uint32_t i) { return (i / 2) % 2 == 0; }
static int from_a(uint32_t i) { return i % 2 == 0; }

static void check_data(struct soak_conn *c, const struct ib_cm_event *e, unsigned seed, size_t n) {
  if (with_data(c->index) ? !check_pattern(e->private_data, n, seed + c->index)
                          : !all_zero(e->private_data, n))
    atomic_fetch_add(&c->bad_data, 1);
}

static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *e) {
  struct soak_conn *c = cm_id->context;
  uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];

  if (e->event == IB_CM_REQ_RECEIVED) {
    uint32_t i;
    memcpy(&i, e->private_data, sizeof(i));
    CHECK(i < CONNS);
    c = &conns[i];
    struct ib_cm_id *none = NULL;
    if (!atomic_compare_exchange_strong(&c->b, &none, cm_id)) {
      /* A REQ that outlived its connection's passive side: a retransmission
       * or duplicate still queued when the id left the remote tables (the
       * kernel makes a new id for it too). Or the first REQ of a connection
       * whose A side gave up (REQ_ERROR: under valgrind a batch can take
       * longer than 16 REQ timeouts of 17 ms) and was torn down: nobody
       * would destroy this id. Refuse it: the library destroys the new id
       * and rejects. */
      atomic_fetch_add(none == TORN ? &reqs_after_teardown : &late_reqs, 1);
      return -1;
    }
    cm_id->context = c;
    atomic_fetch_add(&b_created, 1);
    CHECK_EQ(answer_req(cm_id, e->param.req_rcvd.remote_qpn), 0);
    return 0;
  }
  CHECK(c != NULL);
  int is_a = cm_id == c->a;
  switch (e->event) {
  case IB_CM_REP_RECEIVED:
    CHECK_EQ(ib_send_cm_rtu(cm_id, NULL, 0), 0);
    atomic_store(&c->a_up, 1);
    break;
  case IB_CM_RTU_RECEIVED:
  case IB_CM_USER_ESTABLISHED:
    atomic_store(&c->b_up, 1);
    break;
  case IB_CM_DREQ_RECEIVED:
    check_data(c, e, 0x40, IB_CM_DREQ_PRIVATE_DATA_SIZE);
    fill_pattern(pd, sizeof(pd), 0x80 + c->index);
    CHECK_EQ(ib_send_cm_drep(cm_id, with_data(c->index) ? pd : NULL,
                             with_data(c->index) ? IB_CM_DREP_PRIVATE_DATA_SIZE : 0),
             0);
    break;
  case IB_CM_DREP_RECEIVED:
    check_data(c, e, 0x80, IB_CM_DREP_PRIVATE_DATA_SIZE);
    break;
  case IB_CM_DREQ_ERROR:
    atomic_fetch_add(&c->dreq_errors, 1);
    break;
  case IB_CM_TIMEWAIT_EXIT:
    atomic_store(is_a ? &c->a_exit : &c->b_exit, 1);
    break;
  case IB_CM_REQ_ERROR:
  case IB_CM_REJ_RECEIVED:
    if (is_a)
      atomic_store(&c->a_setup_failed, 1);
    break;
  case IB_CM_REP_ERROR:
    atomic_store(&c->b_setup_failed, 1);
    break;
  case IB_CM_MRA_RECEIVED:
    /* The other side's CM asks for time: a retransmitted REQ (REP) found
     * its user not done yet, the worker busy with a batch (the automatic
     * MRA, docs/kernel-differences.md). */
    atomic_fetch_add(&mras, 1);
    break;
  default:
    test_fail(__FILE__, __LINE__, "connection %u: unexpected %s on %s", c->index,
              event_name(e->event), is_a ? "A" : "B");
  }
  return 0;
}

/* Waits until pred(i) holds for every connection of [lo, hi). */
static void wait_all(uint32_t lo, uint32_t hi, int (*pred)(uint32_t), const char *what) {
  long long end = now_ms() + 120000;
  for (uint32_t i = lo; i < hi; i++)
    while (!pred(i)) {
      if (now_ms() > end)
        test_fail(__FILE__, __LINE__, "connection %u: timed out waiting for %s", i, what);
      sleep_ms(2);
    }
}

static int setup_settled(uint32_t i) {
  struct soak_conn *c = &conns[i];
  if (atomic_load(&c->a_setup_failed))
    return 1;
  /* B's REP retries can all be lost while A, which got one REP, is up. */
  return atomic_load(&c->a_up) && (atomic_load(&c->b_up) || atomic_load(&c->b_setup_failed));
}

static int teardown_settled(uint32_t i) {
  struct soak_conn *c = &conns[i];
  if (atomic_load(&c->a_setup_failed))
    return 1;
  return atomic_load(&c->a_exit) && (atomic_load(&c->b_exit) || atomic_load(&c->b_setup_failed));
}

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, handler, NULL);
  CHECK_EQ(ibcm_loop_set_loss(dev_a, DROP_PERCENT, DUP_PERCENT), 0);
  CHECK_EQ(ibcm_loop_set_loss(dev_b, DROP_PERCENT, DUP_PERCENT), 0);
  struct conn_opts o;
  conn_opts_default(&o);
  o.max_cm_retries = 15;
  struct sa_path_rec path;
  conn_path(&path, &o);
  long long t0 = now_ms();

  for (uint32_t lo = 0; lo < CONNS; lo += BATCH) {
    uint32_t hi = lo + BATCH;
    for (uint32_t i = lo; i < hi; i++) {
      struct soak_conn *c = &conns[i];
      c->index = i;
      c->a = create_id(dev_a, handler, c);
      struct ib_cm_req_param req;
      req_param_init(&req, &path, &o, 0x1000 + i);
      uint8_t pd[IB_CM_REQ_PRIVATE_DATA_SIZE] = {0};
      memcpy(pd, &i, sizeof(i));
      req.private_data = pd;
      req.private_data_len = sizeof(pd);
      CHECK_EQ(ib_send_cm_req(c->a, &req), 0);
    }
    wait_all(lo, hi, setup_settled, "connection setup");
    for (uint32_t i = lo; i < hi; i++) {
      struct soak_conn *c = &conns[i];
      if (atomic_load(&c->a_setup_failed))
        continue;
      uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
      fill_pattern(pd, sizeof(pd), 0x40 + i);
      /* A passive side that gave up (REP_ERROR) is IDLE: A disconnects. */
      int a_sends = from_a(i) || atomic_load(&c->b_setup_failed);
      struct ib_cm_id *id = a_sends ? c->a : atomic_load(&c->b);
      CHECK_EQ(ib_send_cm_dreq(id, with_data(i) ? pd : NULL,
                               with_data(i) ? sizeof(pd) : 0), 0);
    }
    wait_all(lo, hi, teardown_settled, "timewait exit on both sides");
    for (uint32_t i = lo; i < hi; i++) {
      ib_destroy_cm_id(conns[i].a);
      /* From here a REQ_RECEIVED of this connection finds TORN, so whatever
       * id B has is destroyed here or refused by the handler, never left. */
      struct ib_cm_id *b = atomic_exchange(&conns[i].b, TORN);
      if (b)
        ib_destroy_cm_id(b);
    }
  }
  ib_destroy_cm_id(listener);

  unsigned setup_failed = 0, dreq_errors = 0, bad = 0;
  for (uint32_t i = 0; i < CONNS; i++) {
    setup_failed += atomic_load(&conns[i].a_setup_failed) != 0;
    setup_failed += atomic_load(&conns[i].b_setup_failed) != 0;
    dreq_errors += atomic_load(&conns[i].dreq_errors);
    bad += atomic_load(&conns[i].bad_data);
  }
  CHECK_EQ(bad, 0);

  /* The fabric quiets down: duplicates in flight are answered, then nothing. */
  struct ibcm_stats s;
  long long end = now_ms() + 30000;
  do {
    CHECK_EQ(ibcm_get_stats(&s), 0);
    if (s.cm_ids == 0 && s.timers == 0 && s.queued == 0)
      break;
    sleep_ms(10);
  } while (now_ms() < end);
  printf("stats: %llu cm_ids, %llu timers, %llu queued\n", (unsigned long long)s.cm_ids,
         (unsigned long long)s.timers, (unsigned long long)s.queued);
  CHECK_EQ(s.cm_ids, 0);
  CHECK_EQ(s.timers, 0);
  CHECK_EQ(s.queued, 0);

  struct ibcm_counters ca, cb;
  CHECK_EQ(ibcm_get_counters(dev_a, 1, &ca), 0);
  CHECK_EQ(ibcm_get_counters(dev_b, 1, &cb), 0);
  unsigned long long tx = 0, rx = 0;
  for (int k = 0; k < IBCM_CNT_ATTRS; k++) {
    tx += ca.cm_tx_msgs[k] + cb.cm_tx_msgs[k];
    rx += ca.cm_rx_msgs[k] + cb.cm_rx_msgs[k];
  }
  printf("%d connections in %lld ms with %d%% dropped, %d%% duplicated: "
         "%llu MADs sent, %llu received; %u setups failed (REQ_ERROR/REJ/REP_ERROR), "
         "%u DREQ_ERRORs; b ids %d, late REQs refused %d (%d after teardown), "
         "%d MRAs: OK\n",
         CONNS, now_ms() - t0, DROP_PERCENT, DUP_PERCENT, tx, rx, setup_failed, dreq_errors,
         atomic_load(&b_created), atomic_load(&late_reqs), atomic_load(&reqs_after_teardown),
         atomic_load(&mras));
  test_finish();
  return 0;
}
