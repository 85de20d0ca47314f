// Large messages between processes of one host go either by one kernel copy
// (CMA: the receiver reads the sender's buffer) or by the two-copy pipeline
// through shared bounce buffers. Which is faster depends on the machine
// (page pinning is slow on many virtual machines, fast on others) and on the
// size. CopyChoice learns it from the transfers themselves, per size class:
// it alternates until each path has a few samples, then takes the faster
// one (throughput as an exponential average), and keeps trying the other
// one every 64th message of the class, so a change (another machine load,
// another size mix) is followed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pm {

class CopyChoice {
 public:
  static constexpr size_t kMinBytes = 64 * 1024;  // smaller ones: single copy when possible
  static constexpr uint32_t kWarm = 3;            // samples of each path before choosing
  static constexpr uint32_t kExplore = 64;        // then one message in this many tries the other path

  // Whether a message of len bytes should go by single copy.
  bool prefer_single(size_t len) noexcept {
    if (len < kMinBytes) return true;
    Class& c = c_[cls(len)];
    c.decisions++;
    if (c.n[0] < kWarm || c.n[1] < kWarm) return c.n[1] <= c.n[0];  // alternate, single copy first
    bool best = c.rate[1] <= c.rate[0];  // fewer ns per byte
    return c.decisions % kExplore == 0 ? !best : best;
  }

  // A transfer of bytes took ns by the path given; returns true when the
  // class's preferred path changed (for a log line).
  bool note(bool single, size_t bytes, uint64_t ns) noexcept {
    if (bytes < kMinBytes || ns == 0) return false;
    Class& c = c_[cls(bytes)];
    bool before = c.n[0] >= kWarm && c.n[1] >= kWarm ? c.rate[1] <= c.rate[0] : single;
    double r = double(ns) / double(bytes);
    double& avg = c.rate[single];
    avg = c.n[single] ? 0.75 * avg + 0.25 * r : r;
    c.n[single]++;
    (single ? singles_ : copies_)++;
    bool after = c.n[0] >= kWarm && c.n[1] >= kWarm ? c.rate[1] <= c.rate[0] : before;
    return c.n[0] >= kWarm && c.n[1] >= kWarm && (before != after || c.n[0] + c.n[1] == 2 * kWarm);
  }

  // "64K-256K: single 10.2 GB/s, copy 6.1 GB/s: single; ..." (classes with samples).
  std::string describe() const {
    std::string s;
    static const char* names[kClasses] = {"64K-256K", "256K-1M", "1M-4M", ">=4M"};
    for (int i = 0; i < kClasses; i++) {
      const Class& c = c_[i];
      if (!c.n[0] && !c.n[1]) continue;
      char b[160];
      snprintf(b, sizeof b, "%s%s: single %.1f GB/s (%u), copy %.1f GB/s (%u)", s.empty() ? "" : "; ", names[i],
               c.n[1] ? 1.0 / c.rate[1] : 0.0, c.n[1], c.n[0] ? 1.0 / c.rate[0] : 0.0, c.n[0]);
      s += b;
    }
    return s;
  }
  uint64_t singles() const noexcept { return singles_; }
  uint64_t copies() const noexcept { return copies_; }

 private:
  static constexpr int kClasses = 4;
  static int cls(size_t len) noexcept { return len < (256u << 10) ? 0 : len < (1u << 20) ? 1 : len < (4u << 20) ? 2 : 3; }
  struct Class {
    double rate[2] = {0, 0};  // ns per byte: [0] copy path, [1] single copy
    uint32_t n[2] = {0, 0};
    uint64_t decisions = 0;
  };
  Class c_[kClasses];
  uint64_t singles_ = 0, copies_ = 0;
};

}  // namespace pm
