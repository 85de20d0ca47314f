// The provider's side of pmethd: ask the broker for a raw socket (when the
// process has no CAP_NET_RAW) or for the interfaces this user may use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"

namespace pm::eth {

struct BrokeredSocket {
  UniqueFd packet;  // AF_PACKET, bound, receive filter locked, transmit rule installed
  UniqueFd conn;    // held open while the socket is in use (closing it withdraws the rule)
  uint8_t mac[6] = {0};
};

// path: a filesystem path, or "@name" for an abstract socket (one per network
// namespace). The broker must run as root (its credentials are checked).
// Returns 0 or a negative FI_E* code with *why.
int broker_open(const std::string& path, const std::string& iface, uint16_t ethertype, uint32_t ep_id,
                BrokeredSocket* out, std::string* why);
int broker_list(const std::string& path, std::vector<std::string>* ifaces, std::string* why);

}  // namespace pm::eth
