/*
 * A stale device pointer (ABA, issue 10): calls through a closed device's
 * pointer never reach the device opened after it at the same address.
 *
 * README, bad input: "NULL, closed or unknown `device`: ERR_PTR(-EINVAL) /
 * -EINVAL"; ibcm_close_device(3): "device must not be used afterwards". The
 * cm_id pointers got a quarantine (the last 1024 destroyed ids keep their
 * memory, so a stale pointer finds no id); device pointers did not. Once a
 * device is closed its memory is freed and the next ibcm_open_device may get
 * the same address: a stale pointer to the closed device then is the new
 * device, and every call through it acts there. Here a module that closed
 * its device by mistake twice (a double close, the classic shutdown bug)
 * closes someone else's device, which still has ids; or creates ids on it.
 *
 * Expected: calls through the closed device's pointer fail with -EINVAL.
 */
#include "common.h"

#define TRIES 64

int main(void) {
  test_init();
  require_loop();
  int reused = 0, hijacked = 0;
  for (int i = 0; i < TRIES; i++) {
    struct ib_device *old = ibcm_open_device("loop7");
    CHECK(!IS_ERR_OR_NULL(old));
    CHECK_EQ(ibcm_close_device(old), 0);
    struct ib_device *other = ibcm_open_device("loop8");
    CHECK(!IS_ERR_OR_NULL(other));
    if (other == old) {
      reused++;
      /* The stale pointer: documented -EINVAL. */
      struct ib_cm_id *id = ib_create_cm_id(old, test_handler, NULL);
      if (!IS_ERR(id)) {
        hijacked++;
        ib_destroy_cm_id(id);
      }
      if (ibcm_close_device(old) == 0) {
        /* loop8 is gone under its owner's feet. */
        hijacked++;
        continue;
      }
    }
    CHECK_EQ(ibcm_close_device(other), 0);
  }
  printf("%d of %d reopens got the closed device's address; %d calls through the stale "
         "pointer acted on the new device\n",
         reused, TRIES, hijacked);
  CHECK_EQ(hijacked, 0);
  test_finish();
  puts("a closed device's pointer never reaches another device: OK");
  return 0;
}
