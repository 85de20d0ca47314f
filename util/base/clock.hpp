#pragma once

#include <time.h>

#include <cstdint>

namespace pm {

inline uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The same clock at the last scheduler tick (a few ms behind, never ahead of
// now_ns()): a tenth of the cost in virtual machines, for stamps only
// compared with timeouts of many ticks.
inline uint64_t coarse_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

} // namespace pm
