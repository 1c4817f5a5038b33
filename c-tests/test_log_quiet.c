/*
 * Issue 13, point 1: with IBCM_LOG unset (level warn) a connect and a
 * disconnect that go well write nothing at all to stderr: the info and debug
 * lines of test_log_lines are not even formatted.
 *
 * The test's own messages go to stdout; stderr goes to a file it reads back.
 */
#include "common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  CHECK_EQ(unsetenv("IBCM_LOG"), 0);
  char path[] = "/tmp/ibcm-log-quiet-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  int saved = dup(2);
  CHECK(saved >= 0);
  CHECK_EQ(dup2(fd, 2), 2);

  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();

  fflush(stderr);
  CHECK_EQ(dup2(saved, 2), 2);
  close(saved);
  struct stat st;
  CHECK_EQ(fstat(fd, &st), 0);
  close(fd);
  unlink(path);
  if (st.st_size != 0) {
    printf("FAIL: %lld bytes written to stderr with IBCM_LOG unset\n", (long long)st.st_size);
    return 1;
  }
  puts("IBCM_LOG unset: nothing written to stderr: OK");
  return 0;
}
