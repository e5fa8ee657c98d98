// Finding the real functions behind the hooked ones, once, and the hook's lazy
// start. Used only by the exported shim (hook.cc).
#pragma once

#include <atomic>

namespace xt {

// One real symbol, resolved on first use. Missing: named once on stderr and
// remembered, so later calls cost one load.
struct RealSym {
  const char* name;
  const char* soname;
  std::atomic<void*> fn{nullptr};
  std::atomic<int> missing{0};
  void* resolve(bool announce = true);  // announce: name it on stderr once if missing
};

// Finds name after this library (dlsym(RTLD_NEXT)), else in an already loaded
// soname (dlopen(RTLD_NOLOAD)): libraries loaded RTLD_LOCAL are not in the
// global scope that RTLD_NEXT searches. Never loads a library.
void* find_real(const char* name, const char* soname);

// Whether p lies in this library (dladdr: not for a hot path).
bool is_own(void* p);

// The real dlsym, called from this library (dlsym_hook.cc): the exported
// dlsym would hand the hook its own wrappers of driver entry points.
void* real_dlsym(void* handle, const char* name);

// One line on stderr, prefixed with the hook's identity (pid, rank).
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

extern std::atomic<int> g_start_state;  // 0 untried, 1 starting, 2 settled
bool hook_start_slow();

// Starts the core on the first hooked call of the process (lazy start: a
// process that never calls CUDA never starts it). One load afterwards. A
// thread racing the starting one waits for it, at most 100 ms.
inline void hook_touch() {
  if (__builtin_expect(g_start_state.load(std::memory_order_acquire) != 2, 0)) hook_start_slow();
}

}  // namespace xt

// Colon-separated sonames tried by dlopen(RTLD_NOLOAD), newest first.
#define XT_SONAME_CUDART "libcudart.so.13:libcudart.so.12:libcudart.so"
#define XT_SONAME_CUBLAS "libcublas.so.13:libcublas.so.12:libcublas.so"
#define XT_SONAME_CUBLASLT "libcublasLt.so.13:libcublasLt.so.12:libcublasLt.so"
#define XT_SONAME_NCCL "libnccl.so.2:libnccl.so"
