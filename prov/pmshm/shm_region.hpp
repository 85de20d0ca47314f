// Creating, mapping, cleaning up and checking the liveness of pmshm regions.
#pragma once

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

std::string region_path(const std::string& dir, uint32_t uid, uint64_t key);

// A mapping of a region file; the owner's also holds the flock and the FIFO.
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

  RegionHdr* hdr() const { return static_cast<RegionHdr*>(base_); }
  char* base() const { return static_cast<char*>(base_); }
  Cell* cells() const { return reinterpret_cast<Cell*>(base() + hdr()->cells_off); }
  ChunkState* states() const { return reinterpret_cast<ChunkState*>(base() + hdr()->states_off); }
  char* chunk(uint32_t i) const { return base() + hdr()->chunks_off + size_t(i) * hdr()->chunk_size; }
  bool mapped() const { return base_ != nullptr; }
  int wake_fd() const { return wake_.get(); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Wakes the owner if it sleeps (peer side; opens the FIFO lazily).
  void wake();

 private:
  void unmap();
  void* base_ = nullptr;
  size_t size_ = 0;
  UniqueFd fd_;
  UniqueFd wake_;      // owner: FIFO read end (O_RDWR); peer: write end
  std::string path_;
  bool owner_ = false;
};

// Removes regions of this user whose owners died; called at endpoint open.
void cleanup_stale(const std::string& dir, uint32_t uid);

} // namespace pm::shm
