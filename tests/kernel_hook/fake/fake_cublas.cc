// A fake libcublas.so.13 and libcublasLt.so.13 (built twice, from -DFAKE_LT):
// each GEMM records its arguments and queues one simulated kernel on the
// handle's stream, with the delay set for its api name.
#include <cstdlib>
#include <cstring>

#include "fake_api.h"
#include "static_driver.h"

namespace {
struct Handle {
  cudaStream_t stream = nullptr;
};
struct Layout {
  uint64_t rows, cols;
  int32_t batch = 1;
};
}  // namespace

extern "C" {

// One GEMM is one kernel, launched through the driver as cuBLAS does (the
// runtime linked in statically: static_driver.h), named for its api.
static void gemm_kernel(const char* api, cudaStream_t stream) {
  static CUfunc_st kernels[] = {
      FAKE_API_KERNEL(cublasGemmEx), FAKE_API_KERNEL(cublasGemmStridedBatchedEx),
      FAKE_API_KERNEL(cublasSgemm_v2), FAKE_API_KERNEL(cublasSgemmStridedBatched),
      FAKE_API_KERNEL(cublasHgemm), FAKE_API_KERNEL(cublasLtMatmul)};
  fake_static::api_kernel(kernels, api, stream, fake_static::launch);
}

#ifndef FAKE_LT
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new Handle());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  reinterpret_cast<Handle*>(h)->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t h, cudaStream_t* s) {
  *s = reinterpret_cast<Handle*>(h)->stream;
  return CUBLAS_STATUS_SUCCESS;
}

#define GEMM_TAIL(api)                                     \
  if (note_result) return note_result;                     \
  gemm_kernel(api, reinterpret_cast<Handle*>(h)->stream);  \
  return CUBLAS_STATUS_SUCCESS

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  NOTE("cublasGemmEx", FAKE_U(h), FAKE_U(ta), FAKE_U(tb), FAKE_U(m), FAKE_U(n), FAKE_U(k),
       FAKE_U(alpha), FAKE_U(A), FAKE_U(at), FAKE_U(lda), FAKE_U(B), FAKE_U(bt), FAKE_U(ldb),
       FAKE_U(beta), FAKE_U(C), FAKE_U(ct), FAKE_U(ldc), FAKE_U(compute), FAKE_U(algo));
  GEMM_TAIL("cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType at, int lda, long long sa, const void* B,
    cudaDataType bt, int ldb, long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  NOTE("cublasGemmStridedBatchedEx", FAKE_U(h), FAKE_U(ta), FAKE_U(tb), FAKE_U(m), FAKE_U(n),
       FAKE_U(k), FAKE_U(alpha), FAKE_U(A), FAKE_U(at), FAKE_U(lda), FAKE_U(sa), FAKE_U(B),
       FAKE_U(bt), FAKE_U(ldb), FAKE_U(sb), FAKE_U(beta), FAKE_U(C), FAKE_U(ct), FAKE_U(ldc),
       FAKE_U(sc), FAKE_U(batch), FAKE_U(compute), FAKE_U(algo));
  GEMM_TAIL("cublasGemmStridedBatchedEx");
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const float* alpha, const float* A, int lda,
                              const float* B, int ldb, const float* beta, float* C, int ldc) {
  NOTE("cublasSgemm_v2", FAKE_U(h), FAKE_U(ta), FAKE_U(tb), FAKE_U(m), FAKE_U(n), FAKE_U(k),
       FAKE_U(alpha), FAKE_U(A), FAKE_U(lda), FAKE_U(B), FAKE_U(ldb), FAKE_U(beta), FAKE_U(C),
       FAKE_U(ldc));
  GEMM_TAIL("cublasSgemm_v2");
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long sa, const float* B, int ldb, long long sb,
                                         const float* beta, float* C, int ldc, long long sc,
                                         int batch) {
  NOTE("cublasSgemmStridedBatched", FAKE_U(h), FAKE_U(ta), FAKE_U(tb), FAKE_U(m), FAKE_U(n),
       FAKE_U(k), FAKE_U(alpha), FAKE_U(A), FAKE_U(lda), FAKE_U(sa), FAKE_U(B), FAKE_U(ldb),
       FAKE_U(sb), FAKE_U(beta), FAKE_U(C), FAKE_U(ldc), FAKE_U(sc), FAKE_U(batch));
  GEMM_TAIL("cublasSgemmStridedBatched");
}

#ifndef FAKE_NO_HGEMM  // the variant that tests a missing forwarded symbol
cublasStatus_t cublasHgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const void* alpha, const void* A, int lda, const void* B,
                           int ldb, const void* beta, void* C, int ldc) {
  NOTE("cublasHgemm", FAKE_U(h), FAKE_U(ta), FAKE_U(tb), FAKE_U(m), FAKE_U(n), FAKE_U(k),
       FAKE_U(alpha), FAKE_U(A), FAKE_U(lda), FAKE_U(B), FAKE_U(ldb), FAKE_U(beta), FAKE_U(C),
       FAKE_U(ldc));
  GEMM_TAIL("cublasHgemm");
}
#endif

#else  // FAKE_LT: libcublasLt.so.13

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new Handle());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  (void)type;
  (void)ld;
  Layout* p = new Layout();
  p->rows = rows;
  p->cols = cols;
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int attr,
                                                const void* buf, size_t size) {
  if (attr != CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT || size != sizeof(int32_t)) return 7;
  memcpy(&reinterpret_cast<Layout*>(l)->batch, buf, sizeof(int32_t));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                size_t size, size_t* written) {
  Layout* p = reinterpret_cast<Layout*>(l);
  if ((attr == CUBLASLT_MATRIX_LAYOUT_ROWS || attr == CUBLASLT_MATRIX_LAYOUT_COLS) &&
      size == sizeof(uint64_t)) {
    uint64_t v = attr == CUBLASLT_MATRIX_LAYOUT_ROWS ? p->rows : p->cols;
    memcpy(buf, &v, sizeof(v));
  } else if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof(int32_t)) {
    memcpy(buf, &p->batch, sizeof(int32_t));
  } else {
    return 7;  // CUBLAS_STATUS_INVALID_VALUE
  }
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lh, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t ad, const void* B,
                              cublasLtMatrixLayout_t bd, const void* beta, const void* C,
                              cublasLtMatrixLayout_t cd, void* D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t* algo, void* ws, size_t ws_size,
                              cudaStream_t stream) {
  NOTE("cublasLtMatmul", FAKE_U(lh), FAKE_U(desc), FAKE_U(alpha), FAKE_U(A), FAKE_U(ad),
       FAKE_U(B), FAKE_U(bd), FAKE_U(beta), FAKE_U(C), FAKE_U(cd), FAKE_U(D), FAKE_U(dd),
       FAKE_U(algo), FAKE_U(ws), FAKE_U(ws_size), FAKE_U(stream));
  if (note_result) return note_result;
  gemm_kernel("cublasLtMatmul", stream);
  return CUBLAS_STATUS_SUCCESS;
}
#endif

}  // extern "C"
