/* Helpers for the libib_cm C tests; see common.h. */
#include "common.h"

#include <pthread.h>
#include <stdarg.h>
#include <time.h>

struct ib_device *dev_a, *dev_b;
union ib_gid gid_a, gid_b;
struct sa_path_rec path_ab;

atomic_int reply_req = 1, reply_rep = 1, reply_dreq = 1;

/* ---- small things --------------------------------------------------------- */

long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

void fill_pattern(void *buf, size_t n, unsigned seed) {
  uint8_t *p = buf;
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(seed + i * 7 + (i >> 3));
}

int check_pattern(const void *buf, size_t n, unsigned seed) {
  const uint8_t *p = buf;
  for (size_t i = 0; i < n; i++)
    if (p[i] != (uint8_t)(seed + i * 7 + (i >> 3)))
      return 0;
  return 1;
}

int all_zero(const void *buf, size_t n) {
  const uint8_t *p = buf;
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return 0;
  return 1;
}

const char *state_name(enum ib_cm_state s) {
  static const char *const names[] = {
      "IDLE",          "LISTEN",        "REQ_SENT",     "REQ_RCVD",
      "MRA_REQ_SENT",  "MRA_REQ_RCVD",  "REP_SENT",     "REP_RCVD",
      "MRA_REP_SENT",  "MRA_REP_RCVD",  "ESTABLISHED",  "DREQ_SENT",
      "DREQ_RCVD",     "TIMEWAIT",      "SIDR_REQ_SENT", "SIDR_REQ_RCVD"};
  return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

const char *event_name(enum ib_cm_event_type e) {
  static const char *const names[] = {
      "REQ_ERROR",       "REQ_RECEIVED",    "REP_ERROR",
      "REP_RECEIVED",    "RTU_RECEIVED",    "USER_ESTABLISHED",
      "DREQ_ERROR",      "DREQ_RECEIVED",   "DREP_RECEIVED",
      "TIMEWAIT_EXIT",   "MRA_RECEIVED",    "REJ_RECEIVED",
      "LAP_ERROR",       "LAP_RECEIVED",    "APR_RECEIVED",
      "SIDR_REQ_ERROR",  "SIDR_REQ_RECEIVED", "SIDR_REP_RECEIVED"};
  return (unsigned)e < sizeof(names) / sizeof(names[0]) ? names[e] : "?";
}

size_t event_pd_size(enum ib_cm_event_type e) {
  switch (e) {
  case IB_CM_REQ_RECEIVED: return IB_CM_REQ_PRIVATE_DATA_SIZE;
  case IB_CM_REP_RECEIVED: return IB_CM_REP_PRIVATE_DATA_SIZE;
  case IB_CM_RTU_RECEIVED: return IB_CM_RTU_PRIVATE_DATA_SIZE;
  case IB_CM_DREQ_RECEIVED: return IB_CM_DREQ_PRIVATE_DATA_SIZE;
  case IB_CM_DREP_RECEIVED: return IB_CM_DREP_PRIVATE_DATA_SIZE;
  case IB_CM_MRA_RECEIVED: return IB_CM_MRA_PRIVATE_DATA_SIZE;
  case IB_CM_REJ_RECEIVED: return IB_CM_REJ_PRIVATE_DATA_SIZE;
  case IB_CM_LAP_RECEIVED: return IB_CM_LAP_PRIVATE_DATA_SIZE;
  case IB_CM_APR_RECEIVED: return IB_CM_APR_PRIVATE_DATA_SIZE;
  case IB_CM_SIDR_REQ_RECEIVED: return IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE;
  case IB_CM_SIDR_REP_RECEIVED: return IB_CM_SIDR_REP_PRIVATE_DATA_SIZE;
  default: return 0; /* errors and TIMEWAIT_EXIT: NULL; USER_ESTABLISHED: undefined */
  }
}

/* ---- the event log ------------------------------------------------------- */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct cm_ev *head, *tail;
  unsigned n;
  unsigned count[32]; /* per event type */
  int cv_ready;
} log_ = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void log_init(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&log_.cv, &attr);
  pthread_condattr_destroy(&attr);
  log_.cv_ready = 1;
}

