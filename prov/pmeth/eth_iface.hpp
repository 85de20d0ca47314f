// Network interface discovery for pmeth: which interfaces are usable, and
// their MAC, MTU, speed, state and PCI address, read from sysfs.
#pragma once

#include <string>
#include <vector>

#include "core/nic.hpp"

namespace pm::eth {

struct Iface {
  std::string name;
  NicDesc nic;
};

// The interfaces named in `list` (comma separated), or when it is empty
// every up Ethernet interface except lo, docker*, virbr* and veth*. Each
// one skipped is named in *skipped with the reason.
std::vector<Iface> find_ifaces(const std::string& list, std::vector<std::string>* skipped);

} // namespace pm::eth
