/*
 * Issue 10, point 8: fork() while the library is in use. The child has no
 * worker thread, and a library lock may have been held by a thread that does
 * not exist in it, so every entry point must fail at once with -EOWNERDEAD
 * (ERR_PTR(-EOWNERDEAD) for pointers; ib_destroy_cm_id does nothing) without
 * taking any lock. The parent forks with an established connection and with a
 * handler running (its id's callback lock held, the worker busy); the child
 * calls every kind of entry point under a 10 s alarm and reports success; the
 * parent then finishes its connections as usual.
 */
#include "common.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int handler_running, release_handler;

/* Blocks in the REJ_RECEIVED handler until the parent says so. */
static int blocking_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if (event->event != IB_CM_REJ_RECEIVED)
    return 0;
  atomic_store(&handler_running, 1);
  for (long long t0 = now_ms(); !atomic_load(&release_handler) && now_ms() - t0 < TIMEOUT_MS;)
    sleep_ms(1);
  return 0;
}

static int failures;

static void expect_int(const char *call, int got) {
  int ok = got == -EOWNERDEAD;
  printf("child: %-26s -> %d%s\n", call, got, ok ? "" : " (expected -EOWNERDEAD)");
  failures += !ok;
}

static void expect_ptr(const char *call, const void *got) {
  int ok = IS_ERR(got) && PTR_ERR(got) == -EOWNERDEAD;
  printf("child: %-26s -> %ld%s\n", call, (long)(intptr_t)got,
         ok ? "" : " (expected ERR_PTR(-EOWNERDEAD))");
  failures += !ok;
}

/* Every kind of entry point, on live objects of the parent. */
static int child(struct conn *c, struct ib_cm_id *blocked) {
  alarm(10); /* a deadlock ends the child with SIGALRM */
  expect_ptr("ibcm_open_device", ibcm_open_device("loop7"));
  expect_ptr("ib_create_cm_id", ib_create_cm_id(dev_a, test_handler, NULL));
  expect_ptr("ib_cm_insert_listen",
             ib_cm_insert_listen(dev_b, test_handler, htobe64(SERVICE_ID + 1)));
  struct ib_cm_req_param req;
  struct sa_path_rec path = path_ab;
  struct conn_opts o;
  conn_opts_default(&o);
  req_param_init(&req, &path, &o, next_qpn());
  expect_int("ib_send_cm_req", ib_send_cm_req(blocked, &req));
  expect_int("ib_cm_listen", ib_cm_listen(blocked, htobe64(SERVICE_ID + 2)));
  expect_int("ib_send_cm_dreq", ib_send_cm_dreq(c->a, NULL, 0));
  expect_int("ib_send_cm_rtu", ib_send_cm_rtu(c->a, NULL, 0));
  expect_int("ib_cm_notify", ib_cm_notify(c->b, IB_EVENT_COMM_EST));
  struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTS};
  int mask = 0;
  expect_int("ib_cm_init_qp_attr", ib_cm_init_qp_attr(c->a, &attr, &mask));
  struct ibcm_stats stats;
  expect_int("ibcm_get_stats", ibcm_get_stats(&stats));
  struct ibcm_counters counters;
  expect_int("ibcm_get_counters", ibcm_get_counters(dev_a, 1, &counters));
  union ib_gid gid;
  expect_int("ibcm_query_gid", ibcm_query_gid(dev_a, 1, 0, &gid));
  expect_int("ibcm_close_device", ibcm_close_device(dev_a));
  /* The id whose handler runs in the parent: destroy would wait for it. */
  ib_destroy_cm_id(blocked);
  ib_destroy_cm_id(c->a);
  printf("child: ib_destroy_cm_id returned\n");
  CHECK(strcmp(ibcm_reject_msg(28), "consumer defined") == 0);
  return failures == 0 ? 0 : 1;
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c);

  /* A REQ to a service nobody serves: B rejects it, and A's handler for the
   * REJ blocks, holding the worker and the id's callback lock. */
  struct ib_cm_id *blocked = create_id(dev_a, blocking_handler, NULL);
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = SERVICE_ID + 3;
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  req_param_init(&req, &path, &o, next_qpn());
  CHECK_EQ(ib_send_cm_req(blocked, &req), 0);
  for (long long t0 = now_ms(); !atomic_load(&handler_running);) {
    if (now_ms() - t0 > TIMEOUT_MS)
      test_fail(__FILE__, __LINE__, "the REJ handler never ran");
    sleep_ms(1);
  }

  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    /* The child reports by exec'ing true or false rather than by exiting:
     * an exit-time leak check (valgrind) would count the blocks only the
     * parent's other threads (absent here) refer to. */
    const char *status = child(&c, blocked) == 0 ? "true" : "false";
    execlp(status, status, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status))
    test_fail(__FILE__, __LINE__, "the child died of signal %d (%s)", WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? "a deadlock" : "a crash");
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);

  /* The parent is unaffected. */
  atomic_store(&release_handler, 1);
  wait_event(blocked, IB_CM_REJ_RECEIVED);
  disconnect_pair(&c);
  struct conn c2;
  connect_pair(listener, NULL, NULL, &c2);
  disconnect_pair(&c2);
  ib_destroy_cm_id(blocked);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(c2.a);
  ib_destroy_cm_id(c2.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("fork: every call fails with -EOWNERDEAD in the child, the parent goes on: OK");
  return 0;
}
