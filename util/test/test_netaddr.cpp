// base/netaddr.hpp (fi_getinfo's node and service) and pmeth's address
// helpers (eth_addr.hpp: MAC text, well-known endpoint id claims).
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "base/netaddr.hpp"
#include "eth_addr.hpp"

namespace {
pm::IpAddr v4(const char* s) {
  pm::IpAddr a;
  a.family = AF_INET;
  cr_assert_eq(inet_pton(AF_INET, s, a.bytes), 1);
  return a;
}
}  // namespace

Test(netaddr, service_numbers) {
  uint32_t v = 7;
  std::string why;
  cr_assert(pm::parse_service(nullptr, &v, &why));
  cr_assert_eq(v, 0u);
  cr_assert(pm::parse_service("", &v, &why));
  cr_assert_eq(v, 0u);
  cr_assert(pm::parse_service("9228", &v, &why));
  cr_assert_eq(v, 9228u);
  cr_assert(pm::parse_service("65535", &v, &why));
  cr_assert_eq(v, 65535u);
  for (const char* bad : {"65536", "-1", "+5", "http", "12a", "99999999999999999999"}) {
    why.clear();
    cr_assert(!pm::parse_service(bad, &v, &why), "service %s accepted", bad);
    cr_assert(why.find(bad) != std::string::npos, "reason \"%s\" does not name %s", why.c_str(), bad);
  }
}

Test(netaddr, subnets) {
  pm::IfAddr net;
  net.iface = "x";
  net.addr = v4("192.0.2.1");
  net.prefix = 24;
  cr_assert(pm::in_subnet(v4("192.0.2.200"), net));
  cr_assert(!pm::in_subnet(v4("192.0.3.1"), net));
  net.prefix = 23;
  cr_assert(pm::in_subnet(v4("192.0.3.1"), net));
  net.prefix = 0;
  cr_assert(pm::in_subnet(v4("198.51.100.7"), net));
  net.prefix = 32;
  cr_assert(!pm::in_subnet(v4("192.0.2.2"), net));
  cr_assert(pm::in_subnet(v4("192.0.2.1"), net));
}

Test(netaddr, local_and_resolve) {
  std::vector<pm::IfAddr> locals = pm::local_addrs();
  cr_assert(pm::is_local(v4("127.0.0.1"), locals));
  cr_assert(pm::is_local(v4("127.3.4.5"), {}), "all of 127/8 is loopback");
  cr_assert(!pm::is_local(v4("198.51.100.7"), {}));
  std::vector<pm::IpAddr> out;
  std::string why;
  cr_assert(pm::resolve_node("127.0.0.1", &out, &why), "%s", why.c_str());
  cr_assert_eq(out.size(), 1u);
  std::string first = out[0].str();  // kept alive: the macro reads it after the statement
  cr_assert_str_eq(first.c_str(), "127.0.0.1");
  cr_assert(pm::resolve_node("localhost", &out, &why), "%s", why.c_str());
  cr_assert_eq(out[0].family, AF_INET, "IPv4 addresses come first");
  cr_assert(!pm::resolve_node("g00n13s.invalid", &out, &why));
  cr_assert(why.find("g00n13s") != std::string::npos, "reason: %s", why.c_str());
}

Test(eth_addr, macs) {
  uint8_t m[6];
  cr_assert(pm::eth::parse_mac("de:fe:76:f4:a7:87", m));
  cr_assert_eq(m[0], 0xde);
  cr_assert_eq(m[5], 0x87);
  cr_assert(!pm::eth::parse_mac("de:fe:76:f4:a7", m));
  cr_assert(!pm::eth::parse_mac("de:fe:76:f4:a7:87:00", m));
  cr_assert(!pm::eth::parse_mac("lo", m));
}

// A well-known id is held by one descriptor at a time, per interface, and
// free again once it is closed.
Test(eth_addr, service_claims) {
  std::string iface = "ut" + std::to_string(getpid());
  pm::UniqueFd a = pm::eth::claim_service_id(iface, 9228);
  cr_assert(bool(a));
  cr_assert(!pm::eth::claim_service_id(iface, 9228), "claimed twice");
  cr_assert(bool(pm::eth::claim_service_id(iface, 9229)), "another id is free");
  cr_assert(bool(pm::eth::claim_service_id(iface + "x", 9228)), "another interface is free");
  a.reset();
  cr_assert(bool(pm::eth::claim_service_id(iface, 9228)), "not free again after close");
  cr_assert(pm::eth::is_service_id(1) && pm::eth::is_service_id(65535));
  cr_assert(!pm::eth::is_service_id(0) && !pm::eth::is_service_id(65536));
}
