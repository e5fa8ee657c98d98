// The exported shim: every interposed symbol, and nothing else (hook.map).
//
// Each one calls the real function with its arguments untouched and returns
// its result untouched; the core only observes. A thread_local depth guard
// makes calls nested inside a hooked call (cuBLAS calling cuBLASLt, say) pass
// straight through. When a real symbol cannot be found, the call fails with
// the library's own "not initialised" error and the name is said once.
#include "hook_common.h"

using xt::Guard;
using xt::LaunchGuard;

namespace {

enum { kCudaSymbolMissing = 302 };  // cudaErrorSharedObjectSymbolNotFound

XT_REAL(cudaLaunchKernel, XT_SONAME_CUDART);
XT_REAL(cudaLaunchKernel_ptsz, XT_SONAME_CUDART);
XT_REAL(__cudaLaunchKernel, XT_SONAME_CUDART);
XT_REAL(__cudaLaunchKernel_ptsz, XT_SONAME_CUDART);
XT_REAL(cudaLaunchKernelExC, XT_SONAME_CUDART);
XT_REAL(cudaLaunchKernelExC_ptsz, XT_SONAME_CUDART);
XT_REAL(cudaStreamBeginCapture, XT_SONAME_CUDART);
XT_REAL(cudaStreamBeginCapture_ptsz, XT_SONAME_CUDART);
XT_REAL(cudaStreamBeginCaptureToGraph, XT_SONAME_CUDART);
XT_REAL(cudaStreamBeginCaptureToGraph_ptsz, XT_SONAME_CUDART);
XT_REAL(cudaStreamEndCapture, XT_SONAME_CUDART);
XT_REAL(cudaStreamEndCapture_ptsz, XT_SONAME_CUDART);
XT_REAL(cudaStreamIsCapturing, XT_SONAME_CUDART);
XT_REAL(cudaStreamDestroy, XT_SONAME_CUDART);
XT_REAL(cudaDeviceReset, XT_SONAME_CUDART);
XT_REAL(cudaSetDevice, XT_SONAME_CUDART);
XT_REAL(cublasGetStream_v2, XT_SONAME_CUBLAS);
XT_REAL(cublasGemmEx, XT_SONAME_CUBLAS);
XT_REAL(cublasGemmStridedBatchedEx, XT_SONAME_CUBLAS);
XT_REAL(cublasSgemm_v2, XT_SONAME_CUBLAS);
XT_REAL(cublasSgemmStridedBatched, XT_SONAME_CUBLAS);
XT_REAL(cublasHgemm, XT_SONAME_CUBLAS);
XT_REAL(cublasLtMatmul, XT_SONAME_CUBLASLT);
XT_REAL(cublasLtMatrixLayoutGetAttribute, XT_SONAME_CUBLASLT);

// Announced before the real call (see core.h): the drainer must not record a
// fence on the stream once the capture may have begun.
template <class F, class... A>
cudaError_t begin_capture(F real, A... args) {
  xt_capture_begin();
  cudaError_t r = real(args...);
  if (r != cudaSuccess) xt_capture_end();
  return r;
}

// Whether EndCapture will end a capture (active or invalidated) on stream.
bool stream_was_capturing(cudaStream_t stream) {
  auto query = XT_GET(cudaStreamIsCapturing);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return query && query(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}


xt_ticket gemm_begin(xt_op op, uint64_t m, uint64_t n, uint64_t k, uint64_t batch,
                     cudaStream_t stream) {
  xt_op_desc d;
  d.op = op;
  d.bytes = 0;
  d.flops = 2 * m * n * k * (batch ? batch : 1);
  d.dtype = -1;
  d.comm = nullptr;
  return xt_op_begin(&d, stream);
}

xt_ticket blas_begin(xt_op op, cublasHandle_t h, int m, int n, int k, int batch) {
  if (!xt::recording()) return -1;
  auto get_stream = XT_GET(cublasGetStream_v2);
  cudaStream_t stream = nullptr;
  if (!get_stream || get_stream(h, &stream) != CUBLAS_STATUS_SUCCESS) return -1;
  return gemm_begin(op, uint64_t(m > 0 ? m : 0), uint64_t(n > 0 ? n : 0),
                    uint64_t(k > 0 ? k : 0), uint64_t(batch > 0 ? batch : 0), stream);
}

uint64_t lt_attr_u64(cublasLtMatrixLayout_t l, int attr, uint64_t def) {
  auto get = XT_GET(cublasLtMatrixLayoutGetAttribute);
  uint64_t v = 0;
  size_t written = 0;
  if (!get || !l || get(l, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return def;
  return v;
}

// D is m x n; A is m x k, or k x m when transposed: k is A's other dimension.
xt_ticket lt_begin(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t dd, cudaStream_t stream) {
  if (!xt::recording()) return -1;
  uint64_t m = lt_attr_u64(dd, CUBLASLT_MATRIX_LAYOUT_ROWS, 0);
  uint64_t n = lt_attr_u64(dd, CUBLASLT_MATRIX_LAYOUT_COLS, 0);
  uint64_t ar = lt_attr_u64(a, CUBLASLT_MATRIX_LAYOUT_ROWS, 0);
  uint64_t ac = lt_attr_u64(a, CUBLASLT_MATRIX_LAYOUT_COLS, 0);
  int32_t batch = 1;
  auto get = XT_GET(cublasLtMatrixLayoutGetAttribute);
  size_t written = 0;
  if (!get || get(dd, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch), &written) != 0)
    batch = 1;
  return gemm_begin(XT_OP_LT_MATMUL, m, n, ar == m ? ac : ar, uint64_t(batch > 0 ? batch : 1),
                    stream);
}

}  // namespace

// ---- CUDA runtime launches: counted per kernel -------------------------------
// The kernel key is the host stub (cudaLaunchKernel*) or the kernel handle
// (__cudaLaunchKernel*, what nvcc >= 13 emits for <<<>>>): one per kernel.
// The driver's launches (cuBLAS, NCCL, Triton) are counted in hook_driver.cc.

#define XT_LAUNCH(fn, func_t, kind, ptsz)                                                  \
  XT_EXPORT cudaError_t fn(func_t func, dim3 grid, dim3 block, void** args, size_t shmem,   \
                           cudaStream_t stream) {                                         \
    auto real = XT_GET(fn);                                                                \
    if (!real) return kCudaSymbolMissing;                                                  \
    LaunchGuard g;                                                                         \
    cudaError_t r = real(func, grid, block, args, shmem, stream);                          \
    if (g.outer && r == cudaSuccess)                                                       \
      xt::count_launch(func, kind, xt::launch_stream(stream, ptsz));                       \
    return r;                                                                              \
  }

#define XT_LAUNCH_EX(fn)                                                                  \
  XT_EXPORT cudaError_t fn(const cudaLaunchConfig_t* config, const void* func, void** args) { \
    auto real = XT_GET(fn);                                                                 \
    if (!real) return kCudaSymbolMissing;                                                   \
    LaunchGuard g;                                                                          \
    cudaError_t r = real(config, func, args);                                               \
    if (g.outer && r == cudaSuccess) xt::count_launch(func, XT_KERNEL_STUB, XT_NO_STREAM);  \
    return r;                                                                               \
  }

XT_LAUNCH(cudaLaunchKernel, const void*, XT_KERNEL_STUB, false)
XT_LAUNCH(cudaLaunchKernel_ptsz, const void*, XT_KERNEL_STUB, true)
XT_LAUNCH(__cudaLaunchKernel, cudaKernel_t, XT_KERNEL_HANDLE, false)
XT_LAUNCH(__cudaLaunchKernel_ptsz, cudaKernel_t, XT_KERNEL_HANDLE, true)
XT_LAUNCH_EX(cudaLaunchKernelExC)
XT_LAUNCH_EX(cudaLaunchKernelExC_ptsz)

// ---- stream capture: only to know whether one is under way -------------------

XT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode_t mode) {
  auto real = XT_GET(cudaStreamBeginCapture);
  if (!real) return kCudaSymbolMissing;
  return begin_capture(real, stream, mode);
}

XT_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                  cudaStreamCaptureMode_t mode) {
  auto real = XT_GET(cudaStreamBeginCapture_ptsz);
  if (!real) return kCudaSymbolMissing;
  return begin_capture(real, stream, mode);
}

