// The fake NCCL's profiler plugin driver: loads the library named by
// NCCL_PROFILER_PLUGIN as NCCL 2.28 does (src/plugin/profiler.cc: dlopen, dlsym
// "ncclProfiler_v5", else "ncclProfiler_v4"; init per communicator with the
// comm's hash and a pointer to the activation mask), and plays a ring
// collective's proxy and kernel-channel events on a proxy thread of its own,
// in NCCL's order (src/transport/net.cc: a step is started when posted, gets
// SendGPUWait/SendWait or RecvWait/RecvGPUWait, and is stopped when done).
//
// Environment: FAKE_NCCL_CHANNELS (2), FAKE_NCCL_STEPS (8) per proxy op;
// FAKE_NCCL_BREAK="SRC>DST:CHANNEL:STEP@SEQ": at the SEQth collective of a
// communicator the link from comm rank SRC to DST (DST = SRC + 1 on the ring)
// stops on CHANNEL at STEP, and every rank plays what it would see: DST's
// receive never gets STEP, SRC's send sits in SendWait two steps ahead (what
// the socket buffered), every other rank's ring on that channel starves at
// STEP (sends in SendGPUWait, receives in RecvWait), and that channel's kernel
// never stops. Its other channels complete. FAKE_NCCL_TRANSPORT=p2p: ranks of one
// node over P2P, no proxy ops, kernel-channel events only (the broken channel's
// kernel never stops). FAKE_NCCL_QUEUE=1 (default 0): as NCCL's proxy, the proxy
// ops of every collective queued are started at once, before the oldest one's
// steps move (NCCL 2.28 on two H100s had 12 per channel started with DDP); a
// rank whose link broke still starts the ops of what is queued after it,
// and plays none of them.
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>
#include <thread>

#include "../../../kernel_hook/nccl_profiler/nccl_profiler_abi.h"
#include "fake_nccl_profiler.h"

namespace {

struct Loaded {
  xtProfiler_v5* v5 = nullptr;
  xtProfiler_v4* v4 = nullptr;
  int mask = 0;   // ncclProfilerEventMask: one per process, set by every init
};
Loaded g_prof;
std::once_flag g_load_once;
bool g_p2p = false;   // FAKE_NCCL_TRANSPORT=p2p

struct Job {
  FakeProfComm* comm;
  uint64_t seq;
};
// Never destroyed: the proxy thread still waits on them while the process exits
// (glibc's pthread_cond_destroy would wait for it).
std::mutex& g_mu = *new std::mutex;
std::condition_variable& g_cv = *new std::condition_variable;
std::deque<Job>& g_jobs = *new std::deque<Job>;
bool g_thread_started = false;
uint64_t g_pushed = 0, g_played = 0;   // jobs queued / played (under g_mu)

int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

void log_fn(int, unsigned long, const char*, int, const char*, ...) {}

void load() {
  const char* name = getenv("NCCL_PROFILER_PLUGIN");
  if (!name || !*name || strcasecmp(name, "none") == 0) return;
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "fake NCCL INFO: could not load profiler plugin %s: %s\n", name, dlerror());
    return;
  }
  g_prof.v5 = static_cast<xtProfiler_v5*>(dlsym(lib, "ncclProfiler_v5"));
  if (!g_prof.v5 || env_int("FAKE_NCCL_PROFILER_V4", 0)) {
    g_prof.v5 = nullptr;
    g_prof.v4 = static_cast<xtProfiler_v4*>(dlsym(lib, "ncclProfiler_v4"));
  }
  fprintf(stderr, "fake NCCL INFO: PROFILER/Plugin: Loaded %s (%s)\n",
          g_prof.v5 ? g_prof.v5->name : g_prof.v4 ? g_prof.v4->name : "none",
          g_prof.v5 ? "v5" : g_prof.v4 ? "v4" : "-");
}

// One event through whichever version was loaded.
void* start(FakeProfComm* c, uint64_t type, void* parent, const xtDescrUnion& u) {
  void* h = nullptr;
  if (g_prof.v5) {
    xtEventDescr_v5 d{};
    d.type = type;
    d.parentObj = parent;
    d.rank = c->rank;
    d.u = u;
    g_prof.v5->startEvent(c->ctx, &h, &d);
  } else if (g_prof.v4) {
    xtEventDescr_v4 d{};
    d.type = uint8_t(type);
    d.parentObj = parent;
    d.rank = c->rank;
    d.u = u;
    g_prof.v4->startEvent(c->ctx, &h, &d);
  }
  return h;
}
void state(void* h, int s) {
  xtStateArgs a{};
  if (!h) return;
  if (g_prof.v5) g_prof.v5->recordEventState(h, s, &a);
  else g_prof.v4->recordEventState(h, s, &a);
}
void stop(void* h) {
  if (!h) return;
  if (g_prof.v5) g_prof.v5->stopEvent(h);
  else g_prof.v4->stopEvent(h);
}

