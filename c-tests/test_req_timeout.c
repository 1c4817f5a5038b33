/*
 * Retransmission and timeout of connection setup MADs:
 *  1. cm_process_send_error, REQ_SENT: every REQ of A is lost; after
 *     1 + max_cm_retries transmissions A is reset to IDLE and gets
 *     IB_CM_REQ_ERROR (send_status IB_WC_RESP_TIMEOUT_ERR, no private
 *     data). The id can send a REQ again and connect.
 *  2. REP retransmission: B's first REP is lost; B resends it after its
 *     timeout (the REQ's local_cm_response_timeout) and the connection
 *     completes, each side seeing each event once.
 *  3. cm_process_send_error, REP_SENT: every RTU of A is lost; B resends its
 *     REP, A answers each duplicate REP with an RTU (lost too), and B ends
 *     with IB_CM_REP_ERROR in state IDLE.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);

  /* 1. */
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0010, 100), 0);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  req_param_init(&req, &path, &o, next_qpn());
  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  CHECK_STATE(a, IB_CM_REQ_SENT);
  const struct cm_ev *e = wait_event(a, IB_CM_REQ_ERROR);
  CHECK_EQ(e->param.send_status, IB_WC_RESP_TIMEOUT_ERR);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK(e->pd_null);
  CHECK(e->t_ms - t0 >= 100); /* 6 transmissions, 18 ms apart */
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_EQ(count_events(NULL, IB_CM_REQ_RECEIVED), 0);
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0010, 0), 0);
  /* The same id connects now. */
  struct conn c;
  connect_pair(listener, a, &o, &c);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);

  /* 2. */
  CHECK_EQ(ibcm_loop_drop(dev_b, 0x0013, 1), 0);
  unsigned mark = log_mark();
  t0 = now_ms();
  connect_pair(listener, NULL, &o, &c);
  e = wait_event_from(mark, c.a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  CHECK(e->t_ms - t0 >= 15); /* B's retransmit interval: 16 ms */
  CHECK(check_pattern(e->pd, 196, REP_PD_SEED));
  /* (ids of part 1 are freed: count from the mark) */
  CHECK_EQ(count_events_from(mark, c.a, IB_CM_REP_RECEIVED), 1);
  CHECK_EQ(count_events_from(mark, c.b, IB_CM_REQ_RECEIVED), 1);
  CHECK_EQ(count_events_from(mark, c.b, IB_CM_RTU_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_REQ_ERROR), 1); /* part 1's only */
  CHECK_EQ(count_events(NULL, IB_CM_REP_ERROR), 0);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);

  /* 3. */
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0014, 100), 0);
  a = create_id(dev_a, test_handler, NULL);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  mark = log_mark();
  t0 = now_ms();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  struct ib_cm_id *b = wait_req_received(mark, listener, qpn)->id;
  e = wait_event_from(mark, b, IB_CM_REP_ERROR, TIMEOUT_MS);
  CHECK_EQ(e->param.send_status, IB_WC_RESP_TIMEOUT_ERR);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK(e->t_ms - t0 >= 90); /* 6 REPs, 16 ms apart */
  CHECK_STATE(b, IB_CM_IDLE);
  CHECK_STATE(a, IB_CM_ESTABLISHED); /* A sent its RTUs and knows nothing */
  CHECK_EQ(count_events_from(mark, b, IB_CM_RTU_RECEIVED), 0);
  /* Duplicate REPs are answered, not reported. */
  CHECK_EQ(count_events_from(mark, a, IB_CM_REP_RECEIVED), 1);
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0014, 0), 0);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(a);

  ib_destroy_cm_id(listener);
  test_finish();
  puts("req/rep timeout: OK");
  return 0;
}