XT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                    const cudaGraphNode_t* deps,
                                                    const cudaGraphEdgeData* edges, size_t n,
                                                    cudaStreamCaptureMode_t mode) {
  auto real = XT_GET(cudaStreamBeginCaptureToGraph);
  if (!real) return kCudaSymbolMissing;
  return begin_capture(real, stream, graph, deps, edges, n, mode);
}

XT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                                         const cudaGraphNode_t* deps,
                                                         const cudaGraphEdgeData* edges,
                                                         size_t n, cudaStreamCaptureMode_t mode) {
  auto real = XT_GET(cudaStreamBeginCaptureToGraph_ptsz);
  if (!real) return kCudaSymbolMissing;
  return begin_capture(real, stream, graph, deps, edges, n, mode);
}

// Both forms: the count of captures under way (xt_capture_begin) drops only
// when the call ends one: an EndCapture on a stream not capturing began none.
#define XT_END_CAPTURE(fn)                                                  \
  XT_EXPORT cudaError_t fn(cudaStream_t stream, cudaGraph_t* graph) {       \
    auto real = XT_GET(fn);                                                 \
    if (!real) return kCudaSymbolMissing;                                   \
    bool was = stream_was_capturing(stream);                                \
    cudaError_t r = real(stream, graph);                                    \
    if (was) xt_capture_end();                                              \
    return r;                                                               \
  }

