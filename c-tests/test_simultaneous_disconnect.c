/*
 * cm_dreq_handler, DREQ_SENT branch (both sides disconnect at once): A's
 * DREQ is lost, so A sits in DREQ_SENT when B's DREQ arrives. A cancels its
 * own DREQ, moves to DREQ_RCVD and gets DREQ_RECEIVED; its handler answers
 * with a DREP, and B (DREQ_SENT) gets DREP_RECEIVED. Each side sees one
 * disconnect event and one TIMEWAIT_EXIT; nobody gets DREQ_ERROR.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn_opts o;
  conn_opts_slow(&o); /* A's DREQ would be resent only after ~6 s */
  struct conn c;
  connect_pair(listener, NULL, &o, &c);
  uint8_t drep_pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  fill_pattern(drep_pd, sizeof(drep_pd), 0x5d);
  set_drep_data(drep_pd, sizeof(drep_pd));

  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0015, 1), 0);
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  CHECK_STATE(c.a, IB_CM_DREQ_SENT);
  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), 0x5b);
  CHECK_EQ(ib_send_cm_dreq(c.b, pd, sizeof(pd)), 0);

  const struct cm_ev *e = wait_event(c.a, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  CHECK(check_pattern(e->pd, 220, 0x5b));
  e = wait_event(c.b, IB_CM_DREP_RECEIVED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK(check_pattern(e->pd, 224, 0x5d));
  CHECK_STATE(c.a, IB_CM_TIMEWAIT);

  wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  wait_event(c.b, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 0);
  CHECK_EQ(count_events(c.b, IB_CM_DREQ_RECEIVED), 0);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_STATE(c.b, IB_CM_IDLE);

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("simultaneous disconnect: OK");
  return 0;
}
