/*
 * Issue 10, point 9: IBCM_PCAP never follows a symlink nor truncates an
 * existing file. The path is a symlink to a file with known content: no
 * capture is written, the target is untouched, and exactly one error line
 * about IBCM_PCAP is logged (stderr goes to a file for the check); the
 * connection works as usual.
 */
#include "common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char TARGET_TEXT[] = "precious data, not a capture\n";

int main(void) {
  char dir[] = "/tmp/ibcm-pcap-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char target[128], link_path[128], log_path[128];
  snprintf(target, sizeof(target), "%s/target", dir);
  snprintf(link_path, sizeof(link_path), "%s/capture.pcap", dir);
  snprintf(log_path, sizeof(log_path), "%s/stderr", dir);
  FILE *f = fopen(target, "w");
  CHECK(f != NULL);
  CHECK_EQ(fputs(TARGET_TEXT, f) >= 0, 1);
  CHECK_EQ(fclose(f), 0);
  CHECK_EQ(symlink(target, link_path), 0);

  /* The library's stderr into a file, before its first use. */
  fflush(stderr);
  int saved_stderr = dup(2);
  int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(saved_stderr >= 0 && log_fd >= 0);
  CHECK_EQ(dup2(log_fd, 2), 2);
  close(log_fd);
  CHECK_EQ(setenv("IBCM_PCAP", link_path, 1), 0);

  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();
  CHECK_EQ(dup2(saved_stderr, 2), 2);
  close(saved_stderr);

  /* The target is as it was. */
  char buf[256] = {0};
  f = fopen(target, "r");
  CHECK(f != NULL);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  if (n != strlen(TARGET_TEXT) || memcmp(buf, TARGET_TEXT, n) != 0)
    test_fail(__FILE__, __LINE__, "the symlink's target was written: %zu bytes now, %zu before",
              n, strlen(TARGET_TEXT));
  struct stat st;
  CHECK_EQ(lstat(link_path, &st), 0);
  CHECK(S_ISLNK(st.st_mode));

  /* One error about it, and nothing else about IBCM_PCAP. */
  f = fopen(log_path, "r");
  CHECK(f != NULL);
  char line[512];
  int pcap_lines = 0, error_lines = 0;
  while (fgets(line, sizeof(line), f)) {
    printf("library stderr: %s", line);
    if (strstr(line, "IBCM_PCAP")) {
      pcap_lines++;
      error_lines += strstr(line, "ib_cm: error:") == line;
    }
  }
  fclose(f);
  CHECK_EQ(pcap_lines, 1);
  CHECK_EQ(error_lines, 1);

  unlink(log_path);
  unlink(link_path);
  unlink(target);
  rmdir(dir);
  puts("IBCM_PCAP on a symlink: refused, target untouched, one error: OK");
  return 0;
}
