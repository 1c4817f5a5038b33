/*
 * A real umad port's reader takes what the port has after each poll, up to
 * 64 MADs, and wakes the worker once, at the end of that burst. A burst of
 * 64 + 1 DREQs (two bursts, the second a single MAD) and then silence: every
 * DREQ is handled (each gets its stateless DREP) without another MAD coming
 * to pay a wake-up owed across the reader's next poll. By default the CM
 * worker reads the port itself (up to 1,024 MADs a look): the same DREQs, all
 * answered.
 * Stand-in libibumad over a fake sysfs (fixtures/fake_umad.c).
 */
#include "common.h"
#include "fixtures/fake_umad.h"

#define BURST 64
#define SENT (BURST + 1)

int main(void) {
  require_loop();
  fake_umad_enter_namespace("fake0", 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  test_init();
  struct ib_device *fake = ibcm_open_device("fake0");
  CHECK(!IS_ERR_OR_NULL(fake));
  int reader;
  CHECK_EQ(fake_umad_wait_threads(fake_umad_reader_prefix(), 1, &reader), 1);

  long before = fake_umad_sends();
  uint8_t dreq[256];
  for (uint32_t i = 0; i < SENT; i++) {
    fake_umad_dreq(dreq, 0x3000 + i);
    CHECK_EQ(fake_umad_inject(1, dreq), 0);
  }
  long answered = 0;
  for (int i = 0; i < TIMEOUT_MS && answered < SENT; i++) {
    answered = fake_umad_sends() - before;
    if (answered < SENT)
      sleep_ms(1);
  }
  EXPECT(answered == SENT, "%ld of %d DREQs answered within 10 s", answered, SENT);

  CHECK_EQ(ibcm_close_device(fake), 0);
  test_finish();
  return fake_umad_result("umad_burst_reaches_the_worker");
}
