/*
 * Passive-side disconnect with private data: B (the side that accepted the
 * REQ) calls ib_send_cm_dreq (220 bytes) -> A's cm_dreq_handler
 * (ESTABLISHED -> DREQ_RCVD, DREQ_RECEIVED with the 220 bytes) ->
 * ib_send_cm_drep from inside A's handler (224 bytes, A enters TIMEWAIT
 * before sending) -> B's cm_drep_handler (DREQ_SENT -> TIMEWAIT,
 * DREP_RECEIVED with the 224 bytes) -> cm_timewait_handler on both sides.
 * The passive side retransmits with its own timeout (the REQ's
 * local_cm_response_timeout), which plays no part when nothing is lost.
 */
#include "common.h"

static atomic_int drep_ret = 1;
static atomic_int state_after_drep = -1;

/* A's handler: answers the DREQ itself, from inside the callback. */
static int a_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  if (event->event == IB_CM_DREQ_RECEIVED) {
    uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
    fill_pattern(pd, sizeof(pd), 0xe2);
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
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, create_id(dev_a, a_handler, NULL), NULL, &c);
  struct ib_cm_id *a = c.a, *b = c.b;

  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), 0xe1);
  CHECK_EQ(ib_send_cm_dreq(b, pd, sizeof(pd)), 0);
  enum ib_cm_state s = b->state; /* the DREP may already be back */
  CHECK(s == IB_CM_DREQ_SENT || s == IB_CM_TIMEWAIT);
  memset(pd, 0, sizeof(pd));

  const struct cm_ev *e = wait_event(a, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  CHECK_EQ(e->pd_len, 220);
  CHECK(check_pattern(e->pd, 220, 0xe1));

  e = wait_event(b, IB_CM_DREP_RECEIVED);
  CHECK_EQ(atomic_load(&drep_ret), 0);
  CHECK_EQ(atomic_load(&state_after_drep), IB_CM_TIMEWAIT);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  CHECK_EQ(e->pd_len, 224);
  CHECK(check_pattern(e->pd, 224, 0xe2));
  long long t_drep = e->t_ms;

  e = wait_event(b, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK(e->pd_null);
  if (devices_are_loop()) /* timewait is 128 ms on loop devices */
    CHECK(e->t_ms - t_drep >= 100);
  e = wait_event(a, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_STATE(b, IB_CM_IDLE);

  CHECK_EQ(count_events(a, IB_CM_DREQ_RECEIVED), 1);
  CHECK_EQ(count_events(b, IB_CM_DREP_RECEIVED), 1);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  CHECK_EQ(count_events(b, IB_CM_DREQ_RECEIVED), 0);
  CHECK_EQ(count_events(a, IB_CM_DREP_RECEIVED), 0);
  CHECK_EQ(count_events(NULL, IB_CM_TIMEWAIT_EXIT), 2);

  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("disconnect (passive side): OK");
  return 0;
}
