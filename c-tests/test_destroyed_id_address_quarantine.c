/*
 * Issue 10, point 10: a destroyed id's address is not handed to a new id at
 * once. The library keeps the memory of the last 1024 destroyed ids before
 * it may be reused, so a stale pointer kept by mistake finds no id (-EINVAL)
 * instead of someone else's new one.
 */
#include "common.h"

#define QUARANTINE 1024
#define LOOPS (3 * QUARANTINE)

int main(void) {
  test_init();
  static struct ib_cm_id *ring[QUARANTINE]; /* the last QUARANTINE destroyed */
  int reused = 0, first_reuse = -1;
  for (int i = 0; i < LOOPS; i++) {
    struct ib_cm_id *id = create_id(dev_a, test_handler, NULL);
    int n = i < QUARANTINE ? i : QUARANTINE;
    for (int j = 0; j < n; j++) {
      if (ring[j] == id) {
        reused++;
        if (first_reuse < 0)
          first_reuse = i;
        break;
      }
    }
    ib_destroy_cm_id(id);
    /* The oldest address kept is still no id. */
    struct ib_cm_id *oldest = ring[i % QUARANTINE];
    if (oldest && oldest != id)
      CHECK_EQ(ib_cm_listen(oldest, htobe64(SERVICE_ID)), -EINVAL);
    ring[i % QUARANTINE] = id;
    CHECK_EQ(ib_cm_listen(id, htobe64(SERVICE_ID)), -EINVAL);
    CHECK_EQ(ib_send_cm_rtu(id, NULL, 0), -EINVAL);
  }
  printf("%d ids: %d got the address of one of the last %d destroyed (first at %d)\n",
         LOOPS, reused, QUARANTINE, first_reuse);
  CHECK_EQ(reused, 0);
  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  CHECK_EQ(st.cm_ids, 0);
  test_finish();
  puts("destroyed ids' addresses are quarantined: OK");
  return 0;
}
