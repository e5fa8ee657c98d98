// The scenarios behind hookprog's modes. Each ends with a short sleep so the
// hook's drainer (1 ms poll) has written every record before exit.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <thread>
#include <vector>

#include "../fake/static_driver.h"
#include "progs.h"

extern "C" void xt_test_empty_kernel(void** args) { (void)args; }

namespace {

void sleep_ms(int ms) { usleep(useconds_t(ms) * 1000); }

}  // namespace

struct Ctx {
  cudaStream_t s;
  cublasHandle_t h;
  Ctx() {
    cudaStreamCreate(&s);
    h = blas_on(s);
  }
  int gemm(int m, int n, int k) {
    return cublasGemmEx(h, 0, 0, m, n, k, nullptr, nullptr, 0, m, nullptr, 0, k, nullptr,
                        nullptr, 0, m, 68, -1);
  }
  int launch() {
    return cudaLaunchKernel((const void*)xt_test_empty_kernel, dim3{1, 1, 1}, dim3{32, 1, 1},
                            nullptr, 0, s);
  }
};

namespace {

ncclComm_t comm_from(const char* hex, int nranks, int rank) {
  ncclComm_t c = nullptr;
  ncclCommInitRankConfig(&c, nranks, id_from_hex(hex), rank, nullptr);
  return c;
}

int count_threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (d && readdir(d)) ++n;
  if (d) closedir(d);
  return n - 2;  // . and ..
}

}  // namespace

// Loads the hook's way into CUDA libraries but never calls them.
int scenario_nocuda(int, char**) {
  sleep_ms(50);
  printf("threads %d\n", count_threads());
  return 0;
}

// GEMMs, collectives (alone and in a group), Lt matmul, plain launches.
int scenario_timed(int, char**) {
  Ctx c;
  ncclComm_t comm = comm_from("0123456789abcdef", 4, 1);
  for (int i = 0; i < 3; ++i) c.gemm(128, 64, 32);
  for (int i = 0; i < 2; ++i) ncclAllReduce(nullptr, nullptr, 1000, 7, 0, comm, c.s);
  ncclGroupStart();
  ncclAllGather(nullptr, nullptr, 100, 9, comm, c.s);
  ncclReduceScatter(nullptr, nullptr, 50, 6, 0, comm, c.s);
  ncclGroupEnd();
  cublasLtHandle_t lh;
  cublasLtMatrixLayout_t a, b, d;
  int32_t batch = 4;
  cublasLtCreate(&lh);
  cublasLtMatrixLayoutCreate(&a, 0, 16, 256, 16);  // m=16, k=256
  cublasLtMatrixLayoutCreate(&b, 0, 256, 8, 256);
  cublasLtMatrixLayoutCreate(&d, 0, 16, 8, 16);
  cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
  cublasLtMatmul(lh, nullptr, nullptr, nullptr, a, nullptr, b, nullptr, nullptr, d, nullptr, d,
                 nullptr, nullptr, 0, c.s);
  for (int i = 0; i < 10; ++i) c.launch();
  cudaLaunchConfig_t cfg{dim3{1, 1, 1}, dim3{1, 1, 1}, 0, c.s, nullptr, 0};
  for (int i = 0; i < 5; ++i) cudaLaunchKernelExC(&cfg, (const void*)xt_test_empty_kernel, nullptr);
  cudaDeviceSynchronize();
  sleep_ms(100);
  return 0;
}

// sampled N: N rounds of one GEMM and one all-reduce on one stream (the
// sampling contract: which ones are device-timed, and that all complete).
int scenario_sampled(int argc, char** argv) {
  int n = argc > 0 ? atoi(argv[0]) : 64;
  Ctx c;
  ncclComm_t comm = comm_from("5a3b", 2, 0);
  for (int i = 0; i < n; ++i) {
    c.gemm(64, 32, 16);
    ncclAllReduce(nullptr, nullptr, 256, 7, 0, comm, c.s);
  }
  cudaDeviceSynchronize();
  sleep_ms(100);
  printf("event records app %d drainer %d\n", fake_event_records(0), fake_event_records(1));
  return 0;
}

