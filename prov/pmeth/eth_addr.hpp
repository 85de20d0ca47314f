// fi_getinfo's node and service for pmeth (docs/fi_pmeth.7.md, "Addressing
// by node and service"): a peer's IP address or host name becomes its MAC
// through the kernel's neighbour table, and a service number is a
// well-known endpoint id, claimed per interface by the endpoint opened for it.
#pragma once

#include <cstdint>
#include <string>

#include "base/netaddr.hpp"
#include "base/unique_fd.hpp"

namespace pm::eth {

// Endpoint ids below 2^16 are well-known (fi_getinfo's service); random
// ids are drawn above.
constexpr uint32_t kMaxServiceId = 65535;
inline bool is_service_id(uint32_t id) { return id != 0 && id <= kMaxServiceId; }

// The MAC of IPv4 neighbour `ip` on interface `iface`, read from the
// kernel's neighbour table (/proc/net/arp of this network namespace). When
// it has no complete entry, a one-byte UDP datagram to the neighbour's
// discard port (9), sent through `iface`, makes the kernel resolve it (an
// ARP request); the table is then read again every 2 ms for at most
// `timeout_ms`. false, with *why, when there is no answer.
bool neighbour_mac(const std::string& iface, const IpAddr& ip, int timeout_ms, uint8_t mac[6],
                   std::string* why);

// Holds well-known endpoint id `id` on `iface` for as long as the returned
// descriptor is open (an abstract Unix socket, which the kernel releases
// when the process dies; one namespace per network namespace, as for
// interfaces). An invalid descriptor: another endpoint holds it.
UniqueFd claim_service_id(const std::string& iface, uint32_t id);

// "aa:bb:cc:dd:ee:ff" -> 6 bytes.
bool parse_mac(const std::string& text, uint8_t mac[6]);

} // namespace pm::eth
