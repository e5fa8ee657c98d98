// The wrappers of driver entry points (driver_wrap.h): kSlots fixed functions
// per signature, each calling the real pointer in its slot. A slot is claimed
// once by compare-and-swap and never changes after: the launch path reads one
// pointer, and nothing here allocates or locks.
#include "driver_wrap.h"

#include <cstring>

#include "hook_common.h"
#include "resolve.h"

namespace xt {
namespace {

// Distinct real pointers per signature: the legacy-stream and per-thread
// variants, and a second copy of the driver (compat libraries) at most.
constexpr int kSlots = 4;
std::atomic<void*> g_real[kEntryKinds][kSlots];  // static storage: all null at load
std::atomic<int> g_full_said[kEntryKinds];

template <DriverEntry K, int I, class F>
inline F real_of() {
  return reinterpret_cast<F>(g_real[K][I].load(std::memory_order_acquire));
}

template <int I>
CUresult launch_w(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {
  LaunchGuard g;
  CUresult r = real_of<kEntryLaunch, I, decltype(&::cuLaunchKernel)>()(f, gx, gy, gz, bx, by, bz,
                                                                       shmem, s, params, extra);
  if (g.outer && r == CUDA_SUCCESS) count_launch(f, XT_KERNEL_FUNCTION, s);
  return r;
}

template <int I>
CUresult launch_ex_w(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  LaunchGuard g;
  CUresult r = real_of<kEntryLaunchEx, I, decltype(&::cuLaunchKernelEx)>()(config, f, params,
                                                                           extra);
  if (g.outer && r == CUDA_SUCCESS) count_launch(f, XT_KERNEL_FUNCTION, XT_NO_STREAM);
  return r;
}

template <int I>
CUresult coop_w(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shmem, CUstream s, void** params) {
  LaunchGuard g;
  CUresult r = real_of<kEntryCoop, I, decltype(&::cuLaunchCooperativeKernel)>()(
      f, gx, gy, gz, bx, by, bz, shmem, s, params);
  if (g.outer && r == CUDA_SUCCESS) count_launch(f, XT_KERNEL_FUNCTION, s);
  return r;
}

// Entry points asked of a wrapped cuGetProcAddress come back wrapped too.
template <int I>
CUresult proc_v1_w(const char* symbol, void** pfn, int version, uint64_t flags) {
  CUresult r = real_of<kEntryProcV1, I, decltype(&::cuGetProcAddress)>()(symbol, pfn, version,
                                                                         flags);
  if (r == CUDA_SUCCESS) wrap_queried(symbol, pfn, version);
  return r;
}

template <int I>
CUresult proc_v2_w(const char* symbol, void** pfn, int version, uint64_t flags, int* status) {
  CUresult r = real_of<kEntryProcV2, I, decltype(&::cuGetProcAddress_v2)>()(symbol, pfn, version,
                                                                            flags, status);
  if (r == CUDA_SUCCESS) wrap_queried(symbol, pfn, version);
  return r;
}

#define XT_SLOTS(w) {reinterpret_cast<void*>(&w<0>), reinterpret_cast<void*>(&w<1>), \
                     reinterpret_cast<void*>(&w<2>), reinterpret_cast<void*>(&w<3>)}
void* const kWrappers[kEntryKinds][kSlots] = {
    XT_SLOTS(launch_w), XT_SLOTS(launch_ex_w), XT_SLOTS(coop_w), XT_SLOTS(proc_v1_w),
    XT_SLOTS(proc_v2_w),
};
#undef XT_SLOTS

const char* const kKindNames[kEntryKinds] = {"cuLaunchKernel", "cuLaunchKernelEx",
                                             "cuLaunchCooperativeKernel", "cuGetProcAddress",
                                             "cuGetProcAddress_v2"};

bool is_wrapper(void* p) {
  for (auto& row : kWrappers)
    for (void* w : row)
      if (w == p) return true;
  return false;
}

}  // namespace

// Uninstrumented: a sanitizer's runtime calls dlsym, and so this, before it
// is set up (dlsym_hook.cc).
__attribute__((no_sanitize("address", "thread", "undefined"))) DriverEntry entry_by_symbol(
    const char* n) {
  // Most dlsym calls of a process are not for the driver: one compare says so.
  if (!n || n[0] != 'c' || n[1] != 'u') return kEntryNone;
  static const struct {
    const char* name;
    DriverEntry kind;
  } kNames[] = {
      {"cuLaunchKernel", kEntryLaunch},       {"cuLaunchKernel_ptsz", kEntryLaunch},
      {"cuLaunchKernelEx", kEntryLaunchEx},   {"cuLaunchKernelEx_ptsz", kEntryLaunchEx},
      {"cuLaunchCooperativeKernel", kEntryCoop},
      {"cuLaunchCooperativeKernel_ptsz", kEntryCoop},
      {"cuGetProcAddress", kEntryProcV1},     {"cuGetProcAddress_v2", kEntryProcV2},
      {"cuGetProcAddress_v2_ptsz", kEntryProcV2},
  };
  for (const auto& e : kNames)
    if (strcmp(n, e.name) == 0) return e.kind;
  return kEntryNone;
}

void* wrap_entry(DriverEntry kind, void* real) {
  // The hook's own (a wrapper, or its exported cuLaunchKernel found by
  // dlsym(RTLD_DEFAULT)) already counts.
  if (kind == kEntryNone || !real || is_wrapper(real) || is_own(real)) return real;
  for (int i = 0; i < kSlots; ++i) {
    void* seen = nullptr;
    if (g_real[kind][i].compare_exchange_strong(seen, real, std::memory_order_acq_rel) ||
        seen == real)
      return kWrappers[kind][i];
  }
  if (g_full_said[kind].exchange(1) == 0)
    say("more than %d distinct %s entry points; launches through the others are not counted",
        kSlots, kKindNames[kind]);
  return real;
}

void wrap_queried(const char* symbol, void** pfn, int cuda_version) {
  if (!symbol || !pfn || !*pfn) return;
  DriverEntry kind = entry_by_symbol(symbol);
  // cuGetProcAddress asked for itself: the driver hands out v2 from CUDA 12.0.
  if (kind == kEntryProcV1 && strcmp(symbol, "cuGetProcAddress") == 0)
    kind = cuda_version < 0 ? kEntryNone : cuda_version >= 12000 ? kEntryProcV2 : kEntryProcV1;
  *pfn = wrap_entry(kind, *pfn);
}

}  // namespace xt
