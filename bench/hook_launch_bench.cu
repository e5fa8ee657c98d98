// Per-call cost of the hook on a real GPU: hook_launch_bench MODE N
//   launch: N empty-kernel launches (<<<>>> -> cudaLaunchKernel, counted by the hook)
//   driver: N launches of it through the driver's cuLaunchKernel, as cuBLAS and
//           NCCL launch (the entry point from cudaGetDriverEntryPointByVersion:
//           the hook's wrapper when preloaded, counted)
//   gemm:   N 8x8 cublasSgemm calls (timed by the hook)
//   nccl:   N one-float ncclAllReduce calls on a one-GPU communicator (timed)
//   prims:  the runtime calls the hook makes per timed op, N of each, alone
//   launch-paired / gemm-paired / nccl-paired: N calls of each kind in one process, in
//           alternating blocks of 1024: through the exported symbol (the hook,
//           when preloaded) and through the library's own symbol (dlsym on its
//           handle: never the hook). Prints the median per-call ns of both and
//           of their per-block difference: the hook's cost, free of the
//           run-to-run spread between processes. With HOOK_BENCH_BYPASS=1 the
//           hook is bypassed (xpu_timer_hook_bypass) after the warm-up: what is
//           left is its bare forwarding cost.
// Prints "MODE ns_per_call X". Built with -cudart shared, so the launches go
// through libcudart.so's exported symbols, as torch's do. The stream is
// synchronised every 1024 calls so the GPU never throttles the host loop.
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <ctime>

extern "C" {
typedef struct cublasContext* cublasHandle_t;
int cublasCreate_v2(cublasHandle_t* h);
int cublasSetStream_v2(cublasHandle_t h, cudaStream_t s);
int cublasSgemm_v2(cublasHandle_t h, int ta, int tb, int m, int n, int k, const float* alpha,
                   const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                   int ldc);
typedef struct ncclComm* ncclComm_t;
int ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
int ncclAllReduce(const void* s, void* r, size_t count, int dtype, int op, ncclComm_t comm,
                  cudaStream_t stream);
}

__global__ void empty_kernel() {}

template <class F>
static double ns_per(long n, F f) {
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) f(i);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / double(n);
}

// The runtime calls the hook makes per timed op, each alone (no hook loaded).
static int prims(long n, cudaStream_t s) {
  cudaEvent_t evs[2048];
  for (auto& e : evs) cudaEventCreateWithFlags(&e, cudaEventDefault);
  int dev = 0;
  cudaStreamCaptureStatus st;
  timespec ts;
  auto sync_every = [&](long i) { if ((i & 1023) == 1023) cudaStreamSynchronize(s); };
  printf("prim_event_record ns_per_call %.1f\n",
         ns_per(n, [&](long i) { cudaEventRecord(evs[i & 2047], s); sync_every(i); }));
  cudaEvent_t untimed[2048];
  for (auto& e : untimed) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  printf("prim_event_record_untimed ns_per_call %.1f\n",
         ns_per(n, [&](long i) { cudaEventRecord(untimed[i & 2047], s); sync_every(i); }));
  printf("prim_stream_is_capturing ns_per_call %.1f\n",
         ns_per(n, [&](long) { cudaStreamIsCapturing(s, &st); }));
  printf("prim_get_device ns_per_call %.1f\n", ns_per(n, [&](long) { cudaGetDevice(&dev); }));
  printf("prim_clock_gettime ns_per_call %.1f\n",
         ns_per(n, [&](long) { clock_gettime(CLOCK_MONOTONIC, &ts); }));
  printf("prim_event_query ns_per_call %.1f\n",
         ns_per(n, [&](long i) { cudaEventQuery(evs[i & 2047]); }));
  // The driver's event record, on the runtime's own event and stream handles.
  void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  auto cu_record = reinterpret_cast<int (*)(void*, void*)>(cuda ? dlsym(cuda, "cuEventRecord") : nullptr);
  if (cu_record)
    printf("prim_cu_event_record ns_per_call %.1f\n",
           ns_per(n, [&](long i) { cu_record(evs[i & 2047], s); sync_every(i); }));
  return 0;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Alternating blocks through hooked() and direct(); see the header.
template <class H, class D>
static int paired(const char* mode, long n, cudaStream_t s, H hooked, D direct) {
  const long block = 1024;
  std::vector<double> a, b, d;
  int bad = 0;
  auto time_block = [&](auto f) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < block; ++i) bad |= f();
    cudaStreamSynchronize(s);
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / double(block);
  };
  for (long done = 0; done < n; done += block) {
    bool hooked_first = (done / block) % 2 == 0;  // neither always goes first
    double x = hooked_first ? time_block(hooked) : time_block(direct);
    double y = hooked_first ? time_block(direct) : time_block(hooked);
    a.push_back(hooked_first ? x : y);
    b.push_back(hooked_first ? y : x);
    d.push_back(a.back() - b.back());
  }
  if (bad || cudaGetLastError() != cudaSuccess) {
    fprintf(stderr, "%s: a call failed\n", mode);
    return 1;
  }
  printf("%s hooked_ns %.1f direct_ns %.1f added_ns %.1f\n", mode, median(a), median(b),
         median(d));
  return 0;
}

