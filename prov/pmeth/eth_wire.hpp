// The pmeth frame format (the spec; docs/wire_protocol.md draws it).
// Every multi-byte field is little-endian on the wire, written and read
// through le16/le32/le64 below, never by casting.
//
//  Ethernet: dst MAC (6) | src MAC (6) | EtherType (2, default 0x88B5)
//  pmeth header (56 bytes):
//   0 version   1 type    2 flags   3 hold (u8, hold_code(): how long the
//     sender held the frame whose timestamp it echoes; 0 = not measured)
//   4 job id (u32)                        -- one-way function of the job's key
//   8 dst endpoint id (u32)  12 src endpoint id (u32)
//  16 src epoch (u32)        20 dst epoch (u32, 0 = unknown)
//  24 seq (u32)              28 ack (u32: every seq below it arrived)
//  32 window (u16)           34 payload length (u16)
//  36 timestamp (u32, µs)    40 timestamp echo (u32)
//  44 checksum (u32: CRC32C of the header with this field and the MAC 0,
//     XOR a four-lane Fletcher sum of the payload, see frame_sum; with the
//     payload MAC the CRC32C alone: the MAC covers the payload)
//  48 MAC (u64: SipHash-2-4 under the job's key of the 12 bytes of
//     Ethernet addresses and header bytes 0..47, then with the payload MAC
//     the payload's keyed hash; 0 when authentication is off; see
//     eth_auth.hpp)
//  DATA and DGRAM frames: then the core packet header (27 to 45 bytes, see
//  encode_core), then payload.
//  A DATA frame with flag kFlagBundle carries several core packets (the
//  seed's "network burst"): records of [length (u16) | core header |
//  payload], the length counting the core header and payload; the records
//  fill the frame's payload exactly.
//  NAK frames: then a 64-bit bitmap (bit i: seq ack+1+i arrived).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/packet.hpp"