// ranks RANK NRANKS IDHEX N: N all-reduces on the world comm, then a split
// and 2 all-gathers on the child, and a send.
int scenario_ranks(int argc, char** argv) {
  if (argc < 4) return 2;
  Ctx c;
  int rank = atoi(argv[0]), nranks = atoi(argv[1]), n = atoi(argv[3]);
  ncclComm_t world = comm_from(argv[2], nranks, rank);
  for (int i = 0; i < n; ++i) ncclAllReduce(nullptr, nullptr, 256, 7, 0, world, c.s);
  ncclComm_t child = nullptr;
  ncclCommSplit(world, rank % 2, rank, &child, nullptr);
  for (int i = 0; i < 2; ++i) ncclAllGather(nullptr, nullptr, 64, 9, child, c.s);
  ncclSend(nullptr, 10, 7, (rank + 1) % nranks, world, c.s);
  cudaDeviceSynchronize();
  sleep_ms(100);
  return 0;
}

// threads T ITERS: T threads, each with its own stream, launch and GEMM ITERS times.
int scenario_threads(int argc, char** argv) {
  int nt = argc > 0 ? atoi(argv[0]) : 8, iters = argc > 1 ? atoi(argv[1]) : 100;
  std::vector<std::thread> ts;
  for (int t = 0; t < nt; ++t)
    ts.emplace_back([iters] {
      Ctx c;
      for (int i = 0; i < iters; ++i) {
        c.launch();
        c.gemm(8, 8, 8);
      }
      cudaStreamSynchronize(c.s);
    });
  for (auto& t : ts) t.join();
  sleep_ms(100);
  printf("done %d\n", nt * iters);
  return 0;
}

// The child of a hooked process keeps working, and writes nothing.
int scenario_fork(int, char**) {
  Ctx c;
  c.gemm(16, 16, 16);
  pid_t pid = fork();
  if (pid == 0) {
    Ctx cc;
    for (int i = 0; i < 3; ++i) cc.gemm(16, 16, 16), cc.launch();
    cudaDeviceSynchronize();
    printf("child ok %d\n", cc.gemm(4, 4, 4));
    exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  c.gemm(16, 16, 16);
  cudaDeviceSynchronize();
  sleep_ms(100);
  printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}

// Calls captured into a graph are counted, not timed; the one after is timed.
int scenario_capture(int, char**) {
  Ctx c;
  ncclComm_t comm = comm_from("feed", 2, 0);
  cudaStreamBeginCapture(c.s, 0);
  for (int i = 0; i < 3; ++i) c.gemm(32, 32, 32);
  for (int i = 0; i < 2; ++i) ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, c.s);
  cudaStreamEndCapture(c.s, nullptr);
  c.gemm(32, 32, 32);
  cudaDeviceSynchronize();
  sleep_ms(100);
  return 0;
}

// A global-mode capture on one stream while a collective on another is still
// running (the hook's drainer polls its event meanwhile): the capture must
// end as it would without the hook. Prints both results.
int scenario_capture_inflight(int, char**) {
  Ctx c;
  cudaStream_t s2;
  cudaStreamCreate(&s2);
  ncclComm_t comm = comm_from("cafe", 1, 0);
  ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, c.s);  // runs for FAKE_DELAY_US
  sleep_ms(20);
  int b = cudaStreamBeginCapture(s2, 0);  // cudaStreamCaptureModeGlobal
  sleep_ms(50);
  int e = cudaStreamEndCapture(s2, nullptr);
  cudaDeviceSynchronize();
  sleep_ms(50);
  printf("capture %d %d\n", b, e);
  return 0;
}

// A process on device 1 only (like rank 1 of a node): the hook's drainer
// thread must not make a context on device 0 (half a GiB of GPU 0 per rank).
int scenario_device1(int, char**) {
  cudaSetDevice(1);
  Ctx c;
  ncclComm_t comm = comm_from("d1", 1, 0);
  for (int i = 0; i < 4; ++i) {
    c.gemm(8, 8, 8);
    ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, c.s);
    c.launch();
  }
  cudaDeviceSynchronize();
  sleep_ms(100);
  printf("contexts %u\n", fake_contexts());
  return 0;
}

