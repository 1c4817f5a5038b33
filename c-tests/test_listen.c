/*
 * ib_cm_listen and cm_req_handler's listener lookup:
 *  - -EINVAL unless the id is IDLE (LISTEN, ESTABLISHED);
 *  - -EBUSY for a second listener on the same service ID and device (another
 *    device may listen on it);
 *  - IB_CM_ASSIGN_SERVICE_ID picks 0x0200000000000000, then +1, ...
 *    (readable in cm_id->service_id); any other ID in the 0x02 "assigned"
 *    range is -EINVAL;
 *  - a REQ for a service nobody listens on is rejected by the peer CM with
 *    IB_CM_REJ_INVALID_SERVICE_ID (8); A is IDLE again;
 *  - a destroyed listener frees its service ID.
 */
#include "common.h"

/* Sends a REQ from a new id of A to `service_id`; returns the id. */
static struct ib_cm_id *send_req_to(uint64_t service_id, uint32_t *qpn) {
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = service_id;
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  *qpn = next_qpn();
  req_param_init(&req, &path, &o, *qpn);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  return a;
}

/* A's REQ to `service_id` is rejected with INVALID_SERVICE_ID. */
static void expect_no_listener(uint64_t service_id) {
  uint32_t qpn;
  unsigned mark = log_mark();
  struct ib_cm_id *a = send_req_to(service_id, &qpn);
  const struct cm_ev *e = wait_event_from(mark, a, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_INVALID_SERVICE_ID);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_EQ(count_events(a, IB_CM_REQ_ERROR), 0);
  ib_destroy_cm_id(a);
}

int main(void) {
  test_init();
  CHECK_EQ(ib_cm_listen(NULL, htobe64(SERVICE_ID)), -EINVAL);

  /* Not IDLE. */
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(SERVICE_ID)), -EINVAL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(SERVICE_ID + 7)), -EINVAL);
  CHECK_STATE(listener, IB_CM_LISTEN);
  CHECK(listener->service_id == htobe64(SERVICE_ID));

  /* Same service, same device: -EBUSY; the id stays IDLE and usable. */
  struct ib_cm_id *second = create_id(dev_b, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(second, htobe64(SERVICE_ID)), -EBUSY);
  CHECK_STATE(second, IB_CM_IDLE);
  CHECK_EQ(ib_cm_listen(second, htobe64(SERVICE_ID + 1)), 0);
  CHECK_STATE(second, IB_CM_LISTEN);
  /* Same service on the other device: fine (listeners are per device). */
  struct ib_cm_id *on_a = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(on_a, htobe64(SERVICE_ID)), 0);

  /* IB_CM_ASSIGN_SERVICE_ID. */
  struct ib_cm_id *as1 = create_id(dev_b, test_handler, NULL);
  struct ib_cm_id *as2 = create_id(dev_b, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(as1, IB_CM_ASSIGN_SERVICE_ID), 0);
  CHECK(as1->service_id == htobe64(0x0200000000000000ULL));
  CHECK_EQ(ib_cm_listen(as2, IB_CM_ASSIGN_SERVICE_ID), 0);
  CHECK(as2->service_id == htobe64(0x0200000000000001ULL));
  CHECK_STATE(as2, IB_CM_LISTEN);
  /* Other IDs of the assigned range are refused. */
  struct ib_cm_id *bad = create_id(dev_b, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(bad, htobe64(0x0200000000000005ULL)), -EINVAL);
  CHECK_EQ(ib_cm_listen(bad, htobe64(0x02ffffffffffffffULL)), -EINVAL);
  CHECK_STATE(bad, IB_CM_IDLE);
  /* Just outside the range is an ordinary service ID. */
  CHECK_EQ(ib_cm_listen(bad, htobe64(0x0300000000000005ULL)), 0);

  /* A REQ reaches the listener of its service ID, assigned ones included. */
  uint32_t qpn;
  unsigned mark = log_mark();
  struct ib_cm_id *a = send_req_to(be64toh(as2->service_id), &qpn);
  const struct cm_ev *e = wait_req_received(mark, as2, qpn);
  CHECK(e->id->service_id == as2->service_id);
  struct conn c = {.a = a, .b = e->id};
  wait_event_from(mark, c.b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK(a->service_id == as2->service_id);
  CHECK_EQ(count_events(listener, IB_CM_REQ_RECEIVED), 0);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  /* Listening on device A does not make device B accept the service. */
  CHECK_EQ(count_events(on_a, IB_CM_REQ_RECEIVED), 0);

  /* Nobody listens on this one. */
  expect_no_listener(SERVICE_ID + 2);

  /* A destroyed listener's service ID is free again, and unanswered. */
  ib_destroy_cm_id(second);
  expect_no_listener(SERVICE_ID + 1);
  second = create_id(dev_b, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(second, htobe64(SERVICE_ID + 1)), 0);
  CHECK_EQ(count_id_events(listener), 0); /* listeners get no events */

  ib_destroy_cm_id(second);
  ib_destroy_cm_id(bad);
  ib_destroy_cm_id(as1);
  ib_destroy_cm_id(as2);
  ib_destroy_cm_id(on_a);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("listen: OK");
  return 0;
}
