/*
 * Lifecycle stress: four threads race, for IBCM_STRESS_SECONDS (default 3),
 * over the whole life of cm_ids, the way a long-running daemon churns them:
 *
 *   - create ids on A (active) and B (listeners), listen on a small shared
 *     pool of service IDs (so -EBUSY races happen), connect (REQ -> REP -> RTU
 *     from the handlers), DREQ / DREP / REJ at random;
 *   - destroy ids at random moments, including ids other threads are using
 *     right now (their calls must give -EINVAL, never crash) and a listener
 *     while REQs for it are queued, freeing its malloc'd context as soon as
 *     ib_destroy_cm_id returns (issue 10 point 1);
 *   - listen and send REQs on ids that another thread is destroying (point 3);
 *   - create ids on a third device while another thread closes and reopens it
 *     (point 2): when ibcm_close_device returns 0, no id may exist on it.
 *
 * Every id has its own malloc'd context; ib_destroy_cm_id is called once per
 * id (a per-slot claim), and the context is freed right after it returns (with
 * AddressSanitizer; without it, it is marked dead and freed a little later so
 * that a late event is seen without ASan too). Handlers check that each id's
 * events form a sequence the kernel's state machine can produce, and that no
 * event arrives after destroy returned.
 *
 * Every 250 ms the threads pause and, with no call in flight, the test checks
 * that each service ID no live id listens on can be listened on afresh, and
 * that the third device closes once its ids are gone. At the end every id is
 * destroyed, ibcm_get_stats must come back to zero ids, timers and queued work,
 * and all devices close with 0. A watchdog (alarm) fails the test on a
 * deadlock.
 */
#include "common.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FREE_AT_ONCE 1 /* ASan reports any later access to the context */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FREE_AT_ONCE 1
#endif
#endif
#ifndef FREE_AT_ONCE
#define FREE_AT_ONCE 0
#endif

#define THREADS 4
#define SLOTS 64
#define SERVICES 4
#define SVC_BASE 0x00000000515e0000ULL /* host order; + 0..SERVICES-1 */
#define SVC_C 0x00000000515ec000ULL    /* on the third device */
#define PAUSE_EVERY_MS 250
#define MAX_EV 12
#define EXAMPLES 5 /* failures of one kind printed in full */

/* ---- what can go wrong, counted ----------------------------------------- */

enum failure {
  F_ILLEGAL,         /* an event sequence the kernel cannot produce */
  F_LATE_EVENT,      /* an event after ib_destroy_cm_id returned */
  F_DEAD_LISTENER,   /* REQ_RECEIVED for a listener already destroyed */
  F_ERRNO,           /* a call returned an errno not in docs/bad-input.md */
  F_FRESH_LISTEN,    /* a free service ID refused to a fresh listener */
  F_CLOSED_DEVICE,   /* an id exists on a device whose close returned 0 */
  F_CLOSE,           /* close of a device without ids failed, or did not with */
  F_COUNT
};
static const char *const failure_name[F_COUNT] = {
    "event sequences the kernel cannot produce",
    "events after ib_destroy_cm_id returned",
    "REQ_RECEIVED after its listener was destroyed",
    "unexpected return values",
    "fresh ib_cm_listen on a free service ID refused",
    "ids alive on a device whose ibcm_close_device returned 0",
    "ibcm_close_device results that contradict the ids alive",
};
static atomic_int failures[F_COUNT];

static void failure(enum failure f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void failure(enum failure f, const char *fmt, ...) {
  if (atomic_fetch_add(&failures[f], 1) >= EXAMPLES)
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "lifecycle: %s: %s\n", failure_name[f], line);
}

/* ---- per-id contexts ---------------------------------------------------- */

#define CTX_LIVE 0x6c6976652d637478ULL /* "live-ctx" */
#define CTX_DEAD 0x646561642d637478ULL /* "dead-ctx" */

enum role { R_IDLE, R_LISTENER, R_ACTIVE, R_PASSIVE, R_DEVC };

/* The kernel's states as seen from the events, as a set of possible states
 * (user calls from other threads move an id without an event). */
