/*
 * The ABI is the kernel's (include/rdma/ib_cm.h, x86-64): struct sizes and
 * field offsets of spec §1.2-1.4, the bitfield bit positions gcc gives the
 * kernel's declarations, and the kernel's enum numbers.
 */
#include "common.h"

#include <stddef.h>

#define OFF(type, field, off) _Static_assert(offsetof(type, field) == (off), #type "." #field)
#define SIZE(type, size) _Static_assert(sizeof(type) == (size), "sizeof " #type)

/* §1.2 struct ib_cm_id */
SIZE(struct ib_cm_id, 56);
_Static_assert(_Alignof(struct ib_cm_id) == 8, "ib_cm_id alignment");
OFF(struct ib_cm_id, cm_handler, 0);
OFF(struct ib_cm_id, context, 8);
OFF(struct ib_cm_id, device, 16);
OFF(struct ib_cm_id, service_id, 24);
OFF(struct ib_cm_id, state, 32);
OFF(struct ib_cm_id, lap_state, 36);
OFF(struct ib_cm_id, local_id, 40);
OFF(struct ib_cm_id, remote_id, 44);
OFF(struct ib_cm_id, remote_cm_qpn, 48);

/* §1.3 struct ib_cm_event and its param union */
SIZE(struct ib_cm_event, 96);
OFF(struct ib_cm_event, event, 0);
OFF(struct ib_cm_event, param, 8);
OFF(struct ib_cm_event, private_data, 88);
SIZE(union ib_cm_event_param, 80);
OFF(union ib_cm_event_param, send_status, 0);

SIZE(struct ib_cm_req_event_param, 80);
OFF(struct ib_cm_req_event_param, listen_id, 0);
OFF(struct ib_cm_req_event_param, bth_pkey, 8);
OFF(struct ib_cm_req_event_param, port, 10);
OFF(struct ib_cm_req_event_param, primary_path, 16);
OFF(struct ib_cm_req_event_param, alternate_path, 24);
OFF(struct ib_cm_req_event_param, ppath_sgid_attr, 32);
OFF(struct ib_cm_req_event_param, remote_ca_guid, 40);
OFF(struct ib_cm_req_event_param, remote_qkey, 48);
OFF(struct ib_cm_req_event_param, remote_qpn, 52);
OFF(struct ib_cm_req_event_param, qp_type, 56);
OFF(struct ib_cm_req_event_param, starting_psn, 60);
OFF(struct ib_cm_req_event_param, responder_resources, 64);
OFF(struct ib_cm_req_event_param, initiator_depth, 65);
OFF(struct ib_cm_req_event_param, ece, 72);

SIZE(struct ib_cm_rep_event_param, 32);
OFF(struct ib_cm_rep_event_param, remote_ca_guid, 0);
OFF(struct ib_cm_rep_event_param, remote_qkey, 8);
OFF(struct ib_cm_rep_event_param, remote_qpn, 12);
OFF(struct ib_cm_rep_event_param, starting_psn, 16);
OFF(struct ib_cm_rep_event_param, responder_resources, 20);
OFF(struct ib_cm_rep_event_param, initiator_depth, 21);
OFF(struct ib_cm_rep_event_param, ece, 24);

SIZE(struct ib_cm_rej_event_param, 24);
OFF(struct ib_cm_rej_event_param, reason, 0);
OFF(struct ib_cm_rej_event_param, ari, 8);
OFF(struct ib_cm_rej_event_param, ari_length, 16);
SIZE(struct ib_cm_mra_event_param, 1);
SIZE(struct ib_cm_lap_event_param, 8);
SIZE(struct ib_cm_apr_event_param, 24);
OFF(struct ib_cm_apr_event_param, ap_status, 0);
OFF(struct ib_cm_apr_event_param, apr_info, 8);
OFF(struct ib_cm_apr_event_param, info_len, 16);
SIZE(struct ib_cm_sidr_req_event_param, 32);
OFF(struct ib_cm_sidr_req_event_param, listen_id, 0);
OFF(struct ib_cm_sidr_req_event_param, service_id, 8);
OFF(struct ib_cm_sidr_req_event_param, sgid_attr, 16);
OFF(struct ib_cm_sidr_req_event_param, bth_pkey, 24);
OFF(struct ib_cm_sidr_req_event_param, port, 26);
OFF(struct ib_cm_sidr_req_event_param, pkey, 28);
SIZE(struct ib_cm_sidr_rep_event_param, 40);
OFF(struct ib_cm_sidr_rep_event_param, status, 0);
OFF(struct ib_cm_sidr_rep_event_param, qkey, 4);
OFF(struct ib_cm_sidr_rep_event_param, qpn, 8);
OFF(struct ib_cm_sidr_rep_event_param, info, 16);
OFF(struct ib_cm_sidr_rep_event_param, sgid_attr, 24);
OFF(struct ib_cm_sidr_rep_event_param, info_len, 32);
SIZE(struct rdma_ucm_ece, 8);

