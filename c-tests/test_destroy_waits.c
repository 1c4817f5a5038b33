/*
 * ib_destroy_cm_id waits for the id's running handler (cm_destroy_id drops
 * its reference and waits for the others, including the work item whose
 * callback runs): when it returns, no handler of the id runs or will run, so
 * the ULP may free the id's context. Here B's handler is slow in
 * RTU_RECEIVED while the main thread destroys B.
 */
#include "common.h"

static atomic_int in_handler, handler_done, calls_after_free;
static atomic_int context_freed;

static int slow_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (atomic_load(&context_freed))
    atomic_fetch_add(&calls_after_free, 1);
  struct cm_ev *e = capture_event(cm_id, event);
  if (event->event == IB_CM_RTU_RECEIVED) {
    atomic_store(&in_handler, 1);
    sleep_ms(300);
    atomic_store(&handler_done, 1);
  } else {
    default_reply(cm_id, event);
  }
  publish_event(e);
  return 0;
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, slow_handler, NULL);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  struct ib_cm_id *b = wait_req_received(0, listener, qpn)->id;

  for (long long t0 = now_ms(); !atomic_load(&in_handler);) {
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(1);
  }
  ib_destroy_cm_id(b); /* while its RTU_RECEIVED handler sleeps */
  CHECK_EQ(atomic_load(&handler_done), 1);
  atomic_store(&context_freed, 1);

  /* B's destroy (ESTABLISHED) sent a DREQ: A answers, and nothing more
   * reaches B's handler. */
  const struct cm_ev *e = wait_event(a, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  wait_event(a, IB_CM_TIMEWAIT_EXIT);
  sleep_ms(150);
  CHECK_EQ(atomic_load(&calls_after_free), 0);
  CHECK_EQ(count_id_events(b), 2); /* REQ_RECEIVED, RTU_RECEIVED */

  ib_destroy_cm_id(a);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("destroy waits for the handler: OK");
  return 0;
}
