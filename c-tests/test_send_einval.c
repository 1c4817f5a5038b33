/*
 * Argument and state checks of ib_send_cm_req (cm_validate_req_param, state
 * IDLE), ib_send_cm_rep (private data <= 196, REQ_RCVD) and ib_send_cm_rtu
 * (private data <= 224, REP_RCVD): -EINVAL and nothing changes. A NULL
 * private data pointer with a length is no private data (zeros on the wire).
 */
#include "common.h"

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn_opts o;
  conn_opts_slow(&o);
  struct sa_path_rec path, alt;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint8_t big[255];
  fill_pattern(big, sizeof(big), 0x31);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  uint32_t qpn = next_qpn();

  /* ib_send_cm_req. */
  req_param_init(&req, &path, &o, qpn);
  CHECK_EQ(ib_send_cm_req(NULL, &req), -EINVAL);
  CHECK_EQ(ib_send_cm_req(a, NULL), -EINVAL);
  req.primary_path = NULL;
  CHECK_EQ(ib_send_cm_req(a, &req), -EINVAL);
  req_param_init(&req, &path, &o, qpn);
  req.qp_type = IB_QPT_UD;
  CHECK_EQ(ib_send_cm_req(a, &req), -EINVAL);
  req.qp_type = IB_QPT_GSI;
  CHECK_EQ(ib_send_cm_req(a, &req), -EINVAL);
  req_param_init(&req, &path, &o, qpn);
  req.private_data = big;
  req.private_data_len = 93;
  CHECK_EQ(ib_send_cm_req(a, &req), -EINVAL);
  req_param_init(&req, &path, &o, qpn);
  alt = path;
  alt.pkey = htobe16(0x8001);
  req.alternate_path = &alt;
  CHECK_EQ(ib_send_cm_req(a, &req), -EINVAL);
  CHECK_EQ(ib_send_cm_req(listener, &req), -EINVAL);
  CHECK_STATE(listener, IB_CM_LISTEN);
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_EQ(count_events(NULL, IB_CM_REQ_RECEIVED), 0);

  /* NULL private data, any length: accepted. B holds the REQ (REQ_RCVD). */
  atomic_store(&reply_req, 0);
  atomic_store(&reply_rep, 0);
  req_param_init(&req, &path, &o, qpn);
  req.private_data = NULL;
  req.private_data_len = 93;
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  CHECK_STATE(a, IB_CM_REQ_SENT);
  const struct cm_ev *e = wait_req_received(0, listener, qpn);
  struct ib_cm_id *b = e->id;
  CHECK(all_zero(e->pd, 92));
  req_param_init(&req, &path, &o, next_qpn());
  CHECK_EQ(ib_send_cm_req(a, &req), -EINVAL); /* not IDLE */
  CHECK_STATE(a, IB_CM_REQ_SENT);

  /* ib_send_cm_rep. */
  struct ib_cm_rep_param rep;
  memset(&rep, 0, sizeof(rep));
  rep.qp_num = rep_qpn(qpn);
  rep.private_data = big;
  rep.private_data_len = 197;
  CHECK_EQ(ib_send_cm_rep(b, &rep), -EINVAL);
  CHECK_STATE(b, IB_CM_REQ_RCVD);
  CHECK_EQ(ib_send_cm_rep(b, NULL), -EINVAL);
  CHECK_EQ(ib_send_cm_rep(NULL, &rep), -EINVAL);
  rep.private_data_len = 196;
  CHECK_EQ(ib_send_cm_rep(a, &rep), -EINVAL);    /* REQ_SENT */
  CHECK_EQ(ib_send_cm_rep(listener, &rep), -EINVAL);
  CHECK_STATE(a, IB_CM_REQ_SENT);
  CHECK_EQ(ib_send_cm_rtu(b, NULL, 0), -EINVAL);  /* REQ_RCVD */
  CHECK_EQ(ib_send_cm_rtu(a, NULL, 0), -EINVAL);  /* REQ_SENT */
  CHECK_STATE(b, IB_CM_REQ_RCVD);
  CHECK_EQ(count_events(a, IB_CM_REP_RECEIVED), 0);

  /* A valid REP; A's handler does not send the RTU: REP_RCVD. */
  CHECK_EQ(ib_send_cm_rep(b, &rep), 0);
  CHECK_STATE(b, IB_CM_REP_SENT);
  CHECK_EQ(ib_send_cm_rep(b, &rep), -EINVAL); /* REP_SENT */
  e = wait_event(a, IB_CM_REP_RECEIVED);
  CHECK(memcmp(e->pd, big, 196) == 0);
  CHECK_STATE(a, IB_CM_REP_RCVD);

  /* ib_send_cm_rtu. */
  CHECK_EQ(ib_send_cm_rtu(a, big, 225), -EINVAL);
  CHECK_STATE(a, IB_CM_REP_RCVD);
  CHECK_EQ(ib_send_cm_rtu(NULL, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_rtu(a, NULL, 200), 0); /* no private data */
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  e = wait_event(b, IB_CM_RTU_RECEIVED);
  CHECK(all_zero(e->pd, 224));
  CHECK_EQ(ib_send_cm_rtu(a, NULL, 0), -EINVAL); /* ESTABLISHED */
  CHECK_EQ(ib_send_cm_rep(b, &rep), -EINVAL);    /* ESTABLISHED */
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_STATE(b, IB_CM_ESTABLISHED);

  struct conn c = {.a = a, .b = b};
  disconnect_pair(&c);
  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("req/rep/rtu -EINVAL: OK");
  return 0;
}
