/*
 * IBCM_LOG takes its level in any case: IBCM_LOG=DEBUG (as RUST_LOG and most such variables
 * take it) or IBCM_LOG=warning (the tag the lines carry) must not silently
 * mean the default level: a user who asked for debug lines and got none
 * had no word of why. Any case is accepted; a value that is no level at all
 * gets one warning line naming it (the library cannot be asked which level
 * it took).
 *
 * The test's own messages go to stdout; stderr goes to a file it reads back.
 */
#include "common.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  CHECK_EQ(setenv("IBCM_LOG", "DEBUG", 1), 0);
  char path[] = "/tmp/ibcm-log-case-XXXXXX";
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
  static char log[1 << 20];
  ssize_t n = pread(fd, log, sizeof log - 1, 0);
  close(fd);
  unlink(path);
  CHECK(n >= 0);
  log[n] = '\0';
  if (!strstr(log, "ib_cm: debug: send REQ")) {
    printf("FAIL: IBCM_LOG=DEBUG wrote no debug line (%zd bytes on stderr)\n", n);
    return 1;
  }
  puts("IBCM_LOG=DEBUG: debug lines: OK");
  return 0;
}
