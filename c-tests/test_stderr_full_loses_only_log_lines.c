/*
 * Issue 10, point 6: the library keeps working when it cannot log. stderr is
 * /dev/full (every write fails with ENOSPC), IBCM_LOG=debug asks for every
 * line, and IBCM_PCAP names a file that cannot be created, so the first MAD
 * wants to log an error. ib_send_cm_req must still succeed, and connections
 * set up and tear down, twice (nothing stays broken after the first failed
 * log write).
 *
 * The test's own messages go to stdout: stderr is the broken one.
 */
#include "common.h"

#include <fcntl.h>
#include <unistd.h>

#define STEP(...)                                                              \
  do {                                                                         \
    printf(__VA_ARGS__);                                                       \
    putchar('\n');                                                             \
  } while (0)

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* Before the library reads them (both are read once, at first use). */
  CHECK_EQ(setenv("IBCM_LOG", "debug", 1), 0);
  CHECK_EQ(setenv("IBCM_PCAP", "/nonexistent-ibcm-dir/capture.pcap", 1), 0);
  int full = open("/dev/full", O_WRONLY);
  CHECK(full >= 0);
  CHECK_EQ(dup2(full, 2), 2);
  close(full);

  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  for (int round = 0; round < 2; round++) {
    struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
    struct conn_opts o;
    conn_opts_default(&o);
    struct sa_path_rec path;
    struct ib_cm_req_param req;
    conn_path(&path, &o);
    uint32_t qpn = next_qpn();
    req_param_init(&req, &path, &o, qpn);
    unsigned mark = log_mark();
    int rc = ib_send_cm_req(a, &req);
    STEP("round %d: ib_send_cm_req: %d", round, rc);
    if (rc != 0) {
      printf("FAIL: ib_send_cm_req returned %d with stderr full (expected 0)\n", rc);
      return 1;
    }
    struct conn c = {.a = a, .qpn_a = qpn, .qpn_b = rep_qpn(qpn)};
    c.b = wait_req_received(mark, listener, qpn)->id;
    wait_event_from(mark, c.a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
    wait_event_from(mark, c.b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
    STEP("round %d: connected", round);
    disconnect_pair(&c);
    STEP("round %d: disconnected", round);
    ib_destroy_cm_id(c.a);
    ib_destroy_cm_id(c.b);
  }
  ib_destroy_cm_id(listener);
  test_finish();
  puts("stderr full, IBCM_PCAP unopenable: connect and disconnect work: OK");
  return 0;
}
