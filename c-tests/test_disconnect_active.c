/*
 * Active-side disconnect with private data: ib_send_cm_dreq (220 bytes) ->
 * cm_dreq_handler (ESTABLISHED -> DREQ_RCVD, DREQ_RECEIVED with the 220
 * bytes) -> ib_send_cm_drep from inside that handler (224 bytes, enters
 * TIMEWAIT before sending) -> cm_drep_handler (DREQ_SENT -> TIMEWAIT,
 * DREP_RECEIVED with the 224 bytes) -> cm_timewait_handler on both sides
 * (TIMEWAIT -> IDLE, TIMEWAIT_EXIT).
 */
#include "common.h"

static atomic_int drep_ret = 1;
static atomic_int state_after_drep = -1;

/* B's handler: answers the DREQ itself, from inside the callback. */
static int b_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  if (event->event == IB_CM_DREQ_RECEIVED) {
    uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
    fill_pattern(pd, sizeof(pd), 0xd2);
    atomic_store(&drep_ret, ib_send_cm_drep(cm_id, pd, sizeof(pd)));
    atomic_store(&state_after_drep, cm_id->state);
  } else {
    default_reply(cm_id, event);
  }
  publish_event(e);
  return 0;
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, b_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), 0xd1);
  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_dreq(c.a, pd, sizeof(pd)), 0);
  enum ib_cm_state s = c.a->state; /* the DREP may already be back */
  CHECK(s == IB_CM_DREQ_SENT || s == IB_CM_TIMEWAIT);
  memset(pd, 0, sizeof(pd)); /* the library must not keep the caller's buffer */

  const struct cm_ev *e = wait_event(c.b, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  CHECK_EQ(e->pd_len, 220);
  CHECK(check_pattern(e->pd, 220, 0xd1));

  e = wait_event(c.a, IB_CM_DREP_RECEIVED);
  CHECK_EQ(atomic_load(&drep_ret), 0);
  CHECK_EQ(atomic_load(&state_after_drep), IB_CM_TIMEWAIT);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK_EQ(e->pd_len, 224);
  CHECK(check_pattern(e->pd, 224, 0xd2));
  long long t_drep = e->t_ms;

  e = wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK(e->pd_null);
  if (devices_are_loop()) /* timewait is 128 ms on loop devices */
    CHECK(e->t_ms - t_drep >= 100);
  e = wait_event(c.b, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_STATE(c.b, IB_CM_IDLE);
  CHECK(now_ms() - t0 < TIMEOUT_MS);

  /* Exactly one of each: no DREQ retransmission reached B, no errors. */
  CHECK_EQ(count_events(c.b, IB_CM_DREQ_RECEIVED), 1);
  CHECK_EQ(count_events(c.a, IB_CM_DREP_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_events(c.a, IB_CM_DREQ_RECEIVED), 0);
  CHECK_EQ(count_events(c.b, IB_CM_DREP_RECEIVED), 0);
  CHECK_EQ(count_events(NULL, IB_CM_TIMEWAIT_EXIT), 2);

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("disconnect (active side): OK");
  return 0;
}
