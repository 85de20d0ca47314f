// The messages between pmeth endpoints of unprivileged processes and the
// broker pmethd (docs/pmethd.8.md), over a Unix SOCK_SEQPACKET socket: one
// fixed-size request, one fixed-size reply, and on success the AF_PACKET
// socket's descriptor by SCM_RIGHTS. The connection stays open for the
// life of that socket: when it closes, the broker withdraws the socket's
// transmit rule.
//
// Both sides validate what they receive (exact size, magic, version,
// NUL-terminated names, counts bounded): neither trusts the other's bytes.
#pragma once

#include <cstdint>

namespace pm::eth::broker {

constexpr uint32_t kMagic = 0x444d4250;  // "PBMD"
constexpr uint16_t kVersion = 1;
constexpr const char* kDefaultPath = "/run/pmethd.sock";
constexpr int kIfNameLen = 16;   // IFNAMSIZ
constexpr int kMaxIfaces = 32;   // interfaces a list reply names at most
constexpr int kReasonLen = 240;

enum Op : uint16_t {
  kOpOpen = 1,  // a raw socket on iface for ethertype and endpoint ep_id
  kOpList = 2,  // the interfaces this user may use
};

struct Request {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  char iface[kIfNameLen];  // kOpOpen: NUL-terminated interface name
  uint32_t ep_id;          // kOpOpen: the endpoint id the socket receives and sends as (not 0)
  uint16_t ethertype;      // kOpOpen: must be the broker's
  uint16_t reserved;       // 0
};

struct Reply {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  int32_t status;              // 0, or a negative FI_E* code (reason says why)
  uint32_t count;              // kOpList: entries of ifaces used (≤ kMaxIfaces)
  uint8_t mac[6];              // kOpOpen: the interface's address (the only source address allowed)
  uint16_t reserved;
  char reason[kReasonLen];     // NUL-terminated
  char ifaces[kMaxIfaces][kIfNameLen];
};

static_assert(sizeof(Request) == 32, "request layout");

}  // namespace pm::eth::broker
