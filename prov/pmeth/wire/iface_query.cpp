#include "wire/iface_query.hpp"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/unique_fd.hpp"

namespace pm::eth {

bool query_iface(const std::string& name, IfaceFacts* out, std::string* why) {
  UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) {
    *why = std::string("socket: ") + strerror(errno);
    return false;
  }
  ifreq ifr{};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(s.get(), SIOCGIFINDEX, &ifr) != 0) {
    *why = "no interface " + name;
    return false;
  }
  IfaceFacts f;
  f.ifindex = ifr.ifr_ifindex;
  if (ioctl(s.get(), SIOCGIFMTU, &ifr) == 0) f.mtu = size_t(ifr.ifr_mtu);
  if (ioctl(s.get(), SIOCGIFHWADDR, &ifr) == 0) memcpy(f.mac, ifr.ifr_hwaddr.sa_data, 6);
  *out = f;
  return true;
}

bool iface_link_up(int fd, const std::string& name) {
  ifreq ifr{};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 || !(ifr.ifr_flags & IFF_UP)) return false;
  ethtool_value ev{};
  ev.cmd = ETHTOOL_GLINK;
  ifr.ifr_data = reinterpret_cast<char*>(&ev);
  if (ioctl(fd, SIOCETHTOOL, &ifr) == 0) return ev.data != 0;
  return ifr.ifr_flags & IFF_RUNNING;
}

} // namespace pm::eth
