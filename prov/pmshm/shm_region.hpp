// Creating, mapping, cleaning up and checking the liveness of pmshm regions.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/unique_fd.hpp"
#include "shm_layout.hpp"

namespace pm::shm {

struct RegionConfig {
  std::string dir;
  uint32_t cells;
  uint32_t chunks;
  uint32_t chunk_size;
};

// Where the parts of a region are: computed by its owner, or taken from a
// header copy that validate_layout() accepted. Never read back from the
// shared header once validated.
struct Layout {
  uint64_t size = 0;
  uint64_t cells_off = 0, intros_off = 0, states_off = 0, chunks_off = 0;
  uint32_t cells = 0, intros = 0, chunks = 0, chunk_size = 0;
};

Layout plan_layout(const RegionConfig& cfg);
// A header copy against the file's size: magic, version, sizes within
// bounds, every part aligned, inside the file and after the previous one,
// all with overflow-safe arithmetic. Fills *out when it is sound.
bool validate_layout(const RegionInfo& h, uint64_t file_size, Layout* out);

std::string region_path(const std::string& dir, uint32_t uid, uint64_t key);

// A mapping of a region file; the owner's also holds the flock and the FIFO.
// Mappings are guarded: if the file is truncated under them, accesses past
// the end read zeros instead of killing the process, and broken() says so.
class Region {
 public:
  Region() = default;
  Region(Region&& o) noexcept;
  Region& operator=(Region&& o) noexcept;
  ~Region();

  // Creates this endpoint's region; 0 or a negative FI_E* code.
  int create(const RegionConfig& cfg, uint64_t key, uint64_t host, bool fence_free);
  // Maps a peer's region; 0, -FI_ENOENT (not there yet), or another error.
  int open(const std::string& dir, uint32_t uid, uint64_t key);
  // A peer region: true while its owner holds its lock.
  bool owner_alive() const;
  // A SIGBUS hit the mapping: the file was truncated by someone.
  bool broken() const;

  RegionHdr* hdr() const { return static_cast<RegionHdr*>(base_); }
  // The header's plain part as validated when the region was mapped.
  const RegionInfo& info() const { return info_; }
  char* base() const { return static_cast<char*>(base_); }
  Cell* cells() const { return reinterpret_cast<Cell*>(base() + layout_.cells_off); }
  uint32_t cell_count() const { return layout_.cells; }
  IntroSlot* intros() const { return reinterpret_cast<IntroSlot*>(base() + layout_.intros_off); }
  uint32_t intro_count() const { return layout_.intros; }
  ChunkState* states() const { return reinterpret_cast<ChunkState*>(base() + layout_.states_off); }
  uint32_t chunk_count() const { return layout_.chunks; }
  uint32_t chunk_size() const { return layout_.chunk_size; }
  char* chunk(uint32_t i) const { return base() + layout_.chunks_off + size_t(i) * layout_.chunk_size; }
  bool mapped() const { return base_ != nullptr; }
  int fd() const { return fd_.get(); }
  int wake_fd() const { return wake_.get(); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Wakes the owner if it sleeps (peer side; opens the FIFO lazily).
  void wake();

 private:
  void unmap();
  bool chunks_pending() const;
  void* base_ = nullptr;
  size_t size_ = 0;
  Layout layout_{};
  RegionInfo info_{};
  UniqueFd fd_;
  UniqueFd wake_;      // owner: FIFO read end (O_RDWR); peer: write end
  std::string path_;
  std::string dir_;
  uint32_t uid_ = 0;
  int guard_ = -1;     // shm_signals.hpp mapping guard
  int track_ = -1;     // owner: files unlinked at exit / fatal signals
  bool owner_ = false;
  pid_t creator_ = 0;  // owner: only this process removes the files
};

// Removes the files of the region at `path` (of user `uid`, in `dir`) if
// its owner is dead and none of its bounce chunks still waits for a live
// receiver other than `closing` (a receiver going away; 0: none); true if
// they were removed.
bool remove_if_abandoned(const std::string& dir, uint32_t uid, const std::string& path, uint64_t closing);

// Removes abandoned regions of this user; called at endpoint open.
void cleanup_stale(const std::string& dir, uint32_t uid);

} // namespace pm::shm
