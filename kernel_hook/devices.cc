// Which CUDA devices this process launches on, said as DEVICE records
// (docs/records.md, docs/gpu.md), so a job that never calls set_device still
// has its GPU named. Launching threads note a device (one thread-local
// compare per launch; a lock-free table on a change); the drainer asks the
// runtime for the device's UUID and PCI address and writes the record, once
// per device, never on a launch path.
#include <cstring>

#include "core_internal.h"

namespace xt {

// A launch on a device this thread has not noted yet: ask the runtime which
// device is current (first launch of the thread), then put it in the table
// if no thread did. No syscall, no lock, no allocation.
void note_device_slow() {
  Core& c = g_core;
  if (tl.dev == 0) {
    int d = -1;
    tl.dev = c.ops.get_device(&d) == 0 && d >= 0 ? d + 1 : 0;
  }
  tl.dev_noted = tl.dev;
  if (tl.dev == 0) return;  // the runtime would not say: until the next set_device
  for (int i = 0; i < kMaxDevices; ++i) {
    int seen = c.devices[i].load(std::memory_order_acquire);
    if (seen == tl.dev) return;
    if (seen == 0) {
      int expected = 0;
      if (c.devices[i].compare_exchange_strong(expected, tl.dev, std::memory_order_acq_rel))
        return;
      if (expected == tl.dev) return;  // another thread noted it just now
    }
  }
  // More than kMaxDevices devices: the first ones are said, the rest not.
}

namespace {

uint64_t be64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// The CUDA_VISIBLE_DEVICES entry the runtime maps ordinal to ("" when unset
// or shorter), as the tracer writes it (diag/tracer/device.py visible_entry).
void visible_entry(const char* visible, int ordinal, char (&out)[kNameBytes]) {
  const char* p = visible;
  int i = 0;
  while (*p) {
    while (*p == ' ' || *p == '\t') ++p;
    const char* end = strchr(p, ',');
    size_t n = end ? size_t(end - p) : strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) --n;
    if (n) {
      if (i == ordinal) {
        char entry[kNameBytes];
        size_t k = n < kNameBytes - 1 ? n : kNameBytes - 1;
        memcpy(entry, p, k);
        entry[k] = '\0';
        copy_name(out, entry);
        return;
      }
      ++i;
    }
    if (!end) break;
    p = end + 1;
  }
  memset(out, 0, sizeof(out));
}

}  // namespace

// Drainer (under the pass lock): one DEVICE record per device noted since the
// last pass. A full ring drops it and counts it, as any record (retrying
// would count one drop per pass while the agent is away).
void write_devices(Core& c) {
  while (c.devices_written < kMaxDevices) {
    int dev = c.devices[c.devices_written].load(std::memory_order_acquire);
    if (dev == 0) return;
    int ordinal = dev - 1;
    uint8_t uuid[16] = {};
    uint64_t pci = 0;
    int has = c.ops.device_identity ? c.ops.device_identity(ordinal, uuid, &pci) : 0;
    Record r;
    memset(&r, 0, sizeof(r));
    r.event = kEventDevice;
    r.kind = 0;
    r.flags = uint16_t(has & (XT_DEV_HAS_UUID | XT_DEV_HAS_PCI));
    r.comm_rank = ordinal;
    if (has & XT_DEV_HAS_UUID) {
      r.comm_id = be64(uuid);
      r.seq = be64(uuid + 8);
    }
    if (has & XT_DEV_HAS_PCI) r.bytes = pci;
    r.count = 1;
    r.t_mono_ns = mono_ns();
    visible_entry(c.visible, ordinal, r.name);
    c.region.put(r);
    ++c.devices_written;
  }
}

}  // namespace xt