enum {
  S_IDLE = 1 << 0,
  S_REQ_SENT = 1 << 1, /* and MRA_REQ_RCVD */
  S_REQ_RCVD = 1 << 2, /* and MRA_REQ_SENT */
  S_REP_SENT = 1 << 3, /* and MRA_REP_RCVD */
  S_REP_RCVD = 1 << 4, /* and MRA_REP_SENT */
  S_ESTABLISHED = 1 << 5,
  S_DREQ_SENT = 1 << 6,
  S_DREQ_RCVD = 1 << 7,
  S_TIMEWAIT = 1 << 8,
  S_LISTEN = 1 << 9,
};

struct ctx {
  _Atomic uint64_t magic;
  atomic_int role;
  int slot;
  /* Touched by the worker only (one event at a time per id). */
  unsigned states;
  int nev;
  enum ib_cm_event_type ev[MAX_EV];
};

static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;
#define RETIRED 4096
static struct ctx *retired[RETIRED];
static unsigned retired_next;

static struct ctx *ctx_new(enum role role, unsigned states) {
  struct ctx *c = calloc(1, sizeof(*c));
  CHECK(c != NULL);
  atomic_store(&c->magic, CTX_LIVE);
  atomic_store(&c->role, role);
  c->slot = -1;
  c->states = states;
  return c;
}

/* After ib_destroy_cm_id returned: no handler may touch `c` any more. */
static void ctx_retire(struct ctx *c) {
  atomic_store(&c->magic, CTX_DEAD);
  if (FREE_AT_ONCE) {
    free(c);
    return;
  }
  pthread_mutex_lock(&retired_mu);
  struct ctx *old = retired[retired_next];
  retired[retired_next] = c;
  retired_next = (retired_next + 1) % RETIRED;
  pthread_mutex_unlock(&retired_mu);
  free(old);
}

static void ctx_free_retired(void) {
  for (int i = 0; i < RETIRED; i++) {
    free(retired[i]);
    retired[i] = NULL;
  }
}

/* ---- slots: every id the test knows --------------------------------------- */

enum { EMPTY, BUSY, LIVE, DYING };
enum { ON_A, ON_B };

struct slot {
  atomic_int state;
  struct ib_cm_id *_Atomic id;
  struct ctx *_Atomic ctx;
  atomic_int dev;
};
static struct slot slots[SLOTS];
static atomic_int recent = -1; /* the slot filled last: a favourite to destroy */

static int claim_empty(unsigned start) {
  for (int i = 0; i < SLOTS; i++) {
    int j = (int)((start + (unsigned)i) % SLOTS);
    int expect = EMPTY;
    if (atomic_compare_exchange_strong(&slots[j].state, &expect, BUSY))
      return j;
  }
  return -1;
}

static void publish(int j, struct ib_cm_id *id, struct ctx *c, int dev) {
  c->slot = j;
  atomic_store(&slots[j].id, id);
  atomic_store(&slots[j].ctx, c);
  atomic_store(&slots[j].dev, dev);
  atomic_store(&slots[j].state, LIVE);
  atomic_store(&recent, j);
}

static void unclaim(int j) { atomic_store(&slots[j].state, EMPTY); }

static int claim_live(int j) {
  int expect = LIVE;
  return j >= 0 && atomic_compare_exchange_strong(&slots[j].state, &expect, DYING);
}

static atomic_long destroys;

/* The slot's id is gone when this returns, and its context freed. */
static void destroy_claimed(int j) {
  struct ib_cm_id *id = atomic_load(&slots[j].id);
  struct ctx *c = atomic_load(&slots[j].ctx);
  ib_destroy_cm_id(id);
  ctx_retire(c);
  atomic_store(&slots[j].id, NULL);
  atomic_store(&slots[j].ctx, NULL);
  atomic_fetch_add(&destroys, 1);
  atomic_store(&slots[j].state, EMPTY);
}

/* Any id, possibly being destroyed right now by another thread. */
static struct ib_cm_id *some_id(unsigned r) {
  return atomic_load(&slots[r % SLOTS].id);
}

/* ---- the third device: create vs close ---------------------------------- */

static struct ib_device *_Atomic dev_c; /* NULL while it is being reopened */
static atomic_uint dev_c_epoch;         /* +1 at each reopen */
static atomic_uint dev_c_closed_epoch;  /* epoch+1 once that epoch's close returned 0 */
static atomic_int dev_c_in_flight;      /* threads that may hold the pointer */
static atomic_int dev_c_closer;         /* one closer at a time */
static atomic_int dev_c_closing;        /* a close may be under way */
static atomic_long dev_c_creates, dev_c_refused, dev_c_closes;

