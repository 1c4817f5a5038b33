/*
 * Issue 10, point 4: the port goes away under an open device (ib_umad's fd
 * hangs up, reads give -EIO). The reader stops instead of spinning, the
 * device is dead: one log line, an id with a REQ outstanding gets
 * IB_CM_REQ_ERROR at its next retransmission (the resend fails), calls that
 * send return -ENODEV, and the device still closes once its ids are gone.
 * The reader is the CM worker, or with IBCM_UMAD_READER_THREADS=1 a thread of
 * the port's: either way it sleeps once the port is gone.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c).
 */
#include "common.h"
#include "fixtures/fake_umad.h"

#include <unistd.h>

/* A path from fake0's port 1 to LID 7 (no SA: made by hand). */
static void fake_path(struct ib_device *dev, struct sa_path_rec *path) {
  memset(path, 0, sizeof(*path));
  CHECK_EQ(ibcm_query_gid(dev, 1, 0, &path->sgid), 0);
  path->dgid = path->sgid;
  path->dgid.raw[15] = 7;
  path->ib.dlid = htobe16(7);
  path->ib.slid = htobe16(1);
  path->pkey = htobe16(0xffff);
  path->mtu = 5; /* IB_MTU_4096 */
  path->rate = 3;
  path->reversible = 1;
  path->numb_path = 1;
  path->rec_type = SA_PATH_REC_TYPE_IB;
}

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  test_init();
  struct ib_device *fake = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(fake));
  int reader;
  CHECK_EQ(fake_umad_wait_threads("ibcm-umad", !fake_umad_worker_reads(), &reader),
           !fake_umad_worker_reads());
  CHECK_EQ(fake_umad_wait_threads(fake_umad_reader_prefix(), 1, &reader), 1);

  /* A REQ outstanding: 67 ms between retransmissions, 5 retries. */
  struct conn_opts o;
  conn_opts_default(&o);
  o.remote_cm_response_timeout = 14;
  struct sa_path_rec path;
  fake_path(fake, &path);
  struct ib_cm_req_param req;
  req_param_init(&req, &path, &o, next_qpn());
  struct ib_cm_id *id = create_id(fake, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(id, &req), 0);
  CHECK(fake_umad_sends() >= 1);

  fake_umad_capture_stderr();
  fake_umad_remove();
  const struct cm_ev *e = wait_event(id, IB_CM_REQ_ERROR);
  CHECK_EQ(e->param.send_status, IB_WC_RESP_TIMEOUT_ERR);
  CHECK_STATE(id, IB_CM_IDLE);
  EXPECT(fake_umad_sends() <= 2, "%ld REQs sent before the error event",
         fake_umad_sends());

  /* The reader sleeps (or has ended): its CPU time over one second. */
  sleep_ms(100);
  long long t0 = fake_umad_task_cpu_ticks(reader);
  sleep_ms(1000);
  long long used = fake_umad_task_cpu_ticks(reader) - t0;
  long hz = sysconf(_SC_CLK_TCK);
  EXPECT(used * 5 < hz, "the reader used %lld ms of CPU in 1 s after removal",
         used * 1000 / hz);
  /* The SA client's reader (its own fd, when the worker reads the CM's)
   * saw the hang-up too and ended. */
  int sa_reader;
  EXPECT(fake_umad_wait_threads("ibcm-sa", 0, &sa_reader) == 0,
         "the SA reader thread still runs after removal");

  int rc = ib_send_cm_req(id, &req);
  EXPECT(rc == -ENODEV, "ib_send_cm_req on a removed device: %d", rc);
  CHECK_STATE(id, IB_CM_IDLE);
  /* Only the removal's line, once for the port whichever of its readers
   * (the CM's, the SA client's) saw it first. */
  int lines = fake_umad_log_lines("fake0 port 1: the umad device is gone");
  EXPECT(lines == 1, "%d log lines say fake0 port 1 is gone", lines);

  ib_destroy_cm_id(id);
  CHECK_EQ(ibcm_close_device(fake), 0);
  EXPECT(fake_umad_open_fds() == 0 && fake_umad_agents() == 0 && fake_umad_sa_agents() == 0,
         "fds %d agents %d SA agents %d", fake_umad_open_fds(), fake_umad_agents(),
         fake_umad_sa_agents());
  test_finish();
  return fake_umad_result("device_removal_stops_the_reader");
}
