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
#include <type_traits>

namespace pm {

enum PktOp : uint8_t {
  kPktEager = 1,  // first (or only) packet of an eagerly sent message
  kPktData = 2,   // a later segment: msg_id + offset
  kPktRts = 3,    // rendezvous request; payload = sender iovs (single copy)
  kPktCts = 4,    // receiver matched a RTS; msg_len = bytes it accepts
  kPktFin = 5,    // receiver finished a single-copy read; tag = status
};

enum PktFlags : uint8_t {
  kPktTagged = 1u << 0,
  kPktCqData = 1u << 1,
};

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

// Remote iov entry carried in a RTS payload.
struct RemoteIov {
  uint64_t addr;
  uint64_t len;
};
static_assert(sizeof(RemoteIov) == 16);

} // namespace pm