static void dump_log_locked(void) {
  fprintf(stderr, "event log (%u events):\n", log_.n);
  unsigned skip = log_.n > 60 ? log_.n - 60 : 0;
  for (struct cm_ev *e = log_.head; e; e = e->next) {
    if (e->seq < skip)
      continue;
    fprintf(stderr, "  #%u +%lldms id=%p %s state=%s", e->seq,
            e->t_ms - log_.head->t_ms, (void *)e->id, event_name(e->type),
            state_name(e->state));
    if (e->type == IB_CM_REJ_RECEIVED)
      fprintf(stderr, " reason=%d", (int)e->param.rej_rcvd.reason);
    if (e->type == IB_CM_REQ_ERROR || e->type == IB_CM_REP_ERROR ||
        e->type == IB_CM_DREQ_ERROR)
      fprintf(stderr, " send_status=%d", (int)e->param.send_status);
    fprintf(stderr, "\n");
  }
}

void test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  if (pthread_mutex_trylock(&log_.mu) == 0) {
    dump_log_locked();
    pthread_mutex_unlock(&log_.mu);
  }
  fflush(stderr);
  exit(1);
}

struct cm_ev *capture_event(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = calloc(1, sizeof(*e));
  CHECK(e != NULL);
  CHECK(cm_id != NULL && event != NULL);
  e->t_ms = now_ms();
  e->id = cm_id;
  e->type = event->event;
  e->state = cm_id->state;
  e->local_id = cm_id->local_id;
  e->remote_id = cm_id->remote_id;
  e->context = cm_id->context;
  e->param = event->param;
  if (e->type == IB_CM_REQ_RECEIVED && event->param.req_rcvd.primary_path) {
    e->has_path = 1;
    e->path = *event->param.req_rcvd.primary_path;
  }
  if (e->type == IB_CM_REQ_RECEIVED && event->param.req_rcvd.alternate_path) {
    e->has_alt_path = 1;
    e->alt_path = *event->param.req_rcvd.alternate_path;
  }
  if (e->type == IB_CM_REJ_RECEIVED && event->param.rej_rcvd.ari) {
    size_t n = event->param.rej_rcvd.ari_length;
    memcpy(e->ari, event->param.rej_rcvd.ari,
           n < sizeof(e->ari) ? n : sizeof(e->ari));
  }
  if (e->type != IB_CM_USER_ESTABLISHED) { /* whose private_data is undefined */
    e->pd_null = event->private_data == NULL;
    e->pd_len = event->private_data ? event_pd_size(e->type) : 0;
    if (e->pd_len)
      memcpy(e->pd, event->private_data, e->pd_len);
  }
  return e;
}

void publish_event(struct cm_ev *e) {
  pthread_mutex_lock(&log_.mu);
  e->seq = log_.n++;
  if (log_.tail)
    log_.tail->next = e;
  else
    log_.head = e;
  log_.tail = e;
  if ((unsigned)e->type < 32)
    log_.count[e->type]++;
  pthread_cond_broadcast(&log_.cv);
  pthread_mutex_unlock(&log_.mu);
}

void record_event(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  publish_event(capture_event(cm_id, event));
}

unsigned log_mark(void) {
  pthread_mutex_lock(&log_.mu);
  unsigned n = log_.n;
  pthread_mutex_unlock(&log_.mu);
  return n;
}

typedef int (*ev_pred)(const struct cm_ev *e, const void *arg);

static const struct cm_ev *find_locked(unsigned since, ev_pred pred,
                                       const void *arg) {
  for (struct cm_ev *e = log_.head; e; e = e->next)
    if (e->seq >= since && pred(e, arg))
      return e;
  return NULL;
}

