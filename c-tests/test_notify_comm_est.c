/*
 * ib_cm_notify(IB_EVENT_COMM_EST) (cm_establish): the passive side's QP saw
 * traffic before the RTU arrived. With A's RTUs lost, B is in REP_SENT;
 * notify moves it to ESTABLISHED at once, queues IB_CM_USER_ESTABLISHED and
 * stops the REP retransmission (no REP_ERROR, no RTU_RECEIVED later).
 * A second notify is -EISCONN; notify on an IDLE or LISTEN id, and other
 * event types, are -EINVAL. The connection then disconnects normally.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);
  /* B resends its REP every 256 ms: REP_ERROR would come after ~1.5 s. */
  o.local_cm_response_timeout = 16;

  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_cm_notify(idle, IB_EVENT_COMM_EST), -EINVAL);
  CHECK_STATE(idle, IB_CM_IDLE);
  CHECK_EQ(ib_cm_notify(listener, IB_EVENT_COMM_EST), -EINVAL);
  CHECK_STATE(listener, IB_CM_LISTEN);
  CHECK_EQ(ib_cm_notify(NULL, IB_EVENT_COMM_EST), -EINVAL);

  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0014, 100), 0);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  struct ib_cm_id *b = wait_req_received(0, listener, qpn)->id;
  wait_event(a, IB_CM_REP_RECEIVED);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_STATE(b, IB_CM_REP_SENT);

  CHECK_EQ(ib_cm_notify(b, IB_EVENT_QP_FATAL), -EINVAL);
  CHECK_STATE(b, IB_CM_REP_SENT);
  CHECK_EQ(ib_cm_notify(b, IB_EVENT_COMM_EST), 0);
  CHECK_STATE(b, IB_CM_ESTABLISHED);
  const struct cm_ev *e = wait_event(b, IB_CM_USER_ESTABLISHED);
  CHECK_EQ(e->state, IB_CM_ESTABLISHED);
  CHECK_EQ(ib_cm_notify(b, IB_EVENT_COMM_EST), -EISCONN);
  CHECK_EQ(ib_cm_notify(a, IB_EVENT_COMM_EST), -EISCONN);
  CHECK_STATE(b, IB_CM_ESTABLISHED);

  /* The REP is no longer retransmitted: nothing more, even once RTUs pass. */
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0014, 0), 0);
  sleep_ms(1800);
  CHECK_EQ(count_events(b, IB_CM_REP_ERROR), 0);
  CHECK_EQ(count_events(b, IB_CM_RTU_RECEIVED), 0);
  CHECK_EQ(count_events(b, IB_CM_USER_ESTABLISHED), 1);
  CHECK_EQ(count_events(a, IB_CM_REP_RECEIVED), 1);
  CHECK_STATE(b, IB_CM_ESTABLISHED);

  struct conn c = {.a = a, .b = b};
  disconnect_pair(&c);
  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(idle);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("notify COMM_EST: OK");
  return 0;
}
