/*
 * The per-port CM counters (ibcm_get_counters: the kernel's sysfs groups
 * cm_tx_msgs / cm_tx_retries / cm_rx_msgs / cm_rx_duplicates, spec §2.9),
 * through the DREQ/DREP paths:
 *  - a DREQ retransmitted by the sender counts 1 + retries in cm_tx_msgs and
 *    the retries in cm_tx_retries;
 *  - cm_dreq_handler counts a cm_rx_duplicates[dreq]; in TIMEWAIT it re-sends
 *    the DREP as a direct retry (cm_tx_msgs += 2, cm_tx_retries += 1 for each,
 *    as the kernel's CM_DIRECT_RETRY_CTX sends are booked);
 *  - a DREQ for a destroyed id counts a duplicate and is answered by
 *    cm_issue_drep, also booked as a direct retry;
 *  - destroying an ESTABLISHED id sends one untracked DREQ (+1).
 * Counting starts from snapshots, so only the phase under test is measured.
 */
#include "common.h"

#include <stddef.h>

_Static_assert(sizeof(struct ibcm_counters) == 4 * 11 * 8 + 32, "struct ibcm_counters");
_Static_assert(offsetof(struct ibcm_counters, cm_tx_retries) == 88, "cm_tx_retries");
_Static_assert(offsetof(struct ibcm_counters, cm_rx_msgs) == 176, "cm_rx_msgs");
_Static_assert(offsetof(struct ibcm_counters, cm_rx_duplicates) == 264, "cm_rx_duplicates");
_Static_assert(offsetof(struct ibcm_counters, rx_malformed) == 352, "rx_malformed");
_Static_assert(offsetof(struct ibcm_counters, rx_listen_overflows) == 368, "rx_listen_overflows");
_Static_assert(offsetof(struct ibcm_counters, rx_dropped) == 376, "rx_dropped");
_Static_assert(IBCM_CNT_REQ == 0 && IBCM_CNT_DREQ == 5 && IBCM_CNT_DREP == 6 &&
               IBCM_CNT_APR == 10 && IBCM_CNT_ATTRS == 11, "enum ibcm_counter_attr");

static struct ibcm_counters snap(struct ib_device *dev) {
  struct ibcm_counters c;
  memset(&c, 0xff, sizeof(c));
  CHECK_EQ(ibcm_get_counters(dev, 1, &c), 0);
  return c;
}

/* after - before, for one counter. */
#define DELTA(after, before, group, attr) \
  ((long long)((after).group[attr] - (before).group[attr]))