/* §1.4 struct ib_cm_req_param, struct ib_cm_rep_param */
SIZE(struct ib_cm_req_param, 96);
OFF(struct ib_cm_req_param, primary_path, 0);
OFF(struct ib_cm_req_param, primary_path_inbound, 8);
OFF(struct ib_cm_req_param, primary_path_outbound, 16);
OFF(struct ib_cm_req_param, alternate_path, 24);
OFF(struct ib_cm_req_param, ppath_sgid_attr, 32);
OFF(struct ib_cm_req_param, service_id, 40);
OFF(struct ib_cm_req_param, qp_num, 48);
OFF(struct ib_cm_req_param, qp_type, 52);
OFF(struct ib_cm_req_param, starting_psn, 56);
OFF(struct ib_cm_req_param, private_data, 64);
OFF(struct ib_cm_req_param, private_data_len, 72);
OFF(struct ib_cm_req_param, responder_resources, 73);
OFF(struct ib_cm_req_param, initiator_depth, 74);
OFF(struct ib_cm_req_param, remote_cm_response_timeout, 75);
OFF(struct ib_cm_req_param, flow_control, 76);
OFF(struct ib_cm_req_param, local_cm_response_timeout, 77);
OFF(struct ib_cm_req_param, retry_count, 78);
OFF(struct ib_cm_req_param, rnr_retry_count, 79);
OFF(struct ib_cm_req_param, max_cm_retries, 80);
OFF(struct ib_cm_req_param, srq, 81);
OFF(struct ib_cm_req_param, ece, 84);

SIZE(struct ib_cm_rep_param, 32);
OFF(struct ib_cm_rep_param, qp_num, 0);
OFF(struct ib_cm_rep_param, starting_psn, 4);
OFF(struct ib_cm_rep_param, private_data, 8);
OFF(struct ib_cm_rep_param, private_data_len, 16);
OFF(struct ib_cm_rep_param, responder_resources, 17);
OFF(struct ib_cm_rep_param, initiator_depth, 18);
OFF(struct ib_cm_rep_param, failover_accepted, 19);
OFF(struct ib_cm_rep_param, flow_control, 20);
OFF(struct ib_cm_rep_param, rnr_retry_count, 21);
OFF(struct ib_cm_rep_param, srq, 22);
OFF(struct ib_cm_rep_param, ece, 24);

/* §1.7 struct sa_path_rec, union ib_gid */
SIZE(union ib_gid, 16);
SIZE(struct sa_path_rec, 88);
OFF(struct sa_path_rec, dgid, 0);
OFF(struct sa_path_rec, sgid, 16);
OFF(struct sa_path_rec, service_id, 32);
OFF(struct sa_path_rec, flow_label, 40);
OFF(struct sa_path_rec, hop_limit, 44);
OFF(struct sa_path_rec, traffic_class, 45);
OFF(struct sa_path_rec, reversible, 46);
OFF(struct sa_path_rec, numb_path, 47);
OFF(struct sa_path_rec, pkey, 48);
OFF(struct sa_path_rec, qos_class, 50);
OFF(struct sa_path_rec, sl, 52);
OFF(struct sa_path_rec, mtu_selector, 53);
OFF(struct sa_path_rec, mtu, 54);
OFF(struct sa_path_rec, rate_selector, 55);
OFF(struct sa_path_rec, rate, 56);
OFF(struct sa_path_rec, packet_life_time_selector, 57);
OFF(struct sa_path_rec, packet_life_time, 58);
OFF(struct sa_path_rec, preference, 59);
OFF(struct sa_path_rec, ib.dlid, 60);
OFF(struct sa_path_rec, ib.slid, 62);
OFF(struct sa_path_rec, ib.raw_traffic, 64);
OFF(struct sa_path_rec, roce.route_resolved, 60);
OFF(struct sa_path_rec, roce.dmac, 61);
OFF(struct sa_path_rec, opa.dlid, 60);
OFF(struct sa_path_rec, rec_type, 76);
OFF(struct sa_path_rec, flags, 80);

