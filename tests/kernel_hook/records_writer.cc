// Writes a region with kernel_hook/records.h for test_records_cpp.py to read
// with the Python reader: records_writer DIR CAPACITY N [RANK [disable|nested|flood]]
// Record i has fields derived from i, so the reader can check every byte.
// nested: N collectives started, then ended newest first, as the drainer
// writes them (put_start, put_end); flood: N GEMMs started and ended, then one
// collective; both with no reader, so the ring fills.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "records.h"

namespace {

xt::Record op_record(uint8_t event, uint8_t kind, uint64_t op_id, uint64_t seq) {
  xt::Record r;
  memset(&r, 0, sizeof(r));
  r.event = event;
  r.kind = kind;
  r.comm_rank = kind == xt::kKindCollective ? 0 : -1;
  r.op_id = op_id;
  r.seq = seq;
  r.t_mono_ns = xt::mono_ns();
  r.count = 1;
  xt::copy_name(r.name, kind == xt::kKindCollective ? "ncclAllReduce" : "gemm");
  return r;
}

int ops(xt::RegionWriter& w, const char* mode, int n) {
  int written = 0;
  if (strcmp(mode, "nested") == 0) {
    bool* started = new bool[n];
    for (int i = 0; i < n; ++i) {
      started[i] = w.put_start(op_record(xt::kEventStart, xt::kKindCollective, i + 1, i + 1));
      written += started[i];
    }
    for (int i = n; i-- > 0;)
      written += w.put_end(op_record(xt::kEventEnd, xt::kKindCollective, i + 1, i + 1), started[i]);
    delete[] started;
    return written;
  }
  for (int i = 0; i <= n; ++i) {
    uint8_t kind = i < n ? xt::kKindGemm : xt::kKindCollective;
    bool started = w.put_start(op_record(xt::kEventStart, kind, i + 1, i < n ? 0 : 1));
    written += started;
    written += w.put_end(op_record(xt::kEventEnd, kind, i + 1, i < n ? 0 : 1), started);
  }
  return written;
}

}  // namespace

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
  const char* mode = argc > 5 ? argv[5] : "";
  if (strcmp(mode, "nested") == 0 || strcmp(mode, "flood") == 0) {
    written = ops(w, mode, n);
    n = 0;
  }
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
  if (strcmp(mode, "disable") == 0) w.set_disabled();
  printf("%s %d %llu\n", w.path(), written, (unsigned long long)w.dropped());
  w.close();
  return 0;
}
