/*
 * ib_cm_insert_listen refuses to share a listener that has a context (issue
 * 10, kernel fidelity, lifecycle): ib_cm_insert_listen on a service another
 * user listens on with ib_cm_listen and a context.
 *
 * The kernel's cm_insert_listen shares an existing listener only if it has
 * the same handler AND no context:
 *     if (cur_cm_id_priv->id.cm_handler != shared_handler ||
 *         cur_cm_id_priv->id.context ||
 *         WARN_ON(!cur_cm_id_priv->id.cm_handler))
 *             return NULL;                 -> ERR_PTR(-EINVAL)
 * This library checks the handler only (src/cm/listen.rs insert_listen). So
 * a second module that calls ib_cm_insert_listen with the same handler gets
 * the first module's private listener (with the first module's context) and
 * raises its share count. When the first module then destroys its listener
 * and frees its context, ib_destroy_cm_id only lowers the count: the id keeps
 * listening with the freed context, and the next REQ's handler gets it
 * (use after free under ASan; here: the handler sees the freed pointer).
 */
#include "common.h"

struct module_ctx {
  unsigned magic;
};
#define CTX_MAGIC 0x5eed1e55u

static atomic_int stale_context_seen;
static void *freed_ctx;

static int module_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (freed_ctx && cm_id->context == freed_ctx)
    atomic_fetch_add(&stale_context_seen, 1); /* would dereference freed memory */
  return test_handler(cm_id, event);
}

int main(void) {
  test_init();
  struct module_ctx *ctx = malloc(sizeof(*ctx));
  CHECK(ctx != NULL);
  ctx->magic = CTX_MAGIC;
  struct ib_cm_id *mine = create_id(dev_b, module_handler, ctx);
  CHECK_EQ(ib_cm_listen(mine, htobe64(SERVICE_ID)), 0);

  struct ib_cm_id *shared = ib_cm_insert_listen(dev_b, module_handler, htobe64(SERVICE_ID));
  printf("ib_cm_insert_listen on a listener with a context: %s (%ld)\n",
         IS_ERR(shared) ? "error" : (shared == mine ? "the other user's listener" : "a new id"),
         IS_ERR(shared) ? PTR_ERR(shared) : 0L);
  if (!IS_ERR(shared)) {
    /* The first module goes away: destroys its listener, frees its context. */
    ib_destroy_cm_id(mine);
    freed_ctx = ctx;
    free(ctx);
    /* A REQ for the service now: its handler must never get the freed context. */
    atomic_store(&reply_req, 0);
    struct ib_cm_id *a = send_slow_req(SERVICE_ID);
    unsigned got = 0;
    for (long long t0 = now_ms(); now_ms() - t0 < 2000;) {
      got = count_events(NULL, IB_CM_REQ_RECEIVED);
      if (got)
        break;
      sleep_ms(1);
    }
    printf("after the first module destroyed its listener: mine->state %s, REQs delivered %u, "
           "with the freed context %d\n",
           state_name(mine->state), got, atomic_load(&stale_context_seen));
    CHECK_EQ(atomic_load(&stale_context_seen), 0);
    ib_destroy_cm_id(a);
    ib_destroy_cm_id(shared);
  }
  CHECK(IS_ERR(shared));
  CHECK_EQ(PTR_ERR(shared), -EINVAL);
  ib_destroy_cm_id(mine);
  free(ctx);

  /* The kernel's WARN_ON(!cm_handler): a NULL handler is refused, whether
   * a listener exists or not (and none is made). */
  CHECK_EQ(PTR_ERR(ib_cm_insert_listen(dev_b, NULL, htobe64(SERVICE_ID))), -EINVAL);
  struct ib_cm_id *nobody = ib_cm_insert_listen(dev_b, test_handler, htobe64(SERVICE_ID));
  CHECK(!IS_ERR(nobody));
  CHECK_EQ(PTR_ERR(ib_cm_insert_listen(dev_b, NULL, htobe64(SERVICE_ID))), -EINVAL);
  ib_destroy_cm_id(nobody);
  test_finish();
  puts("ib_cm_insert_listen never shares a listener that has a context, nor takes a NULL "
       "handler: OK");
  return 0;
}
