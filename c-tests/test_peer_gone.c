/*
 * A peer whose process vanishes without a word, as a crash would (real
 * devices only: the in-process fabric cannot outlive its process):
 *
 *  1. cm_process_send_error, DREQ_SENT: A's DREQ to a port nobody listens on
 *     any more is never answered: IB_CM_DREQ_ERROR with
 *     IB_WC_RESP_TIMEOUT_ERR after 1 + max_cm_retries sends, then
 *     IB_CM_TIMEWAIT_EXIT.
 *  2. cm_issue_drep: a new process that opens the peer's device knows no
 *     connection, so A's DREQ for the old one gets a stateless DREP (comm IDs
 *     swapped): A sees IB_CM_DREP_RECEIVED, and the new process counts the
 *     DREQ as a duplicate and the DREP as a message plus a retry.
 *
 * Three processes: this one (device A), "old B" (connects, then _exit()s),
 * "new B" (opens device B afterwards and only answers). Both children are
 * forked before the library starts its threads.
 */
#include "common.h"

#include <sys/wait.h>
#include <unistd.h>

#define MAX_CM_RETRIES 3
#define SERVICE 0x5eed0000ULL

static atomic_int a_events[IB_CM_SIDR_REP_RECEIVED + 1];
static atomic_int a_send_status = -1;
static atomic_int b_established;

static void wait_until(atomic_int *counter, int n, const char *what) {
  for (long long end = now_ms() + 60000; atomic_load(counter) < n;) {
    if (now_ms() > end)
      test_fail(__FILE__, __LINE__, "timed out waiting for %s", what);
    sleep_ms(5);
  }
}

static int a_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (event->event == IB_CM_REP_RECEIVED)
    CHECK_EQ(ib_send_cm_rtu(cm_id, NULL, 0), 0);
  if (event->event == IB_CM_DREQ_ERROR) {
    CHECK_EQ(cm_id->state, IB_CM_TIMEWAIT);
    atomic_store(&a_send_status, event->param.send_status);
  }
  atomic_fetch_add(&a_events[event->event], 1);
  return 0;
}

static int b_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (event->event == IB_CM_REQ_RECEIVED) {
    struct ib_cm_rep_param rep;
    memset(&rep, 0, sizeof(rep));
    rep.qp_num = event->param.req_rcvd.remote_qpn ^ 0x800000u;
    rep.rnr_retry_count = 7;
    CHECK_EQ(ib_send_cm_rep(cm_id, &rep), 0);
  }
  if (event->event == IB_CM_RTU_RECEIVED)
    atomic_fetch_add(&b_established, 1);
  return 0;
}

static struct ib_device *open_dev(const char *name) {
  struct ib_device *dev = ibcm_open_device(name);
  if (IS_ERR(dev))
    test_fail(__FILE__, __LINE__, "ibcm_open_device(%s): %s", name,
              strerror((int)-PTR_ERR(dev)));
  return dev;
}

static void put(int fd, const void *buf, size_t n) {
  CHECK_EQ(write(fd, buf, n), (ssize_t)n);
}

static void get(int fd, void *buf, size_t n) {
  CHECK_EQ(read(fd, buf, n), (ssize_t)n);
}

/* Old B: listens, accepts two connections, reports, exits when told to
 * without destroying anything. */
static void old_b(int to_a, int from_a) {
  struct ib_device *dev = open_dev(dev_b_name());
  union ib_gid gid;
  CHECK_EQ(ibcm_query_gid(dev, 1, 0, &gid), 0);
  struct ib_cm_id *listener = ib_create_cm_id(dev, b_handler, NULL);
  CHECK(!IS_ERR(listener));
  CHECK_EQ(ib_cm_listen(listener, htobe64(SERVICE)), 0);
  put(to_a, &gid, sizeof(gid));
  wait_until(&b_established, 2, "two connections");
  put(to_a, "E", 1);
  char c;
  get(from_a, &c, 1);
  _exit(0); /* a crash: no DREQ, no REJ, the umad agent simply goes away */
}

/* New B: opens the device after old B is gone and only answers. */
static void new_b(int to_a, int from_a) {
  char c;
  get(from_a, &c, 1);
  struct ib_device *dev = open_dev(dev_b_name());
  put(to_a, "R", 1);
  get(from_a, &c, 1); /* A has its DREP */
  struct ibcm_counters n;
  CHECK_EQ(ibcm_get_counters(dev, 1, &n), 0);
  CHECK_EQ(n.cm_rx_msgs[IBCM_CNT_DREQ], 1);
  CHECK_EQ(n.cm_rx_duplicates[IBCM_CNT_DREQ], 1);
  CHECK_EQ(n.cm_tx_msgs[IBCM_CNT_DREP], 2);
  CHECK_EQ(n.cm_tx_retries[IBCM_CNT_DREP], 1);
  CHECK_EQ(ibcm_close_device(dev), 0);
  _exit(0);
}