static struct timespec deadline_after(int timeout_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += timeout_ms / 1000;
  ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

static const struct cm_ev *wait_pred(const char *file, int line,
                                     unsigned since, ev_pred pred,
                                     const void *arg, int timeout_ms,
                                     const char *what) {
  struct timespec deadline = deadline_after(timeout_ms);
  pthread_mutex_lock(&log_.mu);
  const struct cm_ev *e;
  while (!(e = find_locked(since, pred, arg))) {
    if (pthread_cond_timedwait(&log_.cv, &log_.mu, &deadline) == ETIMEDOUT &&
        !(e = find_locked(since, pred, arg))) {
      pthread_mutex_unlock(&log_.mu);
      test_fail(file, line, "timed out after %d ms waiting for %s",
                timeout_ms, what);
    }
  }
  pthread_mutex_unlock(&log_.mu);
  return e;
}

struct id_type {
  struct ib_cm_id *id;
  enum ib_cm_event_type type;
};

static int match_id_type(const struct cm_ev *e, const void *arg) {
  const struct id_type *m = arg;
  return e->type == m->type && (!m->id || e->id == m->id);
}

const struct cm_ev *wait_event_at(const char *file, int line, unsigned since,
                                  struct ib_cm_id *id,
                                  enum ib_cm_event_type type, int timeout_ms) {
  struct id_type m = {id, type};
  char what[96];
  snprintf(what, sizeof(what), "%s on id %p", event_name(type), (void *)id);
  return wait_pred(file, line, since, match_id_type, &m, timeout_ms, what);
}

struct req_match {
  struct ib_cm_id *listener;
  uint32_t qpn;
};

static int match_req(const struct cm_ev *e, const void *arg) {
  const struct req_match *m = arg;
  return e->type == IB_CM_REQ_RECEIVED &&
         e->param.req_rcvd.listen_id == m->listener &&
         e->param.req_rcvd.remote_qpn == m->qpn;
}

const struct cm_ev *wait_req_received_at(const char *file, int line,
                                         unsigned since,
                                         struct ib_cm_id *listener, uint32_t qpn) {
  struct req_match m = {listener, qpn};
  char what[96];
  snprintf(what, sizeof(what), "REQ_RECEIVED for QP 0x%x on listener %p", qpn,
           (void *)listener);
  return wait_pred(file, line, since, match_req, &m, TIMEOUT_MS, what);
}

void wait_count_at(const char *file, int line, enum ib_cm_event_type type,
                   unsigned n, int timeout_ms) {
  struct timespec deadline = deadline_after(timeout_ms);
  pthread_mutex_lock(&log_.mu);
  while (log_.count[type] < n) {
    if (pthread_cond_timedwait(&log_.cv, &log_.mu, &deadline) == ETIMEDOUT &&
        log_.count[type] < n) {
      unsigned got = log_.count[type];
      pthread_mutex_unlock(&log_.mu);
      test_fail(file, line, "timed out after %d ms: %u of %u %s events",
                timeout_ms, got,
                n, event_name(type));
    }
  }
  pthread_mutex_unlock(&log_.mu);
}

unsigned count_events_from(unsigned since, struct ib_cm_id *id,
                           enum ib_cm_event_type type) {
  unsigned n = 0;
  pthread_mutex_lock(&log_.mu);
  if (!id && !since) {
    n = log_.count[type];
  } else {
    for (struct cm_ev *e = log_.head; e; e = e->next)
      n += e->seq >= since && (!id || e->id == id) && e->type == type;
  }
  pthread_mutex_unlock(&log_.mu);
  return n;
}

unsigned count_id_events_from(unsigned since, struct ib_cm_id *id) {
  unsigned n = 0;
  pthread_mutex_lock(&log_.mu);
  for (struct cm_ev *e = log_.head; e; e = e->next)
    n += e->seq >= since && e->id == id;
  pthread_mutex_unlock(&log_.mu);
  return n;
}

static void log_free(void) {
  pthread_mutex_lock(&log_.mu);
  struct cm_ev *e = log_.head;
  log_.head = log_.tail = NULL;
  log_.n = 0;
  memset(log_.count, 0, sizeof(log_.count));
  pthread_mutex_unlock(&log_.mu);
  while (e) {
    struct cm_ev *next = e->next;
    free(e);
    e = next;
  }
}

/* ---- the recording handler ----------------------------------------------- */

static pthread_mutex_t drep_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t drep_buf[256];
static const void *drep_data;
static uint8_t drep_len;

void set_drep_data(const void *data, uint8_t len) {
  pthread_mutex_lock(&drep_mu);
  if (data)
    memcpy(drep_buf, data, len);
  drep_data = data ? drep_buf : NULL;
  drep_len = len;
  pthread_mutex_unlock(&drep_mu);
}

int answer_req(struct ib_cm_id *cm_id, uint32_t remote_qpn) {
  uint8_t pd[IB_CM_REP_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), REP_PD_SEED);
  struct ib_cm_rep_param rep;
  memset(&rep, 0, sizeof(rep));
  rep.qp_num = rep_qpn(remote_qpn);
  rep.starting_psn = REP_PSN;
  rep.private_data = pd;
  rep.private_data_len = sizeof(pd);
  rep.responder_resources = REP_RESPONDER_RESOURCES;
  rep.initiator_depth = REP_INITIATOR_DEPTH;
  rep.flow_control = 1;
  rep.rnr_retry_count = REP_RNR_RETRY_COUNT;
  return ib_send_cm_rep(cm_id, &rep);
}

