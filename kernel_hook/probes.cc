// Kernel completion probes: what names a GPU kernel that never ends
// (docs/kernel_hook.md, "Kernels that never end").
//
// A rank stuck behind such a kernel waits for the device in a copy back to
// the host, which the driver spins on: it uses CPU, so from /proc it looks
// busy, and it is in no op the hook or the tracer records. What shows it is
// an event recorded right after a launch that never completes, far past how
// long that kernel's earlier launches took, while the rank launches nothing.
//
// Launch path (probe_launch): once per probe period per thread, the launching
// thread records one pooled untimed event on the launch's stream, right after
// the launch, and publishes it in its slot's probe ring with the kernel's key.
// Every other launch pays one compare (xt_count_launch). No lock, no
// allocation, no syscall: the event is made once per ring entry and device.
//
// Drainer (probe_pass): moves the epoch, polls the probes, keeps per kernel
// how long its probes took (launch to end as the drainer saw it), and every
// count period writes a PROBE record naming the oldest probe unfinished for
// over a second, or one PROBE record with op_id 0 once none is.
#include <cstring>
#include <unordered_map>

#include "core_internal.h"

namespace xt {

std::atomic<uint64_t> g_probe_epoch{0};

namespace {

constexpr uint64_t kReportAfterNs = 1000000000ull;  // a probe this old is said

// The default streams the launching thread may record on; any other value is
// a stream handle, or XT_NO_STREAM.
inline bool probeable(const void* stream) { return stream != XT_NO_STREAM; }

// The entry's event, on the calling thread's current device, made once.
bool entry_event(Core& c, Probe& p, int dev) {
  if (p.ev && p.ev_device == dev) return true;
  if (p.ev) c.ops.event_destroy(p.ev);
  p.ev = nullptr;
  auto create = c.ops.event_create_untimed ? c.ops.event_create_untimed : c.ops.event_create;
  if (create(&p.ev) != 0) {
    p.ev = nullptr;
    return false;
  }
  p.ev_device = dev;
  return true;
}

struct History {
  uint64_t runs = 0;    // probes of this kernel that ended
  uint64_t max_ns = 0;  // the longest of them, launch to end
};

// Drainer-only state: made on first use and never destroyed (the drainer may
// run while static destructors do), as the drainer's own.
struct ProbeState {
  uint64_t epoch_ns = 0;        // when the epoch last moved
  uint64_t total = 0;           // launches of the process, summed over slots
  uint64_t last_launch_ns = 0;  // when the drainer last saw that sum move
  uint64_t report_ns = 0;       // when the last PROBE record was written
  bool said = false;            // a probe was said and not yet cleared
  std::unordered_map<const void*, History> history;  // by kernel key
};
ProbeState& ps() {
  static ProbeState* p = new ProbeState;
  return *p;
}

// ns from t to now, 0 if t is later: a launch may put its probe (its time
// taken after the drainer took now) before the drainer reads the slot, and an
// unsigned difference would read as 584 years (a run's length, a probe
// overdue) where the truth is none.
uint64_t since(uint64_t now, uint64_t t) { return now > t ? now - t : 0; }

// Polls slot s's probes: marks the ended ones (their time goes to the
// kernel's history) and retires them from the oldest on. Returns the oldest
// unfinished one, or nullptr.
Probe* poll_slot(Core& c, Slot& s, uint64_t now) {
  uint64_t head = s.probe_head.load(std::memory_order_acquire);
  uint64_t tail = s.probe_tail.load(std::memory_order_relaxed);
  Probe* oldest = nullptr;
  for (uint64_t i = tail; i < head; ++i) {
    Probe& p = s.probes[i & (kProbes - 1)];
    if (!p.seen) {
      p.seen = true;
      p.done = false;
      // The owner's launches after the probe, as of now, plus everyone's from now on.
      uint64_t own = s.launches.load(std::memory_order_relaxed) - p.mark;
      p.base = ps().total - own;
    }
    if (p.done) continue;
    use_device(c, p.ev_device);
    int q = c.ops.event_query(p.ev);
    if (q == XT_EV_NOT_READY || q == XT_EV_UNLOADING) {
      if (!oldest || p.t_ns < oldest->t_ns) oldest = &p;
      continue;
    }
    p.done = true;
    if (q == XT_EV_READY) {
      History& h = ps().history[p.key];
      ++h.runs;
      if (since(now, p.t_ns) > h.max_ns) h.max_ns = since(now, p.t_ns);
    }
  }
  while (tail < head && s.probes[tail & (kProbes - 1)].done) {
    s.probes[tail & (kProbes - 1)].seen = false;
    ++tail;
  }
  s.probe_tail.store(tail, std::memory_order_release);
  return oldest;
}

void put_probe(Core& c, const Probe* p, uint64_t op_id, uint64_t now) {
  Record r;
  memset(&r, 0, sizeof(r));
  r.event = kEventProbe;
  r.kind = kKindKernel;
  r.comm_rank = -1;
  r.op_id = op_id;
  r.t_mono_ns = p ? p->t_ns : now;
  r.bytes = ps().last_launch_ns;
  if (p) {
    auto it = ps().history.find(p->key);
    if (it != ps().history.end()) {
      r.seq = it->second.runs;
      r.duration_ns = it->second.max_ns;
    }
    uint64_t since = ps().total - p->base;
    r.count = uint32_t(since > 0xFFFFFFFFull ? 0xFFFFFFFFull : since);
    kernel_display_name(c.ops, p->key, r.name);
  }
  c.region.put(r);
}

}  // namespace

// Launch path, once per probe period per thread (the epoch moved since its
// last probe): an untimed event on stream right after the launch. Never on a
// stream that may be capturing (the event would join the application's
// graph), nor while the ring is full (the drainer has not seen the older
// ones end: a stuck stream needs no more probes).
void probe_launch(Core& c, Slot* s, const void* key, void* stream) {
  s->probe_epoch = g_probe_epoch.load(std::memory_order_relaxed);
  if (!probeable(stream)) return;
  if (maybe_capturing(c) && c.ops.stream_capturing(stream)) return;
  uint64_t head = s->probe_head.load(std::memory_order_relaxed);
  if (head - s->probe_tail.load(std::memory_order_acquire) >= uint64_t(kProbes)) return;
  Probe& p = s->probes[head & (kProbes - 1)];
  int dev = 0;
  if (c.ops.get_device(&dev) != 0 || !entry_event(c, p, dev)) return;
  if (c.ops.event_record(p.ev, stream) != 0) return;
  p.key = key;
  p.t_ns = mono_ns();
  p.mark = s->launches.load(std::memory_order_relaxed);
  p.seen = p.done = false;
  s->probe_head.store(head + 1, std::memory_order_release);
  c.probes.fetch_add(1, std::memory_order_relaxed);
}

void probe_pass(Core& c, uint64_t now) {
  ProbeState& st = ps();
  uint64_t period = uint64_t(c.cfg.probe_every_ms) * 1000000ull;
  if (period && now - st.epoch_ns >= period) {
    st.epoch_ns = now;
    g_probe_epoch.fetch_add(1, std::memory_order_relaxed);
  }
  int n = c.n_slots.load(std::memory_order_acquire);
  uint64_t total = 0;
  // Freed slots too: a slot's count is never reset (its next owner goes on
  // from it), so the sum only grows while the process lives.
  for (int i = 0; i < n; ++i) total += c.slots[i].launches.load(std::memory_order_relaxed);
  if (total != st.total) st.last_launch_ns = now;
  st.total = total;
  Probe* oldest = nullptr;
  for (int i = 0; i < n; ++i) {
    Slot& s = c.slots[i];
    if (!s.in_use.load(std::memory_order_acquire)) continue;
    Probe* p = poll_slot(c, s, now);
    if (p && (!oldest || p->t_ns < oldest->t_ns)) oldest = p;
  }
  uint64_t every = uint64_t(c.cfg.count_every_ms) * 1000000ull;
  bool overdue = oldest && since(now, oldest->t_ns) >= kReportAfterNs;
  if (overdue && now - st.report_ns >= every) {
    put_probe(c, oldest, oldest->t_ns | 1, now);  // any id but 0, which clears
    st.report_ns = now;
    st.said = true;
  } else if (!overdue && st.said) {
    put_probe(c, nullptr, 0, now);  // cleared: no probe is overdue any more
    st.said = false;
  }
}

}  // namespace xt
