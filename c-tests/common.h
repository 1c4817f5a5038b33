/*
 * Helpers for the libib_cm C tests: two devices, a recording cm_handler, and
 * connection setup the way a kernel ULP does it.
 *
 * Include this header first (it asks for the GNU/POSIX declarations).
 *
 * Every test is one process: it calls test_init(), creates its ids with
 * test_handler (or its own handler that calls record_event() and then
 * default_reply()), waits for events with wait_event(), destroys every id and
 * ends with test_finish(), which closes both devices (0 only when no id is
 * left) and frees the event log.
 */
#ifndef IBCM_TEST_COMMON_H
#define IBCM_TEST_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <rdma/ib_cm.h>

#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- assertions ---------------------------------------------------------- */

void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

/* Fails the test (message + exit 1) unless expr holds. */
#define CHECK(expr)                                                            \
  do {                                                                         \
    if (!(expr))                                                               \
      test_fail(__FILE__, __LINE__, "CHECK failed: %s", #expr);                \
  } while (0)

/* Like CHECK(a == b), printing both values. */
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);            \
    if (check_a_ != check_b_)                                                  \
      test_fail(__FILE__, __LINE__, "CHECK_EQ failed: %s == %s (%lld vs %lld)", \
                #a, #b, check_a_, check_b_);                                   \
  } while (0)

/* cm_id->state must be `expected` (prints names). */
#define CHECK_STATE(id, expected)                                              \
  do {                                                                         \
    enum ib_cm_state check_s_ = (id)->state;                                   \
    if (check_s_ != (expected))                                                \
      test_fail(__FILE__, __LINE__, "%s->state is %s, expected %s", #id,       \
                state_name(check_s_), state_name(expected));                   \
  } while (0)

/* ---- devices ------------------------------------------------------------- */

#define TIMEOUT_MS 10000 /* how long any wait lasts before the test fails */
#define SKIP 77          /* CTest's SKIP_RETURN_CODE */

extern struct ib_device *dev_a, *dev_b;
extern union ib_gid gid_a, gid_b;
extern struct sa_path_rec path_ab; /* from A's port 1 to B's GID */

const char *dev_a_name(void); /* $IBCM_DEV_A or "loop0" */
const char *dev_b_name(void); /* $IBCM_DEV_B or "loop1" */
int devices_are_loop(void);
/* Exits 77 unless both devices are loop devices (fault injection, timing). */
void require_loop(void);

/* Opens both devices, reads their GIDs, builds path_ab. */
void test_init(void);
/* Opens device A only (a peer elsewhere: the two-VM interop suite). */
void test_init_one(void);
/* Closes the open devices (each must return 0: no id left), frees the log. */
void test_finish(void);

/* ---- the event log ------------------------------------------------------- */

/* One delivered event, copied while the handler ran. */
struct cm_ev {
  struct cm_ev *next;
  unsigned seq;             /* 0, 1, 2, ... in delivery order */
  long long t_ms;           /* monotonic time of delivery */
  struct ib_cm_id *id;      /* the cm_id the handler was called with */
  enum ib_cm_event_type type;
  enum ib_cm_state state;   /* cm_id->state when the handler was called */
  uint32_t local_id, remote_id; /* cm_id's, at delivery (__be32) */
  void *context;            /* cm_id->context at delivery */
  /* The param union as delivered. Its pointers are only valid during the
   * callback: use the copies below. */
  union ib_cm_event_param param;
  int has_path;             /* REQ_RECEIVED: *param.req_rcvd.primary_path */
  struct sa_path_rec path;
  int has_alt_path;         /* REQ_RECEIVED: *param.req_rcvd.alternate_path */
  struct sa_path_rec alt_path;
  uint8_t ari[IB_CM_REJ_ARI_LENGTH]; /* REJ_RECEIVED: the ARI bytes */
  int pd_null;              /* event->private_data was NULL */
  size_t pd_len;            /* how many bytes of private data were copied */
  uint8_t pd[224];
};

