/*
 * Coexistence with the kernel CM: where the kernel's ib_cm module is loaded
 * it owns the CM class on every port, so ibcm_open_device() of a real device
 * fails with -EADDRINUSE (and a log line naming the modules to unload).
 * Runs only on real devices with ib_cm loaded (the softroce suite boots a VM
 * for it); skipped elsewhere.
 */
#include "common.h"

#include <unistd.h>

int main(void) {
  if (devices_are_loop() || access("/sys/module/ib_cm", F_OK) != 0) {
    puts("kernel ib_cm owns the port: needs a real device and ib_cm loaded, skipped");
    return SKIP;
  }
  struct ib_device *dev = ibcm_open_device(dev_a_name());
  CHECK(IS_ERR(dev));
  CHECK_EQ(PTR_ERR(dev), -EADDRINUSE);
  /* Nothing was left half open: the same answer again. */
  dev = ibcm_open_device(dev_a_name());
  CHECK_EQ(PTR_ERR(dev), -EADDRINUSE);
  puts("kernel ib_cm owns the port: -EADDRINUSE: OK");
  return 0;
}
