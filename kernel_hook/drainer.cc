// The consumer side of the core: one background thread that turns queued ops
// into START/END records in launch order, and launch counts into COUNT records.
// It is the only writer of the region, so RegionWriter needs no lock.
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core_internal.h"

namespace xt {

// An event the drainer recorded on an application stream after ops launched
// there were published: when it completes, so have they. Shared by those ops
// (refs); back to the pool once the last of them has ended.
struct Fence {
  void* ev;
  int device;
  int refs;
  int state;  // XT_EV_NOT_READY until the device reached it
};

namespace {

constexpr int kFencesPerPass = 8;  // distinct streams fenced per slot and pass

struct DrainerState {
  uint64_t last_count_ns = 0;
  bool atexit_registered = false;
  int device = -1;  // the drainer thread's current device
  std::unordered_map<const void*, uint64_t> pending;  // func -> launches not yet written
  std::vector<Fence*> free_fences;  // recorded before, reusable on their device
  // A bit per slot and queue entry: its op's START went into the ring, so its
  // END holds a slot there (RegionWriter::put_end).
  std::vector<uint64_t> started = std::vector<uint64_t>(size_t(kMaxSlots) * kOpQueue / 64);
};
// Made on first use (the drainer can start before this library's static
// initialisers ran) and never destroyed (it may run while destructors do).
DrainerState& ds() {
  static DrainerState* p = new DrainerState;
  return *p;
}

// A runtime call on a thread with no current device binds device 0 and makes
// its primary context (~0.5 GiB of GPU 0 for every rank of the node): the
// drainer makes current the device an event was made on before using it.
// Only on the drainer: the final pass at exit runs on the exiting thread,
// whose current device is the application's.
__thread bool tl_is_drainer __attribute__((tls_model("initial-exec")));


size_t started_bit(const Slot& s, uint64_t i) {
  return size_t(s.index) * kOpQueue + (i & (kOpQueue - 1));
}

void set_started(const Slot& s, uint64_t i, bool in) {
  size_t b = started_bit(s, i);
  uint64_t& word = ds().started[b / 64];
  word = in ? word | (1ull << (b % 64)) : word & ~(1ull << (b % 64));
}

bool was_started(const Slot& s, uint64_t i) {
  size_t b = started_bit(s, i);
  return (ds().started[b / 64] >> (b % 64)) & 1;
}

Record base_record(uint8_t event, const PendingOp& e, uint64_t t_ns) {
  Record r;
  memset(&r, 0, sizeof(r));
  r.event = event;
  r.kind = op_kind(e.op);
  r.flags = e.flags;
  r.comm_rank = e.comm_rank;
  r.op_id = e.op_id;
  r.comm_id = e.comm_id;
  r.seq = e.seq;
  r.t_mono_ns = t_ns;
  r.bytes = e.bytes;
  r.flops = e.flops;
  r.count = 1;
  r.comm_size = e.comm_size;
  copy_name(r.name, op_name(e.op));
  return r;
}

void put_count(Core& c, uint8_t kind, uint16_t flags, const char* name, uint64_t n,
               uint64_t now) {
  while (n > 0) {
    Record r;
    memset(&r, 0, sizeof(r));
    r.event = kEventCount;
    r.kind = kind;
    r.flags = flags;
    r.comm_rank = -1;
    r.t_mono_ns = now;
    r.count = uint32_t(n > 0xFFFFFFFFull ? 0xFFFFFFFFull : n);
    copy_name(r.name, name);
    c.region.put(r);
    n -= r.count;
  }
}

Fence* get_fence(Core& c, int device) {
  auto& pool = ds().free_fences;
  for (size_t i = pool.size(); i-- > 0;) {
    if (pool[i]->device != device) continue;
    Fence* f = pool[i];
    pool[i] = pool.back();
    pool.pop_back();
    return f;
  }
  void* ev = nullptr;
  int rc = c.ops.event_create_untimed ? c.ops.event_create_untimed(&ev) : c.ops.event_create(&ev);
  if (rc != 0) return nullptr;
  return new Fence{ev, device, 0, XT_EV_NOT_READY};
}

void put_fence(Fence* f) {
  if (--f->refs > 0) return;
  f->state = XT_EV_NOT_READY;
  ds().free_fences.push_back(f);
}

// A fence on stream after every op published on it so far. NULL when none
// could be recorded (a stream of another device, say): those ops then end
// unconfirmed, as an op whose launch-path event failed does.
Fence* record_fence(Core& c, void* stream, int device) {
  use_device(c, device);
  Fence* f = get_fence(c, device);
  if (!f) return nullptr;
  if (c.ops.event_record(f->ev, stream) != 0) {
    ds().free_fences.push_back(f);
    return nullptr;
  }
  c.fences.fetch_add(1, std::memory_order_relaxed);
  return f;
}

// Fences for the ops of s published since the last pass that need one, one
// per stream. Skipped entirely while a capture is under way (recording on a
// capturing stream would change the application's graph); an op whose stream
// may have been destroyed since its launch gets no fence (the destroyer waits
// for this section to end before destroying, so a stream not yet announced is
// alive until the section ends).
void assign_fences(Core& c, Slot& s) {
  uint64_t head = s.head.load(std::memory_order_acquire);
  uint64_t tail = s.tail.load(std::memory_order_relaxed);
  uint64_t i = s.fence_cursor > tail ? s.fence_cursor : tail;
  if (i == head) return;
  g_fencing.store(1, std::memory_order_seq_cst);
  if (g_captures.load(std::memory_order_seq_cst) > 0) {
    g_fencing.store(0, std::memory_order_seq_cst);
    return;  // the cursor stays: fenced once the capture ends
  }
  uint64_t epoch = g_stream_epoch.load(std::memory_order_seq_cst);
  struct { void* stream; int device; Fence* fence; } made[kFencesPerPass];
  int n = 0;
  for (; i < head; ++i) {
    PendingOp& e = s.ops[i & (kOpQueue - 1)];
    if (!e.needs_fence) continue;
    if (e.stream_epoch != epoch && stream_maybe_destroyed(e.stream, e.stream_epoch, epoch)) {
      e.needs_fence = false;  // its stream may be gone: ends unconfirmed
      continue;
    }
    int k = 0;
    while (k < n && (made[k].stream != e.stream || made[k].device != e.ev_device)) ++k;
    if (k == n) {
      if (n == kFencesPerPass) break;  // the rest next pass
      made[n++] = {e.stream, e.ev_device, record_fence(c, e.stream, e.ev_device)};
    }
    e.fence = made[k].fence;
    if (e.fence) {
      ++e.fence->refs;
    } else {
      e.needs_fence = false;
    }
  }
  g_fencing.store(0, std::memory_order_seq_cst);
  s.fence_cursor = i;
}

// Whether the device has reached the op's completion event. XT_EV_*.
int completion(Core& c, PendingOp& e) {
  if (e.has_end) {
    use_device(c, e.timed ? e.ev_device : e.ev_done_device);
    return c.ops.event_query(e.timed ? e.ev1 : e.ev_done);
  }
  if (!e.needs_fence) return XT_EV_READY;  // nothing to wait for
  if (!e.fence) return XT_EV_NOT_READY;   // not fenced yet
  Fence& f = *e.fence;
  if (f.state == XT_EV_NOT_READY) {
    use_device(c, f.device);
    f.state = c.ops.event_query(f.ev);
    if (f.state == XT_EV_UNLOADING) {
      f.state = XT_EV_NOT_READY;
      return XT_EV_UNLOADING;
    }
  }
  return f.state;
}

// The END of one op once its completion event (if it has one) completed: with
// the device time when it was sampled (both events), else without (flag bit 0
// clear). An op without any event ends when drained. Returns false while the
// op is still running on the device. started: its START went into the ring.
bool try_end(Core& c, PendingOp& e, bool started, uint64_t now, bool* unloading) {
  uint64_t dur = 0;
  uint16_t flags = e.flags;
  int q = completion(c, e);
  if (q == XT_EV_NOT_READY) return false;
  if (q == XT_EV_UNLOADING) {
    *unloading = true;
    return false;
  }
  if (q != XT_EV_READY) {
    flags = uint16_t((flags | kFlagFailed) & ~kFlagDeviceTimed);
  } else if (e.timed && c.ops.event_elapsed_ns(e.ev0, e.ev1, &dur) != 0) {
    flags = uint16_t((flags | kFlagFailed) & ~kFlagDeviceTimed);
    dur = 0;
  }
  if (e.fence) {
    put_fence(e.fence);
    e.fence = nullptr;
  }
  Record r = base_record(kEventEnd, e, now);
  r.flags = flags;
  r.duration_ns = dur;
  c.region.put_end(r, started);
  return true;
}

// STARTs for every newly queued op, then ENDs from the oldest while complete.
// Returns false when the runtime is unloading: nothing more can be queried.
bool drain_ops(Core& c, Slot& s, uint64_t now) {
  uint64_t head = s.head.load(std::memory_order_acquire);
  uint64_t tail = s.tail.load(std::memory_order_relaxed);
  for (uint64_t i = s.start_cursor > tail ? s.start_cursor : tail; i < head; ++i) {
    const PendingOp& e = s.ops[i & (kOpQueue - 1)];
    Record r = base_record(kEventStart, e, e.t_start_ns);
    r.flags = uint16_t(r.flags & ~(kFlagFailed | kFlagDeviceTimed));
    set_started(s, i, c.region.put_start(r));
    c.ops_queued.fetch_add(1, std::memory_order_relaxed);
  }
  s.start_cursor = head;
  bool unloading = false;
  // Ends go out in launch order: a running op holds back later ones.
  while (tail < head &&
         try_end(c, s.ops[tail & (kOpQueue - 1)], was_started(s, tail), now, &unloading)) {
    ++tail;
    s.tail.store(tail, std::memory_order_release);
    c.ops_completed.fetch_add(1, std::memory_order_relaxed);
  }
  return !unloading;
}

// Launch counts since the last call, summed over threads per kernel.
void collect_counts(Core& c, Slot& s, uint64_t* other) {
  for (int i = 0; i < kCountEntries; ++i) {
    const void* key = s.counts[i].key.load(std::memory_order_acquire);
    if (!key) continue;
    uint64_t n = s.counts[i].n.load(std::memory_order_relaxed);
    if (n != s.seen[i]) ds().pending[key] += n - s.seen[i];
    s.seen[i] = n;
  }
  uint64_t o = s.count_overflow.load(std::memory_order_relaxed);
  *other += o - s.seen_overflow;
  s.seen_overflow = o;
  for (int op = 0; op < XT_OP_COUNT_; ++op) {
    uint64_t n = s.captured[op].load(std::memory_order_relaxed);
    if (n != s.seen_captured[op]) {
      put_count(c, op_kind(xt_op(op)), kFlagGraphCaptured, op_name(xt_op(op)),
                n - s.seen_captured[op], mono_ns());
      c.ops_captured.fetch_add(n - s.seen_captured[op], std::memory_order_relaxed);
    }
    s.seen_captured[op] = n;
  }
  uint64_t d = s.dropped_ops.load(std::memory_order_relaxed);
  c.region.add_dropped(d - s.seen_dropped);
  c.ops_dropped.fetch_add(d - s.seen_dropped, std::memory_order_relaxed);
  s.seen_dropped = d;
}

void write_counts(Core& c, uint64_t now) {
  uint64_t other = 0;
  int n = c.n_slots.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (c.slots[i].in_use.load(std::memory_order_acquire)) collect_counts(c, c.slots[i], &other);
  static uint64_t seen_orphans = 0;
  uint64_t orphans = c.orphan_dropped.load(std::memory_order_relaxed);
  c.region.add_dropped(orphans - seen_orphans);
  c.ops_dropped.fetch_add(orphans - seen_orphans, std::memory_order_relaxed);
  seen_orphans = orphans;
  for (auto& kv : ds().pending) {
    if (kv.second == 0) continue;
    char name[kNameBytes];
    kernel_display_name(c.ops, kv.first, name);
    put_count(c, kKindKernel, 0, name, kv.second, now);
    c.launches_counted.fetch_add(kv.second, std::memory_order_relaxed);
    kv.second = 0;
  }
  if (other) {
    put_count(c, kKindKernel, 0, "(other kernels)", other, now);
    c.launches_counted.fetch_add(other, std::memory_order_relaxed);
  }
}

void atexit_stop() { xt_core_stop(); }

}  // namespace

void use_device(Core& c, int device) {
  if (!tl_is_drainer) return;
  if (device >= 0 && device != ds().device && c.ops.set_device(device) == 0) ds().device = device;
}

void release_slot(Core& c, Slot* s) {
  (void)c;
  reset_slot(s, s->index);
  s->in_use.store(0, std::memory_order_release);
}

void drain_pass(Core& c, bool final_pass) {
  if (c.slots == nullptr || !c.region.is_open()) return;
  uint64_t now = mono_ns();
  int n = c.n_slots.load(std::memory_order_acquire);
  write_devices(c);  // before the ops: a verdict on them can name the GPU
  bool runtime_alive = true;
  for (int i = 0; i < n && runtime_alive; ++i) {
    Slot& s = c.slots[i];
    if (!s.in_use.load(std::memory_order_acquire)) continue;
    assign_fences(c, s);
    runtime_alive = drain_ops(c, s, now);
  }
  if (runtime_alive) probe_pass(c, now);
  uint64_t every = uint64_t(c.cfg.count_every_ms) * 1000000ull;
  if (final_pass || now - ds().last_count_ns >= every) {
    write_counts(c, now);
    ds().last_count_ns = now;
    // A retired thread's slot is reusable once all it queued is written.
    for (int i = 0; i < n; ++i) {
      Slot& s = c.slots[i];
      if (s.in_use.load(std::memory_order_acquire) && s.retired.load(std::memory_order_acquire) &&
          s.tail.load(std::memory_order_relaxed) == s.head.load(std::memory_order_acquire))
        release_slot(c, &s);
    }
  }
  // Register the exit flush only once a thread has used the runtime (it is
  // initialised then), so it runs before the runtime's own exit handlers.
  if (!ds().atexit_registered && n > 0) {
    ds().atexit_registered = true;
    atexit(atexit_stop);
  }
}

namespace {

bool ops_in_flight(Core& c) {
  int n = c.n_slots.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    Slot& s = c.slots[i];
    if (s.in_use.load(std::memory_order_acquire) &&
        s.tail.load(std::memory_order_relaxed) != s.head.load(std::memory_order_acquire))
      return true;
  }
  return false;
}

// Bypassed with nothing in flight: nothing can arrive until the bypass ends,
// so sleep until xt_core_set_bypass(0) or a stop wakes us (or 100 ms pass:
// a bound, not a poll). The check and the wait share park_lock with the
// waker, so a wake-up between them is not lost.
void park_while_bypassed(Core& c) {
  if (!bypassed() || ops_in_flight(c)) return;
  pthread_mutex_lock(&c.park_lock);
  if (bypassed() && !c.stop.load(std::memory_order_acquire)) {
    timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100 * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c.park, &c.park_lock, &until);
  }
  pthread_mutex_unlock(&c.park_lock);
}

}  // namespace

void wake_drainer(Core& c) {
  pthread_mutex_lock(&c.park_lock);
  pthread_cond_signal(&c.park);
  pthread_mutex_unlock(&c.park_lock);
}

void* drainer_main(void* arg) {
  Core& c = *static_cast<Core*>(arg);
  pthread_setname_np(pthread_self(), "xpu_hook_drain");  // for stack dumps and tests
  tl_is_drainer = true;
  use_device(c, c.home_device);  // before any other runtime call on this thread
  if (c.ops.drainer_thread_init) c.ops.drainer_thread_init();
  timespec ts;
  ts.tv_sec = c.cfg.poll_us / 1000000;
  ts.tv_nsec = long(c.cfg.poll_us % 1000000) * 1000;
  while (!c.stop.load(std::memory_order_acquire) &&
         c.state.load(std::memory_order_acquire) == kStateOn) {
    pthread_mutex_lock(&c.pass_lock);
    drain_pass(c, false);
    pthread_mutex_unlock(&c.pass_lock);
    c.passes.fetch_add(1, std::memory_order_relaxed);
    park_while_bypassed(c);
    nanosleep(&ts, nullptr);
  }
  return nullptr;
}

}  // namespace xt
