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
// a producer claims a position by CAS on `tail` (only while pos < head + N),
// fills the cell, then publishes it by storing seq = pos + 1; the receiver
// consumes at its private head and publishes `head` after each batch. Bounce
// chunks live in the SENDER's region: the sender sets a chunk busy, the
// receiver clears it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/packet.hpp"

namespace pm::shm {

constexpr uint32_t kNameMagic = 0x48534d50;  // "PMSH"
constexpr uint16_t kVersion = 2;
constexpr size_t kAliasMax = 64;             // RegionHdr::alias
constexpr uint32_t kRegionMagic = 0x47524d50; // "PMRG"
constexpr uint64_t kProbeSalt = 0x5a17c0ffee15600dull;
constexpr uint32_t kInline = UINT32_MAX;     // Cell::chunk for inline payloads

// Well-known endpoints (fi_getinfo's service, docs/fi_pmshm.7.md): keys
// below 2^33 are never drawn at random. pmshm's endpoint opened for service
// s has key s; the shared-memory region of pmeth's endpoint for service s
// on host id h has key pmeth_service_key(h, s) (the host id in it keeps the
// regions of "hosts" that tests run on one machine apart). Their names
// carry pid 0 ("whichever process owns the region"): a client builds them
// from the service (and its own host id) alone.
constexpr uint64_t kPmethServiceKey = 1ull << 32;
inline bool is_service_key(uint64_t key) { return key != 0 && (key >> 32) <= 1; }
inline uint64_t pmeth_service_key(uint64_t host, uint32_t svc) {
  uint64_t h = host ^ (host >> 16) ^ (host >> 32) ^ (host >> 48);
  return kPmethServiceKey | ((h & 0xffff) << 16) | (svc & 0xffff);
}

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
  uint32_t fence_free;   // 1: the owner runs membarrier() before it sleeps,
                         // so senders need no fence before reading `sleeping`
  uint32_t alias_len;    // the owner's name in another provider (pmeth's
  uint8_t alias[kAliasMax];  // composite), written before the name is published
  alignas(64) std::atomic<uint64_t> tail;      // producers: next position to claim
  alignas(64) std::atomic<uint64_t> head;      // owner: positions below are consumed
  alignas(64) std::atomic<uint32_t> sleeping;  // owner waits on its FIFO
};
static_assert(sizeof(RegionHdr) <= 4096);
static_assert(offsetof(RegionHdr, tail) % 64 == 0 && offsetof(RegionHdr, head) % 64 == 0);

// A queue cell. `seq` = pos + 1 publishes the cell for position pos; the
// owner never writes cells (free space is `head`), so a small message costs
// one cache line moving from sender to receiver. Two body formats:
//  compact (single-packet eager message, payload inline): tag, cq_data, data
//  full (anything else): chunk index, the whole core header, data
enum CellFmt : uint8_t { kFmtCompact = 1, kFmtFull = 2 };

constexpr size_t kCellSize = 256;

struct CompactBody {
  uint64_t tag;
  uint64_t cq_data;
  uint8_t data[kCellSize - 24 - 16];
};
struct FullBody {
  uint32_t chunk;        // kInline, or a chunk index in the sender's region
  uint32_t reserved;
  PktHdr hdr;
  uint8_t data[kCellSize - 24 - 56];
};

struct alignas(64) Cell {
  std::atomic<uint64_t> seq;
  uint64_t src_key;      // sender's region key
  uint8_t fmt;
  uint8_t op;            // compact: the packet flags' owner op (kPktEager)
  uint8_t flags;         // compact: PktHdr flags
  uint8_t reserved;
  uint32_t len;          // payload bytes
  union {
    CompactBody compact;
    FullBody full;
  };
};
static_assert(sizeof(Cell) == kCellSize);
static_assert(offsetof(Cell, compact) == 24 && offsetof(Cell, full) == 24);
static_assert(offsetof(Cell, compact) + offsetof(CompactBody, data) == 40);

constexpr size_t kCompactInline = sizeof(CompactBody::data);  // 216
constexpr size_t kCellInline = sizeof(FullBody::data);        // 176

struct alignas(64) ChunkState {
  std::atomic<uint32_t> busy;
};
static_assert(sizeof(ChunkState) == 64);

} // namespace pm::shm
