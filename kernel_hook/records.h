// The C++ writer of a progress region (docs/records.md). The Python reader
// diag/records/reader.py is the one reader; tests/kernel_hook/test_records_cpp.py
// checks this writer against it.
//
// Contract: one RegionWriter has exactly one writing thread (in the hook, the
// drainer). put() never blocks, never allocates and never makes a syscall:
// when the ring is full it counts the record as dropped and returns false.
//
// What a full ring may drop (docs/records.md, "When the ring is full"): never
// the END of an op whose START it published, or the agent would keep the op
// in flight for good. A published START holds a slot for its END until
// put_end() writes it; put_start() goes in only with room for itself and the
// ENDs of every op still open. Records of anything but a collective or p2p op
// stop a quarter of the ring short, so a flood of GEMMs cannot crowd out the
// collectives whose seqs the hang rules compare.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace xt {

constexpr char kMagic[8] = {'X', 'P', 'U', 'D', 'R', 'E', 'C', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderSize = 4096;
constexpr uint32_t kRecordSize = 128;
constexpr uint32_t kNameBytes = 56;
constexpr uint32_t kProducerHook = 2;

// kEventProbe: the process's oldest unfinished kernel completion probe
// (docs/records.md, written by the drainer, probes.cc).
enum Event : uint8_t {
  kEventStart = 1, kEventEnd = 2, kEventCount = 3, kEventDevice = 5, kEventProbe = 6
};
enum Kind : uint8_t { kKindKernel = 1, kKindGemm = 2, kKindCollective = 3, kKindP2P = 4 };
enum RecordFlags : uint16_t {
  kFlagDeviceTimed = 1,
  kFlagGraphCaptured = 2,
  kFlagFailed = 4,
  // Bits 8..15: NCCL data type + 1 (0 = none); see docs/kernel_hook.md.
  kFlagDtypeShift = 8,
};
constexpr uint32_t kHeaderFlagDisabled = 1;

struct RegionHeader {
  char magic[8];
  uint32_t version, header_size, record_size, capacity;
  int32_t pid, rank, local_rank, world_size;
  uint32_t producer, flags;
  uint64_t start_unix_ns, start_mono_ns;
  uint64_t write_idx;  // offset 64
  char pad1[56];
  uint64_t read_idx;  // offset 128
  char pad2[56];
  uint64_t dropped;            // offset 192
  uint64_t heartbeat_mono_ns;  // offset 200
};
static_assert(offsetof(RegionHeader, write_idx) == 64, "write_idx offset");
static_assert(offsetof(RegionHeader, read_idx) == 128, "read_idx offset");
static_assert(offsetof(RegionHeader, dropped) == 192, "dropped offset");
static_assert(offsetof(RegionHeader, heartbeat_mono_ns) == 200, "heartbeat offset");

struct Record {
  uint8_t event;
  uint8_t kind;
  uint16_t flags;
  int32_t comm_rank;
  uint64_t op_id;
  uint64_t comm_id;
  uint64_t seq;
  uint64_t t_mono_ns;
  uint64_t duration_ns;
  uint64_t bytes;
  uint64_t flops;
  uint32_t count;
  int32_t comm_size;
  char name[kNameBytes];
};
static_assert(sizeof(Record) == kRecordSize, "record size");
static_assert(offsetof(Record, name) == 72, "name offset");

inline uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no syscall
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t unix_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Copies a name, cut to kNameBytes-1 bytes without splitting a UTF-8 character.
inline void copy_name(char (&dst)[kNameBytes], const char* src) {
  size_t n = src ? strnlen(src, kNameBytes) : 0;
  if (n > kNameBytes - 1) {
    n = kNameBytes - 1;
    while (n > 0 && (uint8_t(src[n]) & 0xC0) == 0x80) --n;  // src[n] continues a char
  }
  if (n) memcpy(dst, src, n);
  memset(dst + n, 0, kNameBytes - n);
}

struct RegionIdentity {
  int pid, rank, local_rank, world_size;
  uint32_t capacity;  // power of two
};

class RegionWriter {
 public:
  // No destructor on purpose: the hook's writer is a global that the drainer
  // may still use while static destructors run at exit. Call close().
  RegionWriter() = default;
  RegionWriter(const RegionWriter&) = delete;
  RegionWriter& operator=(const RegionWriter&) = delete;

  // Creates <dir>/hook-r<rank>-p<pid>.ring under a temp name and renames it into
  // place, so a reader never sees a half-written header. On failure writes a
  // reason to err (one line, no newline) and returns false.
  bool create(const char* dir, const RegionIdentity& id, char* err, size_t err_len) {
    if (id.capacity == 0 || (id.capacity & (id.capacity - 1))) {
      snprintf(err, err_len, "ring capacity %u is not a power of two", id.capacity);
      return false;
    }
    char tmp[4096];
    snprintf(path_, sizeof(path_), "%s/hook-r%d-p%d.ring", dir, id.rank, id.pid);
    snprintf(tmp, sizeof(tmp), "%s/.tmp-hook-r%d-p%d.ring", dir, id.rank, id.pid);
    size_t size = size_t(kHeaderSize) + size_t(id.capacity) * kRecordSize;
    // A fresh file of our own: never through a link left at the temp name.
    unlink(tmp);
    int fd = ::open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return fail(err, err_len, "cannot create", tmp);
    // Reserve the blocks, not just the size: a sparse file on a full tmpfs
    // (/dev/shm) maps fine and then SIGBUSes the writer at its first record.
    void* mem = MAP_FAILED;
    int rc = posix_fallocate(fd, 0, off_t(size));
    if (rc == 0) {
      mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    } else {
      errno = rc;
    }
    if (mem == MAP_FAILED) {
      ::close(fd);
      unlink(tmp);
      return fail(err, err_len, "cannot reserve or map", tmp);
    }
    ::close(fd);
    base_ = static_cast<char*>(mem);
    size_ = size;
    fill_header(id);
    if (rename(tmp, path_) != 0) {
      unlink(tmp);
      close();
      return fail(err, err_len, "cannot rename into place", path_);
    }
    return true;
  }

  // Publishes one record that is neither an op's START nor the END of a
  // published one; false (and dropped += 1) when there is no room for it.
  bool put(const Record& r) { return put_within(r, limit_for(r.kind)); }

  // An op's START: false (dropped) unless there is room for its END too,
  // whose slot it then holds.
  bool put_start(const Record& r) {
    if (!put_within(r, limit_for(r.kind) - 1)) return false;
    ++open_;
    return true;
  }

  // An op's END; started: put_start() published its START, so the slot it
  // held takes it and it always goes in. Else as put().
  bool put_end(const Record& r, bool started) {
    if (!started || open_ == 0) return put(r);
    --open_;
    publish(r);
    return true;
  }

  void set_disabled() {
    if (base_) __atomic_fetch_or(&header()->flags, kHeaderFlagDisabled, __ATOMIC_RELAXED);
  }
  // Records the core dropped before they reached the ring (its own full queues).
  void add_dropped(uint64_t n) {
    if (!base_ || !n) return;
    dropped_ += n;
    __atomic_store_n(&header()->dropped, dropped_, __ATOMIC_RELAXED);
  }
  bool is_open() const { return base_ != nullptr; }
  const char* path() const { return path_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t open_ops() const { return open_; }

  // Unmaps; the file stays for the agent (the launcher removes the directory).
  void close() {
    if (base_) munmap(base_, size_);
    base_ = nullptr;
  }

 private:
  RegionHeader* header() { return reinterpret_cast<RegionHeader*>(base_); }

  uint64_t limit_for(uint8_t kind) const {
    return kind == kKindCollective || kind == kKindP2P ? capacity_ : capacity_ - capacity_ / 4;
  }

  // Publishes r while records unread + slots held stay under limit.
  bool put_within(const Record& r, uint64_t limit) {
    RegionHeader* h = header();
    uint64_t read_idx = __atomic_load_n(&h->read_idx, __ATOMIC_ACQUIRE);
    if (write_idx_ - read_idx + open_ >= limit) {
      __atomic_store_n(&h->dropped, ++dropped_, __ATOMIC_RELAXED);
      return false;
    }
    publish(r);
    return true;
  }

  void publish(const Record& r) {
    RegionHeader* h = header();
    char* slot = base_ + kHeaderSize + (write_idx_ & (capacity_ - 1)) * kRecordSize;
    memcpy(slot, &r, sizeof(r));
    __atomic_store_n(&h->heartbeat_mono_ns, r.t_mono_ns, __ATOMIC_RELAXED);
    ++write_idx_;
    __atomic_store_n(&h->write_idx, write_idx_, __ATOMIC_RELEASE);
  }

  void fill_header(const RegionIdentity& id) {
    RegionHeader* h = header();
    memcpy(h->magic, kMagic, sizeof(kMagic));
    h->version = kVersion;
    h->header_size = kHeaderSize;
    h->record_size = kRecordSize;
    h->capacity = id.capacity;
    h->pid = id.pid;
    h->rank = id.rank;
    h->local_rank = id.local_rank;
    h->world_size = id.world_size;
    h->producer = kProducerHook;
    h->flags = 0;
    h->start_unix_ns = unix_ns();
    h->start_mono_ns = mono_ns();
    capacity_ = id.capacity;
    write_idx_ = 0;
    dropped_ = 0;
    open_ = 0;
  }

  static bool fail(char* err, size_t err_len, const char* what, const char* path) {
    snprintf(err, err_len, "%s %s: %s", what, path, strerror(errno));
    return false;
  }

  char* base_ = nullptr;
  size_t size_ = 0;
  uint64_t capacity_ = 0;
  uint64_t write_idx_ = 0;
  uint64_t dropped_ = 0;
  uint64_t open_ = 0;  // STARTs published whose END is not: a slot held for each
  char path_[4096] = {};
};

}  // namespace xt
