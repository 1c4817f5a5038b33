/*
 * Alternate paths from C. A REQ carries param->alternate_path (the primary
 * path with SL 1 and its own flow label); B's REQ_RECEIVED hands it over in
 * req_rcvd.alternate_path; ib_cm_init_qp_attr adds IBV_QP_ALT_PATH at RTR
 * and arms IBV_QP_PATH_MIG_STATE = IBV_MIG_REARM at RTS on both sides.
 * ib_cm_notify(IB_EVENT_PATH_MIG) (cm_migrate) is 0 on an ESTABLISHED id:
 * lap_state IDLE, the alternate path is now the primary, RTS is RTS-to-RTS
 * (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE only). It is -EINVAL on IDLE,
 * LISTEN, DREQ_SENT / TIMEWAIT ids. The disconnect runs over the migrated
 * path.
 *
 * On RoCE (SoftRoCE) addresses have no LID, so, as in the kernel, no
 * alternate path reaches the QP (no IBV_QP_ALT_PATH, no PATH_MIG_STATE);
 * PATH_MIG still moves the CM's own MADs to the alternate path.
 *
 * LAP and APR cannot be sent from C (the kernel API has no sender since
 * 2019); their handlers are tested in Rust (src/cm/tests/lap.rs).
 */
#include "common.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>

static int rtr_rts(struct ib_cm_id *id, enum ibv_qp_state s, struct ibv_qp_attr *a) {
  int mask = 0;
  memset(a, 0xa5, sizeof(*a)); /* what the mask does not name stays 0xa5 */
  a->qp_state = s;
  CHECK_EQ(ib_cm_init_qp_attr(id, a, &mask), 0);
  return mask;
}

/* Before migration: the alternate path (SL 1) loaded at RTR, armed at RTS. */
static void check_alternate_loaded(struct ib_cm_id *id, int ib) {
  struct ibv_qp_attr a;
  int mask = rtr_rts(id, IBV_QPS_RTR, &a);
  CHECK_EQ(a.ah_attr.sl, 0);
  if (ib) {
    CHECK(mask & IBV_QP_ALT_PATH);
    CHECK_EQ(a.alt_ah_attr.sl, 1);
    CHECK_EQ(a.alt_ah_attr.port_num, 1);
    CHECK_EQ(a.alt_port_num, 1);
    CHECK_EQ(a.alt_pkey_index, 0);
    CHECK(a.alt_ah_attr.dlid != 0);
  } else {
    CHECK_EQ(mask & IBV_QP_ALT_PATH, 0);
    CHECK_EQ(a.alt_port_num, 0xa5);
  }
  mask = rtr_rts(id, IBV_QPS_RTS, &a);
  CHECK(mask & IBV_QP_SQ_PSN);
  if (ib) {
    CHECK(mask & IBV_QP_PATH_MIG_STATE);
    CHECK_EQ(a.path_mig_state, IBV_MIG_REARM);
  } else {
    CHECK_EQ(mask & IBV_QP_PATH_MIG_STATE, 0);
  }
  CHECK_EQ(mask & IBV_QP_ALT_PATH, 0);
}

/* After migration: the alternate path is the primary, RTS is RTS-to-RTS. */
static void check_migrated(struct ib_cm_id *id, int ib) {
  struct ibv_qp_attr a;
  rtr_rts(id, IBV_QPS_RTR, &a);
  CHECK_EQ(a.ah_attr.sl, 1);
  int mask = rtr_rts(id, IBV_QPS_RTS, &a);
  CHECK_EQ(mask, IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE);
  CHECK_EQ(a.path_mig_state, IBV_MIG_REARM);
  CHECK_EQ(a.alt_ah_attr.sl, 1);
  if (ib)
    CHECK_EQ(a.alt_port_num, 1);
  CHECK_EQ(a.sq_psn, 0xa5a5a5a5u); /* not in the mask: untouched */
}

int main(void) {
  test_init();
  int ib = devices_are_loop(); /* the in-process fabric is InfiniBand */
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_cm_notify(idle, IB_EVENT_PATH_MIG), -EINVAL);
  CHECK_EQ(ib_cm_notify(listener, IB_EVENT_PATH_MIG), -EINVAL);
  CHECK_EQ(ib_cm_notify(NULL, IB_EVENT_PATH_MIG), -EINVAL);
  CHECK_EQ(idle->lap_state, IB_CM_LAP_UNINIT);

  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path, alt;
  conn_path(&path, &o);
  alt = path;
  alt.sl = 1;
  alt.flow_label = htobe32(0x777);
  struct ib_cm_req_param req;
  struct conn c = {.a = create_id(dev_a, test_handler, NULL)};
  c.qpn_a = next_qpn();
  req_param_init(&req, &path, &o, c.qpn_a);
  req.alternate_path = &alt;
  CHECK_EQ(ib_send_cm_req(c.a, &req), 0);
  const struct cm_ev *e = wait_req_received(0, listener, c.qpn_a);
  c.b = e->id;
  CHECK(e->has_alt_path);
  CHECK_EQ(e->alt_path.sl, 1);
  CHECK_EQ(be32toh(e->alt_path.flow_label), 0x777);
  CHECK(memcmp(e->alt_path.dgid.raw, gid_a.raw, 16) == 0);
  CHECK(memcmp(e->alt_path.sgid.raw, gid_b.raw, 16) == 0);
  CHECK(e->alt_path.pkey == path.pkey);
  wait_event(c.b, IB_CM_RTU_RECEIVED);
  CHECK_STATE(c.a, IB_CM_ESTABLISHED);
  CHECK_EQ(c.a->lap_state, IB_CM_LAP_UNINIT);

  check_alternate_loaded(c.a, ib);
  check_alternate_loaded(c.b, ib);

  CHECK_EQ(ib_cm_notify(c.a, IB_EVENT_PATH_MIG), 0);
  CHECK_STATE(c.a, IB_CM_ESTABLISHED);
  CHECK_EQ(c.a->lap_state, IB_CM_LAP_IDLE);
  check_migrated(c.a, ib);
  CHECK_EQ(ib_cm_notify(c.a, IB_EVENT_PATH_MIG), 0); /* IDLE may migrate again */
  CHECK_EQ(ib_cm_notify(c.b, IB_EVENT_PATH_MIG), 0);
  check_migrated(c.b, ib);

  /* The disconnect takes the migrated path; no migration while it runs. */
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  CHECK_EQ(ib_cm_notify(c.a, IB_EVENT_PATH_MIG), -EINVAL); /* DREQ_SENT or TIMEWAIT */
  wait_event_from(mark, c.a, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  wait_event_from(mark, c.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_event_from(mark, c.b, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  CHECK_STATE(c.a, IB_CM_IDLE);
  CHECK_EQ(ib_cm_notify(c.a, IB_EVENT_PATH_MIG), -EINVAL);
  CHECK_EQ(ib_cm_notify(c.b, IB_EVENT_PATH_MIG), -EINVAL);
  CHECK_EQ(c.a->lap_state, IB_CM_LAP_IDLE); /* as in the kernel: never reset */

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(idle);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("alternate path, ib_cm_notify(IB_EVENT_PATH_MIG): OK");
  return 0;
}
#else
int main(void) {
  puts("lap_path_mig: <infiniband/verbs.h> not installed (libibverbs-dev), skipped");
  return SKIP;
}
#endif
