/*
 * DREQ retransmission (the MAD layer's retry of the tracked DREQ): A's first
 * DREQ is lost on the wire; after timeout_ms (2 * 1 ms + 16 ms on loop
 * devices) A sends it again, B's cm_dreq_handler sees it once, answers with a
 * DREP, and A's cm_drep_handler cancels the retransmission: DREP_RECEIVED,
 * then TIMEWAIT_EXIT on both. No DREQ_ERROR.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  uint8_t drep_pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  fill_pattern(drep_pd, sizeof(drep_pd), 0x66);
  set_drep_data(drep_pd, sizeof(drep_pd));

  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0015, 1), 0);
  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), 0x65);
  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_dreq(c.a, pd, sizeof(pd)), 0);
  CHECK_STATE(c.a, IB_CM_DREQ_SENT); /* the first DREQ went nowhere */

  /* The retransmission carries the same private data. */
  const struct cm_ev *e = wait_event(c.b, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  CHECK(check_pattern(e->pd, 220, 0x65));
  CHECK(e->t_ms - t0 >= 15); /* one retransmit interval */

  e = wait_event(c.a, IB_CM_DREP_RECEIVED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK(check_pattern(e->pd, 224, 0x66));
  wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  wait_event(c.b, IB_CM_TIMEWAIT_EXIT);
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_STATE(c.b, IB_CM_IDLE);
  /* Retransmission stopped with the DREP: nothing more for either side. */
  sleep_ms(100);
  CHECK_EQ(count_events(c.b, IB_CM_DREQ_RECEIVED), 1);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_id_events(c.a), 3); /* REP_RECEIVED, DREP_RECEIVED, TIMEWAIT_EXIT */
  CHECK_EQ(count_id_events(c.b), 4); /* REQ, RTU, DREQ_RECEIVED, TIMEWAIT_EXIT */

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("dreq retransmit: OK");
  return 0;
}
