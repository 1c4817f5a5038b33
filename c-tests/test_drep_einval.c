/*
 * ib_send_cm_drep's -EINVAL paths: every state but DREQ_RCVD (IDLE, LISTEN,
 * REQ_SENT, REQ_RCVD, ESTABLISHED, DREQ_SENT, TIMEWAIT) and private data
 * longer than 224 bytes; the call changes nothing (the kernel enters
 * timewait only after both checks). Then a valid DREP from DREQ_RCVD works
 * and its 224 bytes arrive.
 */
#include "common.h"

#define EXPECT_EINVAL(id, state) \
  expect_pd_call_einval(__FILE__, __LINE__, "ib_send_cm_drep", ib_send_cm_drep, IB_CM_DREP_PRIVATE_DATA_SIZE, (id), (state))

int main(void) {
  test_init();
  struct conn_opts o;
  conn_opts_slow(&o);
  uint8_t big[255];
  fill_pattern(big, sizeof(big), 0x44);

  CHECK_EQ(ib_send_cm_drep(NULL, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_drep(NULL, big, 10), -EINVAL);

  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  EXPECT_EINVAL(idle, IB_CM_IDLE);
  ib_destroy_cm_id(idle);
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  EXPECT_EINVAL(listener, IB_CM_LISTEN);

  /* REQ_SENT / REQ_RCVD: B holds the REQ, then answers it from here. */
  atomic_store(&reply_req, 0);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  const struct cm_ev *e = wait_req_received(0, listener, qpn);
  struct ib_cm_id *b = e->id;
  EXPECT_EINVAL(a, IB_CM_REQ_SENT);
  EXPECT_EINVAL(b, IB_CM_REQ_RCVD);
  unsigned mark = log_mark();
  CHECK_EQ(answer_req(b, qpn), 0);
  wait_event_from(mark, b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);

  /* ESTABLISHED. */
  EXPECT_EINVAL(a, IB_CM_ESTABLISHED);
  EXPECT_EINVAL(b, IB_CM_ESTABLISHED);

  /* DREQ_SENT (A) / DREQ_RCVD (B): B does not answer in its handler. */
  atomic_store(&reply_dreq, 0);
  CHECK_EQ(ib_send_cm_dreq(a, NULL, 0), 0);
  e = wait_event(b, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  EXPECT_EINVAL(a, IB_CM_DREQ_SENT);

  /* Too long: -EINVAL, still DREQ_RCVD, nothing sent. */
  CHECK_EQ(ib_send_cm_drep(b, big, 225), -EINVAL);
  CHECK_STATE(b, IB_CM_DREQ_RCVD);
  CHECK_EQ(ib_send_cm_drep(b, big, 255), -EINVAL);
  CHECK_STATE(b, IB_CM_DREQ_RCVD);
  CHECK_STATE(a, IB_CM_DREQ_SENT);
  CHECK_EQ(count_events(a, IB_CM_DREP_RECEIVED), 0);

  /* A valid DREP: TIMEWAIT at once, the peer gets the 224 bytes. */
  CHECK_EQ(ib_send_cm_drep(b, big, 224), 0);
  EXPECT_EINVAL(b, IB_CM_TIMEWAIT);
  e = wait_event(a, IB_CM_DREP_RECEIVED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK(memcmp(e->pd, big, 224) == 0);
  EXPECT_EINVAL(a, IB_CM_TIMEWAIT);

  wait_event(a, IB_CM_TIMEWAIT_EXIT);
  wait_event(b, IB_CM_TIMEWAIT_EXIT);
  EXPECT_EINVAL(a, IB_CM_IDLE);
  EXPECT_EINVAL(b, IB_CM_IDLE);
  CHECK_EQ(count_events(NULL, IB_CM_DREP_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);

  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("drep -EINVAL: OK");
  return 0;
}