static const char *dev_c_name(void) { return "loop2"; }

/* ---- the event handler ---------------------------------------------------- */

static atomic_long events, established, reqs_received, rep_errors;
static atomic_long by_type[IB_CM_SIDR_REP_RECEIVED + 1];

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

/* What other threads' calls can do to an id without any event. */
static unsigned user_moves(unsigned s) {
  for (;;) {
    unsigned n = s;
    if (s & S_IDLE) n |= S_REQ_SENT | S_LISTEN;           /* send_req, listen */
    if (s & S_REQ_SENT) n |= S_IDLE;                      /* rej */
    if (s & S_REQ_RCVD) n |= S_REP_SENT | S_IDLE;         /* rep, rej */
    if (s & S_REP_SENT) n |= S_TIMEWAIT;                  /* rej */
    if (s & S_REP_RCVD) n |= S_ESTABLISHED | S_IDLE;      /* rtu, rej */
    if (s & S_ESTABLISHED) n |= S_DREQ_SENT | S_TIMEWAIT; /* dreq (sent or not) */
    if (s & S_DREQ_RCVD) n |= S_TIMEWAIT;                 /* drep */
    if (n == s)
      return s;
    s = n;
  }
}

/* The states `ev` can be delivered in, and where it leads from each. */
static unsigned after_event(unsigned s, enum ib_cm_event_type ev) {
  unsigned n = 0;
  switch (ev) {
  case IB_CM_REP_RECEIVED:
    if (s & S_REQ_SENT) n |= S_REP_RCVD;
    break;
  case IB_CM_RTU_RECEIVED:
    if (s & S_REP_SENT) n |= S_ESTABLISHED;
    break;
  case IB_CM_REJ_RECEIVED: /* IDLE, or TIMEWAIT for a stale connection */
    if (s & (S_REQ_SENT | S_REQ_RCVD | S_REP_SENT)) n |= S_IDLE | S_TIMEWAIT;
    if (s & (S_REP_RCVD | S_ESTABLISHED | S_DREQ_SENT)) n |= S_TIMEWAIT;
    break;
  case IB_CM_REQ_ERROR:
    if (s & S_REQ_SENT) n |= S_IDLE;
    break;
  case IB_CM_REP_ERROR:
    if (s & S_REP_SENT) n |= S_IDLE;
    break;
  case IB_CM_MRA_RECEIVED:
    n |= s & (S_REQ_SENT | S_REP_SENT);
    break;
  case IB_CM_DREQ_RECEIVED:
    if (s & (S_REP_SENT | S_ESTABLISHED | S_DREQ_SENT)) n |= S_DREQ_RCVD;
    break;
  case IB_CM_DREP_RECEIVED:
    if (s & (S_DREQ_SENT | S_DREQ_RCVD)) n |= S_TIMEWAIT;
    break;
  case IB_CM_DREQ_ERROR:
    if (s & S_DREQ_SENT) n |= S_TIMEWAIT;
    break;
  case IB_CM_TIMEWAIT_EXIT:
    if (s & S_TIMEWAIT) n |= S_IDLE;
    break;
  default:
    break;
  }
  return n;
}

static void log_event(struct ctx *c, enum ib_cm_event_type ev) {
  if (c->nev < MAX_EV)
    c->ev[c->nev] = ev;
  c->nev++;
}

static void report_sequence(struct ib_cm_id *id, struct ctx *c) {
  char line[400];
  size_t off = 0;
  for (int i = 0; i < c->nev && i < MAX_EV && off < sizeof(line); i++)
    off += (size_t)snprintf(line + off, sizeof(line) - off, " %s", event_name(c->ev[i]));
  failure(F_ILLEGAL, "id %p (role %d):%s", (void *)id, atomic_load(&c->role), line);
}

static int check_errno(const char *call, int rc, int also) {
  if (rc != 0 && rc != -EINVAL && rc != also)
    failure(F_ERRNO, "%s returned %d", call, rc);
  return rc;
}

/* Keeps the worker busy now and then, so that MADs and events queue up. */
static void maybe_slow(void) {
  static _Thread_local unsigned seed = 12345;
  if (rnd(&seed) % 48 == 0)
    usleep(1000);
}