/* Appends the event to the log (thread safe). The first thing a handler does. */
void record_event(struct ib_cm_id *cm_id, const struct ib_cm_event *event);
/* The same in two steps, for a handler that acts on the event: capture it
 * first (state at delivery), publish it when done, so that a test that has
 * waited for the event also sees what the handler did. */
struct cm_ev *capture_event(struct ib_cm_id *cm_id, const struct ib_cm_event *event);
void publish_event(struct cm_ev *e);

/* The number of events logged so far: a mark for wait_event_from(). */
unsigned log_mark(void);

/* The first logged event (seq >= since) for `id` (NULL: any id) of `type`;
 * waits up to timeout_ms, then fails the test. The result stays valid until
 * test_finish(). */
const struct cm_ev *wait_event_at(const char *file, int line, unsigned since,
                                  struct ib_cm_id *id,
                                  enum ib_cm_event_type type, int timeout_ms);
#define wait_event_from(since, id, type, timeout_ms)                           \
  wait_event_at(__FILE__, __LINE__, (since), (id), (type), (timeout_ms))
#define wait_event(id, type) wait_event_from(0, (id), (type), TIMEOUT_MS)

/* REQ_RECEIVED (seq >= since) from `listener` for the REQ of QP `qpn`. */
const struct cm_ev *wait_req_received_at(const char *file, int line,
                                         unsigned since,
                                         struct ib_cm_id *listener, uint32_t qpn);
#define wait_req_received(since, listener, qpn)                                \
  wait_req_received_at(__FILE__, __LINE__, (since), (listener), (qpn))

/* Waits until `n` events of `type` (any id) have been logged. */
void wait_count_at(const char *file, int line, enum ib_cm_event_type type,
                   unsigned n, int timeout_ms);
#define wait_count(type, n, timeout_ms)                                        \
  wait_count_at(__FILE__, __LINE__, (type), (n), (timeout_ms))

/* How many events (seq >= since) for `id` (NULL: any) of `type` were logged.
 * Use a mark once ids have been destroyed: a new id may get a freed address. */
unsigned count_events_from(unsigned since, struct ib_cm_id *id,
                           enum ib_cm_event_type type);
#define count_events(id, type) count_events_from(0, (id), (type))
/* How many events (seq >= since) for `id` were logged (any type). */
unsigned count_id_events_from(unsigned since, struct ib_cm_id *id);
#define count_id_events(id) count_id_events_from(0, (id))

/* ---- the recording handler and its default replies ----------------------- */

/* capture_event() + default_reply() + publish_event(). */
int test_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event);

/* What a simple ULP answers, each switchable per test:
 *   REQ_RECEIVED  -> ib_send_cm_rep()   (reply_req)
 *   REP_RECEIVED  -> ib_send_cm_rtu()   (reply_rep)
 *   DREQ_RECEIVED -> ib_send_cm_drep()  (reply_dreq, data from set_drep_data)
 * Each reply must succeed. Returns 0. */
int default_reply(struct ib_cm_id *cm_id, const struct ib_cm_event *event);
extern atomic_int reply_req, reply_rep, reply_dreq;
/* The REP default_reply sends for the REQ of QP remote_qpn; returns the
 * result of ib_send_cm_rep. */
int answer_req(struct ib_cm_id *cm_id, uint32_t remote_qpn);
void set_drep_data(const void *data, uint8_t len); /* NULL: no private data */

/* ---- connections ---------------------------------------------------------- */

#define SERVICE_ID 0x0000000012340000ULL /* host order; ib_cm_listen gets htobe64 */

/* What goes into the REP / RTU the default replies send. */
#define REP_PSN 0x00b5b5b5u
#define REP_RESPONDER_RESOURCES 2
#define REP_INITIATOR_DEPTH 5
#define REP_RNR_RETRY_COUNT 7
#define REQ_PD_SEED 0x11
#define REP_PD_SEED 0x22
#define RTU_PD_SEED 0x33
/* B answers the REQ of QP n with QP rep_qpn(n). */
#define rep_qpn(n) (((n) ^ 0x800000u) & 0xffffffu)

