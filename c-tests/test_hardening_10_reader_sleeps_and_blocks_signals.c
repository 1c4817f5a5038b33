/*
 * Issue 10, point 10 (the reader's part): an idle umad reader thread sleeps
 * until a MAD or close wakes it (no periodic wake-up: its context switches
 * over one idle second stay near 0, where a 100 ms poll makes 10), and it
 * blocks every signal, so a daemon's handlers run in its own threads.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c).
 */
#include "common.h"
#include "fixtures/fake_umad.h"

#include <signal.h>

static long long switches(int tid) {
  return fake_umad_task_status(tid, "voluntary_ctxt_switches") +
         fake_umad_task_status(tid, "nonvoluntary_ctxt_switches");
}

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  struct ib_device *dev = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(dev));
  int reader;
  CHECK_EQ(fake_umad_wait_threads("ibcm-umad", 1, &reader), 1);

  sleep_ms(100);
  long long before = switches(reader);
  sleep_ms(1000);
  long long woke = switches(reader) - before;
  EXPECT(woke <= 2, "the idle reader woke %lld times in 1 s", woke);

  unsigned long long blocked = (unsigned long long)fake_umad_task_status(reader, "SigBlk");
  const int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM,
                      SIGTERM, SIGCHLD, SIGWINCH, SIGRTMIN + 2};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    EXPECT(blocked & (1ULL << (sigs[i] - 1)), "signal %d is not blocked in the reader "
           "(SigBlk %016llx)", sigs[i], blocked);

  CHECK_EQ(ibcm_close_device(dev), 0);
  int tid;
  /* Joined, but /proc/self/task drops a thread a moment after pthread_join
   * returns (the tid is cleared first): stop 20's CI caught that window. */
  CHECK_EQ(fake_umad_wait_threads("ibcm-umad", 0, &tid), 0);
  CHECK_EQ(fake_umad_open_fds(), 0);
  return fake_umad_result("hardening_10");
}