XT_END_CAPTURE(cudaStreamEndCapture)
XT_END_CAPTURE(cudaStreamEndCapture_ptsz)

// ---- stream and device teardown: no fence may land on a freed stream --------

XT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto real = XT_GET(cudaStreamDestroy);
  if (!real) return kCudaSymbolMissing;
  // The legacy default stream cannot be destroyed; a NULL here would mean all.
  if (stream) xt_streams_destroying(stream);
  return real(stream);
}

XT_EXPORT cudaError_t cudaDeviceReset(void) {
  auto real = XT_GET(cudaDeviceReset);
  if (!real) return kCudaSymbolMissing;
  xt_streams_destroying(nullptr);
  return real();
}

// ---- the thread's device: launches name it (DEVICE records, devices.cc) ----

XT_EXPORT cudaError_t cudaSetDevice(int device) {
  auto real = XT_GET(cudaSetDevice);
  if (!real) return kCudaSymbolMissing;
  cudaError_t r = real(device);
  if (r == cudaSuccess) xt_device_set(device);
  return r;
}

// ---- cuBLAS / cuBLASLt GEMMs: timed, with FLOPs -------------------------------

// begin is evaluated only on the outermost hooked call (cuBLAS calls cuBLASLt).
#define XT_BLAS_BODY(fn, begin, ...)                 \
  auto real = XT_GET(fn);                            \
  if (!real) return CUBLAS_STATUS_NOT_INITIALIZED;   \
  Guard g;                                           \
  xt_ticket t = g.outer ? (begin) : -1;              \
  cublasStatus_t r = real(__VA_ARGS__);              \
  xt_op_end(t, r != CUBLAS_STATUS_SUCCESS);          \
  return r

XT_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                                      cublasOperation_t tb, int m, int n, int k,
                                      const void* alpha, const void* A, cudaDataType at, int lda,
                                      const void* B, cudaDataType bt, int ldb, const void* beta,
                                      void* C, cudaDataType ct, int ldc,
                                      cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  XT_BLAS_BODY(cublasGemmEx, blas_begin(XT_OP_GEMM_EX, h, m, n, k, 1),
               h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute,
               algo);
}

XT_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType at, int lda, long long sa, const void* B,
    cudaDataType bt, int ldb, long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  XT_BLAS_BODY(cublasGemmStridedBatchedEx,
               blas_begin(XT_OP_GEMM_STRIDED_BATCHED_EX, h, m, n, k, batch),
               h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc,
               batch, compute, algo);
}

XT_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta,
                                        cublasOperation_t tb, int m, int n, int k,
                                        const float* alpha, const float* A, int lda,
                                        const float* B, int ldb, const float* beta, float* C,
                                        int ldc) {
  XT_BLAS_BODY(cublasSgemm_v2, blas_begin(XT_OP_SGEMM, h, m, n, k, 1),
               h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

XT_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                                   cublasOperation_t tb, int m, int n, int k,
                                                   const float* alpha, const float* A, int lda,
                                                   long long sa, const float* B, int ldb,
                                                   long long sb, const float* beta, float* C,
                                                   int ldc, long long sc, int batch) {
  XT_BLAS_BODY(cublasSgemmStridedBatched,
               blas_begin(XT_OP_SGEMM_STRIDED_BATCHED, h, m, n, k, batch),
               h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

XT_EXPORT cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta,
                                     cublasOperation_t tb, int m, int n, int k, const void* alpha,
                                     const void* A, int lda, const void* B, int ldb,
                                     const void* beta, void* C, int ldc) {
  XT_BLAS_BODY(cublasHgemm, blas_begin(XT_OP_HGEMM, h, m, n, k, 1),
               h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

XT_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t lh, cublasLtMatmulDesc_t desc,
                                        const void* alpha, const void* A,
                                        cublasLtMatrixLayout_t ad, const void* B,
                                        cublasLtMatrixLayout_t bd, const void* beta,
                                        const void* C, cublasLtMatrixLayout_t cd, void* D,
                                        cublasLtMatrixLayout_t dd,
                                        const cublasLtMatmulAlgo_t* algo, void* ws,
                                        size_t ws_size, cudaStream_t stream) {
  XT_BLAS_BODY(cublasLtMatmul, lt_begin(ad, dd, stream),
               lh, desc, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, ws_size, stream);
}

