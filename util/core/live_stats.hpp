// An endpoint's live statistics page (include/pmfabric/pmstat.h), read by
// pmstat(1) while the endpoint runs: a file in /dev/shm made from the
// device's statistics line on the endpoint's progress calls, at most every
// 100 ms (a coarse clock read per call decides), removed at close.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "pmfabric/pmstat.h"

namespace pm {

class LiveStats {
 public:
  // nullptr (with the reason logged at info level) when the page cannot be
  // made; the endpoint works the same without it.
  static std::unique_ptr<LiveStats> create(const char* provider);
  ~LiveStats();

  bool due() noexcept;  // 100 ms since the last update (coarse clock)
  // text: lines of "name=value" fields as the statistics line has them
  // (docs: pmstat.h); "section:" tokens prefix the names that follow.
  // Allocates nothing.
  void publish(std::string_view text);
  const std::string& path() const { return path_; }

 private:
  LiveStats() = default;
  pmstat_page* page_ = nullptr;
  int fd_ = -1;  // held open with a shared flock: the page's owner lives
  std::string path_;
  uint64_t next_ns_ = 0;
};

// Parses the statistics text into the page's counters and peers (exposed
// for the unit test); the page's header fields are left alone.
void parse_stats_text(std::string_view text, pmstat_page* page);

}  // namespace pm
