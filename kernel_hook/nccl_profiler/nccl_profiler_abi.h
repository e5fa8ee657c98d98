// The part of NCCL's profiler plugin ABI this plugin uses, written here so the
// plugin builds with a C++ compiler alone (no NCCL headers).
//
// Mirrors NCCL v2.28.9-1 (tag v2.28.9-1 of github.com/NVIDIA/nccl):
//   ext-profiler/example/nccl/profiler.h     event type bits, ncclProfilerEventState_t
//   ext-profiler/example/nccl/profiler_v5.h  ncclProfiler_v5_t, ncclProfilerEventDescr_v5_t
//   ext-profiler/example/nccl/profiler_v4.h  ncclProfiler_v4_t, ncclProfilerEventDescr_v4_t
//   ext-profiler/example/nccl/common.h, err.h
// and how NCCL calls it: src/plugin/profiler.cc (init with the comm's hash and a
// pointer to its activation mask; ProxyOp/ProxyStep/KernelCh start, state, stop)
// and src/plugin/profiler/profiler_v5.cc (dlsym "ncclProfiler_v5", then v4...).
// Only the union members this plugin reads are spelled out; the union keeps
// its real size through `pad` (v5's largest member, coll, is 80 bytes).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

extern "C" {

typedef enum {
  xtNcclSuccess = 0,
  xtNcclInternalError = 3,
} xtNcclResult_t;  // ncclResult_t (err.h): an int-sized enum

typedef void (*xtNcclDebugLogger_t)(int level, unsigned long flags, const char* file, int line,
                                    const char* fmt, ...);

// profiler.h: event type bits (the activation mask is an OR of them).
enum {
  xtProfileProxyOp = 1 << 3,
  xtProfileProxyStep = 1 << 4,
  xtProfileKernelCh = 1 << 6,
};

// profiler.h: ncclProfilerEventState_t, the states this plugin reads.
enum {
  xtStateSendGPUWait = 8,       // the step waits for the GPU to fill its buffer
  xtStateSendWait = 9,          // handed to the network, waiting for it to complete
  xtStateRecvWait = 10,         // posted, waiting for the data to arrive
  xtStateRecvFlushWait = 11,    // arrived, flushing
  xtStateRecvGPUWait = 12,      // arrived, waiting for the GPU to consume it
  xtStateSendPeerWait = 20,     // waiting for the peer's credit (ncclProfilerProxyStepSendPeerWait_v4)
  xtStateKernelChStop = 22,
};

// The descriptor's union as v4 and v5 lay out the members read here (same
// offsets in both: the union starts at byte 24 after type, parentObj, rank).
union xtDescrUnion {
  struct {
    pid_t pid;
    uint8_t channelId;
    int peer;
    int nSteps;
    int chunkSize;
    int isSend;
  } proxyOp;
  struct {
    int step;
  } proxyStep;
  struct {
    uint8_t channelId;
    uint64_t pTimer;
  } kernelCh;
  char pad[80];
};

struct xtEventDescr_v5 {
  uint64_t type;
  void* parentObj;
  int rank;
  xtDescrUnion u;
};
struct xtEventDescr_v4 {
  uint8_t type;
  void* parentObj;
  int rank;
  xtDescrUnion u;
};
static_assert(offsetof(xtEventDescr_v5, u) == 24, "v5 union offset");
static_assert(offsetof(xtEventDescr_v4, u) == 24, "v4 union offset");
static_assert(offsetof(xtDescrUnion, proxyOp.channelId) == 4, "proxyOp.channelId");
static_assert(offsetof(xtDescrUnion, proxyOp.peer) == 8, "proxyOp.peer");
static_assert(offsetof(xtDescrUnion, proxyOp.nSteps) == 12, "proxyOp.nSteps");
static_assert(offsetof(xtDescrUnion, proxyOp.isSend) == 20, "proxyOp.isSend");
static_assert(offsetof(xtDescrUnion, kernelCh.pTimer) == 8, "kernelCh.pTimer");

union xtStateArgs {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    uint64_t pTimer;
  } kernelCh;
};

struct xtProfiler_v5 {
  const char* name;
  int (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
              int nNodes, int nranks, int rank, xtNcclDebugLogger_t logfn);
  int (*startEvent)(void* context, void** eHandle, xtEventDescr_v5* eDescr);
  int (*stopEvent)(void* eHandle);
  int (*recordEventState)(void* eHandle, int eState, xtStateArgs* eStateArgs);
  int (*finalize)(void* context);
};

struct xtProfiler_v4 {
  const char* name;
  int (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
              int nNodes, int nranks, int rank, xtNcclDebugLogger_t logfn);
  int (*startEvent)(void* context, void** eHandle, xtEventDescr_v4* eDescr);
  int (*stopEvent)(void* eHandle);
  int (*recordEventState)(void* eHandle, int eState, xtStateArgs* eStateArgs);
  int (*finalize)(void* context);
};

}  // extern "C"
