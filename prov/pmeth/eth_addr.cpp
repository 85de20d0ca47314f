#include "eth_addr.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace pm::eth {

namespace {
// A complete entry for `ip` on `iface` in /proc/net/arp:
// "IP address  HW type  Flags  HW address  Mask  Device".
bool arp_lookup(const std::string& iface, const std::string& ip, uint8_t mac[6]) {
  FILE* f = fopen("/proc/net/arp", "re");
  if (!f) return false;
  char line[256];
  bool found = false;
  if (!fgets(line, sizeof line, f)) {  // the header
    fclose(f);
    return false;
  }
  while (!found && fgets(line, sizeof line, f)) {
    char a[64], hw[64], dev[64];
    unsigned type = 0, flags = 0;
    if (sscanf(line, "%63s 0x%x 0x%x %63s %*s %63s", a, &type, &flags, hw, dev) != 5) continue;
    // ATF_COM (0x2): the entry has a hardware address.
    if (ip == a && iface == dev && (flags & 0x2) && parse_mac(hw, mac)) found = true;
  }
  fclose(f);
  return found;
}

uint64_t mono_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}
}  // namespace

bool parse_mac(const std::string& text, uint8_t mac[6]) {
  unsigned b[6];
  char tail;
  if (sscanf(text.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &tail) != 6)
    return false;
  for (int i = 0; i < 6; i++) mac[i] = uint8_t(b[i]);
  return true;
}

bool neighbour_mac(const std::string& iface, const IpAddr& ip, int timeout_ms, uint8_t mac[6],
                   std::string* why) {
  if (ip.family != AF_INET) {
    *why = ip.str() + ": pmeth resolves IPv4 neighbours only";
    return false;
  }
  std::string text = ip.str();
  if (arp_lookup(iface, text, mac)) return true;
  UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) {
    *why = std::string("socket: ") + strerror(errno);
    return false;
  }
  // Through the domain's interface even if a route says otherwise (needs
  // CAP_NET_RAW, which pmeth has; without it the route decides).
  (void)setsockopt(s.get(), SOL_SOCKET, SO_BINDTODEVICE, iface.c_str(), socklen_t(iface.size()));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9);  // discard
  memcpy(&sa.sin_addr, ip.bytes, 4);
  char byte = 0;
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      (send(s.get(), &byte, 1, MSG_DONTWAIT) < 0 && errno != EAGAIN)) {
    *why = "cannot send to " + text + " through " + iface + " to resolve it: " + strerror(errno);
    return false;
  }
  uint64_t deadline = mono_ms() + uint64_t(timeout_ms > 0 ? timeout_ms : 0);
  for (;;) {
    if (arp_lookup(iface, text, mac)) return true;
    if (mono_ms() >= deadline) break;
    usleep(2000);
  }
  *why = "no neighbour answered for " + text + " on " + iface + " within " + std::to_string(timeout_ms) +
         " ms (no ARP reply; FI_PMETH_RESOLVE_MS sets the wait)";
  return false;
}

UniqueFd claim_service_id(const std::string& iface, uint32_t id) {
  UniqueFd s(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) return s;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  // Abstract name: sun_path[0] is 0, the rest is the name.
  int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "pmeth/%s/%u", iface.c_str(), id);
  socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) return UniqueFd();
  return s;
}

}  // namespace pm::eth
