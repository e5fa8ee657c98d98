// How a library with the CUDA runtime linked in statically (cuBLAS, NCCL)
// reaches the driver: it opens libcuda.so.1, looks up cuGetProcAddress_v2
// with dlsym, and asks it for the entry points it launches through. Every
// fake library that includes this has its own copy, as each real one has its
// own runtime. All quiet (fake_quiet): these are not the caller's calls.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstring>

#include "fake_api.h"

namespace fake_static {

inline void* driver_entry(const char* symbol, unsigned long long flags = 0) {
  fake_quiet(1);
  void* fn = nullptr;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto gpa = h ? reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(dlsym(h, "cuGetProcAddress_v2"))
               : nullptr;
  int status = 0;
  if (!gpa || gpa(symbol, &fn, 13000, flags, &status) != CUDA_SUCCESS) fn = nullptr;
  fake_quiet(-1);
  return fn;
}

// One kernel f on stream, through the driver's cuLaunchKernel.
inline int launch(CUfunction f, cudaStream_t stream) {
  static auto fn = reinterpret_cast<decltype(&::cuLaunchKernel)>(driver_entry("cuLaunchKernel"));
  if (!fn) return -1;
  fake_quiet(1);
  int r = fn(f, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr);
  fake_quiet(-1);
  return r;
}

// The same through cuLaunchKernelEx (what NCCL uses).
inline int launch_ex(CUfunction f, cudaStream_t stream) {
  static auto fn = reinterpret_cast<decltype(&::cuLaunchKernelEx)>(driver_entry("cuLaunchKernelEx"));
  if (!fn) return -1;
  CUlaunchConfig cfg{1, 1, 1, 32, 1, 1, 0, stream, nullptr, 0};
  fake_quiet(1);
  int r = fn(&cfg, f, nullptr, nullptr);
  fake_quiet(-1);
  return r;
}

// The kernel a library launches for one of its calls: named for the call, so
// a test can count each call's kernels (fake_cublasGemmEx_kernel, say).
#define FAKE_API_KERNEL(api) CUfunc_st{nullptr, "fake_" #api "_kernel", #api}

// One kernel of api on stream, the one kernels holds for it, launched the way
// the library does (launch or launch_ex); a variant built without the fake
// driver beside it queues the call on the stream directly.
template <size_t N>
inline void api_kernel(CUfunc_st (&kernels)[N], const char* api, cudaStream_t stream,
                       int (*launch_fn)(CUfunction, cudaStream_t)) {
  for (auto& k : kernels)
    if (strcmp(k.api, api) == 0 && launch_fn(&k, stream) == CUDA_SUCCESS) return;
  fake_enqueue(stream, api, nullptr, nullptr);
}

}  // namespace fake_static
