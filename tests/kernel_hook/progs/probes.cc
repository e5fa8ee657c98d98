// hookprog probe RUNS GAP_MS HOLD_MS [API]: RUNS launches of one kernel on
// the legacy default stream, GAP_MS apart (each is a probe period apart, so
// each is probed), then one more through API (cudaLaunchKernel, or
// cudaLaunchKernel_ptsz: a separate delay and hang control in the fake), then
// HOLD_MS with no launch. FAKE_HANG / FAKE_DELAY_US decide how the last ends.
#include <unistd.h>

#include "progs.h"

int scenario_probe(int argc, char** argv) {
  int runs = argc > 0 ? atoi(argv[0]) : 5;
  int gap_ms = argc > 1 ? atoi(argv[1]) : 20;
  int hold_ms = argc > 2 ? atoi(argv[2]) : 3000;
  bool ptsz = argc > 3 && strcmp(argv[3], "cudaLaunchKernel_ptsz") == 0;
  const void* k = reinterpret_cast<const void*>(xt_test_empty_kernel);
  for (int i = 0; i < runs; ++i) {
    cudaLaunchKernel(k, dim3{1, 1, 1}, dim3{32, 1, 1}, nullptr, 0, nullptr);
    usleep(useconds_t(gap_ms) * 1000);
  }
  if (ptsz)
    cudaLaunchKernel_ptsz(k, dim3{1, 1, 1}, dim3{32, 1, 1}, nullptr, 0, nullptr);
  else
    cudaLaunchKernel(k, dim3{1, 1, 1}, dim3{32, 1, 1}, nullptr, 0, nullptr);
  usleep(useconds_t(hold_ms) * 1000);
  printf("done\n");
  fflush(stdout);
  _exit(0);  // a hung fake stream must not hold the exit: the records are written
}
