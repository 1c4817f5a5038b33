/*
 * ib_send_cm_rej and cm_rej_handler:
 *  - B rejects a REQ from its REQ_RECEIVED handler (reason
 *    IB_CM_REJ_CONSUMER_DEFINED, 148 bytes of private data, no ARI): B's id
 *    goes back to IDLE (the handler then returns non-zero so that the CM
 *    destroys it, which sends nothing more from IDLE); A gets REJ_RECEIVED
 *    (reason 28, the 148 bytes, ari_length 0) in state IDLE, once, and no
 *    REQ_ERROR later;
 *  - the ARI (up to 72 bytes) is delivered as given;
 *  - -EINVAL: private data > 148 or ARI > 72 (in REQ_RCVD, where a REJ is
 *    allowed; nothing is sent), and states outside connection setup (IDLE,
 *    LISTEN, ESTABLISHED, TIMEWAIT);
 *  - ibcm_reject_msg: the kernel's strings.
 */
#include "common.h"

static atomic_int rej_ret = 1;
static atomic_int state_after_rej = -1;
static atomic_int ari_len;
static atomic_int too_long_pd_ret = 1, too_long_ari_ret = 1;
static atomic_int state_after_refused = -1;

static int b_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  if (event->event == IB_CM_REQ_RECEIVED) {
    uint8_t pd[IB_CM_REJ_PRIVATE_DATA_SIZE];
    uint8_t ari[IB_CM_REJ_ARI_LENGTH];
    fill_pattern(pd, sizeof(pd), 0x48);
    fill_pattern(ari, sizeof(ari), 0x72);
    int n = atomic_load(&ari_len);
    /* Too much private data / ARI: -EINVAL, nothing changes. */
    uint8_t big[255] = {0};
    atomic_store(&too_long_pd_ret, ib_send_cm_rej(cm_id, IB_CM_REJ_CONSUMER_DEFINED,
                                                  NULL, 0, big, 149));
    atomic_store(&too_long_ari_ret, ib_send_cm_rej(cm_id, IB_CM_REJ_CONSUMER_DEFINED,
                                                   big, 73, NULL, 0));
    atomic_store(&state_after_refused, cm_id->state);
    atomic_store(&rej_ret, ib_send_cm_rej(cm_id, IB_CM_REJ_CONSUMER_DEFINED,
                                          n ? ari : NULL, (uint8_t)n, pd,
                                          sizeof(pd)));
    atomic_store(&state_after_rej, cm_id->state);
    publish_event(e);
    /* Done with this id. (A retransmitted REQ that crossed the REJ makes a
     * new id, which is rejected and destroyed the same way.) */
    return 1;
  }
  default_reply(cm_id, event);
  publish_event(e);
  return 0;
}

static struct ib_cm_id *rejected_req(struct ib_cm_id *listener, int ari_n,
                                     struct ib_cm_id **b) {
  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  atomic_store(&ari_len, ari_n);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  *b = wait_req_received(mark, listener, qpn)->id;
  const struct cm_ev *e = wait_event_from(mark, a, IB_CM_REJ_RECEIVED, TIMEOUT_MS);
  CHECK_EQ(atomic_load(&too_long_pd_ret), -EINVAL);
  CHECK_EQ(atomic_load(&too_long_ari_ret), -EINVAL);
  CHECK_EQ(atomic_load(&state_after_refused), IB_CM_REQ_RCVD);
  CHECK_EQ(atomic_load(&rej_ret), 0);
  CHECK_EQ(atomic_load(&state_after_rej), IB_CM_IDLE);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  CHECK_EQ(e->state, IB_CM_IDLE);
  CHECK_EQ(e->pd_len, 148);
  CHECK(check_pattern(e->pd, 148, 0x48));
  CHECK_EQ(e->param.rej_rcvd.ari_length, ari_n);
  if (ari_n)
    CHECK(check_pattern(e->ari, (size_t)ari_n, 0x72));
  CHECK_STATE(a, IB_CM_IDLE);
  return a;
}

int main(void) {
  test_init();
  CHECK(strcmp(ibcm_reject_msg(IB_CM_REJ_CONSUMER_DEFINED), "consumer defined") == 0);
  CHECK(strcmp(ibcm_reject_msg(IB_CM_REJ_INVALID_SERVICE_ID), "invalid service ID") == 0);
  CHECK(strcmp(ibcm_reject_msg(IB_CM_REJ_STALE_CONN), "stale conn") == 0);
  CHECK(strcmp(ibcm_reject_msg(IB_CM_REJ_TIMEOUT), "timeout") == 0);
  CHECK(strcmp(ibcm_reject_msg(IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED),
               "vendor option is not supported") == 0);
  CHECK(strcmp(ibcm_reject_msg(999), "unrecognized reason") == 0);
  CHECK(strcmp(ibcm_reject_msg(34), "unrecognized reason") == 0);
  CHECK(strcmp(ibcm_reject_msg(-1), "unrecognized reason") == 0);

  struct ib_cm_id *listener = listen_b(SERVICE_ID, b_handler, NULL);
  struct ib_cm_id *b;
  struct ib_cm_id *a = rejected_req(listener, 0, &b);
  sleep_ms(150); /* past A's REQ timeout: the REJ cancelled the REQ */
  CHECK_EQ(count_events(a, IB_CM_REQ_ERROR), 0);
  CHECK_EQ(count_events(a, IB_CM_REJ_RECEIVED), 1);
  CHECK_EQ(count_id_events(b), 1);
  /* A rejected active id is IDLE: REJ from it is refused. */
  CHECK_EQ(ib_send_cm_rej(a, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  ib_destroy_cm_id(a);

  a = rejected_req(listener, IB_CM_REJ_ARI_LENGTH, &b);
  ib_destroy_cm_id(a);
  a = rejected_req(listener, 10, &b);
  ib_destroy_cm_id(a);

  /* -EINVAL. */
  uint8_t big[255];
  fill_pattern(big, sizeof(big), 3);
  CHECK_EQ(ib_send_cm_rej(NULL, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_rej(listener, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  CHECK_STATE(listener, IB_CM_LISTEN);
  struct ib_cm_id *idle = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_rej(idle, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  ib_destroy_cm_id(idle);

  ib_destroy_cm_id(listener);
  listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  struct conn_opts slow; /* TIMEWAIT lasts about 2 s */
  conn_opts_slow(&slow);
  connect_pair(listener, NULL, &slow, &c);
  CHECK_EQ(ib_send_cm_rej(c.a, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  CHECK_EQ(ib_send_cm_rej(c.b, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, big, 10), -EINVAL);
  CHECK_STATE(c.a, IB_CM_ESTABLISHED);
  CHECK_STATE(c.b, IB_CM_ESTABLISHED);
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_dreq(c.a, NULL, 0), 0);
  wait_event_from(mark, c.a, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(c.a, IB_CM_TIMEWAIT);
  CHECK_EQ(ib_send_cm_rej(c.a, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), -EINVAL);
  wait_event_from(mark, c.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_event_from(mark, c.b, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  CHECK_EQ(count_events_from(mark, NULL, IB_CM_REJ_RECEIVED), 0);

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("rej: OK");
  return 0;
}
