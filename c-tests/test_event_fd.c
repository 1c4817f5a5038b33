/*
 * IBCM_EVENTS_FD (issue 13, point 3): a program with its own event loop.
 * Both devices deliver on the caller's thread: connect (REQ/REP/RTU) and
 * disconnect (DREQ/DREP, TIMEWAIT_EXIT) are driven only from one epoll_wait
 * loop over the two event fds, every handler runs on the main thread, and an
 * fd is not readable while nothing is pending. Also: -EBUSY when switching
 * with ids; -EDEADLK from inside a handler; ib_destroy_cm_id from another
 * thread waits for the id's handler running in ibcm_process_events; a device
 * left in worker mode (loop only: a third device) still runs its handlers on
 * the worker.
 */
#include "common.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

static pthread_t main_thread;
static struct ib_device *dev_c; /* loop only: a device in worker mode */
static atomic_int fd_calls, fd_calls_elsewhere, worker_calls, worker_calls_on_main;
static atomic_int deadlk_b, deadlk_a;

/* Blocking RTU handler for the destroy test. */
static atomic_int block_rtu, in_handler, destroyer_started, handler_done;

static int fd_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  int on_main = pthread_equal(pthread_self(), main_thread);
  if (cm_id->device == dev_c) {
    atomic_fetch_add(&worker_calls, 1);
    atomic_fetch_add(&worker_calls_on_main, on_main);
  } else {
    atomic_fetch_add(&fd_calls, 1);
    atomic_fetch_add(&fd_calls_elsewhere, !on_main);
  }
  struct cm_ev *e = capture_event(cm_id, event);
  if (event->event == IB_CM_REQ_RECEIVED && cm_id->device == dev_b) {
    /* This thread runs a handler: neither device's events may run here. */
    atomic_store(&deadlk_b, ibcm_process_events(dev_b, 1));
    atomic_store(&deadlk_a, ibcm_process_events(dev_a, 1));
  }
  if (event->event == IB_CM_RTU_RECEIVED && atomic_load(&block_rtu)) {
    atomic_store(&in_handler, 1);
    for (long long t0 = now_ms(); !atomic_load(&destroyer_started); sleep_ms(1))
      CHECK(now_ms() - t0 < TIMEOUT_MS);
    sleep_ms(300); /* the destroyer is blocked in ib_destroy_cm_id meanwhile */
    atomic_store(&handler_done, 1);
  } else {
    default_reply(cm_id, event);
  }
  publish_event(e);
  return 0;
}

static int epfd, fd_a, fd_b;

/* The application's event loop: epoll_wait on both fds, and for each one
 * readable, ibcm_process_events. Returns once `done(arg)` holds. */
static void pump_until(int (*done)(void *), void *arg) {
  long long t0 = now_ms();
  while (!done(arg)) {
    CHECK(now_ms() - t0 < TIMEOUT_MS);
    struct epoll_event ev[2];
    int n = epoll_wait(epfd, ev, 2, 50);
    CHECK(n >= 0 || errno == EINTR);
    for (int i = 0; i < n; i++) {
      struct ib_device *dev = ev[i].data.fd == fd_a ? dev_a : dev_b;
      CHECK(ibcm_process_events(dev, 16) >= 0);
    }
  }
}

struct want {
  struct ib_cm_id *id; /* NULL: any */
  enum ib_cm_event_type type;
  unsigned since;
};

static int have(void *arg) {
  const struct want *w = arg;
  for (; w->type != (enum ib_cm_event_type)-1; w++)
    if (count_events_from(w->since, w->id, w->type) == 0)
      return 0;
  return 1;
}

static int readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int n = poll(&p, 1, 0);
  CHECK(n >= 0);
  return n == 1 && (p.revents & POLLIN);
}

/* Waits (pumping) until nothing is queued anywhere; then neither fd is
 * readable. */
static int idle(void *arg) {
  (void)arg;
  struct ibcm_stats s;
  CHECK_EQ(ibcm_get_stats(&s), 0);
  return s.queued == 0;
}

static void check_quiet(void) {
  pump_until(idle, NULL);
  CHECK(!readable(fd_a));
  CHECK(!readable(fd_b));
}

static struct ib_cm_id *send_req(struct ib_device *dev, struct sa_path_rec *path,
                                 uint32_t *qpn) {
  struct conn_opts o;
  conn_opts_default(&o);
  struct ib_cm_req_param req;
  path->packet_life_time = o.packet_life_time;
  *qpn = next_qpn();
  req_param_init(&req, path, &o, *qpn);
  struct ib_cm_id *id = create_id(dev, fd_handler, NULL);
  CHECK_EQ(ib_send_cm_req(id, &req), 0);
  return id;
}

