// Unit test of the hook's core through its C API, linked directly (no
// LD_PRELOAD), with an in-process fake device: core_test DIR
// Checks here what only the process can see (stats, return values); the
// Python side (test_core.py) checks the region it wrote, record by record.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core.h"

namespace {

int g_fail = 0;
#define EXPECT(cond)                                               \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "core_test:%d: FAILED %s\n", __LINE__, #cond); \
      ++g_fail;                                                    \
    }                                                              \
  } while (0)

// A stream is owned by one thread; each event record advances its clock by
// step_ns, so every op measures exactly step_ns. A hung stream never completes.
struct FakeStream {
  uint64_t clock_ns = 0, step_ns = 1000;
  bool hang = false, capturing = false;
};
// Bumping g_event_gen makes every existing event stale, as a device reset
// would: recording one fails.
std::atomic<int> g_event_gen{0};
std::atomic<int> g_destroyed{0};
struct FakeEvent {
  std::atomic<int> done{0};
  uint64_t t_ns = 0;
  int gen = g_event_gen.load();
};

int get_device(int* d) { *d = 0; return 0; }
int set_device(int) { return 0; }
int ev_create(void** e) { *e = new FakeEvent(); return 0; }
int ev_destroy(void* e) {
  ++g_destroyed;
  delete static_cast<FakeEvent*>(e);
  return 0;
}
int ev_record(void* e, void* s) {
  FakeStream* fs = static_cast<FakeStream*>(s);
  FakeEvent* ev = static_cast<FakeEvent*>(e);
  if (ev->gen != g_event_gen.load()) return 1;
  fs->clock_ns += fs->step_ns;
  ev->t_ns = fs->clock_ns;
  ev->done.store(fs->hang ? 0 : 1, std::memory_order_release);
  return 0;
}
int ev_query(void* e) {
  return static_cast<FakeEvent*>(e)->done.load(std::memory_order_acquire) ? XT_EV_READY
                                                                          : XT_EV_NOT_READY;
}
int ev_elapsed(void* a, void* b, uint64_t* ns) {
  *ns = static_cast<FakeEvent*>(b)->t_ns - static_cast<FakeEvent*>(a)->t_ns;
  return 0;
}
int capturing(void* s) { return static_cast<FakeStream*>(s)->capturing ? 1 : 0; }
const char* kname(const void* f, int) { return static_cast<const char*>(f); }  // "func" is its name

// Kernel keys are aligned (stubs, handles): the core uses bit 0 as a tag.
alignas(8) const char kAlpha[] = "kernel_alpha";
alignas(8) const char kBeta[] = "kernel_beta";
alignas(8) const char kGamma[] = "kernel_gamma";
const char* const kFuncs[3] = {kAlpha, kBeta, kGamma};
int g_comm_obj[4];  // addresses stand in for ncclComm_t

xt_ticket begin(xt_op op, void* comm, FakeStream* s, uint64_t flops) {
  xt_op_desc d{op, 4096, flops, comm ? 7 : -1, comm};
  return xt_op_begin(&d, s);
}

// Many threads at once: launches, GEMMs, and all-reduces on a shared comm.
void many_threads(int nthreads, int iters) {
  std::vector<std::thread> ts;
  for (int t = 0; t < nthreads; ++t)
    ts.emplace_back([=] {
      FakeStream s;
      for (int i = 0; i < iters; ++i) {
        xt_count_launch(kFuncs[i % 3], 0, XT_NO_STREAM);
        xt_op_end(begin(XT_OP_GEMM_EX, nullptr, &s, 2 * 8 * 8 * 8), 0);
        xt_op_end(begin(XT_OP_ALL_REDUCE, &g_comm_obj[0], &s, 0), 0);
        if (i % 16 == 0) usleep(1000);  // let the drainer keep up with the queues
      }
    });
  for (auto& t : ts) t.join();
}

// More short-lived threads than slots: slots of exited threads are reused.
void thread_churn(int total) {
  for (int done = 0; done < total; done += 50) {
    std::vector<std::thread> ts;
    for (int t = 0; t < 50; ++t)
      ts.emplace_back([] {
        FakeStream s;
        xt_op_end(begin(XT_OP_SGEMM, nullptr, &s, 2), 0);
      });
    for (auto& t : ts) t.join();
    usleep(20000);  // > count_every_ms: the drainer frees the exited threads' slots
  }
}

void group_capture_hang() {
  FakeStream s, cap, hung;
  cap.capturing = true;
  hung.hang = true;
  xt_group_start();
  xt_ticket a = begin(XT_OP_ALL_GATHER, &g_comm_obj[1], &s, 0);
  xt_ticket b = begin(XT_OP_REDUCE_SCATTER, &g_comm_obj[1], &s, 0);
  xt_op_end(a, 0);
  xt_op_end(b, 0);
  xt_group_end_before();
  xt_group_end_after(0);
  xt_capture_begin();
  EXPECT(begin(XT_OP_GEMM_EX, nullptr, &cap, 1) < 0);  // captured: counted only
  xt_capture_end();
  xt_capture_end();  // an unmatched end never goes below zero
  xt_op_end(begin(XT_OP_GEMM_EX, nullptr, &cap, 1), 0);  // no capture known: timed
  xt_op_end(begin(XT_OP_ALL_REDUCE, &g_comm_obj[2], &hung, 0), 0);
}

