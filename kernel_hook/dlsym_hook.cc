// The interposed dlsym: a library that opens libcuda and looks up
// cuGetProcAddress or a launch entry point by name (the CUDA runtime, linked
// in statically by cuBLAS and NCCL, and dynamically by PyTorch; Triton's
// launcher) gets the hook's wrapper (driver_wrap.h). Every other lookup goes
// to the real dlsym untouched.
//
// The entry (dlsym_entry.S) asks xt_dlsym_pick first; when it returns NULL,
// the entry jumps to the real dlsym with the caller's own return address on
// the stack: glibc's dlsym resolves RTLD_NEXT relative to its caller, so a
// C function forwarding the call would make RTLD_NEXT lookups of every other
// interposer (and of this hook's own resolve.cc) start after this library.
#include <dlfcn.h>

#include "driver_wrap.h"
#include "resolve.h"

#if defined(__x86_64__)
#define XT_DLSYM_HOOKED 1
#endif

// A sanitizer's runtime, preloaded first (make asan / tsan), calls dlsym
// while it sets itself up, before instrumented code can run: what a dlsym
// call runs here is left uninstrumented.
#define XT_UNINSTRUMENTED __attribute__((no_sanitize("address", "thread", "undefined")))

extern "C" {
// Read by dlsym_entry.S; hidden, so the entry reaches them without the PLT/GOT.
__attribute__((visibility("hidden"))) void* xt_real_dlsym_ptr = nullptr;
__attribute__((visibility("hidden"))) void* xt_dlsym_pick(void* handle, const char* name);
}

namespace xt {
namespace {

using DlsymFn = void* (*)(void*, const char*);

// glibc's dlsym, next after this library: in libc since 2.34 (GLIBC_2.34),
// in libdl before (the base versions, which later glibc keeps as well).
XT_UNINSTRUMENTED void* find_real_dlsym() {
  static const char* const kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* v : kVersions)
    if (void* p = dlvsym(RTLD_NEXT, "dlsym", v)) return p;
  return nullptr;
}

// Where the entry jumps if glibc's dlsym cannot be found (not seen on any
// glibc: its base version is there on every one): lookups fail, the process
// does not jump to address 0.
XT_UNINSTRUMENTED void* dlsym_unavailable(void*, const char*) { return nullptr; }

XT_UNINSTRUMENTED DlsymFn get_real_dlsym() {
  void* p = __atomic_load_n(&xt_real_dlsym_ptr, __ATOMIC_ACQUIRE);
  if (!p) {
    p = find_real_dlsym();
    if (!p) p = reinterpret_cast<void*>(&dlsym_unavailable);
    __atomic_store_n(&xt_real_dlsym_ptr, p, __ATOMIC_RELEASE);  // same value in every racer
  }
  return reinterpret_cast<DlsymFn>(p);
}

}  // namespace

void* real_dlsym(void* handle, const char* name) {
#ifdef XT_DLSYM_HOOKED
  // Called from this library, RTLD_NEXT means after it: what resolve.cc wants.
  return get_real_dlsym()(handle, name);
#else
  return dlsym(handle, name);
#endif
}

}  // namespace xt

// Called by the entry with the caller's arguments; also makes sure the real
// dlsym is known before the entry jumps to it. NULL: let the real one answer.
XT_UNINSTRUMENTED void* xt_dlsym_pick(void* handle, const char* name) {
  xt::DlsymFn real = xt::get_real_dlsym();
  xt::DriverEntry kind = xt::entry_by_symbol(name);
  // RTLD_NEXT depends on the caller's place in the search order: not ours to answer.
  if (kind == xt::kEntryNone || handle == RTLD_NEXT) return nullptr;
  void* p = real(handle, name);
  return p ? xt::wrap_entry(kind, p) : nullptr;  // not found: the real call sets dlerror
}