struct conn_opts {
  uint64_t service_id;                /* host order */
  uint8_t remote_cm_response_timeout; /* 12: 16 ms */
  uint8_t local_cm_response_timeout;  /* 12: 16 ms */
  uint8_t max_cm_retries;             /* 5 */
  uint8_t packet_life_time;           /* of the path: 0 */
};
/* 16 ms response timeouts, 5 retries, the device's path (timewait 128 ms on
 * loop devices). */
void conn_opts_default(struct conn_opts *o);
/* Slow enough that every state holds for seconds: response timeouts 4 s and
 * a packet lifetime of 18 (timewait about 2 s). */
void conn_opts_slow(struct conn_opts *o);

uint32_t next_qpn(void); /* a fresh QP number for each REQ */

struct ib_cm_id *create_id(struct ib_device *dev, ib_cm_handler handler,
                           void *context);
/* An id on device B listening on htobe64(service_id). */
struct ib_cm_id *listen_b(uint64_t service_id, ib_cm_handler handler,
                          void *context);

/* The library's worker held up in a handler: a REQ from device A (slow
 * timers, conn_opts_slow) to a listener on SERVICE_ID of device B, whose
 * REQ_RECEIVED handler waits until worker_hold_release() (TIMEOUT_MS at most)
 * and then refuses it. worker_hold_start returns once the handler runs. */
struct worker_hold {
  struct ib_cm_id *active, *listener;
};
void worker_hold_start(struct worker_hold *h);
void worker_hold_release(void);
int worker_hold_released(void); /* whether worker_hold_release was called */
/* After the release: waits for the REQ's REJ, destroys both ids. */
void worker_hold_end(struct worker_hold *h);

/* A REQ for QP `qpn` on `path` with private data REQ_PD_SEED (92 bytes). */
void req_param_init(struct ib_cm_req_param *p, struct sa_path_rec *path,
                    const struct conn_opts *o, uint32_t qpn);
/* path_ab with the options' packet lifetime. */
void conn_path(struct sa_path_rec *path, const struct conn_opts *o);

/* A REQ for a fresh QP from a new id of A (test_handler) with options `o`;
 * returns the id. */
struct ib_cm_id *send_req_with(const struct conn_opts *o);
/* The same to `service_id`, with conn_opts_slow (no retransmission for
 * seconds). */
struct ib_cm_id *send_slow_req(uint64_t service_id);

struct conn {
  struct ib_cm_id *a, *b; /* active (device A) and passive (device B) ids */
  uint32_t qpn_a, qpn_b;
};
/* REQ from `a` (NULL: a new id with test_handler) to `listener` (on device B,
 * whose handler must answer with default_reply), REP, RTU: returns with both
 * ids ESTABLISHED and RTU_RECEIVED seen on B. o NULL: conn_opts_default. */
void connect_pair(struct ib_cm_id *listener, struct ib_cm_id *a,
                  const struct conn_opts *o, struct conn *c);
/* DREQ from A (no private data), DREP from B's handler, both timewaits end:
 * both ids IDLE. */
void disconnect_pair(struct conn *c);

/* ---- refused calls -------------------------------------------------------- */

/* A call that takes only private data (ib_send_cm_dreq, ib_send_cm_drep). */
typedef int (*pd_call_fn)(struct ib_cm_id *, const void *, uint8_t);

/* `call` on `id`, which must be in `state`, fails with -EINVAL both without
 * and with `pd_len` bytes of private data, and leaves the state alone. */
void expect_pd_call_einval(const char *file, int line, const char *name, pd_call_fn call,
                           size_t pd_len, struct ib_cm_id *id, enum ib_cm_state state);

/* ---- small things --------------------------------------------------------- */

void fill_pattern(void *buf, size_t n, unsigned seed);
int check_pattern(const void *buf, size_t n, unsigned seed);
int all_zero(const void *buf, size_t n);
long long now_ms(void);
void sleep_ms(int ms);
const char *state_name(enum ib_cm_state s);
const char *event_name(enum ib_cm_event_type e);
/* The private data size the kernel gives an event of this type (0: none). */
size_t event_pd_size(enum ib_cm_event_type e);

#endif /* IBCM_TEST_COMMON_H */
