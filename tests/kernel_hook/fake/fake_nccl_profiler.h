// The fake NCCL's side of the profiler plugin (fake_nccl_profiler.cc).
#pragma once
#include <cstdint>

struct FakeProfComm {
  int nranks, rank;
  void* ctx;      // the plugin's context for this communicator
  uint64_t seq;   // collectives handed to the proxy thread so far
};
void fake_prof_init(FakeProfComm* c, uint64_t comm_hash, int nnodes);
void fake_prof_collective(FakeProfComm* c);
void fake_prof_finalize(FakeProfComm* c);
// The fake RAS listener (fake_nccl_ras.cc).
void fake_ras_comm(int nranks, int rank);
void fake_ras_collective();
