// Scripted collectives, one script per rank, for the divergence tests: each
// rank of a launcher job runs OPS_R<RANK> on one communicator of the fake
// NCCL (asynchronous: a hung op holds back every later op on its stream, as
// on a GPU), with HANG_R<RANK>="api:nth" making that call never complete.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "progs.h"

namespace {

ncclComm_t script_comm(int rank, int nranks) {
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(id.internal, "xpu-diag-script", 15);
  ncclComm_t c = nullptr;
  ncclCommInitRankConfig(&c, nranks, id, rank, nullptr);
  return c;
}

// One op "name:count:dtype[:arg]": arg is the reduce op (ar, rs), the root
// (bc, red) or the peer (send, recv). "z:ms" sleeps. Send and recv go on a
// stream of their own (p2p), as a pipeline stage's do, so they can complete
// while a collective hangs.
void run_op(const std::string& op, ncclComm_t comm, cudaStream_t s, cudaStream_t p2p) {
  char name[16] = {0};
  unsigned long count = 0;
  int dt = 7, arg = 0;
  sscanf(op.c_str(), "%15[^:]:%lu:%d:%d", name, &count, &dt, &arg);
  std::string n(name);
  if (n == "z") usleep(useconds_t(count) * 1000);
  else if (n == "ar") ncclAllReduce(nullptr, nullptr, count, dt, arg, comm, s);
  else if (n == "ag") ncclAllGather(nullptr, nullptr, count, dt, comm, s);
  else if (n == "rs") ncclReduceScatter(nullptr, nullptr, count, dt, arg, comm, s);
  else if (n == "bc") ncclBroadcast(nullptr, nullptr, count, dt, arg, comm, s);
  else if (n == "red") ncclReduce(nullptr, nullptr, count, dt, 0, arg, comm, s);
  else if (n == "send") ncclSend(nullptr, count, dt, arg, comm, p2p);
  else if (n == "recv") ncclRecv(nullptr, count, dt, arg, comm, p2p);
  else fprintf(stderr, "script: unknown op %s\n", op.c_str());
}

}  // namespace

// script SECONDS
int scenario_script(int argc, char** argv) {
  const char* rank_s = getenv("RANK") ? getenv("RANK") : "0";
  int rank = atoi(rank_s);
  int world = getenv("WORLD_SIZE") ? atoi(getenv("WORLD_SIZE")) : 1;
  std::string key = std::string("HANG_R") + rank_s;
  if (const char* h = getenv(key.c_str())) {
    std::string spec(h);
    size_t colon = spec.find(':');
    if (colon != std::string::npos)
      fake_set_hang(spec.substr(0, colon).c_str(), atoi(spec.c_str() + colon + 1));
  }
  cudaStream_t s, p2p;
  cudaStreamCreate(&s);
  cudaStreamCreate(&p2p);
  ncclComm_t comm = script_comm(rank, world);
  key = std::string("OPS_R") + rank_s;
  std::string ops = getenv(key.c_str()) ? getenv(key.c_str()) : "";
  // "t" hands the rest of the script to a second thread (a pipeline stage's
  // p2p thread): the hook queues ops per thread, so its ops end on their own.
  std::thread rest;
  size_t at = 0;
  for (; at < ops.size();) {
    size_t end = ops.find(',', at);
    if (end == std::string::npos) end = ops.size();
    std::string op = ops.substr(at, end - at);
    at = end + 1;
    if (op == "t") {
      std::string tail = at < ops.size() ? ops.substr(at) : "";
      rest = std::thread([tail, comm, s, p2p] {
        for (size_t i = 0; i < tail.size();) {
          size_t e = tail.find(',', i);
          if (e == std::string::npos) e = tail.size();
          run_op(tail.substr(i, e - i), comm, s, p2p);
          i = e + 1;
        }
      });
      break;
    }
    run_op(op, comm, s, p2p);
  }
  if (rest.joinable()) rest.join();
  printf("launched\n");
  fflush(stdout);
  sleep(argc > 0 ? unsigned(atoi(argv[0])) : 30);
  return 0;
}

// spawn: the worker a tracer owns (XPU_TIMER_TRACER_PID = its pid) runs one
// all-reduce, then a child it spawns, which inherits RANK, LD_PRELOAD and the
// owner pid, runs "timed": the child must stay inert.
int scenario_spawn(int, char**) {
  char pid[32];
  snprintf(pid, sizeof(pid), "%d", int(getpid()));
  setenv("XPU_TIMER_TRACER_PID", pid, 1);
  cudaStream_t s;
  cudaStreamCreate(&s);
  ncclComm_t comm = script_comm(0, 1);
  ncclAllReduce(nullptr, nullptr, 256, 7, 0, comm, s);
  cudaStreamSynchronize(s);
  pid_t child = fork();
  if (child == 0) {
    execl("/proc/self/exe", "hookprog", "timed", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("child %d exit %d\n", int(child), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  usleep(50000);
  return 0;
}
