/*
 * Issue 13, point 1: IBCM_LOG=debug says what happened. A connect and a
 * disconnect with stderr going to a file; then the file must hold, as the
 * man page ib_cm(7) documents them:
 *   - every state change of both ids and of the listener, at info:
 *       ib_cm: info: id 0x<local>/0x<remote> <dev>:<port> OLD -> NEW (<why>)
 *   - every event handed to a handler, at info:
 *       ib_cm: info: id 0x<local>/0x<remote> event REQ_RECEIVED
 *   - every MAD sent and received, at debug:
 *       ib_cm: debug: send REQ tid 0x… local 0x<a> remote 0x0 port 1 to … len 256
 *       ib_cm: debug: recv REQ tid 0x… local 0x<a> remote 0x0 port 1 from … len 256
 *
 * The test's own messages go to stdout; stderr is restored (and the captured
 * lines copied to it) before the checks and on any failure.
 */
#include "common.h"

#include <fcntl.h>
#include <unistd.h>

static int saved_stderr = -1;
static char capture_path[] = "/tmp/ibcm-log-lines-XXXXXX";
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

/* On a failure (exit before the end), show what was logged. */
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
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  CHECK(buf != NULL);
  size_t n;
  while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len - 1 == 0) {
      cap *= 2;
      buf = realloc(buf, cap);
      CHECK(buf != NULL);
    }
  }
  fclose(f);
  buf[len] = '\0';
  return buf;
}

static unsigned missing;

/* Is there a line holding all of the (up to three) substrings? */
static void expect_line(const char *a, const char *b, const char *c) {
  for (const char *line = captured; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char *l = strndup(line, len);
    CHECK(l != NULL);
    int found = strstr(l, a) && (!b || strstr(l, b)) && (!c || strstr(l, c));
    free(l);
    if (found)
      return;
    line += len + (end ? 1 : 0);
  }
  missing++;
  printf("FAIL: no line with \"%s\"%s%s%s%s%s\n", a, b ? " and \"" : "", b ? b : "",
         b ? "\"" : "", c ? " and \"" : "", c ? c : "");
}

static void id_prefix(char *buf, size_t n, uint32_t local_id) {
  snprintf(buf, n, "ib_cm: info: id 0x%08x/", local_id);
}

static void expect_states(uint32_t id, const char *const *states, size_t n) {
  char prefix[64];
  id_prefix(prefix, sizeof(prefix), id);
  for (size_t i = 0; i + 1 < n; i++) {
    char change[64];
    snprintf(change, sizeof(change), " %s -> %s (", states[i], states[i + 1]);
    expect_line(prefix, change, NULL);
  }
}

static void expect_events(uint32_t id, const char *const *events, size_t n) {
  char prefix[64];
  id_prefix(prefix, sizeof(prefix), id);
  for (size_t i = 0; i < n; i++) {
    char ev[64];
    snprintf(ev, sizeof(ev), " event %s", events[i]);
    expect_line(prefix, ev, NULL);
  }
}

/* `dir` ("send"/"recv") of `attr` carrying the comm IDs local / remote. */
static void expect_mad(const char *dir, const char *attr, uint32_t local, uint32_t remote) {
  char head[64], ids[64];
  snprintf(head, sizeof(head), "ib_cm: debug: %s %s tid 0x", dir, attr);
  snprintf(ids, sizeof(ids), " local 0x%08x remote 0x%08x port ", local, remote);
  expect_line(head, ids, " len 256");
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* Before the library reads it (once, at first use). */
  CHECK_EQ(setenv("IBCM_LOG", "debug", 1), 0);
  int fd = mkstemp(capture_path);
  CHECK(fd >= 0);
  saved_stderr = dup(2);
  CHECK(saved_stderr >= 0);
  atexit(at_exit);
  CHECK_EQ(dup2(fd, 2), 2);
  close(fd);

  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);
  disconnect_pair(&c);
  /* The ids are gone after this: keep their comm IDs. */
  const uint32_t a = be32toh(c.a->local_id), b = be32toh(c.b->local_id);
  const uint32_t l = be32toh(listener->local_id);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(listener);
  test_finish();

  captured = read_capture();
  restore_stderr();

  static const char *const active[] = {"IDLE",        "REQ_SENT",  "REP_RCVD", "ESTABLISHED",
                                       "DREQ_SENT",   "TIMEWAIT",  "IDLE"};
  static const char *const passive[] = {"IDLE",        "REQ_RCVD", "REP_SENT", "ESTABLISHED",
                                        "DREQ_RCVD",   "TIMEWAIT", "IDLE"};
  static const char *const listening[] = {"IDLE", "LISTEN", "IDLE"};
  expect_states(a, active, N(active));
  expect_states(b, passive, N(passive));
  expect_states(l, listening, N(listening));

  static const char *const active_events[] = {"REP_RECEIVED", "DREP_RECEIVED",
                                              "TIMEWAIT_EXIT"};
  static const char *const passive_events[] = {"REQ_RECEIVED", "RTU_RECEIVED",
                                               "DREQ_RECEIVED", "TIMEWAIT_EXIT"};
  expect_events(a, active_events, N(active_events));
  expect_events(b, passive_events, N(passive_events));

  static const char *const dirs[] = {"send", "recv"};
  for (size_t i = 0; i < N(dirs); i++) {
    expect_mad(dirs[i], "REQ", a, 0);
    expect_mad(dirs[i], "REP", b, a);
    expect_mad(dirs[i], "RTU", a, b);
    expect_mad(dirs[i], "DREQ", a, b);
    expect_mad(dirs[i], "DREP", b, a);
  }

  if (missing) {
    printf("FAIL: %u expected log lines missing\n", missing);
    return 1;
  }
  done = 1;
  puts("IBCM_LOG=debug: every state change, event and MAD of a connect/disconnect logged: OK");
  return 0;
}
