// The fake runtime's launches and driver entry-point queries (part of the fake
// libcudart.so.13, with fake_cudart.cc). As the real runtime does, a launch
// goes on through the driver's cuLaunchKernel, found with cuGetProcAddress
// (static_driver.h); cudaGetDriverEntryPoint* ask the driver's cuGetProcAddress.
#include <map>
#include <mutex>
#include <utility>

#include "fake_api.h"
#include "static_driver.h"

extern "C" {

// The driver function of a host function launched through api (each api has
// its own delay controls). Made once, never freed; a thread's last one is kept
// at hand, so a loop of one kernel takes no lock.
static CUfunction function_of(const void* func, const char* api) {
  thread_local const void* last_func = nullptr;
  thread_local const char* last_api = nullptr;
  thread_local CUfunction last = nullptr;
  if (func == last_func && api == last_api) return last;
  static std::mutex lock;
  static auto* made = new std::map<std::pair<const void*, const char*>, CUfunction>;
  std::lock_guard<std::mutex> lk(lock);
  CUfunction& f = (*made)[{func, api}];
  if (!f) f = new CUfunc_st{reinterpret_cast<void (*)(void**)>(const_cast<void*>(func)), nullptr, api};
  last_func = func;
  last_api = api;
  return last = f;
}

// As the real runtime does, a launch goes on through the driver's
// cuLaunchKernel, which it found with cuGetProcAddress (static_driver.h).
static cudaError_t launch(const char* api, const void* func, dim3 grid, dim3 block, void** args,
                          size_t shmem, cudaStream_t stream) {
  fake_touch_context();
  NOTE(api, FAKE_U(func), grid.x, grid.y, grid.z, block.x, block.y, block.z, FAKE_U(args), shmem,
       FAKE_U(stream));
  if (note_result) return note_result;
  if (fake_stream_capturing(stream)) {
    fake_note_captured();
    return cudaSuccess;
  }
  static auto driver =
      reinterpret_cast<decltype(&::cuLaunchKernel)>(fake_static::driver_entry("cuLaunchKernel"));
  if (!driver) {  // a variant built without the fake driver beside it
    fake_enqueue(stream, api, reinterpret_cast<void (*)(void**)>(const_cast<void*>(func)), args);
    return cudaSuccess;
  }
  fake_quiet(1);
  int r = driver(function_of(func, api), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                 unsigned(shmem), stream, args, nullptr);
  fake_quiet(-1);
  return r;
}

// The runtime's driver entry-point queries: the driver's cuGetProcAddress.
static cudaError_t entry_point(const char* symbol, void** pfn, int version,
                               unsigned long long flags, int* status) {
  static auto gpa = reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(
      fake_static::driver_entry("cuGetProcAddress", 0));
  if (!gpa) return 49;  // cudaErrorSymbolNotFound... any failure will do
  fake_quiet(1);
  int r = gpa(symbol, pfn, version, flags, status);
  fake_quiet(-1);
  return r == CUDA_SUCCESS ? cudaSuccess : 500;  // cudaErrorSymbolNotFound
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** pfn, unsigned long long flags,
                                    int* status) {
  NOTE("cudaGetDriverEntryPoint", FAKE_U(symbol), FAKE_U(pfn), flags, FAKE_U(status));
  if (note_result) return note_result;
  return entry_point(symbol, pfn, 13000, flags, status);
}
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** pfn, unsigned long long flags,
                                         int* status) {
  NOTE("cudaGetDriverEntryPoint_ptsz", FAKE_U(symbol), FAKE_U(pfn), flags, FAKE_U(status));
  if (note_result) return note_result;
  return entry_point(symbol, pfn, 13000, flags | 2, status);
}
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** pfn, unsigned int version,
                                             unsigned long long flags, int* status) {
  NOTE("cudaGetDriverEntryPointByVersion", FAKE_U(symbol), FAKE_U(pfn), version, flags,
       FAKE_U(status));
  if (note_result) return note_result;
  return entry_point(symbol, pfn, int(version), flags, status);
}
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                             cudaStream_t stream) {
  return launch("cudaLaunchKernel", func, grid, block, args, shmem, stream);
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t shmem, cudaStream_t stream) {
  return launch("cudaLaunchKernel_ptsz", func, grid, block, args, shmem, stream);
}
// The fake's kernel handles are the host functions themselves.
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3 grid, dim3 block, void** args, size_t shmem,
                               cudaStream_t stream) {
  return launch("__cudaLaunchKernel", k, grid, block, args, shmem, stream);
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3 grid, dim3 block, void** args,
                                    size_t shmem, cudaStream_t stream) {
  return launch("__cudaLaunchKernel_ptsz", k, grid, block, args, shmem, stream);
}

static cudaError_t launch_ex(const char* api, const cudaLaunchConfig_t* config, const void* func,
                             void** args) {
  NOTE(api, FAKE_U(config), FAKE_U(func), FAKE_U(args));
  if (note_result) return note_result;
  if (!config) return cudaErrorInvalidValue;
  fake_enqueue(config->stream, api, reinterpret_cast<void (*)(void**)>(const_cast<void*>(func)),
               args);
  return cudaSuccess;
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return launch_ex("cudaLaunchKernelExC", config, func, args);
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  return launch_ex("cudaLaunchKernelExC_ptsz", config, func, args);
}

}  // extern "C"
