// The exported NCCL shim: collectives and point-to-point calls are timed with
// their bytes, data type, communicator id and per-communicator sequence
// number; communicator creation gives the id that every member rank agrees on.
#include "hook_common.h"

using xt::Guard;

namespace {

XT_REAL(ncclAllReduce, XT_SONAME_NCCL);
XT_REAL(ncclAllGather, XT_SONAME_NCCL);
XT_REAL(ncclReduceScatter, XT_SONAME_NCCL);
XT_REAL(ncclBroadcast, XT_SONAME_NCCL);
XT_REAL(ncclReduce, XT_SONAME_NCCL);
XT_REAL(ncclSend, XT_SONAME_NCCL);
XT_REAL(ncclRecv, XT_SONAME_NCCL);
XT_REAL(ncclGroupStart, XT_SONAME_NCCL);
XT_REAL(ncclGroupEnd, XT_SONAME_NCCL);
XT_REAL(ncclCommInitRank, XT_SONAME_NCCL);
XT_REAL(ncclCommInitRankConfig, XT_SONAME_NCCL);
XT_REAL(ncclCommInitRankScalable, XT_SONAME_NCCL);
XT_REAL(ncclCommInitAll, XT_SONAME_NCCL);
XT_REAL(ncclCommSplit, XT_SONAME_NCCL);
XT_REAL(ncclCommDestroy, XT_SONAME_NCCL);
XT_REAL(ncclCommAbort, XT_SONAME_NCCL);
XT_REAL(ncclCommCount, XT_SONAME_NCCL);
XT_REAL(ncclCommUserRank, XT_SONAME_NCCL);

inline bool nccl_failed(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }

// (rank, size) from the public API; -1/0 while a non-blocking init runs.
void comm_shape(ncclComm_t comm, int* rank, int* size) {
  auto count = XT_GET(ncclCommCount);
  auto user_rank = XT_GET(ncclCommUserRank);
  if (!count || !user_rank || count(comm, size) != ncclSuccess ||
      user_rank(comm, rank) != ncclSuccess) {
    *rank = -1;
    *size = 0;
  }
}

// A comm created before the hook saw it (or by an API it does not hook) gets
// an id from its address: unique here, but not comparable across ranks.
void ensure_comm(ncclComm_t comm) {
  uint64_t id;
  int rank, size;
  if (xt_comm_info(comm, &id, &rank, &size)) {
    if (size > 0) return;
    comm_shape(comm, &rank, &size);
    if (size > 0) xt_comm_set_shape(comm, rank, size);
    return;
  }
  comm_shape(comm, &rank, &size);
  uintptr_t addr = reinterpret_cast<uintptr_t>(comm);
  xt_comm_register(comm, xt_comm_id_from_bytes(&addr, sizeof(addr), 0xADD2), rank, size);
}

void register_comm(ncclComm_t comm, uint64_t id, int rank, int size) {
  if (comm == nullptr || !xt_core_active()) return;
  if (size <= 0) comm_shape(comm, &rank, &size);
  xt_comm_register(comm, id, rank, size);
}

// The flops field of a collective/p2p record carries its reduce op and root or
// peer (docs/records.md): bits 0-7 op + 1, bits 32-63 root/peer + 1, 0 = none.
inline uint64_t coll_args(int redop, int peer) {
  return uint64_t(uint8_t(redop + 1)) | (uint64_t(uint32_t(peer + 1)) << 32);
}

xt_ticket coll_begin(xt_op op, size_t count, ncclDataType_t dt, bool times_nranks,
                     ncclComm_t comm, cudaStream_t stream, uint64_t args) {
  if (!xt::recording()) return -1;
  ensure_comm(comm);
  uint64_t id = 0;
  int rank = -1, size = 0;
  xt_comm_info(comm, &id, &rank, &size);
  xt_op_desc d;
  d.op = op;
  d.bytes = uint64_t(count) * xt_nccl_type_size(dt) * uint64_t(times_nranks && size > 0 ? size : 1);
  d.flops = args;
  d.dtype = dt;
  d.comm = comm;
  return xt_op_begin(&d, stream);
}

}  // namespace

#define XT_COLL_BODY(fn, op, args, count, dt, times_nranks, comm, stream, ...) \
  auto real = XT_GET(fn);                                                  \
  if (!real) return ncclSystemError;                                       \
  Guard g;                                                                 \
  xt_ticket t = g.outer ? coll_begin(op, count, dt, times_nranks, comm, stream, args) : -1; \
  ncclResult_t r = real(__VA_ARGS__);                                      \
  xt_op_end(t, nccl_failed(r));                                            \
  return r

// ---- collectives and point-to-point --------------------------------------------

XT_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream) {
  XT_COLL_BODY(ncclAllReduce, XT_OP_ALL_REDUCE, coll_args(op, -1), count, dt, false, comm, stream, sendbuff,
               recvbuff, count, dt, op, comm, stream);
}

// nccl-tests counts all-gather and reduce-scatter bytes as the full buffer.
XT_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                     ncclDataType_t dt, ncclComm_t comm, cudaStream_t stream) {
  XT_COLL_BODY(ncclAllGather, XT_OP_ALL_GATHER, coll_args(-1, -1), sendcount, dt, true, comm, stream, sendbuff,
               recvbuff, sendcount, dt, comm, stream);
}

