/*
 * ib_send_cm_dreq's -EINVAL paths: private data longer than 220 bytes
 * (checked before anything else; a NULL pointer with any length means "no
 * private data"), and every state but ESTABLISHED (IDLE, LISTEN, REQ_SENT,
 * REQ_RCVD, REP_RCVD, REP_SENT, DREQ_SENT, DREQ_RCVD, TIMEWAIT): the call changes
 * nothing. Slow timeouts keep each state in place while it is probed.
 */
#include "common.h"

/* ib_send_cm_dreq on `id` in `state` fails with -EINVAL and changes nothing. */
#define EXPECT_EINVAL(id, state) \
  expect_pd_call_einval(__FILE__, __LINE__, "ib_send_cm_dreq", ib_send_cm_dreq, IB_CM_DREQ_PRIVATE_DATA_SIZE, (id), (state))

int main(void) {
  test_init();
  struct conn_opts o;
  conn_opts_slow(&o);
  uint8_t big[255];
  fill_pattern(big, sizeof(big), 2);

  /* NULL cm_id. */
  CHECK_EQ(ib_send_cm_dreq(NULL, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_dreq(NULL, big, 10), -EINVAL);

  /* IDLE and LISTEN. */
  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  EXPECT_EINVAL(idle, IB_CM_IDLE);
  CHECK_EQ(ib_send_cm_dreq(idle, big, 221), -EINVAL);
  CHECK_STATE(idle, IB_CM_IDLE);
  ib_destroy_cm_id(idle);
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  EXPECT_EINVAL(listener, IB_CM_LISTEN);

  /* REQ_SENT (A) and REQ_RCVD (B): B's handler does not answer the REQ. */
  atomic_store(&reply_req, 0);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  struct ib_cm_id *b = wait_req_received(0, listener, qpn)->id;
  EXPECT_EINVAL(a, IB_CM_REQ_SENT);
  EXPECT_EINVAL(b, IB_CM_REQ_RCVD);

  /* REP_SENT (B) and REP_RCVD (A): A does not answer the REP yet. */
  atomic_store(&reply_rep, 0);
  CHECK_EQ(answer_req(b, qpn), 0);
  wait_event(a, IB_CM_REP_RECEIVED);
  EXPECT_EINVAL(a, IB_CM_REP_RCVD);
  EXPECT_EINVAL(b, IB_CM_REP_SENT);

  /* ESTABLISHED on both. */
  CHECK_EQ(ib_send_cm_rtu(a, NULL, 0), 0);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  wait_event(b, IB_CM_RTU_RECEIVED);
  CHECK_STATE(b, IB_CM_ESTABLISHED);

  /* Too much private data: -EINVAL before the state is looked at. */
  CHECK_EQ(ib_send_cm_dreq(a, big, 221), -EINVAL);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_EQ(ib_send_cm_dreq(a, big, 255), -EINVAL);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_EQ(ib_send_cm_dreq(b, big, 221), -EINVAL);
  CHECK_STATE(b, IB_CM_ESTABLISHED);
  CHECK_EQ(count_events(b, IB_CM_DREQ_RECEIVED), 0);

  /* NULL private data with a length: accepted, the DREQ carries zeros. B
   * does not answer yet: DREQ_SENT (A) and DREQ_RCVD (B). */
  atomic_store(&reply_dreq, 0);
  CHECK_EQ(ib_send_cm_dreq(a, NULL, 200), 0);
  CHECK_STATE(a, IB_CM_DREQ_SENT);
  const struct cm_ev *e = wait_event(b, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  CHECK_EQ(e->pd_len, 220);
  CHECK(all_zero(e->pd, 220));
  EXPECT_EINVAL(a, IB_CM_DREQ_SENT);
  EXPECT_EINVAL(b, IB_CM_DREQ_RCVD);
  CHECK_EQ(ib_send_cm_dreq(b, big, 221), -EINVAL);
  CHECK_STATE(b, IB_CM_DREQ_RCVD);

  /* TIMEWAIT on both (about 2 s with these paths). */
  CHECK_EQ(ib_send_cm_drep(b, NULL, 0), 0);
  EXPECT_EINVAL(b, IB_CM_TIMEWAIT);
  wait_event(a, IB_CM_DREP_RECEIVED);
  EXPECT_EINVAL(a, IB_CM_TIMEWAIT);

  /* IDLE again after timewait. */
  wait_event(a, IB_CM_TIMEWAIT_EXIT);
  wait_event(b, IB_CM_TIMEWAIT_EXIT);
  EXPECT_EINVAL(a, IB_CM_IDLE);
  EXPECT_EINVAL(b, IB_CM_IDLE);

  /* None of the refused calls sent anything. */
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_events(NULL, IB_CM_REJ_RECEIVED), 0);

  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("dreq -EINVAL: OK");
  return 0;
}
