// The link table: what the NCCL profiler plugin shares with the node agent
// (docs/link.md). One file per process, <XPU_TIMER_SHM_DIR>/link-r<rank>-p<pid>.tab,
// created under a temporary name and renamed into place. The reader is
// diag/link/table.py; tests/kernel_hook/test_link_plugin.py ties them together.
//
// Writers: each entry belongs to one communicator, and only that
// communicator's proxy thread writes it (single writer per entry); every field
// is one aligned relaxed atomic store, `valid` is published last with a release
// store. Claims (a comm slot, an entry) are one atomic fetch_add each. Nothing
// here blocks, allocates or makes a syscall after create().
#pragma once

#include <cstdint>

namespace xt_link {

constexpr char kMagic[8] = {'X', 'P', 'U', 'L', 'I', 'N', 'K', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderSize = 4096;
constexpr uint32_t kEntrySize = 64;
constexpr uint32_t kCapacity = 1024;   // entries
constexpr uint32_t kMaxComms = 32;
constexpr uint32_t kCommOffset = 128;
constexpr uint32_t kCommSize = 64;
constexpr uint32_t kCommNameBytes = 40;
constexpr uint32_t kFlagDisabled = 1;

enum EntryKind : uint8_t { kSend = 0, kRecv = 1, kKernel = 2 };

struct Header {
  char magic[8];
  uint32_t version, header_size, entry_size, capacity;
  int32_t pid, rank;          // offset 24: the process's global rank (RANK), -1 unknown
  uint32_t flags;             // offset 32: bit 0 the plugin switched itself off
  uint32_t ncomms;            // offset 36: comm slots claimed
  uint64_t start_mono_ns;     // offset 40
  uint64_t nentries;          // offset 48: entries claimed (an entry is readable once valid)
  uint64_t dropped;           // offset 56: entries that found no free slot
};
static_assert(sizeof(Header) == 64, "header");

struct Comm {                 // at kCommOffset + i * kCommSize
  uint64_t comm_hash;         // NCCL's commHash: equal on every member
  int32_t rank, nranks, nnodes;
  uint32_t valid;             // published last
  char name[kCommNameBytes];
};
static_assert(sizeof(Comm) == kCommSize, "comm");
static_assert(kCommOffset + kMaxComms * kCommSize <= kHeaderSize, "comms fit the header");

// One (communicator, channel, peer, direction), or one channel's kernel.
struct Entry {                // at kHeaderSize + i * kEntrySize
  uint32_t valid;             // published last
  uint8_t kind;               // EntryKind
  uint8_t channel;
  uint16_t comm;              // index into the comm slots
  int32_t peer;               // the peer's rank in the communicator; -1 for kernel entries
  uint32_t last_state;        // the last ncclProfilerEventState_t recorded (0 none)
  uint64_t ops;               // proxy ops (kernel: channel kernels) started
  uint64_t ops_done;          // ... and stopped
  // The oldest op in flight's progress (the last op's when none is): NCCL
  // starts the proxy ops of every queued collective at once, and the peer's
  // counters are compared op for op (ops_done is the op's number on both sides).
  uint32_t nsteps;            // steps of that op
  uint32_t posted;            // steps of that op started: highest step + 1
  uint32_t moved;             // send: steps completed; recv: steps whose data arrived
  uint32_t done;              // steps of the current op stopped
  uint64_t steps_total;       // steps stopped, all ops: a counter that only grows
  uint64_t t_ns;              // CLOCK_MONOTONIC of the last change
};
static_assert(sizeof(Entry) == kEntrySize, "entry");

}  // namespace xt_link
