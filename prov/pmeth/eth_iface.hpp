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

// "" when this process may open raw packet sockets, else why not (no
// CAP_NET_RAW, ...). Cheap after the first success: the probe socket is kept
// (closing an AF_PACKET socket waits for an RCU grace period, tens of ms),
// and later calls only check with capget() that CAP_NET_RAW is still
// effective. A failed probe costs no such wait and is repeated.
std::string packet_socket_unavailable();

} // namespace pm::eth
