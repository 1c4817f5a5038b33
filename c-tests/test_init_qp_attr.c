/*
 * ib_cm_init_qp_attr on both sides of a connection, into libibverbs' own
 * struct ibv_qp_attr: INIT (cm_init_qp_init_attr), RTR (cm_init_qp_rtr_attr),
 * RTS (cm_init_qp_rts_attr) with the kernel's masks and values, fields
 * outside the mask left alone, and -EINVAL where the kernel refuses.
 */
#include "common.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>

static void fill(struct ibv_qp_attr *a, enum ibv_qp_state s) {
  memset(a, 0xa5, sizeof(*a)); /* what the mask does not name stays 0xa5 */
  a->qp_state = s;
}

int main(void) {
  test_init();
  struct ibv_qp_attr a;
  int mask = 0;
  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  fill(&a, IBV_QPS_INIT);
  CHECK_EQ(ib_cm_init_qp_attr(idle, &a, &mask), -EINVAL);
  CHECK_EQ(ib_cm_init_qp_attr(idle, NULL, &mask), -EINVAL);
  CHECK_EQ(ib_cm_init_qp_attr(idle, &a, NULL), -EINVAL);
  ib_destroy_cm_id(idle);

  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  fill(&a, IBV_QPS_INIT);
  CHECK_EQ(ib_cm_init_qp_attr(c.a, &a, &mask), 0);
  CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
  CHECK_EQ(a.qp_state, IBV_QPS_INIT);
  CHECK_EQ(a.qp_access_flags,
           IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  CHECK_EQ(a.port_num, 1);
  CHECK_EQ(a.pkey_index, 0);
  CHECK_EQ(a.dest_qp_num, 0xa5a5a5a5u); /* not in the mask: untouched */

  fill(&a, IBV_QPS_RTR);
  CHECK_EQ(ib_cm_init_qp_attr(c.a, &a, &mask), 0);
  CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  CHECK_EQ(a.dest_qp_num, c.qpn_b);
  CHECK_EQ(a.rq_psn, 0x00a1a1a1); /* the REQ's starting PSN, as the kernel */
  CHECK_EQ(a.path_mtu, path_ab.mtu);
  CHECK_EQ(a.max_dest_rd_atomic, REP_INITIATOR_DEPTH);
  CHECK_EQ(a.min_rnr_timer, 0);
  CHECK_EQ(a.ah_attr.port_num, 1);
  CHECK(memcmp(a.ah_attr.grh.dgid.raw, gid_b.raw, 16) == 0);
  CHECK_EQ(a.ah_attr.is_global, devices_are_loop() ? 0 : 1);
  CHECK_EQ(a.sq_psn, 0xa5a5a5a5u);

  fill(&a, IBV_QPS_RTS);
  CHECK_EQ(ib_cm_init_qp_attr(c.a, &a, &mask), 0);
  CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                     IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_TIMEOUT);
  CHECK_EQ(a.sq_psn, REP_PSN);
  CHECK_EQ(a.retry_cnt, 7);
  CHECK_EQ(a.rnr_retry, REP_RNR_RETRY_COUNT);
  CHECK_EQ(a.max_rd_atomic, REP_RESPONDER_RESOURCES);

  fill(&a, IBV_QPS_RTR);
  CHECK_EQ(ib_cm_init_qp_attr(c.b, &a, &mask), 0);
  CHECK_EQ(a.dest_qp_num, c.qpn_a);
  CHECK_EQ(a.rq_psn, REP_PSN);
  CHECK_EQ(a.max_dest_rd_atomic, REP_RESPONDER_RESOURCES);
  CHECK(memcmp(a.ah_attr.grh.dgid.raw, gid_a.raw, 16) == 0);
  fill(&a, IBV_QPS_RTS);
  CHECK_EQ(ib_cm_init_qp_attr(c.b, &a, &mask), 0);
  CHECK_EQ(a.sq_psn, 0x00a1a1a1);
  CHECK_EQ(a.max_rd_atomic, REP_INITIATOR_DEPTH);
  fill(&a, IBV_QPS_SQD);
  CHECK_EQ(ib_cm_init_qp_attr(c.b, &a, &mask), -EINVAL);

  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("init_qp_attr: INIT, RTR, RTS as the kernel: OK");
  return 0;
}
#else
int main(void) {
  puts("init_qp_attr: <infiniband/verbs.h> not installed (libibverbs-dev), skipped");
  return SKIP;
}
#endif
