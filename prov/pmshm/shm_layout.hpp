// The pmshm shared-memory formats: the endpoint name and the region every
// endpoint owns. Both are specs: trivially copyable, sizes and offsets
// checked, offsets only (never pointers) inside the region, atomics only
// where always lock-free. Everything in a region can be written by any
// process of the same user: readers validate it (Region::open, the
// receiver's poll) before they use it.
//
// Endpoint name (32 bytes, what fi_getname returns):
//   0 magic 'PMSH' | 4 version u16 | 6 reserved u16 | 8 uid u32 | 12 pid u32
//  16 key u64 (random, names the region) | 24 host id u64
//
// Region file <dir>/pmshm_<uid>_<key as 16 hex digits>, mode 0600, owner
// holds flock(LOCK_EX) on it while alive; the wake FIFO is the same path
// with ".wake". Layout (each part aligned as shown):
//   [RegionHdr, 4 KiB] [cells: N x 256 B receive queue]
//   [introductions: kIntroSlots x 128 B] [chunk states: M x 64 B]
//   [page aligned: chunks, M x chunk_size bounce buffers]
// The receive queue is a bounded multi-producer queue owned by the receiver.
// A producer claims position pos by a CAS on the cell's `seq` (stamping its
// pid there, while pos < head + N), then moves `tail` past pos (any producer
// that finds the cell claimed helps), fills the cell, and publishes it by
// storing seq = published(pos). The receiver consumes at its private head
// and publishes `head` after each batch; a cell claimed by a process that
// died before publishing it is skipped once the claim is older than a bound.
// Bounce chunks live in the SENDER's region: the sender sets a chunk busy
// (naming the receiver), the receiver clears it. A sender introduces itself
// in a free introduction slot of the receiver's region before its first
// packet, so the receiver can name it without opening the sender's region
// (which may be gone: a sender may exit right after a send completed).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/packet.hpp"

namespace pm::shm {

constexpr uint32_t kNameMagic = 0x48534d50;  // "PMSH"
constexpr uint16_t kVersion = 4;
constexpr size_t kAliasMax = 64;             // RegionHdr::alias
constexpr uint32_t kRegionMagic = 0x47524d50; // "PMRG"
constexpr uint64_t kProbeSalt = 0x5a17c0ffee15600dull;
constexpr uint32_t kInline = UINT32_MAX;     // Cell::chunk for inline payloads
constexpr uint32_t kIntroSlots = 128;        // introduction slots per region (Cell::intro is a byte)
constexpr size_t kHdrBytes = 4096;           // the header part of a region

// Bounds Region::open enforces on a peer's header (nobody creates more).
constexpr uint32_t kMaxCells = 1u << 24;
constexpr uint32_t kMaxChunks = 1u << 16;
constexpr uint32_t kMaxChunkSize = 1u << 26;

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

// The header's plain part: readers copy it out (memcpy from the mapping,
// or pread) and validate the copy before they use any of it.
struct RegionInfo {
  uint32_t magic;
  uint16_t version;
  uint16_t hdr_size;
  uint32_t owner_pid;    // as the owner sees itself; never a CMA target (see shm_proc.hpp)
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
  uint64_t intros_off;   // introduction slots
  uint32_t intros;
  uint32_t reserved;
};
static_assert(std::is_trivially_copyable_v<RegionInfo> && sizeof(RegionInfo) == 184);
static_assert(offsetof(RegionInfo, cells_off) == 64 && offsetof(RegionInfo, alias) == 104);
static_assert(offsetof(RegionInfo, intros_off) == 168);

struct alignas(64) RegionHdr {
  RegionInfo info;
  alignas(64) std::atomic<uint64_t> tail;      // producers: positions below are claimed
  alignas(64) std::atomic<uint64_t> head;      // owner: positions below are consumed
  alignas(64) std::atomic<uint32_t> sleeping;  // owner waits on its FIFO
};
static_assert(sizeof(RegionHdr) <= kHdrBytes && offsetof(RegionHdr, info) == 0);
static_assert(offsetof(RegionHdr, tail) == 192 && offsetof(RegionHdr, head) == 256);

// A queue cell. `seq` says which position the cell holds and its state:
//   bits 63..32  the position (its low 32 bits; a cell is at most one lap old)
//   bits 31..1   the claimant's pid (as it sees itself), 0 once published
//   bit 0        1: published
// A new region's cell i holds position i - N, published. The owner never
// writes cells (free space is `head`), so a small message costs one cache
// line moving from sender to receiver. Two body formats:
//  compact (single-packet eager message, payload inline): tag, cq_data, data
//  full (anything else): chunk index, the whole core header, data
enum CellFmt : uint8_t { kFmtCompact = 1, kFmtFull = 2 };

constexpr size_t kCellSize = 256;

constexpr uint64_t seq_claimed(uint64_t pos, uint32_t pid) {
  return uint64_t(uint32_t(pos)) << 32 | uint64_t(pid & 0x7fffffffu) << 1;
}
constexpr uint64_t seq_published(uint64_t pos) { return uint64_t(uint32_t(pos)) << 32 | 1; }
constexpr uint32_t seq_pos(uint64_t v) { return uint32_t(v >> 32); }
constexpr uint32_t seq_pid(uint64_t v) { return uint32_t(v >> 1) & 0x7fffffffu; }
constexpr bool seq_is_published(uint64_t v) { return v & 1; }
// Where the cell of position pos stands: < 0 a lap behind (free once head
// passed it), 0 claimed or published for pos, > 0 already a lap ahead.
constexpr int32_t seq_lap(uint64_t v, uint64_t pos) { return int32_t(seq_pos(v) - uint32_t(pos)); }

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
  uint8_t intro;         // the sender's introduction slot + 1, 0: none
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

// A sender's introduction in the receiver's region: its name (exactly what
// its fi_getname returns) and alias. `state`: 0 free; otherwise the
// writer's pid << 2 | kIntroWriting or kIntroReady. The sender claims a
// free slot by CAS, fills it and stores ready; the receiver copies it when
// the sender's first packet (Cell::intro) arrives and frees it.
enum IntroPhase : uint64_t { kIntroWriting = 1, kIntroReady = 2 };
constexpr uint64_t intro_state(uint32_t pid, IntroPhase phase) { return uint64_t(pid) << 2 | phase; }

struct alignas(64) IntroSlot {
  std::atomic<uint64_t> state;
  ShmName name;
  uint32_t alias_len;
  uint8_t alias[kAliasMax];
  uint8_t reserved[20];
};
static_assert(sizeof(IntroSlot) == 128);
static_assert(offsetof(IntroSlot, name) == 8 && offsetof(IntroSlot, alias) == 44);

// A bounce chunk: busy while a receiver has not consumed it; rx_key names
// that receiver, so a dead sender's region is kept until its chunks are
// consumed or their receivers are gone too.
struct alignas(64) ChunkState {
  std::atomic<uint32_t> busy;
  uint32_t reserved;
  uint64_t rx_key;
};
static_assert(sizeof(ChunkState) == 64);
static_assert(offsetof(ChunkState, rx_key) == 8);

} // namespace pm::shm
