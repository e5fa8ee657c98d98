// A fake libcudart.so.13 for the hook's CPU tests: a simulated device where
// each stream is a thread that runs queued work in order. A "kernel" is a host
// function run on that thread after the api's configured delay; a hung call
// never finishes, so every later item on its stream (and its events) waits.
// Events carry the stream's device clock (Stream::clock_ns), not the host's.
//
// Environment (read once): FAKE_DELAY_US="api=us,api=us", FAKE_HANG="api:nth",
// FAKE_CUDA_INLINE=1 (run work at once on the calling thread: the benches).
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

#include "fake_api.h"

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct ApiControl {
  char api[48];
  uint64_t delay_ns;
  int hang_nth;
  std::atomic<int> calls;
};
ApiControl g_apis[32];
std::mutex g_ctl_lock;
FakeCall g_last;
std::atomic<int> g_next_result{0};
std::atomic<bool> g_has_next{false};
bool g_inline = false;
std::atomic<uint64_t> g_captured{0};
thread_local int tl_quiet = 0;  // fake_quiet
// Stream-capture modes as the real runtime has them: while a capture begun in
// global mode (0) is under way, a thread whose own mode is global that makes
// an unsafe call (cudaEventQuery) invalidates it; EndCapture then fails.
thread_local int tl_capture_mode = 0;
std::atomic<int> g_global_captures{0};
std::atomic<bool> g_capture_broken{false};

ApiControl* control(const char* api, bool create) {
  for (auto& a : g_apis)
    if (a.api[0] && strcmp(a.api, api) == 0) return &a;
  if (!create) return nullptr;
  for (auto& a : g_apis)
    if (!a.api[0]) {
      strncpy(a.api, api, sizeof(a.api) - 1);
      return &a;
    }
  return nullptr;
}

