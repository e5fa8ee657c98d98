// xpu-diag's NCCL profiler plugin (docs/link.md): keeps, per (communicator,
// channel, peer, direction), the last proxy step posted, moved and done, and
// per channel its kernel's starts and stops, in a table the node agent reads
// while the worker runs (link_table.h). NCCL loads it from
// NCCL_PROFILER_PLUGIN (xpu_timer_launch sets it) and calls it from its proxy
// thread: nothing here blocks, allocates or makes a syscall after the first
// init; if the table cannot be made, the plugin asks NCCL for no events
// (activation mask 0) and says why once.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "link_table.h"
#include "nccl_profiler_abi.h"

namespace {
using namespace xt_link;

constexpr uint32_t kProbe = 512;          // per communicator: (channel, peer, direction) slots
// Proxy ops of one entry in flight at once. NCCL starts the proxy ops of every
// collective it has queued, not one at a time: 12 per channel were seen with
// DDP's buckets on two H100s (docs/link.md). An op beyond this is not counted
// (said once), rather than overwrite one still in flight.
constexpr uint32_t kGens = 64;
constexpr uint32_t kStepSlots = 8;        // NCCL_STEPS: steps of one op in flight at once
constexpr uint32_t kNoSlot = 0xffffffffu;
constexpr uint32_t kTagOp = 0x58544f50, kTagStep = 0x58545354;

// What NCCL holds as an event handle: preallocated, reused (no malloc).
struct Handle {
  uint32_t tag;
  uint32_t entry;
  uint64_t gen;   // the op's number on its entry (Entry::ops when it started)
  int step;
};

// An op's own progress: the table shows the oldest op in flight's, the one the
// peer's counters are compared with (ops stop in order on one connection).
struct OpHandle {
  Handle h;
  uint32_t nsteps, posted, moved, done, last_state;
  bool stopped;
};

struct CommCtx {
  uint32_t slot;                 // comm slot in the table; kNoSlot: off
  uint64_t keys[kProbe];         // 0 empty, else the entry's key
  uint32_t ents[kProbe];         // entry index + 1; 0 being claimed; kNoSlot none left
};

struct Plugin {
  std::once_flag once;
  bool on = false;
  int mask = 0;
  int* nccl_mask = nullptr;   // NCCL's ncclProfilerEventMask (the pointer every init gets)
  char* base = nullptr;
  Header* header = nullptr;
  Entry* entries = nullptr;
  uint32_t comms_claimed = 0;
  CommCtx comms[kMaxComms];
  OpHandle op_handles[kCapacity * kGens];
  Handle step_handles[kCapacity * kGens * kStepSlots];
  uint64_t oldest[kCapacity];   // per entry: the lowest op number not stopped
  int said = 0;
};
Plugin g;
int g_bypass = 0;
// The context of communicators past kMaxComms (and of all, when off): ignored.
CommCtx g_off_comm{kNoSlot, {}, {}};

template <typename T>
inline T load(const T& v) { return __atomic_load_n(&v, __ATOMIC_RELAXED); }
template <typename T>
inline void store(T& v, T x) { __atomic_store_n(&v, x, __ATOMIC_RELAXED); }
template <typename T>
inline void raise_to(T& v, T x) {   // single writer per entry: a plain max
  if (load(v) < x) store(v, x);
}

// When an entry last changed: the coarse clock (vDSO, no syscall; a few ms of
// resolution, enough for "idle for N s"), a quarter of the fine clock's cost on
// the proxy thread, which calls this on every step.
inline uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// One line per reason, once per process: the plugin must never flood a job's log.
void say_once(int bit, const char* fmt, const char* a, const char* b) {
  if (__atomic_fetch_or(&g.said, bit, __ATOMIC_RELAXED) & bit) return;
  fprintf(stderr, "xpu_timer: NCCL profiler plugin: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
}

int env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

// Creates the table under a temp name and renames it into place, so the agent
// never sees a half-written header. Returns "" or why it could not.
const char* create_table(char* path, size_t path_len) {
  const char* dir = getenv("XPU_TIMER_SHM_DIR");
  if (!dir || !*dir) return "XPU_TIMER_SHM_DIR is not set (run under xpu_timer_launch)";
  int rank = env_int("RANK", -1);
  char tmp[4096];
  snprintf(path, path_len, "%s/link-r%d-p%d.tab", dir, rank, int(getpid()));
  snprintf(tmp, sizeof(tmp), "%s/.tmp-link-r%d-p%d.tab", dir, rank, int(getpid()));
  size_t size = size_t(kHeaderSize) + size_t(kCapacity) * kEntrySize;
  unlink(tmp);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create the link table";
  void* mem = MAP_FAILED;
  // Reserved, not sparse: a full tmpfs must fail here, not SIGBUS the proxy thread later.
  if (posix_fallocate(fd, 0, off_t(size)) == 0)
    mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    unlink(tmp);
    return "cannot reserve or map the link table";
  }
  g.base = static_cast<char*>(mem);
  g.header = reinterpret_cast<Header*>(g.base);
  g.entries = reinterpret_cast<Entry*>(g.base + kHeaderSize);
  Header* h = g.header;
  memcpy(h->magic, kMagic, sizeof(kMagic));
  h->version = kVersion;
  h->header_size = kHeaderSize;
  h->entry_size = kEntrySize;
  h->capacity = kCapacity;
  h->pid = int(getpid());
  h->rank = rank;
  h->start_mono_ns = mono_ns();
  if (rename(tmp, path) != 0) {
    unlink(tmp);
    munmap(mem, size);
    g.base = nullptr;
    return "cannot rename the link table into place";
  }
  return "";
}

void start_once() {
  if (env_int("XPU_TIMER_LINK_DISABLE", 0) || env_int("XPU_TIMER_HOOK_DISABLE", 0)) {
    say_once(1, "switched off (%s%s); no link counters", "XPU_TIMER_LINK_DISABLE or XPU_TIMER_HOOK_DISABLE",
             "");
    return;
  }
  char path[4096];
  const char* why = create_table(path, sizeof(path));
  if (*why) {
    say_once(1, "switched off: %s (%s); no link counters", why, strerror(errno));
    return;
  }
  g.mask = xtProfileProxyOp | xtProfileProxyStep;
  // Kernel channel events make NCCL add a proxy op per channel (its profiler
  // transport): the price of knowing which channel's kernel never stopped.
  if (env_int("XPU_TIMER_LINK_KERNEL", 1)) g.mask |= xtProfileKernelCh;
  g.on = true;
}

int init_common(void** context, uint64_t comm_hash, int* mask, const char* name, int nnodes,
                int nranks, int rank) {
  std::call_once(g.once, start_once);
  *context = &g_off_comm;
  *mask = g.on && !__atomic_load_n(&g_bypass, __ATOMIC_RELAXED) ? g.mask : 0;
  if (!g.on) return xtNcclSuccess;
  __atomic_store_n(&g.nccl_mask, mask, __ATOMIC_RELEASE);
  uint32_t slot = __atomic_fetch_add(&g.comms_claimed, 1, __ATOMIC_RELAXED);
  if (slot >= kMaxComms) {
    say_once(2, "more than %s communicators; the others have no link counters%s", "32", "");
    return xtNcclSuccess;
  }
  CommCtx* ctx = &g.comms[slot];
  ctx->slot = slot;
  Comm* c = reinterpret_cast<Comm*>(g.base + kCommOffset + slot * kCommSize);
  c->comm_hash = comm_hash;
  c->rank = rank;
  c->nranks = nranks;
  c->nnodes = nnodes;
  snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
  __atomic_store_n(&c->valid, 1u, __ATOMIC_RELEASE);
  uint32_t n = slot + 1;
  uint32_t cur = load(g.header->ncomms);
  while (cur < n && !__atomic_compare_exchange_n(&g.header->ncomms, &cur, n, true, __ATOMIC_RELEASE,
                                                 __ATOMIC_RELAXED)) {
  }
  *context = ctx;
  return xtNcclSuccess;
}

inline uint64_t key_of(uint8_t kind, uint8_t channel, int peer) {
  return (uint64_t(kind) << 48) | (uint64_t(channel) << 40) | uint64_t(uint32_t(peer + 2));
}

// The entry of (kind, channel, peer) on this communicator, claimed on first
// use; kNoSlot when the table is full (counted once per key in `dropped`).
uint32_t entry_of(CommCtx* ctx, uint8_t kind, uint8_t channel, int peer) {
  if (ctx->slot == kNoSlot) return kNoSlot;
  uint64_t key = key_of(kind, channel, peer);
  uint32_t i = uint32_t((key * 0x9E3779B97F4A7C15ull) >> 55) & (kProbe - 1);
  for (uint32_t n = 0; n < kProbe; ++n, i = (i + 1) & (kProbe - 1)) {
    uint64_t k = __atomic_load_n(&ctx->keys[i], __ATOMIC_ACQUIRE);
    if (k == 0) {
      uint64_t zero = 0;
      if (!__atomic_compare_exchange_n(&ctx->keys[i], &zero, key, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE)) {
        k = zero;
      } else {
        uint64_t e = __atomic_fetch_add(&g.header->nentries, 1, __ATOMIC_RELAXED);
        if (e >= kCapacity) {
          __atomic_fetch_add(&g.header->dropped, 1, __ATOMIC_RELAXED);
          __atomic_store_n(&ctx->ents[i], kNoSlot, __ATOMIC_RELEASE);
          say_once(4, "link table full (%s entries); later channels and peers are not counted%s",
                   "1024", "");
          return kNoSlot;
        }
        Entry& en = g.entries[e];
        en.kind = kind;
        en.channel = channel;
        en.comm = uint16_t(ctx->slot);
        en.peer = peer;
        __atomic_store_n(&en.valid, 1u, __ATOMIC_RELEASE);
        __atomic_store_n(&ctx->ents[i], uint32_t(e + 1), __ATOMIC_RELEASE);
        return uint32_t(e);
      }
    }
    if (k == key) {
      uint32_t v = __atomic_load_n(&ctx->ents[i], __ATOMIC_ACQUIRE);
      return (v == 0 || v == kNoSlot) ? kNoSlot : v - 1;
    }
  }
  return kNoSlot;
}

OpHandle* op_slot(uint32_t idx, uint64_t gen) { return &g.op_handles[idx * kGens + gen % kGens]; }

// The oldest op in flight's progress into the table (or the last one's, all
// done, when none is in flight). Single writer: the entry's proxy thread.
void publish(uint32_t idx) {
  Entry& e = g.entries[idx];
  uint64_t gen = g.oldest[idx];
  if (gen >= load(e.ops) && gen > 0) --gen;   // none in flight: the last op stays shown
  const OpHandle* o = op_slot(idx, gen);
  if (o->h.tag != kTagOp || o->h.gen != gen) return;
  store(e.nsteps, o->nsteps);
  store(e.posted, o->posted);
  store(e.moved, o->moved);
  store(e.done, o->done);
  store(e.last_state, o->last_state);
}

OpHandle* begin_op(uint32_t idx, uint32_t nsteps) {
  Entry& e = g.entries[idx];
  uint64_t gen = load(e.ops);
  OpHandle* o = op_slot(idx, gen);
  if (o->h.tag == kTagOp && !o->stopped) {   // kGens ops of this entry still in flight
    say_once(8, "more than %s proxy ops of one channel in flight; later ones are not counted%s", "64", "");
    return nullptr;
  }
  *o = OpHandle{Handle{kTagOp, idx, gen, 0}, nsteps, 0, 0, 0, 0, false};
  store(e.t_ns, mono_ns());
  store(e.ops, gen + 1);
  if (gen == g.oldest[idx]) publish(idx);
  return o;
}

// Whether the table shows this handle's op (the oldest in flight): a step's
// change is then copied into the entry field by field, not republished.
inline bool shown(const Handle& h) { return h.gen == g.oldest[h.entry]; }

int start_event(void* context, void** handle, uint64_t type, void* parent, const xtDescrUnion& u) {
  *handle = nullptr;
  CommCtx* ctx = static_cast<CommCtx*>(context);
  if (!g.on || !ctx) return xtNcclSuccess;
  if (type == xtProfileProxyOp) {
    uint8_t kind = u.proxyOp.isSend ? kSend : kRecv;
    uint32_t idx = entry_of(ctx, kind, u.proxyOp.channelId, u.proxyOp.peer);
    if (idx != kNoSlot) *handle = begin_op(idx, uint32_t(u.proxyOp.nSteps > 0 ? u.proxyOp.nSteps : 0));
  } else if (type == xtProfileProxyStep) {
    OpHandle* op = static_cast<OpHandle*>(parent);
    int step = u.proxyStep.step;
    if (!op || op->h.tag != kTagOp || step < 0) return xtNcclSuccess;
    raise_to(op->posted, uint32_t(step + 1));
    Handle* h = &g.step_handles[(op->h.entry * kGens + op->h.gen % kGens) * kStepSlots +
                                uint32_t(step) % kStepSlots];
    *h = Handle{kTagStep, op->h.entry, op->h.gen, step};
    *handle = h;
    if (shown(op->h)) store(g.entries[op->h.entry].posted, op->posted);
  } else if (type == xtProfileKernelCh) {
    uint32_t idx = entry_of(ctx, kKernel, u.kernelCh.channelId, -1);
    if (idx != kNoSlot) *handle = begin_op(idx, 0);
  }
  return xtNcclSuccess;
}

// The op a handle belongs to, if its slot still holds it.
OpHandle* op_of(const Handle* h) {
  OpHandle* o = op_slot(h->entry, h->gen);
  return o->h.tag == kTagOp && o->h.gen == h->gen ? o : nullptr;
}

int record_state(void* handle, int state, xtStateArgs*) {
  Handle* h = static_cast<Handle*>(handle);
  if (!h) return xtNcclSuccess;
  OpHandle* o = op_of(h);
  if (!o) return xtNcclSuccess;
  o->last_state = uint32_t(state);
  if (h->tag == kTagStep && (state == xtStateRecvFlushWait || state == xtStateRecvGPUWait))
    raise_to(o->moved, uint32_t(h->step + 1));
  Entry& e = g.entries[h->entry];
  store(e.t_ns, mono_ns());
  if (shown(*h)) {
    store(e.last_state, o->last_state);
    store(e.moved, o->moved);
  }
  return xtNcclSuccess;
}

int stop_event(void* handle) {
  Handle* h = static_cast<Handle*>(handle);
  if (!h) return xtNcclSuccess;
  Entry& e = g.entries[h->entry];
  OpHandle* o = op_of(h);
  if (h->tag == kTagStep) {
    store(e.steps_total, load(e.steps_total) + 1);
    if (o) {
      raise_to(o->done, uint32_t(h->step + 1));
      raise_to(o->moved, uint32_t(h->step + 1));
      if (shown(*h)) {
        store(e.done, o->done);
        store(e.moved, o->moved);
      }
    }
  } else if (h->tag == kTagOp && o) {
    o->stopped = true;
    store(e.ops_done, load(e.ops_done) + 1);
    uint64_t& oldest = g.oldest[h->entry];   // past every stopped op: the next one in flight
    // A slot holding a later op means this one stopped (a slot in flight is never reused).
    for (const OpHandle* n; oldest < load(e.ops); ++oldest) {
      n = op_slot(h->entry, oldest);
      if (!n->stopped && n->h.gen == oldest) break;
    }
  }
  store(e.t_ns, mono_ns());
  if (o && h->tag == kTagOp) publish(h->entry);   // the next op in flight is shown now
  return xtNcclSuccess;
}

int finalize(void* context) {
  CommCtx* ctx = static_cast<CommCtx*>(context);
  if (g.on && ctx && ctx->slot != kNoSlot) {
    Comm* c = reinterpret_cast<Comm*>(g.base + kCommOffset + ctx->slot * kCommSize);
    __atomic_store_n(&c->valid, 2u, __ATOMIC_RELEASE);   // destroyed: the agent leaves it out
  }
  return xtNcclSuccess;
}

int init_v5(void** context, uint64_t comm_hash, int* mask, const char* name, int nnodes, int nranks,
            int rank, xtNcclDebugLogger_t) {
  return init_common(context, comm_hash, mask, name, nnodes, nranks, rank);
}
int init_v4(void** context, int* mask, const char* name, uint64_t comm_hash, int nnodes, int nranks,
            int rank, xtNcclDebugLogger_t) {
  return init_common(context, comm_hash, mask, name, nnodes, nranks, rank);
}
int start_v5(void* context, void** handle, xtEventDescr_v5* d) {
  return start_event(context, handle, d->type, d->parentObj, d->u);
}
int start_v4(void* context, void** handle, xtEventDescr_v4* d) {
  return start_event(context, handle, d->type, d->parentObj, d->u);
}

}  // namespace

extern "C" {
// For paired measurements in one job (tests/gpu/test_link_gpu.py): 1 sets
// NCCL's activation mask to 0, so NCCL makes no profiler calls for the
// collectives it enqueues from then on; 0 asks for the events again.
__attribute__((visibility("default"))) void xpu_timer_link_bypass(int on) {
  __atomic_store_n(&g_bypass, on ? 1 : 0, __ATOMIC_RELAXED);
  int* m = __atomic_load_n(&g.nccl_mask, __ATOMIC_ACQUIRE);
  if (m && g.on) __atomic_store_n(m, on ? 0 : g.mask, __ATOMIC_RELAXED);
}

__attribute__((visibility("default"))) xtProfiler_v5 ncclProfiler_v5 = {
    "xpu_timer_link", init_v5, start_v5, stop_event, record_state, finalize};
__attribute__((visibility("default"))) xtProfiler_v4 ncclProfiler_v4 = {
    "xpu_timer_link", init_v4, start_v4, stop_event, record_state, finalize};
}
