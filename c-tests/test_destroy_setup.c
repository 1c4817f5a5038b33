/*
 * cm_destroy_id during connection setup, and what the peer's cm_rej_handler
 * makes of it:
 *  - REQ_SENT: REJ reason IB_CM_REJ_TIMEOUT with the local node GUID as ARI
 *    (found by GUID + comm ID); the passive id (REQ_RCVD) goes IDLE.
 *  - REQ_RCVD: REJ CONSUMER_DEFINED; the active id (REQ_SENT) goes IDLE.
 *  - REP_SENT (A's RTU lost): REJ CONSUMER_DEFINED; A, already ESTABLISHED,
 *    gets REJ_RECEIVED in TIMEWAIT, then TIMEWAIT_EXIT.
 */
#include "common.h"

/* A REQ from a new id of A; returns A's id, *b = the passive id. */
static struct ib_cm_id *start(struct ib_cm_id *listener, struct ib_cm_id **b,
                              unsigned *mark) {
  struct conn_opts o;
  conn_opts_slow(&o); /* nothing is retransmitted while we look */
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  *mark = log_mark();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  *b = wait_req_received(*mark, listener, qpn)->id;
  return a;
}

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct ib_cm_id *a, *b;
  unsigned mark;

  /* REQ_SENT. */
  atomic_store(&reply_req, 0);
  a = start(listener, &b, &mark);
  CHECK_STATE(a, IB_CM_REQ_SENT);
  ib_destroy_cm_id(a);
  const struct cm_ev *e = wait_event_from(mark, b, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_TIMEOUT);
  CHECK_EQ(e->param.rej_rcvd.ari_length, 8);
  CHECK(memcmp(e->ari, &gid_a.global.interface_id, 8) == 0); /* A's node GUID */
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(b, IB_CM_IDLE);
  ib_destroy_cm_id(b);

  /* REQ_RCVD. */
  a = start(listener, &b, &mark);
  CHECK_STATE(b, IB_CM_REQ_RCVD);
  ib_destroy_cm_id(b);
  e = wait_event_from(mark, a, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(a, IB_CM_IDLE);
  ib_destroy_cm_id(a);

  /* REP_SENT. */
  atomic_store(&reply_req, 1);
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0014, 100), 0);
  a = start(listener, &b, &mark);
  wait_event_from(mark, a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_STATE(b, IB_CM_REP_SENT);
  ib_destroy_cm_id(b);
  e = wait_event_from(mark, a, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  e = wait_event_from(mark, a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0014, 0), 0);
  CHECK_EQ(count_events_from(mark, a, IB_CM_DREQ_RECEIVED), 0);
  ib_destroy_cm_id(a);

  ib_destroy_cm_id(listener);
  test_finish();
  puts("destroy during setup: OK");
  return 0;
}
