#include "base/netaddr.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace pm {

namespace {
bool from_sockaddr(const sockaddr* sa, IpAddr* out) {
  if (!sa) return false;
  *out = IpAddr{};
  if (sa->sa_family == AF_INET) {
    out->family = AF_INET;
    memcpy(out->bytes, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, 4);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    out->family = AF_INET6;
    memcpy(out->bytes, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    return true;
  }
  return false;
}

int prefix_len(const sockaddr* mask) {
  IpAddr m;
  if (!from_sockaddr(mask, &m)) return 0;
  int n = 0;
  for (int i = 0; i < (m.family == AF_INET ? 4 : 16); i++) n += __builtin_popcount(m.bytes[i]);
  return n;
}
}  // namespace

std::string IpAddr::str() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (family) inet_ntop(family, bytes, buf, sizeof buf);
  return buf;
}

bool IpAddr::operator==(const IpAddr& o) const {
  return family == o.family && memcmp(bytes, o.bytes, family == AF_INET ? 4 : 16) == 0;
}

std::vector<IfAddr> local_addrs() {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    IfAddr a;
    if (!i->ifa_name || !from_sockaddr(i->ifa_addr, &a.addr)) continue;
    a.iface = i->ifa_name;
    a.prefix = prefix_len(i->ifa_netmask);
    out.push_back(a);
  }
  freeifaddrs(list);
  return out;
}

bool resolve_node(const char* node, std::vector<IpAddr>* out, std::string* why) {
  out->clear();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(node, nullptr, &hints, &res);
  if (rc != 0) {
    *why = std::string("cannot resolve node \"") + node + "\": " + gai_strerror(rc);
    return false;
  }
  for (int fam : {AF_INET, AF_INET6})
    for (addrinfo* r = res; r; r = r->ai_next) {
      IpAddr a;
      if (r->ai_family != fam || !from_sockaddr(r->ai_addr, &a)) continue;
      bool dup = false;
      for (const IpAddr& b : *out) dup = dup || b == a;
      if (!dup) out->push_back(a);
    }
  freeaddrinfo(res);
  if (out->empty()) {
    *why = std::string("node \"") + node + "\" has no IP address";
    return false;
  }
  return true;
}

bool is_local(const IpAddr& a, const std::vector<IfAddr>& locals) {
  if (a.family == AF_INET && a.bytes[0] == 127) return true;
  if (a.family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(reinterpret_cast<const in6_addr*>(a.bytes))) return true;
  for (const IfAddr& l : locals)
    if (l.addr == a) return true;
  return false;
}

bool in_subnet(const IpAddr& a, const IfAddr& net) {
  if (a.family != net.addr.family) return false;
  int bits = net.prefix;
  for (int i = 0; bits > 0; i++, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : uint8_t(0xff << (8 - bits));
    if ((a.bytes[i] & mask) != (net.addr.bytes[i] & mask)) return false;
  }
  return true;
}

bool parse_service(const char* service, uint32_t* out, std::string* why) {
  *out = 0;
  if (!service || !*service) return true;
  char* end = nullptr;
  errno = 0;
  unsigned long v = strtoul(service, &end, 10);
  if (*end || errno || v > 65535 || service[0] == '-' || service[0] == '+') {
    *why = std::string("service \"") + service + "\" is not a number from 0 to 65535";
    return false;
  }
  *out = uint32_t(v);
  return true;
}

}  // namespace pm