/* The id the REQ of QP qpn made for `listener` (pumping). */
static struct ib_cm_id *req_id_from(unsigned since, struct ib_cm_id *listener,
                                    uint32_t qpn) {
  struct want w[] = {{NULL, IB_CM_REQ_RECEIVED, since}, {NULL, -1, 0}};
  pump_until(have, w);
  return wait_req_received(since, listener, qpn)->id;
}

static void *destroyer(void *arg) {
  /* Sleeps between looks: a thread that spins can keep valgrind (which runs
   * one thread at a time) from running the one it waits for. */
  for (long long t0 = now_ms(); !atomic_load(&in_handler); sleep_ms(1))
    CHECK(now_ms() - t0 < TIMEOUT_MS);
  atomic_store(&destroyer_started, 1);
  ib_destroy_cm_id(arg);
  /* Returned only after the handler did. */
  return (void *)(intptr_t)atomic_load(&handler_done);
}

static void modes_and_errors(void) {
  /* Worker mode: no fd, nothing to process. */
  CHECK_EQ(ibcm_get_event_fd(dev_a), -EINVAL);
  CHECK_EQ(ibcm_process_events(dev_a, 1), -EINVAL);
  CHECK_EQ(ibcm_set_event_mode(dev_a, 2), -EINVAL);
  CHECK_EQ(ibcm_set_event_mode(NULL, IBCM_EVENTS_FD), -EINVAL);
  /* A device with an id cannot switch. */
  struct ib_cm_id *id = create_id(dev_a, fd_handler, NULL);
  CHECK_EQ(ibcm_set_event_mode(dev_a, IBCM_EVENTS_FD), -EBUSY);
  CHECK_EQ(ibcm_get_event_fd(dev_a), -EINVAL);
  ib_destroy_cm_id(id);

  CHECK_EQ(ibcm_set_event_mode(dev_a, IBCM_EVENTS_FD), 0);
  CHECK_EQ(ibcm_set_event_mode(dev_b, IBCM_EVENTS_FD), 0);
  fd_a = ibcm_get_event_fd(dev_a);
  fd_b = ibcm_get_event_fd(dev_b);
  CHECK(fd_a >= 0 && fd_b >= 0 && fd_a != fd_b);
  CHECK_EQ(ibcm_process_events(dev_a, 0), -EINVAL);
  CHECK_EQ(ibcm_process_events(dev_a, 16), 0); /* nothing pending */
  CHECK(!readable(fd_a));
  CHECK(!readable(fd_b));
}

/* Connect and disconnect, only from the epoll loop. */
static void connect_disconnect(struct ib_cm_id *listener) {
  uint32_t qpn;
  struct ib_cm_id *a = send_req(dev_a, &path_ab, &qpn);

  /* The REQ is B's pending event: B's fd turns readable, level-triggered
   * (it stays so until the event ran), counted in stats, and no handler
   * runs until this thread asks. */
  struct epoll_event ev;
  int n = epoll_wait(epfd, &ev, 1, TIMEOUT_MS);
  CHECK_EQ(n, 1);
  CHECK_EQ(ev.data.fd, fd_b);
  CHECK_EQ(epoll_wait(epfd, &ev, 1, 0), 1);
  CHECK(readable(fd_b));
  struct ibcm_stats s;
  CHECK_EQ(ibcm_get_stats(&s), 0);
  CHECK(s.queued >= 1);
  CHECK_EQ(count_events(NULL, IB_CM_REQ_RECEIVED), 0);

  struct ib_cm_id *b = req_id_from(0, listener, qpn);
  CHECK_EQ(atomic_load(&deadlk_b), -EDEADLK);
  CHECK_EQ(atomic_load(&deadlk_a), -EDEADLK);
  struct want est[] = {{a, IB_CM_REP_RECEIVED, 0}, {b, IB_CM_RTU_RECEIVED, 0}, {NULL, -1, 0}};
  pump_until(have, est);
  CHECK_STATE(a, IB_CM_ESTABLISHED);
  CHECK_STATE(b, IB_CM_ESTABLISHED);
  check_quiet();

  CHECK_EQ(ib_send_cm_dreq(a, NULL, 0), 0);
  struct want gone[] = {{b, IB_CM_DREQ_RECEIVED, 0},
                        {a, IB_CM_TIMEWAIT_EXIT, 0},
                        {b, IB_CM_TIMEWAIT_EXIT, 0},
                        {NULL, -1, 0}};
  pump_until(have, gone);
  CHECK_STATE(a, IB_CM_IDLE);
  CHECK_STATE(b, IB_CM_IDLE);
  check_quiet();
  ib_destroy_cm_id(a);
  ib_destroy_cm_id(b);

  /* REQ, REP, RTU, DREQ, 2 TIMEWAIT_EXIT: all on this thread. */
  CHECK(atomic_load(&fd_calls) >= 6);
  CHECK_EQ(atomic_load(&fd_calls_elsewhere), 0);
}

