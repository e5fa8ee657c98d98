// The hot path of timed operations: per-thread queues of GEMMs and
// collectives, their events, sampling and NCCL groups. See core.h for the
// contract; drainer.cc is the consumer side.
#include "core_internal.h"

namespace xt {
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

}  // namespace
}  // namespace xt

using namespace xt;

extern "C" {

xt_ticket xt_op_begin(const xt_op_desc* d, void* stream) {
  Core& c = g_core;
  if (!active() || d->op >= XT_OP_COUNT_) return -1;
  note_device();
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

}  // extern "C"
