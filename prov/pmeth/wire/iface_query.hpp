// What every kernel-interface wire backend asks the kernel about its
// interface (slow path, ioctls on a socket of its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pm::eth {

struct IfaceFacts {
  int ifindex = 0;
  size_t mtu = 1500;
  uint8_t mac[6] = {0};
};

// False (with the reason) when there is no such interface.
bool query_iface(const std::string& name, IfaceFacts* out, std::string* why);
// Administratively up and with carrier. The carrier comes from ethtool
// (immediate); IFF_RUNNING follows the operational state, which the kernel
// may update up to a second later. fd: any socket of this network namespace.
bool iface_link_up(int fd, const std::string& name);

} // namespace pm::eth