/* §1.1 enums: int-sized, the kernel's numbers */
SIZE(enum ib_cm_state, 4);
SIZE(enum ib_cm_event_type, 4);
_Static_assert(IB_CM_IDLE == 0 && IB_CM_LISTEN == 1 && IB_CM_REQ_SENT == 2 &&
               IB_CM_REQ_RCVD == 3 && IB_CM_MRA_REQ_SENT == 4 &&
               IB_CM_MRA_REQ_RCVD == 5 && IB_CM_REP_SENT == 6 &&
               IB_CM_REP_RCVD == 7 && IB_CM_MRA_REP_SENT == 8 &&
               IB_CM_MRA_REP_RCVD == 9 && IB_CM_ESTABLISHED == 10 &&
               IB_CM_DREQ_SENT == 11 && IB_CM_DREQ_RCVD == 12 &&
               IB_CM_TIMEWAIT == 13 && IB_CM_SIDR_REQ_SENT == 14 &&
               IB_CM_SIDR_REQ_RCVD == 15, "enum ib_cm_state");
_Static_assert(IB_CM_LAP_UNINIT == 0 && IB_CM_LAP_IDLE == 1 && IB_CM_LAP_SENT == 2 &&
               IB_CM_LAP_RCVD == 3 && IB_CM_MRA_LAP_SENT == 4 &&
               IB_CM_MRA_LAP_RCVD == 5, "enum ib_cm_lap_state");
_Static_assert(IB_CM_REQ_ERROR == 0 && IB_CM_REQ_RECEIVED == 1 &&
               IB_CM_REP_ERROR == 2 && IB_CM_REP_RECEIVED == 3 &&
               IB_CM_RTU_RECEIVED == 4 && IB_CM_USER_ESTABLISHED == 5 &&
               IB_CM_DREQ_ERROR == 6 && IB_CM_DREQ_RECEIVED == 7 &&
               IB_CM_DREP_RECEIVED == 8 && IB_CM_TIMEWAIT_EXIT == 9 &&
               IB_CM_MRA_RECEIVED == 10 && IB_CM_REJ_RECEIVED == 11 &&
               IB_CM_LAP_ERROR == 12 && IB_CM_LAP_RECEIVED == 13 &&
               IB_CM_APR_RECEIVED == 14 && IB_CM_SIDR_REQ_ERROR == 15 &&
               IB_CM_SIDR_REQ_RECEIVED == 16 && IB_CM_SIDR_REP_RECEIVED == 17,
               "enum ib_cm_event_type");
_Static_assert(IB_CM_REQ_PRIVATE_DATA_SIZE == 92 && IB_CM_MRA_PRIVATE_DATA_SIZE == 222 &&
               IB_CM_REJ_PRIVATE_DATA_SIZE == 148 && IB_CM_REP_PRIVATE_DATA_SIZE == 196 &&
               IB_CM_RTU_PRIVATE_DATA_SIZE == 224 && IB_CM_DREQ_PRIVATE_DATA_SIZE == 220 &&
               IB_CM_DREP_PRIVATE_DATA_SIZE == 224 && IB_CM_REJ_ARI_LENGTH == 72 &&
               IB_CM_LAP_PRIVATE_DATA_SIZE == 168 && IB_CM_APR_PRIVATE_DATA_SIZE == 148 &&
               IB_CM_APR_INFO_LENGTH == 72 && IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE == 216 &&
               IB_CM_SIDR_REP_PRIVATE_DATA_SIZE == 136 && IB_CM_SIDR_REP_INFO_LENGTH == 72,
               "enum ib_cm_data_size");
