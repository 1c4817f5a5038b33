/*
 * cm_dreq_handler, no matching id -> cm_issue_drep: a DREQ for a connection
 * the peer has destroyed is answered by the peer's CM with a DREP (comm IDs
 * swapped, no private data). Destroying B's ESTABLISHED id sends one DREQ,
 * which is lost here, so A is still ESTABLISHED when it disconnects.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  CHECK_EQ(ibcm_loop_drop(dev_b, 0x0015, 1), 0);
  ib_destroy_cm_id(c.b);
  sleep_ms(50);
  CHECK_EQ(count_events(c.a, IB_CM_DREQ_RECEIVED), 0);
  CHECK_STATE(c.a, IB_CM_ESTABLISHED);

  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), 0x99);
  CHECK_EQ(ib_send_cm_dreq(c.a, pd, sizeof(pd)), 0);
  const struct cm_ev *e = wait_event(c.a, IB_CM_DREP_RECEIVED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK_EQ(e->pd_len, 224);
  CHECK(all_zero(e->pd, 224));
  e = wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_EQ(count_events(c.a, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 1);
  /* The destroyed id got nothing after its destruction. */
  CHECK_EQ(count_id_events(c.b), 2); /* REQ_RECEIVED, RTU_RECEIVED */

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("stateless drep: OK");
  return 0;
}
