// Writes a region with kernel_hook/records.h for test_records_cpp.py to read
// with the Python reader: records_writer DIR CAPACITY N [RANK]
// Record i has fields derived from i, so the reader can check every byte.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "records.h"

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  xt::RegionIdentity id{4242, argc > 4 ? atoi(argv[4]) : 3, 1, 8, uint32_t(atoi(argv[2]))};
  xt::RegionWriter w;
  char err[256];
  if (!w.create(argv[1], id, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  int n = atoi(argv[3]), written = 0;
  for (int i = 0; i < n; ++i) {
    xt::Record r;
    memset(&r, 0, sizeof(r));
    r.event = uint8_t(1 + i % 3);
    r.kind = uint8_t(1 + i % 5);
    r.flags = uint16_t(i % 8 | (10 << 8));
    r.comm_rank = i % 7 - 1;
    r.op_id = 1000 + i;
    r.comm_id = 0xF00DF00DF00DF00Dull + i;
    r.seq = i + 1;
    r.t_mono_ns = 1000000000ull * i + 7;
    r.duration_ns = 1ull << (i % 60);
    r.bytes = uint64_t(i) * 4096;
    r.flops = uint64_t(i) * 1000000007ull;
    r.count = uint32_t(i + 1);
    r.comm_size = 8;
    // A long name with a multi-byte character across the cut.
    char name[128];
    snprintf(name, sizeof(name), "op-%d-%s", i,
             "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
             "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
             "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
    xt::copy_name(r.name, name);
    written += w.put(r) ? 1 : 0;
  }
  if (argc > 5) w.set_disabled();
  printf("%s %d %llu\n", w.path(), written, (unsigned long long)w.dropped());
  w.close();
  return 0;
}