static void rep_param_init(struct ib_cm_rep_param *rep, uint32_t remote_qpn) {
  memset(rep, 0, sizeof(*rep));
  rep->qp_num = rep_qpn(remote_qpn);
  rep->starting_psn = REP_PSN;
  rep->responder_resources = REP_RESPONDER_RESOURCES;
  rep->initiator_depth = REP_INITIATOR_DEPTH;
  rep->rnr_retry_count = REP_RNR_RETRY_COUNT;
}

static int on_req(struct ib_cm_id *child, const struct ib_cm_event *e, struct ctx *lc) {
  static _Thread_local unsigned seed = 777;
  atomic_fetch_add(&reqs_received, 1);
  /* The child starts with its listener's context: the listener must exist. */
  if (atomic_load(&lc->magic) != CTX_LIVE) {
    failure(F_DEAD_LISTENER, "child %p of listener %p: the listener's context was freed",
            (void *)child, (void *)e->param.req_rcvd.listen_id);
    return -1;
  }
  unsigned r = rnd(&seed);
  if (r % 16 == 0)
    return -1; /* the CM rejects and destroys the child */
  if (r % 16 == 1) { /* reject it ourselves, then let the CM destroy it */
    check_errno("ib_send_cm_rej(REQ_RCVD)",
                ib_send_cm_rej(child, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, NULL, 0), 0);
    return 1;
  }
  struct ctx *c = ctx_new(R_PASSIVE, S_REQ_RCVD);
  int j = claim_empty(r);
  if (j < 0) {
    free(c);
    return -1;
  }
  log_event(c, IB_CM_REQ_RECEIVED);
  child->context = c;
  publish(j, child, c, ON_B);
  struct ib_cm_rep_param rep;
  rep_param_init(&rep, e->param.req_rcvd.remote_qpn);
  check_errno("ib_send_cm_rep", ib_send_cm_rep(child, &rep), 0);
  return 0;
}

static int handler(struct ib_cm_id *id, const struct ib_cm_event *e) {
  static _Thread_local unsigned seed = 4242;
  struct ctx *c = id->context;
  atomic_fetch_add(&events, 1);
  if ((unsigned)e->event <= IB_CM_SIDR_REP_RECEIVED)
    atomic_fetch_add(&by_type[e->event], 1);
  maybe_slow();
  CHECK(c != NULL);
  if (e->event == IB_CM_REQ_RECEIVED)
    return on_req(id, e, c);
  if (atomic_load(&c->magic) != CTX_LIVE) {
    failure(F_LATE_EVENT, "%s for id %p whose destroy had returned", event_name(e->event),
            (void *)id);
    return 0;
  }
  log_event(c, e->event);
  unsigned before = user_moves(c->states);
  c->states = after_event(before, e->event);
  if (!c->states) {
    report_sequence(id, c);
    c->states = S_IDLE | S_TIMEWAIT | S_ESTABLISHED; /* report once, go on */
  }
  unsigned r = rnd(&seed);
  switch (e->event) {
  case IB_CM_REP_RECEIVED:
    /* Now and then the id is destroyed from inside its own handler (the CM
     * rejects the REP); only the slot's owner may do that (the claim). */
    if (r % 32 == 0 && claim_live(c->slot)) {
      destroy_claimed(c->slot);
      return 0;
    }
    if (check_errno("ib_send_cm_rtu", ib_send_cm_rtu(id, NULL, 0), 0) == 0)
      atomic_fetch_add(&established, 1);
    break;
  case IB_CM_RTU_RECEIVED:
    atomic_fetch_add(&established, 1);
    break;
  case IB_CM_DREQ_RECEIVED:
    if (r % 4)
      check_errno("ib_send_cm_drep", ib_send_cm_drep(id, NULL, 0), 0);
    break;
  case IB_CM_REP_ERROR:
    atomic_fetch_add(&rep_errors, 1);
    break;
  default:
    break;
  }
  return 0;
}

/* ---- operations ------------------------------------------------------------ */

static uint64_t service(unsigned r) { return SVC_BASE + r % SERVICES; }

static struct ib_cm_id *create_in_slot(int j, struct ib_device *dev, int on, enum role role,
                                       unsigned states) {
  struct ctx *c = ctx_new(role, states);
  struct ib_cm_id *id = ib_create_cm_id(dev, handler, c);
  if (IS_ERR(id)) {
    failure(F_ERRNO, "ib_create_cm_id: %ld", PTR_ERR(id));
    free(c);
    unclaim(j);
    return NULL;
  }
  publish(j, id, c, on);
  return id;
}

