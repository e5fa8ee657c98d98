// The hook's core behind a small C API: per-thread launch counters, per-thread
// queues of timed operations, communicator ids and sequence numbers, and the
// drainer thread that turns completed device events into progress records.
//
// It knows nothing about dlsym or real CUDA: the shim (hook.cc, resolve.cc)
// hands it an xt_device_ops table of real functions, and the unit tests
// (tests/kernel_hook/core_test.cc) hand it an in-process fake, with no LD_PRELOAD.
//
// Hot-path contract (xt_count_launch, xt_op_begin, xt_op_end, xt_group_*):
// no malloc, no lock, no syscall once the calling thread has its slot (the
// first call on a thread claims one, once). Safe from any number of threads.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Results of xt_device_ops.event_query.
enum { XT_EV_READY = 0, XT_EV_NOT_READY = 1, XT_EV_ERROR = 2, XT_EV_UNLOADING = 3 };

// What identifies a launched kernel: a host stub (cudaLaunchKernel*), a
// cudaKernel_t / CUkernel (__cudaLaunchKernel*), or a CUfunction (the driver's
// cuLaunchKernel*). The value is also the tag in the low bits of a count key:
// handles are driver objects (at least 4-aligned), stubs are even.
enum { XT_KERNEL_STUB = 0, XT_KERNEL_HANDLE = 1, XT_KERNEL_FUNCTION = 3 };

typedef struct xt_device_ops {
  int (*get_device)(int* device);  // 0 on success
  int (*set_device)(int device);
  int (*event_create)(void** event);
  int (*event_destroy)(void* event);
  int (*event_record)(void* event, void* stream);
  int (*event_query)(void* event);  // XT_EV_*
  int (*event_elapsed_ns)(void* start, void* end, uint64_t* ns);
  int (*stream_capturing)(void* stream);  // 0 no, 1 capturing (or cannot tell)
  // NULL when unknown; drainer only. kind: XT_KERNEL_*.
  const char* (*kernel_name)(const void* func, int kind);
  // NULL or run once on the drainer thread before its first pass: the real
  // one puts that thread in thread-local capture mode, so its event queries
  // never invalidate a global-mode graph capture on another thread.
  void (*drainer_thread_init)(void);
  // NULL or an event without timing (cheaper to record and query): the
  // drainer's fences. event_create when NULL.
  int (*event_create_untimed)(void** event);
  // NULL or the runtime's identity of a device (drainer only, never a launch
  // path): fills the UUID's 16 bytes and the PCI address packed as in a
  // DEVICE record (docs/records.md) and returns the XT_DEV_HAS_* bits of what
  // it filled.
  int (*device_identity)(int device, uint8_t uuid[16], uint64_t* pci);
} xt_device_ops;

enum { XT_DEV_HAS_UUID = 1, XT_DEV_HAS_PCI = 2 };  // the DEVICE record's flags

typedef struct xt_config {
  const char* shm_dir;  // region directory (XPU_TIMER_SHM_DIR)
  int pid, rank, local_rank, world_size;
  uint32_t capacity;       // region ring capacity, power of two
  uint32_t poll_us;        // drainer poll period
  uint32_t count_every_ms; // how often launch counts become COUNT records
  int capture_check_always;  // ask stream_capturing on every timed op, not only
                             // while xt_capture_begin says a capture is on
  uint32_t time_every;     // device-time 1 in N GEMMs/collectives (0 or 1: all).
                           // Every collective's completion is still tracked:
  int completion_events;   // 1: by an end event recorded at launch (exact per
                           // op); 0: by the drainer's fences (no cost at launch)
  const char* visible_devices;  // CUDA_VISIBLE_DEVICES at start; NULL when unset
  uint32_t probe_every_ms;  // a kernel completion probe per thread at most this often; 0: none
} xt_config;

// Operation types the hook times. Names and kinds live in core.cc.
typedef enum xt_op {
  XT_OP_GEMM_EX = 0,
  XT_OP_GEMM_STRIDED_BATCHED_EX,
  XT_OP_SGEMM,
  XT_OP_SGEMM_STRIDED_BATCHED,
  XT_OP_HGEMM,
  XT_OP_LT_MATMUL,
  XT_OP_ALL_REDUCE,
  XT_OP_ALL_GATHER,
  XT_OP_REDUCE_SCATTER,
  XT_OP_BROADCAST,
  XT_OP_REDUCE,
  XT_OP_SEND,
  XT_OP_RECV,
  XT_OP_COUNT_
} xt_op;

typedef struct xt_op_desc {
  xt_op op;
  uint64_t bytes;  // nccl-tests "size" for collectives, 0 for GEMMs
  uint64_t flops;  // 2*m*n*k*batch for GEMMs
  int dtype;       // NCCL data type, -1 when none
  void* comm;      // ncclComm_t or NULL
} xt_op_desc;

// Opaque handle from xt_op_begin to xt_op_end (an index; negative = not queued).
typedef int64_t xt_ticket;

// Starts the core: creates the region and the drainer. 0 on success; otherwise
// writes a one-line reason into err and leaves the core off.
int xt_core_start(const xt_config* cfg, const xt_device_ops* ops, char* err, size_t err_len);
// Joins the drainer (waiting at most 2 s) and, if it came back, writes what
// has completed in a final pass. Idempotent.
void xt_core_stop(void);
// 1 while the core is started and not switched off.
int xt_core_active(void);
// Switches the core off for good (hooks only forward) and marks the region.
void xt_core_switch_off(void);
// Runs one drain pass on the calling thread (tests; the drainer does this itself).
void xt_core_flush(void);
// In a forked child: drop every piece of state and stay inert.
void xt_core_after_fork_child(void);

