/*
 * Preloaded into ibcmd on the simulated fabric (after libumad2sim.so): what
 * a process on ibsim must do before it receives unsolicited CM MADs, never
 * the library's or the daemon's business (see ibsim_harness_steps in
 * ibfabric_peer.c): take the port's SM capability and register a
 * never-read agent for the SMP classes. SIM_HOST names the HCA.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void ibcmd_harness(void) {
  void *umad = dlopen("libibumad.so.3", RTLD_NOW);
  int (*open_port)(const char *, int) =
      umad ? (int (*)(const char *, int))dlsym(umad, "umad_open_port") : NULL;
  int (*reg)(int, int, int, uint8_t, long *) =
      umad ? (int (*)(int, int, int, uint8_t, long *))dlsym(umad, "umad_register") : NULL;
  int fd = open_port && reg ? open_port("ibsim0", 1) : -1;
  long mask[2] = {0, 0};
  if (fd < 0 || reg(fd, 0x81, 1, 0, mask) < 0 || reg(fd, 0x01, 1, 0, mask) < 0 ||
      open("/dev/infiniband/issm0", O_RDWR) < 0) {
    fprintf(stderr, "ibcmd_harness: cannot take ibsim0's SM capability\n");
    exit(1);
  }
}
