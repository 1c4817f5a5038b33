/*
 * Issue 10, point 1 (second half): ib_destroy_cm_id(listener) while the new
 * id's IB_CM_REQ_RECEIVED handler runs waits for that handler, as the
 * kernel's cm_destroy_id waits for the reference cm_req_handler holds on the
 * listener: once destroy returns, no handler using the listener's context
 * runs, and the ULP may free it. Also: a REQ handler may destroy its own
 * listener (it must not wait for itself).
 */
#include "common.h"

#include <pthread.h>

#define SERVICE_SELF (SERVICE_ID + 1)

struct listener_ctx {
  unsigned magic;
};
#define CTX_MAGIC 0x11570e5u

static atomic_int in_handler, release_handler, handler_done;
static atomic_int destroy_returned, done_when_destroy_returned;
static struct ib_cm_id *child;

static int slow_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct listener_ctx *ctx = cm_id->context;
  CHECK(ctx->magic == CTX_MAGIC);
  record_event(cm_id, event);
  if (event->event == IB_CM_REQ_RECEIVED) {
    child = cm_id;
    atomic_store(&in_handler, 1);
    for (long long t0 = now_ms(); !atomic_load(&release_handler);) {
      CHECK(now_ms() - t0 < TIMEOUT_MS);
      sleep_ms(1);
    }
    CHECK(ctx->magic == CTX_MAGIC); /* still ours: destroy has not returned */
    atomic_store(&handler_done, 1);
  }
  return 0;
}

/* A handler that destroys its own listener from inside the child's REQ
 * handler, then answers the REQ. */
static int self_destroying_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if (event->event == IB_CM_REQ_RECEIVED) {
    ib_destroy_cm_id(event->param.req_rcvd.listen_id);
    CHECK_EQ(ib_send_cm_rej(cm_id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
  }
  return 0;
}

static void *destroy_thread(void *listener) {
  ib_destroy_cm_id(listener);
  atomic_store(&done_when_destroy_returned, atomic_load(&handler_done));
  atomic_store(&destroy_returned, 1);
  return NULL;
}

int main(void) {
  test_init();
  struct listener_ctx *ctx = malloc(sizeof(*ctx));
  CHECK(ctx != NULL);
  ctx->magic = CTX_MAGIC;
  struct ib_cm_id *listener = listen_b(SERVICE_ID, slow_handler, ctx);
  struct ib_cm_id *a = send_slow_req(SERVICE_ID);
  for (long long t0 = now_ms(); !atomic_load(&in_handler);) {
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(1);
  }

  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, destroy_thread, listener), 0);
  /* Give a destroy that does not wait the time to return wrongly. */
  sleep_ms(200);
  CHECK_EQ(atomic_load(&destroy_returned), 0);
  atomic_store(&release_handler, 1);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_EQ(atomic_load(&done_when_destroy_returned), 1);
  ctx->magic = 0;
  free(ctx);

  /* The child lives on as the ULP's own id. */
  CHECK_STATE(child, IB_CM_REQ_RCVD);
  ib_destroy_cm_id(child);
  const struct cm_ev *rej = wait_event(a, IB_CM_REJ_RECEIVED);
  CHECK_EQ(rej->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  ib_destroy_cm_id(a);

  /* A REQ handler destroying its own listener does not deadlock. */
  struct ib_cm_id *self = listen_b(SERVICE_SELF, self_destroying_handler, NULL);
  unsigned mark = log_mark();
  a = send_slow_req(SERVICE_SELF);
  rej = wait_event_from(mark, a, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(rej->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  CHECK_EQ(ib_cm_listen(self, htobe64(SERVICE_SELF)), -EINVAL); /* destroyed */
  struct ib_cm_id *again = listen_b(SERVICE_SELF, test_handler, NULL);
  ib_destroy_cm_id(wait_event_from(mark, NULL, IB_CM_REQ_RECEIVED, TIMEOUT_MS)->id);
  ib_destroy_cm_id(again);
  ib_destroy_cm_id(a);

  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 0);
  test_finish();
  puts("destroying a listener waits for its new id's REQ handler: OK");
  return 0;
}
