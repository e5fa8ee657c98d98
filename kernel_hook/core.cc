// The hot path of the core: per-thread slots, launch counting and the queue of
// timed ops. See core.h for the contract; drainer.cc is the consumer side.
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "core_internal.h"

namespace xt {

std::atomic<int> g_captures{0};
std::atomic<uint64_t> g_stream_epoch{0};
std::atomic<int> g_fencing{0};
std::atomic<int> g_bypass{0};
std::atomic<void*> g_destroyed[kDestroyedRing];
pthread_mutex_t g_destroy_lock = PTHREAD_MUTEX_INITIALIZER;

bool stream_maybe_destroyed(const void* stream, uint64_t since, uint64_t now) {
  if (now - since >= kDestroyedRing) return true;  // the ring forgot: assume so
  for (uint64_t e = since; e < now; ++e) {
    void* d = g_destroyed[e % kDestroyedRing].load(std::memory_order_relaxed);
    if (d == nullptr || d == stream) return true;
  }
  return false;
}

namespace {

Core g_core;
pthread_mutex_t g_claim_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_key_t g_slot_key;

struct Tls {
  Slot* slot;
  bool no_slot;  // every slot is taken: this thread only counts drops
};
// initial-exec: plain %fs-relative access, no __tls_get_addr (which may malloc).
__thread Tls tl __attribute__((tls_model("initial-exec")));

struct OpInfo {
  const char* name;
  uint8_t kind;
};
constexpr OpInfo kOps[XT_OP_COUNT_] = {
    {"cublasGemmEx", kKindGemm},
    {"cublasGemmStridedBatchedEx", kKindGemm},
    {"cublasSgemm", kKindGemm},
    {"cublasSgemmStridedBatched", kKindGemm},
    {"cublasHgemm", kKindGemm},
    {"cublasLtMatmul", kKindGemm},
    {"ncclAllReduce", kKindCollective},
    {"ncclAllGather", kKindCollective},
    {"ncclReduceScatter", kKindCollective},
    {"ncclBroadcast", kKindCollective},
    {"ncclReduce", kKindCollective},
    {"ncclSend", kKindP2P},
    {"ncclRecv", kKindP2P},
};

void on_thread_exit(void* p) {
  Slot* s = static_cast<Slot*>(p);
  if (tl.slot == s) tl.slot = nullptr;
  // The drainer frees it once every queued op and count has been written.
  s->retired.store(1, std::memory_order_release);
}

// Slow path, once per thread: take a free slot (a lock is fine here).
Slot* claim_slot() {
  Core& c = g_core;
  if (tl.no_slot || c.slots == nullptr) return nullptr;
  Slot* found = nullptr;
  pthread_mutex_lock(&g_claim_lock);
  for (int i = 0; i < kMaxSlots && !found; ++i) {
    Slot* s = &c.slots[i];
    if (s->in_use.load(std::memory_order_acquire) == 0) {
      s->in_use.store(1, std::memory_order_relaxed);
      s->retired.store(0, std::memory_order_relaxed);
      found = s;
      int hw = c.n_slots.load(std::memory_order_relaxed);
      if (i + 1 > hw) c.n_slots.store(i + 1, std::memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_claim_lock);
  if (!found) {
    tl.no_slot = true;
    return nullptr;
  }
  if (found->rng == 0) found->rng = 0x9E3779B97F4A7C15ull * uint64_t(found->index + 1);
  pthread_setspecific(g_slot_key, found);
  tl.slot = found;
  return found;
}

inline Slot* my_slot() {
  Slot* s = tl.slot;
  return s ? s : claim_slot();
}

inline bool maybe_capturing(const Core& c) {
  return c.cfg.capture_check_always || g_captures.load(std::memory_order_acquire) > 0;
}

inline bool active() {
  return g_core.state.load(std::memory_order_acquire) == kStateOn;
}

}  // namespace

void reset_slot(Slot* s, int index) {
  // Event pairs survive a reset: they stay with their queue entries. next_op
  // goes on counting, so op ids stay unique in the region across owners.
  s->head.store(0, std::memory_order_relaxed);
  s->tail.store(0, std::memory_order_relaxed);
  s->group_depth = s->group_n = 0;
  s->start_cursor = 0;
  s->fence_cursor = 0;
  s->dropped_ops.store(0, std::memory_order_relaxed);
  s->seen_dropped = 0;
  s->count_overflow.store(0, std::memory_order_relaxed);
  s->seen_overflow = 0;
  for (int i = 0; i < XT_OP_COUNT_; ++i) {
    s->captured[i].store(0, std::memory_order_relaxed);
    s->seen_captured[i] = 0;
  }
  for (int i = 0; i < kCountEntries; ++i) {
    s->counts[i].key.store(nullptr, std::memory_order_relaxed);
    s->counts[i].n.store(0, std::memory_order_relaxed);
    s->seen[i] = 0;
  }
  s->index = index;
}

namespace {

// Gives the queue entry an event pair on the current device. Creating events
// happens once per entry and device: the steady state only reuses them.
bool ensure_events(Core& c, PendingOp& e) {
  int dev = 0;
  if (c.ops.get_device(&dev) != 0) return false;
  if (e.ev0 && e.ev_device == dev) return true;
  if (e.ev0) {
    c.ops.event_destroy(e.ev0);
    c.ops.event_destroy(e.ev1);
    e.ev0 = e.ev1 = nullptr;
  }
  void* a = nullptr;
  void* b = nullptr;
  if (c.ops.event_create(&a) != 0) return false;
  if (c.ops.event_create(&b) != 0) {
    c.ops.event_destroy(a);
    return false;
  }
  e.ev0 = a;
  e.ev1 = b;
  e.ev_device = dev;
  return true;
}

// Records the start event. A failure with events in hand may mean they went
// stale (cudaDeviceReset): replace them once and retry. (Destroying a stale
// handle only returns an error; replacing rather than dropping never leaks.)
bool record_start(Core& c, PendingOp& e, void* stream) {
  if (!ensure_events(c, e)) return false;
  if (c.ops.event_record(e.ev0, stream) == 0) return true;
  c.ops.event_destroy(e.ev0);
  c.ops.event_destroy(e.ev1);
  e.ev0 = e.ev1 = nullptr;
  return ensure_events(c, e) && c.ops.event_record(e.ev0, stream) == 0;
}

// The untimed end event of an unsampled collective: made once per queue entry
// and device, replaced once if it went stale, as record_first does.
bool record_done(Core& c, PendingOp& e, void* stream) {
  int dev = 0;
  if (c.ops.get_device(&dev) != 0) return false;
  auto create = c.ops.event_create_untimed ? c.ops.event_create_untimed : c.ops.event_create;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (e.ev_done && (e.ev_done_device != dev || attempt > 0)) {
      c.ops.event_destroy(e.ev_done);
      e.ev_done = nullptr;
    }
    if (!e.ev_done) {
      if (create(&e.ev_done) != 0) {
        e.ev_done = nullptr;
        return false;
      }
      e.ev_done_device = dev;
    }
    if (c.ops.event_record(e.ev_done, stream) == 0) return true;
  }
  return false;
}

// The legacy (0, 1) and per-thread (2) default streams: a fence from the
// drainer's thread would land on another queue, so these keep launch-path events.
inline bool fenceable(const void* stream) { return uintptr_t(stream) > 2; }

// Records the op's first event when its kernels are launched: the start event
// of a sampled op before the launch. After it (before_launch false), an
// unsampled collective (or a sampled one whose start event failed) gets its
// completion tracked: by a fence the drainer records later, which costs this
// thread nothing; or by an untimed end event recorded here: when configured,
// while a capture is under way (the drainer does not fence then), or on a
// default stream. Unsampled GEMMs get none.
void record_launch(Core& c, PendingOp& e, void* stream, bool before_launch) {
  if (before_launch) {
    if (e.sampled) e.timed = record_start(c, e, stream);
    return;
  }
  if (op_kind(e.op) == kKindGemm) return;
  int dev = 0;
  if (!c.cfg.completion_events && fenceable(stream) && !maybe_capturing(c) &&
      c.ops.get_device(&dev) == 0) {
    e.needs_fence = true;
    e.ev_device = dev;  // the drainer makes its fence event there
    e.stream_epoch = g_stream_epoch.load(std::memory_order_acquire);
    return;
  }
  e.has_end = record_done(c, e, stream);
}

// After the launch: the end event of a sampled op, then the op's flags.
void finish_launch(Core& c, PendingOp& e) {
  if (e.no_events) return;
  if (e.timed && c.ops.event_record(e.ev1, e.stream) != 0) e.timed = false;
  if (e.timed) {
    e.has_end = true;
    e.flags |= kFlagDeviceTimed;
  } else {
    record_launch(c, e, e.stream, false);
  }
}

inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 1 in time_every. Collectives by (comm id, seq): the same on every rank and
// not in step with a training step's period. GEMMs by a per-thread xorshift.
bool choose_sample(const Core& c, Slot* s, const PendingOp& e, bool has_comm) {
  uint32_t n = c.cfg.time_every;
  if (n <= 1) return true;
  uint64_t r;
  if (has_comm) {
    r = mix64(e.comm_id ^ (e.seq * 0x9E3779B97F4A7C15ull) ^ (uint64_t(op_kind(e.op)) << 56));
  } else {
    r = s->rng;
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    s->rng = r;
  }
  return (r >> 32) % n == 0;
}

void fill_comm(PendingOp& e, const xt_op_desc* d) {
  e.comm_id = 0;
  e.seq = 0;
  e.comm_rank = -1;
  e.comm_size = 0;
  if (d->comm == nullptr) return;
  uint64_t id = 0;
  int rank = -1, size = 0;
  if (xt_comm_info(d->comm, &id, &rank, &size)) {
    e.comm_id = id;
    e.comm_rank = rank;
    e.comm_size = size;
  }
}

// Whether the oldest op of some thread waits for a fence still.
bool fence_pending(Core& c) {
  int n = c.n_slots.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    Slot& s = c.slots[i];
    uint64_t tail = s.tail.load(std::memory_order_relaxed);
    if (s.in_use.load(std::memory_order_acquire) && tail < s.head.load(std::memory_order_acquire) &&
        s.ops[tail & (kOpQueue - 1)].needs_fence)
      return true;
  }
  return false;
}

// The final pass at exit. Ops launched in the drainer's last poll period have
// no fence yet; this pass records it, and a device that is done reaches it
// within microseconds: wait that long (20 ms at most), so they end completed.
void flush_until_fenced(Core& c) {
  xt_core_flush();
  timespec ms{0, 1000000};
  for (int i = 0; i < 20 && fence_pending(c); ++i) {
    nanosleep(&ms, nullptr);
    xt_core_flush();
  }
}

}  // namespace

Core& core() { return g_core; }
const char* op_name(xt_op op) { return op < XT_OP_COUNT_ ? kOps[op].name : "unknown"; }
uint8_t op_kind(xt_op op) { return op < XT_OP_COUNT_ ? kOps[op].kind : 0; }

}  // namespace xt