int default_reply(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  switch (event->event) {
  case IB_CM_REQ_RECEIVED:
    if (atomic_load(&reply_req))
      CHECK_EQ(answer_req(cm_id, event->param.req_rcvd.remote_qpn), 0);
    break;
  case IB_CM_REP_RECEIVED:
    if (atomic_load(&reply_rep)) {
      uint8_t pd[IB_CM_RTU_PRIVATE_DATA_SIZE];
      fill_pattern(pd, sizeof(pd), RTU_PD_SEED);
      CHECK_EQ(ib_send_cm_rtu(cm_id, pd, sizeof(pd)), 0);
    }
    break;
  case IB_CM_DREQ_RECEIVED:
    if (atomic_load(&reply_dreq)) {
      uint8_t pd[256];
      pthread_mutex_lock(&drep_mu);
      const void *data = drep_data ? pd : NULL;
      uint8_t len = drep_len;
      memcpy(pd, drep_buf, sizeof(pd));
      pthread_mutex_unlock(&drep_mu);
      CHECK_EQ(ib_send_cm_drep(cm_id, data, len), 0);
    }
    break;
  default:
    break;
  }
  return 0;
}

int test_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  int ret = default_reply(cm_id, event);
  publish_event(e);
  return ret;
}

/* ---- devices ------------------------------------------------------------- */

const char *dev_a_name(void) {
  const char *s = getenv("IBCM_DEV_A");
  return s && *s ? s : "loop0";
}

const char *dev_b_name(void) {
  const char *s = getenv("IBCM_DEV_B");
  return s && *s ? s : "loop1";
}

int devices_are_loop(void) {
  return strncmp(dev_a_name(), "loop", 4) == 0 &&
         strncmp(dev_b_name(), "loop", 4) == 0;
}

void require_loop(void) {
  if (!devices_are_loop()) {
    printf("SKIP: needs loop devices (fault injection), have %s and %s\n",
           dev_a_name(), dev_b_name());
    exit(SKIP);
  }
}

static struct ib_device *open_device(const char *name) {
  struct ib_device *dev = ibcm_open_device(name);
  if (IS_ERR(dev))
    test_fail(__FILE__, __LINE__, "ibcm_open_device(%s): %ld", name,
              PTR_ERR(dev));
  return dev;
}

