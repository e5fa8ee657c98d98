// The fake NCCL's RAS listener: speaks the client protocol of NCCL 2.28's RAS
// (src/ras/client.cc, client_support.cc: "CLIENT PROTOCOL 2" -> "SERVER
// PROTOCOL 2", "TIMEOUT n" -> "OK", "[VERBOSE] STATUS" -> text, then close)
// so diag/link/ras.py is tested against the protocol. Real NCCL binds
// NCCL_RAS_ADDR (default localhost:28028) in one process per node; the fake
// binds only when NCCL_RAS_ADDR is set (tests pick a free port), and, as in
// NCCL, the processes that find the port taken just go on without.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "fake_nccl_profiler.h"

namespace {
std::once_flag g_ras_once;
std::atomic<int> g_nranks{0}, g_rank{-1};
std::atomic<uint64_t> g_collectives{0};

bool read_line(int fd, char* buf, size_t len) {
  size_t n = 0;
  while (n + 1 < len) {
    ssize_t r = read(fd, buf + n, 1);
    if (r <= 0) return false;
    if (buf[n++] == '\n') break;
  }
  buf[n] = 0;
  return true;
}

void say(int fd, const char* text) { (void)!write(fd, text, strlen(text)); }

void serve(int fd) {
  char line[256], out[1024];
  if (!read_line(fd, line, sizeof(line)) || strncmp(line, "CLIENT PROTOCOL ", 16) != 0) return;
  say(fd, "SERVER PROTOCOL 2\n");
  while (read_line(fd, line, sizeof(line))) {
    if (strncmp(line, "TIMEOUT ", 8) == 0 || strncmp(line, "SET FORMAT ", 11) == 0) {
      say(fd, "OK\n");
    } else if (strstr(line, "STATUS")) {
      snprintf(out, sizeof(out),
               "NCCL version 2.28.9 (fake NCCL RAS)\n\nJob summary\n===========\n"
               "  Nodes  Processes\n      1          %d\n\nCommunicators\n=============\n"
               "  Group  Comms  Nodes  Ranks  Ranks   Status  Errors\n"
               "      0      1      1  %d/%d      %d  RUNNING  INCOMPLETE\n"
               "  rank %d: %llu collectives issued; the last one has not completed\n",
               g_nranks.load(), g_nranks.load(), g_nranks.load(), g_nranks.load(), g_rank.load(),
               (unsigned long long)g_collectives.load());
      say(fd, out);
      return;
    } else {
      say(fd, "ERROR: unknown command\n");
      return;
    }
  }
}

void listen_loop(int sock) {
  for (;;) {
    int fd = accept(sock, nullptr, nullptr);
    if (fd < 0) continue;
    serve(fd);
    close(fd);
  }
}

void start() {
  const char* addr = getenv("NCCL_RAS_ADDR");
  const char* enable = getenv("NCCL_RAS_ENABLE");
  if (!addr || !*addr || (enable && strcmp(enable, "0") == 0)) return;
  const char* colon = strrchr(addr, ':');
  if (!colon) return;
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(atoi(colon + 1)));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (sock < 0 || bind(sock, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(sock, 4) != 0) {
    if (sock >= 0) close(sock);
    return;   // another process of this node serves RAS
  }
  std::thread(listen_loop, sock).detach();
}
}  // namespace

void fake_ras_comm(int nranks, int rank) {
  g_nranks = nranks;
  g_rank = rank;
  std::call_once(g_ras_once, start);
}
void fake_ras_collective() { ++g_collectives; }