struct Break {
  int src = -1, dst = -1, channel = -1, step = 0;
  uint64_t seq = 0;
};
Break parse_break() {
  Break b;
  const char* v = getenv("FAKE_NCCL_BREAK");
  unsigned long long seq = 0;
  if (v && sscanf(v, "%d>%d:%d:%d@%llu", &b.src, &b.dst, &b.channel, &b.step, &seq) == 5) b.seq = seq;
  return b;
}

void* op(FakeProfComm* c, int channel, int peer, int nsteps, int send) {
  xtDescrUnion u{};
  u.proxyOp.pid = getpid();
  u.proxyOp.channelId = uint8_t(channel);
  u.proxyOp.peer = peer;
  u.proxyOp.nSteps = nsteps;
  u.proxyOp.chunkSize = 1 << 19;
  u.proxyOp.isSend = send;
  return start(c, xtProfileProxyOp, nullptr, u);
}
void* step(FakeProfComm* c, void* parent, int s) {
  xtDescrUnion u{};
  u.proxyStep.step = s;
  return start(c, xtProfileProxyStep, parent, u);
}

// Steps [from, to) of one send and one receive op, complete.
void play_steps(FakeProfComm* c, void* send, void* recv, int from, int to) {
  for (int s = from; s < to; ++s) {
    void* r = step(c, recv, s);
    state(r, xtStateRecvWait);
    void* t = step(c, send, s);
    state(t, xtStateSendGPUWait);
    state(t, xtStateSendWait);
    stop(t);
    state(r, xtStateRecvFlushWait);
    state(r, xtStateRecvGPUWait);
    stop(r);
  }
}

// Proxy ops started ahead of their collective's turn (FAKE_NCCL_QUEUE), by (comm, seq):
// per channel its send and receive op. Proxy thread only.
std::map<std::pair<FakeProfComm*, uint64_t>, std::vector<std::pair<void*, void*>>>& g_started =
    *new std::map<std::pair<FakeProfComm*, uint64_t>, std::vector<std::pair<void*, void*>>>;

void start_ops(FakeProfComm* c, uint64_t seq, int nch) {
  auto key = std::make_pair(c, seq);
  if (g_p2p || g_started.count(key)) return;
  int n = c->nranks, next = (c->rank + 1) % n, prev = (c->rank + n - 1) % n;
  int nsteps = env_int("FAKE_NCCL_STEPS", 8);
  std::vector<std::pair<void*, void*>>& ops = g_started[key];
  for (int ch = 0; ch < nch; ++ch) ops.emplace_back(op(c, ch, next, nsteps, 1), op(c, ch, prev, nsteps, 0));
}

// One channel of a ring collective on comm c; false: it stops (a broken link).
void play_channel(FakeProfComm* c, int channel, uint64_t seq, const Break& b) {
  int n = c->nranks, next = (c->rank + 1) % n, prev = (c->rank + n - 1) % n;
  int nsteps = env_int("FAKE_NCCL_STEPS", 8);
  xtDescrUnion k{};
  k.kernelCh.channelId = uint8_t(channel);
  k.kernelCh.pTimer = seq;
  void* kernel = (g_prof.mask & xtProfileKernelCh) ? start(c, xtProfileKernelCh, nullptr, k) : nullptr;
  bool broken = b.seq == seq && b.channel == channel && b.step < nsteps && n > 1;
  if (g_p2p) {
    // P2P/NVLink within a node: no proxy ops; NCCL adds one per channel for the
    // kernel events only. A broken channel's kernel never stops.
    if (!broken) {
      state(kernel, xtStateKernelChStop);
      stop(kernel);
    }
    return;
  }
  auto started = g_started.find(std::make_pair(c, seq));
  void* send = started != g_started.end() ? started->second[channel].first : op(c, channel, next, nsteps, 1);
  void* recv = started != g_started.end() ? started->second[channel].second : op(c, channel, prev, nsteps, 0);
  if (!broken) {
    play_steps(c, send, recv, 0, nsteps);
    stop(send);
    stop(recv);
    state(kernel, xtStateKernelChStop);
    stop(kernel);
    return;
  }
  play_steps(c, send, recv, 0, b.step);
  // This rank's receive waits for STEP, which never comes (DST) or was never sent (starved).
  state(step(c, recv, b.step), xtStateRecvWait);
  if (c->rank == b.src) {
    // The socket took two more steps before it stopped draining.
    int ahead = b.step + 2 < nsteps ? b.step + 2 : nsteps - 1;
    for (int s = b.step; s < ahead; ++s) {
      void* t = step(c, send, s);
      state(t, xtStateSendGPUWait);
      state(t, xtStateSendWait);
      stop(t);
    }
    void* t = step(c, send, ahead);
    state(t, xtStateSendGPUWait);
    state(t, xtStateSendWait);
  } else {
    state(step(c, send, b.step), xtStateSendGPUWait);   // nothing to forward
  }
}