void test_init_one(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  log_init();
  dev_a = open_device(dev_a_name());
  CHECK_EQ(ibcm_query_gid(dev_a, 1, 0, &gid_a), 0);
}

void test_init(void) {
  test_init_one();
  dev_b = open_device(dev_b_name());
  CHECK_EQ(ibcm_query_gid(dev_b, 1, 0, &gid_b), 0);
  CHECK_EQ(ibcm_init_path(dev_a, 1, &gid_b, &path_ab), 0);
}

void test_finish(void) {
  CHECK_EQ(ibcm_close_device(dev_a), 0);
  if (dev_b)
    CHECK_EQ(ibcm_close_device(dev_b), 0);
  dev_a = dev_b = NULL;
  log_free();
  if (log_.cv_ready)
    pthread_cond_destroy(&log_.cv);
  log_.cv_ready = 0;
}

/* ---- connections ---------------------------------------------------------- */

void conn_opts_default(struct conn_opts *o) {
  o->service_id = SERVICE_ID;
  o->remote_cm_response_timeout = 12;
  o->local_cm_response_timeout = 12;
  o->max_cm_retries = 5;
  o->packet_life_time = 0;
}

void conn_opts_slow(struct conn_opts *o) {
  conn_opts_default(o);
  o->remote_cm_response_timeout = 20;
  o->local_cm_response_timeout = 20;
  o->packet_life_time = 18;
}

uint32_t next_qpn(void) {
  static atomic_uint qpn = 0x000100;
  return atomic_fetch_add(&qpn, 1) & 0x7fffff;
}

struct ib_cm_id *create_id(struct ib_device *dev, ib_cm_handler handler,
                           void *context) {
  struct ib_cm_id *id = ib_create_cm_id(dev, handler, context);
  if (IS_ERR(id))
    test_fail(__FILE__, __LINE__, "ib_create_cm_id: %ld", PTR_ERR(id));
  CHECK(id != NULL);
  CHECK_STATE(id, IB_CM_IDLE);
  CHECK(id->cm_handler == handler);
  CHECK(id->context == context);
  CHECK(id->device == dev);
  return id;
}

struct ib_cm_id *listen_b(uint64_t service_id, ib_cm_handler handler,
                          void *context) {
  struct ib_cm_id *id = create_id(dev_b, handler, context);
  CHECK_EQ(ib_cm_listen(id, htobe64(service_id)), 0);
  CHECK_STATE(id, IB_CM_LISTEN);
  CHECK(id->service_id == htobe64(service_id));
  return id;
}

static atomic_int hold_entered, hold_released;

static int holding_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if (event->event != IB_CM_REQ_RECEIVED)
    return 0;
  hold_entered = 1;
  for (int i = 0; i < TIMEOUT_MS && !hold_released; i++)
    sleep_ms(1);
  return -1; /* destroy the new id: nothing to answer */
}

void worker_hold_start(struct worker_hold *h) {
  hold_entered = hold_released = 0;
  h->listener = listen_b(SERVICE_ID, holding_handler, NULL);
  struct conn_opts o;
  conn_opts_slow(&o);
  struct sa_path_rec path;
  conn_path(&path, &o);
  struct ib_cm_req_param req;
  req_param_init(&req, &path, &o, next_qpn());
  h->active = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(h->active, &req), 0);
  for (int i = 0; i < TIMEOUT_MS && !hold_entered; i++)
    sleep_ms(1);
  CHECK(hold_entered);
}

void worker_hold_release(void) { hold_released = 1; }

int worker_hold_released(void) { return hold_released; }

void worker_hold_end(struct worker_hold *h) {
  wait_event(h->active, IB_CM_REJ_RECEIVED);
  ib_destroy_cm_id(h->active);
  ib_destroy_cm_id(h->listener);
}

void conn_path(struct sa_path_rec *path, const struct conn_opts *o) {
  *path = path_ab;
  if (o->packet_life_time)
    path->packet_life_time = o->packet_life_time;
}

