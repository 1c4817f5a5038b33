/*
 * The SA client of an InfiniBand port whose CM MADs the worker reads gets a
 * umad fd of its own; when that fd cannot be opened (EMFILE, say) the port
 * still gets its SA client, on the CM's fd as with reader threads (path
 * queries then work, their answers read by the worker), with one warning,
 * and close leaves nothing. From a hostile review.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c).
 */
#include "common.h"
#include "fixtures/fake_umad.h"

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  test_init();
  fake_umad_fail_second_open(1, EMFILE);
  struct ib_device *fake = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(fake));
  EXPECT(fake_umad_sa_agents() == 1, "%d SA agents after the SA's own fd failed to open",
         fake_umad_sa_agents());
  EXPECT(fake_umad_open_fds() == 1, "%d umad files open", fake_umad_open_fds());
  CHECK_EQ(ibcm_close_device(fake), 0);
  EXPECT(fake_umad_open_fds() == 0 && fake_umad_sa_agents() == 0 && fake_umad_agents() == 0,
         "after close: %d files, %d SA and %d CM agents", fake_umad_open_fds(),
         fake_umad_sa_agents(), fake_umad_agents());
  test_finish();
  return fake_umad_result("umad_sa_client_when_its_own_fd_fails");
}