void proxy_loop() {
  Break b = parse_break();
  const char* transport = getenv("FAKE_NCCL_TRANSPORT");
  g_p2p = transport && strcmp(transport, "p2p") == 0;
  int nch = env_int("FAKE_NCCL_CHANNELS", 2);
  bool queue = env_int("FAKE_NCCL_QUEUE", 0) != 0;
  bool stuck = false;   // a link of this rank broke: what comes after never moves
  for (;;) {
    Job j;
    std::vector<Job> ahead;
    {
      std::unique_lock<std::mutex> lock(g_mu);
      g_cv.wait(lock, [] { return !g_jobs.empty(); });
      j = g_jobs.front();
      g_jobs.pop_front();
      if (queue) ahead.assign(g_jobs.begin(), g_jobs.end());
    }
    if (queue) {
      start_ops(j.comm, j.seq, nch);
      for (const Job& a : ahead) start_ops(a.comm, a.seq, nch);
    }
    if (!stuck)
      for (int ch = 0; ch < nch; ++ch) play_channel(j.comm, ch, j.seq, b);
    stuck = stuck || (queue && b.seq == j.seq && j.comm->nranks > 1);
    g_started.erase(std::make_pair(j.comm, j.seq));
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_played;
    g_cv.notify_all();
  }
}

}  // namespace

void fake_prof_init(FakeProfComm* c, uint64_t comm_hash, int nnodes) {
  std::call_once(g_load_once, load);
  c->ctx = nullptr;
  c->seq = 0;
  if (g_prof.v5)
    g_prof.v5->init(&c->ctx, comm_hash, &g_prof.mask, "", nnodes, c->nranks, c->rank, log_fn);
  else if (g_prof.v4)
    g_prof.v4->init(&c->ctx, &g_prof.mask, "", comm_hash, nnodes, c->nranks, c->rank, log_fn);
}

void fake_prof_collective(FakeProfComm* c) {
  if ((!g_prof.v5 && !g_prof.v4) || !(g_prof.mask & (xtProfileProxyOp | xtProfileProxyStep))) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_thread_started) {
    g_thread_started = true;
    std::thread(proxy_loop).detach();   // NCCL's proxy progress thread
  }
  g_jobs.push_back(Job{c, ++c->seq});
  ++g_pushed;
  g_cv.notify_all();
}

// As NCCL's proxy finishes its ops before a communicator goes: the queued
// collectives are played first (bounded, should one never end).
void fake_prof_finalize(FakeProfComm* c) {
  {
    std::unique_lock<std::mutex> lock(g_mu);
    g_cv.wait_for(lock, std::chrono::seconds(5), [] { return g_played == g_pushed; });
  }
  if (c->ctx && g_prof.v5) g_prof.v5->finalize(c->ctx);
  else if (c->ctx && g_prof.v4) g_prof.v4->finalize(c->ctx);
}

// The bench's loop (bench/link_plugin_bench.py): one send and one receive op
// of `steps` steps on one channel, played `ops` times on the calling thread;
// with no plugin loaded the calls go nowhere (the loop's own cost).
extern "C" void fake_prof_bench(void* comm_ptr, int ops, int steps) {
  FakeProfComm* c = static_cast<FakeProfComm*>(comm_ptr);
  for (int i = 0; i < ops; ++i) {
    void* send = op(c, 0, (c->rank + 1) % c->nranks, steps, 1);
    void* recv = op(c, 0, (c->rank + c->nranks - 1) % c->nranks, steps, 0);
    play_steps(c, send, recv, 0, steps);
    stop(send);
    stop(recv);
  }
}