static void send_req(struct ib_cm_id *id, uint64_t svc) {
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = svc;
  o.remote_cm_response_timeout = 18; /* 1 s: a REQ never times out here */
  o.local_cm_response_timeout = 14;  /* 64 ms per REP, 5 retries */
  struct sa_path_rec path;
  struct ib_cm_req_param req;
  conn_path(&path, &o);
  req_param_init(&req, &path, &o, next_qpn());
  check_errno("ib_send_cm_req", ib_send_cm_req(id, &req), 0);
}

/* A new id on A that connects at once (while others may destroy it). */
static void op_connect(unsigned r) {
  int j = claim_empty(r);
  if (j < 0)
    return;
  struct ib_cm_id *id = create_in_slot(j, dev_a, ON_A, R_ACTIVE, S_IDLE);
  if (id)
    send_req(id, service(r >> 4));
}

/* A new id on B that listens at once (while others may destroy it). */
static void op_listen_new(unsigned r) {
  int j = claim_empty(r);
  if (j < 0)
    return;
  struct ib_cm_id *id = create_in_slot(j, dev_b, ON_B, R_LISTENER, S_IDLE);
  if (id)
    check_errno("ib_cm_listen", ib_cm_listen(id, htobe64(service(r >> 4))), -EBUSY);
}

static void op_destroy(int j) {
  if (claim_live(j))
    destroy_claimed(j);
}

/* A listener goes away while REQs for it are on their way or queued; its
 * context is freed as soon as ib_destroy_cm_id returns. */
static void op_destroy_listener_under_reqs(unsigned r) {
  int j = -1;
  for (int i = 0; i < SLOTS && j < 0; i++) {
    int k = (int)((r + (unsigned)i) % SLOTS);
    if (!claim_live(k))
      continue;
    /* Ours now: nobody else destroys it, so its fields can be read. */
    struct ib_cm_id *id = atomic_load(&slots[k].id);
    if (id->state == IB_CM_LISTEN)
      j = k;
    else
      atomic_store(&slots[k].state, LIVE);
  }
  if (j < 0)
    return;
  uint64_t svc = be64toh(atomic_load(&slots[j].id)->service_id);
  for (int n = 0; n < 3; n++) {
    int k = claim_empty(r + (unsigned)n);
    if (k < 0)
      break;
    struct ib_cm_id *a = create_in_slot(k, dev_a, ON_A, R_ACTIVE, S_IDLE);
    if (a)
      send_req(a, svc);
  }
  for (unsigned spin = (r >> 8) % 2000; spin; spin--)
    sched_yield();
  destroy_claimed(j);
}

static uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];

static void op_random_call(unsigned r) {
  struct ib_cm_id *id = some_id(r);
  if (!id)
    return;
  unsigned len = (r >> 6) % 225;
  const void *data = (r >> 5) & 1 ? pd : NULL;
  switch ((r >> 16) % 6) {
  case 0: case 1:
    check_errno("ib_send_cm_dreq", ib_send_cm_dreq(id, data, (uint8_t)(len % 221)), 0);
    break;
  case 2:
    check_errno("ib_send_cm_drep", ib_send_cm_drep(id, data, (uint8_t)len), 0);
    break;
  case 3:
    check_errno("ib_send_cm_rej",
                ib_send_cm_rej(id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, data, (uint8_t)(len % 149)),
                0);
    break;
  case 4:
    check_errno("ib_cm_listen", ib_cm_listen(id, htobe64(service(r >> 8))), -EBUSY);
    break;
  case 5:
    send_req(id, service(r >> 8));
    break;
  }
}

/* A duel (point 3): one thread creates ids and, at the same moment, listens
 * on each or sends a REQ from it, while a partner thread destroys it. They
 * meet through `duel` and then go in lockstep for DUEL_ROUNDS ids, each
 * round started by both within a few hundred nanoseconds when both run. */
#define DUEL_ROUNDS 8
enum { DUEL_IDLE, DUEL_SETUP, DUEL_OPEN, DUEL_ON };
static struct {
  atomic_int state;
  atomic_int listen; /* else send a REQ */
  atomic_int slot;   /* this round's id, -1: none */
  atomic_int ready;  /* the challenger's round, -1: over */
  atomic_int go;     /* the partner's round */
} duel = {.state = DUEL_IDLE};
static atomic_long duels;

