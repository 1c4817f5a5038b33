/*
 * cm_id->cm_handler and cm_id->context belong to the ULP: the CM reads them
 * at each delivery. rdma_cm's pattern: the new id of a REQ starts with the
 * listener's handler and context (copied by cm_req_handler), and its
 * REQ_RECEIVED handler installs a per-connection context and handler; every
 * later event of that id goes to the new handler with the new context, the
 * listener keeps its own.
 */
#include "common.h"

struct connection {
  int magic;
  atomic_int events;
};

static int listener_ctx;

static int conn_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  struct connection *conn = cm_id->context;
  CHECK(conn != NULL && conn->magic == 0x5eed);
  atomic_fetch_add(&conn->events, 1);
  default_reply(cm_id, event);
  publish_event(e);
  return 0;
}

static struct connection *conns[4];
static atomic_int nconns;

static int listen_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  CHECK_EQ(event->event, IB_CM_REQ_RECEIVED);
  CHECK(cm_id->context == &listener_ctx);
  CHECK(cm_id->cm_handler == listen_handler);
  struct connection *conn = calloc(1, sizeof(*conn));
  CHECK(conn != NULL);
  conn->magic = 0x5eed;
  int i = atomic_fetch_add(&nconns, 1);
  CHECK(i < 4);
  conns[i] = conn;
  cm_id->context = conn;
  cm_id->cm_handler = conn_handler;
  default_reply(cm_id, event); /* REP */
  publish_event(e);
  return 0;
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, listen_handler, &listener_ctx);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  CHECK_EQ(atomic_load(&nconns), 1);
  CHECK(c.b->context == conns[0]);
  CHECK(c.b->cm_handler == conn_handler);
  CHECK(listener->context == &listener_ctx);
  CHECK(listener->cm_handler == listen_handler);
  const struct cm_ev *e = wait_event(c.b, IB_CM_RTU_RECEIVED);
  CHECK(e->context == conns[0]);
  CHECK_EQ(atomic_load(&conns[0]->events), 1); /* RTU_RECEIVED */

  /* The active side switches its handler from the main thread. */
  static struct connection a_conn = {.magic = 0x5eed};
  c.a->context = &a_conn;
  c.a->cm_handler = conn_handler;
  disconnect_pair(&c);
  CHECK_EQ(atomic_load(&conns[0]->events), 3); /* + DREQ_RECEIVED, TIMEWAIT_EXIT */
  CHECK_EQ(atomic_load(&a_conn.events), 2);    /* DREP_RECEIVED, TIMEWAIT_EXIT */

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  free(conns[0]);
  puts("handler switch: OK");
  return 0;
}
