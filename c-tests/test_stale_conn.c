/*
 * cm_match_req, stale connection: a REQ from a QP (remote QPN + CA GUID)
 * that still has a connection on the passive side means that connection is
 * stale. The passive CM rejects the new REQ with IB_CM_REJ_STALE_CONN and
 * sends a DREQ on the old connection. The rejected active id enters
 * TIMEWAIT (cm_rej_handler: STALE_CONN in REQ_SENT), then TIMEWAIT_EXIT;
 * the old connection is torn down by DREQ/DREP. Afterwards the QP connects.
 */
#include "common.h"

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn old;
  connect_pair(listener, NULL, NULL, &old);

  /* A new id of the same QP asks again. (A packet lifetime of 18 makes its
   * timewait, conv(18 + 1), last 2 s instead of 1 ms, so that the state at
   * delivery can be checked.) */
  struct conn_opts o;
  conn_opts_slow(&o);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  req_param_init(&req, &path, &o, old.qpn_a);
  struct ib_cm_id *a2 = create_id(dev_a, test_handler, NULL);
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_req(a2, &req), 0);

  const struct cm_ev *e = wait_event_from(mark, a2, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_STALE_CONN);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  e = wait_event_from(mark, a2, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_EQ(count_events_from(mark, NULL, IB_CM_REQ_RECEIVED), 0);

  /* The old connection: B sent a DREQ, A's handler answered. */
  e = wait_event_from(mark, old.a, IB_CM_DREQ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  e = wait_event_from(mark, old.b, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  wait_event_from(mark, old.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_event_from(mark, old.b, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  ib_destroy_cm_id(old.a);
  ib_destroy_cm_id(old.b);

  /* The QP is free now: the same id connects with the same QPN. */
  mark = log_mark();
  CHECK_STATE(a2, IB_CM_IDLE);
  CHECK_EQ(ib_send_cm_req(a2, &req), 0);
  struct conn c = {.a = a2, .qpn_a = old.qpn_a};
  c.b = wait_req_received(mark, listener, old.qpn_a)->id;
  wait_event_from(mark, c.b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(a2, IB_CM_ESTABLISHED);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);

  ib_destroy_cm_id(listener);
  test_finish();
  puts("stale connection: OK");
  return 0;
}
