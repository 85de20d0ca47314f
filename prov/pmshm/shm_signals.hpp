// Process-wide guards for pmshm regions, installed when the first region is
// created or mapped:
//  * SIGBUS inside a region mapping (another process truncated the file):
//    the rest of the mapping is replaced by zero pages, the access completes
//    and the mapping is marked broken for the device to fail it; any other
//    SIGBUS goes to the previous disposition.
//  * Fatal signals: a region owner's files are unlinked only when the
//    previous disposition is the default one (the process is about to die),
//    and the signal is then raised again with the default action. A previous
//    application handler is called instead and nothing is unlinked (the
//    process may go on); signals that were ignored get no handler at all.
//  * exit(): the files of regions still open are unlinked (atexit).
// Files of a region whose bounce chunks still wait for a receiver are kept
// (see shm_region.hpp, remove_if_abandoned).
#pragma once

#include <cstddef>
#include <string>

#include "shm_layout.hpp"

namespace pm::shm {

// Registers [base, base + len) as a region mapping; -1 if the table is full
// (the mapping then is not protected). Survives only SIGBUS, nothing else.
int guard_mapping(void* base, size_t len) noexcept;
void unguard_mapping(int id) noexcept;
// True once a SIGBUS hit the mapping (it now holds zero pages from there on).
bool mapping_broken(int id) noexcept;

// An owner's region path, unlinked (with its ".wake" FIFO) at exit and on
// fatal signals unless one of `chunks` states is busy; -1 if not tracked
// (more than 64 regions, or the path is too long).
int track_owned(const std::string& path, const ChunkState* states, uint32_t chunks) noexcept;
void untrack_owned(int id) noexcept;

}  // namespace pm::shm
