#include "base/host_id.hpp"

#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace pm {

uint64_t host_id() noexcept {
  char buf[128] = {0};
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
  }
  if (!buf[0]) gethostname(buf, sizeof buf - 1);
  uint64_t h = 1469598103934665603ull;
  for (const char* p = buf; *p && *p != '\n'; p++) h = (h ^ uint8_t(*p)) * 1099511628211ull;
  return h;
}

} // namespace pm
