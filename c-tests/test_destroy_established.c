/*
 * cm_destroy_id, ESTABLISHED: destroying B's connected id sends a DREQ (no
 * private data) and ends B's side at once. A's cm_dreq_handler reports
 * DREQ_RECEIVED (state DREQ_RCVD, 220 zero bytes); A answers with a DREP
 * (which finds no id on B) and reaches TIMEWAIT_EXIT. Also DREQ_SENT:
 * destroying an id whose DREQ is outstanding cancels it (no DREQ_ERROR).
 */
#include "common.h"

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  ib_destroy_cm_id(c.b);
  const struct cm_ev *e = wait_event(c.a, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  CHECK_EQ(e->pd_len, 220);
  CHECK(all_zero(e->pd, 220));
  e = wait_event(c.a, IB_CM_TIMEWAIT_EXIT); /* A answered in its handler */
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_EQ(count_events(c.a, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 0);
  CHECK_EQ(count_id_events(c.b), 2); /* REQ_RECEIVED, RTU_RECEIVED */
  ib_destroy_cm_id(c.a);

  /* DREQ_SENT: B holds the DREQ unanswered; A destroys its id meanwhile. */
  if (devices_are_loop()) {
    struct conn_opts o;
    conn_opts_slow(&o);
    unsigned mark = log_mark(); /* freed ids' addresses may come back */
    connect_pair(listener, NULL, &o, &c);
    atomic_store(&reply_dreq, 0);
    CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
    wait_event_from(mark, c.b, IB_CM_DREQ_RECEIVED, TIMEOUT_MS);
    CHECK_STATE(c.a, IB_CM_DREQ_SENT);
    unsigned a_events = count_id_events(c.a);
    ib_destroy_cm_id(c.a);
    /* B answers now: its DREP finds no id on A and is dropped. */
    CHECK_EQ(ib_send_cm_drep(c.b, NULL, 0), 0);
    wait_event_from(mark, c.b, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
    CHECK_EQ(count_id_events(c.a), a_events);
    CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
    ib_destroy_cm_id(c.b);
  }

  ib_destroy_cm_id(listener);
  test_finish();
  puts("destroy established: OK");
  return 0;
}
