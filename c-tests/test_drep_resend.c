/*
 * cm_dreq_handler, TIMEWAIT branch: B's DREP is lost, so A retransmits its
 * DREQ; B, now in TIMEWAIT, does not report it again but re-sends the DREP
 * with the private data it gave ib_send_cm_drep. A gets DREP_RECEIVED with
 * B's data; B gets exactly one DREQ_RECEIVED.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  uint8_t drep_pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  fill_pattern(drep_pd, sizeof(drep_pd), 0x88);
  set_drep_data(drep_pd, sizeof(drep_pd));
  CHECK_EQ(ibcm_loop_drop(dev_b, 0x0016, 1), 0);

  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  const struct cm_ev *e = wait_event(c.b, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);

  /* The resent DREP: B's data, not zeros. */
  e = wait_event(c.a, IB_CM_DREP_RECEIVED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK_EQ(e->pd_len, 224);
  CHECK(check_pattern(e->pd, 224, 0x88));
  CHECK(e->t_ms - t0 >= 15); /* it took A's retransmission */

  wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  wait_event(c.b, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(count_events(c.b, IB_CM_DREQ_RECEIVED), 1);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_STATE(c.b, IB_CM_IDLE);

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("drep resend: OK");
  return 0;
}
