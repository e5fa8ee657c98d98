// Calls the real libcudart.so.13 on a machine without a GPU: every call fails
// with the runtime's own error, which must reach the caller unchanged, hook or not.
#include <cstdio>

#include "../../../kernel_hook/cuda_api.h"

extern "C" void real_cudart_dummy(void) {}

int main() {
  dim3 one{1, 1, 1};
  int a = cudaLaunchKernel((const void*)real_cudart_dummy, one, one, nullptr, 0, nullptr);
  int b = cudaLaunchKernel((const void*)real_cudart_dummy, one, one, nullptr, 0, nullptr);
  int dev = -1;
  int c = cudaGetDevice(&dev);
  printf("launch %d %d getdevice %d\n", a, b, c);
  return 0;
}
