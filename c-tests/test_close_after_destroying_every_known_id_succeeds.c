/*
 * Create (by the worker) racing close (issue 10): a device whose every id
 * the user knows was destroyed closes, although the worker made one more.
 *
 * ibcm_close_device(3): "Every cm_id of the device must have been destroyed
 * first"; -EBUSY: "cm_ids of the device still exist". A daemon shutting down
 * destroys its listener and every id it knows of, then closes the device.
 * If a REQ for the listener was taken by the worker just before (its new id
 * made, its IB_CM_REQ_RECEIVED still queued), that new id is one the user
 * never saw and cannot destroy: the library refuses it later, when the
 * queued event's turn comes (README: "its new id goes away without an
 * event"). Until then ibcm_close_device fails with -EBUSY although the user
 * destroyed everything; how long depends on the handlers of unrelated ids
 * (here one that blocks). The caller gets no way to wait for it.
 *
 * Setup: a third loop device C with a listener whose handler blocks keeps
 * the worker busy (as in test_req_queued_when_its_listener_is_destroyed); while it blocks, a REQ to C and
 * a REQ to B's listener are queued; released, the worker takes both REQs,
 * then blocks again in C's second handler with B's new id made and its event
 * queued. Then B's listener is destroyed (B has no other id the user knows)
 * and B is closed: expected 0.
 *
 * The fix: close lets the worker finish the work queued before the call
 * (bounded, 2 s) when ids remain. For that the worker must get free during
 * close: a helper thread releases C's handler once close's barrier is queued
 * (ibcm_get_stats().queued rises above what it was before close), which
 * needs no timing. On a close that does not wait, it is released after
 * close returned.
 */
#include "common.h"

#include <pthread.h>

#define SERVICE_BLOCKING (SERVICE_ID + 1)

static atomic_int entered, released;
static struct ib_cm_id *blocked_children[2];

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

static unsigned long long queued_before_close;

static void *release_when_close_waits(void *arg) {
  (void)arg;
  struct ibcm_stats st;
  for (long long t0 = now_ms(); atomic_load(&released) < 2;) {
    CHECK_EQ(ibcm_get_stats(&st), 0);
    if (st.queued > queued_before_close)
      atomic_store(&released, 2);
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(1);
  }
  return NULL;
}

static void wait_entered(int n) {
  for (long long t0 = now_ms(); atomic_load(&entered) < n;) {
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(1);
  }
}

/* A slow REQ from a new id of A to `service_id` on the device of `dgid`. */
static struct ib_cm_id *req_to(const union ib_gid *dgid, uint64_t service_id) {
  struct conn_opts o;
  conn_opts_slow(&o);
  o.service_id = service_id;
  struct sa_path_rec path;
  CHECK_EQ(ibcm_init_path(dev_a, 1, dgid, &path), 0);
  path.packet_life_time = o.packet_life_time;
  struct ib_cm_req_param req;
  req_param_init(&req, &path, &o, next_qpn());
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  return a;
}

int main(void) {
  test_init();
  require_loop();
  atomic_store(&reply_req, 0);
  struct ib_device *dev_c = ibcm_open_device("loop2");
  CHECK(!IS_ERR_OR_NULL(dev_c));
  union ib_gid gid_c;
  CHECK_EQ(ibcm_query_gid(dev_c, 1, 0, &gid_c), 0);
  struct ib_cm_id *blocking = create_id(dev_c, blocking_handler, NULL);
  CHECK_EQ(ib_cm_listen(blocking, htobe64(SERVICE_BLOCKING)), 0);
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);

  struct ib_cm_id *a0 = req_to(&gid_c, SERVICE_BLOCKING);
  wait_entered(1); /* the worker is busy */
  struct ib_cm_id *a1 = req_to(&gid_c, SERVICE_BLOCKING);
  struct ib_cm_id *a2 = req_to(&gid_b, SERVICE_ID);
  atomic_store(&released, 1);
  wait_entered(2); /* busy again; B's new id made, its event queued */

  /* Shutting B down: its listener is the only id of B the user knows. */
  ib_destroy_cm_id(listener);
  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  queued_before_close = st.queued;
  pthread_t releaser;
  CHECK_EQ(pthread_create(&releaser, NULL, release_when_close_waits, NULL), 0);
  int rc = ibcm_close_device(dev_b);
  CHECK_EQ(ibcm_get_stats(&st), 0);
  printf("ibcm_close_device(B) after destroying every id of B the user knows: %d (%s); "
         "cm_ids %llu, queued %llu\n",
         rc, rc ? strerror(-rc) : "ok", (unsigned long long)st.cm_ids,
         (unsigned long long)st.queued);
  atomic_store(&released, 2);
  CHECK_EQ(pthread_join(releaser, NULL), 0);
  if (rc == 0)
    dev_b = NULL;
  else {
    /* Let the worker refuse the orphan before cleaning up. */
    for (long long t0 = now_ms(); ibcm_close_device(dev_b) != 0;) {
      CHECK(now_ms() - t0 < TIMEOUT_MS);
      sleep_ms(1);
    }
    dev_b = NULL;
  }
  CHECK_EQ(rc, 0);

  ib_destroy_cm_id(blocked_children[0]);
  ib_destroy_cm_id(blocked_children[1]);
  ib_destroy_cm_id(blocking);
  ib_destroy_cm_id(a0);
  ib_destroy_cm_id(a1);
  ib_destroy_cm_id(a2);
  CHECK_EQ(ibcm_close_device(dev_c), 0);
  test_finish();
  puts("a device whose every known id was destroyed closes: OK");
  return 0;
}
