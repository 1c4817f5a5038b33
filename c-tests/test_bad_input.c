/*
 * Every exported function against bad input: NULL pointers, a destroyed
 * cm_id, a closed device, a pointer that was never a cm_id, oversize lengths,
 * wrong states, out-of-range enums. Each call must give the errno that
 * docs/bad-input.md documents and change nothing (states and counters are
 * checked after each group). docs/bad-input.md is this test in prose.
 */
#include "common.h"

#define EXPECT(call, want)                                                     \
  do {                                                                         \
    long got_ = (long)(call);                                                  \
    if (got_ != (long)(want))                                                  \
      test_fail(__FILE__, __LINE__, "%s: %ld, expected %s (%ld)", #call, got_, \
                #want, (long)(want));                                          \
  } while (0)
#define EXPECT_ERR_PTR(call, want) EXPECT(PTR_ERR(call), (want))

static unsigned long tx_total(struct ib_device *dev) {
  struct ibcm_counters n;
  CHECK_EQ(ibcm_get_counters(dev, 1, &n), 0);
  unsigned long sum = 0;
  for (int i = 0; i < IBCM_CNT_ATTRS; i++)
    sum += n.cm_tx_msgs[i];
  return sum;
}

static int null_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  (void)cm_id;
  (void)event;
  return 0;
}

