// Large messages between processes of one host go either by one kernel copy
// (CMA: the receiver reads the sender's buffer) or by the two-copy pipeline
// through shared bounce buffers. Which is faster depends on the machine
// (page pinning is slow on many virtual machines, fast on others), on the
// size, and on overlap: while messages stream, the pipeline's two copies run
// on the two processes' cores at once, which no per-message timing sees.
// CopyChoice therefore measures epochs: per size class, every message of an
// epoch takes the same path, and the epoch's rate is the bytes its messages
// delivered over its wall time (at least kEpochMsgs messages and kEpochNs).
// It alternates epochs until each path has kWarm of them, then takes the
// faster path, and runs one epoch of the other every kExplore epochs, so a
// change (machine load, size mix) is followed. An epoch with a pause (no
// completion for kGapNs and for 4 times its average per message so far:
// the application computed, or sent other sizes) gives no sample. Limitation: an
// epoch's wall time includes whatever else the endpoint received meanwhile,
// so with sizes of several classes interleaved each class's figure follows
// the stream's overall rate rather than its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace pm {

class CopyChoice {
 public:
  static constexpr size_t kMinBytes = 64 * 1024;  // smaller ones: single copy when possible
  static constexpr uint32_t kWarm = 2;            // epochs of each path before choosing
  static constexpr uint32_t kExplore = 16;        // then one epoch in this many tries the other path
  static constexpr uint32_t kEpochMsgs = 8;
  static constexpr uint64_t kEpochNs = 1000000;   // 1 ms
  static constexpr uint64_t kGapNs = 10000000;    // 10 ms without a completion ...

  // Whether a message of len bytes should go by single copy (now: now_ns()).
  bool prefer_single(size_t len, uint64_t now) noexcept {
    if (len < kMinBytes) return true;
    Class& c = c_[cls(len)];
    if (!c.active) {
      c.active = true;
      c.single = pick(c);
      c.start = now;
      c.bytes = 0;
      c.msgs = 0;
      c.last = now;
    }
    return c.single;
  }

  // A message of len bytes completed at now by the path given; returns true
  // when its class's preferred path was chosen or changed (for a log line).
  bool note(bool single, size_t len, uint64_t now) noexcept {
    if (len < kMinBytes) return false;
    (single ? singles_ : copies_)++;
    Class& c = c_[cls(len)];
    if (!c.active || single != c.single) return false;  // a message of an earlier epoch
    uint64_t el = now > c.start ? now - c.start : 0;
    uint64_t gap = now > c.last ? now - c.last : 0;
    if (gap > kGapNs && (!c.msgs || gap > 4 * ((c.last - c.start) / c.msgs))) {
      c.active = false;  // paused: no sample
      return false;
    }
    c.last = now;
    c.bytes += len;
    c.msgs++;
    if (c.msgs < kEpochMsgs || el < kEpochNs) return false;
    bool before = chosen(c) ? c.rate[1] <= c.rate[0] : !single;
    double r = double(el) / double(c.bytes);
    double& avg = c.rate[single];
    avg = c.n[single] ? 0.5 * avg + 0.5 * r : r;
    c.n[single]++;
    c.epochs++;
    c.active = false;
    return chosen(c) && (before != (c.rate[1] <= c.rate[0]) || c.n[0] + c.n[1] == 2 * kWarm);
  }

  // "64K-256K: single 10.2 GB/s (4), copy 6.1 GB/s (2); ..." (classes with samples).
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
    uint32_t n[2] = {0, 0};   // epochs measured
    uint64_t epochs = 0;
    bool active = false, single = true;
    uint64_t start = 0, last = 0, bytes = 0;
    uint32_t msgs = 0;
  };
  static bool chosen(const Class& c) noexcept { return c.n[0] >= kWarm && c.n[1] >= kWarm; }
  static bool pick(const Class& c) noexcept {
    if (!chosen(c)) return c.n[1] <= c.n[0];  // alternate, single copy first
    bool best = c.rate[1] <= c.rate[0];
    return (c.epochs + 1) % kExplore == 0 ? !best : best;
  }
  Class c_[kClasses];
  uint64_t singles_ = 0, copies_ = 0;
};

}  // namespace pm
