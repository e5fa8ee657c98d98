// A fake libcuda.so.1: the driver's kernel launches and its entry-point query,
// on the fake device of the fake libcudart (fake_enqueue). A CUfunction is a
// CUfunc_st (fake_api.h). Linked -Bsymbolic: like the real driver, the
// pointers cuGetProcAddress hands out are its own functions, never a
// preloaded library's of the same name.
#include <cstring>

#include "fake_api.h"

namespace {

CUresult launch(const char* entry, CUfunction f, CUstream stream, void** params, int note_result) {
  if (note_result) return note_result;
  if (!f) return 1;  // CUDA_ERROR_INVALID_VALUE
  if (fake_stream_capturing(stream)) {
    fake_note_captured();
    return CUDA_SUCCESS;
  }
  fake_enqueue(stream, f->api ? f->api : entry, f->fn, params);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

#define FAKE_CU_LAUNCH(fn)                                                                    \
  CUresult fn(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,   \
              unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {          \
    NOTE(#fn, FAKE_U(f), gx, gy, gz, bx, by, bz, shmem, FAKE_U(s), FAKE_U(params),            \
         FAKE_U(extra));                                                                       \
    return launch(#fn, f, s, params, note_result);                                            \
  }
FAKE_CU_LAUNCH(cuLaunchKernel)
FAKE_CU_LAUNCH(cuLaunchKernel_ptsz)

#define FAKE_CU_LAUNCH_EX(fn)                                                                 \
  CUresult fn(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {     \
    NOTE(#fn, FAKE_U(config), FAKE_U(f), FAKE_U(params), FAKE_U(extra));                      \
    if (note_result) return note_result;                                                     \
    if (!config) return 1;                                                                   \
    return launch(#fn, f, config->hStream, params, 0);                                       \
  }
FAKE_CU_LAUNCH_EX(cuLaunchKernelEx)
FAKE_CU_LAUNCH_EX(cuLaunchKernelEx_ptsz)

#define FAKE_CU_LAUNCH_COOP(fn)                                                               \
  CUresult fn(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,   \
              unsigned bz, unsigned shmem, CUstream s, void** params) {                       \
    NOTE(#fn, FAKE_U(f), gx, gy, gz, bx, by, bz, shmem, FAKE_U(s), FAKE_U(params));           \
    return launch(#fn, f, s, params, note_result);                                            \
  }
FAKE_CU_LAUNCH_COOP(cuLaunchCooperativeKernel)
FAKE_CU_LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)

CUresult cuFuncGetName(const char** name, CUfunction f) {
  if (!f || !f->name) return 1;
  *name = f->name;
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, uint64_t flags,
                             int* status);

// The driver's table: base name -> legacy-stream and per-thread variants.
static CUresult query(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  static const struct {
    const char* name;
    void* legacy;
    void* per_thread;
  } kTable[] = {
      {"cuLaunchKernel", (void*)&cuLaunchKernel, (void*)&cuLaunchKernel_ptsz},
      {"cuLaunchKernelEx", (void*)&cuLaunchKernelEx, (void*)&cuLaunchKernelEx_ptsz},
      {"cuLaunchCooperativeKernel", (void*)&cuLaunchCooperativeKernel,
       (void*)&cuLaunchCooperativeKernel_ptsz},
      {"cuFuncGetName", (void*)&cuFuncGetName, (void*)&cuFuncGetName},
  };
  *pfn = nullptr;
  if (symbol && strcmp(symbol, "cuGetProcAddress") == 0)
    *pfn = version >= 12000 ? (void*)&cuGetProcAddress_v2 : (void*)&cuGetProcAddress;
  for (const auto& e : kTable)
    if (symbol && strcmp(symbol, e.name) == 0) *pfn = (flags & 2) ? e.per_thread : e.legacy;
  if (status) *status = *pfn ? 0 : 1;  // CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND
  return *pfn ? CUDA_SUCCESS : 500;    // CUDA_ERROR_NOT_FOUND
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, uint64_t flags) {
  NOTE("cuGetProcAddress", FAKE_U(symbol), FAKE_U(pfn), uint64_t(version), flags);
  if (note_result) return note_result;
  return query(symbol, pfn, version, flags, nullptr);
}

#define FAKE_CU_PROC_V2(fn)                                                                   \
  CUresult fn(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {      \
    NOTE(#fn, FAKE_U(symbol), FAKE_U(pfn), uint64_t(version), flags, FAKE_U(status));          \
    if (note_result) return note_result;                                                       \
    return query(symbol, pfn, version, flags, status);                                         \
  }
FAKE_CU_PROC_V2(cuGetProcAddress_v2)
FAKE_CU_PROC_V2(cuGetProcAddress_v2_ptsz)

}  // extern "C"
