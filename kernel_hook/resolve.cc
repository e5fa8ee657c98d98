// Real-symbol resolution, the one-line messages, and the lazy start that reads
// the environment and hands the core a table of real CUDA functions.
#include "resolve.h"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core.h"
#include "cuda_api.h"

namespace xt {

std::atomic<int> g_start_state{0};

namespace {

struct ErrnoKeeper {
  int saved = errno;
  ~ErrnoKeeper() { errno = saved; }
};

Dl_info g_self;  // to refuse resolving a name back to this library

// Unset or empty: the default, silently. Anything else that is not a whole
// number in int's range: one line, the default (a typo must not pass unseen).
int env_int(const char* name, int def) {
  const char* v = getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  errno = 0;  // the callers' errno is kept by their ErrnoKeeper
  long x = strtol(v, &end, 10);
  if (*end == '\0' && errno == 0 && x >= INT_MIN && x <= INT_MAX) return int(x);
  say("%s=%s is not a whole number; using %d", name, v, def);
  return def;
}

// A period: 0 would make the drainer spin on a core of the training process,
// a negative one sleep for hours. Not positive: one line, the default.
int positive_env(const char* name, int def) {
  int v = env_int(name, def);
  if (v > 0) return v;
  say("%s=%s is not a positive number; using %d", name, getenv(name), def);
  return def;
}

// ---- the core's device operations, on the real runtime ----
RealSym r_create{"cudaEventCreateWithFlags", XT_SONAME_CUDART};
RealSym r_destroy{"cudaEventDestroy", XT_SONAME_CUDART};
RealSym r_record{"cudaEventRecord", XT_SONAME_CUDART};
RealSym r_query{"cudaEventQuery", XT_SONAME_CUDART};
RealSym r_elapsed{"cudaEventElapsedTime", XT_SONAME_CUDART};
RealSym r_getdev{"cudaGetDevice", XT_SONAME_CUDART};
RealSym r_setdev{"cudaSetDevice", XT_SONAME_CUDART};
RealSym r_capturing{"cudaStreamIsCapturing", XT_SONAME_CUDART};
RealSym r_funcname{"cudaFuncGetName", XT_SONAME_CUDART};
RealSym r_kernelname{"cuKernelGetName", "libcuda.so.1"};  // driver, CUDA >= 12.3
RealSym r_cufuncname{"cuFuncGetName", "libcuda.so.1"};    // driver, CUDA >= 12.3
RealSym r_cu_record{"cuEventRecord", "libcuda.so.1"};  // same handles as the runtime's
RealSym r_pci_bus_id{"cudaDeviceGetPCIBusId", XT_SONAME_CUDART};
RealSym r_props_v2{"cudaGetDeviceProperties_v2", XT_SONAME_CUDART};
RealSym r_props{"cudaGetDeviceProperties", XT_SONAME_CUDART};
RealSym r_capmode{"cudaThreadExchangeStreamCaptureMode", XT_SONAME_CUDART};
RealSym r_peek_error{"cudaPeekAtLastError", XT_SONAME_CUDART};
RealSym r_get_error{"cudaGetLastError", XT_SONAME_CUDART};
RealSym* const kRequired[] = {&r_create, &r_destroy, &r_record,  &r_query,
                              &r_elapsed, &r_getdev, &r_setdev, &r_capturing};

template <class F>
F fn(RealSym& s) {
  return reinterpret_cast<F>(s.fn.load(std::memory_order_relaxed));
}

// A runtime call of the hook's that fails on the caller's thread leaves its
// error as that thread's last error, which the caller's next cudaGetLastError
// (PyTorch checks it after every kernel launch) would take for its own: clear
// it, unless an error of the caller's was pending before (then leave all be).
struct LastErrorKeeper {
  int before = -1;  // unknown without cudaPeekAtLastError: never clear
  LastErrorKeeper() {
    auto peek = fn<decltype(&::cudaPeekAtLastError)>(r_peek_error);
    if (peek && fn<decltype(&::cudaGetLastError)>(r_get_error)) before = peek();
  }
  int check(int r) {
    if (r != cudaSuccess && before == cudaSuccess) fn<decltype(&::cudaGetLastError)>(r_get_error)();
    return r;
  }
};

int op_get_device(int* d) { return fn<decltype(&::cudaGetDevice)>(r_getdev)(d); }
int op_set_device(int d) { return fn<decltype(&::cudaSetDevice)>(r_setdev)(d); }
int op_event_create(void** ev) {
  LastErrorKeeper keep;
  return keep.check(fn<decltype(&::cudaEventCreateWithFlags)>(r_create)(
      reinterpret_cast<cudaEvent_t*>(ev), cudaEventDefault));
}
// The drainer's fences only mark completion: no timestamp to write or read.
int op_event_create_untimed(void** ev) {
  LastErrorKeeper keep;
  return keep.check(fn<decltype(&::cudaEventCreateWithFlags)>(r_create)(
      reinterpret_cast<cudaEvent_t*>(ev), cudaEventDisableTiming));
}
int op_event_destroy(void* ev) {
  LastErrorKeeper keep;
  return keep.check(fn<decltype(&::cudaEventDestroy)>(r_destroy)(static_cast<cudaEvent_t>(ev)));
}
int op_event_record(void* ev, void* stream) {
  LastErrorKeeper keep;
  return keep.check(fn<decltype(&::cudaEventRecord)>(r_record)(
      static_cast<cudaEvent_t>(ev), static_cast<cudaStream_t>(stream)));
}
// The driver's record skips the runtime's checks on the hot path. Runtime
// events and streams are driver events and streams (same handle values, also
// for the legacy and per-thread default streams), so mixing is allowed.
int op_cu_event_record(void* ev, void* stream) {
  return reinterpret_cast<int (*)(void*, void*)>(r_cu_record.fn.load(std::memory_order_relaxed))(
      ev, stream);
}
int op_event_query(void* ev) {
  cudaError_t r = fn<decltype(&::cudaEventQuery)>(r_query)(static_cast<cudaEvent_t>(ev));
  if (r == cudaSuccess) return XT_EV_READY;
  if (r == cudaErrorNotReady) return XT_EV_NOT_READY;
  if (r == cudaErrorCudartUnloading) return XT_EV_UNLOADING;
  return XT_EV_ERROR;
}
int op_event_elapsed_ns(void* a, void* b, uint64_t* ns) {
  float ms = 0;
  cudaError_t r = fn<decltype(&::cudaEventElapsedTime)>(r_elapsed)(
      &ms, static_cast<cudaEvent_t>(a), static_cast<cudaEvent_t>(b));
  if (r != cudaSuccess || ms < 0) return -1;
  *ns = uint64_t(double(ms) * 1e6);
  return 0;
}
int op_stream_capturing(void* stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  LastErrorKeeper keep;
  cudaError_t r = keep.check(fn<decltype(&::cudaStreamIsCapturing)>(r_capturing)(
      static_cast<cudaStream_t>(stream), &st));
  // An error here (e.g. the legacy stream while another captures) means a
  // capture is under way somewhere: recording an event could break it.
  return (r != cudaSuccess || st != cudaStreamCaptureStatusNone) ? 1 : 0;
}
const char* op_kernel_name(const void* func, int kind) {
  using GetName = int (*)(const char**, const void*);
  const char* name = nullptr;
  void* p = kind != XT_KERNEL_FUNCTION ? r_funcname.resolve(false) : nullptr;
  if (p && reinterpret_cast<decltype(&::cudaFuncGetName)>(p)(&name, func) == cudaSuccess)
    return name;
  // The driver names a CUfunction; one launched through cuLaunchKernel may
  // also be a CUkernel, and a cudaKernel_t is one: cuKernelGetName then.
  p = kind == XT_KERNEL_FUNCTION ? r_cufuncname.resolve(false) : nullptr;
  if (p && reinterpret_cast<GetName>(p)(&name, func) == 0) return name;
  p = kind != XT_KERNEL_STUB ? r_kernelname.resolve(false) : nullptr;
  if (p && reinterpret_cast<GetName>(p)(&name, func) == 0) return name;
  return nullptr;
}

// The runtime's PCI address and UUID of a device (the drainer, once per
// device): what the tracer takes from torch.cuda.get_device_properties.
constexpr size_t kDevicePropBytes = 4096;  // more than any SDK's cudaDeviceProp
constexpr size_t kDevicePropUuid = 256;    // after char name[256]
int op_device_identity(int device, uint8_t uuid[16], uint64_t* pci) {
  LastErrorKeeper keep;
  int has = 0;
  char bus[64] = {};
  void* p = r_pci_bus_id.resolve(false);
  unsigned domain = 0, b = 0, d = 0, f = 0;
  if (p && keep.check(reinterpret_cast<decltype(&::cudaDeviceGetPCIBusId)>(p)(
               bus, int(sizeof(bus) - 1), device)) == cudaSuccess &&
      sscanf(bus, "%x:%x:%x.%x", &domain, &b, &d, &f) == 4) {
    *pci = (uint64_t(domain) << 32) | (uint64_t(b & 0xFF) << 16) | (uint64_t(d & 0xFF) << 8) |
           uint64_t(f & 0xFF);
    has |= XT_DEV_HAS_PCI;
  }
  p = r_props_v2.resolve(false);
  if (!p) p = r_props.resolve(false);
  alignas(16) static char props[kDevicePropBytes];  // the drainer's alone (pass lock)
  memset(props, 0, sizeof(props));
  if (p && keep.check(reinterpret_cast<decltype(&::cudaGetDeviceProperties)>(p)(
               reinterpret_cast<cudaDeviceProp*>(props), device)) == cudaSuccess) {
    memcpy(uuid, props + kDevicePropUuid, 16);
    for (int i = 0; i < 16; ++i)
      if (uuid[i]) has |= XT_DEV_HAS_UUID;  // all zero: the runtime gave none
  }
  return has;
}

// cudaEventQuery is an unsafe call during a capture: in the default (global)
// mode, one from any thread invalidates another thread's capture (the bug
// PyTorch's NCCL watchdog had, pytorch#104555). Thread-local mode (1) on the
// drainer ignores other threads' captures; the drainer never captures.
void op_drainer_thread_init() {
  void* p = r_capmode.resolve(false);
  cudaStreamCaptureMode_t mode = 1;  // cudaStreamCaptureModeThreadLocal
  if (p) reinterpret_cast<decltype(&::cudaThreadExchangeStreamCaptureMode)>(p)(&mode);
}

// The child of a fork without exec (DataLoader workers) stays inert: the
// drainer is not there, the region is the parent's. Settled, too: a fork
// while another thread was starting the core must not leave every hooked
// call of the child waiting for a start that never ends.
void after_fork_child() {
  xt_core_after_fork_child();
  g_start_state.store(2, std::memory_order_release);
}

// Device-time 1 in N GEMMs/collectives by default: one event record costs
// ~1.45 us of host time on the GPU VMs measured (docs/kernel_hook.md).
constexpr int kDefaultTimeEvery = 8;
// A kernel completion probe per thread at most every 5 ms: an untimed event
// record (0.2-0.3 us) per 5 ms is under 0.01 % of a thread's time.
constexpr int kDefaultProbeMs = 5;

// Reads the environment and starts the core; every failure is one line.
void start_core() {
  const char* disable = getenv("XPU_TIMER_HOOK_DISABLE");
  if (disable && strcmp(disable, "1") == 0) return;  // asked for: stay inert, silently
  const char* dir = getenv("XPU_TIMER_SHM_DIR");
  if (!dir || !*dir) return;  // not under xpu_timer_launch: nothing to write to
  // One owner per rank: the worker's tracer names its process in
  // XPU_TIMER_TRACER_PID, which spawned children (compile workers, data
  // loaders using CUDA) inherit along with RANK and LD_PRELOAD. They stay
  // inert, silently, as the tracer does, so they never write a region for
  // their parent's rank.
  const char* owner = getenv("XPU_TIMER_TRACER_PID");
  if (owner && *owner && strtol(owner, nullptr, 10) != long(getpid())) return;
  for (RealSym* s : kRequired) {
    if (!s->resolve(false)) {
      say("%s not found in %s; timing switched off, calls pass through unchanged", s->name,
          s->soname);
      return;
    }
  }
  r_peek_error.resolve(false);  // optional: LastErrorKeeper
  r_get_error.resolve(false);
  int cap = env_int("XPU_TIMER_RING_CAPACITY", 4096);
  if (cap <= 0 || (cap & (cap - 1))) {
    say("XPU_TIMER_RING_CAPACITY=%s is not a power of two; using 4096",
        getenv("XPU_TIMER_RING_CAPACITY"));
    cap = 4096;
  }
  xt_config cfg;
  cfg.shm_dir = dir;
  cfg.pid = int(getpid());
  cfg.rank = env_int("RANK", 0);
  cfg.local_rank = env_int("LOCAL_RANK", 0);
  cfg.world_size = env_int("WORLD_SIZE", 1);
  cfg.capacity = uint32_t(cap);
  cfg.poll_us = uint32_t(positive_env("XPU_TIMER_HOOK_POLL_US", 1000));
  cfg.count_every_ms = uint32_t(positive_env("XPU_TIMER_HOOK_COUNT_MS", 500));
  cfg.time_every = uint32_t(positive_env("XPU_TIMER_HOOK_TIME_EVERY", kDefaultTimeEvery));
  const char* completion = getenv("XPU_TIMER_HOOK_COMPLETION");
  cfg.completion_events = completion && strcmp(completion, "event") == 0;
  if (completion && *completion && !cfg.completion_events && strcmp(completion, "fence") != 0)
    say("XPU_TIMER_HOOK_COMPLETION=%s is neither fence nor event; using fence", completion);
  const char* check = getenv("XPU_TIMER_HOOK_CAPTURE_CHECK");
  cfg.capture_check_always = check && strcmp(check, "always") == 0;
  cfg.visible_devices = getenv("CUDA_VISIBLE_DEVICES");  // copied by the core
  // 0 switches the probes off; a negative period would be read as huge.
  int probe_ms = env_int("XPU_TIMER_HOOK_PROBE_MS", kDefaultProbeMs);
  if (probe_ms < 0) {
    say("XPU_TIMER_HOOK_PROBE_MS=%s is negative; using %d", getenv("XPU_TIMER_HOOK_PROBE_MS"),
        kDefaultProbeMs);
    probe_ms = kDefaultProbeMs;
  }
  cfg.probe_every_ms = uint32_t(probe_ms);
  xt_device_ops ops = {op_get_device,   op_set_device,       op_event_create,
                       op_event_destroy, op_event_record,    op_event_query,
                       op_event_elapsed_ns, op_stream_capturing, op_kernel_name,
                       op_drainer_thread_init, op_event_create_untimed, op_device_identity};
  const char* api = getenv("XPU_TIMER_HOOK_EVENT_API");
  if (api && strcmp(api, "driver") == 0 && r_cu_record.resolve(false))
    ops.event_record = op_cu_event_record;
  char err[512];
  if (xt_core_start(&cfg, &ops, err, sizeof(err)) != 0)
    say("%s; timing switched off, calls pass through unchanged", err);
}

}  // namespace

bool is_own(void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info)) return false;
  if (!g_self.dli_fbase) dladdr(reinterpret_cast<void*>(&find_real), &g_self);
  return info.dli_fbase == g_self.dli_fbase;
}

