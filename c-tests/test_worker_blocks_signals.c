/*
 * Issue 10, point 10: the library's threads block every signal, so a
 * process-directed signal is never run on the worker (whose handlers then run
 * inside a signal handler's context, or whose syscalls fail with EINTR).
 *
 * The worker starts with the test's empty signal mask (a first connection
 * is set up before anything is blocked). Then the main thread blocks SIGUSR1 and the test sends SIGUSR1 to
 * the process: with the worker blocking it too, no thread may take it, so it
 * stays pending. A whole connection's worth of work on the worker follows
 * (the worker wakes up and returns to user space many times, where a signal
 * it does not block would be delivered); then the signal must still be
 * pending and its handler must not have run. Unblocking it in the main
 * thread delivers it there.
 */
#include "common.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

static atomic_int caught;
static atomic_ulong caught_by;

static void on_usr1(int sig) {
  (void)sig;
  atomic_fetch_add(&caught, 1);
  atomic_store(&caught_by, (unsigned long)pthread_self());
}

int main(void) {
  test_init();
  struct ib_cm_id *listener = listen_b(SERVICE_ID, test_handler, NULL);
  struct conn c;
  connect_pair(listener, NULL, NULL, &c); /* the worker runs from here on */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  CHECK_EQ(pthread_sigmask(SIG_BLOCK, &usr1, NULL), 0);

  CHECK_EQ(kill(getpid(), SIGUSR1), 0);
  disconnect_pair(&c);
  struct conn c2;
  connect_pair(listener, NULL, NULL, &c2);
  disconnect_pair(&c2);

  sigset_t pending;
  CHECK_EQ(sigpending(&pending), 0);
  if (atomic_load(&caught) != 0)
    test_fail(__FILE__, __LINE__, "SIGUSR1 was delivered to a library thread (%s)",
              (pthread_t)atomic_load(&caught_by) == pthread_self() ? "main" : "not main");
  CHECK_EQ(sigismember(&pending, SIGUSR1), 1);

  /* Unblocked here, it is delivered here. */
  CHECK_EQ(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL), 0);
  CHECK_EQ(atomic_load(&caught), 1);
  CHECK((pthread_t)atomic_load(&caught_by) == pthread_self());

  ib_destroy_cm_id(c.a);
  ib_destroy_cm_id(c.b);
  ib_destroy_cm_id(c2.a);
  ib_destroy_cm_id(c2.b);
  ib_destroy_cm_id(listener);
  test_finish();
  puts("signals: the worker blocks them, the main thread gets SIGUSR1: OK");
  return 0;
}
