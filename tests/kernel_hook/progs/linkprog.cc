// linkprog ring STEPS GAP_MS: STEPS all-reduces of 4 MiB on one communicator
//   (WORLD_SIZE ranks, this one RANK; unique id from LINK_ID, hex), each waited
//   for, GAP_MS apart; the fake NCCL plays each one's ring on its proxy thread
//   through the profiler plugin (FAKE_NCCL_BREAK breaks a link). A hung
//   all-reduce (FAKE_HANG) blocks it like a training step. LINKPROG_AHEAD=K: K
//   all-reduces are enqueued before the stream is waited for.
// linkprog bench OPS STEPS: times OPS send+receive proxy ops of STEPS steps
//   through the plugin driver (bench/link_plugin_bench.py); prints ns per event.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "progs.h"

extern "C" void fake_prof_bench(void* comm, int ops, int steps);

namespace {

ncclComm_t comm_from(const char* hex, int nranks, int rank) {
  ncclComm_t c = nullptr;
  ncclCommInitRank(&c, nranks, id_from_hex(hex), rank);
  return c;
}

int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int ring(int steps, int gap_ms) {
  ncclComm_t comm = comm_from(getenv("LINK_ID") ? getenv("LINK_ID") : "11ec", env_int("WORLD_SIZE", 1),
                              env_int("RANK", 0));
  cudaStream_t s;
  cudaStreamCreate(&s);
  int ahead = env_int("LINKPROG_AHEAD", 1);   // all-reduces enqueued before one is waited for (DDP's buckets)
  for (int i = 0; i < steps; ++i) {
    ncclAllReduce(nullptr, nullptr, 1 << 20, 7, 0, comm, s);
    if ((i + 1) % ahead == 0 || i + 1 == steps) cudaStreamSynchronize(s);
    usleep(useconds_t(gap_ms) * 1000);
  }
  ncclCommDestroy(comm);   // the fake's proxy thread plays what is queued first
  printf("rank %d: %d all-reduces done\n", env_int("RANK", 0), steps);
  fflush(stdout);
  return 0;
}

int bench(int ops, int steps) {
  ncclComm_t comm = comm_from("be0c", 2, 0);
  fake_prof_bench(comm, 1000, steps);   // warm: entries claimed, pages touched
  double t0 = now_s();
  fake_prof_bench(comm, ops, steps);
  double dt = now_s() - t0;
  // Per op pair: 2 op starts + 2 op stops + per step 2 starts, 5 states, 2 stops.
  double events = double(ops) * (4.0 + 9.0 * steps);
  printf("ns_per_event %.2f events %.0f seconds %.4f\n", dt * 1e9 / events, events, dt);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "ring") == 0)
    return ring(argc > 2 ? atoi(argv[2]) : 10, argc > 3 ? atoi(argv[3]) : 50);
  if (argc >= 2 && strcmp(argv[1], "bench") == 0)
    return bench(argc > 2 ? atoi(argv[2]) : 100000, argc > 3 ? atoi(argv[3]) : 8);
  fprintf(stderr, "usage: linkprog ring STEPS GAP_MS | bench OPS STEPS\n");
  return 2;
}
