/*
 * ib_send_cm_mra (Linux 6.x, replaced by ib_prepare_cm_mra in 7.x), for code
 * written against 6.x kernels:
 *  - from REQ_RCVD the MRA goes out at once with the caller's service timeout
 *    and private data: the active side sees IB_CM_MRA_RECEIVED carrying both
 *    and moves to MRA_REQ_RCVD; the id is MRA_REQ_SENT and can still answer
 *    with a REP;
 *  - from REP_RCVD likewise (MRA_REP_SENT / MRA_REP_RCVD), then the RTU;
 *  - with IB_CM_MRA_FLAG_DELAY nothing is sent now: A's REQ retransmissions
 *    are dropped and B sends no MRA; once one gets through, B answers the
 *    duplicate REQ with the MRA (timeout without the flag bit, the data);
 *  - -EINVAL for more than 222 bytes, for IDLE, LISTEN, ESTABLISHED (no LAP)
 *    and MRA_REQ_SENT ids, and a NULL id; the state is unchanged.
 */
#include "common.h"

#define MRA_PD_SEED 0x44
#define MRA_TIMEOUT 18 /* 1 s, longer than the test needs */

static struct ibcm_counters snap(struct ib_device *dev) {
  struct ibcm_counters c;
  CHECK_EQ(ibcm_get_counters(dev, 1, &c), 0);
  return c;
}

/* A REQ from a new id on A to the listener; B's id is left in REQ_RCVD. */
static struct ib_cm_id *req_to_b(struct ib_cm_id *listener, const struct conn_opts *o,
                                 struct conn *c) {
  unsigned mark = log_mark();
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, o);
  c->qpn_a = next_qpn();
  c->a = create_id(dev_a, test_handler, NULL);
  req_param_init(&req, &path, o, c->qpn_a);
  CHECK_EQ(ib_send_cm_req(c->a, &req), 0);
  c->b = wait_req_received(mark, listener, c->qpn_a)->id;
  CHECK_STATE(c->b, IB_CM_REQ_RCVD);
  return c->b;
}

/* B answers with its REP, A with its RTU: both ESTABLISHED. */
static void finish_connect(struct conn *c) {
  unsigned mark = log_mark();
  CHECK_EQ(answer_req(c->b, c->qpn_a), 0);
  wait_event_from(mark, c->b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(c->a, IB_CM_ESTABLISHED);
  CHECK_STATE(c->b, IB_CM_ESTABLISHED);
}

static void check_mra_event(const struct cm_ev *e, uint8_t timeout, size_t len) {
  CHECK_EQ(e->param.mra_rcvd.service_timeout, timeout);
  CHECK_EQ(e->pd_len, IB_CM_MRA_PRIVATE_DATA_SIZE);
  CHECK(check_pattern(e->pd, len, MRA_PD_SEED));
  CHECK(all_zero(e->pd + len, IB_CM_MRA_PRIVATE_DATA_SIZE - len));
}

static void mra_for_req_at_once(struct ib_cm_id *listener, const struct conn_opts *o,
                                const uint8_t *pd) {
  struct conn c;
  unsigned mark = log_mark(); /* ids of earlier parts may share addresses */
  struct ib_cm_id *b = req_to_b(listener, o, &c);
  struct ibcm_counters before = snap(dev_b);
  CHECK_EQ(ib_send_cm_mra(b, MRA_TIMEOUT, pd, IB_CM_MRA_PRIVATE_DATA_SIZE), 0);
  CHECK_STATE(b, IB_CM_MRA_REQ_SENT);
  CHECK_EQ(snap(dev_b).cm_tx_msgs[IBCM_CNT_MRA] - before.cm_tx_msgs[IBCM_CNT_MRA], 1);
  const struct cm_ev *e = wait_event_from(mark, c.a, IB_CM_MRA_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_MRA_REQ_RCVD);
  check_mra_event(e, MRA_TIMEOUT, IB_CM_MRA_PRIVATE_DATA_SIZE);
  /* One MRA per state: a second call is refused. */
  CHECK_EQ(ib_send_cm_mra(b, MRA_TIMEOUT, NULL, 0), -EINVAL);
  CHECK_STATE(b, IB_CM_MRA_REQ_SENT);
  finish_connect(&c);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
}

static void mra_for_rep_at_once(struct ib_cm_id *listener, const struct conn_opts *o,
                                const uint8_t *pd) {
  struct conn c;
  unsigned mark = log_mark(); /* ids of earlier parts may share addresses */
  atomic_store(&reply_rep, 0);
  req_to_b(listener, o, &c);
  CHECK_EQ(answer_req(c.b, c.qpn_a), 0);
  wait_event_from(mark, c.a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(c.a, IB_CM_REP_RCVD);
  CHECK_EQ(ib_send_cm_mra(c.a, MRA_TIMEOUT, pd, 17), 0);
  CHECK_STATE(c.a, IB_CM_MRA_REP_SENT);
  const struct cm_ev *e = wait_event_from(mark, c.b, IB_CM_MRA_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_MRA_REP_RCVD);
  check_mra_event(e, MRA_TIMEOUT, 17);
  CHECK_EQ(ib_send_cm_rtu(c.a, NULL, 0), 0);
  wait_event_from(mark, c.b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
  atomic_store(&reply_rep, 1);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
}

static void mra_delayed_until_duplicate(struct ib_cm_id *listener, const struct conn_opts *o,
                                        const uint8_t *pd) {
  struct conn c;
  unsigned mark = log_mark(); /* ids of earlier parts may share addresses */
  struct ib_cm_id *b = req_to_b(listener, o, &c);
  /* Lose A's REQ retransmissions for now. */
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0010, 1000), 0);
  struct ibcm_counters a0 = snap(dev_a), b0 = snap(dev_b);
  CHECK_EQ(ib_send_cm_mra(b, IB_CM_MRA_FLAG_DELAY | MRA_TIMEOUT, pd, 50), 0);
  CHECK_STATE(b, IB_CM_MRA_REQ_SENT);
  /* A retransmits (and loses) its REQ: still no MRA from B. */
  long long until = now_ms() + TIMEOUT_MS;
  while (snap(dev_a).cm_tx_msgs[IBCM_CNT_REQ] == a0.cm_tx_msgs[IBCM_CNT_REQ]) {
    CHECK(now_ms() < until);
    sleep_ms(5);
  }
  struct ibcm_counters b1 = snap(dev_b);
  CHECK_EQ(b1.cm_tx_msgs[IBCM_CNT_MRA] - b0.cm_tx_msgs[IBCM_CNT_MRA], 0);
  CHECK_EQ(count_events_from(mark, c.a, IB_CM_MRA_RECEIVED), 0);
  /* The next retransmission arrives: a duplicate, answered with the MRA. */
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0010, 0), 0);
  const struct cm_ev *e = wait_event_from(mark, c.a, IB_CM_MRA_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_MRA_REQ_RCVD);
  check_mra_event(e, MRA_TIMEOUT, 50);
  struct ibcm_counters b2 = snap(dev_b);
  CHECK(b2.cm_rx_duplicates[IBCM_CNT_REQ] - b0.cm_rx_duplicates[IBCM_CNT_REQ] >= 1);
  CHECK(b2.cm_tx_msgs[IBCM_CNT_MRA] - b0.cm_tx_msgs[IBCM_CNT_MRA] >= 1);
  finish_connect(&c);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
}