int main(void) {
  require_loop();
  test_init();
  struct ibcm_counters c;
  CHECK_EQ(ibcm_get_counters(dev_a, 2, &c), -EINVAL);
  CHECK_EQ(ibcm_get_counters(dev_a, 1, NULL), -EINVAL);
  CHECK_EQ(ibcm_get_counters(NULL, 1, &c), -EINVAL);

  /* Retransmissions 66 ms apart (2 * 1 + 64 ms): inside B's 128 ms timewait,
   * and slow enough that only the ones this test causes happen. */
  struct conn_opts o;
  conn_opts_default(&o);
  o.remote_cm_response_timeout = 14;
  o.local_cm_response_timeout = 14;
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct ibcm_counters a0 = snap(dev_a), b0 = snap(dev_b);
  struct conn k;
  struct conn_opts fast = o; /* for phase 1 */
  fast.remote_cm_response_timeout = 12;
  connect_pair(listener, NULL, &fast, &k);
  struct ibcm_counters a1 = snap(dev_a), b1 = snap(dev_b);
  /* Every message was sent and received (at least) once. */
  CHECK(DELTA(a1, a0, cm_tx_msgs, IBCM_CNT_REQ) >= 1);
  CHECK(DELTA(b1, b0, cm_rx_msgs, IBCM_CNT_REQ) >= 1);
  CHECK(DELTA(b1, b0, cm_tx_msgs, IBCM_CNT_REP) >= 1);
  CHECK(DELTA(a1, a0, cm_rx_msgs, IBCM_CNT_REP) >= 1);
  CHECK(DELTA(a1, a0, cm_tx_msgs, IBCM_CNT_RTU) >= 1);
  CHECK(DELTA(b1, b0, cm_rx_msgs, IBCM_CNT_RTU) >= 1);
  CHECK_EQ(DELTA(a1, a0, cm_tx_msgs, IBCM_CNT_REQ),
           DELTA(b1, b0, cm_rx_msgs, IBCM_CNT_REQ)); /* nothing lost */

  /* 1. B's DREP is lost: A resends its DREQ, B (TIMEWAIT) resends the DREP.
   * A fresh connection whose DREQ is retransmitted every 17 ms (response
   * timeout 12), eight times inside B's 134 ms timewait: a loaded machine may
   * let A resend more than once before a DREP arrives, so the counts are
   * checked against the number of retries r, not against r == 1. */
  CHECK_EQ(ibcm_loop_drop(dev_b, 0x0016, 1), 0);
  CHECK_EQ(ib_send_cm_dreq(k.a, NULL, 0), 0);
  wait_event(k.a, IB_CM_DREP_RECEIVED);
  wait_event(k.a, IB_CM_TIMEWAIT_EXIT);
  wait_event(k.b, IB_CM_TIMEWAIT_EXIT);
  struct ibcm_counters a2 = snap(dev_a), b2 = snap(dev_b);
  long long r = DELTA(a2, a1, cm_tx_retries, IBCM_CNT_DREQ);
  CHECK(r >= 1);
  CHECK_EQ(DELTA(a2, a1, cm_tx_msgs, IBCM_CNT_DREQ), 1 + r);
  CHECK_EQ(DELTA(b2, b1, cm_rx_msgs, IBCM_CNT_DREQ), 1 + r);
  CHECK_EQ(DELTA(b2, b1, cm_rx_duplicates, IBCM_CNT_DREQ), r);
  /* Each duplicate that finds B in TIMEWAIT re-sends the DREP (d of them);
   * one that comes while B's handler has not answered yet (DREQ_RCVD) is
   * only counted, as the kernel's cm_dreq_handler. */
  long long d = DELTA(b2, b1, cm_tx_retries, IBCM_CNT_DREP);
  CHECK(d >= 1 && d <= r);
  CHECK_EQ(DELTA(b2, b1, cm_tx_msgs, IBCM_CNT_DREP), 1 + 2 * d);
  CHECK_EQ(DELTA(a2, a1, cm_rx_msgs, IBCM_CNT_DREP), d);
  CHECK_EQ(DELTA(a2, a1, cm_rx_duplicates, IBCM_CNT_DREP), 0);
  ib_destroy_cm_id(k.a);
  ib_destroy_cm_id(k.b);

  /* 2. A DREQ for a destroyed id: B's destroy sent one DREQ (lost here);
   * A's DREQ is answered by B's CM. */
  unsigned mark = log_mark();
  connect_pair(listener, NULL, &o, &k);
  CHECK_EQ(ibcm_loop_drop(dev_b, 0x0015, 1), 0);
  struct ibcm_counters a3 = snap(dev_a), b3 = snap(dev_b);
  ib_destroy_cm_id(k.b);
  CHECK_EQ(ib_send_cm_dreq(k.a, NULL, 0), 0);
  wait_event_from(mark, k.a, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  struct ibcm_counters a4 = snap(dev_a), b4 = snap(dev_b);
  CHECK_EQ(DELTA(b4, b3, cm_tx_msgs, IBCM_CNT_DREQ), 1);
  CHECK_EQ(DELTA(b4, b3, cm_tx_retries, IBCM_CNT_DREQ), 0);
  CHECK_EQ(DELTA(a4, a3, cm_tx_msgs, IBCM_CNT_DREQ), 1);
  CHECK_EQ(DELTA(b4, b3, cm_rx_msgs, IBCM_CNT_DREQ), 1);
  CHECK_EQ(DELTA(b4, b3, cm_rx_duplicates, IBCM_CNT_DREQ), 1);
  CHECK_EQ(DELTA(b4, b3, cm_tx_msgs, IBCM_CNT_DREP), 2);
  CHECK_EQ(DELTA(b4, b3, cm_tx_retries, IBCM_CNT_DREP), 1);
  CHECK_EQ(DELTA(a4, a3, cm_rx_msgs, IBCM_CNT_DREP), 1);
  wait_event_from(mark, k.a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  ib_destroy_cm_id(k.a);

  ib_destroy_cm_id(listener);
  test_finish();
  puts("counters: OK");
  return 0;
}