/* Spins (hot at first, then yielding) until *v == want or *v == -1, for
 * 20 ms at most. */
static int spin_until(atomic_int *v, int want) {
  long long end = 0;
  for (long n = 0;; n++) {
    int got = atomic_load(v);
    if (got == want || got == -1)
      return got == want;
    if (n < 2000)
      continue;
    if (!end)
      end = now_ms() + 20;
    else if (now_ms() > end)
      return 0;
    sched_yield();
  }
}

static void op_duel(unsigned r) {
  int expect = DUEL_IDLE;
  if (!atomic_compare_exchange_strong(&duel.state, &expect, DUEL_SETUP))
    return;
  int listen = r & 1;
  atomic_store(&duel.listen, listen);
  atomic_store(&duel.ready, 0);
  atomic_store(&duel.go, 0);
  atomic_store(&duel.state, DUEL_OPEN);
  if (!spin_until(&duel.state, DUEL_ON)) {
    expect = DUEL_OPEN;
    if (atomic_compare_exchange_strong(&duel.state, &expect, DUEL_IDLE))
      return; /* nobody came */
  }
  for (int round = 1; round <= DUEL_ROUNDS; round++) {
    int j = claim_empty(r + (unsigned)round);
    struct ib_cm_id *id = NULL;
    if (j >= 0)
      id = listen ? create_in_slot(j, dev_b, ON_B, R_LISTENER, S_IDLE)
                  : create_in_slot(j, dev_a, ON_A, R_ACTIVE, S_IDLE);
    atomic_store(&duel.slot, id ? j : -1);
    atomic_store(&duel.ready, round);
    if (!spin_until(&duel.go, round))
      break;
    if (!id)
      continue;
    if (listen)
      check_errno("ib_cm_listen", ib_cm_listen(id, htobe64(service(r >> 4))), -EBUSY);
    else
      send_req(id, service(r >> 4));
  }
  atomic_store(&duel.ready, -1); /* the partner ends the duel */
}

static void op_duel_partner(void) {
  int expect = DUEL_OPEN;
  if (!atomic_compare_exchange_strong(&duel.state, &expect, DUEL_ON))
    return;
  for (int round = 1;; round++) {
    while (!spin_until(&duel.ready, round))
      if (atomic_load(&duel.ready) == -1)
        goto over;
    int j = atomic_load(&duel.slot);
    int mine = j >= 0 && claim_live(j);
    atomic_store(&duel.go, round);
    if (mine) {
      atomic_fetch_add(&duels, 1);
      destroy_claimed(j);
    }
  }
over:
  atomic_store(&duel.go, -1);
  atomic_store(&duel.state, DUEL_IDLE);
}

/* Create (and listen on) ids of the third device while it may be closing. */
static void op_dev_c_create(unsigned r) {
  for (int n = 0; n < 16; n++) {
    atomic_fetch_add(&dev_c_in_flight, 1);
    struct ib_device *dev = atomic_load(&dev_c);
    unsigned epoch = atomic_load(&dev_c_epoch);
    if (dev) {
      struct ctx *c = ctx_new(R_DEVC, S_IDLE);
      struct ib_cm_id *id = ib_create_cm_id(dev, handler, c);
      if (IS_ERR(id)) {
        if (PTR_ERR(id) != -EINVAL ||
            (!atomic_load(&dev_c_closing) && atomic_load(&dev_c_closed_epoch) <= epoch))
          failure(F_ERRNO, "ib_create_cm_id on an open device: %ld", PTR_ERR(id));
        atomic_fetch_add(&dev_c_refused, 1);
        free(c);
      } else {
        atomic_fetch_add(&dev_c_creates, 1);
        if ((r >> n) & 1)
          check_errno("ib_cm_listen", ib_cm_listen(id, htobe64(SVC_C + n % 2)), -EBUSY);
        sched_yield();
        if (atomic_load(&dev_c_closed_epoch) > epoch)
          failure(F_CLOSED_DEVICE, "id %p created on %s, which ibcm_close_device closed (0)",
                  (void *)id, dev_c_name());
        ib_destroy_cm_id(id);
        ctx_retire(c);
      }
    }
    atomic_fetch_sub(&dev_c_in_flight, 1);
  }
}

