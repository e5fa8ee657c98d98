// Short, readable names for kernels, made on the drainer thread only (it may
// allocate and call into the runtime; the launch path never does).
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "core_internal.h"

namespace xt {
namespace {

// Made on first use and never destroyed, like the drainer's other state.
std::unordered_map<const void*, std::string>& names() {
  static auto* p = new std::unordered_map<const void*, std::string>;
  return *p;
}

// "void at::native::foo<4, F>(int, F)" -> "at::native::foo": the template and
// argument lists make names too long for a record and split one kernel's counts.
std::string shorten(const char* symbol) {
  std::string s = symbol;
  int status = 0;
  char* dem = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status == 0 && dem) s = dem;
  free(dem);
  // "(anonymous namespace)::" would otherwise end the name at its "(".
  const std::string anon = "(anonymous namespace)::";
  for (size_t at; (at = s.find(anon)) != std::string::npos;) s.erase(at, anon.size());
  size_t cut = s.find_first_of("<(");
  if (cut != std::string::npos) s.resize(cut);
  size_t space = s.rfind(' ');  // a return type before the name
  if (space != std::string::npos) s.erase(0, space + 1);
  while (s.size() > kNameBytes - 1) {  // keep the most specific part
    size_t sep = s.find("::");
    if (sep == std::string::npos) {
      s.erase(0, s.size() - (kNameBytes - 1));
      break;
    }
    s.erase(0, sep + 2);
  }
  return s.empty() ? std::string(symbol).substr(0, kNameBytes - 1) : s;
}

// The key's tag (core.h): bit 0 clear, a host stub (all its bits are the
// address); set, a handle whose bit 1 tells a CUfunction from a CUkernel.
std::string lookup(const xt_device_ops& ops, const void* key) {
  uintptr_t k = uintptr_t(key);
  int kind = !(k & 1) ? XT_KERNEL_STUB : (k & 2) ? XT_KERNEL_FUNCTION : XT_KERNEL_HANDLE;
  const void* func = reinterpret_cast<const void*>(kind == XT_KERNEL_STUB ? k : k & ~uintptr_t(3));
  const char* name = ops.kernel_name ? ops.kernel_name(func, kind) : nullptr;
  if (name && *name) return shorten(name);
  Dl_info info;
  if (kind == XT_KERNEL_STUB && dladdr(func, &info) && info.dli_sname && info.dli_saddr == func)
    return shorten(info.dli_sname);
  char buf[32];
  snprintf(buf, sizeof(buf), "kernel@%p", func);
  return buf;
}

}  // namespace

void kernel_display_name(const xt_device_ops& ops, const void* key, char (&out)[kNameBytes]) {
  auto& cache = names();
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, lookup(ops, key)).first;
  copy_name(out, it->second.c_str());
}

}  // namespace xt
