/*
 * Issue 10, point 7: ibcm_open_device failing on port 2 leaves nothing
 * behind (no umad fd open, no CM or SA agent registered, no reader thread), says
 * "another process" only when a CM agent of another process is what failed,
 * and the device opens once the fault is gone.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c).
 */
#include "common.h"
#include "fixtures/fake_umad.h"

static void expect_nothing_left(const char *after) {
  int tid;
  /* The reader was joined, but pthread_join returns when the kernel clears
   * the thread's tid, a moment before /proc/self/task drops it: wait. */
  int threads = fake_umad_wait_threads("ibcm-umad", 0, &tid);
  int sa_threads = fake_umad_wait_threads("ibcm-sa", 0, &tid);
  EXPECT(fake_umad_open_fds() == 0 && fake_umad_agents() == 0 &&
             fake_umad_sa_agents() == 0 && threads == 0 && sa_threads == 0,
         "after %s: %d fds open, %d CM and %d SA agents, %d + %d reader threads", after,
         fake_umad_open_fds(), fake_umad_agents(), fake_umad_sa_agents(), threads,
         sa_threads);
}

static void expect_open_fails(int err, const char *after) {
  struct ib_device *dev = ibcm_open_device("fake0");
  EXPECT(IS_ERR(dev) && PTR_ERR(dev) == -err, "open after %s: %ld, want %d", after,
         IS_ERR(dev) ? PTR_ERR(dev) : 0L, -err);
  if (!IS_ERR_OR_NULL(dev))
    ibcm_close_device(dev);
  expect_nothing_left(after);
}

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 2);
  setvbuf(stdout, NULL, _IONBF, 0);
  fake_umad_capture_stderr();

  fake_umad_fail_open(2, EIO);
  expect_open_fails(EIO, "a failed umad_open_port of port 2");
  fake_umad_fail_open(2, 0);
  fake_umad_fail_register(2, ENOMEM);
  expect_open_fails(ENOMEM, "a failed umad_register2 on port 2");
  fake_umad_fail_register(2, 0);
  int wrong = fake_umad_log_lines("another process");
  EXPECT(wrong == 0, "%d log lines blame another process", wrong);

  /* The fault is gone: both ports open, and close leaves nothing. */
  struct ib_device *dev = ibcm_open_device("fake0");
  EXPECT(!IS_ERR_OR_NULL(dev), "open once the fault is gone: %ld",
         IS_ERR(dev) ? PTR_ERR(dev) : 0L);
  if (!IS_ERR_OR_NULL(dev)) {
    int tid;
    /* A reader thread per port, its SA client on the same fd; or the CM
     * worker reads the CM fds, and each SA client has an fd and a reader
     * thread of its own. */
    int worker_reads = fake_umad_worker_reads();
    CHECK_EQ(fake_umad_open_fds(), worker_reads ? 4 : 2);
    CHECK_EQ(fake_umad_agents(), 2);
    CHECK_EQ(fake_umad_sa_agents(), 2);
    int readers = worker_reads ? 0 : 2;
    CHECK_EQ(fake_umad_wait_threads("ibcm-umad", readers, &tid), readers);
    CHECK_EQ(fake_umad_wait_threads("ibcm-sa", 2 - readers, &tid), 2 - readers);
    CHECK_EQ(ibcm_close_device(dev), 0);
    expect_nothing_left("close");
  }

  /* Another process's CM agent on port 2 (the kernel refuses a second agent
   * for method Send with EINVAL): -EBUSY, and then the message says so. */
  fake_umad_fail_register(2, EINVAL);
  expect_open_fails(EBUSY, "another agent on port 2");
  CHECK_EQ(fake_umad_log_lines("another process"), 1);
  return fake_umad_result("failed_open_unwinds");
}