/* ib_destroy_cm_id on another thread waits for the handler that
 * ibcm_process_events runs on this one. */
static void destroy_waits(struct ib_cm_id *listener) {
  unsigned mark = log_mark();
  atomic_store(&block_rtu, 1);
  uint32_t qpn;
  struct ib_cm_id *a = send_req(dev_a, &path_ab, &qpn);
  struct ib_cm_id *b = req_id_from(mark, listener, qpn);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, destroyer, b), 0);
  struct want rtu[] = {{b, IB_CM_RTU_RECEIVED, mark}, {NULL, -1, 0}};
  pump_until(have, rtu); /* returns once the blocking handler did */
  void *done_at_return;
  CHECK_EQ(pthread_join(t, &done_at_return), 0);
  CHECK_EQ((intptr_t)done_at_return, 1);
  atomic_store(&block_rtu, 0);

  /* B's destroy (ESTABLISHED) sent a DREQ: A answers from this loop. */
  struct want dreq[] = {{a, IB_CM_DREQ_RECEIVED, mark}, {a, IB_CM_TIMEWAIT_EXIT, mark}, {NULL, -1, 0}};
  pump_until(have, dreq);
  CHECK_EQ(count_id_events_from(mark, b), 2); /* REQ_RECEIVED, RTU_RECEIVED */
  check_quiet();
  ib_destroy_cm_id(a);
  CHECK_EQ(atomic_load(&fd_calls_elsewhere), 0);
}

/* A third device left in worker mode: its handlers run on the worker, while
 * A's, for the same connection, run here. */
static void worker_mode_unchanged(void) {
  dev_c = ibcm_open_device("loop2");
  CHECK(!IS_ERR_OR_NULL(dev_c));
  CHECK_EQ(ibcm_get_event_fd(dev_c), -EINVAL);
  union ib_gid gid_c;
  struct sa_path_rec path_ac;
  CHECK_EQ(ibcm_query_gid(dev_c, 1, 0, &gid_c), 0);
  CHECK_EQ(ibcm_init_path(dev_a, 1, &gid_c, &path_ac), 0);
  struct ib_cm_id *listener = create_id(dev_c, fd_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(SERVICE_ID)), 0);

  unsigned mark = log_mark();
  uint32_t qpn;
  struct ib_cm_id *a = send_req(dev_a, &path_ac, &qpn);
  /* C's REQ handler runs with nobody pumping. */
  struct ib_cm_id *c = wait_req_received(mark, listener, qpn)->id;
  struct want est[] = {{a, IB_CM_REP_RECEIVED, mark}, {c, IB_CM_RTU_RECEIVED, mark}, {NULL, -1, 0}};
  pump_until(have, est);
  CHECK_EQ(ib_send_cm_dreq(a, NULL, 0), 0);
  struct want gone[] = {{a, IB_CM_TIMEWAIT_EXIT, mark}, {c, IB_CM_TIMEWAIT_EXIT, mark}, {NULL, -1, 0}};
  pump_until(have, gone);
  check_quiet();
  ib_destroy_cm_id(a);
  ib_destroy_cm_id(c);
  ib_destroy_cm_id(listener);
  CHECK_EQ(ibcm_close_device(dev_c), 0);
  CHECK(atomic_load(&worker_calls) >= 4); /* REQ, RTU, DREQ, TIMEWAIT_EXIT */
  CHECK_EQ(atomic_load(&worker_calls_on_main), 0);
  CHECK_EQ(atomic_load(&fd_calls_elsewhere), 0);
}

int main(void) {
  main_thread = pthread_self();
  /* Each id's events are counted exactly here, and the handlers run on this
   * thread only when it pumps: under valgrind a REP can be resent before A's
   * handler has run, and the automatic MRA (the library's, not the kernel's:
   * ib_cm(7)) would add an MRA_RECEIVED to B's events. This test checks the
   * kernel's sequence. */
  CHECK_EQ(setenv("IBCM_AUTO_MRA", "off", 1), 0);
  test_init();
  modes_and_errors();

  epfd = epoll_create1(EPOLL_CLOEXEC);
  CHECK(epfd >= 0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd_a};
  CHECK_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, fd_a, &ev), 0);
  ev.data.fd = fd_b;
  CHECK_EQ(epoll_ctl(epfd, EPOLL_CTL_ADD, fd_b, &ev), 0);

  struct ib_cm_id *listener = listen_b(SERVICE_ID, fd_handler, NULL);
  connect_disconnect(listener);
  destroy_waits(listener);
  ib_destroy_cm_id(listener);
  if (devices_are_loop())
    worker_mode_unchanged();

  CHECK_EQ(close(epfd), 0);
  test_finish(); /* closes the devices, and with them their event fds */
  puts("event fd: OK");
  return 0;
}
