// Fault injection for tests/gpu/test_link_gpu.py where no netfilter is lent
// (no iptables, or no CAP_NET_ADMIN): LD_PRELOADed into the workers, it makes
// one process stop sending on its TCP sockets from the moment the file
// $XPU_DROP_SENDS_DIR/<pid> appears, as a link whose one direction died:
// a non-blocking send (NCCL's proxy: MSG_DONTWAIT) gets EAGAIN forever, a
// blocking one never returns. What the process receives is untouched, so only
// the link from this rank is broken. Test-only: never built into the hook.
//   gcc -O2 -shared -fPIC -o drop_sends.so drop_sends.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int dropping;       // latched: once the file is seen, this process's sends are dead
static long next_look_ms;  // the file is looked for at most every 50 ms (NCCL's proxy spins on send)

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int tcp_socket(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  struct sockaddr_storage addr;
  socklen_t alen = sizeof addr;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return 0;
  if (getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) return 0;
  return addr.ss_family == AF_INET || addr.ss_family == AF_INET6;
}

// 1 when this send must be dropped: sets errno to EAGAIN, or sleeps forever for a blocking one.
static int drop(int fd, int flags) {
  if (!dropping) {
    const char *dir = getenv("XPU_DROP_SENDS_DIR");
    long t = now_ms();
    if (!dir || t < next_look_ms) return 0;
    next_look_ms = t + 50;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%d", dir, (int)getpid());
    if (access(path, F_OK) != 0) return 0;
    dropping = 1;
  }
  if (!tcp_socket(fd)) return 0;
  if ((flags & MSG_DONTWAIT) || (fcntl(fd, F_GETFL) & O_NONBLOCK)) {
    errno = EAGAIN;
    return 1;
  }
  for (;;) pause();
}

ssize_t send(int fd, const void *buf, size_t n, int flags) {
  static ssize_t (*real)(int, const void *, size_t, int);
  if (!real) real = dlsym(RTLD_NEXT, "send");
  return drop(fd, flags) ? -1 : real(fd, buf, n, flags);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to, socklen_t tl) {
  static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
  if (!real) real = dlsym(RTLD_NEXT, "sendto");
  return drop(fd, flags) ? -1 : real(fd, buf, n, flags, to, tl);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
  static ssize_t (*real)(int, const struct msghdr *, int);
  if (!real) real = dlsym(RTLD_NEXT, "sendmsg");
  return drop(fd, flags) ? -1 : real(fd, msg, flags);
}

ssize_t write(int fd, const void *buf, size_t n) {
  static ssize_t (*real)(int, const void *, size_t);
  if (!real) real = dlsym(RTLD_NEXT, "write");
  return drop(fd, 0) ? -1 : real(fd, buf, n);
}
