/*
 * An SA answer reaches the application thread that waits for it while a
 * handler holds the CM worker up (when the worker reads the umad ports):
 * the kernel's SA completes apart from the CM's workqueue.
 * By default the worker reads the CM's umad fd, and the SA client of an
 * InfiniBand port has an fd and a reader thread of its own; with
 * IBCM_UMAD_READER_THREADS=1 the port's reader thread reads both agents'
 * MADs from one fd. Either way ibcm_init_path returns with the SA's path
 * before the handler does.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c), the SM at
 * LID 5; the handler that blocks runs for a REQ on loop devices.
 */
#include "common.h"
#include "fixtures/fake_umad.h"

#include <pthread.h>

static struct ib_device *fake;
static struct sa_path_rec path;
static atomic_int path_rc = 1, path_done;

static void *query_path(void *arg) {
  (void)arg;
  union ib_gid dgid;
  CHECK_EQ(ibcm_query_gid(fake, 1, 0, &dgid), 0);
  dgid.raw[15] = 7;
  path_rc = ibcm_init_path(fake, 1, &dgid, &path);
  path_done = 1;
  return NULL;
}

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  test_init();
  fake = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(fake));
  CHECK_EQ(fake_umad_sa_agents(), 1);

  struct worker_hold hold;
  worker_hold_start(&hold); /* in a REQ handler on the loop devices */

  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, query_path, NULL), 0);
  uint8_t q[256];
  for (int i = 0; i < TIMEOUT_MS && fake_umad_sa_query(1, q) == 0; i++)
    sleep_ms(1);
  CHECK(fake_umad_sa_query(1, q) >= 1);
  CHECK_EQ(q[1], 0x03); /* SubnAdm */
  CHECK_EQ(q[3], 0x01); /* Get */

  /* The SA's SubnAdmGetResp: the query's TID, one PathRecord to LID 7. */
  uint8_t resp[256];
  memcpy(resp, q, sizeof(resp));
  resp[3] = 0x81;
  resp[4] = resp[5] = 0;  /* status */
  uint8_t *rec = resp + 56;
  rec[40] = 0, rec[41] = 7; /* DLID */
  rec[42] = 0, rec[43] = 1; /* SLID */
  rec[49] = 0x81;           /* reversible, one path */
  rec[54] = 4;              /* MTU 2048 */
  rec[55] = 3;              /* 10 Gb/s */
  CHECK_EQ(fake_umad_inject_sa(1, resp), 0);

  for (int i = 0; i < TIMEOUT_MS && !path_done; i++)
    sleep_ms(1);
  EXPECT(path_done, "ibcm_init_path still waits (the handler holds the worker up)");
  EXPECT(!worker_hold_released(), "the handler returned first");
  worker_hold_release();
  pthread_join(t, NULL);
  EXPECT(path_rc == 0, "ibcm_init_path: %d", path_rc);
  EXPECT(path.ib.dlid == htobe16(7) && path.ib.slid == htobe16(1),
         "the path is not the SA's: DLID %#x SLID %#x", be16toh(path.ib.dlid),
         be16toh(path.ib.slid));

  worker_hold_end(&hold);
  CHECK_EQ(ibcm_close_device(fake), 0);
  EXPECT(fake_umad_open_fds() == 0 && fake_umad_sa_agents() == 0, "fds %d SA agents %d",
         fake_umad_open_fds(), fake_umad_sa_agents());
  test_finish();
  return fake_umad_result("umad_sa_answer_while_a_handler_blocks");
}
