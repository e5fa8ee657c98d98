// Test-only API of the fake CUDA / cuBLAS / NCCL libraries: the calls test
// programs need beyond what the hook itself declares (kernel_hook/cuda_api.h),
// and the controls that steer the simulated device.
#pragma once

#include <cstdint>

#include "../../../kernel_hook/cuda_api.h"

extern "C" {

// The real runtime's cudaLaunchConfig_t layout (what cudaLaunchKernelExC reads).
struct cudaLaunchConfig_st {
  dim3 gridDim;
  dim3 blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  void* attrs;
  unsigned int numAttrs;
};

// A fake CUfunction: the host function the fake device runs, the kernel's name
// (cuFuncGetName) and the api whose delay and hang controls apply to it.
struct CUfunc_st {
  void (*fn)(void**);
  const char* name;
  const char* api;
};
// cuda.h's CUlaunchConfig layout (what cuLaunchKernelEx reads).
struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  void* attrs;
  unsigned int numAttrs;
};
CUresult cuFuncGetName(const char** name, CUfunction f);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void** ptr, size_t size);
cudaError_t cudaFree(void* ptr);

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, int attr,
                                                const void* buf, size_t size);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);

// ---- controls of the simulated device (fake libcudart) ----
// The last call any fake entry point received: its name and arguments as
// integers (pointers and sizes as-is, floats by bit pattern).
struct FakeCall {
  char api[64];
  int nargs;
  uint64_t args[24];
};
const FakeCall* fake_last_call(void);
// The next call of any fake entry point returns this instead of success, once.
void fake_set_next_result(int result);
// Simulated device time of one call of api ("cublasGemmEx", "ncclAllReduce", ...).
void fake_set_delay_ns(const char* api, uint64_t ns);
// The nth call (from 1) of api never completes on the device.
void fake_set_hang(const char* api, int nth);
// Internal to the fakes: queue device work on stream (fn may be null).
void fake_enqueue(cudaStream_t stream, const char* api, void (*fn)(void**), void** args);
// Internal to the fakes: record a call's arguments; returns the result to give.
int fake_note(const char* api, int nargs, const uint64_t* args);
// Internal to the fakes: while above 0 on a thread, calls record nothing and
// take no set result (a fake library's own calls into the fake driver).
void fake_quiet(int delta);
// Internal to the fakes: a launch made while its stream was capturing.
void fake_note_captured(void);
// Internal to the fakes: a runtime call binds the thread's device context.
void fake_touch_context(void);
int fake_stream_capturing(cudaStream_t stream);
// cudaEventRecord calls made by the hook's drainer thread (1) or any other (0).
int fake_event_records(int by_drainer);
uint64_t fake_captured_launches(void);
// Devices whose primary context some thread made current, one bit each.
unsigned fake_contexts(void);
}

#define FAKE_U(x) ((uint64_t)(uintptr_t)(x))
// Records the call's arguments; note_result is what the call must return.
#define NOTE(api, ...)                                      \
  const uint64_t note_args[] = {__VA_ARGS__};               \
  int note_result = fake_note(api, int(sizeof(note_args) / sizeof(note_args[0])), note_args)