static pid_t spawn(void (*body)(int, int), int *to_child, int *from_child) {
  int down[2], up[2];
  CHECK_EQ(pipe(down), 0);
  CHECK_EQ(pipe(up), 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    body(up[1], down[0]);
  }
  close(down[0]);
  close(up[1]);
  *to_child = down[1];
  *from_child = up[0];
  return pid;
}

static void reap(pid_t pid, const char *who) {
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    test_fail(__FILE__, __LINE__, "%s failed (status %#x)", who, status);
}

int main(void) {
  if (devices_are_loop()) {
    puts("peer gone: needs real devices (IBCM_DEV_A/IBCM_DEV_B), skipped");
    return SKIP;
  }
  int to_old, from_old, to_new, from_new;
  pid_t old_pid = spawn(old_b, &to_old, &from_old);
  pid_t new_pid = spawn(new_b, &to_new, &from_new);

  struct ib_device *dev = open_dev(dev_a_name());
  union ib_gid gid_peer;
  get(from_old, &gid_peer, sizeof(gid_peer));
  struct sa_path_rec path;
  CHECK_EQ(ibcm_init_path(dev, 1, &gid_peer, &path), 0);

  struct ib_cm_id *conn[2];
  for (int i = 0; i < 2; i++) {
    struct ib_cm_req_param req;
    memset(&req, 0, sizeof(req));
    req.primary_path = &path;
    req.service_id = htobe64(SERVICE);
    req.qp_num = 0x100 + (uint32_t)i;
    req.qp_type = IB_QPT_RC;
    req.remote_cm_response_timeout = 12;
    req.local_cm_response_timeout = 12;
    req.max_cm_retries = MAX_CM_RETRIES;
    req.retry_count = 7;
    req.rnr_retry_count = 7;
    conn[i] = ib_create_cm_id(dev, a_handler, NULL);
    CHECK(!IS_ERR(conn[i]));
    CHECK_EQ(ib_send_cm_req(conn[i], &req), 0);
  }
  char c;
  get(from_old, &c, 1);
  CHECK_STATE(conn[0], IB_CM_ESTABLISHED);
  CHECK_STATE(conn[1], IB_CM_ESTABLISHED);
  put(to_old, "X", 1);
  reap(old_pid, "old B");

  /* 1. Nobody answers. */
  CHECK_EQ(ib_send_cm_dreq(conn[0], NULL, 0), 0);
  wait_until(&a_events[IB_CM_DREQ_ERROR], 1, "IB_CM_DREQ_ERROR");
  CHECK_EQ(atomic_load(&a_send_status), IB_WC_RESP_TIMEOUT_ERR);
  wait_until(&a_events[IB_CM_TIMEWAIT_EXIT], 1, "IB_CM_TIMEWAIT_EXIT");
  CHECK_STATE(conn[0], IB_CM_IDLE);
  struct ibcm_counters n;
  CHECK_EQ(ibcm_get_counters(dev, 1, &n), 0);
  CHECK_EQ(n.cm_tx_msgs[IBCM_CNT_DREQ], 1 + MAX_CM_RETRIES);
  CHECK_EQ(n.cm_tx_retries[IBCM_CNT_DREQ], MAX_CM_RETRIES);

  /* 2. A new process on B's device answers statelessly. */
  put(to_new, "G", 1);
  get(from_new, &c, 1);
  CHECK_EQ(ib_send_cm_dreq(conn[1], NULL, 0), 0);
  wait_until(&a_events[IB_CM_DREP_RECEIVED], 1, "IB_CM_DREP_RECEIVED");
  wait_until(&a_events[IB_CM_TIMEWAIT_EXIT], 2, "the second IB_CM_TIMEWAIT_EXIT");
  CHECK_EQ(atomic_load(&a_events[IB_CM_DREQ_ERROR]), 1);
  put(to_new, "D", 1);
  reap(new_pid, "new B");

  ib_destroy_cm_id(conn[0]);
  ib_destroy_cm_id(conn[1]);
  CHECK_EQ(ibcm_close_device(dev), 0);
  puts("peer gone: DREQ_ERROR, then a stateless DREP: OK");
  return 0;
}