static void reopen_dev_c(void) {
  struct ib_device *dev = ibcm_open_device(dev_c_name());
  if (IS_ERR(dev))
    test_fail(__FILE__, __LINE__, "reopening %s: %ld", dev_c_name(), PTR_ERR(dev));
  atomic_fetch_add(&dev_c_epoch, 1);
  atomic_store(&dev_c, dev);
}

/* Close the third device as soon as its ids are gone, then reopen it. */
static void op_dev_c_close(void) {
  int expect = 0;
  if (!atomic_compare_exchange_strong(&dev_c_closer, &expect, 1))
    return;
  struct ib_device *dev = atomic_load(&dev_c);
  unsigned epoch = atomic_load(&dev_c_epoch);
  atomic_store(&dev_c_closing, 1);
  for (int n = 0; n < 64 && dev; n++) {
    int rc = ibcm_close_device(dev);
    if (rc == -EBUSY) {
      sched_yield();
      continue;
    }
    CHECK_EQ(rc, 0);
    atomic_fetch_add(&dev_c_closes, 1);
    atomic_store(&dev_c_closed_epoch, epoch + 1);
    atomic_store(&dev_c, NULL);
    while (atomic_load(&dev_c_in_flight))
      sched_yield();
    reopen_dev_c();
    break;
  }
  atomic_store(&dev_c_closing, 0);
  atomic_store(&dev_c_closer, 0);
}

/* ---- threads, pauses, the end -------------------------------------------- */

static atomic_int stop, pause_req, paused;
static atomic_long ops;

static void *hammer(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 17;
  while (!atomic_load(&stop)) {
    if (atomic_load(&pause_req)) {
      atomic_fetch_add(&paused, 1);
      while (atomic_load(&pause_req))
        usleep(200);
      atomic_fetch_sub(&paused, 1);
      continue;
    }
    unsigned r = rnd(&seed);
    switch (r % 24) {
    case 0: case 1: case 2:
      op_connect(r >> 5);
      break;
    case 3: case 4:
      op_listen_new(r >> 5);
      break;
    case 5: /* the id created last: its creator may still be using it */
      op_destroy(atomic_load(&recent));
      break;
    case 6: case 7: case 8:
      op_destroy((int)((r >> 5) % SLOTS));
      break;
    case 9:
      op_destroy_listener_under_reqs(r >> 5);
      break;
    case 10: case 11: case 12: case 13: case 14: case 15:
      op_random_call(r >> 5);
      break;
    case 16: case 17:
      op_dev_c_create(r >> 5);
      break;
    case 18:
      op_dev_c_close();
      break;
    case 19:
      op_duel(r >> 5);
      break;
    case 20: case 21: case 22:
      op_duel_partner();
      break;
    default:
      break;
    }
    atomic_fetch_add(&ops, 1);
  }
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_lifecycle_stress: watchdog fired: deadlock?\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(1);
}

static void pause_threads(void) {
  atomic_store(&pause_req, 1);
  long long end = now_ms() + TIMEOUT_MS;
  while (atomic_load(&paused) < THREADS) {
    CHECK(now_ms() < end);
    usleep(100);
  }
}

static void resume_threads(void) { atomic_store(&pause_req, 0); }

static atomic_long fresh_listens;

/* With no call in flight: a service ID that no live id listens on is free. */
static void check_services_free(unsigned round) {
  for (unsigned s = 0; s < SERVICES; s++) {
    uint64_t svc = SVC_BASE + s;
    int held = 0;
    for (int j = 0; j < SLOTS; j++) {
      struct ib_cm_id *id = atomic_load(&slots[j].id);
      int st = atomic_load(&slots[j].state);
      if (id && (st == LIVE || st == DYING) && atomic_load(&slots[j].dev) == ON_B &&
          id->state == IB_CM_LISTEN && id->service_id == htobe64(svc))
        held = 1;
    }
    if (held)
      continue;
    int j = claim_empty(round + s);
    if (j < 0)
      continue;
    struct ib_cm_id *id = create_in_slot(j, dev_b, ON_B, R_LISTENER, S_IDLE);
    if (!id)
      continue;
    int rc = ib_cm_listen(id, htobe64(svc));
    atomic_fetch_add(&fresh_listens, 1);
    if (rc != 0)
      failure(F_FRESH_LISTEN, "ib_cm_listen(0x%llx) on a fresh id: %d, and no live id listens there",
              (unsigned long long)svc, rc);
  }
}

