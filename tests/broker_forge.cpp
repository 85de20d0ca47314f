// What an unprivileged process can do with a socket from pmethd (run by
// tests/broker_test.sh across two namespaces):
//
//   broker_forge send <broker> <iface> <ep_id>     as the unprivileged user, side a
//   broker_forge capture <iface> <seconds> <ep_id>  as root, side b
//
// send: gets a socket from the broker, checks that its mark and receive
// filter cannot be changed, then sends one frame per case (each carrying
// "PMFORGE:<case>"): a pmeth frame as issued, and frames that forge the
// EtherType, the source address, the source endpoint id, a VLAN tag, all
// also after PACKET_QDISC_BYPASS, and one sent out of another interface
// (lo). Then it receives for a while and counts the frames side b sends to
// its endpoint id and to another one. Prints "ok"/"FAIL" lines; exit 0 when
// all hold.
// capture: sends, every 20 ms, a pmeth frame to ep_id ("PMTOME") and one to
// ep_id+1 ("PMNOTME"), and prints the cases of every "PMFORGE" frame it
// receives: "seen: <case> ...".
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "broker/broker_client.hpp"

namespace {

constexpr uint16_t kPmeth = 0x88B5;
int g_fail = 0;

void check(bool ok, const std::string& what) {
  printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) g_fail++;
}

// A frame to broadcast: Ethernet header, then the pmeth header's endpoint ids
// (destination at 22, source at 26, little-endian), then the marker at 70.
size_t build(uint8_t* f, const uint8_t* src_mac, uint16_t type, uint32_t dst_ep, uint32_t src_ep,
             const std::string& marker) {
  memset(f, 0, 128);
  memset(f, 0xff, 6);
  memcpy(f + 6, src_mac, 6);
  f[12] = uint8_t(type >> 8);
  f[13] = uint8_t(type);
  f[14] = 2;  // wire version
  for (int i = 0; i < 4; i++) {
    f[22 + i] = uint8_t(dst_ep >> (8 * i));
    f[26 + i] = uint8_t(src_ep >> (8 * i));
  }
  memcpy(f + 70, marker.data(), marker.size());
  return 128;
}

