/*
 * Issue 10 point 14: the CM takes the CA ACK delay from the device, as the
 * kernel takes ib_device.attrs.local_ca_ack_delay. On real devices (label
 * softroce: rxe0, rxe1) the test reads each device's local_ca_ack_delay with
 * ibv_query_device itself; the REP that B sends carries B's as its target ACK
 * delay (A's REP_RECEIVED), and the REQ from A carries A's in its local ACK
 * timeout (B's REQ_RECEIVED path: packet lifetime = that timeout - 1, per
 * cm_format_paths_from_req). rxe reports 15, the library's old fixed value,
 * so on rxe this cannot tell the two apart; the engine's test of the
 * device's ACK delay in the REQ, REP, QP and timewait timeouts
 * (src/cm/tests/ack_delay.rs) does, with delays of 18 and 9. Loop devices have no verbs device: skipped.
 */
#include "common.h"

#include <dlfcn.h>

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>

/* local_ca_ack_delay of verbs device `name`, through libibverbs loaded here
 * (the suite does not link it); -1 if it cannot be read. */
static int verbs_ack_delay(const char *name) {
  void *lib = dlopen("libibverbs.so.1", RTLD_NOW);
  if (!lib)
    return -1;
#define VERBS_FN(fn) __typeof__(fn) *fn##_p = (__typeof__(fn) *)dlsym(lib, #fn)
  VERBS_FN(ibv_get_device_list);
  VERBS_FN(ibv_free_device_list);
  VERBS_FN(ibv_get_device_name);
  VERBS_FN(ibv_open_device);
  VERBS_FN(ibv_close_device);
  VERBS_FN(ibv_query_device);
  CHECK(ibv_get_device_list_p && ibv_free_device_list_p && ibv_get_device_name_p &&
        ibv_open_device_p && ibv_close_device_p && ibv_query_device_p);
  int n = 0, delay = -1;
  struct ibv_device **list = ibv_get_device_list_p(&n);
  CHECK(list != NULL);
  for (int i = 0; i < n && delay < 0; i++) {
    if (strcmp(ibv_get_device_name_p(list[i]), name) != 0)
      continue;
    struct ibv_context *ctx = ibv_open_device_p(list[i]);
    CHECK(ctx != NULL);
    struct ibv_device_attr attr;
    CHECK_EQ(ibv_query_device_p(ctx, &attr), 0);
    delay = attr.local_ca_ack_delay;
    CHECK_EQ(ibv_close_device_p(ctx), 0);
  }
  ibv_free_device_list_p(list);
  return delay; /* libibverbs stays loaded, as the library leaves it */
}

/* cm_ack_timeout(): the local ACK timeout from a CA ACK delay and a packet
 * lifetime, capped at 31. */
static unsigned ack_timeout(unsigned ca_ack_delay, unsigned packet_life_time) {
  unsigned t = packet_life_time + 1;
  if (t >= ca_ack_delay)
    t += ca_ack_delay >= t - 1;
  else
    t = ca_ack_delay + (t >= ca_ack_delay - 1);
  return t < 31 ? t : 31;
}

int main(void) {
  test_init();
  if (devices_are_loop()) {
    puts("ack_delay_from_the_device: loop devices have no verbs device (their ACK delay is 15), skipped");
    test_finish();
    return SKIP;
  }
  int delay_a = verbs_ack_delay(dev_a_name()), delay_b = verbs_ack_delay(dev_b_name());
  printf("ibv_query_device: local_ca_ack_delay %s %d, %s %d\n", dev_a_name(), delay_a,
         dev_b_name(), delay_b);
  CHECK(delay_a >= 0 && delay_b >= 0);

  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  const struct cm_ev *req = wait_req_received(0, listener, c.qpn_a);
  const struct cm_ev *rep = wait_event_from(0, c.a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  unsigned req_ack_timeout = ack_timeout((unsigned)delay_a, path_ab.packet_life_time);
  printf("REP target ACK delay %u (B's %d); REQ local ACK timeout %u (expected %u: A's delay %d, "
         "packet lifetime %u)\n",
         rep->param.rep_rcvd.target_ack_delay, delay_b, req->path.packet_life_time + 1u,
         req_ack_timeout, delay_a, path_ab.packet_life_time);
  CHECK_EQ(rep->param.rep_rcvd.target_ack_delay, (unsigned)delay_b);
  CHECK(req->has_path);
  CHECK_EQ(req->path.packet_life_time + 1u, req_ack_timeout);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  return 0;
}

#else
int main(void) {
  puts("ack_delay_from_the_device: <infiniband/verbs.h> not installed (libibverbs-dev), skipped");
  return SKIP;
}
#endif