_Static_assert(IB_CM_REJ_NO_QP == 1 && IB_CM_REJ_TIMEOUT == 4 &&
               IB_CM_REJ_INVALID_SERVICE_ID == 8 && IB_CM_REJ_STALE_CONN == 10 &&
               IB_CM_REJ_CONSUMER_DEFINED == 28 &&
               IB_CM_REJ_INVALID_ALT_FLOW_LABEL == 33 &&
               IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED == 35, "enum ib_cm_rej_reason");
_Static_assert(IB_CM_APR_SUCCESS == 0 && IB_CM_APR_INVALID_SL == 13, "enum ib_cm_apr_status");
_Static_assert(IB_SIDR_SUCCESS == 0 && IB_SIDR_UNSUPPORTED_VERSION == 5, "enum ib_cm_sidr_status");
_Static_assert(IB_WC_SUCCESS == 0 && IB_WC_WR_FLUSH_ERR == 5 &&
               IB_WC_RESP_TIMEOUT_ERR == 20 && IB_WC_GENERAL_ERR == 21, "enum ib_wc_status");
_Static_assert(IB_QPT_RC == 2 && IB_QPT_UC == 3 && IB_QPT_UD == 4 &&
               IB_QPT_RAW_PACKET == 8 && IB_QPT_XRC_INI == 9 && IB_QPT_XRC_TGT == 10,
               "enum ib_qp_type");
_Static_assert(IB_EVENT_COMM_EST == 4 && IB_EVENT_PATH_MIG == 6, "enum ib_event_type");
_Static_assert(SA_PATH_REC_TYPE_IB == 0 && SA_PATH_REC_TYPE_ROCE_V2 == 2, "enum sa_path_rec_type");

/* The byte at `off` of a zeroed `type` after `stmt`. */
#define BITS(type, stmt, off)                                                  \
  ({                                                                           \
    union {                                                                    \
      type s;                                                                  \
      uint8_t b[sizeof(type)];                                                 \
    } u_;                                                                      \
    memset(&u_, 0, sizeof(u_));                                                \
    type *p = &u_.s;                                                           \
    stmt;                                                                      \
    (void)p;                                                                   \
    u_.b[off];                                                                 \
  })

int main(void) {
  /* struct ib_cm_req_event_param bitfields (spec §1.3). */
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->local_cm_response_timeout = 0x1f, 66), 0x1f);
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->flow_control = 1, 66), 0x20);
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->remote_cm_response_timeout = 0x1f, 66), 0xc0);
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->remote_cm_response_timeout = 0x1f, 67), 0x07);
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->retry_count = 7, 67), 0x38);
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->rnr_retry_count = 7, 68), 0x07);
  CHECK_EQ(BITS(struct ib_cm_req_event_param, p->srq = 1, 68), 0x08);
  /* struct ib_cm_rep_event_param bitfields. */
  CHECK_EQ(BITS(struct ib_cm_rep_event_param, p->target_ack_delay = 0x1f, 22), 0x1f);
  CHECK_EQ(BITS(struct ib_cm_rep_event_param, p->failover_accepted = 3, 22), 0x60);
  CHECK_EQ(BITS(struct ib_cm_rep_event_param, p->flow_control = 1, 22), 0x80);
  CHECK_EQ(BITS(struct ib_cm_rep_event_param, p->rnr_retry_count = 7, 23), 0x07);
  CHECK_EQ(BITS(struct ib_cm_rep_event_param, p->srq = 1, 23), 0x08);

  /* Big-endian constants. */
  CHECK(CM_REQ_ATTR_ID == htobe16(0x0010));
  CHECK(CM_DREQ_ATTR_ID == htobe16(0x0015));
  CHECK(CM_DREP_ATTR_ID == htobe16(0x0016));
  CHECK(CM_APR_ATTR_ID == htobe16(0x001A));
  CHECK(IB_CM_ASSIGN_SERVICE_ID == htobe64(0x0200000000000000ULL));
  CHECK(IB_SERVICE_ID_AGN_MASK == htobe64(0xFF00000000000000ULL));
  CHECK(IB_CMA_SERVICE_ID == htobe64(0x0000000001000000ULL));
  CHECK(IB_SDP_SERVICE_ID_MASK == htobe64(0xFFFFFFFFFFFF0000ULL));
  puts("layout: OK");
  return 0;
}
