// driver: kernels launched through the CUDA driver every way libraries reach
// it, each path with its own named kernel, so a test can check each count:
// linked against libcuda (exported symbols); cuGetProcAddress_v2 found with
// dlsym, as a statically linked runtime (cuBLAS, NCCL) does; dlsym of the
// launch itself (Triton's launcher); cudaGetDriverEntryPoint* (PyTorch);
// cuGetProcAddress asked for itself; the runtime's own launch going on to the
// driver (one launch); a GEMM and an all-reduce (inside hooked calls). Prints
// how many kernels ran on the fake device, and where dlsym(RTLD_NEXT) of a
// hooked symbol resolves from here.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "../fake/static_driver.h"
#include "progs.h"

std::atomic<int>& ran();

// Exported (hookprog is linked -rdynamic), so a runtime launch of it is named.
extern "C" void count_kernel(void**) { ran().fetch_add(1); }

namespace {

std::atomic<int> g_ran{0};

CUfunc_st k_direct{count_kernel, "k_direct", nullptr}, k_ex{count_kernel, "k_ex", nullptr},
    k_coop{count_kernel, "k_coop", nullptr}, k_static{count_kernel, "k_static", nullptr},
    k_triton{count_kernel, "k_triton", nullptr}, k_entry{count_kernel, "k_entry", nullptr},
    k_entry_coop{count_kernel, "k_entry_coop", nullptr}, k_self{count_kernel, "k_self", nullptr},
    k_default{count_kernel, "k_default", nullptr};

void times(int n, int (*fn)(CUfunction, cudaStream_t), CUfunction f, cudaStream_t s) {
  for (int i = 0; i < n; ++i)
    if (fn(f, s) != CUDA_SUCCESS) printf("launch of %s failed\n", f->name);
}

int plain(CUfunction f, cudaStream_t s) { return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, 0, 0); }

}  // namespace

std::atomic<int>& ran() { return g_ran; }

int scenario_driver(int, char**) {
  cudaStream_t s;
  cudaStreamCreate(&s);
  times(2, plain, &k_direct, s);
  cuLaunchKernel_ptsz(&k_direct, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
  CUlaunchConfig cfg{1, 1, 1, 1, 1, 1, 0, s, nullptr, 0};
  for (int i = 0; i < 2; ++i) cuLaunchKernelEx(&cfg, &k_ex, nullptr, nullptr);
  cuLaunchCooperativeKernel(&k_coop, 1, 1, 1, 1, 1, 1, 0, s, nullptr);
  // A statically linked runtime: per-thread-stream variant, through cuGetProcAddress_v2.
  auto st = reinterpret_cast<decltype(&::cuLaunchKernel)>(fake_static::driver_entry("cuLaunchKernel", 2));
  for (int i = 0; i < 3; ++i) st(&k_static, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
  void* drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  auto ex = reinterpret_cast<decltype(&::cuLaunchKernelEx)>(dlsym(drv, "cuLaunchKernelEx"));
  for (int i = 0; i < 4; ++i) ex(&cfg, &k_triton, nullptr, nullptr);
  // In the global scope: the hook's exported one when preloaded (counted once).
  reinterpret_cast<decltype(&::cuLaunchKernel)>(dlsym(RTLD_DEFAULT, "cuLaunchKernel"))(
      &k_default, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
  void* p = nullptr;
  cudaGetDriverEntryPoint("cuLaunchKernel", &p, 0, nullptr);
  for (int i = 0; i < 5; ++i)
    reinterpret_cast<decltype(&::cuLaunchKernel)>(p)(&k_entry, 1, 1, 1, 1, 1, 1, 0, s, 0, 0);
  cudaGetDriverEntryPointByVersion("cuLaunchCooperativeKernel", &p, 12000, 0, nullptr);
  reinterpret_cast<decltype(&::cuLaunchCooperativeKernel)>(p)(&k_entry_coop, 1, 1, 1, 1, 1, 1, 0,
                                                               s, nullptr);
  auto v1 = reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(drv, "cuGetProcAddress"));
  void* v2 = nullptr;
  v1("cuGetProcAddress", &v2, 12000, 0);  // from 12.0 the driver hands out the v2 signature
  reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(v2)("cuLaunchKernelEx", &p, 12000, 0, nullptr);
  for (int i = 0; i < 2; ++i)
    reinterpret_cast<decltype(&::cuLaunchKernelEx)>(p)(&cfg, &k_self, nullptr, nullptr);
  for (int i = 0; i < 6; ++i)
    cudaLaunchKernel((const void*)count_kernel, dim3{1, 1, 1}, dim3{1, 1, 1}, nullptr, 0, s);
  cublasHandle_t h = blas_on(s);
  ncclComm_t comm = comm_as_rank0(1);
  for (int i = 0; i < 2; ++i) {
    cublasGemmEx(h, 0, 0, 16, 16, 16, nullptr, nullptr, 0, 16, nullptr, 0, 16, nullptr, nullptr, 0,
                 16, 68, -1);
    ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, s);
  }
  cudaDeviceSynchronize();
  Dl_info info;
  void* next = dlsym(RTLD_NEXT, "cudaLaunchKernel");
  const char* from = next && dladdr(next, &info) ? strrchr(info.dli_fname, '/') : nullptr;
  printf("ran %d next %s\n", g_ran.load(), from ? from + 1 : "?");
  usleep(100000);  // the drainer's last count
  return 0;
}
