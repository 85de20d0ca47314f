#include "eth_iface.hpp"

#include <dirent.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace pm::eth {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (f) std::getline(f, s);
  return s;
}

bool excluded_by_default(const std::string& n) {
  for (const char* p : {"docker", "virbr", "veth", "lo"})
    if (n.compare(0, strlen(p), p) == 0) return true;
  return false;
}

// Fills the description of one interface; "" if usable, else why not.
std::string describe(const std::string& name, Iface* out) {
  std::string dir = "/sys/class/net/" + name;
  if (access(dir.c_str(), F_OK) != 0) return "no such interface";
  int type = atoi(read_line(dir + "/type").c_str());
  if (type != 1 && type != 772) return "not an Ethernet interface (type " + std::to_string(type) + ")";
  unsigned long flags = strtoul(read_line(dir + "/flags").c_str(), nullptr, 16);
  if (!(flags & IFF_UP)) return "interface is down";
  out->name = name;
  NicDesc& d = out->nic;
  d.name = name;
  d.address = read_line(dir + "/address");
  d.mtu = size_t(atol(read_line(dir + "/mtu").c_str()));
  long speed = atol(read_line(dir + "/speed").c_str());
  d.speed = speed > 0 ? size_t(speed) * 1000000 : 0;
  std::string oper = read_line(dir + "/operstate");
  d.state = oper == "down" ? FI_LINK_DOWN : (oper == "up" || (flags & IFF_RUNNING)) ? FI_LINK_UP : FI_LINK_UNKNOWN;
  if (d.state == FI_LINK_DOWN) return "link is down";
  if (d.mtu < 256) return "MTU " + std::to_string(d.mtu) + " too small";
  char link[PATH_MAX];
  ssize_t n = readlink((dir + "/device/driver").c_str(), link, sizeof link - 1);
  if (n > 0) {
    link[n] = 0;
    const char* slash = strrchr(link, '/');
    d.driver = slash ? slash + 1 : link;
  }
  n = readlink((dir + "/device").c_str(), link, sizeof link - 1);
  if (n > 0) {
    link[n] = 0;
    const char* slash = strrchr(link, '/');
    unsigned dom, bus, dev, fn;
    if (slash && sscanf(slash + 1, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
      d.pci = true;
      d.pci_domain = uint16_t(dom);
      d.pci_bus = uint8_t(bus);
      d.pci_dev = uint8_t(dev);
      d.pci_fn = uint8_t(fn);
    }
  }
  return "";
}

// Whether CAP_NET_RAW is in the effective set (true when capget fails: the
// probe decides then).
bool cap_net_raw_effective() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return true;
  return data[CAP_NET_RAW / 32].effective & (1u << (CAP_NET_RAW % 32));
}

}  // namespace

std::string packet_socket_unavailable() {
  static std::mutex mu;
  static int kept = -1;  // a probe socket that opened, never closed
  std::lock_guard<std::mutex> g(mu);
  if (kept >= 0 && cap_net_raw_effective()) return "";
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return errno == EPERM ? "raw packet sockets need CAP_NET_RAW" : std::string("AF_PACKET: ") + strerror(errno);
  if (kept < 0) kept = fd;
  else close(fd);  // (CAP_NET_RAW came back after capget said it was gone)
  return "";
}

std::vector<Iface> find_ifaces(const std::string& list, std::vector<std::string>* skipped) {
  std::vector<std::string> names;
  if (!list.empty()) {
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      std::string n = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!n.empty()) names.push_back(n);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else if (DIR* d = opendir("/sys/class/net")) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      if (excluded_by_default(n)) {
        skipped->push_back(n + ": excluded by default (name it in FI_PMETH_IFACE to use it)");
        continue;
      }
      names.push_back(n);
    }
    closedir(d);
  }
  std::vector<Iface> out;
  for (const std::string& n : names) {
    Iface i;
    std::string why = describe(n, &i);
    if (why.empty()) out.push_back(i);
    else skipped->push_back(n + ": " + why);
  }
  return out;
}

}  // namespace pm::eth