bool has(const uint8_t* f, size_t n, const std::string& m, std::string* rest = nullptr) {
  if (n < 70 + m.size() || memcmp(f + 70, m.data(), m.size()) != 0) return false;
  if (rest) rest->assign(reinterpret_cast<const char*>(f + 70 + m.size()), strnlen((const char*)f + 70 + m.size(), n - 70 - m.size()));
  return true;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int send_side(const std::string& broker, const std::string& iface, uint32_t ep) {
  pm::eth::BrokeredSocket b;
  std::string why;
  int rc = pm::eth::broker_open(broker, iface, kPmeth, ep, &b, &why);
  check(rc == 0, "the broker gives a socket on " + iface + (rc ? ": " + why : ""));
  if (rc) return 1;
  int fd = b.packet.get();
  check(socket(AF_PACKET, SOCK_RAW, 0) < 0 && errno == EPERM, "this process cannot open raw sockets itself");
  uint32_t mark = 1;
  check(setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0 && errno == EPERM,
        "SO_MARK cannot be changed (EPERM)");
  int dummy = 0;
  check(setsockopt(fd, SOL_SOCKET, SO_DETACH_FILTER, &dummy, sizeof dummy) != 0 && errno == EPERM,
        "the receive filter cannot be detached (EPERM)");
  // A second, broker-issued socket for the same endpoint id is refused.
  pm::eth::BrokeredSocket twin;
  std::string twhy, iwhy;
  int trc = pm::eth::broker_open(broker, iface, kPmeth, ep, &twin, &twhy);
  check(trc != 0, "a second socket for the same endpoint id is refused (" + twhy + ")");
  int irc = pm::eth::broker_open(broker, iface, 0x0800, ep + 7, &twin, &iwhy);
  check(irc != 0, "a socket for another EtherType is refused (" + iwhy + ")");

  uint8_t f[128];
  uint8_t spoof[6] = {0x02, 0, 0, 0, 0, 0x99};
  auto send_case = [&](const char* name, uint16_t type, const uint8_t* mac, uint32_t src_ep) {
    size_t n = build(f, mac, type, ep + 100, src_ep, std::string("PMFORGE:") + name + ";");
    ssize_t s = send(fd, f, n, 0);
    printf("sent %s: %s\n", name, s == ssize_t(n) ? "accepted by the socket" : strerror(errno));
  };
  for (int round = 0; round < 3; round++) {
    send_case("valid", kPmeth, b.mac, ep);
    send_case("ethertype", 0x0800, b.mac, ep);
    send_case("srcmac", kPmeth, spoof, ep);
    send_case("srcep", kPmeth, b.mac, ep ^ 0x1);
    send_case("vlan", 0x8100, b.mac, ep);
  }
  int one = 1;
  check(setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) == 0,
        "PACKET_QDISC_BYPASS can be set (the rule must hold anyway)");
  for (int round = 0; round < 3; round++) {
    send_case("bypass_valid", kPmeth, b.mac, ep);
    send_case("bypass_ethertype", 0x0806, b.mac, ep);
    send_case("bypass_srcmac", kPmeth, spoof, ep);
  }
  // Out of another interface of the namespace.
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = int(if_nametoindex("lo"));
  to.sll_halen = 6;
  memset(to.sll_addr, 0xff, 6);
  size_t n = build(f, b.mac, kPmeth, ep + 100, ep, "PMFORGE:other_iface;");
  ssize_t s = sendto(fd, f, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  printf("sent other_iface (lo): %s\n", s == ssize_t(n) ? "accepted by the socket" : strerror(errno));

  // Receive: frames to our id arrive, frames to another id never do, also
  // after binding the socket to every protocol.
  int mine = 0, others = 0, foreign = 0;
  auto receive = [&](double secs) {
    double end = now_s() + secs;
    while (now_s() < end) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      uint8_t r[2048];
      ssize_t k = recv(fd, r, sizeof r, MSG_DONTWAIT);
      if (k <= 0) continue;
      if (has(r, size_t(k), "PMTOME")) mine++;
      else if (has(r, size_t(k), "PMNOTME")) others++;
      else foreign++;
    }
  };
  receive(1.0);
  sockaddr_ll all{};
  all.sll_family = AF_PACKET;
  all.sll_protocol = htons(ETH_P_ALL);
  all.sll_ifindex = 0;
  check(bind(fd, reinterpret_cast<sockaddr*>(&all), sizeof all) == 0, "the socket can be rebound to every protocol and interface");
  receive(1.0);
  check(mine > 0, "frames to this endpoint arrive (" + std::to_string(mine) + ")");
  check(others == 0, "no frame to another endpoint id arrives (" + std::to_string(others) + ")");
  check(foreign == 0, "no other frame arrives, also after the rebind (" + std::to_string(foreign) + ")");
  return g_fail ? 1 : 0;
}

int capture_side(const std::string& iface, double secs, uint32_t ep) {
  int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) {
    perror("capture: socket");
    return 1;
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = int(if_nametoindex(iface.c_str()));
  if (sll.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    perror("capture: bind");
    return 1;
  }
  uint8_t mac[6] = {0x02, 0, 0, 0, 0, 0x42};
  std::set<std::string> seen;
  double end = now_s() + secs, next = 0;
  while (now_s() < end) {
    if (now_s() >= next) {
      uint8_t f[128];
      size_t n = build(f, mac, kPmeth, ep, 0x1234, "PMTOME");
      send(fd, f, n, 0);
      n = build(f, mac, kPmeth, ep + 1, 0x1234, "PMNOTME");
      send(fd, f, n, 0);
      next = now_s() + 0.02;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 10) <= 0) continue;
    uint8_t r[2048];
    sockaddr_ll from{};
    socklen_t fl = sizeof from;
    ssize_t k = recvfrom(fd, r, sizeof r, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &fl);
    if (k <= 0 || from.sll_pkttype == PACKET_OUTGOING) continue;
    std::string rest;
    if (has(r, size_t(k), "PMFORGE:", &rest)) seen.insert(rest.substr(0, rest.find(';')));
  }
  printf("seen:");
  for (const std::string& c : seen) printf(" %s", c.c_str());
  printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 5 && std::string(argv[1]) == "send")
    return send_side(argv[2], argv[3], uint32_t(strtoul(argv[4], nullptr, 0)));
  if (argc == 5 && std::string(argv[1]) == "capture")
    return capture_side(argv[2], atof(argv[3]), uint32_t(strtoul(argv[4], nullptr, 0)));
  fprintf(stderr, "usage: broker_forge send <broker> <iface> <ep_id> | capture <iface> <seconds> <ep_id>\n");
  return 2;
}