using namespace xt;

extern "C" {

int xt_core_start(const xt_config* cfg, const xt_device_ops* ops, char* err, size_t err_len) {
  Core& c = g_core;
  if (c.state.load() != kStateOff || c.slots != nullptr) {
    snprintf(err, err_len, "the core is already started");
    return -1;
  }
  c.cfg = *cfg;
  c.ops = *ops;
  RegionIdentity id{cfg->pid, cfg->rank, cfg->local_rank, cfg->world_size, cfg->capacity};
  if (!c.region.create(cfg->shm_dir, id, err, err_len)) return -1;
  void* mem = mmap(nullptr, sizeof(Slot) * kMaxSlots, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    snprintf(err, err_len, "cannot map %zu bytes for thread slots", sizeof(Slot) * kMaxSlots);
    c.region.set_disabled();
    c.region.close();
    return -1;
  }
  // Anonymous memory is zero: atomics and pointers start as 0/null.
  c.slots = static_cast<Slot*>(mem);
  for (int i = 0; i < kMaxSlots; ++i) c.slots[i].index = i;
  static bool key_made = false;
  if (!key_made) key_made = pthread_key_create(&g_slot_key, on_thread_exit) == 0;
  // Called from the process's first hooked call, which used CUDA: its device
  // is one this process has a context on (see drainer_main).
  int dev = -1;
  c.home_device = c.ops.get_device(&dev) == 0 ? dev : -1;
  c.stop.store(0);
  c.state.store(kStateOn, std::memory_order_release);
  // The drainer starts with every signal blocked, so no handler ever runs on it.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&c.drainer, nullptr, drainer_main, &c);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    snprintf(err, err_len, "cannot start the drainer thread: %s", strerror(rc));
    xt_core_switch_off();
    return -1;
  }
  c.drainer_started = true;
  return 0;
}

