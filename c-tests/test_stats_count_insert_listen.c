/*
 * Issue 10, point 10: ibcm_get_stats().cm_ids counts every cm_id the library
 * holds, including listeners made by ib_cm_insert_listen (which, as in the
 * kernel, are not findable by comm ID) and the new ids REQs create.
 */
#include "common.h"

static uint64_t cm_ids(void) {
  struct ibcm_stats st;
  CHECK_EQ(ibcm_get_stats(&st), 0);
  return st.cm_ids;
}

int main(void) {
  test_init();
  CHECK_EQ(cm_ids(), 0);
  struct ib_cm_id *shared = ib_cm_insert_listen(dev_b, test_handler, htobe64(SERVICE_ID));
  CHECK(!IS_ERR(shared));
  CHECK_EQ(cm_ids(), 1);
  /* The same listener again: shared, still one id. */
  CHECK(ib_cm_insert_listen(dev_b, test_handler, htobe64(SERVICE_ID)) == shared);
  CHECK_EQ(cm_ids(), 1);

  struct conn c;
  connect_pair(shared, NULL, NULL, &c);
  CHECK_EQ(cm_ids(), 3);
  disconnect_pair(&c);
  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  CHECK_EQ(cm_ids(), 1);

  ib_destroy_cm_id(shared); /* one user left */
  CHECK_EQ(cm_ids(), 1);
  ib_destroy_cm_id(shared);
  CHECK_EQ(cm_ids(), 0);
  test_finish();
  puts("cm_ids counts ib_cm_insert_listen listeners: OK");
  return 0;
}