// The calling thread's current device is now device (the hooked
// cudaSetDevice, after the real one succeeded). One thread-local store; works
// before xt_core_start. The next launch on the thread says the device once
// (a DEVICE record, written by the drainer) if no launch said it before.
void xt_device_set(int device);

// Hot path. Counts one kernel launch of func (an XT_KERNEL_* kind) on the
// calling thread, made on stream; XT_NO_STREAM where the stream is unknown
// or the launch is a hooked GEMM's or collective's own (never probed). Once
// per probe period (cfg.probe_every_ms) a thread's launch is followed by a
// completion probe: an untimed event on its stream, which the drainer polls
// (docs/kernel_hook.md, "Kernels that never end").
#define XT_NO_STREAM ((void*)~(uintptr_t)0)
void xt_count_launch(const void* func, int kind, void* stream);
// Hot path. Queues an op. Sampled ops (1 in cfg.time_every; collectives by a
// hash of (comm id, seq), so every rank samples the same ones) get a start and
// an end event: their END carries the device duration (flag bit 0). The other
// collectives and p2p get their completion tracked without timing: with
// cfg.completion_events, by one untimed end event recorded here; otherwise by
// none here: the drainer records a fence event on their stream once it sees
// them (one per stream per pass), and their END waits for it, so the hang rule
// still sees them in flight. Ops launched within one drainer pass share a
// fence, so completion is then known per pass, not per op. While a capture is
// under way, or on a default stream, they get the end event here. Other GEMMs get no event and end when drained (counted, FLOPs
// recorded, no duration). Inside an NCCL group events are deferred; under
// graph capture the op is only counted.
xt_ticket xt_op_begin(const xt_op_desc* desc, void* stream);
// Hot path. Records the end event and queues the op for the drainer.
void xt_op_end(xt_ticket ticket, int failed);
// NCCL groups: ops between start and end launch at the outermost end.
void xt_group_start(void);
void xt_group_end_before(void);           // before the real ncclGroupEnd
void xt_group_end_after(int failed);      // after it

// Stream capture bookkeeping, from the hooked cudaStreamBeginCapture* /
// cudaStreamEndCapture. xt_capture_begin goes before the real call (and
// xt_capture_end after it when it failed): from then on the drainer records
// no fence, and a timed op asks whether its stream is capturing. While no
// capture is under way a timed op skips that (costly) query. Works before
// xt_core_start.
void xt_capture_begin(void);
void xt_capture_end(void);
// Before a real cudaStreamDestroy (stream) or cudaDeviceReset (NULL: every
// stream): from its return on, the drainer records no fence on that stream
// for ops launched before the call.
void xt_streams_destroying(void* stream);

// Communicators. ids are the same on every member rank.
uint64_t xt_comm_id_from_bytes(const void* data, size_t len, uint64_t salt);
void xt_comm_register(void* comm, uint64_t comm_id, int rank, int size);
void xt_comm_forget(void* comm);
// Fills id/rank/size of a known comm; 0 when unknown.
int xt_comm_info(void* comm, uint64_t* comm_id, int* rank, int* size);
// Updates rank/size of a known comm (filled in after a non-blocking init).
void xt_comm_set_shape(void* comm, int rank, int size);
// The id of the next child of parent created by ncclCommSplit(color); every
// member of parent calls split in the same order, so all agree.
uint64_t xt_comm_split_id(void* parent, int color, int key_unused);

// nccl-tests bus-bandwidth factor: busbw = bytes / time * factor; 0 below two
// ranks (undefined: a 1-rank collective is a local copy).
double xt_busbw_factor(xt_op op, int nranks);
// Bytes per element of an NCCL data type, 0 when unknown.
size_t xt_nccl_type_size(int dtype);
const char* xt_op_name(xt_op op);

// Statistics for tests and the bench.
typedef struct xt_stats {
  uint64_t launches_counted;  // kernel launches seen by the drainer so far
  uint64_t ops_queued;        // timed ops queued
  uint64_t ops_completed;     // END records written
  uint64_t ops_captured;      // counted under graph capture
  uint64_t ops_dropped;       // not queued: a full per-thread queue or no slot
  uint64_t records_dropped;   // region ring full
  uint32_t threads;           // thread slots claimed
  uint64_t fences;            // fence events the drainer recorded
  uint64_t passes;            // drain passes made by the drainer
  uint64_t probes;            // kernel completion probes recorded
} xt_stats;
void xt_core_stats(xt_stats* out);

// Bypass (the hook's xpu_timer_hook_bypass): while on, the shim forwards
// launches, GEMMs and collectives without recording them, and the drainer,
// once nothing is in flight, sleeps until the bypass ends (so a bypassed
// process pays only the forwarding). Returns the previous setting.
int xt_core_set_bypass(int on);

#ifdef __cplusplus
}

#include <atomic>

namespace xt {
extern std::atomic<int> g_bypass;
// Hot path: one relaxed load.
inline bool bypassed() { return g_bypass.load(std::memory_order_relaxed) != 0; }
}  // namespace xt
#endif