// A fork while another thread is starting the hook: that thread is held in
// the start by a full stderr pipe (XPU_TIMER_RING_CAPACITY is bad, so the
// start says one line). The child's hooked calls must not wait for a start
// that never ends in it. Prints the child's milliseconds for 5 calls.
int scenario_fork_during_start(int, char**) {
  int p[2];
  if (pipe2(p, O_NONBLOCK) != 0) return 2;
  char junk[4096];
  memset(junk, 'x', sizeof(junk));
  while (write(p[1], junk, sizeof(junk)) > 0) {
  }
  fcntl(p[1], F_SETFL, 0);  // the next write to it blocks
  int saved_err = dup(2);
  dup2(p[1], 2);
  Ctx c;
  std::thread starter([&] { c.launch(); });
  sleep_ms(100);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(saved_err, 2);
    timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 5; ++i) c.gemm(8, 8, 8);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("child ms %ld\n", long((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000));
    fflush(stdout);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  while (read(p[0], junk, sizeof(junk)) == sizeof(junk)) {  // unblock the starter
  }
  starter.join();
  dup2(saved_err, 2);
  printf("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}

// One thread driving two devices, as in NCCL's one-process-many-GPUs style:
// the ops' stream is on device 0 while device 1 is current. The hook's event
// records then fail; the caller's last error must stay its own.
int scenario_two_devices(int, char**) {
  cudaSetDevice(0);
  Ctx c;
  ncclComm_t comm = comm_from("2d", 1, 0);
  cudaSetDevice(1);
  int r = ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, c.s);
  int g = c.gemm(8, 8, 8);
  int last = cudaGetLastError();
  cudaDeviceSynchronize();
  sleep_ms(50);
  printf("allreduce %d gemm %d last %d\n", r, g, last);
  return 0;
}

// A job that never calls set_device: kernels and GEMMs on device 0 (the
// thread's default), then on device 1, then on 0 again, also from a second
// thread. The hook says device 0 and device 1 (DEVICE records), once each.
int scenario_no_set_device(int, char**) {
  Ctx c;
  for (int i = 0; i < 3; ++i) {
    c.launch();
    c.gemm(8, 8, 8);
  }
  cudaSetDevice(1);
  Ctx c1;
  for (int i = 0; i < 3; ++i) {
    c1.launch();
    c1.gemm(8, 8, 8);
  }
  cudaSetDevice(0);
  c.launch();
  std::thread other([&] { c.launch(); });
  other.join();
  cudaDeviceSynchronize();
  sleep_ms(50);
  printf("launched\n");
  return 0;
}

// hang SECONDS: all-reduces where FAKE_HANG makes one never finish; then waits
// like a training step blocked on it. With HANG_RANK set, only that RANK hangs.
// HANG_GAP_MS: the pause after each launch (0: back to back).
int scenario_hang(int argc, char** argv) {
  const char* only = getenv("HANG_RANK");
  if (only && getenv("RANK") && strcmp(only, getenv("RANK")) != 0) fake_set_hang("ncclAllReduce", 0);
  Ctx c;
  ncclComm_t comm = comm_from(getenv("HANG_ID") ? getenv("HANG_ID") : "abcd", 1, 0);
  int gap_ms = getenv("HANG_GAP_MS") ? atoi(getenv("HANG_GAP_MS")) : 0;
  for (int i = 0; i < 3; ++i) {
    ncclAllReduce(nullptr, nullptr, 1024, 7, 0, comm, c.s);
    sleep_ms(gap_ms);  // apart by more than a drainer pass: a fence each
  }
  printf("launched\n");
  fflush(stdout);
  sleep(argc > 0 ? atoi(argv[0]) : 30);
  return 0;
}

// train SECONDS GEMM_US: steps of two 1024^3 GEMMs and a 4 MiB all-reduce on
// one stream for SECONDS. A GEMM runs GEMM_US on the fake device, SLOW_FACTOR
// times longer on rank SLOW_RANK (a slow GPU: same work, less speed) from
// SLOW_AFTER seconds on (it says so on stdout).
int scenario_train(int argc, char** argv) {
  double seconds = argc > 0 ? atof(argv[0]) : 10, gemm_us = argc > 1 ? atof(argv[1]) : 2000;
  const char *slow = getenv("SLOW_RANK"), *rank = getenv("RANK");
  double factor = slow && rank && strcmp(slow, rank) == 0 && getenv("SLOW_FACTOR") ? atof(getenv("SLOW_FACTOR")) : 1;
  double slow_after = getenv("SLOW_AFTER") ? atof(getenv("SLOW_AFTER")) : 0;
  fake_set_delay_ns("cublasGemmEx", uint64_t(gemm_us * 1000));
  fake_set_delay_ns("ncclAllReduce", 500000);
  Ctx c;
  const char* world = getenv("WORLD_SIZE");
  ncclComm_t comm = comm_from("7ea1", world ? atoi(world) : 1, rank ? atoi(rank) : 0);
  timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double elapsed = 0;
  do {
    if (factor != 1 && elapsed >= slow_after) {
      fake_set_delay_ns("cublasGemmEx", uint64_t(gemm_us * factor * 1000));
      printf("rank %s: GEMMs %.2fx slower from now\n", rank, factor);
      fflush(stdout);
      factor = 1;
    }
    for (int i = 0; i < 2; ++i) c.gemm(1024, 1024, 1024);
    ncclAllReduce(nullptr, nullptr, 1 << 20, 7, 0, comm, c.s);
    cudaStreamSynchronize(c.s);
    clock_gettime(CLOCK_MONOTONIC, &t);
    elapsed = double(t.tv_sec - t0.tv_sec) + 1e-9 * double(t.tv_nsec - t0.tv_nsec);
  } while (elapsed < seconds);
  sleep_ms(100);
  return 0;
}

// The results the caller sees, whatever the hook could resolve.
int scenario_missing(int, char**) {
  Ctx c;
  ncclComm_t comm = comm_from("77", 1, 0);
  int h = cublasHgemm(c.h, 0, 0, 2, 2, 2, nullptr, nullptr, 2, nullptr, 2, nullptr, nullptr, 2);
  int g = c.gemm(8, 8, 8);
  int a = ncclAllReduce(nullptr, nullptr, 4, 7, 0, comm, c.s);
  int l = c.launch();
  cudaDeviceSynchronize();
  sleep_ms(50);
  printf("hgemm %d gemm %d allreduce %d launch %d\n", h, g, a, l);
  return 0;
}

// The caller's errno survives every hooked call, the first one (which starts
// the hook: files, mmap, dlopen, a thread) included. Prints what it saw.
int scenario_errno(int, char**) {
  Ctx c;
  int seen[5];
  errno = 4242;
  c.launch();  // the process's first hooked call
  seen[0] = errno;
  ncclComm_t comm = comm_from("e77", 1, 0);
  errno = 4243;
  c.gemm(8, 8, 8);
  seen[1] = errno;
  errno = 4244;
  ncclAllReduce(nullptr, nullptr, 4, 7, 0, comm, c.s);
  seen[2] = errno;
  errno = 4245;
  cublasHgemm(c.h, 0, 0, 2, 2, 2, nullptr, nullptr, 2, nullptr, 2, nullptr, nullptr, 2);
  seen[3] = errno;
  std::thread([&] {  // a new thread's first call claims its slot
    errno = 4246;
    c.gemm(8, 8, 8);
    seen[4] = errno;
  }).join();
  cudaDeviceSynchronize();
  sleep_ms(50);
  printf("errno %d %d %d %d %d\n", seen[0], seen[1], seen[2], seen[3], seen[4]);
  return 0;
}

// The bench loops, kept out of line so callgrind can count exactly them
// (--toggle-collect=bench_launch_loop / bench_gemm_loop).
extern "C" __attribute__((noinline)) void bench_launch_loop(Ctx* c, long n) {
  for (long i = 0; i < n; ++i) c->launch();
}
extern "C" __attribute__((noinline)) void bench_gemm_loop(Ctx* c, long n) {
  for (long i = 0; i < n; ++i) c->gemm(8, 8, 8);
}
// Launches through the driver's entry point as cuBLAS and NCCL reach it
// (cuGetProcAddress_v2 found with dlsym: the hook's wrapper when preloaded).
extern "C" __attribute__((noinline)) void bench_driver_loop(void* entry, Ctx* c, long n) {
  static CUfunc_st kernel{xt_test_empty_kernel, "xt_test_driver_kernel", nullptr};
  auto launch = reinterpret_cast<decltype(&::cuLaunchKernel)>(entry);
  for (long i = 0; i < n; ++i) launch(&kernel, 1, 1, 1, 32, 1, 1, 0, c->s, nullptr, nullptr);
}

static double elapsed_ns(const timespec& a, const timespec& b) {
  return double(b.tv_sec - a.tv_sec) * 1e9 + double(b.tv_nsec - a.tv_nsec);
}

// bench N: N plain launches, then N/10 timed GEMMs, then N launches through
// the driver's entry point; prints ns per call.
int scenario_bench(int argc, char** argv) {
  long n = argc > 0 ? atol(argv[0]) : 1000000;
  Ctx c;
  void* entry = fake_static::driver_entry("cuLaunchKernel");
  if (!entry) return printf("no driver entry point\n"), 2;
  bench_launch_loop(&c, 1000);  // warm up: slot claim, symbol resolution
  bench_gemm_loop(&c, 100);
  bench_driver_loop(entry, &c, 1000);
  cudaDeviceSynchronize();
  timespec t0, t1, t2, t3;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  bench_launch_loop(&c, n);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  bench_gemm_loop(&c, n / 10);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  bench_driver_loop(entry, &c, n);
  clock_gettime(CLOCK_MONOTONIC, &t3);
  cudaDeviceSynchronize();
  printf("launch_ns %.2f gemm_ns %.2f driver_ns %.2f\n", elapsed_ns(t0, t1) / double(n),
         elapsed_ns(t1, t2) / double(n / 10), elapsed_ns(t2, t3) / double(n));
  return 0;
}

// capture_race N: one thread, one stream, N times: an all-reduce (its fence is
// due from the drainer), then at once a global-mode capture of a GEMM on the
// same stream. A fence landing inside a capture breaks it (the fake then fails
// EndCapture). Prints how many captures failed.
int scenario_capture_race(int argc, char** argv) {
  int n = argc > 0 ? atoi(argv[0]) : 1000;
  Ctx c;
  ncclComm_t comm = comm_from("ca97", 1, 0);
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, c.s);
    if (cudaStreamBeginCapture(c.s, 0) != 0) ++bad;
    c.gemm(8, 8, 8);
    if (cudaStreamEndCapture(c.s, nullptr) != 0) ++bad;
    if (i % 64 == 0) usleep(1500);  // now and then the drainer's pass lands between
  }
  cudaDeviceSynchronize();
  sleep_ms(100);
  printf("captures failed %d\n", bad);
  return 0;
}