namespace pm::eth {

// 3: GSO packets to kGsoGroup, the payload MAC; 4: the core header in 27
// to 45 bytes instead of 48
constexpr uint8_t kWireVersion = 4;
constexpr uint16_t kDefaultEtherType = 0x88B5;
constexpr size_t kEthHdr = 14;
constexpr size_t kPmHdr = 56;
constexpr size_t kMacOff = 48;  // of the MAC inside the pmeth header
// The core header's encoding (encode_core): kCoreMin bytes at least, kCoreHdr
// at most.
constexpr size_t kCoreMin = 27;
constexpr size_t kCoreHdr = 45;
constexpr size_t kFrameOverhead = kEthHdr + kPmHdr + kCoreHdr;  // before payload, at most

// Header flags (byte 2); any other bit makes the frame invalid.
constexpr uint8_t kFlagBundle = 0x01;
constexpr uint8_t kKnownFlags = kFlagBundle;
constexpr size_t kRecHdr = 2;  // a bundled record's length

enum FrameType : uint8_t {
  kData = 1,       // reliable: seq, core header, payload
  kAck = 2,        // cumulative ack + window (window 0 = STOP, > 0 = GO)
  kNak = 3,        // LOSE: `ack` is the first missing seq; bitmap follows
  kHello = 4,      // handshake request: src epoch
  kHelloAck = 5,   // handshake reply: both epochs
  kProbe = 6,      // liveness probe; answered with an ACK
  kDgram = 7,      // unreliable datagram: core header, payload
};

inline void put16(uint8_t* p, uint16_t v) { store_le<uint16_t>(p, v); }
inline void put32(uint8_t* p, uint32_t v) { store_le<uint32_t>(p, v); }
inline void put64(uint8_t* p, uint64_t v) { store_le<uint64_t>(p, v); }
inline uint16_t get16(const uint8_t* p) { return load_le<uint16_t>(p); }
inline uint32_t get32(const uint8_t* p) { return load_le<uint32_t>(p); }
inline uint64_t get64(const uint8_t* p) { return load_le<uint64_t>(p); }

// The hold byte: m·2^e units of 8 µs (e = high nibble, m = low nibble),
// from 0 to 15·2^15·8 µs ≈ 3.9 s in steps of at most 1/8 of the value;
// encoded rounding down, so a hold is never overstated.
inline uint8_t hold_code(uint64_t ns) {
  uint64_t u = ns / 8000;
  unsigned e = 0;
  while (u > 15 && e < 15) {
    u >>= 1;
    e++;
  }
  if (u > 15) u = 15;
  return uint8_t(e << 4 | u);
}
inline uint64_t hold_ns(uint8_t code) { return (uint64_t(code & 15) << (code >> 4)) * 8000; }

// The decoded pmeth header.
struct FrameHdr {
  uint8_t version = kWireVersion;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint8_t hold = 0;
  uint32_t job = 0;
  uint32_t dst_ep = 0, src_ep = 0;
  uint32_t src_epoch = 0, dst_epoch = 0;
  uint32_t seq = 0, ack = 0;
  uint16_t window = 0;
  uint16_t len = 0;
  uint32_t ts = 0, ts_echo = 0;
  uint32_t csum = 0;
  uint64_t mac = 0;
};

inline void encode_hdr(uint8_t* p, const FrameHdr& h) {
  p[0] = h.version;
  p[1] = h.type;
  p[2] = h.flags;
  p[3] = h.hold;
  put32(p + 4, h.job);
  put32(p + 8, h.dst_ep);
  put32(p + 12, h.src_ep);
  put32(p + 16, h.src_epoch);
  put32(p + 20, h.dst_epoch);
  put32(p + 24, h.seq);
  put32(p + 28, h.ack);
  put16(p + 32, h.window);
  put16(p + 34, h.len);
  put32(p + 36, h.ts);
  put32(p + 40, h.ts_echo);
  put32(p + 44, h.csum);
  put64(p + 48, h.mac);
}

inline FrameHdr decode_hdr(const uint8_t* p) {
  FrameHdr h;
  h.version = p[0];
  h.type = p[1];
  h.flags = p[2];
  h.hold = p[3];
  h.job = get32(p + 4);
  h.dst_ep = get32(p + 8);
  h.src_ep = get32(p + 12);
  h.src_epoch = get32(p + 16);
  h.dst_epoch = get32(p + 20);
  h.seq = get32(p + 24);
  h.ack = get32(p + 28);
  h.window = get16(p + 32);
  h.len = get16(p + 34);
  h.ts = get32(p + 36);
  h.ts_echo = get32(p + 40);
  h.csum = get32(p + 44);
  h.mac = get64(p + 48);
  return h;
}

// The core header travels in explicit byte order too, and only what it
// holds: 27 bytes for a message's packet (no CQ data, lengths and offsets
// below 4 GiB), 45 at most (a one-sided operation's address is 64-bit):
//   0 op   1 flags   2 which fields are wide or present (kCore*)
//   3 msg_id (u64)   11 tag (u64)
//  19 msg_len (u32, or u64 with kCoreLenWide)
//     offset (u32, or u64 with kCoreOffWide)
//     cq_data (u64, with kCoreCq; else 0)
//     reserved (u16, with kCoreRes; else 0)
// seg_len is not carried: it is the payload's length (the core refuses a
// packet whose seg_len differs, check_packet).
constexpr uint8_t kCoreLenWide = 0x01, kCoreOffWide = 0x02, kCoreCq = 0x04, kCoreRes = 0x08;
constexpr uint8_t kCoreKnown = kCoreLenWide | kCoreOffWide | kCoreCq | kCoreRes;

inline uint8_t core_enc(const PktHdr& h) {
  return uint8_t((h.msg_len >> 32 ? kCoreLenWide : 0) | (h.offset >> 32 ? kCoreOffWide : 0) |
                 (h.cq_data ? kCoreCq : 0) | (h.reserved ? kCoreRes : 0));
}
inline size_t core_len_of(uint8_t enc) {
  return kCoreMin + (enc & kCoreLenWide ? 4 : 0) + (enc & kCoreOffWide ? 4 : 0) + (enc & kCoreCq ? 8 : 0) +
         (enc & kCoreRes ? 2 : 0);
}
// The bytes encode_core writes for h.
inline size_t core_len(const PktHdr& h) { return core_len_of(core_enc(h)); }

// A field of 8 bytes, or of 4 where it is not wide, at p + o; o moves past it.
inline void put_field(uint8_t* p, size_t& o, uint64_t v, bool wide) {
  if (wide) put64(p + o, v);
  else put32(p + o, uint32_t(v));
  o += wide ? 8 : 4;
}
inline uint64_t get_field(const uint8_t* p, size_t& o, bool wide) {
  uint64_t v = wide ? get64(p + o) : get32(p + o);
  o += wide ? 8 : 4;
  return v;
}

// Writes h at p (core_len(h) bytes); returns that length.
inline size_t encode_core(uint8_t* p, const PktHdr& h) {
  uint8_t enc = core_enc(h);
  p[0] = h.op;
  p[1] = h.flags;
  p[2] = enc;
  put64(p + 3, h.msg_id);
  put64(p + 11, h.tag);
  size_t o = 19;
  put_field(p, o, h.msg_len, enc & kCoreLenWide);
  put_field(p, o, h.offset, enc & kCoreOffWide);
  if (enc & kCoreCq) put_field(p, o, h.cq_data, true);
  if (enc & kCoreRes) {
    put16(p + o, h.reserved);
    o += 2;
  }
  return o;
}

// The core header's length at p, a record of `avail` bytes (header and
// payload): 0 when it does not fit or names a field not defined.
inline size_t core_fits(const uint8_t* p, size_t avail) {
  if (avail < kCoreMin || (p[2] & ~kCoreKnown)) return 0;
  size_t n = core_len_of(p[2]);
  return n <= avail ? n : 0;
}

// Decodes the record at p of `avail` bytes that core_fits accepted:
// seg_len is the payload's length (avail minus the header). Returns the
// header's length.
inline size_t decode_core(const uint8_t* p, size_t avail, PktHdr* out) {
  PktHdr h{};
  uint8_t enc = p[2];
  h.op = p[0];
  h.flags = p[1];
  h.msg_id = get64(p + 3);
  h.tag = get64(p + 11);
  size_t o = 19;
  h.msg_len = get_field(p, o, enc & kCoreLenWide);
  h.offset = get_field(p, o, enc & kCoreOffWide);
  if (enc & kCoreCq) h.cq_data = get_field(p, o, true);
  if (enc & kCoreRes) {
    h.reserved = get16(p + o);
    o += 2;
  }
  h.seg_len = uint32_t(avail - o);
  *out = h;
  return o;
}

// Whether a bundle's records tile its body exactly, each holding a whole
// core header (core_fits): walked once, before anything is delivered.
inline bool bundle_valid(const uint8_t* body, size_t len) {
  size_t off = 0, n = 0;
  while (off < len) {
    if (len - off < kRecHdr) return false;
    size_t r = size_t(body[off]) | (size_t(body[off + 1]) << 8);
    if (r > len - off - kRecHdr || !core_fits(body + off + kRecHdr, r)) return false;
    off += kRecHdr + r;
    n++;
  }
  return n >= 2;
}

// Wrap-safe comparison of 32-bit sequence numbers.
inline bool seq_lt(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
inline bool seq_le(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }

uint32_t crc32c(uint32_t crc, const void* data, size_t len);
// The payload's part of the frame checksum (see eth_crc.cpp).
uint32_t payload_sum(const void* data, size_t len);
// The sum of a then b, as payload_sum of the two put together.
uint32_t payload_sum2(const void* a, size_t alen, const void* b, size_t blen);
// The same sum computed word by word, without vector instructions.
uint32_t payload_sum_portable(const void* data, size_t len);
// The same sum by one implementation (tests): 0 portable, 1 SSE2, 2 AVX2;
// false where that one cannot run here.
bool payload_sum_by(int path, const void* data, size_t len, uint32_t* sum);
// Frame checksum: CRC32C of the pmeth header (checksum and MAC fields 0)
// XOR the payload sum.
inline uint32_t frame_sum(const uint8_t* hdr, const uint8_t* payload, size_t len) {
  return crc32c(0, hdr, kPmHdr) ^ payload_sum(payload, len);
}

// The endpoint name (fi_getname), 64 bytes (FI_NAME_MAX):
//  0 magic 'PMET' (u32) | 4 name version u8 (2) | 5 rails u8 (1..4)
//  6 flags u8 (bit 0: the shared-memory part is valid) | 7 reserved
//  8 endpoint id (u32) | 12 shm uid (u32)
// 16 host id (u64)
// 24 shm region key (u64) | 32 shm pid (u32) | 36 reserved (u32)
// 40 MAC of rail 0..3 (4 x 6 bytes; unused rails zero)
// The shared-memory part names the endpoint's pmshm region, through which
// peers with the same host id reach it (the composite device).
constexpr size_t kMaxRails = 4;
constexpr uint8_t kNameVersion = 2;
constexpr uint8_t kNameHasShm = 1;

struct EthName {
  uint32_t ep_id = 0;
  uint64_t host = 0;
  uint8_t rails = 1;
  uint8_t mac[kMaxRails][6] = {};
  bool has_shm = false;
  uint32_t shm_uid = 0, shm_pid = 0;
  uint64_t shm_key = 0;
};
constexpr uint32_t kNameMagic = 0x54454d50;  // "PMET"
constexpr size_t kNameLen = 64;
// A HELLO or HELLO_ACK may carry, after the name, 4 bytes of capabilities
// (little-endian; a receiver ignores bits it does not know, and an older
// one the bytes: it reads the name only).
constexpr size_t kHelloCapsLen = 4;
constexpr uint32_t kCapGso = 1;  // frames carried in GSO packets reach the sender

inline void encode_name(uint8_t* p, const EthName& n) {
  memset(p, 0, kNameLen);
  put32(p, kNameMagic);
  p[4] = kNameVersion;
  p[5] = n.rails;
  p[6] = n.has_shm ? kNameHasShm : 0;
  put32(p + 8, n.ep_id);
  put32(p + 12, n.shm_uid);
  put64(p + 16, n.host);
  put64(p + 24, n.shm_key);
  put32(p + 32, n.shm_pid);
  for (size_t r = 0; r < n.rails && r < kMaxRails; r++) memcpy(p + 40 + 6 * r, n.mac[r], 6);
}

inline bool decode_name(const void* buf, size_t len, EthName* n) {
  const uint8_t* p = static_cast<const uint8_t*>(buf);
  if (len != kNameLen || get32(p) != kNameMagic || p[4] != kNameVersion || p[5] < 1 || p[5] > kMaxRails ||
      (p[6] & ~kNameHasShm))
    return false;
  *n = EthName{};
  n->rails = p[5];
  n->has_shm = p[6] & kNameHasShm;
  n->ep_id = get32(p + 8);
  n->shm_uid = get32(p + 12);
  n->host = get64(p + 16);
  n->shm_key = get64(p + 24);
  n->shm_pid = get32(p + 32);
  for (size_t r = 0; r < n->rails; r++) memcpy(n->mac[r], p + 40 + 6 * r, 6);
  // Reserved bytes and unused rails are zero: a name is valid in one form only.
  bool zero = p[7] == 0 && get32(p + 36) == 0;
  for (size_t i = 40 + 6 * size_t(n->rails); i < kNameLen; i++) zero = zero && p[i] == 0;
  if (!n->has_shm) zero = zero && n->shm_uid == 0 && n->shm_key == 0 && n->shm_pid == 0;
  return zero && n->ep_id != 0 && (!n->has_shm || n->shm_key != 0);
}

} // namespace pm::eth
