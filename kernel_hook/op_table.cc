// The table of timed operations (names, kinds) and the NCCL figures derived
// from it: bus-bandwidth factors and data type sizes.
#include "core_internal.h"

namespace xt {
namespace {

struct OpInfo {
  const char* name;
  uint8_t kind;
};
constexpr OpInfo kOps[XT_OP_COUNT_] = {
    {"cublasGemmEx", kKindGemm},
    {"cublasGemmStridedBatchedEx", kKindGemm},
    {"cublasSgemm", kKindGemm},
    {"cublasSgemmStridedBatched", kKindGemm},
    {"cublasHgemm", kKindGemm},
    {"cublasLtMatmul", kKindGemm},
    {"ncclAllReduce", kKindCollective},
    {"ncclAllGather", kKindCollective},
    {"ncclReduceScatter", kKindCollective},
    {"ncclBroadcast", kKindCollective},
    {"ncclReduce", kKindCollective},
    {"ncclSend", kKindP2P},
    {"ncclRecv", kKindP2P},
};

}  // namespace

const char* op_name(xt_op op) { return op < XT_OP_COUNT_ ? kOps[op].name : "unknown"; }
uint8_t op_kind(xt_op op) { return op < XT_OP_COUNT_ ? kOps[op].kind : 0; }

}  // namespace xt

using namespace xt;

extern "C" {

double xt_busbw_factor(xt_op op, int n) {
  if (n < 2) return 0.0;  // nothing crosses a bus: undefined, as in diag/common/busbw.py
  switch (op) {
    case XT_OP_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case XT_OP_ALL_GATHER:
    case XT_OP_REDUCE_SCATTER: return double(n - 1) / n;
    case XT_OP_BROADCAST:
    case XT_OP_REDUCE:
    case XT_OP_SEND:
    case XT_OP_RECV: return 1.0;
    default: return 0.0;
  }
}

size_t xt_nccl_type_size(int dtype) {
  // ncclInt8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64,
  // Bfloat16, Float8e4m3, Float8e5m2
  static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return dtype >= 0 && dtype < int(sizeof(sizes)) ? sizes[dtype] : 0;
}

const char* xt_op_name(xt_op op) { return op_name(op); }
}  // extern "C"
