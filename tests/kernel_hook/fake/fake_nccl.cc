// A fake libnccl.so.2: communicators that know only their rank and size, and
// collectives that record their arguments and queue one simulated kernel with
// the delay (or hang) set for their api name. Like NCCL, calls between
// ncclGroupStart and ncclGroupEnd launch only at the outermost ncclGroupEnd.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "fake_api.h"
#include "fake_nccl_profiler.h"
#include "static_driver.h"

// nranks and rank, and what the profiler plugin driver keeps (fake_nccl_profiler.cc).
struct ncclComm : FakeProfComm {};

namespace {
struct Deferred {
  cudaStream_t stream;
  const char* api;
};
thread_local int tl_group = 0;
thread_local Deferred tl_deferred[256];
thread_local int tl_ndeferred = 0;

// One collective is one kernel, launched through the driver's cuLaunchKernelEx
// as NCCL does (its runtime linked in statically: static_driver.h).
void kernel(cudaStream_t stream, const char* api) {
  static CUfunc_st kernels[] = {
      FAKE_API_KERNEL(ncclAllReduce), FAKE_API_KERNEL(ncclAllGather),
      FAKE_API_KERNEL(ncclReduceScatter), FAKE_API_KERNEL(ncclBroadcast),
      FAKE_API_KERNEL(ncclReduce), FAKE_API_KERNEL(ncclSend), FAKE_API_KERNEL(ncclRecv)};
  fake_static::api_kernel(kernels, api, stream, fake_static::launch_ex);
}

void launch(cudaStream_t stream, const char* api) {
  if (tl_group > 0 && tl_ndeferred < 256) {
    tl_deferred[tl_ndeferred++] = Deferred{stream, api};
    return;
  }
  kernel(stream, api);
}

// NCCL's commHash is equal on every member: here FNV-1a over the unique id.
uint64_t hash_id(const ncclUniqueId& id) {
  uint64_t h = 1469598103934665603ull;
  for (char b : id.internal) h = (h ^ uint8_t(b)) * 1099511628211ull;
  return h;
}

ncclComm_t make_comm(int nranks, int rank, uint64_t hash = 0) {
  ncclComm* c = new ncclComm;
  c->nranks = nranks;
  c->rank = rank;
  fake_prof_init(c, hash ? hash : uint64_t(uintptr_t(c)), 1);
  fake_ras_comm(nranks, rank);
  return c;
}
}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  int fd = open("/dev/urandom", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, id->internal, sizeof(id->internal)) : -1;
  if (fd >= 0) close(fd);
  return n == ssize_t(sizeof(id->internal)) ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  uint64_t first8;
  memcpy(&first8, id.internal, 8);
  NOTE("ncclCommInitRank", FAKE_U(comm), FAKE_U(nranks), first8, FAKE_U(rank));
  if (note_result) return note_result;
  *comm = make_comm(nranks, rank, hash_id(id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  uint64_t first8;
  memcpy(&first8, id.internal, 8);
  NOTE("ncclCommInitRankConfig", FAKE_U(comm), FAKE_U(nranks), first8, FAKE_U(rank),
       FAKE_U(config));
  if (note_result) return note_result;
  *comm = make_comm(nranks, rank, hash_id(id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank, int nid,
                                      ncclUniqueId* ids, ncclConfig_t* config) {
  NOTE("ncclCommInitRankScalable", FAKE_U(comm), FAKE_U(nranks), FAKE_U(myrank), FAKE_U(nid),
       FAKE_U(ids), FAKE_U(config));
  if (note_result) return note_result;
  *comm = make_comm(nranks, myrank);
  return ncclSuccess;
}
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  NOTE("ncclCommInitAll", FAKE_U(comms), FAKE_U(ndev), FAKE_U(devlist));
  if (note_result) return note_result;
  for (int i = 0; i < ndev; ++i) comms[i] = make_comm(ndev, i);
  return ncclSuccess;
}
// The fake cannot talk to other ranks: a child keeps the parent's shape.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  NOTE("ncclCommSplit", FAKE_U(comm), FAKE_U(color), FAKE_U(key), FAKE_U(newcomm),
       FAKE_U(config));
  if (note_result) return note_result;
  *newcomm = color == XT_NCCL_SPLIT_NOCOLOR ? nullptr : make_comm(comm->nranks, comm->rank);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  NOTE("ncclCommDestroy", FAKE_U(comm));
  if (note_result) return note_result;
  fake_prof_finalize(comm);
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  NOTE("ncclCommAbort", FAKE_U(comm));
  if (note_result) return note_result;
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
  NOTE("ncclGroupStart", 0);
  if (note_result) return note_result;
  ++tl_group;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
  NOTE("ncclGroupEnd", 0);
  if (note_result) return note_result;
  if (tl_group > 0 && --tl_group == 0) {
    for (int i = 0; i < tl_ndeferred; ++i)
      kernel(tl_deferred[i].stream, tl_deferred[i].api);
    tl_ndeferred = 0;
  }
  return ncclSuccess;
}

#define COLL_TAIL(api)                 \
  if (note_result) return note_result; \
  fake_prof_collective(comm);          \
  fake_ras_collective();               \
  launch(stream, api);                 \
  return ncclSuccess

ncclResult_t ncclAllReduce(const void* s, void* r, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  NOTE("ncclAllReduce", FAKE_U(s), FAKE_U(r), count, FAKE_U(dt), FAKE_U(op), FAKE_U(comm),
       FAKE_U(stream));
  COLL_TAIL("ncclAllReduce");
}
ncclResult_t ncclAllGather(const void* s, void* r, size_t count, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t stream) {
  NOTE("ncclAllGather", FAKE_U(s), FAKE_U(r), count, FAKE_U(dt), FAKE_U(comm), FAKE_U(stream));
  COLL_TAIL("ncclAllGather");
}
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t count, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  NOTE("ncclReduceScatter", FAKE_U(s), FAKE_U(r), count, FAKE_U(dt), FAKE_U(op), FAKE_U(comm),
       FAKE_U(stream));
  COLL_TAIL("ncclReduceScatter");
}
ncclResult_t ncclBroadcast(const void* s, void* r, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  NOTE("ncclBroadcast", FAKE_U(s), FAKE_U(r), count, FAKE_U(dt), FAKE_U(root), FAKE_U(comm),
       FAKE_U(stream));
  COLL_TAIL("ncclBroadcast");
}
ncclResult_t ncclReduce(const void* s, void* r, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  NOTE("ncclReduce", FAKE_U(s), FAKE_U(r), count, FAKE_U(dt), FAKE_U(op), FAKE_U(root),
       FAKE_U(comm), FAKE_U(stream));
  COLL_TAIL("ncclReduce");
}
ncclResult_t ncclSend(const void* s, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  NOTE("ncclSend", FAKE_U(s), count, FAKE_U(dt), FAKE_U(peer), FAKE_U(comm), FAKE_U(stream));
  COLL_TAIL("ncclSend");
}
ncclResult_t ncclRecv(void* r, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  NOTE("ncclRecv", FAKE_U(r), count, FAKE_U(dt), FAKE_U(peer), FAKE_U(comm), FAKE_U(stream));
  COLL_TAIL("ncclRecv");
}

}  // extern "C"
