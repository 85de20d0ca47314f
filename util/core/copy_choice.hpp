// Large messages between processes of one host go either by one kernel copy
// (CMA: the receiver reads the sender's buffer) or by the two-copy pipeline
// through shared bounce buffers. Which is faster depends on the machine
// (page pinning is slow on many virtual machines, fast on others), on the
// size, and on overlap: while messages stream, the pipeline's two copies run
// on the two processes' cores at once, which no per-message timing sees.
// CopyChoice therefore measures epochs: per size class, every message decided
// in an epoch takes the same path, and the epoch's rate is the bytes its
// messages delivered over its busy time, the time during which at least one
// of them was decided and not yet complete. Idle time (the application
// computing, waiting for its peer, sending other sizes) is not counted, and
// neither is when the messages were decided: an application that posts a
// window of rendezvous at once has them all decided in one epoch, which ends
// when the last of them completes, so the pipeline's overlap across the
// window is measured and no message is timed from before its turn.
// An epoch ends once all its messages completed and it has at least
// kEpochMsgs of them and kEpochNs of busy time (or kEpochMax messages); at
// most kEpochMax are counted (later decisions take its path uncounted). A
// path's first epoch is cold and not counted: it takes kEpochMsgs messages
// or kColdBytes, whichever is more, and what is decided after them in it
// goes by single copy, uncounted also when it ends during a later epoch.
// Choosing: alternate epochs until each path has kWarm of them after a
// first one not counted (cold: the first touch of its buffers and pages),
// or one each when one path is at least kClearGap times faster, then take
// the faster path; explore the other path with one epoch after kExplore
// times as many messages as its last epoch took, scaled by how much slower
// its latest sample was (at most kExploreScale; unscaled until it has kWarm
// samples), went the preferred way, so exploring costs about
// 1/(kExplore + 1) of the busy time whatever the epochs' lengths and the
// gap between the paths. An epoch in which nothing of its own completes for
// kStallNs plus 1 ns per byte awaited (a lost message, a stalled peer)
// gives no sample. Limitations: with sizes of several classes in flight at
// once, each class's busy time includes the others' transfers; a
// completion of the other path (an earlier epoch's) during an epoch is not
// counted, its time is.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace pm {

class CopyChoice {
 public:
  static constexpr size_t kMinBytes = 64 * 1024;  // smaller ones: single copy when possible
  static constexpr uint32_t kWarm = 2;            // epochs of each path before choosing
  static constexpr uint32_t kExplore = 16;        // exploring costs about 1/(kExplore + 1) of the time
  static constexpr double kExploreScale = 8;      // the slower path's time per byte counts up to 8x
  static constexpr double kClearGap = 2;          // one epoch each decides a gap this wide
  static constexpr uint32_t kEpochMsgs = 8;
  static constexpr uint32_t kEpochMax = 256;      // messages counted in one epoch
  static constexpr size_t kColdBytes = 4 << 20;   // a cold epoch: at least kEpochMsgs and this much
  static constexpr uint64_t kEpochNs = 1000000;   // 1 ms of busy time
  static constexpr uint64_t kStallNs = 1000000000;  // 1 s without a completion: no sample

  // Whether a message of len bytes should go by single copy (now: now_ns()).
  // Every message for which this is asked must be reported to note() when
  // it completes (or fails: note it too, it ended).
  bool prefer_single(size_t len, uint64_t now) noexcept {
    if (len < kMinBytes) return true;
    Class& c = c_[cls(len)];
    if (c.active && stalled(c, now)) c.active = false;
    if (!c.active) start(c, now, len);
    busy(c, now);
    if (c.decided >= c.cap && !c.seen[c.single]) {  // past a cold epoch's messages: uncounted
      c.strays++;
      return true;
    }
    if (c.decided < c.cap) {
      c.decided++;
      c.want += len;
    }
    c.all++;
    if (chosen(c) && c.single == best(c)) c.since_explore++;
    return c.single;
  }