// destroy_race N: N times a new stream, an all-reduce on it, and the stream
// destroyed at once, its work still queued. A fence recorded on a destroyed
// stream aborts the fake (a real driver may crash). Prints the count.
int scenario_destroy_race(int argc, char** argv) {
  int n = argc > 0 ? atoi(argv[0]) : 1000;
  ncclComm_t comm = comm_from("de57", 1, 0);
  cudaStream_t live;
  cudaStreamCreate(&live);
  for (int i = 0; i < n; ++i) {
    cudaStream_t s;
    cudaStreamCreate(&s);
    ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, s);
    ncclAllReduce(nullptr, nullptr, 8, 7, 0, comm, live);  // fenced all the same
    usleep(i % 64 == 0 ? 1500 : 100);  // slower than the queue drains; now and then a pass
    cudaStreamDestroy(s);
  }
  cudaDeviceSynchronize();
  sleep_ms(100);
  printf("destroyed %d\n", n);
  return 0;
}

// bypass: the hook's one control. Recorded, bypassed, recorded again: the
// bypassed calls still reach the library (its last call is checked) but leave
// no record, and a split made while bypassed is still registered.
int scenario_bypass(int, char**) {
  auto bypass = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "xpu_timer_hook_bypass"));
  if (!bypass) return printf("no xpu_timer_hook_bypass\n"), 3;
  auto recording = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "xpu_timer_hook_recording"));
  if (!recording) return printf("no xpu_timer_hook_recording\n"), 3;
  int unstarted = recording();  // asking starts nothing
  Ctx c;
  ncclComm_t world = comm_from("b1a5", 2, 0);
  auto round = [&](int n) {
    for (int i = 0; i < n; ++i) {
      c.gemm(32, 16, 8);
      c.launch();
      ncclAllReduce(nullptr, nullptr, 100 + i, 7, 0, world, c.s);
    }
  };
  round(2);
  int started = recording();
  int before = bypass(1);
  int bypassed = recording();
  round(5);
  int forwarded = fake_last_call()->args[2] == 104;  // the 5th all-reduce's count
  ncclComm_t child = nullptr;
  ncclCommSplit(world, 0, 0, &child, nullptr);
  ncclGroupStart();
  ncclAllGather(nullptr, nullptr, 8, 9, child, c.s);
  ncclGroupEnd();
  int during = bypass(0);
  round(1);
  int again = recording();
  ncclAllGather(nullptr, nullptr, 16, 9, child, c.s);
  cudaDeviceSynchronize();
  sleep_ms(100);
  printf("recording unstarted %d started %d bypassed %d again %d\n", unstarted, started, bypassed, again);
  printf("bypass before %d during %d forwarded %d app events %d\n", before, during, forwarded,
         fake_event_records(0));
  return 0;
}
