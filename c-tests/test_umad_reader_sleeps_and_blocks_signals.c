/*
 * Issue 10, point 10 (the reader's part): an idle umad reader thread sleeps
 * until a MAD or close wakes it (no periodic wake-up: its context switches
 * over one idle second stay near 0, where a 100 ms poll makes 10), and it
 * blocks every signal, so a daemon's handlers run in its own threads. By
 * default the reader is the CM worker, which then sleeps in ppoll on the port
 * alone; with IBCM_UMAD_READER_THREADS=1 a thread of the port's.
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
  CHECK_EQ(fake_umad_wait_threads("ibcm-umad", !fake_umad_worker_reads(), &reader),
           !fake_umad_worker_reads());
  CHECK_EQ(fake_umad_wait_threads(fake_umad_reader_prefix(), 1, &reader), 1);

  /* The InfiniBand port's SA client has a reader thread of its own when the
   * worker reads the CM's fd: it must sleep and block signals too. */
  int readers[2] = {reader, -1}, nreaders = 1;
  if (fake_umad_worker_reads()) {
    CHECK_EQ(fake_umad_wait_threads("ibcm-sa", 1, &readers[1]), 1);
    nreaders = 2;
  }
  for (int r = 0; r < nreaders; r++) {
    sleep_ms(100);
    long long before = switches(readers[r]);
    sleep_ms(1000);
    long long woke = switches(readers[r]) - before;
    EXPECT(woke <= 2, "the idle reader %d woke %lld times in 1 s", r, woke);

    unsigned long long blocked =
        (unsigned long long)fake_umad_task_status(readers[r], "SigBlk");
    const int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM,
                        SIGTERM, SIGCHLD, SIGWINCH, SIGRTMIN + 2};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
      EXPECT(blocked & (1ULL << (sigs[i] - 1)), "signal %d is not blocked in reader %d "
             "(SigBlk %016llx)", sigs[i], r, blocked);
  }

  CHECK_EQ(ibcm_close_device(dev), 0);
  int tid;
  /* Joined, but /proc/self/task drops a thread a moment after pthread_join
   * returns (the tid is cleared first): stop 20's CI caught that window. */
  CHECK_EQ(fake_umad_wait_threads("ibcm-umad", 0, &tid), 0);
  CHECK_EQ(fake_umad_wait_threads("ibcm-sa", 0, &tid), 0);
  CHECK_EQ(fake_umad_open_fds(), 0);
  return fake_umad_result("umad_reader_sleeps_and_blocks_signals");
}
