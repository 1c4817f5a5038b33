/*
 * Issue 10, point 3: ib_cm_listen racing ib_destroy_cm_id on the same id.
 * An entry point that looked the id up before the destroy must not bring it
 * back to life: whoever wins, once both calls have returned the service ID is
 * free again (a fresh ib_cm_listen on it succeeds) and no id is left.
 * Each round uses its own service ID, so every lost round is counted; in a
 * round one thread calls ib_cm_listen again and again while the other
 * destroys the id.
 */
#include "common.h"

#include <pthread.h>

#define ROUNDS 20000
#define BUDGET_MS 5000 /* fewer rounds under valgrind */

static pthread_barrier_t go, done;
static struct ib_cm_id *volatile victim;
static volatile uint64_t victim_service_id;
static atomic_int stop, round_over, listened, other;

/* Listens on the victim until the round is over (after the first success
 * every further call is -EINVAL, unless destroy has set the id IDLE again). */
static void *listener(void *arg) {
  (void)arg;
  for (;;) {
    pthread_barrier_wait(&go);
    if (atomic_load(&stop))
      return NULL;
    while (!atomic_load(&round_over)) {
      int r = ib_cm_listen(victim, htobe64(victim_service_id));
      if (r == 0)
        atomic_fetch_add(&listened, 1);
      else if (r != -EINVAL)
        atomic_fetch_add(&other, 1);
    }
    pthread_barrier_wait(&done);
  }
}

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

int main(void) {
  test_init();
  CHECK_EQ(pthread_barrier_init(&go, NULL, 2), 0);
  CHECK_EQ(pthread_barrier_init(&done, NULL, 2), 0);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, listener, NULL), 0);

  int rounds = 0, taken_after = 0;
  unsigned seed = 1;
  long long t0 = now_ms();
  for (; rounds < ROUNDS && now_ms() - t0 < BUDGET_MS; rounds++) {
    uint64_t service_id = SERVICE_ID + (uint64_t)rounds;
    victim = create_id(dev_b, test_handler, NULL);
    victim_service_id = service_id;
    atomic_store(&round_over, 0);
    pthread_barrier_wait(&go);
    for (volatile unsigned spin = rnd(&seed) % 2000; spin > 0; spin--)
      ;
    ib_destroy_cm_id(victim);
    atomic_store(&round_over, 1);
    pthread_barrier_wait(&done);
    struct ib_cm_id *fresh = create_id(dev_b, test_handler, NULL);
    if (ib_cm_listen(fresh, htobe64(service_id)) != 0)
      taken_after++;
    ib_destroy_cm_id(fresh);
  }
  atomic_store(&stop, 1);
  pthread_barrier_wait(&go);
  CHECK_EQ(pthread_join(t, NULL), 0);

  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  printf("%d rounds: listen succeeded %d times, other errors %d; service ID "
         "still taken after destroy returned: %d rounds; cm_ids %llu\n",
         rounds, atomic_load(&listened), atomic_load(&other), taken_after,
         (unsigned long long)st.cm_ids);
  CHECK_EQ(atomic_load(&other), 0);
  CHECK_EQ(taken_after, 0);
  CHECK_EQ(st.cm_ids, 0);
  pthread_barrier_destroy(&go);
  pthread_barrier_destroy(&done);
  test_finish();
  puts("listen racing destroy never revives the id: OK");
  return 0;
}
