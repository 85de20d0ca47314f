// Process-wide cleanup of pmshm region files, installed when the first
// region is created: at exit() and on fatal signals (chained to the
// previous handlers) the files of this process's regions are unlinked,
// except those of a region whose bounce chunks still wait for a receiver
// (see shm_region.hpp, remove_if_abandoned).
#pragma once

#include <cstddef>
#include <string>

#include "shm_layout.hpp"

namespace pm::shm {

// An owner's region path, unlinked (with its ".wake" FIFO) at exit and on
// fatal signals unless one of `chunks` states is busy; -1 if not tracked
// (more than 64 regions, or the path is too long).
int track_owned(const std::string& path, const ChunkState* states, uint32_t chunks) noexcept;
void untrack_owned(int id) noexcept;

}  // namespace pm::shm
