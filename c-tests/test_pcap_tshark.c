/*
 * IBCM_PCAP: every CM MAD the process sends or receives lands in a pcap that
 * tshark dissects as InfiniBand CM. A connection is set up and torn down with
 * full-size private data; tshark's view of the DREQ and the DREP (local and
 * remote comm IDs, remote QPN, every private data byte) must match what the
 * ids and the test sent. Skipped when tshark is not installed.
 */
#include "common.h"

#include <unistd.h>

static char pcap_path[64];

/* Runs tshark on the capture for one attribute; returns its first line. */
static void tshark_fields(const char *filter, const char *fields, char *line, size_t n) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd),
           "tshark -r %s -Y '%s' -T fields %s 2>/dev/null", pcap_path, filter, fields);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  if (!fgets(line, (int)n, p))
    test_fail(__FILE__, __LINE__, "tshark found no packet for %s", filter);
  line[strcspn(line, "\n")] = 0;
  printf("tshark %s: %.120s...\n", filter, line);
  char rest[4096];
  while (fgets(rest, sizeof(rest), p)) /* the same MAD seen again (loop: rx side) */
    CHECK(strncmp(rest, line, strlen(line)) == 0);
  CHECK_EQ(pclose(p), 0);
}

static void hex(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", b[i]);
}

int main(void) {
  if (system("command -v tshark >/dev/null 2>&1") != 0) {
    puts("pcap/tshark: tshark not installed, skipped");
    return SKIP;
  }
  snprintf(pcap_path, sizeof(pcap_path), "/tmp/ibcm-test-%d.pcap", (int)getpid());
  unlink(pcap_path); /* the library creates it: it refuses an existing file */
  CHECK_EQ(setenv("IBCM_PCAP", pcap_path, 1), 0); /* before the first MAD */
  test_init();

  uint8_t dreq_pd[IB_CM_DREQ_PRIVATE_DATA_SIZE], drep_pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  fill_pattern(dreq_pd, sizeof(dreq_pd), 0x5d);
  fill_pattern(drep_pd, sizeof(drep_pd), 0x5e);
  set_drep_data(drep_pd, sizeof(drep_pd));

  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  uint32_t a_id = be32toh(c.a->local_id), b_id = be32toh(c.b->local_id);
  CHECK_EQ(ib_send_cm_dreq(c.a, dreq_pd, sizeof(dreq_pd)), 0);
  wait_event(c.a, IB_CM_DREP_RECEIVED);
  wait_event(c.a, IB_CM_TIMEWAIT_EXIT);
  wait_event(c.b, IB_CM_TIMEWAIT_EXIT);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();

  char line[4096], want[4096], pd_hex[2 * 224 + 1];
  tshark_fields("infiniband.mad.attributeid == 0x0015",
                "-e infiniband.cm.dreq.localcommid -e infiniband.cm.dreq.remotecommid "
                "-e infiniband.cm.req.remoteqpneecn -e infiniband.cm.dreq.private",
                line, sizeof(line));
  hex(dreq_pd, sizeof(dreq_pd), pd_hex);
  snprintf(want, sizeof(want), "0x%08x\t0x%08x\t0x%06x\t%s", a_id, b_id, c.qpn_b, pd_hex);
  if (strcmp(line, want) != 0)
    test_fail(__FILE__, __LINE__, "DREQ as tshark sees it:\n  %s\nexpected:\n  %s", line, want);

  tshark_fields("infiniband.mad.attributeid == 0x0016",
                "-e infiniband.cm.drsp.localcommid -e infiniband.cm.drsp.remotecommid "
                "-e infiniband.cm.drsp.private",
                line, sizeof(line));
  hex(drep_pd, sizeof(drep_pd), pd_hex);
  snprintf(want, sizeof(want), "0x%08x\t0x%08x\t%s", b_id, a_id, pd_hex);
  if (strcmp(line, want) != 0)
    test_fail(__FILE__, __LINE__, "DREP as tshark sees it:\n  %s\nexpected:\n  %s", line, want);

  /* Nothing in the capture is malformed in tshark's eyes. */
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "tshark -r %s -q -z expert,warn 2>/dev/null | grep -qi malformed",
           pcap_path);
  CHECK(system(cmd) != 0);
  unlink(pcap_path);
  puts("pcap/tshark: DREQ and DREP fields match: OK");
  return 0;
}