  // A message of len bytes completed at now by the path given; returns true
  // when its class's preferred path was chosen or changed (for a log line).
  bool note(bool single, size_t len, uint64_t now) noexcept {
    if (len < kMinBytes) return false;
    (single ? singles_ : copies_)++;
    Class& c = c_[cls(len)];
    // A single copy decided past a cold epoch ends: not counted in the epoch
    // under way (taken in order: the first single completions are the
    // earliest decided).
    if (single && c.strays) {
      c.strays--;
      return false;
    }
    if (!c.active) return false;
    if (stalled(c, now)) {
      c.active = false;
      return false;
    }
    busy(c, now);
    if (single != c.single || c.done >= c.decided) return false;  // an earlier epoch's
    c.last = now;
    c.bytes += len;
    c.done++;
    if (c.done < c.decided || c.done < kEpochMsgs) return false;
    if (c.busy < kEpochNs && c.decided < c.cap) return false;
    c.active = false;
    c.msgs[single] = c.all;
    if (!c.seen[single]) {  // the path's first epoch: cold (first touch of its buffers)
      c.seen[single] = true;
      return false;
    }
    bool was = chosen(c), before = best(c);
    double r = double(c.busy) / double(c.bytes);
    double& avg = c.rate[single];
    avg = c.n[single] ? 0.5 * avg + 0.5 * r : r;
    c.latest[single] = r;
    c.n[single]++;
    if (c.exploring) c.since_explore = 0;
    return chosen(c) && (!was || before != best(c));
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
    double latest[2] = {0, 0};  // the last sample of each path, ns per byte
    uint32_t n[2] = {0, 0};   // epochs measured
    bool active = false, single = true, exploring = false;
    bool seen[2] = {false, false};  // a first epoch was run (and not counted)
    uint64_t mark = 0;        // busy time counted up to here
    uint64_t last = 0;        // the epoch's start or its last completion
    uint64_t busy = 0, bytes = 0, want = 0;  // want: bytes of the counted decisions
    uint32_t decided = 0, done = 0;  // counted in the epoch (at most kEpochMax)
    uint64_t all = 0;                 // decided in the epoch, counted or not
    // Messages the epoch counts: a path's first (cold) epoch takes only
    // kEpochMsgs, or as many as carry kColdBytes (enough to touch the bounce
    // chunks and pages of a pipeline), and what is decided after them in it
    // goes by single copy, uncounted (a window of large messages decided at
    // once does not all go the cold way).
    uint32_t cap = kEpochMax;
    uint64_t strays = 0;              // single copies decided past a cold epoch, not yet ended
    uint64_t since_explore = 0;                   // messages the preferred way since the last exploration
    uint64_t msgs[2] = {kEpochMsgs, kEpochMsgs};  // messages the last epoch of each path took
  };
  static bool best(const Class& c) noexcept { return c.rate[1] <= c.rate[0]; }
  // How many times slower the other path was measured (>= 1).
  static double gap(const Class& c) noexcept {
    double fast = c.rate[best(c)], slow = c.rate[!best(c)];
    return fast > 0 ? slow / fast : slow > 0 ? kExploreScale : 1;
  }
  // What the exploration interval is multiplied by: how many times slower
  // than the preferred path's average the other path's latest sample was
  // (1 to kExploreScale), once that path has kWarm samples. A class decided
  // on one outlier epoch explores at the plain interval first, and again at
  // the plain interval as long as the other path's latest sample is no
  // slower than the preferred path (its average needs several samples to
  // forget the outlier).
  static double explore_scale(const Class& c) noexcept {
    bool b = best(c);
    if (c.n[!b] < kWarm || c.rate[b] <= 0) return 1;
    return std::clamp(c.latest[!b] / c.rate[b], 1.0, kExploreScale);
  }
  static bool chosen(const Class& c) noexcept {
    if (c.n[0] >= kWarm && c.n[1] >= kWarm) return true;
    return c.n[0] && c.n[1] && gap(c) >= kClearGap;
  }
  // Nothing completed for kStallNs plus 1 ns per byte still awaited (1 GB/s).
  static bool stalled(const Class& c, uint64_t now) noexcept {
    uint64_t awaited = c.want > c.bytes ? c.want - c.bytes : 0;
    return c.done < c.decided && now > c.last && now - c.last > kStallNs + awaited;
  }
  static void start(Class& c, uint64_t now, size_t len) noexcept {
    c.exploring = chosen(c) && double(c.since_explore) >= kExplore * double(c.msgs[!best(c)]) * explore_scale(c);
    c.single = !chosen(c) ? c.n[1] + c.seen[1] <= c.n[0] + c.seen[0]  // alternate, single copy first
                          : c.exploring ? !best(c) : best(c);
    c.active = true;
    c.cap = c.seen[c.single] ? kEpochMax
                             : uint32_t(std::clamp<size_t>(kColdBytes / len, kEpochMsgs, kEpochMax));
    c.mark = c.last = now;
    c.busy = c.bytes = c.want = 0;
    c.decided = c.done = 0;
    c.all = 0;
  }
  // Counts the time since the last event when some message was outstanding.
  static void busy(Class& c, uint64_t now) noexcept {
    if (c.done < c.decided && now > c.mark) c.busy += now - c.mark;
    if (now > c.mark) c.mark = now;
  }
  Class c_[kClasses];
  uint64_t singles_ = 0, copies_ = 0;
};

}  // namespace pm
