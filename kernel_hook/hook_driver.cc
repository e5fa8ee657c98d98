// The exported shim of the CUDA driver's kernel launches and of the calls
// that hand out driver entry points. A launch is counted per CUfunction, like
// the runtime's per host stub (hook.cc); a runtime launch reaching the driver
// is one launch (LaunchGuard). Programs linked against libcuda bind to these;
// libraries that look the entry points up at run time get wrappers
// (driver_wrap.cc) from the queries below and from dlsym (dlsym_hook.cc).
#include "driver_wrap.h"
#include "hook_common.h"

using xt::LaunchGuard;

namespace {

constexpr const char* kDriver = "libcuda.so.1";
enum { kCudaSymbolMissing = 302 };  // cudaErrorSharedObjectSymbolNotFound

XT_REAL(cuLaunchKernel, kDriver);
XT_REAL(cuLaunchKernel_ptsz, kDriver);
XT_REAL(cuLaunchKernelEx, kDriver);
XT_REAL(cuLaunchKernelEx_ptsz, kDriver);
XT_REAL(cuLaunchCooperativeKernel, kDriver);
XT_REAL(cuLaunchCooperativeKernel_ptsz, kDriver);
XT_REAL(cuGetProcAddress, kDriver);
XT_REAL(cuGetProcAddress_v2, kDriver);
XT_REAL(cuGetProcAddress_v2_ptsz, kDriver);
XT_REAL(cudaGetDriverEntryPoint, XT_SONAME_CUDART);
XT_REAL(cudaGetDriverEntryPoint_ptsz, XT_SONAME_CUDART);
XT_REAL(cudaGetDriverEntryPointByVersion, XT_SONAME_CUDART);

}  // namespace

// ---- launches: counted per CUfunction ----------------------------------------

#define XT_CU_LAUNCH(fn)                                                                   \
  XT_EXPORT CUresult fn(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,   \
                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params, \
                        void** extra) {                                                    \
    auto real = XT_GET(fn);                                                                \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    LaunchGuard g;                                                                         \
    CUresult r = real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);                 \
    if (g.outer && r == CUDA_SUCCESS) xt::count_launch(f, XT_KERNEL_FUNCTION, s);             \
    return r;                                                                              \
  }

#define XT_CU_LAUNCH_EX(fn)                                                                 \
  XT_EXPORT CUresult fn(const CUlaunchConfig* config, CUfunction f, void** params,         \
                        void** extra) {                                                    \
    auto real = XT_GET(fn);                                                                \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    LaunchGuard g;                                                                         \
    CUresult r = real(config, f, params, extra);                                           \
    if (g.outer && r == CUDA_SUCCESS) xt::count_launch(f, XT_KERNEL_FUNCTION, XT_NO_STREAM);             \
    return r;                                                                              \
  }

#define XT_CU_LAUNCH_COOP(fn)                                                               \
  XT_EXPORT CUresult fn(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,   \
                        unsigned by, unsigned bz, unsigned shmem, CUstream s,               \
                        void** params) {                                                   \
    auto real = XT_GET(fn);                                                                \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    LaunchGuard g;                                                                         \
    CUresult r = real(f, gx, gy, gz, bx, by, bz, shmem, s, params);                        \
    if (g.outer && r == CUDA_SUCCESS) xt::count_launch(f, XT_KERNEL_FUNCTION, s);             \
    return r;                                                                              \
  }

XT_CU_LAUNCH(cuLaunchKernel)
XT_CU_LAUNCH(cuLaunchKernel_ptsz)
XT_CU_LAUNCH_EX(cuLaunchKernelEx)
XT_CU_LAUNCH_EX(cuLaunchKernelEx_ptsz)
XT_CU_LAUNCH_COOP(cuLaunchCooperativeKernel)
XT_CU_LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)

// ---- entry-point queries: launch entry points come back wrapped --------------

XT_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  auto real = XT_GET(cuGetProcAddress);
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS) xt::wrap_queried(symbol, pfn, version);
  return r;
}

#define XT_CU_PROC_V2(fn)                                                                  \
  XT_EXPORT CUresult fn(const char* symbol, void** pfn, int version, uint64_t flags,       \
                        int* status) {                                                     \
    auto real = XT_GET(fn);                                                                \
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;                                          \
    CUresult r = real(symbol, pfn, version, flags, status);                                \
    if (r == CUDA_SUCCESS) xt::wrap_queried(symbol, pfn, version);                         \
    return r;                                                                              \
  }

XT_CU_PROC_V2(cuGetProcAddress_v2)
XT_CU_PROC_V2(cuGetProcAddress_v2_ptsz)

// The runtime's query names no version: one for cuGetProcAddress is left alone.
#define XT_RT_ENTRY(fn)                                                                    \
  XT_EXPORT cudaError_t fn(const char* symbol, void** pfn, unsigned long long flags,       \
                           int* status) {                                                  \
    auto real = XT_GET(fn);                                                                \
    if (!real) return kCudaSymbolMissing;                                                  \
    cudaError_t r = real(symbol, pfn, flags, status);                                      \
    if (r == cudaSuccess) xt::wrap_queried(symbol, pfn, -1);                               \
    return r;                                                                              \
  }

XT_RT_ENTRY(cudaGetDriverEntryPoint)
XT_RT_ENTRY(cudaGetDriverEntryPoint_ptsz)

XT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** pfn,
                                                       unsigned int version,
                                                       unsigned long long flags, int* status) {
  auto real = XT_GET(cudaGetDriverEntryPointByVersion);
  if (!real) return kCudaSymbolMissing;
  cudaError_t r = real(symbol, pfn, version, flags, status);
  if (r == cudaSuccess) xt::wrap_queried(symbol, pfn, int(version));
  return r;
}
