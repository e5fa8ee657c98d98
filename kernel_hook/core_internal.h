// Shared state of the core's files: core.cc (slots, start, stop), op_queue.cc
// and capture.cc (hot path), op_table.cc, and drainer.cc (background thread).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "core.h"
#include "records.h"

namespace xt {

constexpr int kMaxSlots = 512;       // threads that can time ops at once
constexpr int kCountEntries = 256;   // distinct kernels counted per thread
constexpr int kOpQueue = 256;        // timed ops in flight per thread (power of two)
constexpr int kGroupMax = 64;        // ops deferred inside one NCCL group
constexpr int kMaxDevices = 16;      // distinct CUDA devices said (DEVICE records) per process
constexpr int kProbes = 8;           // kernel completion probes unfinished per thread (power of two)

enum CoreState : int { kStateOff = 0, kStateOn = 1, kStateStopped = 2 };

struct Fence;  // drainer.cc: an event the drainer records on a stream

// One timed op. Written by the owner thread, then published through
// Slot::head; read by the drainer until it advances Slot::tail.
struct PendingOp {
  xt_op op;
  uint16_t flags;      // record flags (device-timed, failed, dtype)
  int32_t comm_rank, comm_size;
  uint64_t op_id, comm_id, seq, bytes, flops, t_start_ns;
  void* stream;
  // Event pair owned by this queue entry and reused; created for ev_device.
  void* ev0;
  void* ev1;
  int ev_device;
  void* ev_done;       // untimed completion event of an unsampled op, if needed
  int ev_done_device;
  bool sampled;        // chosen for device timing (1 in time_every)
  bool timed;          // sampled and both events recorded: duration known
  bool has_end;        // end event recorded: completion is tracked on the device
  bool no_events;      // a group member under graph capture: record no event
  // An unsampled collective: no event on the launch path; the drainer records
  // a fence on its stream after seeing it published, and its END waits for that.
  bool needs_fence;
  uint64_t stream_epoch;  // g_stream_epoch when launched
  Fence* fence;           // drainer-owned, set once the fence is recorded
};

// A kernel completion probe (probes.cc): an untimed event recorded on the
// launch's stream right after the launch, at most one per thread and probe
// period. Written by the owner thread, published through Slot::probe_head;
// the drainer owns the fields below the line until it advances probe_tail.
struct Probe {
  const void* key;   // the kernel's count key (core.h: stub, handle or function)
  uint64_t t_ns;     // when it was launched
  uint64_t mark;     // the owner's Slot::launches right after it
  void* ev;          // owned by this entry and reused; made on ev_device
  int ev_device;
  // ---- drainer ----
  bool seen, done;
  uint64_t base;     // the process's launches when first seen, less the owner's since mark
};

struct CountEntry {
  std::atomic<const void*> key;
  std::atomic<uint64_t> n;  // written only by the owner thread
};

struct alignas(64) Slot {
  // ---- owner thread ----
  std::atomic<uint64_t> head;  // ops published
  uint64_t next_op;            // owner-local op counter
  int group_depth;
  int group_n;
  uint64_t group_first;        // queue index of the first deferred op
  uint64_t rng;                // xorshift state for sampling GEMMs
  std::atomic<uint64_t> dropped_ops;
  std::atomic<uint64_t> captured[XT_OP_COUNT_];
  std::atomic<uint64_t> count_overflow;  // kernels beyond kCountEntries
  CountEntry counts[kCountEntries];
  PendingOp ops[kOpQueue];
  // Kernel completion probes (probes.cc). launches and probe_head are the
  // owner's to write (plain relaxed stores, one cache line it owns).
  std::atomic<uint64_t> launches;    // kernel launches counted on this thread
  uint64_t probe_epoch;              // g_probe_epoch when this thread last probed
  std::atomic<uint64_t> probe_head;  // probes published
  Probe probes[kProbes];
  // ---- drainer ----
  alignas(64) std::atomic<uint64_t> tail;  // ops consumed
  std::atomic<uint64_t> probe_tail;        // probes retired
  uint64_t start_cursor;                   // STARTs written up to here
  uint64_t fence_cursor;                   // fences asked for up to here
  uint64_t seen[kCountEntries];
  uint64_t seen_overflow, seen_captured[XT_OP_COUNT_], seen_dropped;
  // ---- claim bookkeeping ----
  std::atomic<int> in_use;   // 1 owned by a live thread
  std::atomic<int> retired;  // owner exited; drainer frees it once empty
  int index;
};

struct Core {
  std::atomic<int> state{kStateOff};
  xt_config cfg{};
  xt_device_ops ops{};
  Slot* slots = nullptr;  // kMaxSlots, one mmap
  std::atomic<int> n_slots{0};  // high-water mark of claimed indices
  std::atomic<uint64_t> orphan_dropped{0};  // ops from threads with no slot
  RegionWriter region;
  int home_device = -1;  // the starting thread's device: the drainer's first
  // CUDA devices launched on, in the order first seen: ordinal + 1, 0 = free.
  // Filled by launching threads (CAS, off the hot path), written as DEVICE
  // records by the drainer; devices_written is the drainer's.
  std::atomic<int> devices[kMaxDevices] = {};
  int devices_written = 0;
  char visible[256] = {};  // CUDA_VISIBLE_DEVICES at start ("" when unset)
  pthread_t drainer{};
  bool drainer_started = false;
  std::atomic<int> stop{0};
  pthread_mutex_t pass_lock = PTHREAD_MUTEX_INITIALIZER;  // one drain pass at a time
  // The drainer sleeps on park while bypassed and idle (xt_core_set_bypass).
  pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t park = PTHREAD_COND_INITIALIZER;
  // statistics (drainer-written)
  std::atomic<uint64_t> launches_counted{0}, ops_queued{0}, ops_completed{0}, ops_captured{0};
  std::atomic<uint64_t> fences{0};  // fences recorded
  std::atomic<uint64_t> probes{0};  // kernel completion probes recorded (launch paths)
  std::atomic<uint64_t> passes{0};  // drainer passes
  std::atomic<uint64_t> ops_dropped{0};  // not queued: full per-thread queue, or no slot
};

// The drainer records fences on the application's streams. It must never
// record on a stream under capture or on a destroyed one: captures begun and
// streams destroyed announce themselves here first, then wait while the
// drainer is inside a fencing section (Dekker-style, all seq_cst). Plain
// atomics, not Core members: constant-initialised, so they work before the
// library's static initialisers have run (a capture begun in a constructor).
extern std::atomic<int> g_captures;         // captures under way in the process
extern std::atomic<uint64_t> g_stream_epoch;  // bumped before any stream is destroyed
// The streams of the last kDestroyedRing epochs (nullptr: every stream, a
// device reset): entry epoch % kDestroyedRing was destroyed going to epoch + 1.
constexpr uint64_t kDestroyedRing = 64;
extern std::atomic<void*> g_destroyed[kDestroyedRing];
// Whether stream may have been destroyed since epoch (the drainer, inside its
// fencing section, with the current epoch now).
bool stream_maybe_destroyed(const void* stream, uint64_t since, uint64_t now);
extern std::atomic<int> g_fencing;          // 1 while the drainer may record a fence

Core& core();
extern Core g_core;

struct Tls {
  Slot* slot;
  bool no_slot;  // every slot is taken: this thread only counts drops
  // The thread's current CUDA device + 1 (0: not asked yet, or the runtime
  // would not say), and the last one it noted + 1 (-1 before its first
  // launch): a launch takes the slow path only when they differ.
  int dev;
  int dev_noted;
};
// initial-exec: plain %fs-relative access, no __tls_get_addr (which may malloc).
extern __thread Tls tl __attribute__((tls_model("initial-exec")));
Slot* claim_slot();  // slow path, once per thread (core.cc)

inline Slot* my_slot() {
  Slot* s = tl.slot;
  return s ? s : claim_slot();
}

// Slow path (core.cc): a launch on a device this thread has not noted.
void note_device_slow();
// Hot path: one thread-local compare per launch.
inline void note_device() {
  if (__builtin_expect(tl.dev != tl.dev_noted, 0)) note_device_slow();
}

inline bool maybe_capturing(const Core& c) {
  return c.cfg.capture_check_always || g_captures.load(std::memory_order_acquire) > 0;
}

inline bool active() { return g_core.state.load(std::memory_order_acquire) == kStateOn; }

const char* op_name(xt_op op);
uint8_t op_kind(xt_op op);

// probes.cc: kernel completion probes. The drainer bumps g_probe_epoch once
// per probe period; a launch on a thread whose last probe is of an older
// epoch probes (one compare per launch, the rest off the hot path).
extern std::atomic<uint64_t> g_probe_epoch;
void probe_launch(Core& c, Slot* s, const void* key, void* stream);
void probe_pass(Core& c, uint64_t now);
void use_device(Core& c, int device);  // drainer.cc: the drainer's current device

// drainer.cc
void drain_pass(Core& c, bool final_pass);
void write_devices(Core& c);  // devices.cc: DEVICE records for devices newly noted
void* drainer_main(void* arg);
void wake_drainer(Core& c);
void release_slot(Core& c, Slot* s);
void reset_slot(Slot* s, int index);  // core.cc
uint64_t comm_next_seq(void* comm, bool p2p);  // comm_table.cc
// kernel_names.cc: a short readable name for a kernel's host function.
void kernel_display_name(const xt_device_ops& ops, const void* func, char (&out)[kNameBytes]);

}  // namespace xt
