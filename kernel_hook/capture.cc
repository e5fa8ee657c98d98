// Capture and stream-teardown bookkeeping: what keeps the drainer's fences off
// streams under capture or being destroyed (see core_internal.h). Slow paths
// only (a capture begun, a stream destroyed), never a launch.
#include <sched.h>

#include "core_internal.h"

namespace xt {

std::atomic<int> g_captures{0};
std::atomic<uint64_t> g_stream_epoch{0};
std::atomic<int> g_fencing{0};
std::atomic<void*> g_destroyed[kDestroyedRing];

namespace {
pthread_mutex_t g_destroy_lock = PTHREAD_MUTEX_INITIALIZER;
}  // namespace

bool stream_maybe_destroyed(const void* stream, uint64_t since, uint64_t now) {
  if (now - since >= kDestroyedRing) return true;  // the ring forgot: assume so
  for (uint64_t e = since; e < now; ++e) {
    void* d = g_destroyed[e % kDestroyedRing].load(std::memory_order_relaxed);
    if (d == nullptr || d == stream) return true;
  }
  return false;
}

}  // namespace xt

using namespace xt;

// Fencing sections and the announcements below pair up Dekker-style: either
// the drainer sees the announcement and does not record, or the announcer sees
// the drainer inside its section and waits the few microseconds it lasts.
// Bounded: a drainer wedged inside the driver must not hang the application.
static void wait_for_fencing() {
  for (int i = 0; i < 2000000 && g_fencing.load(std::memory_order_seq_cst); ++i) sched_yield();
}

extern "C" {

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

}  // extern "C"
