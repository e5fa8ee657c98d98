// Driver launch entry points handed out at run time (cuGetProcAddress,
// cudaGetDriverEntryPoint, dlsym on libcuda): the hook hands out a wrapper
// instead, which calls the real function and counts the launch. This is how
// cuBLAS, NCCL (the runtime linked in statically), Triton and the runtime
// itself reach cuLaunchKernel*: never through the dynamic linker's binding,
// so the exported symbols alone would not see them.
#pragma once

namespace xt {

// One signature each. A wrapper is a fixed function per (kind, slot) that
// calls the real pointer stored in its slot: no allocation, no lock.
enum DriverEntry {
  kEntryNone = -1,
  kEntryLaunch = 0,  // cuLaunchKernel, cuLaunchKernel_ptsz
  kEntryLaunchEx,    // cuLaunchKernelEx, cuLaunchKernelEx_ptsz
  kEntryCoop,        // cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz
  kEntryProcV1,      // cuGetProcAddress (CUDA 11.3 .. 11.8 signature)
  kEntryProcV2,      // cuGetProcAddress_v2, cuGetProcAddress_v2_ptsz
  kEntryKinds
};

// The kind of a symbol asked of dlsym by its exact name.
DriverEntry entry_by_symbol(const char* name);

// A pointer to use instead of real, an entry point of kind: its wrapper; or
// real itself when kind is kEntryNone, real is already a wrapper, or the
// kind's slots all hold other pointers (said once: those go uncounted).
void* wrap_entry(DriverEntry kind, void* real);

// After a successful entry-point query for symbol (a base name, as
// cuGetProcAddress takes it: "cuLaunchKernel"; the flags pick _ptsz), puts
// the wrapper in *pfn. cuda_version: the query's, -1 when unknown (then a
// query for cuGetProcAddress itself is left alone: its signature depends on it).
void wrap_queried(const char* symbol, void** pfn, int cuda_version);

}  // namespace xt