void xt_core_stop(void) {
  Core& c = g_core;
  bool joined = true;
  if (c.drainer_started) {
    c.stop.store(1, std::memory_order_release);
    wake_drainer(c);  // it may be parked by a bypass
    // Bounded: at exit a wedged driver must not hang the process. If the
    // drainer does not come back, skip the final pass (it would call CUDA too).
    timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 2;
    joined = pthread_timedjoin_np(c.drainer, nullptr, &deadline) == 0;
    c.drainer_started = false;
  }
  if (c.state.load() == kStateOn) {
    if (joined) flush_until_fenced(c);
    c.state.store(kStateStopped, std::memory_order_release);
  }
}

int xt_core_active(void) { return active() ? 1 : 0; }

void xt_core_switch_off(void) {
  Core& c = g_core;
  c.state.store(kStateStopped, std::memory_order_release);
  c.region.set_disabled();
}

void xt_core_flush(void) {
  Core& c = g_core;
  if (c.slots == nullptr) return;
  pthread_mutex_lock(&c.pass_lock);
  drain_pass(c, true);
  pthread_mutex_unlock(&c.pass_lock);
}

void xt_core_after_fork_child(void) {
  Core& c = g_core;
  // Only the forking thread survives; the drainer, the pass lock's owner and the
  // parent's region belong to the parent. Stay inert and drop the mapping.
  c.state.store(kStateStopped, std::memory_order_relaxed);
  c.drainer_started = false;
  c.region.close();
  g_fencing.store(0, std::memory_order_relaxed);  // the drainer may have been inside
  pthread_mutex_init(&c.park_lock, nullptr);      // it may have held this at the fork
  pthread_cond_init(&c.park, nullptr);
  tl.slot = nullptr;
  tl.no_slot = true;
}

