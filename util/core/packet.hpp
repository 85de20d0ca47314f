// The core protocol header every device carries in front of a payload.
// Devices treat it as opaque bytes; it never leaves one host in this form
// (the Ethernet device will carry it in its own wire format, explicit byte
// order included). Layout: 48 bytes, little-endian host order.
//
//  0      1      2             4                     8
//  +------+------+-------------+---------------------+
//  |  op  |flags | reserved    | seg_len             |
//  +------+------+-------------+---------------------+
//  | msg_id (sender's operation id)                  |  8
//  | tag                                             | 16
//  | cq_data                                         | 24
//  | msg_len (whole message)                         | 32
//  | offset (of this payload in the message)         | 40
//  +-------------------------------------------------+ 48
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <sys/uio.h>

namespace pm {

enum PktOp : uint8_t {
  kPktEager = 1,  // first (or only) packet of an eagerly sent message
  kPktData = 2,   // a later segment: msg_id + offset
  kPktRts = 3,    // rendezvous request; payload = sender iovs (single copy)
  kPktCts = 4,    // receiver matched a RTS; msg_len = bytes it accepts
  kPktFin = 5,    // receiver finished a single-copy read; tag = status
  // One-sided (the target executes them in its progress, after checking the
  // key, the range and the access rights of a registered region):
  kPktWrite = 6,       // tag = key, offset = target address, msg_len = total;
                       // payload = 8-byte LE segment offset + data
  kPktRead = 7,        // tag = key, offset = target address, msg_len = length
  kPktReadResp = 8,    // offset = segment offset, tag = status; payload = data
  kPktAtomic = 9,      // tag = key, offset = address, msg_len = count,
                       // reserved = op | datatype << 8; payload = operands [+ compares]
  kPktAtomicResp = 10, // tag = status; payload = the old values (fetch / compare)
  kPktRmaAck = 11,     // tag = status (0, or a positive FI_E* code)
  // A large single-copy rendezvous shared by both sides (the receiver reads
  // the head of the message while the sender writes the tail):
  kPktHelp = 12,       // receiver -> sender: write bytes [offset, offset + msg_len)
                       // of message msg_id; payload = the receiver's RemoteIov list
  kPktHelped = 13,     // sender -> receiver: tag = status of that write
  // Receiver -> sender: tag = 1: unexpected messages fill the receiver, send
  // messages above your rendezvous threshold by rendezvous (a device may
  // otherwise send them eagerly, Device::rndv_threshold); tag = 0: as before.
  kPktRndvHint = 14,
};

enum PktFlags : uint8_t {
  kPktTagged = 1u << 0,
  kPktCqData = 1u << 1,
  kPktFetch = 1u << 2,    // atomic returns the old values
  kPktCompare = 1u << 3,  // atomic carries compare values
  kPktCma = 1u << 4,      // RMA by single copy: payload = the initiator's
                          // RemoteIov list; the reply carries no data
};

// Little-endian values at any alignment (headers, payloads, MAC input):
// one load or store each (byte loops were not merged by the compiler: a
// SipHash block cost 40 instructions to load).
template <typename T>
inline T le_to_host(T v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  if constexpr (sizeof(T) == 2) return T(__builtin_bswap16(v));
  if constexpr (sizeof(T) == 4) return T(__builtin_bswap32(v));
  if constexpr (sizeof(T) == 8) return T(__builtin_bswap64(v));
#endif
  return v;
}
template <typename T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return le_to_host(v);
}
template <typename T>
inline void store_le(uint8_t* p, T v) {
  v = le_to_host(v);  // the same swap both ways
  std::memcpy(p, &v, sizeof v);
}
inline void put_le64(uint8_t* p, uint64_t v) { store_le<uint64_t>(p, v); }
inline uint64_t get_le64(const uint8_t* p) { return load_le<uint64_t>(p); }

struct PktHdr {
  uint8_t op;
  uint8_t flags;
  uint16_t reserved;
  uint32_t seg_len;
  uint64_t msg_id;
  uint64_t tag;
  uint64_t cq_data;
  uint64_t msg_len;
  uint64_t offset;
};
static_assert(std::is_trivially_copyable_v<PktHdr>);
static_assert(sizeof(PktHdr) == 48);
static_assert(offsetof(PktHdr, msg_id) == 8);
static_assert(offsetof(PktHdr, offset) == 40);

// Remote iov entry carried in a RTS payload (and HELP, single-copy RMA).
struct RemoteIov {
  uint64_t addr;
  uint64_t len;
};
static_assert(sizeof(RemoteIov) == 16);

// Buffers as the peer's single copy addresses them, and back (for
// process_vm_readv / process_vm_writev).
inline void to_remote(const struct iovec* iov, size_t cnt, RemoteIov* out) {
  for (size_t i = 0; i < cnt; i++) out[i] = RemoteIov{reinterpret_cast<uint64_t>(iov[i].iov_base), iov[i].iov_len};
}
inline void from_remote(const RemoteIov* r, size_t cnt, struct iovec* out) {
  for (size_t i = 0; i < cnt; i++) out[i] = iovec{reinterpret_cast<void*>(r[i].addr), size_t(r[i].len)};
}

} // namespace pm
