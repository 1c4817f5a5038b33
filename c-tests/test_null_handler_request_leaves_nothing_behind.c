/*
 * A request that arrives while the listener's cm_handler is NULL leaves
 * nothing behind (issue 10).
 *
 * ib_create_cm_id(3): "Both fields belong to the caller, who may change them
 * at any time ... Events that arrive while it is NULL are discarded." For an
 * ordinary event that is harmless. For IB_CM_SIDR_REQ_RECEIVED (and
 * IB_CM_REQ_RECEIVED) the event is the only way the user ever learns the new
 * id's pointer: discarding it leaves an id in SIDR_REQ_RCVD (REQ_RCVD) that
 * nobody can answer or destroy. It holds a place in the listener's backlog
 * for ever, and counts as an id of the device, so ibcm_close_device returns
 * -EBUSY for ever.
 *
 * Here the listener's handler is NULL while LISTEN_BACKLOG (1024) SIDR_REQs
 * arrive (a daemon swapping handlers during reconfiguration; or a single
 * request per swap, over months). Then the handler is back, every id the user
 * knows is destroyed, and:
 *  - a new SIDR_REQ must reach the listener (expected: a SIDR_REQ_RECEIVED;
 *    actual: dropped, counted in rx_listen_overflows: the listener is full of
 *    unreachable ids and takes nothing, ever again);
 *  - once the user destroyed everything it knows of, no id may be left
 *    (ibcm_get_stats().cm_ids == 0, as test_finish's closes need).
 */
#include "common.h"

#define N_REQUESTS 1024 /* LISTEN_BACKLOG */

static void wait_quiet(void) {
  struct ibcm_stats st;
  for (long long t0 = now_ms();;) {
    CHECK_EQ(ibcm_get_stats(&st), 0);
    if (st.queued == 0)
      return;
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(1);
  }
}

static struct ib_cm_id *send_sidr(struct sa_path_rec *path) {
  struct ib_cm_id *id = create_id(dev_a, test_handler, NULL);
  struct ib_cm_sidr_req_param p;
  memset(&p, 0, sizeof(p));
  p.path = path;
  p.service_id = htobe64(SERVICE_ID);
  p.timeout_ms = 3600 * 1000; /* no retransmission during the test */
  p.max_cm_retries = 0;
  CHECK_EQ(ib_send_cm_sidr_req(id, &p), 0);
  return id;
}

int main(void) {
  test_init();
  require_loop();
  struct sa_path_rec path = path_ab;
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);

  /* The caller's field, the caller's to change. */
  listener->cm_handler = NULL;
  static struct ib_cm_id *requesters[N_REQUESTS];
  for (int i = 0; i < N_REQUESTS; i++)
    requesters[i] = send_sidr(&path);
  wait_quiet();
  listener->cm_handler = test_handler;
  for (int i = 0; i < N_REQUESTS; i++)
    ib_destroy_cm_id(requesters[i]);

  struct ibcm_counters before;
  CHECK_EQ(ibcm_get_counters(dev_b, 1, &before), 0);

  /* The handler is back: a new request must reach it. */
  unsigned mark = log_mark();
  struct ib_cm_id *late = send_sidr(&path);
  wait_quiet();
  struct ibcm_counters after;
  CHECK_EQ(ibcm_get_counters(dev_b, 1, &after), 0);
  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  printf("after the NULL-handler window: SIDR_REQ_RECEIVED %u, rx_listen_overflows +%llu, "
         "cm_ids %llu (the listener and the late requester are 2)\n",
         count_events_from(mark, NULL, IB_CM_SIDR_REQ_RECEIVED),
         (unsigned long long)(after.rx_listen_overflows - before.rx_listen_overflows),
         (unsigned long long)st.cm_ids);
  CHECK_EQ(after.rx_listen_overflows - before.rx_listen_overflows, 0);
  const struct cm_ev *ev = wait_event_from(mark, NULL, IB_CM_SIDR_REQ_RECEIVED, TIMEOUT_MS);
  struct ib_cm_sidr_rep_param rep;
  memset(&rep, 0, sizeof(rep));
  rep.status = IB_SIDR_SUCCESS;
  CHECK_EQ(ib_send_cm_sidr_rep(ev->id, &rep), 0);
  wait_event(late, IB_CM_SIDR_REP_RECEIVED);
  ib_destroy_cm_id(ev->id);
  ib_destroy_cm_id(late);
  ib_destroy_cm_id(listener);

  /* Everything the user knows of is destroyed: nothing may be left. */
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 0);
  test_finish();
  puts("a request that arrives while the handler is NULL leaves nothing behind: OK");
  return 0;
}
