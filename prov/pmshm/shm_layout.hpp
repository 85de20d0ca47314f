// The pmshm shared-memory formats: the endpoint name and the region every
// endpoint owns. Both are specs: trivially copyable, sizes and offsets
// checked, offsets only (never pointers) inside the region, atomics only
// where always lock-free.
//
// Endpoint name (32 bytes, what fi_getname returns):
//   0 magic 'PMSH' | 4 version u16 | 6 reserved u16 | 8 uid u32 | 12 pid u32
//  16 key u64 (random, names the region) | 24 host id u64
//
// Region file <dir>/pmshm_<uid>_<key as 16 hex digits>, mode 0600, owner
// holds flock(LOCK_EX) on it while alive; the wake FIFO is the same path
// with ".wake". Layout:
//   [RegionHdr, 4 KiB] [cells: N x 256 B receive queue]
//   [chunk states: M x 64 B] [chunks: M x chunk_size bounce buffers]
// The receive queue is a bounded multi-producer queue owned by the receiver:
// a producer claims a position by CAS on `tail`, fills the cell, then
// publishes it by storing seq = pos + 1; the receiver consumes at `head`
// and frees the cell by storing seq = pos + N. Bounce chunks live in the
// SENDER's region: the sender sets a chunk busy, the receiver clears it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/packet.hpp"

namespace pm::shm {

constexpr uint32_t kNameMagic = 0x48534d50;  // "PMSH"
constexpr uint16_t kVersion = 1;
constexpr uint32_t kRegionMagic = 0x47524d50; // "PMRG"
constexpr uint64_t kProbeSalt = 0x5a17c0ffee15600dull;
constexpr uint32_t kInline = UINT32_MAX;     // Cell::chunk for inline payloads

struct ShmName {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint32_t uid;
  uint32_t pid;
  uint64_t key;
  uint64_t host;
};
static_assert(sizeof(ShmName) == 32 && std::is_trivially_copyable_v<ShmName>);
static_assert(offsetof(ShmName, key) == 16 && offsetof(ShmName, host) == 24);

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct alignas(64) RegionHdr {
  uint32_t magic;
  uint16_t version;
  uint16_t hdr_size;
  uint32_t owner_pid;
  uint32_t uid;
  uint64_t key;
  uint64_t host;
  uint64_t self_va;      // owner's address of the region, for the CMA probe
  uint64_t probe;        // key ^ kProbeSalt, read through CMA to test it
  uint64_t size;
  uint32_t cells;        // power of two
  uint32_t cell_size;
  uint64_t cells_off;
  uint32_t chunks;
  uint32_t chunk_size;
  uint64_t states_off;
  uint64_t chunks_off;
  alignas(64) std::atomic<uint64_t> tail;      // producers
  alignas(64) std::atomic<uint32_t> sleeping;  // owner waits on its FIFO
};
static_assert(sizeof(RegionHdr) <= 4096);
static_assert(offsetof(RegionHdr, tail) % 64 == 0);

constexpr size_t kCellSize = 256;
constexpr size_t kCellInline = kCellSize - 24 - sizeof(PktHdr);

struct alignas(64) Cell {
  std::atomic<uint64_t> seq;
  uint64_t src_key;      // sender's region key
  uint32_t len;          // payload bytes
  uint32_t chunk;        // kInline, or a chunk index in the sender's region
  PktHdr hdr;
  uint8_t data[kCellInline];
};
static_assert(sizeof(Cell) == kCellSize);
static_assert(offsetof(Cell, hdr) == 24);

struct alignas(64) ChunkState {
  std::atomic<uint32_t> busy;
};
static_assert(sizeof(ChunkState) == 64);

} // namespace pm::shm