/* With no call in flight: the third device has no ids; one makes it busy. */
static void check_dev_c_close(void) {
  struct ib_device *dev = atomic_load(&dev_c);
  struct ctx *c = ctx_new(R_DEVC, S_IDLE);
  struct ib_cm_id *id = ib_create_cm_id(dev, handler, c);
  CHECK(!IS_ERR(id));
  int rc = ibcm_close_device(dev);
  if (rc != -EBUSY)
    failure(F_CLOSE, "ibcm_close_device with an id on it: %d", rc);
  ib_destroy_cm_id(id);
  ctx_retire(c);
  if (rc == 0) {
    reopen_dev_c();
    return;
  }
  rc = ibcm_close_device(dev);
  if (rc != 0) {
    failure(F_CLOSE, "ibcm_close_device with no id left: %d", rc);
    return;
  }
  atomic_fetch_add(&dev_c_closes, 1);
  reopen_dev_c();
}

static int stress_seconds(void) {
  const char *s = getenv("IBCM_STRESS_SECONDS");
  int n = s && *s ? atoi(s) : 3;
  return n > 0 ? n : 3;
}

int main(void) {
  require_loop(); /* a third loop device, timing: the in-process fabric */
  int seconds = stress_seconds();
  signal(SIGALRM, watchdog);
  alarm((unsigned)seconds + 120);
  test_init();
  fill_pattern(pd, sizeof(pd), 0x5a);
  reopen_dev_c();

  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_create(&t[i], NULL, hammer, (void *)i), 0);
  long long t0 = now_ms(), end = t0 + (long long)seconds * 1000;
  unsigned rounds = 0;
  while (now_ms() < end) {
    sleep_ms(PAUSE_EVERY_MS);
    pause_threads();
    check_services_free(rounds++);
    check_dev_c_close();
    resume_threads();
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_join(t[i], NULL), 0);
  long long ran = now_ms() - t0;

  /* Tear everything down, then the library must hold nothing. Children of
   * REQs still in flight may appear meanwhile: destroy those too. */
  struct ibcm_stats st;
  long long deadline = now_ms() + 30000;
  do {
    for (int j = 0; j < SLOTS; j++)
      op_destroy(j);
    CHECK_EQ(ibcm_get_stats(&st), 0);
    if (!st.cm_ids && !st.timers && !st.queued)
      break;
    sleep_ms(10);
  } while (now_ms() < deadline);

  printf("lifecycle: %d threads, %lld ms, %u pauses, %ld ops, %ld destroys, %ld events, "
         "%ld REQs received, %ld established, %ld REP_ERROR; %s: %ld ids, %ld refused, "
         "%ld closes; %ld fresh listens, %ld duels\n",
         THREADS, ran, rounds, atomic_load(&ops), atomic_load(&destroys), atomic_load(&events),
         atomic_load(&reqs_received), atomic_load(&established), atomic_load(&rep_errors),
         dev_c_name(), atomic_load(&dev_c_creates), atomic_load(&dev_c_refused),
         atomic_load(&dev_c_closes), atomic_load(&fresh_listens), atomic_load(&duels));
  printf("lifecycle: events:");
  for (int ev = 0; ev <= IB_CM_SIDR_REP_RECEIVED; ev++)
    if (atomic_load(&by_type[ev]))
      printf(" %s %ld", event_name((enum ib_cm_event_type)ev), atomic_load(&by_type[ev]));
  printf("\n");
  printf("lifecycle: at the end: %llu cm_ids, %llu timers, %llu queued\n",
         (unsigned long long)st.cm_ids, (unsigned long long)st.timers,
         (unsigned long long)st.queued);
  int failed = 0;
  for (int f = 0; f < F_COUNT; f++) {
    int n = atomic_load(&failures[f]);
    if (n) {
      fprintf(stderr, "lifecycle: %d %s\n", n, failure_name[f]);
      failed = 1;
    }
  }
  CHECK_EQ(failed, 0);
  CHECK_EQ(st.cm_ids, 0);
  CHECK_EQ(st.timers, 0);
  CHECK_EQ(st.queued, 0);
  CHECK_EQ(ibcm_close_device(atomic_load(&dev_c)), 0);
  test_finish();
  ctx_free_retired();
  puts("lifecycle stress: OK");
  return 0;
}