void xt_count_launch(const void* func, int is_handle) {
  if (!active()) return;
  // Stubs and handles are aligned: bit 0 tells the drainer which one it is.
  func = reinterpret_cast<const void*>(uintptr_t(func) | uintptr_t(is_handle & 1));
  Slot* s = my_slot();
  if (!s) return;
  // Fibonacci hash of the host stub address, then a short linear probe.
  uint32_t h = uint32_t((uintptr_t(func) * 0x9E3779B97F4A7C15ull) >> 56);
  for (int i = 0; i < 8; ++i) {
    CountEntry& e = s->counts[(h + i) & (kCountEntries - 1)];
    const void* k = e.key.load(std::memory_order_relaxed);
    if (k == func) {
      e.n.store(e.n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return;
    }
    if (k == nullptr) {
      e.n.store(e.n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      e.key.store(func, std::memory_order_release);  // publish after the count
      return;
    }
  }
  s->count_overflow.store(s->count_overflow.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
}

xt_ticket xt_op_begin(const xt_op_desc* d, void* stream) {
  Core& c = g_core;
  if (!active() || d->op >= XT_OP_COUNT_) return -1;
  Slot* s = my_slot();
  if (!s) {
    c.orphan_dropped.fetch_add(1, std::memory_order_relaxed);
    return -1;
  }
  // Inside a group the ops launch at ncclGroupEnd, which is where they get
  // their events; a capture status is only meaningful there too.
  bool deferred = s->group_depth > 0;
  if (!deferred && maybe_capturing(c) && c.ops.stream_capturing(stream)) {
    s->captured[d->op].store(s->captured[d->op].load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
    return -1;
  }
  uint64_t idx = s->head.load(std::memory_order_relaxed) + (deferred ? s->group_n : 0);
  if (idx - s->tail.load(std::memory_order_acquire) >= kOpQueue ||
      (deferred && s->group_n >= kGroupMax)) {
    s->dropped_ops.store(s->dropped_ops.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
    return -1;
  }
  PendingOp& e = s->ops[idx & (kOpQueue - 1)];
  e.op = d->op;
  e.flags = uint16_t(d->dtype >= 0 ? ((d->dtype + 1) & 0xFF) << kFlagDtypeShift : 0);
  e.op_id = (uint64_t(s->index) << 48) | ++s->next_op;
  e.bytes = d->bytes;
  e.flops = d->flops;
  e.stream = stream;
  e.t_start_ns = mono_ns();
  e.timed = e.has_end = e.no_events = e.needs_fence = false;
  e.fence = nullptr;
  fill_comm(e, d);
  if (d->comm) e.seq = comm_next_seq(d->comm, op_kind(d->op) == kKindP2P);
  e.sampled = choose_sample(c, s, e, d->comm != nullptr);
  if (deferred) {
    if (s->group_n++ == 0) s->group_first = idx;
    return int64_t(idx);
  }
  record_launch(c, e, stream, true);
  return int64_t(idx);
}

void xt_op_end(xt_ticket t, int failed) {
  if (t < 0) return;
  Slot* s = tl.slot;
  if (!s) return;
  Core& c = g_core;
  PendingOp& e = s->ops[uint64_t(t) & (kOpQueue - 1)];
  if (failed) e.flags |= kFlagFailed;
  if (s->group_depth > 0) return;  // published at the outermost group end
  finish_launch(c, e);
  s->head.store(uint64_t(t) + 1, std::memory_order_release);
}

// Fencing sections and the announcements below pair up Dekker-style: either
// the drainer sees the announcement and does not record, or the announcer sees
// the drainer inside its section and waits the few microseconds it lasts.
// Bounded: a drainer wedged inside the driver must not hang the application.
static void wait_for_fencing() {
  for (int i = 0; i < 2000000 && g_fencing.load(std::memory_order_seq_cst); ++i) sched_yield();
}

void xt_capture_begin(void) {
  g_captures.fetch_add(1, std::memory_order_seq_cst);
  wait_for_fencing();
}

void xt_capture_end(void) {
  int n = g_captures.load(std::memory_order_relaxed);
  while (n > 0 && !g_captures.compare_exchange_weak(n, n - 1, std::memory_order_acq_rel)) {
  }
}

void xt_streams_destroying(void* stream) {
  // A slow path (stream teardown): the lock keeps ring entry and epoch in step.
  pthread_mutex_lock(&g_destroy_lock);
  uint64_t e = g_stream_epoch.load(std::memory_order_relaxed);
  g_destroyed[e % kDestroyedRing].store(stream, std::memory_order_relaxed);
  g_stream_epoch.store(e + 1, std::memory_order_seq_cst);
  pthread_mutex_unlock(&g_destroy_lock);
  wait_for_fencing();
}

void xt_group_start(void) {
  if (!active()) return;
  Slot* s = my_slot();
  if (s) ++s->group_depth;
}

void xt_group_end_before(void) {
  Slot* s = tl.slot;
  if (!s || s->group_depth == 0) return;
  if (s->group_depth > 1 || s->group_n == 0) return;
  Core& c = g_core;
  for (int i = 0; i < s->group_n; ++i) {
    PendingOp& e = s->ops[(s->group_first + i) & (kOpQueue - 1)];
    if (maybe_capturing(c) && c.ops.stream_capturing(e.stream)) {
      e.sampled = false;  // captured: no event at all, it ends when drained
      e.no_events = true;
      continue;
    }
    record_launch(c, e, e.stream, true);
  }
}

void xt_group_end_after(int failed) {
  Slot* s = tl.slot;
  if (!s || s->group_depth == 0) return;
  if (--s->group_depth > 0 || s->group_n == 0) return;
  Core& c = g_core;
  for (int i = 0; i < s->group_n; ++i) {
    PendingOp& e = s->ops[(s->group_first + i) & (kOpQueue - 1)];
    if (failed) e.flags |= kFlagFailed;
    finish_launch(c, e);
  }
  s->head.store(s->group_first + s->group_n, std::memory_order_release);
  s->group_n = 0;
}

double xt_busbw_factor(xt_op op, int n) {
  if (n <= 0) return 0.0;
  switch (op) {
    case XT_OP_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case XT_OP_ALL_GATHER:
    case XT_OP_REDUCE_SCATTER: return double(n - 1) / n;
    case XT_OP_BROADCAST:
    case XT_OP_REDUCE:
    case XT_OP_SEND:
    case XT_OP_RECV: return 1.0;
    default: return 0.0;
  }
}

size_t xt_nccl_type_size(int dtype) {
  // ncclInt8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64,
  // Bfloat16, Float8e4m3, Float8e5m2
  static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return dtype >= 0 && dtype < int(sizeof(sizes)) ? sizes[dtype] : 0;
}

const char* xt_op_name(xt_op op) { return op_name(op); }

int xt_core_set_bypass(int on) {
  int was = g_bypass.exchange(on ? 1 : 0, std::memory_order_relaxed);
  if (was && !on && g_core.drainer_started) wake_drainer(g_core);
  return was;
}

void xt_core_stats(xt_stats* out) {
  Core& c = g_core;
  memset(out, 0, sizeof(*out));
  out->launches_counted = c.launches_counted.load();
  out->ops_queued = c.ops_queued.load();
  out->ops_completed = c.ops_completed.load();
  out->ops_captured = c.ops_captured.load();
  out->ops_dropped = c.ops_dropped.load();
  out->fences = c.fences.load();
  out->passes = c.passes.load();
  // The region's count holds both; ring-full drops are the rest.
  out->records_dropped = c.region.dropped() - out->ops_dropped;
  out->threads = uint32_t(c.n_slots.load());
}

}  // extern "C"
