// Shared by the two shim files (hook.cc, hook_nccl.cc): the recursion guard
// and typed access to real symbols.
#pragma once

#include "core.h"
#include "cuda_api.h"
#include "resolve.h"

#define XT_EXPORT extern "C" __attribute__((visibility("default")))
#define XT_REAL(fn, lib) static xt::RealSym real_##fn{#fn, lib}
#define XT_GET(fn) xt::get_real<decltype(&::fn)>(real_##fn)

namespace xt {

extern __thread int tl_depth __attribute__((tls_model("initial-exec")));

// Depth of hooked calls on this thread: only the outermost one records.
struct Guard {
  bool outer;
  Guard() : outer(tl_depth++ == 0) {}
  ~Guard() { --tl_depth; }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};

// Whether a GEMM or collective is to be recorded: not bypassed
// (xpu_timer_hook_bypass), and the core on (started by the first hooked call).
inline bool recording() {
  if (bypassed()) return false;
  hook_touch();
  return xt_core_active() != 0;
}

template <class F>
inline F get_real(RealSym& s) {
  void* p = s.fn.load(std::memory_order_relaxed);
  if (__builtin_expect(p == nullptr, 0)) p = s.resolve();
  return reinterpret_cast<F>(p);
}

}  // namespace xt