void parse_env() {
  g_inline = getenv("FAKE_CUDA_INLINE") && strcmp(getenv("FAKE_CUDA_INLINE"), "1") == 0;
  if (const char* d = getenv("FAKE_DELAY_US")) {
    char buf[512];
    strncpy(buf, d, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = 0;
    for (char* tok = strtok(buf, ","); tok; tok = strtok(nullptr, ",")) {
      char* eq = strchr(tok, '=');
      if (!eq) continue;
      *eq = 0;
      fake_set_delay_ns(tok, strtoull(eq + 1, nullptr, 10) * 1000ull);
    }
  }
  if (const char* h = getenv("FAKE_HANG")) {
    char buf[128];
    strncpy(buf, h, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = 0;
    char* colon = strchr(buf, ':');
    if (colon) {
      *colon = 0;
      fake_set_hang(buf, atoi(colon + 1));
    }
  }
}

struct Event {
  int device = 0;                      // made on; recorded only on its streams
  std::atomic<uint64_t> recorded{0};   // generation of the last record
  std::atomic<uint64_t> completed{0};  // generation the device has reached
  std::atomic<uint64_t> t_ns{0};
};

struct Work {
  void (*fn)(void**);
  void** args;
  uint64_t delay_ns;
  bool hang;
  Event* ev;
  uint64_t gen;
  uint64_t t_enq = 0;  // when the host enqueued it (set by push)
};

struct Stream {
  std::mutex m;
  std::condition_variable cv;
  std::deque<Work> q;
  int busy = 0;
  int device = -1;  // made on (-1: the legacy stream, any device)
  bool capturing = false;
  bool destroyed = false;  // cudaStreamDestroy'd: any later use is a bug
  bool capture_global = false;  // begun in cudaStreamCaptureModeGlobal
  bool started = false;
  // The fake device's own clock, as a GPU has one: a work begins when the one
  // before it ended (or when it was enqueued, if the stream was idle) and lasts
  // its delay. Host sleeps overshoot on a loaded machine (hundreds of us under
  // gVisor); the events' times must not, or a test of the hook's timing reads
  // the machine's load instead of the hook.
  std::atomic<uint64_t> clock_ns{0};

  void run() {
    for (;;) {
      std::unique_lock<std::mutex> lk(m);
      cv.wait(lk, [&] { return !q.empty(); });
      Work w = q.front();
      busy = 1;
      lk.unlock();
      execute(w);
      lk.lock();
      q.pop_front();
      busy = 0;
      cv.notify_all();
    }
  }
  void execute(const Work& w) {
    if (w.hang)
      for (;;) pause();  // a kernel that never finishes
    // A kernel takes at least 1 us, as on a GPU: a zero-length span reads as untimed.
    uint64_t cost = w.ev ? 0 : std::max<uint64_t>(w.delay_ns, 1000);
    uint64_t end = std::max(clock_ns.load(std::memory_order_relaxed), w.t_enq) + cost;
    if (w.delay_ns) {  // until the device clock's end, so overshoots do not add up
      timespec ts{time_t(end / 1000000000ull), long(end % 1000000000ull)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
    }
    if (w.fn) {  // its own time counts: a collective waiting for its peers is device time
      uint64_t t0 = now_ns();
      w.fn(w.args);
      end += now_ns() - t0;
    }
    clock_ns.store(end, std::memory_order_relaxed);
    if (w.ev) {
      w.ev->t_ns.store(end);
      w.ev->completed.store(w.gen, std::memory_order_release);
    }
  }
  void push(Work w) {
    w.t_enq = now_ns();
    if (g_inline) {
      execute(w);
      return;
    }
    std::lock_guard<std::mutex> lk(m);
    if (!started) {  // the stream's device thread, detached: it lives until exit
      std::thread([this] { run(); }).detach();
      started = true;
    }
    q.push_back(w);
    cv.notify_all();
  }
  void sync() {
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return q.empty(); });
  }
};

Stream& g_default_stream = *new Stream;  // never destroyed: its thread runs until exit
// A real driver may crash on a destroyed stream's handle; the fake says so and aborts.
Stream* as_stream(cudaStream_t s) {
  // cudaStreamLegacy (1) and cudaStreamPerThread (2) are handles the real
  // runtime takes anywhere; the fake has one default stream for all three.
  Stream* st = uintptr_t(s) > 2 ? reinterpret_cast<Stream*>(s) : &g_default_stream;
  if (st->destroyed) {
    static const char msg[] = "fake cudart: use of a destroyed stream\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    abort();
  }
  return st;
}
std::mutex g_streams_lock;
Stream* g_streams[64];
int g_nstreams = 0;
// Primary contexts made, one bit per device. As with the real runtime, a
// call on a thread that never set a device binds (creates) device 0's.
thread_local int tl_device = -1;  // none set on this thread
std::atomic<unsigned> g_contexts{0};
// The thread's last error, as cudaGetLastError reports (and clears) it.
thread_local int tl_last_error = 0;
int failed(int e) {
  tl_last_error = e;
  return e;
}
void touch_context() {
  if (tl_device < 0) {
    tl_device = 0;
    g_contexts.fetch_or(1u);
  }
}

// In a forked child the streams' device threads are gone, and a lock one of
// them held stays held: start every stream afresh (real CUDA does not work
// after fork at all; the fake only has to let the hook's fork test run).
void after_fork_child() {
  new (&g_streams_lock) std::mutex();
  auto reset = [](Stream* st) {
    new (&st->m) std::mutex();
    new (&st->cv) std::condition_variable();
    st->q.clear();
    st->started = false;
  };
  reset(&g_default_stream);
  for (int i = 0; i < g_nstreams; ++i) reset(g_streams[i]);
}

struct Init {
  Init() {
    parse_env();
    pthread_atfork(nullptr, nullptr, after_fork_child);
  }
} g_init;

}  // namespace

