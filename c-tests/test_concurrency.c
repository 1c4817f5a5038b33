/*
 * Concurrency: four threads call ib_send_cm_dreq / ib_send_cm_drep /
 * ib_send_cm_rej / ib_destroy_cm_id at random on shared, established
 * connections while the worker delivers MADs and events. A watchdog fails the
 * test on a deadlock (alarm), ASan catches use after free, and each id's
 * events must be a sequence the kernel's state machine can produce, in order:
 *
 *   ESTABLISHED --DREQ_RECEIVED--> DREQ_RCVD --DREP_RECEIVED--> TIMEWAIT
 *   ESTABLISHED --DREP_RECEIVED | DREQ_ERROR--> TIMEWAIT
 *   DREQ_RCVD | TIMEWAIT --TIMEWAIT_EXIT--> IDLE (nothing after)
 *
 * and nothing at all once the id was destroyed.
 */
#include "common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#define CONNS 200
#define THREADS 4
#define RUN_MS 3000
#define MAX_EVENTS 8

struct side {
  struct ib_cm_id *id;
  atomic_int destroyed;             /* claimed by the thread that destroys it */
  atomic_int after_destroy;         /* events delivered after destroy returned */
  atomic_int n;
  enum ib_cm_event_type ev[MAX_EVENTS];
};

static struct side sides[2 * CONNS];
static atomic_int stop;
static atomic_long calls;

static struct side *side_of(struct ib_cm_id *id) {
  for (int i = 0; i < 2 * CONNS; i++)
    if (sides[i].id == id)
      return &sides[i];
  return NULL;
}

static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *e) {
  struct side *s = cm_id->context;
  if (e->event == IB_CM_REQ_RECEIVED || e->event == IB_CM_REP_RECEIVED ||
      e->event == IB_CM_RTU_RECEIVED)
    return default_reply(cm_id, e); /* setup, before the random phase */
  CHECK(s != NULL);
  if (atomic_load(&s->destroyed) == 2)
    atomic_fetch_add(&s->after_destroy, 1);
  int n = atomic_load(&s->n);
  CHECK(n < MAX_EVENTS);
  s->ev[n] = e->event;
  atomic_store(&s->n, n + 1);
  return 0;
}

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

static void *hammer(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
  uint8_t pd[224];
  fill_pattern(pd, sizeof(pd), seed);
  while (!atomic_load(&stop)) {
    struct side *s = &sides[rnd(&seed) % (2 * CONNS)];
    int rc = -EINVAL; /* what a call that changed nothing answers */
    switch (rnd(&seed) % 8) {
    case 0: case 1: case 2:
      rc = ib_send_cm_dreq(s->id, pd, rnd(&seed) % 221);
      break;
    case 3: case 4: case 5:
      rc = ib_send_cm_drep(s->id, pd, rnd(&seed) % 225);
      break;
    case 6:
      rc = ib_send_cm_rej(s->id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, pd, 10);
      break;
    case 7: {
      int expect = 0;
      if (rnd(&seed) % 16 == 0 && atomic_compare_exchange_strong(&s->destroyed, &expect, 1)) {
        ib_destroy_cm_id(s->id);
        atomic_store(&s->destroyed, 2);
        rc = 0;
      }
      break;
    }
    }
    atomic_fetch_add(&calls, 1);
    /* Once the connections are down almost every call fails at once, with no
     * system call: four such spinning threads would starve the main thread
     * and the worker under valgrind, which runs one thread at a time. */
    if (rc != 0)
      sched_yield();
  }
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "test_concurrency: watchdog fired: deadlock?\n";
  ssize_t w = write(2, msg, sizeof(msg) - 1);
  (void)w;
  _exit(1);
}

/* The kernel's order for an established connection's events. */
static int legal(const struct side *s, int n) {
  enum { E, R, T, I } st = E;
  for (int i = 0; i < n; i++) {
    switch (s->ev[i]) {
    case IB_CM_DREQ_RECEIVED:
      if (st != E) return 0;
      st = R;
      break;
    case IB_CM_DREP_RECEIVED:
      if (st != E && st != R) return 0;
      st = T;
      break;
    case IB_CM_DREQ_ERROR:
      if (st != E) return 0;
      st = T;
      break;
    case IB_CM_TIMEWAIT_EXIT:
      if (st != R && st != T && st != E) return 0; /* E: our DREP entered timewait */
      st = I;
      break;
    default:
      return 0;
    }
  }
  return 1;
}

int main(void) {
  require_loop(); /* 200 connections and 3 s of hammering: the in-process fabric */
  signal(SIGALRM, watchdog);
  alarm(300);
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  for (int i = 0; i < CONNS; i++) {
    struct conn c;
    connect_pair(listener, NULL, NULL, &c);
    sides[2 * i].id = c.a;
    sides[2 * i + 1].id = c.b;
  }
  /* From now on every event goes to `handler`, with the side as context. */
  for (int i = 0; i < 2 * CONNS; i++) {
    sides[i].id->context = &sides[i];
    sides[i].id->cm_handler = handler;
  }
  CHECK(side_of(sides[0].id) == &sides[0]);

  pthread_t t[THREADS];
  long long t0 = now_ms();
  for (uintptr_t i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_create(&t[i], NULL, hammer, (void *)i), 0);
  sleep_ms(RUN_MS);
  atomic_store(&stop, 1);
  for (int i = 0; i < THREADS; i++)
    CHECK_EQ(pthread_join(t[i], NULL), 0);
  long long ran = now_ms() - t0;

  /* Let retransmissions and timewaits finish, then tear everything down. */
  sleep_ms(1500);
  for (int i = 0; i < 2 * CONNS; i++)
    if (atomic_load(&sides[i].destroyed) == 0)
      ib_destroy_cm_id(sides[i].id);
  ib_destroy_cm_id(listener);

  int illegal = 0, late = 0, events = 0;
  for (int i = 0; i < 2 * CONNS; i++) {
    int n = atomic_load(&sides[i].n);
    events += n;
    late += atomic_load(&sides[i].after_destroy);
    if (!legal(&sides[i], n)) {
      illegal++;
      fprintf(stderr, "id %d:", i);
      for (int k = 0; k < n; k++)
        fprintf(stderr, " %s", event_name(sides[i].ev[k]));
      fprintf(stderr, "\n");
    }
  }
  CHECK_EQ(illegal, 0);
  CHECK_EQ(late, 0);

  struct ibcm_stats st;
  long long end = now_ms() + 30000;
  do {
    CHECK_EQ(ibcm_get_stats(&st), 0);
    if (!st.cm_ids && !st.timers && !st.queued)
      break;
    sleep_ms(10);
  } while (now_ms() < end);
  CHECK_EQ(st.cm_ids, 0);
  CHECK_EQ(st.timers, 0);
  test_finish();
  printf("concurrency: %d threads, %lld ms, %ld calls, %d events, all in kernel order: OK\n",
         THREADS, ran, atomic_load(&calls), events);
  return 0;
}