int main(void) {
  test_init();
  uint8_t big[255];
  fill_pattern(big, sizeof(big), 9);
  union ib_gid gid;
  struct sa_path_rec path;
  struct ibcm_counters counters;
  struct ibcm_stats stats;
  struct ib_cm_req_param req;
  struct ib_cm_rep_param rep;
  memset(&rep, 0, sizeof(rep));

  /* A destroyed id and something that was never an id. */
  struct ib_cm_id *gone = create_id(dev_a, test_handler, NULL);
  ib_destroy_cm_id(gone);
  struct ib_cm_id fake;
  memset(&fake, 0, sizeof(fake));
  struct ib_cm_id *bad_ids[] = {NULL, gone, &fake};

  for (size_t k = 0; k < sizeof(bad_ids) / sizeof(bad_ids[0]); k++) {
    struct ib_cm_id *id = bad_ids[k];
    req_param_init(&req, &path_ab, &(struct conn_opts){.service_id = 1}, 1);
    EXPECT(ib_cm_listen(id, htobe64(1)), -EINVAL);
    EXPECT(ib_send_cm_req(id, &req), -EINVAL);
    EXPECT(ib_send_cm_rep(id, &rep), -EINVAL);
    EXPECT(ib_send_cm_rtu(id, NULL, 0), -EINVAL);
    EXPECT(ib_send_cm_dreq(id, NULL, 0), -EINVAL);
    EXPECT(ib_send_cm_drep(id, NULL, 0), -EINVAL);
    EXPECT(ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
    EXPECT(ib_cm_notify(id, IB_EVENT_COMM_EST), -EINVAL);
    EXPECT(ibcm_set_disconnect_timeout(id, 100, 3), -EINVAL);
    ib_destroy_cm_id(id); /* ignored */
  }

  /* Devices: NULL, never opened, unknown names. */
  struct ib_device *no_dev = (struct ib_device *)big;
  EXPECT_ERR_PTR(ibcm_open_device(NULL), -EINVAL);
  EXPECT_ERR_PTR(ibcm_open_device(""), -ENODEV);
  EXPECT_ERR_PTR(ibcm_open_device("no_such_device"), -ENODEV);
  EXPECT_ERR_PTR(ibcm_open_device("../../etc"), -ENODEV);
  EXPECT_ERR_PTR(ibcm_open_device("\xff\xfe"), -EINVAL);
  EXPECT_ERR_PTR(ibcm_open_device(dev_a_name()), -EBUSY);
  for (int k = 0; k < 2; k++) {
    struct ib_device *dev = k ? no_dev : NULL;
    EXPECT_ERR_PTR(ib_create_cm_id(dev, test_handler, NULL), -EINVAL);
    EXPECT(ibcm_close_device(dev), -EINVAL);
    EXPECT(ibcm_query_gid(dev, 1, 0, &gid), -EINVAL);
    EXPECT(ibcm_init_path(dev, 1, &gid_b, &path), -EINVAL);
    EXPECT(ibcm_loop_drop(dev, 0x15, 1), -EINVAL);
    EXPECT(ibcm_loop_set_loss(dev, 1, 1), -EINVAL);
    EXPECT(ibcm_get_counters(dev, 1, &counters), -EINVAL);
  }
  EXPECT(ibcm_query_gid(dev_a, 0, 0, &gid), -EINVAL);   /* no port 0 */
  EXPECT(ibcm_query_gid(dev_a, 2, 0, &gid), -EINVAL);   /* no port 2 */
  EXPECT(ibcm_query_gid(dev_a, 1, -1, &gid), -EINVAL);
  EXPECT(ibcm_query_gid(dev_a, 1, 4096, &gid), -EINVAL);
  EXPECT(ibcm_query_gid(dev_a, 1, 0, NULL), -EINVAL);
  EXPECT(ibcm_init_path(dev_a, 1, NULL, &path), -EINVAL);
  EXPECT(ibcm_init_path(dev_a, 1, &gid_b, NULL), -EINVAL);
  EXPECT(ibcm_init_path(dev_a, 9, &gid_b, &path), -EINVAL);
  union ib_gid nowhere;
  memset(&nowhere, 0x42, sizeof(nowhere));
  if (devices_are_loop()) {
    EXPECT(ibcm_init_path(dev_a, 1, &nowhere, &path), -EHOSTUNREACH);
    EXPECT(ibcm_loop_set_loss(dev_a, 101, 0), -EINVAL);
    EXPECT(ibcm_loop_set_loss(dev_a, 0, 101), -EINVAL);
  } else {
    EXPECT(ibcm_loop_drop(dev_a, 0x15, 1), -EOPNOTSUPP);
    EXPECT(ibcm_loop_set_loss(dev_a, 1, 1), -EOPNOTSUPP);
  }
  EXPECT(ibcm_get_counters(dev_a, 1, NULL), -EINVAL);
  EXPECT(ibcm_get_counters(dev_a, 7, &counters), -EINVAL);
  EXPECT(ibcm_get_stats(NULL), -EINVAL);
  CHECK_EQ(ibcm_get_stats(&stats), 0);

  /* An IDLE id: every call that needs another state, and bad arguments. */
  unsigned long tx_before = tx_total(dev_a);
  struct ib_cm_id *idle = create_id(dev_a, null_handler, NULL);
  EXPECT(ib_cm_listen(idle, htobe64(0x0200000000000001ULL)), -EINVAL); /* assigned range */
  EXPECT(ib_send_cm_req(idle, NULL), -EINVAL);
  req_param_init(&req, &path_ab, &(struct conn_opts){.service_id = 1}, 1);
  req.primary_path = NULL;
  EXPECT(ib_send_cm_req(idle, &req), -EINVAL);
  req_param_init(&req, &path_ab, &(struct conn_opts){.service_id = 1}, 1);
  req.private_data_len = 93;
  req.private_data = big;
  EXPECT(ib_send_cm_req(idle, &req), -EINVAL);
  req_param_init(&req, &path_ab, &(struct conn_opts){.service_id = 1}, 1);
  int bad_qp_types[] = {IB_QPT_UD, IB_QPT_SMI, IB_QPT_GSI, 99, -1};
  for (size_t k = 0; k < sizeof(bad_qp_types) / sizeof(bad_qp_types[0]); k++) {
    memcpy(&req.qp_type, &bad_qp_types[k], sizeof(int)); /* any int, as C allows */
    EXPECT(ib_send_cm_req(idle, &req), -EINVAL);
  }
  req_param_init(&req, &path_ab, &(struct conn_opts){.service_id = 1}, 1);
  struct sa_path_rec foreign = path_ab;
  memset(&foreign.sgid, 0x42, sizeof(foreign.sgid)); /* not a GID of device A */
  req.primary_path = &foreign;
  EXPECT(ib_send_cm_req(idle, &req), -EINVAL);
  struct sa_path_rec alt = path_ab;
  alt.pkey ^= 0x0100; /* an alternate path must share the primary's P_Key */
  req_param_init(&req, &path_ab, &(struct conn_opts){.service_id = 1}, 1);
  req.alternate_path = &alt;
  EXPECT(ib_send_cm_req(idle, &req), -EINVAL);
  struct sa_path_rec other_partition = path_ab;
  other_partition.pkey = htobe16(0x1234); /* not the port's P_Key */
  req_param_init(&req, &other_partition, &(struct conn_opts){.service_id = 1}, 1);
  EXPECT(ib_send_cm_req(idle, &req), -ENOENT);
  struct ib_cm_sidr_req_param sidr = {.path = &other_partition, .service_id = 1, .timeout_ms = 100};
  EXPECT(ib_send_cm_sidr_req(idle, &sidr), -ENOENT);
  EXPECT(ib_send_cm_rep(idle, NULL), -EINVAL);
  EXPECT(ib_send_cm_rep(idle, &rep), -EINVAL);
  rep.private_data = big;
  rep.private_data_len = 197;
  EXPECT(ib_send_cm_rep(idle, &rep), -EINVAL);
  EXPECT(ib_send_cm_rtu(idle, big, 225), -EINVAL);
  EXPECT(ib_send_cm_rtu(idle, NULL, 0), -EINVAL);
  EXPECT(ib_send_cm_dreq(idle, big, 221), -EINVAL);
  EXPECT(ib_send_cm_drep(idle, big, 225), -EINVAL);
  EXPECT(ib_send_cm_rej(idle, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  EXPECT(ib_send_cm_rej(idle, IB_CM_REJ_CONSUMER_DEFINED, big, 73, NULL, 0), -EINVAL);
  EXPECT(ib_send_cm_rej(idle, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, big, 149), -EINVAL);
  int bad_reason = 70000;
  enum ib_cm_rej_reason reason;
  memcpy(&reason, &bad_reason, sizeof(int));
  EXPECT(ib_send_cm_rej(idle, reason, NULL, 0, NULL, 0), -EINVAL);
  int bad_events[] = {IB_EVENT_CQ_ERR, IB_EVENT_PATH_MIG, 77, -3};
  for (size_t k = 0; k < sizeof(bad_events) / sizeof(bad_events[0]); k++) {
    enum ib_event_type ev;
    memcpy(&ev, &bad_events[k], sizeof(int));
    EXPECT(ib_cm_notify(idle, ev), -EINVAL);
  }
  EXPECT(ib_cm_notify(idle, IB_EVENT_COMM_EST), -EINVAL);
  EXPECT(ibcm_set_disconnect_timeout(idle, 0, 1), -EINVAL);
  EXPECT(ibcm_set_disconnect_timeout(idle, 600001, 1), -EINVAL);
  EXPECT(ibcm_set_disconnect_timeout(idle, 600000, 255), 0);
  CHECK_STATE(idle, IB_CM_IDLE);
  CHECK_EQ(tx_total(dev_a), tx_before); /* nothing refused went out */

  /* Rejected strings and a busy device. */
  CHECK(strcmp(ibcm_reject_msg(-1), "unrecognized reason") == 0);
  CHECK(strcmp(ibcm_reject_msg(1 << 30), "unrecognized reason") == 0);
  EXPECT(ibcm_close_device(dev_a), -EBUSY);
  ib_destroy_cm_id(idle);

  /* A closed device: its handle is dead for every call. */
  struct ib_device *closed = dev_a;
  CHECK_EQ(ibcm_close_device(closed), 0);
  EXPECT_ERR_PTR(ib_create_cm_id(closed, test_handler, NULL), -EINVAL);
  EXPECT(ibcm_close_device(closed), -EINVAL);
  EXPECT(ibcm_query_gid(closed, 1, 0, &gid), -EINVAL);
  EXPECT(ibcm_get_counters(closed, 1, &counters), -EINVAL);
  dev_a = ibcm_open_device(dev_a_name()); /* test_finish closes it again */
  CHECK(!IS_ERR(dev_a));

  test_finish();
  puts("bad input: every call gave its documented errno: OK");
  return 0;
}