extern "C" {

// ---- controls ----------------------------------------------------------------
const FakeCall* fake_last_call(void) { return &g_last; }
void fake_quiet(int delta) { tl_quiet += delta; }
void fake_touch_context(void) { touch_context(); }
void fake_note_captured(void) { g_captured.fetch_add(1); }
void fake_set_next_result(int r) {
  g_next_result.store(r);
  g_has_next.store(true);
}
void fake_set_delay_ns(const char* api, uint64_t ns) {
  std::lock_guard<std::mutex> lk(g_ctl_lock);
  if (ApiControl* a = control(api, true)) a->delay_ns = ns;
}
void fake_set_hang(const char* api, int nth) {
  std::lock_guard<std::mutex> lk(g_ctl_lock);
  if (ApiControl* a = control(api, true)) a->hang_nth = nth;
}
int fake_note(const char* api, int nargs, const uint64_t* args) {
  if (tl_quiet > 0) return 0;
  strncpy(g_last.api, api, sizeof(g_last.api) - 1);
  g_last.nargs = nargs;
  for (int i = 0; i < nargs && i < 24; ++i) g_last.args[i] = args[i];
  return g_has_next.exchange(false) ? g_next_result.load() : 0;
}
void fake_enqueue(cudaStream_t stream, const char* api, void (*fn)(void**), void** args) {
  Work w{fn, args, 0, false, nullptr, 0};
  if (ApiControl* a = control(api, false)) {
    w.delay_ns = a->delay_ns;
    w.hang = a->calls.fetch_add(1) + 1 == a->hang_nth;
  }
  as_stream(stream)->push(w);
}
int fake_stream_capturing(cudaStream_t stream) { return as_stream(stream)->capturing ? 1 : 0; }
uint64_t fake_captured_launches(void) { return g_captured.load(); }

// ---- runtime -----------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  touch_context();
  (void)flags;
  Event* e = new Event();
  e->device = tl_device;
  *ev = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  delete reinterpret_cast<Event*>(ev);
  return cudaSuccess;
}
// Event records by the hook's drainer thread (its fences) and by all others.
std::atomic<int> g_records_drainer{0}, g_records_other{0};
int fake_event_records(int by_drainer) {
  return by_drainer ? g_records_drainer.load() : g_records_other.load();
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  touch_context();
  char name[16] = {0};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  (strcmp(name, "xpu_hook_drain") == 0 ? g_records_drainer : g_records_other).fetch_add(1);
  Event* ev = reinterpret_cast<Event*>(e);
  // A record on a capturing stream would join the application's graph: the
  // hook must never do it (its END events skip captured ops; its fences wait).
  if (as_stream(stream)->capturing) {
    g_capture_broken.store(true);
    return failed(cudaErrorStreamCaptureImplicit);
  }
  int sdev = as_stream(stream)->device;
  if (sdev >= 0 && sdev != ev->device) return failed(400);  // cudaErrorInvalidResourceHandle
  uint64_t gen = ev->recorded.fetch_add(1) + 1;
  as_stream(stream)->push(Work{nullptr, nullptr, 0, false, ev, gen});
  return cudaSuccess;
}
static cudaError_t query(cudaEvent_t e) {
  Event* ev = reinterpret_cast<Event*>(e);
  return ev->completed.load(std::memory_order_acquire) == ev->recorded.load() ? cudaSuccess
                                                                             : cudaErrorNotReady;
}
#ifndef FAKE_NO_EVENT_QUERY  // the variant that tests a missing symbol
cudaError_t cudaEventQuery(cudaEvent_t e) {
  touch_context();
  if (tl_capture_mode == 0 && g_global_captures.load() > 0) {
    g_capture_broken.store(true);
    return 900;  // cudaErrorStreamCaptureUnsupported
  }
  return query(e);
}
#endif
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode_t* mode) {
  touch_context();
  int old = tl_capture_mode;
  tl_capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  touch_context();
  if (query(a) != cudaSuccess || query(b) != cudaSuccess)
    return cudaErrorNotReady;
  Event* ea = reinterpret_cast<Event*>(a);
  Event* eb = reinterpret_cast<Event*>(b);
  *ms = float(double(int64_t(eb->t_ns.load() - ea->t_ns.load())) / 1e6);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = tl_device < 0 ? 0 : tl_device;  // 0 when none set, making no context
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d > 7) {
    // Noted only here (the forwarding snippet's device 77): the hook's drainer
    // sets its device too, and must not take a snippet's planted result.
    NOTE("cudaSetDevice", uint64_t(d));
    return note_result ? note_result : cudaErrorInvalidValue;
  }
  tl_device = d;
  g_contexts.fetch_or(1u << d);
  return cudaSuccess;
}
unsigned fake_contexts(void) { return g_contexts.load(); }
// The fake GPUs' identity: device d sits at PCI 0000:(0x1b + 0x10 d):00.0 and
// has UUID GPU-fa4e0000-0000-0000-0000-00000000000<d>. Device queries make no
// context, as the real ones do not.
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int d) {
  if (d < 0 || d > 7) return cudaErrorInvalidValue;
  snprintf(bus, size_t(len), "0000:%02X:00.0", 0x1b + 0x10 * d);
  return cudaSuccess;
}
static cudaError_t fake_props(cudaDeviceProp* prop, int d) {
  if (d < 0 || d > 7) return cudaErrorInvalidValue;
  char* p = reinterpret_cast<char*>(prop);
  snprintf(p, 256, "Fake GPU %d", d);
  unsigned char uuid[16] = {0xfa, 0x4e};
  uuid[15] = (unsigned char)d;
  memcpy(p + 256, uuid, 16);
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int d) { return fake_props(prop, d); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) { return fake_props(prop, d); }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* st) {
  *st = as_stream(s)->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
#ifndef FAKE_NO_FUNC_NAME
cudaError_t cudaFuncGetName(const char** name, const void* func) {
  touch_context();
  Dl_info info;
  if (!dladdr(func, &info) || !info.dli_sname) return cudaErrorInvalidValue;
  *name = info.dli_sname;
  return cudaSuccess;
}
#endif
cudaError_t cudaGetLastError(void) {
  int e = tl_last_error;
  tl_last_error = 0;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return tl_last_error; }
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  touch_context();
  Stream* st = new Stream();
  st->device = tl_device;
  std::lock_guard<std::mutex> lk(g_streams_lock);
  if (g_nstreams < 64) g_streams[g_nstreams++] = st;
  *s = reinterpret_cast<cudaStream_t>(st);
  return cudaSuccess;
}
// The stream's thread lives on (detached) so queued work still finishes; the
// handle is dead to the API from now on. Never freed: its thread uses it.
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  NOTE("cudaStreamDestroy", FAKE_U(s));
  if (note_result) return note_result;
  if (!s) return cudaErrorInvalidValue;
  as_stream(s)->destroyed = true;
  return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) {
  NOTE("cudaDeviceReset", 0);
  return note_result;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  as_stream(s)->sync();
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  g_default_stream.sync();
  std::lock_guard<std::mutex> lk(g_streams_lock);
  for (int i = 0; i < g_nstreams; ++i) g_streams[i]->sync();
  return cudaSuccess;
}
static cudaError_t begin_capture(const char* api, cudaStream_t s, int mode) {
  NOTE(api, FAKE_U(s), FAKE_U(mode));
  if (note_result) return note_result;
  as_stream(s)->capturing = true;
  if (mode == 0) {
    as_stream(s)->capture_global = true;
    g_global_captures.fetch_add(1);
  }
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode_t mode) {
  return begin_capture("cudaStreamBeginCapture", s, mode);
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, cudaStreamCaptureMode_t mode) {
  return begin_capture("cudaStreamBeginCapture_ptsz", s, mode);
}
// Into an existing graph: only whether the stream captures matters here.
static cudaError_t begin_capture_to_graph(const char* api, cudaStream_t s, cudaGraph_t g,
                                          const cudaGraphNode_t* d, const cudaGraphEdgeData* e,
                                          size_t n, cudaStreamCaptureMode_t mode) {
  NOTE(api, FAKE_U(s), FAKE_U(g), FAKE_U(d), FAKE_U(e), n, FAKE_U(mode));
  if (note_result) return note_result;
  as_stream(s)->capturing = true;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t* d,
                                          const cudaGraphEdgeData* e, size_t n,
                                          cudaStreamCaptureMode_t mode) {
  return begin_capture_to_graph("cudaStreamBeginCaptureToGraph", s, g, d, e, n, mode);
}
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g,
                                               const cudaGraphNode_t* d,
                                               const cudaGraphEdgeData* e, size_t n,
                                               cudaStreamCaptureMode_t mode) {
  return begin_capture_to_graph("cudaStreamBeginCaptureToGraph_ptsz", s, g, d, e, n, mode);
}
static cudaError_t end_capture(const char* api, cudaStream_t s, cudaGraph_t* graph) {
  NOTE(api, FAKE_U(s), FAKE_U(graph));
  if (note_result) return note_result;
  as_stream(s)->capturing = false;
  if (graph) *graph = nullptr;
  if (as_stream(s)->capture_global) {
    as_stream(s)->capture_global = false;
    g_global_captures.fetch_sub(1);
    if (g_capture_broken.exchange(false)) return 901;  // cudaErrorStreamCaptureInvalidated
  }
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  return end_capture("cudaStreamEndCapture", s, graph);
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t* graph) {
  return end_capture("cudaStreamEndCapture_ptsz", s, graph);
}
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : 2;
}
cudaError_t cudaFree(void* p) {
  free(p);
  return cudaSuccess;
}

}  // extern "C"
