/*
 * ib_destroy_cm_id from inside the id's own handler (the kernel forbids it;
 * this library documents that it works): the call does not deadlock on the
 * running callback, does what destroy does in that state, and no further
 * event is delivered for the id.
 *  1. B destroys itself in DREQ_RECEIVED (DREQ_RCVD: the destroy answers
 *     with a DREP): A gets DREP_RECEIVED; B gets no TIMEWAIT_EXIT.
 *  2. A destroys itself in REP_RECEIVED (REP_RCVD: the destroy rejects the
 *     REP with CONSUMER_DEFINED): B gets REJ_RECEIVED (28) and is IDLE.
 *  3. A destroys itself in TIMEWAIT_EXIT, the usual last event.
 */
#include "common.h"

static atomic_int destroy_on = -1; /* event type whose handler destroys the id */
static atomic_int destroyed_in_handler;

static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if ((int)event->event == atomic_load(&destroy_on)) {
    ib_destroy_cm_id(cm_id);
    atomic_fetch_add(&destroyed_in_handler, 1);
    return 0;
  }
  return default_reply(cm_id, event);
}

/* Waits (bounded) until `n` handlers have destroyed their ids. */
static void wait_destroyed(int n) {
  for (long long t0 = now_ms(); atomic_load(&destroyed_in_handler) < n;) {
    if (now_ms() - t0 > TIMEOUT_MS)
      test_fail(__FILE__, __LINE__, "%d ids destroyed in handlers, expected %d",
                atomic_load(&destroyed_in_handler), n);
    sleep_ms(1);
  }
  CHECK_EQ(atomic_load(&destroyed_in_handler), n);
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, handler, NULL);
  struct conn c;

  /* 1. */
  connect_pair(listener, NULL, NULL, &c);
  atomic_store(&destroy_on, IB_CM_DREQ_RECEIVED);
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  wait_event_from(mark, c.b, IB_CM_DREQ_RECEIVED, TIMEOUT_MS);
  const struct cm_ev *e = wait_event_from(mark, c.a, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  wait_event_from(mark, c.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_destroyed(1);
  sleep_ms(200); /* longer than B's timewait would have lasted */
  CHECK_EQ(count_id_events(c.b), 3); /* REQ, RTU, DREQ_RECEIVED: nothing after */
  CHECK_EQ(ib_send_cm_drep(c.b, NULL, 0), -EINVAL);
  CHECK_EQ(ib_cm_listen(c.b, htobe64(SERVICE_ID + 1)), -EINVAL); /* not a live IDLE id */
  ib_destroy_cm_id(c.a);

  /* 2. */
  atomic_store(&destroy_on, IB_CM_REP_RECEIVED);
  struct ib_cm_id *a = create_id(dev_a, handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  mark = log_mark();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  struct ib_cm_id *b = wait_req_received(mark, listener, qpn)->id;
  wait_event_from(mark, a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  e = wait_event_from(mark, b, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(b, IB_CM_IDLE);
  wait_destroyed(2);
  sleep_ms(100); /* no REQ retransmission or anything else reaches A */
  CHECK_EQ(count_events_from(mark, a, IB_CM_REP_RECEIVED), 1);
  CHECK_EQ(count_id_events_from(mark, a), 1);
  CHECK_EQ(ib_send_cm_rtu(a, NULL, 0), -EINVAL);
  CHECK_EQ(count_events_from(mark, b, IB_CM_RTU_RECEIVED), 0);
  ib_destroy_cm_id(b);

  /* 3. */
  atomic_store(&destroy_on, -1);
  a = create_id(dev_a, handler, NULL);
  mark = log_mark();
  connect_pair(listener, a, NULL, &c);
  atomic_store(&destroy_on, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  wait_event_from(mark, c.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_event_from(mark, c.b, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_destroyed(4); /* both ids of the pair */
  sleep_ms(50);
  CHECK_EQ(atomic_load(&destroyed_in_handler), 4);

  ib_destroy_cm_id(listener);
  test_finish(); /* 0 only if the ids destroyed in handlers are gone */
  puts("destroy in handler: OK");
  return 0;
}
