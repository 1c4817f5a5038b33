/*
 * A full stderr pipe never blocks the library. docs/threads.md says "Logging never fails:
 * a line that cannot be written (stderr closed, full, a broken pipe) is
 * lost, nothing else happens". A daemon's stderr is usually a pipe (to
 * journald, a supervisor, `| logger`); when its reader stalls, the pipe
 * fills and write(2) blocks. IBCM_LOG lines are written under the cm_id's
 * lock (state changes, every MAD with debug) and on the worker, so a
 * blocking write there would let one stalled log reader stop the whole CM:
 * ib_send_cm_req would never return. Expected: the line is lost and the
 * connection comes up, as with /dev/full (test_stderr_full_loses_only_log_lines).
 *
 * A SIGALRM watchdog reports a hang after 10 s (and fails the test). The
 * test's own messages go to stdout.
 */
#include "common.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] =
      "FAIL: ib_send_cm_req/the connection still blocked after 10 s: the library "
      "blocks in write(2) to a full stderr pipe (IBCM_LOG=debug)\n";
  ssize_t n = write(1, msg, sizeof(msg) - 1);
  (void)n;
  _exit(1);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  CHECK_EQ(setenv("IBCM_LOG", "debug", 1), 0);
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);

  /* stderr becomes a pipe whose reader never reads, already full. */
  int p[2];
  CHECK_EQ(pipe(p), 0);
  CHECK_EQ(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  char junk[4096];
  memset(junk, 'x', sizeof(junk));
  while (write(p[1], junk, sizeof(junk)) > 0) {
  }
  CHECK_EQ(fcntl(p[1], F_SETFL, 0), 0); /* blocking, as a default stderr */
  CHECK_EQ(dup2(p[1], 2), 2);

  signal(SIGALRM, watchdog);
  alarm(10);
  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  uint32_t qpn = next_qpn();
  req_param_init(&req, &path, &o, qpn);
  unsigned mark = log_mark();
  int rc = ib_send_cm_req(a, &req);
  printf("ib_send_cm_req: %d\n", rc);
  CHECK_EQ(rc, 0);
  struct conn c = {.a = a, .qpn_a = qpn, .qpn_b = rep_qpn(qpn)};
  c.b = wait_req_received(mark, listener, qpn)->id;
  wait_event_from(mark, c.a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  wait_event_from(mark, c.b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
  alarm(0);
  puts("connected with stderr a full pipe");
  /* Let the library's lines drain from here on, then tear down. */
  CHECK_EQ(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("OK");
  return 0;
}