static void* own_symbol(const char* lib, const char* name) {
  void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
  return h ? dlsym(h, name) : nullptr;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char* mode = argv[1];
  long n = atol(argv[2]);
  cudaSetDevice(0);
  cudaStream_t s;
  cudaStreamCreate(&s);
  float* buf;
  cudaMalloc(&buf, 3 * 64 * sizeof(float));
  cudaMemset(buf, 0, 3 * 64 * sizeof(float));
  float one = 1.f, zero = 0.f;
  cublasHandle_t h = nullptr;
  ncclComm_t comm = nullptr;
  int dev0 = 0;
  if (!strcmp(mode, "prims")) return prims(n, s);
  bool is_paired = strstr(mode, "-paired") != nullptr;
  if (!strncmp(mode, "gemm", 4)) {
    cublasCreate_v2(&h);
    cublasSetStream_v2(h, s);
  } else if (!strncmp(mode, "nccl", 4) && ncclCommInitAll(&comm, 1, &dev0) != 0) {
    fprintf(stderr, "ncclCommInitAll failed\n");
    return 1;
  }
  using CuLaunch = int (*)(cudaFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, cudaStream_t, void**, void**);
  CuLaunch cu_launch = nullptr;
  cudaFunction_t fn = nullptr;
  if (!strcmp(mode, "driver")) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(empty_kernel)) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault, &q) !=
            cudaSuccess || !p)
      return fprintf(stderr, "no driver cuLaunchKernel entry point\n"), 1;
    cu_launch = reinterpret_cast<CuLaunch>(p);
  }
  auto call = [&]() -> int {
    if (!strcmp(mode, "launch")) {
      empty_kernel<<<1, 1, 0, s>>>();
      return 0;
    }
    if (cu_launch) return cu_launch(fn, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
    if (h) return cublasSgemm_v2(h, 0, 0, 8, 8, 8, &one, buf, 8, buf + 64, 8, &zero, buf + 128, 8);
    return ncclAllReduce(buf, buf + 64, 1, 7, 0, comm, s);
  };
  for (int i = 0; i < 2048; ++i) call();  // warm up: lazy loading, the hook's start
  cudaStreamSynchronize(s);
  if (getenv("HOOK_BENCH_BYPASS")) {
    auto bypass = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "xpu_timer_hook_bypass"));
    if (!bypass) return fprintf(stderr, "no xpu_timer_hook_bypass: is the hook preloaded?\n"), 1;
    bypass(1);
  }
  if (is_paired && h) {
    auto own = reinterpret_cast<decltype(&cublasSgemm_v2)>(own_symbol("libcublas.so.13", "cublasSgemm_v2"));
    if (!own) return fprintf(stderr, "no cublasSgemm_v2 in libcublas.so.13\n"), 1;
    return paired(mode, n, s, call, [&] {
      return own(h, 0, 0, 8, 8, 8, &one, buf, 8, buf + 64, 8, &zero, buf + 128, 8);
    });
  }
  if (is_paired && !strncmp(mode, "launch", 6)) {
    using LaunchFn = cudaError_t (*)(const void*, dim3, dim3, void**, size_t, cudaStream_t);
    auto own = reinterpret_cast<LaunchFn>(own_symbol("libcudart.so.13", "cudaLaunchKernel"));
    if (!own) return fprintf(stderr, "no cudaLaunchKernel in libcudart.so.13\n"), 1;
    const void* k = reinterpret_cast<const void*>(empty_kernel);
    return paired(mode, n, s,
                  [&] { return int(::cudaLaunchKernel(k, dim3(1), dim3(1), (void**)nullptr, 0, s)); },
                  [&] { return int(own(k, dim3(1), dim3(1), nullptr, 0, s)); });
  }
  if (is_paired) {
    auto own = reinterpret_cast<decltype(&ncclAllReduce)>(own_symbol("libnccl.so.2", "ncclAllReduce"));
    if (!own) return fprintf(stderr, "no ncclAllReduce in libnccl.so.2\n"), 1;
    return paired(mode, n, s, call, [&] { return own(buf, buf + 64, 1, 7, 0, comm, s); });
  }
  auto t0 = std::chrono::steady_clock::now();
  int bad = 0;
  for (long i = 0; i < n; ++i) {
    bad |= call();
    if ((i & 1023) == 1023) cudaStreamSynchronize(s);
  }
  cudaStreamSynchronize(s);
  auto t1 = std::chrono::steady_clock::now();
  if (bad || cudaGetLastError() != cudaSuccess) {
    fprintf(stderr, "%s: a call failed\n", mode);
    return 1;
  }
  printf("%s ns_per_call %.1f\n", mode,
         std::chrono::duration<double, std::nano>(t1 - t0).count() / double(n));
  return 0;
}