void req_param_init(struct ib_cm_req_param *p, struct sa_path_rec *path,
                    const struct conn_opts *o, uint32_t qpn) {
  static uint8_t pd[IB_CM_REQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), REQ_PD_SEED);
  memset(p, 0, sizeof(*p));
  p->primary_path = path;
  p->service_id = htobe64(o->service_id);
  p->qp_num = qpn;
  p->qp_type = IB_QPT_RC;
  p->starting_psn = 0x00a1a1a1;
  p->private_data = pd;
  p->private_data_len = sizeof(pd);
  p->responder_resources = 4;
  p->initiator_depth = 4;
  p->remote_cm_response_timeout = o->remote_cm_response_timeout;
  p->local_cm_response_timeout = o->local_cm_response_timeout;
  p->retry_count = 7;
  p->rnr_retry_count = 7;
  p->max_cm_retries = o->max_cm_retries;
}

struct ib_cm_id *send_req_with(const struct conn_opts *o) {
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, o);
  req_param_init(&req, &path, o, next_qpn());
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  return a;
}

struct ib_cm_id *send_slow_req(uint64_t service_id) {
  struct conn_opts o;
  conn_opts_slow(&o);
  o.service_id = service_id;
  return send_req_with(&o);
}

void connect_pair(struct ib_cm_id *listener, struct ib_cm_id *a,
                  const struct conn_opts *o, struct conn *c) {
  struct conn_opts defaults;
  if (!o) {
    conn_opts_default(&defaults);
    o = &defaults;
  }
  if (!a)
    a = create_id(dev_a, test_handler, NULL);
  memset(c, 0, sizeof(*c));
  c->a = a;
  c->qpn_a = next_qpn();
  c->qpn_b = rep_qpn(c->qpn_a);

  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, o);
  req_param_init(&req, &path, o, c->qpn_a);
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_req(a, &req), 0);

  c->b = wait_req_received(mark, listener, c->qpn_a)->id;
  wait_event_from(mark, c->a, IB_CM_REP_RECEIVED, TIMEOUT_MS);
  wait_event_from(mark, c->b, IB_CM_RTU_RECEIVED, TIMEOUT_MS);
  CHECK_STATE(c->a, IB_CM_ESTABLISHED);
  CHECK_STATE(c->b, IB_CM_ESTABLISHED);
}

void disconnect_pair(struct conn *c) {
  unsigned mark = log_mark();
  CHECK_EQ(ib_send_cm_dreq(c->a, NULL, 0), 0);
  wait_event_from(mark, c->b, IB_CM_DREQ_RECEIVED, TIMEOUT_MS);
  wait_event_from(mark, c->a, IB_CM_DREP_RECEIVED, TIMEOUT_MS);
  wait_event_from(mark, c->a, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  wait_event_from(mark, c->b, IB_CM_TIMEWAIT_EXIT, TIMEOUT_MS);
  CHECK_STATE(c->a, IB_CM_IDLE);
  CHECK_STATE(c->b, IB_CM_IDLE);
}

void expect_pd_call_einval(const char *file, int line, const char *name, pd_call_fn call,
                           size_t pd_len, struct ib_cm_id *id, enum ib_cm_state state) {
  uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  CHECK(pd_len <= sizeof(pd));
  fill_pattern(pd, pd_len, 1);
  if (id->state != state)
    test_fail(file, line, "state is %s, expected %s", state_name(id->state),
              state_name(state));
  int rc1 = call(id, NULL, 0);
  int rc2 = call(id, pd, (uint8_t)pd_len);
  if (rc1 != -EINVAL || rc2 != -EINVAL)
    test_fail(file, line, "%s in %s: %d / %d, expected -EINVAL", name, state_name(state), rc1,
              rc2);
  if (id->state != state)
    test_fail(file, line, "%s in %s moved the id to %s", name, state_name(state),
              state_name(id->state));
}
