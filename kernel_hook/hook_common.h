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
extern __thread int tl_launch_depth __attribute__((tls_model("initial-exec")));
inline int& call_depth() { return tl_depth; }
inline int& launch_depth() { return tl_launch_depth; }

// One nesting depth of hooked calls on this thread: only the outermost call
// of a nest records (outer).
template <int& (*Depth)()>
struct DepthGuard {
  bool outer;
  DepthGuard() : outer(Depth()++ == 0) {}
  ~DepthGuard() { --Depth(); }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

// Any hooked call: a GEMM's or collective's own nested calls pass through.
using Guard = DepthGuard<call_depth>;

// Kernel launches, apart from Guard's depth: a launch made inside a hooked
// GEMM or collective (cuBLAS's and NCCL's own kernels) is counted, while the
// runtime's cudaLaunchKernel calling the driver's cuLaunchKernel is one
// launch, counted once, by the outer hook.
using LaunchGuard = DepthGuard<launch_depth>;

// Hot path: counts one launch of func (an XT_KERNEL_* kind) on stream;
// starts the core on the process's first hooked call. A launch inside a
// hooked GEMM or collective is never probed: an NCCL kernel waits for its
// peers, and the op's own completion tracking already covers it.
inline void count_launch(const void* func, int kind, void* stream) {
  if (bypassed()) return;
  hook_touch();
  xt_count_launch(func, kind, call_depth() > 0 ? XT_NO_STREAM : stream);
}

// The stream a launch went to: 0 from a _ptsz entry point is the thread's
// per-thread default stream (cudaStreamPerThread), not the legacy one.
inline void* launch_stream(void* stream, bool per_thread) {
  return per_thread && stream == nullptr ? reinterpret_cast<void*>(uintptr_t(2)) : stream;
}

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