XT_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  XT_COLL_BODY(ncclReduceScatter, XT_OP_REDUCE_SCATTER, coll_args(op, -1), recvcount, dt, true, comm, stream,
               sendbuff, recvbuff, recvcount, dt, op, comm, stream);
}

XT_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t dt, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  XT_COLL_BODY(ncclBroadcast, XT_OP_BROADCAST, coll_args(-1, root), count, dt, false, comm, stream, sendbuff,
               recvbuff, count, dt, root, comm, stream);
}

XT_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  XT_COLL_BODY(ncclReduce, XT_OP_REDUCE, coll_args(op, root), count, dt, false, comm, stream, sendbuff, recvbuff,
               count, dt, op, root, comm, stream);
}

XT_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t dt, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  XT_COLL_BODY(ncclSend, XT_OP_SEND, coll_args(-1, peer), count, dt, false, comm, stream, sendbuff, count, dt, peer,
               comm, stream);
}

XT_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t dt, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  XT_COLL_BODY(ncclRecv, XT_OP_RECV, coll_args(-1, peer), count, dt, false, comm, stream, recvbuff, count, dt, peer,
               comm, stream);
}

// Inside a group NCCL launches nothing until the outermost ncclGroupEnd, so
// the ops of a group get their events there.
XT_EXPORT ncclResult_t ncclGroupStart(void) {
  auto real = XT_GET(ncclGroupStart);
  if (!real) return ncclSystemError;
  Guard g;
  if (g.outer) {
    xt::hook_touch();
    xt_group_start();
  }
  return real();
}

XT_EXPORT ncclResult_t ncclGroupEnd(void) {
  auto real = XT_GET(ncclGroupEnd);
  if (!real) return ncclSystemError;
  Guard g;
  if (g.outer) xt_group_end_before();
  ncclResult_t r = real();
  if (g.outer) xt_group_end_after(nccl_failed(r));
  return r;
}

// ---- communicator creation and destruction --------------------------------------

XT_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  auto real = XT_GET(ncclCommInitRank);
  if (!real) return ncclSystemError;
  Guard g;
  ncclResult_t r = real(comm, nranks, id, rank);
  if (g.outer && !nccl_failed(r) && comm) {
    xt::hook_touch();
    register_comm(*comm, xt_comm_id_from_bytes(&id, sizeof(id), 0), rank, nranks);
  }
  return r;
}

XT_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                              int rank, ncclConfig_t* config) {
  auto real = XT_GET(ncclCommInitRankConfig);
  if (!real) return ncclSystemError;
  Guard g;
  ncclResult_t r = real(comm, nranks, id, rank, config);
  if (g.outer && !nccl_failed(r) && comm) {
    xt::hook_touch();
    register_comm(*comm, xt_comm_id_from_bytes(&id, sizeof(id), 0), rank, nranks);
  }
  return r;
}

XT_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank,
                                                int n_ids, ncclUniqueId* ids,
                                                ncclConfig_t* config) {
  auto real = XT_GET(ncclCommInitRankScalable);
  if (!real) return ncclSystemError;
  Guard g;
  ncclResult_t r = real(comm, nranks, myrank, n_ids, ids, config);
  if (g.outer && !nccl_failed(r) && comm && ids && n_ids > 0) {
    xt::hook_touch();
    register_comm(*comm, xt_comm_id_from_bytes(ids, sizeof(ncclUniqueId) * size_t(n_ids), 0),
                  myrank, nranks);
  }
  return r;
}

// One process, ndev communicators: the id only needs to be unique here.
XT_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  auto real = XT_GET(ncclCommInitAll);
  if (!real) return ncclSystemError;
  Guard g;
  ncclResult_t r = real(comms, ndev, devlist);
  if (g.outer && !nccl_failed(r) && comms && ndev > 0) {
    xt::hook_touch();
    static std::atomic<uint64_t> calls{0};
    uint64_t salt = 0xA11 + calls.fetch_add(1);
    uintptr_t first = reinterpret_cast<uintptr_t>(comms[0]);
    uint64_t id = xt_comm_id_from_bytes(&first, sizeof(first), salt);
    for (int i = 0; i < ndev; ++i) register_comm(comms[i], id, i, ndev);
  }
  return r;
}

// Every member of the parent calls split, in the same order, even those that
// pass NCCL_SPLIT_NOCOLOR: so (parent id, color, split index) agrees on all.
XT_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                     ncclConfig_t* config) {
  auto real = XT_GET(ncclCommSplit);
  if (!real) return ncclSystemError;
  Guard g;
  uint64_t id = 0;
  if (g.outer) {
    xt::hook_touch();
    if (xt_core_active()) {
      ensure_comm(comm);
      id = xt_comm_split_id(comm, color, key);
    }
  }
  ncclResult_t r = real(comm, color, key, newcomm, config);
  if (id && !nccl_failed(r) && newcomm && color != XT_NCCL_SPLIT_NOCOLOR)
    register_comm(*newcomm, id, -1, 0);
  return r;
}

// Destroy and abort alike: the core forgets the communicator before NCCL frees
// it, as one created later may get its address.
#define XT_COMM_END(fn)                         \
  XT_EXPORT ncclResult_t fn(ncclComm_t comm) {  \
    auto real = XT_GET(fn);                     \
    if (!real) return ncclSystemError;          \
    Guard g;                                    \
    if (g.outer) xt_comm_forget(comm);          \
    return real(comm);                          \
  }

XT_COMM_END(ncclCommDestroy)
XT_COMM_END(ncclCommAbort)
