/*
 * Issue 10, point 1: a REQ whose IB_CM_REQ_RECEIVED is still queued when its
 * listener is destroyed. The kernel's cm_req_handler runs the new id's
 * handler holding a reference on the listener, and cm_destroy_id(listener)
 * waits for it, so once ib_destroy_cm_id(listener) has returned the ULP may
 * free the listener's context (ib_srpt frees its port right after). Here the
 * child id exists and its event is queued behind a busy handler when the
 * listener goes: the event must never run (its context is freed), the child
 * must go away by itself, silently (as the kernel forgets a REQ whose handler
 * returned -ENOMEM: a new listener may have taken the service ID), and the
 * peer's retransmitted REQ, now matching no listener, gets the REJ such a REQ
 * gets (IB_CM_REJ_INVALID_SERVICE_ID). REQ2 has a short response timeout so
 * that its retransmission comes quickly (timers run on the worker: never
 * before the child's event was handled).
 *
 * How the worker is kept busy: REQ0 to a second listener, whose handler
 * blocks; while it blocks, REQ1 (to that listener again) and REQ2 (to the
 * listener under test) are queued. Once released, the worker takes both REQs
 * before any event they produce, so REQ2's child exists and its event waits
 * behind REQ1's, whose handler blocks again.
 */
#include "common.h"

#define SERVICE_BLOCKING (SERVICE_ID + 1)

struct listener_ctx {
  unsigned magic;
};
#define CTX_MAGIC 0x11570e5u

static atomic_int entered, released;
static atomic_int ctx_handler_calls;
static struct ib_cm_id *blocked_children[2];

/* The blocking listener's children: the n-th REQ_RECEIVED waits until the
 * test has released n. */
static int blocking_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if (event->event == IB_CM_REQ_RECEIVED) {
    int n = atomic_fetch_add(&entered, 1) + 1;
    CHECK(n <= 2);
    blocked_children[n - 1] = cm_id;
    for (long long t0 = now_ms(); atomic_load(&released) < n;) {
      CHECK(now_ms() - t0 < TIMEOUT_MS);
      sleep_ms(1);
    }
  }
  return 0;
}

/* The listener under test: its children inherit the malloc'd context. */
static int ctx_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  atomic_fetch_add(&ctx_handler_calls, 1);
  struct listener_ctx *ctx = cm_id->context;
  CHECK(ctx->magic == CTX_MAGIC); /* ASan: heap-use-after-free once freed */
  record_event(cm_id, event);
  return 0;
}

/* A REQ retransmitted after about 17 ms (up to 5 times). */
static struct ib_cm_id *send_quick_req(uint64_t service_id) {
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = service_id;
  return send_req_with(&o);
}

static void wait_entered(int n) {
  for (long long t0 = now_ms(); atomic_load(&entered) < n;) {
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(1);
  }
}

int main(void) {
  test_init();
  atomic_store(&reply_req, 0);
  struct listener_ctx *ctx = malloc(sizeof(*ctx));
  CHECK(ctx != NULL);
  ctx->magic = CTX_MAGIC;
  struct ib_cm_id *blocking = listen_b(SERVICE_BLOCKING, blocking_handler, NULL);
  struct ib_cm_id *listener = listen_b(SERVICE_ID, ctx_handler, ctx);

  struct ib_cm_id *a0 = send_slow_req(SERVICE_BLOCKING);
  wait_entered(1); /* the worker is busy */
  struct ib_cm_id *a1 = send_slow_req(SERVICE_BLOCKING);
  struct ib_cm_id *a2 = send_quick_req(SERVICE_ID);
  atomic_store(&released, 1);
  wait_entered(2); /* busy again; REQ2's child made, its event queued */

  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 2 + 3 + 3); /* listeners, A's ids, three children */
  CHECK(st.queued >= 1);

  ib_destroy_cm_id(listener);
  ctx->magic = 0;
  free(ctx);
  atomic_store(&released, 2);

  const struct cm_ev *rej = wait_event(a2, IB_CM_REJ_RECEIVED);
  CHECK_EQ(rej->param.rej_rcvd.reason, IB_CM_REJ_INVALID_SERVICE_ID);
  CHECK_STATE(a2, IB_CM_IDLE);
  CHECK_EQ(atomic_load(&ctx_handler_calls), 0);
  /* The REJ answers a retransmission: the child itself said nothing. */
  struct ibcm_counters na, nb;
  CHECK_EQ(ibcm_get_counters(dev_a, 1, &na), 0);
  CHECK_EQ(ibcm_get_counters(dev_b, 1, &nb), 0);
  CHECK(na.cm_tx_retries[IBCM_CNT_REQ] >= 1);
  CHECK_EQ(nb.cm_tx_msgs[IBCM_CNT_REJ], 1);

  /* The forgotten child is gone by itself: REQ0's and REQ1's children, the
   * blocking listener and A's three ids are what is left. */
  for (long long t0 = now_ms();;) {
    CHECK_EQ(ibcm_get_stats(&st), 0);
    if (st.cm_ids == 1 + 3 + 2 && st.queued == 0)
      break;
    if (now_ms() - t0 > TIMEOUT_MS)
      test_fail(__FILE__, __LINE__, "cm_ids %llu, queued %llu",
                (unsigned long long)st.cm_ids, (unsigned long long)st.queued);
    sleep_ms(1);
  }

  ib_destroy_cm_id(blocked_children[0]);
  ib_destroy_cm_id(blocked_children[1]);
  ib_destroy_cm_id(blocking);
  ib_destroy_cm_id(a0);
  ib_destroy_cm_id(a1);
  ib_destroy_cm_id(a2);
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 0);
  test_finish();
  puts("a REQ queued for a destroyed listener is forgotten, never delivered; "
       "its retry is rejected: OK");
  return 0;
}
