/*
 * The SA client of an InfiniBand port whose CM MADs the worker reads gets a
 * umad fd of its own; when that fd cannot be opened (EMFILE, say) the port
 * still gets its SA client, on the CM's fd, and keeps a reader thread for
 * both as without the worker reading: a handler's ibcm_init_path, which
 * waits on the worker, still gets the SA's answer. Close leaves nothing.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c), the SM at
 * LID 5; the handler runs for a REQ on loop devices.
 */
#include "common.h"
#include "fixtures/fake_umad.h"

static struct ib_device *fake;
static struct sa_path_rec path;
static atomic_int path_rc = 1, path_done;

static int path_in_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  record_event(cm_id, event);
  if (event->event != IB_CM_REQ_RECEIVED)
    return 0;
  union ib_gid dgid;
  CHECK_EQ(ibcm_query_gid(fake, 1, 0, &dgid), 0);
  dgid.raw[15] = 7;
  path_rc = ibcm_init_path(fake, 1, &dgid, &path);
  path_done = 1;
  return -1; /* destroy the new id: nothing to answer */
}

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  test_init();
  fake_umad_fail_second_open(1, EMFILE);
  fake = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(fake));
  EXPECT(fake_umad_sa_agents() == 1, "%d SA agents after the SA's own fd failed to open",
         fake_umad_sa_agents());
  EXPECT(fake_umad_open_fds() == 1, "%d umad files open", fake_umad_open_fds());
  int tid;
  EXPECT(fake_umad_wait_threads("ibcm-umad", 1, &tid) == 1,
         "the port has no reader thread of its own");

  /* A handler on the worker asks the SA; the answer comes on the one fd. */
  struct ib_cm_id *listener = listen_b(SERVICE_ID, path_in_handler, NULL);
  struct conn_opts o;
  conn_opts_slow(&o);
  struct sa_path_rec loop_path;
  conn_path(&loop_path, &o);
  struct ib_cm_req_param req;
  req_param_init(&req, &loop_path, &o, next_qpn());
  struct ib_cm_id *a = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(a, &req), 0);
  uint8_t q[256];
  for (int i = 0; i < TIMEOUT_MS && fake_umad_sa_query(1, q) == 0; i++)
    sleep_ms(1);
  CHECK(fake_umad_sa_query(1, q) >= 1);
  uint8_t resp[256];
  memcpy(resp, q, sizeof(resp));
  resp[3] = 0x81; /* SubnAdmGetResp, status 0, the query's TID */
  resp[4] = resp[5] = 0;
  resp[56 + 41] = 7; /* DLID */
  resp[56 + 43] = 1; /* SLID */
  resp[56 + 49] = 0x81;
  CHECK_EQ(fake_umad_inject_sa(1, resp), 0);
  for (int i = 0; i < TIMEOUT_MS && !path_done; i++)
    sleep_ms(1);
  EXPECT(path_done && path_rc == 0, "ibcm_init_path in a handler: done %d rc %d",
         (int)path_done, (int)path_rc);
  EXPECT(path.ib.dlid == htobe16(7), "DLID %#x", be16toh(path.ib.dlid));
  wait_event(a, IB_CM_REJ_RECEIVED);
  ib_destroy_cm_id(a);
  ib_destroy_cm_id(listener);

  CHECK_EQ(ibcm_close_device(fake), 0);
  EXPECT(fake_umad_open_fds() == 0 && fake_umad_sa_agents() == 0 && fake_umad_agents() == 0,
         "after close: %d files, %d SA and %d CM agents", fake_umad_open_fds(),
         fake_umad_sa_agents(), fake_umad_agents());
  test_finish();
  return fake_umad_result("umad_sa_client_when_its_own_fd_fails");
}
