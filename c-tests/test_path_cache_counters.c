/* ibcm_get_path_cache_counters: -EINVAL for NULL; a struct of 8 counters
 * that the in-process fabric and RoCE leave at 0 (their paths are made
 * without the SA, so ibcm_init_path never asks the cache); the counters of
 * a real SA are checked on the simulated fabric (the scale grid, make
 * ibscale, and ibfabric.fat64-drops). */
#include "common.h"

int main(void) {
  test_init();
  CHECK_EQ(ibcm_get_path_cache_counters(NULL), -EINVAL);
  CHECK_EQ(sizeof(struct ibcm_path_cache_counters), 8 * sizeof(uint64_t));
  struct ibcm_path_cache_counters c;
  memset(&c, 0xff, sizeof(c));
  struct sa_path_rec path;
  union ib_gid gid;
  CHECK_EQ(ibcm_query_gid(dev_b, 1, 0, &gid), 0);
  CHECK_EQ(ibcm_init_path(dev_a, 1, &gid, &path), 0);
  CHECK_EQ(ibcm_get_path_cache_counters(&c), 0);
  CHECK_EQ(c.hits, 0);
  CHECK_EQ(c.misses, 0);
  CHECK_EQ(c.entries, 0);
  test_finish();
  printf("ok\n");
  return 0;
}
