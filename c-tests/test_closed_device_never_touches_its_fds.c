/*
 * Issue 10, point 2: a closed device never touches its umad fds again.
 *  - MADs queued for the worker when ibcm_close_device returns are dropped:
 *    the stateless DREPs they would cause are not written to the fd number,
 *    which a file opened afterwards now has (the file stays empty);
 *  - every umad fd is FD_CLOEXEC (no CM agent kept alive in an exec'd child);
 *  - ib_create_cm_id racing ibcm_close_device never leaves an id on a closed
 *    device.
 * Runs on a stand-in libibumad (fixtures/fake_umad.c) over a fake sysfs in a
 * private mount namespace; the worker is held up by a handler on loop devices.
 * With IBCM_UMAD_READER_THREADS=1 the port's reader thread queues the DREQs
 * meanwhile; by default the worker reads the port itself, so they stay unread
 * in the fd until a close that finds an id left reads them for its wait.
 */
#include "common.h"
#include "fixtures/fake_umad.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#define QUEUED 2000
#define UNREAD 100 /* what the stand-in's socket holds without a reader */

static void queued_work_of_a_closed_device_is_dropped(void) {
  struct ib_device *fake = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(fake));
  int fd = fake_umad_fd(1);
  CHECK(fd >= 0);
  int flags = fcntl(fd, F_GETFD);
  EXPECT(flags >= 0 && (flags & FD_CLOEXEC), "umad fd %d flags %#x", fd, flags);

  /* Hold the worker up in a handler (loop devices), queue DREQs for fake0. */
  struct worker_hold hold;
  worker_hold_start(&hold);
  uint8_t dreq[256];
  struct ibcm_stats s;
  if (fake_umad_worker_reads()) {
    for (uint32_t i = 0; i < UNREAD; i++) {
      fake_umad_dreq(dreq, 0x1000 + i);
      CHECK_EQ(fake_umad_inject(1, dreq), 0);
    }
    sleep_ms(100);
    CHECK_EQ(ibcm_get_stats(&s), 0);
    EXPECT(s.queued < UNREAD, "%u DREQs queued while the worker that reads the port "
           "is held up", (unsigned)s.queued);
    /* A close with an id of the device left reads the ports first (for its
     * wait for the queued work), waits 2 s for the held worker and gives
     * -EBUSY: the DREQs are queued now, as a reader thread queues them. */
    struct ib_cm_id *pin = ib_create_cm_id(fake, test_handler, NULL);
    CHECK(!IS_ERR(pin));
    CHECK_EQ(ibcm_close_device(fake), -EBUSY);
    CHECK_EQ(ibcm_get_stats(&s), 0);
    CHECK(s.queued >= UNREAD);
    ib_destroy_cm_id(pin);
  } else {
    for (uint32_t i = 0; i < QUEUED; i++) {
      fake_umad_dreq(dreq, 0x1000 + i);
      CHECK_EQ(fake_umad_inject(1, dreq), 0);
    }
    for (int i = 0; i < TIMEOUT_MS; i++) {
      CHECK_EQ(ibcm_get_stats(&s), 0);
      if (s.queued >= QUEUED)
        break;
      sleep_ms(1);
    }
    CHECK(s.queued >= QUEUED);
  }

  long sends_before = fake_umad_sends();
  CHECK_EQ(ibcm_close_device(fake), 0);
  /* The fd number goes to the next file opened. */
  char name[] = "/tmp/ibcm-closed-device-XXXXXX";
  int files[8], nfiles = 0, file = -1;
  while (nfiles < 8 && file < 0) {
    int f = mkstemp(name);
    CHECK(f >= 0);
    unlink(name);
    strcpy(name + strlen(name) - 6, "XXXXXX");
    if (f == fd)
      file = f;
    else
      files[nfiles++] = f;
  }
  EXPECT(file == fd, "fd %d was not reused", fd);

  worker_hold_release();
  for (int i = 0; i < TIMEOUT_MS; i++) {
    CHECK_EQ(ibcm_get_stats(&s), 0);
    if (s.queued == 0)
      break;
    sleep_ms(1);
  }
  CHECK_EQ(s.queued, 0);
  struct stat st;
  CHECK_EQ(fstat(file >= 0 ? file : files[0], &st), 0);
  EXPECT(st.st_size == 0, "the file that got fd %d received %lld bytes", fd,
         (long long)st.st_size);
  EXPECT(fake_umad_stray_sends() == 0, "%ld sends on the closed fd",
         fake_umad_stray_sends());
  EXPECT(fake_umad_sends() == sends_before, "%ld sends after close",
         fake_umad_sends() - sends_before);
  EXPECT(fake_umad_open_fds() == 0 && fake_umad_agents() == 0, "fds %d agents %d",
         fake_umad_open_fds(), fake_umad_agents());
  if (file >= 0)
    close(file);
  for (int i = 0; i < nfiles; i++)
    close(files[i]);
  worker_hold_end(&hold);
}

/* ---- create vs close ------------------------------------------------------ */

#define ROUNDS 500

static _Atomic(struct ib_device *) racing_dev;
static atomic_int closed, stop, ids_on_closed;

static void *creator(void *arg) {
  (void)arg;
  while (!stop) {
    struct ib_device *dev = racing_dev;
    if (!dev) {
      sched_yield();
      continue;
    }
    struct ib_cm_id *id = ib_create_cm_id(dev, test_handler, NULL);
    if (IS_ERR(id)) {
      /* A closed device fails at once: without a yield here two creators
       * spinning on it starve the closing thread under valgrind, which runs
       * one thread at a time (its unfair lock; CI at ae82faa: 300 s). */
      sched_yield();
      continue;
    }
    /* The id exists: its device cannot have closed (close gives -EBUSY). */
    if (closed && racing_dev == dev)
      ids_on_closed++;
    ib_destroy_cm_id(id);
    sched_yield(); /* let close find a moment without an id */
  }
  return NULL;
}

static void create_never_races_close(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_create(&t[i], NULL, creator, NULL), 0);
  for (int round = 0; round < ROUNDS; round++) {
    struct ib_device *dev = ibcm_open_device("loop7");
    CHECK(!IS_ERR_OR_NULL(dev));
    closed = 0;
    racing_dev = dev;
    sched_yield();
    int rc;
    while ((rc = ibcm_close_device(dev)) == -EBUSY)
      sched_yield();
    CHECK_EQ(rc, 0);
    closed = 1;
    sched_yield();
    racing_dev = NULL;
  }
  stop = 1;
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  EXPECT(ids_on_closed == 0, "%d ids created on a device that closed", ids_on_closed);
}

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  test_init();
  queued_work_of_a_closed_device_is_dropped();
  create_never_races_close();
  test_finish();
  return fake_umad_result("closed_device_never_touches_its_fds");
}
