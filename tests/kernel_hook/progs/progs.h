// Test programs for the hook, linked against the fake libraries. Each scenario
// is a few lines that drive one behaviour; the Python tests read the records.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../fake/fake_api.h"

// snippets.cc: one forwarding check per hooked API; returns the failures.
int run_snippets(void);

// scenarios.cc
int scenario_nocuda(int argc, char** argv);
int scenario_timed(int argc, char** argv);
int scenario_ranks(int argc, char** argv);
int scenario_threads(int argc, char** argv);
int scenario_fork(int argc, char** argv);
int scenario_capture(int argc, char** argv);
int scenario_hang(int argc, char** argv);
int scenario_missing(int argc, char** argv);
int scenario_bench(int argc, char** argv);
int scenario_sampled(int argc, char** argv);
int scenario_errno(int argc, char** argv);
int scenario_capture_inflight(int argc, char** argv);
int scenario_device1(int argc, char** argv);
int scenario_fork_during_start(int argc, char** argv);
int scenario_two_devices(int argc, char** argv);
int scenario_no_set_device(int argc, char** argv);
int scenario_capture_race(int argc, char** argv);
int scenario_destroy_race(int argc, char** argv);
int scenario_bypass(int argc, char** argv);
// driver.cc
int scenario_driver(int argc, char** argv);
// probes.cc
int scenario_probe(int argc, char** argv);
// script.cc
int scenario_script(int argc, char** argv);
int scenario_spawn(int argc, char** argv);
int scenario_train(int argc, char** argv);

// An "empty kernel" for the fake device, exported so its name resolves.
extern "C" void xt_test_empty_kernel(void** args);

// The unique id spelled by hex (two digits a byte, the rest zero): ranks of
// separate processes given the same hex join one communicator.
inline ncclUniqueId id_from_hex(const char* hex) {
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  for (size_t i = 0; hex && i < sizeof(id.internal) && hex[2 * i] && hex[2 * i + 1]; ++i)
    sscanf(hex + 2 * i, "%2hhx", reinterpret_cast<unsigned char*>(&id.internal[i]));
  return id;
}

// A cuBLAS handle whose GEMMs go to stream s.
inline cublasHandle_t blas_on(cudaStream_t s) {
  cublasHandle_t h;
  cublasCreate_v2(&h);
  cublasSetStream_v2(h, s);
  return h;
}

// A communicator of nranks on a fresh id, with this process as rank 0.
inline ncclComm_t comm_as_rank0(int nranks) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm;
  ncclCommInitRank(&comm, nranks, id, 0);
  return comm;
}
