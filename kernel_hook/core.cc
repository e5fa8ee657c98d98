// The core's state: per-thread slots, start and stop, launch counting and the
// statistics. See core.h for the contract; op_queue.cc queues timed ops,
// capture.cc keeps fences off captures, drainer.cc is the consumer side.
#include <signal.h>
#include <time.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <new>

#include "core_internal.h"

namespace xt {

std::atomic<int> g_bypass{0};
Core g_core;
__thread Tls tl __attribute__((tls_model("initial-exec"))) = {nullptr, false, 0, -1};

namespace {

pthread_mutex_t g_claim_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_key_t g_slot_key;

void on_thread_exit(void* p) {
  Slot* s = static_cast<Slot*>(p);
  if (tl.slot == s) tl.slot = nullptr;
  // The drainer frees it once every queued op and count has been written.
  s->retired.store(1, std::memory_order_release);
}

}  // namespace

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
  // Probe events survive, as the op queue's do; launches goes on counting.
  s->probe_head.store(0, std::memory_order_relaxed);
  s->probe_tail.store(0, std::memory_order_relaxed);
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
  snprintf(c.visible, sizeof(c.visible), "%s", cfg->visible_devices ? cfg->visible_devices : "");
  c.cfg.visible_devices = c.visible;
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

void xt_device_set(int device) {
  if (device >= 0) tl.dev = device + 1;
}

void xt_count_launch(const void* func, int kind, void* stream) {
  if (!active()) return;
  note_device();
  // The low bits tell the drainer which kind of key it is (core.h).
  func = reinterpret_cast<const void*>(uintptr_t(func) | uintptr_t(kind & 3));
  Slot* s = my_slot();
  if (!s) return;
  // Owner-only counter: a plain load and store, no atomic read-modify-write.
  s->launches.store(s->launches.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // One compare per launch: the drainer moves the epoch once per probe period.
  if (__builtin_expect(s->probe_epoch != g_probe_epoch.load(std::memory_order_relaxed), 0))
    probe_launch(g_core, s, func, stream);
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
  out->probes = c.probes.load();
  // The region's count holds both; ring-full drops are the rest.
  out->records_dropped = c.region.dropped() - out->ops_dropped;
  out->threads = uint32_t(c.n_slots.load());
}

}  // extern "C"