static void mra_refused(struct ib_cm_id *listener, const struct conn_opts *o,
                        const uint8_t *pd) {
  CHECK_EQ(ib_send_cm_mra(NULL, MRA_TIMEOUT, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_mra(listener, MRA_TIMEOUT, NULL, 0), -EINVAL);
  CHECK_STATE(listener, IB_CM_LISTEN);
  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_mra(idle, MRA_TIMEOUT, NULL, 0), -EINVAL);
  CHECK_STATE(idle, IB_CM_IDLE);
  ib_destroy_cm_id(idle);

  struct conn c;
  struct ib_cm_id *b = req_to_b(listener, o, &c);
  struct ibcm_counters b0 = snap(dev_b);
  CHECK_EQ(ib_send_cm_mra(b, MRA_TIMEOUT, pd, IB_CM_MRA_PRIVATE_DATA_SIZE + 1), -EINVAL);
  CHECK_EQ(ib_send_cm_mra(b, MRA_TIMEOUT, pd, 255), -EINVAL);
  CHECK_STATE(b, IB_CM_REQ_RCVD);
  CHECK_EQ(snap(dev_b).cm_tx_msgs[IBCM_CNT_MRA], b0.cm_tx_msgs[IBCM_CNT_MRA]);
  finish_connect(&c);
  /* ESTABLISHED without a LAP received. */
  CHECK_EQ(ib_send_cm_mra(c.b, MRA_TIMEOUT, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_mra(c.a, IB_CM_MRA_FLAG_DELAY, NULL, 0), -EINVAL);
  CHECK_STATE(c.b, IB_CM_ESTABLISHED);
  CHECK_STATE(c.a, IB_CM_ESTABLISHED);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
}

int main(void) {
  require_loop();
  test_init();
  _Static_assert(IB_CM_MRA_FLAG_DELAY == 0x80, "the 6.x value");
  atomic_store(&reply_req, 0); /* the test answers REQs itself */
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);
  /* A resends its REQ every 2 * 1 + 1024 ms, six times in all, and B its
   * REP every 1024 ms: no duplicate REQ or REP reaches the other side while
   * a check runs (one would get an automatic MRA, whose service timeout is
   * not the one the user's MRA checks for). */
  o.remote_cm_response_timeout = 18;
  o.local_cm_response_timeout = 18;
  uint8_t pd[IB_CM_MRA_PRIVATE_DATA_SIZE + 33];
  fill_pattern(pd, sizeof(pd), MRA_PD_SEED);

  mra_for_req_at_once(listener, &o, pd);
  mra_for_rep_at_once(listener, &o, pd);
  mra_delayed_until_duplicate(listener, &o, pd);
  mra_refused(listener, &o, pd);

  ib_destroy_cm_id(listener);
  test_finish();
  puts("ib_send_cm_mra: OK");
  return 0;
}