void* find_real(const char* name, const char* sonames) {
  void* p = real_dlsym(RTLD_NEXT, name);
  if (p && !is_own(p)) return p;
  char buf[256];
  for (const char* s = sonames; s && *s;) {
    const char* colon = strchr(s, ':');
    size_t n = colon ? size_t(colon - s) : strlen(s);
    if (n < sizeof(buf)) {
      memcpy(buf, s, n);
      buf[n] = '\0';
      void* h = dlopen(buf, RTLD_LAZY | RTLD_NOLOAD);
      p = h ? real_dlsym(h, name) : nullptr;
      if (p && !is_own(p)) return p;
    }
    s = colon ? colon + 1 : nullptr;
  }
  return nullptr;
}

void* RealSym::resolve(bool announce) {
  void* p = fn.load(std::memory_order_acquire);
  if (p || missing.load(std::memory_order_relaxed)) return p;
  ErrnoKeeper keep;  // dlsym/dlopen may set errno: the caller's must survive
  p = find_real(name, soname);
  if (p) {
    fn.store(p, std::memory_order_release);
  } else if (missing.exchange(1) == 0 && announce) {
    say("%s not found in any loaded library (%s)", name, soname);
  }
  return p;
}

void say(const char* fmt, ...) {
  char line[768];
  int n = snprintf(line, sizeof(line), "xpu-diag hook (pid %d, rank %s): ", int(getpid()),
                   getenv("RANK") ? getenv("RANK") : "?");
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && size_t(n) < sizeof(line)) n += vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  va_end(ap);
  if (n >= int(sizeof(line)) - 1) n = int(sizeof(line)) - 2;
  line[n++] = '\n';
  ssize_t w = write(2, line, size_t(n));
  (void)w;
}

