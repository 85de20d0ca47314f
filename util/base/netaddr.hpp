// Node and service strings of fi_getinfo: host names and IP addresses, this
// host's interface addresses (in the caller's network namespace) and
// service numbers. Shared by the providers' address resolution.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pm {

struct IpAddr {
  int family = 0;          // AF_INET or AF_INET6
  uint8_t bytes[16] = {};  // network byte order; 4 used for AF_INET
  std::string str() const;
  bool operator==(const IpAddr& o) const;
};

// An address of one of this host's interfaces, with its prefix length.
struct IfAddr {
  std::string iface;
  IpAddr addr;
  int prefix = 0;
};

// Every address of every interface of this network namespace (getifaddrs).
std::vector<IfAddr> local_addrs();

// The addresses of a node (a numeric address or a host name), IPv4 ones
// first; false with *why when it does not resolve.
bool resolve_node(const char* node, std::vector<IpAddr>* out, std::string* why);

// Whether `a` is one of this host's addresses (or a loopback address).
bool is_local(const IpAddr& a, const std::vector<IfAddr>& locals);

// Whether `a` lies in the subnet of `net`.
bool in_subnet(const IpAddr& a, const IfAddr& net);

// A service of fi_getinfo: NULL is 0; otherwise a decimal number 0..65535.
// false with *why for anything else.
bool parse_service(const char* service, uint32_t* out, std::string* why);

} // namespace pm
