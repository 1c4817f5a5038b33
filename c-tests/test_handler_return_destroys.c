/*
 * cm_process_work: a handler that returns non-zero has its cm_id destroyed
 * by the CM after the callback (cm_destroy_id with that error).
 *  1. B returns non-zero for DREQ_RECEIVED: the id, in DREQ_RCVD, is
 *     destroyed, which answers the DREQ with a DREP (no private data); A
 *     gets DREP_RECEIVED. The pointer B had is dead: ib_send_cm_drep and
 *     ib_send_cm_dreq on it return -EINVAL, and no TIMEWAIT_EXIT comes.
 *  2. A listener's handler returns non-zero for REQ_RECEIVED: the new id (in
 *     REQ_RCVD) is destroyed, which rejects the REQ with
 *     IB_CM_REJ_CONSUMER_DEFINED; A gets REJ_RECEIVED (28) and is IDLE. The
 *     listener itself lives on and accepts the next REQ.
 */
#include "common.h"

static atomic_int refuse_dreq, refuse_req;

static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if (event->event == IB_CM_DREQ_RECEIVED && atomic_load(&refuse_dreq))
    return 1;
  if (event->event == IB_CM_REQ_RECEIVED && atomic_load(&refuse_req))
    return -ECONNREFUSED;
  return default_reply(cm_id, event);
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, handler, NULL);

  /* 1. DREQ_RECEIVED -> non-zero. */
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  atomic_store(&refuse_dreq, 1);
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  const struct cm_ev *e = wait_event_from(mark, c.b, IB_CM_DREQ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  e = wait_event_from(mark, c.a, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK(all_zero(e->pd, 224));
  /* The DREP was sent by the destroy: B's id is gone now. */
  CHECK_EQ(ib_send_cm_drep(c.b, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_dreq(c.b, NULL, 0), -EINVAL);
  CHECK_EQ(ib_cm_notify(c.b, IB_EVENT_COMM_EST), -EINVAL);
  wait_event_from(mark, c.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  sleep_ms(200); /* longer than B's timewait would have lasted */
  CHECK_EQ(count_events(c.b, IB_CM_TIMEWAIT_EXIT), 0);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  /* A live id would be IDLE by now and could listen. */
  CHECK_EQ(ib_cm_listen(c.b, htobe64(SERVICE_ID + 1)), -EINVAL);
  ib_destroy_cm_id(c.a);
  atomic_store(&refuse_dreq, 0);

  /* 2. REQ_RECEIVED on a listener's new id -> non-zero. */
  atomic_store(&refuse_req, 1);
  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  mark = log_mark();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  struct ib_cm_id *refused = wait_req_received(mark, listener, qpn)->id;
  e = wait_event_from(mark, a, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_EQ(answer_req(refused, qpn), -EINVAL); /* destroyed */
  CHECK_STATE(listener, IB_CM_LISTEN);
  CHECK_EQ(count_events_from(mark, a, IB_CM_REP_RECEIVED), 0);
  CHECK_EQ(count_events_from(mark, a, IB_CM_REQ_ERROR), 0);

  /* The listener still works, and A's id can connect again. */
  atomic_store(&refuse_req, 0);
  connect_pair(listener, a, NULL, &c);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);

  ib_destroy_cm_id(listener);
  test_finish();
  puts("handler return destroys: OK");
  return 0;
}