// Stale events (a device reset) are replaced once, and the op is still timed.
void stale_events() {
  std::thread([] {
    FakeStream s;
    for (int i = 0; i < 300; ++i) xt_op_end(begin(XT_OP_HGEMM, nullptr, &s, 2), 0);
    usleep(20000);  // drained: every queue entry holds completed events
    g_event_gen.fetch_add(1);
    int before = g_destroyed.load();
    xt_op_end(begin(XT_OP_HGEMM, nullptr, &s, 2), 0);
    EXPECT(g_destroyed.load() == before + 2);
  }).join();
}

void comm_ids() {
  unsigned char id[128] = {1, 2, 3};
  uint64_t a = xt_comm_id_from_bytes(id, sizeof(id), 0);
  EXPECT(a == xt_comm_id_from_bytes(id, sizeof(id), 0));
  id[127] ^= 1;
  EXPECT(a != xt_comm_id_from_bytes(id, sizeof(id), 0));
  xt_comm_register(&g_comm_obj[3], a, 0, 2);
  uint64_t s0 = xt_comm_split_id(&g_comm_obj[3], 0, 0);
  uint64_t s1 = xt_comm_split_id(&g_comm_obj[3], 0, 0);  // the next split of the same parent
  EXPECT(s0 != s1 && s0 != a);
  EXPECT(xt_busbw_factor(XT_OP_ALL_REDUCE, 8) == 2.0 * 7 / 8);
  EXPECT(xt_busbw_factor(XT_OP_ALL_GATHER, 4) == 0.75);
  EXPECT(xt_busbw_factor(XT_OP_SEND, 4) == 1.0);
  EXPECT(xt_busbw_factor(XT_OP_BROADCAST, 1) == 0.0 && xt_busbw_factor(XT_OP_ALL_REDUCE, 0) == 0.0);
  EXPECT(xt_nccl_type_size(9) == 2 && xt_nccl_type_size(7) == 4 && xt_nccl_type_size(99) == 0);
}

// Bypassed with nothing in flight, the drainer sleeps until the bypass ends
// (at most 100 ms at a time, against its 1 ms passes), then drains at once.
void bypass_parks() {
  xt_stats a, b, c;
  usleep(20000);  // any earlier op drained
  EXPECT(xt_core_set_bypass(1) == 0);
  xt_core_stats(&a);
  usleep(300000);
  xt_core_stats(&b);
  EXPECT(b.passes - a.passes <= 8);
  EXPECT(xt_core_set_bypass(0) == 1);
  FakeStream s;
  xt_op_end(begin(XT_OP_GEMM_EX, nullptr, &s, 2), 0);
  for (int i = 0; i < 2000; ++i) {
    xt_core_stats(&c);
    if (c.ops_completed > b.ops_completed) break;
    usleep(1000);
  }
  EXPECT(c.ops_completed == b.ops_completed + 1 && c.passes > b.passes);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int nthreads = argc > 2 ? atoi(argv[2]) : 16, iters = argc > 3 ? atoi(argv[3]) : 2000;
  xt_device_ops ops = {get_device, set_device, ev_create, ev_destroy, ev_record,
                       ev_query,   ev_elapsed, capturing, kname, nullptr, nullptr, nullptr};
  xt_config cfg = {argv[1], getpid(), 5, 1, 8, 1u << 18, 200, 5, 0, 1, 0, nullptr, 5};  // time every op
  char err[256];
  EXPECT(xt_core_start(&cfg, &ops, err, sizeof(err)) == 0);
  EXPECT(xt_core_start(&cfg, &ops, err, sizeof(err)) != 0);  // once only
  for (int i = 0; i < 3; ++i) xt_comm_register(&g_comm_obj[i], 0xC0 + i, 5, 8);
  comm_ids();
  bypass_parks();
  many_threads(nthreads, iters);
  thread_churn(600);
  group_capture_hang();
  stale_events();
  usleep(50000);
  xt_core_stop();
  xt_stats st;
  xt_core_stats(&st);
  uint64_t timed = uint64_t(nthreads) * iters * 2 + 600 + 3 + 301 + 1;
  printf("launches %llu queued %llu completed %llu captured %llu dropped %llu rdropped %llu\n",
         (unsigned long long)st.launches_counted, (unsigned long long)st.ops_queued,
         (unsigned long long)st.ops_completed, (unsigned long long)st.ops_captured,
         (unsigned long long)st.ops_dropped, (unsigned long long)st.records_dropped);
  EXPECT(st.launches_counted == uint64_t(nthreads) * iters);
  EXPECT(st.ops_queued == timed + 1 - st.ops_dropped);  // + the hung one
  EXPECT(st.ops_completed == timed - st.ops_dropped);
  EXPECT(st.ops_captured == 1);
  EXPECT(st.records_dropped == 0);
  EXPECT(st.threads <= 512);
  EXPECT(xt_core_active() == 0);
  return g_fail ? 1 : 0;
}
