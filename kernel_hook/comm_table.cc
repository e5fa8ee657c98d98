// Communicator ids and per-communicator sequence numbers.
//
// The id of a communicator must be the same on every member rank without
// reading NCCL's private structs (which change between releases). It is
// derived only from what every member passes to the public API: the bytes of
// the ncclUniqueId for ncclCommInitRank*, and (parent id, color, how many
// splits of the parent came before) for ncclCommSplit, which all members of
// the parent call in the same order.
//
// Lookups run on the launch path: an open-addressing table of atomics, read
// without locks. Inserts and removals (communicator creation and destruction,
// never on the hot path) take a mutex.
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "core_internal.h"

namespace xt {
namespace {

constexpr int kCommSlots = 1024;  // power of two
void* const kTombstone = reinterpret_cast<void*>(uintptr_t(1));

struct CommEntry {
  std::atomic<void*> key;
  std::atomic<uint64_t> id;
  std::atomic<int> rank, size;
  std::atomic<uint64_t> seq, p2p_seq, splits;
};

CommEntry g_comms[kCommSlots];
pthread_mutex_t g_comm_lock = PTHREAD_MUTEX_INITIALIZER;

inline uint32_t comm_hash(void* comm) {
  return uint32_t((uintptr_t(comm) * 0x9E3779B97F4A7C15ull) >> 40);
}

CommEntry* find(void* comm) {
  uint32_t h = comm_hash(comm);
  for (int i = 0; i < kCommSlots; ++i) {
    CommEntry& e = g_comms[(h + i) & (kCommSlots - 1)];
    void* k = e.key.load(std::memory_order_acquire);
    if (k == comm) return &e;
    if (k == nullptr) return nullptr;
  }
  return nullptr;
}

uint64_t mix64(uint64_t x) {
  // splitmix64 finaliser: spreads small differences (color 0 vs 1) over all bits.
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t comm_next_seq(void* comm, bool p2p) {
  CommEntry* e = find(comm);
  if (!e) return 0;
  return (p2p ? e->p2p_seq : e->seq).fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace xt

using namespace xt;

extern "C" {

uint64_t xt_comm_id_from_bytes(const void* data, size_t len, uint64_t salt) {
  // FNV-1a over the bytes, then mixed with the salt.
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  uint64_t id = mix64(h ^ mix64(salt));
  return id ? id : 1;  // 0 is the Python tracer's default group
}

void xt_comm_register(void* comm, uint64_t comm_id, int rank, int size) {
  if (comm == nullptr) return;
  pthread_mutex_lock(&g_comm_lock);
  CommEntry* e = find(comm);
  if (!e) {
    uint32_t h = comm_hash(comm);
    for (int i = 0; i < kCommSlots && !e; ++i) {
      CommEntry& c = g_comms[(h + i) & (kCommSlots - 1)];
      void* k = c.key.load(std::memory_order_relaxed);
      if (k == nullptr || k == kTombstone) e = &c;
    }
  }
  if (e) {
    // Fields first, key last: a lock-free reader that sees the key sees them.
    e->id.store(comm_id, std::memory_order_relaxed);
    e->rank.store(rank, std::memory_order_relaxed);
    e->size.store(size, std::memory_order_relaxed);
    e->seq.store(0, std::memory_order_relaxed);
    e->p2p_seq.store(0, std::memory_order_relaxed);
    e->splits.store(0, std::memory_order_relaxed);
    e->key.store(comm, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_comm_lock);
}

void xt_comm_forget(void* comm) {
  pthread_mutex_lock(&g_comm_lock);
  CommEntry* e = find(comm);
  if (e) e->key.store(kTombstone, std::memory_order_release);
  pthread_mutex_unlock(&g_comm_lock);
}

int xt_comm_info(void* comm, uint64_t* comm_id, int* rank, int* size) {
  CommEntry* e = find(comm);
  if (!e) return 0;
  *comm_id = e->id.load(std::memory_order_relaxed);
  *rank = e->rank.load(std::memory_order_relaxed);
  *size = e->size.load(std::memory_order_relaxed);
  return 1;
}

void xt_comm_set_shape(void* comm, int rank, int size) {
  CommEntry* e = find(comm);
  if (!e) return;
  e->rank.store(rank, std::memory_order_relaxed);
  e->size.store(size, std::memory_order_relaxed);
}

uint64_t xt_comm_split_id(void* parent, int color, int /*key*/) {
  CommEntry* e = find(parent);
  uint64_t parent_id = e ? e->id.load(std::memory_order_relaxed) : uint64_t(uintptr_t(parent));
  uint64_t n = e ? e->splits.fetch_add(1, std::memory_order_relaxed) : 0;
  uint64_t parts[3] = {parent_id, uint64_t(int64_t(color)), n};
  return xt_comm_id_from_bytes(parts, sizeof(parts), 0x5B117);
}

}  // extern "C"