bool hook_start_slow() {
  // Runs inside the caller's CUDA call: files, mmap, dlopen and a thread may
  // set errno, and the caller must see the value the real call left.
  ErrnoKeeper keep;
  int expected = 0;
  if (!g_start_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    // Another thread is starting the core (about a millisecond, once). Wait for
    // it, boundedly: if the starter needs a lock this thread holds (the
    // loader's, in a library constructor), go on untimed rather than hang.
    timespec ts{0, 50000};
    for (int i = 0; i < 2000 && g_start_state.load(std::memory_order_acquire) == 1; ++i)
      nanosleep(&ts, nullptr);
    return xt_core_active() != 0;
  }
  // First, before the drainer exists: a fork on another thread during or
  // right after the start must already leave the child inert and settled.
  pthread_atfork(nullptr, nullptr, after_fork_child);
  start_core();
  g_start_state.store(2, std::memory_order_release);
  return xt_core_active() != 0;
}

}  // namespace xt

namespace xt {
__thread int tl_depth __attribute__((tls_model("initial-exec")));
__thread int tl_launch_depth __attribute__((tls_model("initial-exec")));
}  // namespace xt

// The one control the hook exports: measures the hook's own cost inside one
// process (bench/hook_step_overhead.py alternates steps with and without it).
// Sequence numbers advance only for recorded collectives, so every member
// rank must switch at the same point, between collectives. Returns the
// previous setting.
extern "C" __attribute__((visibility("default"))) int xpu_timer_hook_bypass(int on) {
  return xt_core_set_bypass(on);
}

// Whether NCCL calls are recorded now: the core on and not bypassed. Asking
// starts nothing. The Python tracer asks before it leaves a CUDA tensor's
// collective to the hook alone (docs/tracer.md, "Device collectives"): the
// hook records that call anyway, at a fraction of the tracer's cost.
extern "C" __attribute__((visibility("default"))) int xpu_timer_hook_recording(void) {
  return !xt::bypassed() && xt_core_active() != 0;
}
