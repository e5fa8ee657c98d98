// One snippet per hooked API: call it with distinctive arguments while the
// fake is set to return a distinctive result, then check that the fake got
// exactly those arguments and the caller got exactly that result.
// Built twice: into hookprog, and (-DSNIPPETS_CTOR) into a library whose
// constructor runs them before main, before the hook has set itself up.
#include <cstring>
#include <unistd.h>

#include "progs.h"

namespace {

const int kResult = 42;
int g_failures = 0;

#define P(n) reinterpret_cast<void*>(uintptr_t(0x1000 * (n)))
#define FP(n) reinterpret_cast<float*>(uintptr_t(0x1000 * (n)))

void check(const char* api, int got, const uint64_t* want, int n) {
  const FakeCall* c = fake_last_call();
  bool ok = got == kResult && strcmp(c->api, api) == 0 && c->nargs == n;
  for (int i = 0; ok && i < n; ++i) ok = c->args[i] == want[i];
  printf("%s %s\n", ok ? "ok" : "FAIL", api);
  if (!ok) {
    fprintf(stderr, "FAIL %s: result %d (want %d), fake saw %s with %d args\n", api, got, kResult,
            c->api, c->nargs);
    ++g_failures;
  }
}

#define SNIP(api, call, ...)                                        \
  do {                                                              \
    fake_set_next_result(kResult);                                  \
    int got = int(call);                                            \
    const uint64_t want[] = {__VA_ARGS__};                          \
    check(api, got, want, int(sizeof(want) / sizeof(want[0])));     \
  } while (0)

void cuda_snippets(cudaStream_t s) {
  dim3 g{3, 5, 7}, b{11, 13, 17};
  SNIP("cudaLaunchKernel", cudaLaunchKernel(P(1), g, b, (void**)P(2), 99, s), FAKE_U(P(1)), 3, 5,
       7, 11, 13, 17, FAKE_U(P(2)), 99, FAKE_U(s));
  SNIP("cudaLaunchKernel_ptsz", cudaLaunchKernel_ptsz(P(1), g, b, (void**)P(2), 98, s),
       FAKE_U(P(1)), 3, 5, 7, 11, 13, 17, FAKE_U(P(2)), 98, FAKE_U(s));
  auto k = reinterpret_cast<cudaKernel_t>(P(5));
  SNIP("__cudaLaunchKernel", __cudaLaunchKernel(k, g, b, (void**)P(2), 97, s), FAKE_U(k), 3, 5,
       7, 11, 13, 17, FAKE_U(P(2)), 97, FAKE_U(s));
  SNIP("__cudaLaunchKernel_ptsz", __cudaLaunchKernel_ptsz(k, g, b, (void**)P(2), 96, s),
       FAKE_U(k), 3, 5, 7, 11, 13, 17, FAKE_U(P(2)), 96, FAKE_U(s));
  cudaLaunchConfig_t cfg{g, b, 0, s, nullptr, 0};
  SNIP("cudaLaunchKernelExC", cudaLaunchKernelExC(&cfg, P(3), (void**)P(4)), FAKE_U(&cfg),
       FAKE_U(P(3)), FAKE_U(P(4)));
  SNIP("cudaLaunchKernelExC_ptsz", cudaLaunchKernelExC_ptsz(&cfg, P(3), (void**)P(4)),
       FAKE_U(&cfg), FAKE_U(P(3)), FAKE_U(P(4)));
}

void driver_snippets(cudaStream_t s) {
  auto f = reinterpret_cast<CUfunction>(P(1));
  auto pp = reinterpret_cast<void**>(P(2));
  auto ex = reinterpret_cast<void**>(P(3));
  SNIP("cuLaunchKernel", cuLaunchKernel(f, 3, 5, 7, 11, 13, 17, 99, s, pp, ex), FAKE_U(f), 3, 5,
       7, 11, 13, 17, 99, FAKE_U(s), FAKE_U(pp), FAKE_U(ex));
  SNIP("cuLaunchKernel_ptsz", cuLaunchKernel_ptsz(f, 3, 5, 7, 11, 13, 17, 98, s, pp, ex),
       FAKE_U(f), 3, 5, 7, 11, 13, 17, 98, FAKE_U(s), FAKE_U(pp), FAKE_U(ex));
  auto cfg = reinterpret_cast<const CUlaunchConfig*>(P(4));
  SNIP("cuLaunchKernelEx", cuLaunchKernelEx(cfg, f, pp, ex), FAKE_U(cfg), FAKE_U(f), FAKE_U(pp),
       FAKE_U(ex));
  SNIP("cuLaunchKernelEx_ptsz", cuLaunchKernelEx_ptsz(cfg, f, pp, ex), FAKE_U(cfg), FAKE_U(f),
       FAKE_U(pp), FAKE_U(ex));
  SNIP("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel(f, 3, 5, 7, 11, 13, 17, 97, s, pp),
       FAKE_U(f), 3, 5, 7, 11, 13, 17, 97, FAKE_U(s), FAKE_U(pp));
  SNIP("cuLaunchCooperativeKernel_ptsz",
       cuLaunchCooperativeKernel_ptsz(f, 3, 5, 7, 11, 13, 17, 96, s, pp), FAKE_U(f), 3, 5, 7, 11,
       13, 17, 96, FAKE_U(s), FAKE_U(pp));
  const char* sym = "cuLaunchKernel";
  void* out = nullptr;
  int* st = reinterpret_cast<int*>(P(5));
  SNIP("cuGetProcAddress", cuGetProcAddress(sym, &out, 11080, 2), FAKE_U(sym), FAKE_U(&out),
       11080, 2);
  SNIP("cuGetProcAddress_v2", cuGetProcAddress_v2(sym, &out, 12040, 1, st), FAKE_U(sym),
       FAKE_U(&out), 12040, 1, FAKE_U(st));
  SNIP("cuGetProcAddress_v2_ptsz", cuGetProcAddress_v2_ptsz(sym, &out, 13000, 0, st), FAKE_U(sym),
       FAKE_U(&out), 13000, 0, FAKE_U(st));
  SNIP("cudaGetDriverEntryPoint", cudaGetDriverEntryPoint(sym, &out, 1, st), FAKE_U(sym),
       FAKE_U(&out), 1, FAKE_U(st));
  SNIP("cudaGetDriverEntryPoint_ptsz", cudaGetDriverEntryPoint_ptsz(sym, &out, 0, st),
       FAKE_U(sym), FAKE_U(&out), 0, FAKE_U(st));
  SNIP("cudaGetDriverEntryPointByVersion",
       cudaGetDriverEntryPointByVersion(sym, &out, 12080, 2, st), FAKE_U(sym), FAKE_U(&out),
       12080, 2, FAKE_U(st));
}

// Every capture call fails here (the set result), so no capture is left open.
void capture_snippets(cudaStream_t s) {
  auto gr = reinterpret_cast<cudaGraph_t>(P(6));
  auto deps = reinterpret_cast<const cudaGraphNode_t*>(P(7));
  auto edges = reinterpret_cast<const cudaGraphEdgeData*>(P(8));
  cudaGraph_t out = nullptr;
  SNIP("cudaStreamBeginCapture", cudaStreamBeginCapture(s, 2), FAKE_U(s), 2);
  SNIP("cudaStreamBeginCapture_ptsz", cudaStreamBeginCapture_ptsz(s, 1), FAKE_U(s), 1);
  SNIP("cudaStreamBeginCaptureToGraph", cudaStreamBeginCaptureToGraph(s, gr, deps, edges, 3, 1),
       FAKE_U(s), FAKE_U(gr), FAKE_U(deps), FAKE_U(edges), 3, 1);
  SNIP("cudaStreamBeginCaptureToGraph_ptsz",
       cudaStreamBeginCaptureToGraph_ptsz(s, gr, deps, edges, 4, 0), FAKE_U(s), FAKE_U(gr),
       FAKE_U(deps), FAKE_U(edges), 4, 0);
  SNIP("cudaStreamEndCapture", cudaStreamEndCapture(s, &out), FAKE_U(s), FAKE_U(&out));
  SNIP("cudaStreamEndCapture_ptsz", cudaStreamEndCapture_ptsz(s, &out), FAKE_U(s), FAKE_U(&out));
  // These fail too (the set result), so the stream lives on for the rest.
  SNIP("cudaStreamDestroy", cudaStreamDestroy(s), FAKE_U(s));
  SNIP("cudaDeviceReset", cudaDeviceReset(), 0);
  SNIP("cudaSetDevice", cudaSetDevice(77), 77);
}

void blas_snippets(cublasHandle_t h) {
  SNIP("cublasGemmEx",
       cublasGemmEx(h, 1, 0, 64, 32, 16, P(1), P(2), 14, 65, P(3), 2, 17, P(4), P(5), 0, 66, 68, 99),
       FAKE_U(h), 1, 0, 64, 32, 16, FAKE_U(P(1)), FAKE_U(P(2)), 14, 65, FAKE_U(P(3)), 2, 17,
       FAKE_U(P(4)), FAKE_U(P(5)), 0, 66, 68, 99);
  SNIP("cublasGemmStridedBatchedEx",
       cublasGemmStridedBatchedEx(h, 0, 1, 8, 9, 10, P(1), P(2), 14, 11, 1LL << 33, P(3), 2, 12,
                                  77, P(4), P(5), 0, 13, 78, 5, 68, 99),
       FAKE_U(h), 0, 1, 8, 9, 10, FAKE_U(P(1)), FAKE_U(P(2)), 14, 11, 1ull << 33, FAKE_U(P(3)), 2,
       12, 77, FAKE_U(P(4)), FAKE_U(P(5)), 0, 13, 78, 5, 68, 99);
  SNIP("cublasSgemm_v2",
       cublasSgemm_v2(h, 1, 1, 4, 5, 6, FP(1), FP(2), 7, FP(3), 8, FP(4), FP(5), 9), FAKE_U(h),
       1, 1, 4, 5, 6, FAKE_U(P(1)), FAKE_U(P(2)), 7, FAKE_U(P(3)), 8, FAKE_U(P(4)),
       FAKE_U(P(5)), 9);
  SNIP("cublasSgemmStridedBatched",
       cublasSgemmStridedBatched(h, 0, 0, 4, 5, 6, FP(1), FP(2), 7, 70, FP(3), 8, 80, FP(4),
                                 FP(5), 9, 90, 3),
       FAKE_U(h), 0, 0, 4, 5, 6, FAKE_U(P(1)), FAKE_U(P(2)), 7, 70, FAKE_U(P(3)), 8, 80,
       FAKE_U(P(4)), FAKE_U(P(5)), 9, 90, 3);
  SNIP("cublasHgemm", cublasHgemm(h, 0, 1, 2, 3, 4, P(1), P(2), 5, P(3), 6, P(4), P(5), 7),
       FAKE_U(h), 0, 1, 2, 3, 4, FAKE_U(P(1)), FAKE_U(P(2)), 5, FAKE_U(P(3)), 6, FAKE_U(P(4)),
       FAKE_U(P(5)), 7);
}

void lt_snippet(cudaStream_t s) {
  cublasLtHandle_t lh;
  cublasLtMatrixLayout_t a, b, c, d;
  cublasLtCreate(&lh);
  cublasLtMatrixLayoutCreate(&a, 0, 64, 16, 64);
  cublasLtMatrixLayoutCreate(&b, 0, 16, 32, 16);
  cublasLtMatrixLayoutCreate(&c, 0, 64, 32, 64);
  cublasLtMatrixLayoutCreate(&d, 0, 64, 32, 64);
  auto desc = reinterpret_cast<cublasLtMatmulDesc_t>(P(9));
  auto algo = reinterpret_cast<const cublasLtMatmulAlgo_t*>(P(8));
  SNIP("cublasLtMatmul",
       cublasLtMatmul(lh, desc, P(1), P(2), a, P(3), b, P(4), P(5), c, P(6), d, algo, P(7), 4096,
                      s),
       FAKE_U(lh), FAKE_U(desc), FAKE_U(P(1)), FAKE_U(P(2)), FAKE_U(a), FAKE_U(P(3)), FAKE_U(b),
       FAKE_U(P(4)), FAKE_U(P(5)), FAKE_U(c), FAKE_U(P(6)), FAKE_U(d), FAKE_U(algo),
       FAKE_U(P(7)), 4096, FAKE_U(s));
}

void nccl_coll_snippets(ncclComm_t c, cudaStream_t s) {
  SNIP("ncclAllReduce", ncclAllReduce(P(1), P(2), 1000, 7, 2, c, s), FAKE_U(P(1)), FAKE_U(P(2)),
       1000, 7, 2, FAKE_U(c), FAKE_U(s));
  SNIP("ncclAllGather", ncclAllGather(P(1), P(2), 1001, 9, c, s), FAKE_U(P(1)), FAKE_U(P(2)),
       1001, 9, FAKE_U(c), FAKE_U(s));
  SNIP("ncclReduceScatter", ncclReduceScatter(P(1), P(2), 1002, 6, 1, c, s), FAKE_U(P(1)),
       FAKE_U(P(2)), 1002, 6, 1, FAKE_U(c), FAKE_U(s));
  SNIP("ncclBroadcast", ncclBroadcast(P(1), P(2), 1003, 4, 1, c, s), FAKE_U(P(1)), FAKE_U(P(2)),
       1003, 4, 1, FAKE_U(c), FAKE_U(s));
  SNIP("ncclReduce", ncclReduce(P(1), P(2), 1004, 2, 3, 1, c, s), FAKE_U(P(1)), FAKE_U(P(2)),
       1004, 2, 3, 1, FAKE_U(c), FAKE_U(s));
  SNIP("ncclSend", ncclSend(P(1), 1005, 0, 1, c, s), FAKE_U(P(1)), 1005, 0, 1, FAKE_U(c),
       FAKE_U(s));
  SNIP("ncclRecv", ncclRecv(P(2), 1006, 1, 0, c, s), FAKE_U(P(2)), 1006, 1, 0, FAKE_U(c),
       FAKE_U(s));
  SNIP("ncclGroupStart", ncclGroupStart(), 0);
  SNIP("ncclGroupEnd", ncclGroupEnd(), 0);
}

void nccl_comm_snippets(ncclComm_t c) {
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, "\x11\x22\x33\x44\x55\x66\x77\x08", 8);
  ncclComm_t out = nullptr;
  const uint64_t first8 = 0x0877665544332211ull;
  SNIP("ncclCommInitRank", ncclCommInitRank(&out, 4, id, 2), FAKE_U(&out), 4, first8, 2);
  SNIP("ncclCommInitRankConfig", ncclCommInitRankConfig(&out, 4, id, 3, (ncclConfig_t*)P(1)),
       FAKE_U(&out), 4, first8, 3, FAKE_U(P(1)));
  SNIP("ncclCommInitRankScalable",
       ncclCommInitRankScalable(&out, 8, 5, 1, &id, (ncclConfig_t*)P(2)), FAKE_U(&out), 8, 5, 1,
       FAKE_U(&id), FAKE_U(P(2)));
  ncclComm_t all[2];
  int devs[2] = {0, 1};
  SNIP("ncclCommInitAll", ncclCommInitAll(all, 2, devs), FAKE_U(all), 2, FAKE_U(devs));
  SNIP("ncclCommSplit", ncclCommSplit(c, 3, 4, &out, (ncclConfig_t*)P(3)), FAKE_U(c), 3, 4,
       FAKE_U(&out), FAKE_U(P(3)));
  SNIP("ncclCommDestroy", ncclCommDestroy(c), FAKE_U(c));
  SNIP("ncclCommAbort", ncclCommAbort(c), FAKE_U(c));
}

}  // namespace

int run_snippets(void) {
  cudaStream_t s;
  cudaStreamCreate(&s);
  cublasHandle_t h = blas_on(s);
  ncclComm_t comm = comm_as_rank0(2);
  cuda_snippets(s);
  driver_snippets(s);
  capture_snippets(s);
  blas_snippets(h);
  lt_snippet(s);
  nccl_coll_snippets(comm, s);
  nccl_comm_snippets(comm);
  fflush(stdout);
  return g_failures;
}

#ifdef SNIPPETS_CTOR
__attribute__((constructor)) static void snippets_from_ctor() {
  if (getenv("SNIPPETS_IN_CTOR") && run_snippets() != 0) _exit(3);
}
#endif
