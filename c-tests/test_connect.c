/*
 * Connection setup and teardown, checking what each handler is given:
 * cm_req_handler (REQ_RECEIVED on a new id: the kernel's swaps of
 * responder_resources/initiator_depth and of the two CM response timeouts,
 * the path seen from the passive side, 92 bytes of REQ private data),
 * cm_rep_handler (REP_RECEIVED, same swaps, 196 bytes), cm_rtu_handler
 * (RTU_RECEIVED, 224 bytes), comm IDs learned on both sides; then
 * DREQ / DREP / timewait on both ids.
 */
#include "common.h"

static int listener_context;

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, &listener_context);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(a->remote_cm_qpn, 1);
  CHECK(a->local_id != 0);

  /* A REQ with distinct values in every field the passive side sees. */
  struct sa_path_rec path = path_ab;
  uint8_t req_pd[IB_CM_REQ_PRIVATE_DATA_SIZE];
  fill_pattern(req_pd, sizeof(req_pd), 0x5a);
  const uint32_t qpn = 0x00abcdef & 0x7fffff;
  struct ib_cm_req_param req;
  memset(&req, 0, sizeof(req));
  req.primary_path = &path;
  req.service_id = htobe64(SERVICE_ID);
  req.qp_num = qpn;
  req.qp_type = IB_QPT_RC;
  req.starting_psn = 0x123456;
  req.private_data = req_pd;
  req.private_data_len = sizeof(req_pd);
  req.responder_resources = 4;
  req.initiator_depth = 3;
  req.remote_cm_response_timeout = 12;
  req.local_cm_response_timeout = 14;
  req.flow_control = 1;
  req.retry_count = 5;
  req.rnr_retry_count = 6;
  req.max_cm_retries = 5;
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  /* The REQ's private data was copied: the caller's buffer is free again. */
  memset(req_pd, 0, sizeof(req_pd));

  /* cm_req_handler -> REQ_RECEIVED on a new id. */
  const struct cm_ev *e = wait_req_received(0, listener, qpn);
  struct ib_cm_id *b = e->id;
  const struct ib_cm_req_event_param *r = &e->param.req_rcvd;
  CHECK(b != listener);
  CHECK_EQ(e->state, IB_CM_REQ_RCVD);
  CHECK(e->context == &listener_context); /* inherited from the listener */
  CHECK(r->listen_id == listener);
  CHECK_EQ(r->port, 1);
  CHECK_EQ(r->remote_qpn, qpn);
  CHECK_EQ(r->qp_type, IB_QPT_RC);
  CHECK_EQ(r->starting_psn, 0x123456);
  CHECK_EQ(r->responder_resources, 3); /* the REQ's initiator depth */
  CHECK_EQ(r->initiator_depth, 4);     /* the REQ's responder resources */
  CHECK_EQ(r->local_cm_response_timeout, 12);  /* the REQ's remote one */
  CHECK_EQ(r->remote_cm_response_timeout, 14); /* the REQ's local one */
  CHECK_EQ(r->flow_control, 1);
  CHECK_EQ(r->retry_count, 5);
  CHECK_EQ(r->rnr_retry_count, 6);
  CHECK_EQ(r->srq, 0);
  CHECK(r->remote_ca_guid != 0);
  if (devices_are_loop()) /* loop ports' GIDs are fe80:: + node GUID */
    CHECK(r->remote_ca_guid == gid_a.global.interface_id);
  CHECK(r->alternate_path == NULL);
  CHECK(r->ppath_sgid_attr == NULL);
  /* cm_format_paths_from_req: the path as the passive side uses it, from B
   * back to A (dgid = the REQ's primary local GID). */
  CHECK(e->has_path);
  CHECK(memcmp(e->path.dgid.raw, gid_a.raw, 16) == 0);
  CHECK(memcmp(e->path.sgid.raw, gid_b.raw, 16) == 0);
  CHECK(e->path.pkey == path_ab.pkey);
  CHECK(e->path.service_id == htobe64(SERVICE_ID));
  CHECK_EQ(e->path.rec_type, SA_PATH_REC_TYPE_IB);
  CHECK_EQ(e->path.mtu, path_ab.mtu);
  CHECK_EQ(e->pd_len, 92);
  CHECK(check_pattern(e->pd, 92, 0x5a));
  CHECK(b->service_id == htobe64(SERVICE_ID));
  CHECK(b->device == dev_b);
  CHECK_EQ(b->remote_cm_qpn, 1);

  /* cm_rep_handler -> REP_RECEIVED on A. */
  e = wait_event(a, IB_CM_REP_RECEIVED);
  const struct ib_cm_rep_event_param *p = &e->param.rep_rcvd;
  CHECK_EQ(e->state, IB_CM_REP_RCVD);
  CHECK_EQ(p->remote_qpn, rep_qpn(qpn));
  CHECK_EQ(p->starting_psn, REP_PSN & 0xffffff);
  CHECK_EQ(p->responder_resources, REP_INITIATOR_DEPTH);
  CHECK_EQ(p->initiator_depth, REP_RESPONDER_RESOURCES);
  CHECK_EQ(p->rnr_retry_count, REP_RNR_RETRY_COUNT);
  CHECK_EQ(p->flow_control, 1);
  CHECK_EQ(p->failover_accepted, 0);
  CHECK_EQ(p->srq, 0);
  CHECK(p->remote_ca_guid != 0);
  if (devices_are_loop())
    CHECK(p->remote_ca_guid == gid_b.global.interface_id);
  CHECK_EQ(e->pd_len, 196);
  CHECK(check_pattern(e->pd, 196, REP_PD_SEED));

  /* cm_rtu_handler -> RTU_RECEIVED on B. */
  e = wait_event(b, IB_CM_RTU_RECEIVED);
  CHECK_EQ(e->state, IB_CM_ESTABLISHED);
  CHECK_EQ(e->pd_len, 224);
  CHECK(check_pattern(e->pd, 224, RTU_PD_SEED));
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_STATE(b, IB_CM_ESTABLISHED);

  /* Comm IDs: each side knows the other's. */
  CHECK(a->local_id != 0 && b->local_id != 0);
  CHECK(a->local_id != b->local_id);
  CHECK(a->remote_id == b->local_id);
  CHECK(b->remote_id == a->local_id);
  CHECK(a->service_id == htobe64(SERVICE_ID));
  CHECK_EQ(a->lap_state, IB_CM_LAP_UNINIT);

  /* Nothing else happened. */
  CHECK_EQ(count_id_events(a), 1);
  CHECK_EQ(count_id_events(b), 2);
  CHECK_EQ(count_id_events(listener), 0);

  /* Disconnect from A: DREQ, DREP, timewait on both. */
  CHECK_EQ(ib_send_cm_dreq(a, NULL, 0), 0);
  e = wait_event(b, IB_CM_DREQ_RECEIVED);
  CHECK_EQ(e->state, IB_CM_DREQ_RCVD);
  e = wait_event(a, IB_CM_DREP_RECEIVED);
  CHECK_EQ(e->state, IB_CM_TIMEWAIT);
  e = wait_event(a, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK(e->pd_null);
  e = wait_event(b, IB_CM_TIMEWAIT_EXIT);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_STATE(b, IB_CM_IDLE);
  CHECK_EQ(count_id_events(a), 3);
  CHECK_EQ(count_id_events(b), 4);

  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("connect: OK");
  return 0;
}
