/*
 * Issue 31, point 2: every refused call says why. With IBCM_LOG=info each
 * refused call of the API writes one line to stderr naming the function,
 * what it was called on, the rule it broke and what it returns, as
 * ib_cm(7) documents:
 *
 *   ib_cm: info: <function>: [id 0x<local>/0x<remote> on <dev>: | <dev>: ]<rule> (<-ERRNO> | ignored)
 *
 * One of each kind: a wrong state, a length over the limit, a bad parameter,
 * the -EBUSY of ibcm_close_device (with the ids left by state), a stale
 * cm_id; then 10,000 refused calls in a loop, which log 10 lines and one
 * more per 100 ms of the loop, no more.
 *
 * stderr goes to a file; the test's own messages to stdout. On a failure
 * the captured lines are shown.
 */
#include "common.h"

#include <fcntl.h>
#include <unistd.h>

static int saved_stderr = -1;
static char capture_path[] = "/tmp/ibcm-refusals-XXXXXX";
static char *captured;
static int done;

static void restore_stderr(void) {
  if (saved_stderr < 0)
    return;
  fflush(stderr);
  dup2(saved_stderr, 2);
  close(saved_stderr);
  saved_stderr = -1;
}

static void at_exit(void) {
  restore_stderr();
  if (!done && captured)
    fprintf(stderr, "--- captured IBCM_LOG lines ---\n%s--- end ---\n", captured);
  unlink(capture_path);
  free(captured);
}

static char *read_capture(void) {
  FILE *f = fopen(capture_path, "r");
  CHECK(f != NULL);
  CHECK_EQ(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  CHECK(size >= 0);
  rewind(f);
  char *buf = malloc((size_t)size + 1);
  CHECK(buf != NULL);
  CHECK_EQ(fread(buf, 1, (size_t)size, f), (size_t)size);
  buf[size] = '\0';
  fclose(f);
  return buf;
}

/* How many captured lines are `text` (whole: 1) or hold it (whole: 0). */
static unsigned lines_with(const char *text, int whole) {
  unsigned n = 0;
  for (const char *line = captured; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char *l = strndup(line, len);
    CHECK(l != NULL);
    n += whole ? strcmp(l, text) == 0 : strstr(l, text) != NULL;
    free(l);
    line += len + (end ? 1 : 0);
  }
  return n;
}

static unsigned missing;

static void expect_line(const char *line) {
  unsigned n = lines_with(line, 1);
  if (n != 1) {
    missing++;
    printf("FAIL: %u lines \"%s\", expected 1\n", n, line);
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* Before the library reads it (once, at first use). */
  CHECK_EQ(setenv("IBCM_LOG", "info", 1), 0);
  int fd = mkstemp(capture_path);
  CHECK(fd >= 0);
  saved_stderr = dup(2);
  CHECK(saved_stderr >= 0);
  atexit(at_exit);
  CHECK_EQ(dup2(fd, 2), 2);
  close(fd);

  test_init();
  struct ib_cm_id *id = create_id(dev_a, test_handler, NULL);
  const uint32_t local = be32toh(id->local_id);
  char about[128];
  snprintf(about, sizeof(about), "id 0x%08x/0x00000000 on %s: ", local, dev_a_name());

  /* A wrong state. */
  CHECK_EQ(ib_send_cm_dreq(id, NULL, 0), -EINVAL);
  /* A length over the limit. */
  static uint8_t data[IB_CM_DREQ_PRIVATE_DATA_SIZE + 1];
  CHECK_EQ(ib_send_cm_dreq(id, data, sizeof(data)), -EINVAL);
  /* A bad parameter. */
  struct conn_opts o;
  conn_opts_default(&o);
  struct sa_path_rec path;
  conn_path(&path, &o);
  struct ib_cm_req_param req;
  req_param_init(&req, &path, &o, next_qpn());
  req.qp_type = 0;
  CHECK_EQ(ib_send_cm_req(id, &req), -EINVAL);
  CHECK_STATE(id, IB_CM_IDLE);
  /* A device with ids left. */
  CHECK_EQ(ibcm_close_device(dev_a), -EBUSY);
  /* A stale cm_id. */
  ib_destroy_cm_id(id);
  char stale[64];
  snprintf(stale, sizeof(stale), "%p", (void *)id);
  ib_destroy_cm_id(id);

  /* A loop of refused calls. */
  enum { CALLS = 10000 };
  long long t0 = now_ms();
  for (int i = 0; i < CALLS; i++)
    CHECK_EQ(ib_send_cm_rtu(NULL, NULL, 0), -EINVAL);
  long long elapsed_ms = now_ms() - t0;
  test_finish();

  captured = read_capture();
  restore_stderr();

  char line[512];
  snprintf(line, sizeof(line),
           "ib_cm: info: ib_send_cm_dreq: %sin IDLE, needs ESTABLISHED (-EINVAL)", about);
  expect_line(line);
  snprintf(line, sizeof(line),
           "ib_cm: info: ib_send_cm_dreq: %sprivate_data_len 221 > 220 (-EINVAL)", about);
  expect_line(line);
  snprintf(line, sizeof(line),
           "ib_cm: info: ib_send_cm_req: %sqp_type 0 is not RC, UC or XRC_INI (-EINVAL)",
           about);
  expect_line(line);
  snprintf(line, sizeof(line),
           "ib_cm: info: ibcm_close_device: %s: 1 id left: 1 IDLE (-EBUSY)", dev_a_name());
  expect_line(line);
  snprintf(line, sizeof(line),
           "ib_cm: info: ib_destroy_cm_id: cm_id %s is not a live cm_id (never one, or "
           "destroyed) (ignored)",
           stale);
  expect_line(line);

  const unsigned looped = lines_with("ib_cm: info: ib_send_cm_rtu: cm_id is NULL (-EINVAL)", 0);
  const unsigned bound = 10 + (unsigned)(elapsed_ms / 100) + 1;
  if (looped < 10 || looped > bound) {
    missing++;
    printf("FAIL: %u lines for %d refused calls in %lld ms (10 to %u expected)\n", looped,
           CALLS, elapsed_ms, bound);
  }

  if (missing) {
    printf("FAIL: %u expected log lines missing or wrong\n", missing);
    return 1;
  }
  done = 1;
  printf("IBCM_LOG=info: each refused call said why; %d refused in a loop logged %u lines: OK\n",
         CALLS, looped);
  return 0;
}
