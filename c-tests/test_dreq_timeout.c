/*
 * cm_process_send_error for a DREQ: every DREQ of A is lost, so after
 * 1 + max_cm_retries (5) transmissions, timeout_ms apart (18 ms on loop
 * devices), A enters TIMEWAIT and gets IB_CM_DREQ_ERROR with
 * send_status = IB_WC_RESP_TIMEOUT_ERR (private_data NULL), then
 * IB_CM_TIMEWAIT_EXIT. B never hears of it and stays ESTABLISHED.
 */
#include "common.h"

int main(void) {
  require_loop();
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0015, 100), 0);
  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), 0x77);
  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_dreq(c.a, pd, sizeof(pd)), 0);
  CHECK_STATE(c.a, IB_CM_DREQ_SENT);

  const struct cm_ev *e = wait_event(c.a, IB_CM_DREQ_ERROR);
  CHECK_EQ(e->param.send_status, IB_WC_RESP_TIMEOUT_ERR);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK(e->pd_null);
  /* Six transmissions 18 ms apart: not before ~108 ms. */
  CHECK(e->t_ms - t0 >= 100);
  long long t_err = e->t_ms;

  e = wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK(e->t_ms - t_err >= 100); /* timewait: 128 ms */
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_EQ(count_events(c.a, IB_CM_DREQ_ERROR), 1);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 0);

  /* B saw nothing. */
  CHECK_EQ(count_events(c.b, IB_CM_DREQ_RECEIVED), 0);
  CHECK_STATE(c.b, IB_CM_ESTABLISHED);

  CHECK_EQ(ibcm_loop_drop(dev_a, 0x0015, 0), 0);
  ib_destroy_cm_id(c.b); /* ESTABLISHED: one DREQ to A, whose id is IDLE */
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("dreq timeout: OK");
  return 0;
}
