// pmethd: the privileged broker that lets unprivileged processes use pmeth
// (docs/pmethd.8.md). It holds CAP_NET_RAW and CAP_NET_ADMIN; a client asks
// over a Unix socket for a raw socket on an interface and gets one:
//  - bound to the interface and the pmeth EtherType, with a classic BPF
//    receive filter (that interface, that EtherType, that destination
//    endpoint id) locked with SO_LOCK_FILTER;
//  - marked (SO_MARK, which an unprivileged process cannot change), and
//    allowed to transmit by one rule of the broker's nftables table whose
//    egress chains sit on every interface of the namespace: a frame from a
//    broker-issued socket leaves only when it goes out of the interface
//    issued, with that interface's source address, the pmeth EtherType and
//    the endpoint id issued as source; every other frame from such a socket
//    is dropped and counted (also with PACKET_QDISC_BYPASS: the kernel runs
//    the egress hook for that path too, since Linux 5.17).
// The rule goes when the client's connection closes; the mark and the
// endpoint id are reused only once the socket itself is gone from
// /proc/net/packet.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/unique_fd.hpp"
#include "broker/broker_proto.hpp"

extern char** environ;

namespace pm::eth::broker {
namespace {

constexpr const char* kTable = "pmethd";
constexpr size_t kMaxClients = 4096;
constexpr size_t kMaxPerUid = 1024;

bool g_verbose = true;

void logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void logf(const char* fmt, ...) {
  if (!g_verbose) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pmethd: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

// ---- configuration -------------------------------------------------------

struct Who {
  enum Kind { kAll, kUser, kGroup } kind;
  uint32_t id;
};

struct Allow {
  std::string iface;  // or "*"
  std::vector<Who> who;
};

struct Config {
  std::string socket_path = kDefaultPath;
  uint16_t ethertype = 0x88B5;
  uint32_t mark_base = 0x504d0000;  // the high 16 bits; the low 16 number the clients
  std::vector<Allow> allows;
};

bool parse_who(const std::string& s, Who* w, std::string* why) {
  if (s == "all" || s == "*") {
    *w = {Who::kAll, 0};
    return true;
  }
  size_t colon = s.find(':');
  std::string kind = s.substr(0, colon), name = colon == std::string::npos ? "" : s.substr(colon + 1);
  if (name.empty() || (kind != "user" && kind != "group")) {
    *why = "'" + s + "' is not user:<name|uid>, group:<name|gid> or all";
    return false;
  }
  bool numeric = name.find_first_not_of("0123456789") == std::string::npos;
  if (kind == "user") {
    passwd* p = numeric ? nullptr : getpwnam(name.c_str());
    if (!numeric && !p) {
      *why = "no user " + name;
      return false;
    }
    *w = {Who::kUser, numeric ? uint32_t(strtoul(name.c_str(), nullptr, 10)) : p->pw_uid};
  } else {
    group* g = numeric ? nullptr : getgrnam(name.c_str());
    if (!numeric && !g) {
      *why = "no group " + name;
      return false;
    }
    *w = {Who::kGroup, numeric ? uint32_t(strtoul(name.c_str(), nullptr, 10)) : g->gr_gid};
  }
  return true;
}

bool parse_config(const std::string& path, Config* c, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "cannot read " + path + ": " + strerror(errno);
    return false;
  }
  std::string line;
  for (int no = 1; std::getline(in, line); no++) {
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    std::string key;
    if (!(ls >> key)) continue;
    std::vector<std::string> args;
    for (std::string a; ls >> a;) args.push_back(a);
    auto bad = [&](const std::string& m) {
      *why = path + ":" + std::to_string(no) + ": " + m;
      return false;
    };
    if (key == "socket" && args.size() == 1) {
      c->socket_path = args[0];
    } else if (key == "ethertype" && args.size() == 1) {
      unsigned long v = strtoul(args[0].c_str(), nullptr, 0);
      if (v < 0x600 || v > 0xffff) return bad("ethertype must be 0x600..0xffff");
      c->ethertype = uint16_t(v);
    } else if (key == "mark" && args.size() == 1) {
      unsigned long v = strtoul(args[0].c_str(), nullptr, 0);
      if (v == 0 || (v & 0xffff) || v > 0xffffffffUL) return bad("mark must be a nonzero multiple of 0x10000");
      c->mark_base = uint32_t(v);
    } else if (key == "allow" && args.size() >= 2) {
      Allow a{args[0], {}};
      if (a.iface != "*" && (a.iface.size() >= size_t(kIfNameLen) || a.iface.empty()))
        return bad("bad interface name " + a.iface);
      for (size_t i = 1; i < args.size(); i++) {
        std::string err;
        std::istringstream list(args[i]);
        for (std::string item; std::getline(list, item, ',');) {
          if (item.empty()) continue;
          Who w;
          if (!parse_who(item, &w, &err)) return bad(err);
          a.who.push_back(w);
        }
      }
      c->allows.push_back(a);
    } else {
      return bad("unknown or malformed line (keys: socket, ethertype, mark, allow)");
    }
  }
  return true;
}

// ---- nftables: the transmit restriction ---------------------------------

// Runs `nft -e -a -f -` with script on stdin; its output in *out.
bool run_nft(const std::string& script, std::string* out, std::string* why) {
  int in[2], res[2];
  if (pipe2(in, O_CLOEXEC) != 0) return false;
  if (pipe2(res, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, res[1], 1);
  posix_spawn_file_actions_adddup2(&fa, res[1], 2);
  const char* argv[] = {"nft", "-e", "-a", "-f", "-", nullptr};
  pid_t pid;
  int rc = posix_spawnp(&pid, "nft", &fa, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(res[1]);
  if (rc != 0) {
    close(in[1]);
    close(res[0]);
    *why = std::string("cannot run nft: ") + strerror(rc);
    return false;
  }
  (void)!write(in[1], script.data(), script.size());
  close(in[1]);
  out->clear();
  char buf[4096];
  for (ssize_t n; (n = read(res[0], buf, sizeof buf)) > 0;) out->append(buf, size_t(n));
  close(res[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    *why = "nft failed: " + *out;
    return false;
  }
  return true;
}

std::string hex32(uint32_t v) {
  char b[16];
  snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

std::string hex16(uint16_t v) {
  char b[8];
  snprintf(b, sizeof b, "0x%04x", v);
  return b;
}

std::string mac_str(const uint8_t* m) {
  char b[20];
  snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

class Firewall {
 public:
  explicit Firewall(const Config& c) : cfg_(c) {}

  // A fresh table (a previous broker's rules are gone with its clients).
  bool init(std::string* why) {
    std::string out, ignore;
    run_nft(std::string("delete table netdev ") + kTable + "\n", &out, &ignore);
    std::ostringstream s;
    s << "add table netdev " << kTable << "\n"
      << "add chain netdev " << kTable << " check\n"
      << "add rule netdev " << kTable << " check meta mark & 0xffff0000 != " << hex32(cfg_.mark_base)
      << " accept\n"
      << "add rule netdev " << kTable << " check counter drop comment \"pmethd-refused\"\n";
    if (!run_nft(s.str(), &out, why)) return false;
    return refresh_devices(why);
  }

  // An egress chain on every interface of the namespace that has none yet
  // (interfaces come and go; called before each grant and periodically).
  bool refresh_devices(std::string* why) {
    struct if_nameindex* ni = if_nameindex();
    if (!ni) {
      *why = std::string("if_nameindex: ") + strerror(errno);
      return false;
    }
    std::ostringstream s;
    std::map<unsigned, std::string> now;
    for (struct if_nameindex* p = ni; p->if_index; p++) {
      if (strpbrk(p->if_name, "\"\\ \t;{}#")) {
        // Not quotable in an nftables script: refuse to run rather than
        // leave an interface without the egress chain.
        *why = std::string("interface name '") + p->if_name + "' cannot be put in an nftables rule";
        if_freenameindex(ni);
        return false;
      }
      now[p->if_index] = p->if_name;
      auto it = hooked_.find(p->if_index);
      if (it != hooked_.end() && it->second == p->if_name) continue;
      std::string chain = "eg" + std::to_string(p->if_index) + "_" + std::to_string(++gen_);
      s << "add chain netdev " << kTable << " " << chain << " { type filter hook egress device \"" << p->if_name
        << "\" priority -500; policy accept; }\n"
        << "add rule netdev " << kTable << " " << chain << " jump check\n";
    }
    if_freenameindex(ni);
    std::string script = s.str(), out;
    if (!script.empty() && !run_nft(script, &out, why)) return false;
    hooked_ = now;
    return true;
  }

  // Allows frames of mark out of iface as (mac, ethertype, src endpoint ep).
  // Returns the rule's handle, or 0.
  uint64_t allow(uint32_t mark, const std::string& iface, const uint8_t* mac, uint32_t ep, std::string* why) {
    // The source endpoint id: bytes 26..29 of the frame, little-endian (the
    // raw match compares them as a big-endian number).
    std::ostringstream s;
    s << "insert rule netdev " << kTable << " check meta mark " << hex32(mark) << " meta oifname \"" << iface
      << "\" ether saddr " << mac_str(mac) << " ether type " << hex32(cfg_.ethertype) << " @ll,208,32 "
      << hex32(__builtin_bswap32(ep)) << " accept comment \"pmethd-" << hex32(mark) << "\"\n";
    std::string out;
    if (!run_nft(s.str(), &out, why)) return 0;
    size_t h = out.find("# handle ");
    if (h == std::string::npos) {
      *why = "nft did not say the rule's handle: " + out;
      return 0;
    }
    return strtoull(out.c_str() + h + 9, nullptr, 10);
  }

  void withdraw(uint64_t handle) {
    std::string out, why;
    if (!run_nft("delete rule netdev " + std::string(kTable) + " check handle " + std::to_string(handle) + "\n",
                 &out, &why))
      logf("cannot withdraw rule %llu: %s", (unsigned long long)handle, why.c_str());
  }

  void shutdown() {
    std::string out, why;
    run_nft(std::string("delete table netdev ") + kTable + "\n", &out, &why);
  }

 private:
  const Config& cfg_;
  std::map<unsigned, std::string> hooked_;
  unsigned gen_ = 0;
};

// ---- the raw sockets ----------------------------------------------------

// A socket on ifindex for ethertype that receives only frames for ep, with
// the filter locked, marked for the transmit rule.
int make_packet_socket(int ifindex, uint16_t ethertype, uint32_t ep, uint32_t mark, UniqueFd* out,
                       std::string* why) {
  // Protocol 0: nothing is received before bind, so nothing before the filter.
  UniqueFd fd(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
  if (!fd) {
    *why = std::string("socket: ") + strerror(errno);
    return -FI_EIO;
  }
  sock_filter code[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, uint32_t(SKF_AD_OFF + SKF_AD_IFINDEX)},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 5, uint32_t(ifindex)},
      {BPF_LD | BPF_H | BPF_ABS, 0, 0, 12},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 3, ethertype},
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, 22},  // destination endpoint id, little-endian
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, __builtin_bswap32(ep)},
      {BPF_RET | BPF_K, 0, 0, 0x40000},
      {BPF_RET | BPF_K, 0, 0, 0},
  };
  sock_fprog prog{sizeof code / sizeof code[0], code};
  int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0 ||
      setsockopt(fd.get(), SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof one) != 0 ||
      setsockopt(fd.get(), SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0) {
    *why = std::string("socket options: ") + strerror(errno);
    return -FI_EIO;
  }
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ethertype);
  sll.sll_ifindex = ifindex;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    *why = std::string("bind: ") + strerror(errno);
    return -FI_EIO;
  }
  *out = std::move(fd);
  return 0;
}

// Inodes of the packet sockets alive in this namespace.
std::set<unsigned long> live_packet_inodes() {
  std::set<unsigned long> s;
  std::ifstream in("/proc/net/packet");
  std::string line;
  std::getline(in, line);  // header; Inode is the last column
  while (std::getline(in, line)) {
    size_t sp = line.find_last_of(' ');
    if (sp != std::string::npos) s.insert(strtoul(line.c_str() + sp + 1, nullptr, 10));
  }
  return s;
}

// ---- clients -------------------------------------------------------------

struct Grant {
  uint32_t slot = 0, ep = 0;
  uint64_t rule = 0;
  unsigned long inode = 0;
};

struct Client {
  UniqueFd conn;
  ucred cred{};
  std::vector<uint32_t> groups;
  bool granted = false;
  Grant grant;
};

class Broker {
 public:
  explicit Broker(const Config& c) : cfg_(c), fw_(c) {}

  int run() {
    std::string why;
    if (!lock_namespace(&why)) {
      logf("%s", why.c_str());
      return 1;
    }
    if (!fw_.init(&why)) {
      logf("cannot install the transmit rules (nftables, netdev egress hook): %s", why.c_str());
      return 1;
    }
    if (!listen_on(&why)) {
      logf("%s", why.c_str());
      fw_.shutdown();
      return 1;
    }
    logf("listening on %s (ethertype 0x%04x, %zu allow rules)", cfg_.socket_path.c_str(), cfg_.ethertype,
         cfg_.allows.size());
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    while (true) {
      std::vector<pollfd> p;
      p.push_back({listen_.get(), POLLIN, 0});
      for (auto& c : clients_) p.push_back({c.conn.get(), POLLIN, 0});
      timespec ts{1, 0};
      int n = ppoll(p.data(), p.size(), &ts, nullptr);
      sigset_t pend;
      sigpending(&pend);
      if (sigismember(&pend, SIGTERM) || sigismember(&pend, SIGINT)) break;
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) {
        if (!fw_.refresh_devices(&why)) logf("%s", why.c_str());
        continue;
      }
      // Clients first (indices shift when one leaves), then new ones.
      for (size_t i = p.size(); i-- > 1;)
        if (p[i].revents) serve(i - 1);
      if (p[0].revents & POLLIN) accept_one();
    }
    for (auto& c : clients_)
      if (c.granted) fw_.withdraw(c.grant.rule);
    fw_.shutdown();
    if (cfg_.socket_path[0] != '@') unlink(cfg_.socket_path.c_str());
    unlink(lock_path_.c_str());
    logf("stopped");
    return 0;
  }

 private:
  // One broker per network namespace (they would share the nftables table):
  // a lock named after the namespace's inode.
  bool lock_namespace(std::string* why) {
    struct stat ns{};
    if (stat("/proc/self/ns/net", &ns) != 0) {
      *why = std::string("/proc/self/ns/net: ") + strerror(errno);
      return false;
    }
    std::string path = "/run/pmethd.net" + std::to_string((unsigned long)ns.st_ino) + ".lock";
    lock_.reset(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!lock_ || flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
      *why = errno == EWOULDBLOCK ? "another pmethd serves this network namespace (" + path + ")"
                                  : "cannot lock " + path + ": " + strerror(errno);
      return false;
    }
    lock_path_ = path;
    return true;
  }

  bool listen_on(std::string* why) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string& p = cfg_.socket_path;
    if (p.empty() || p.size() >= sizeof a.sun_path) {
      *why = "bad socket path " + p;
      return false;
    }
    memcpy(a.sun_path, p.data(), p.size());
    bool abstract = p[0] == '@';
    if (abstract) a.sun_path[0] = 0;
    else unlink(p.c_str());
    socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + p.size() + (abstract ? 0 : 1));
    listen_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listen_ || bind(listen_.get(), reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        (!abstract && chmod(p.c_str(), 0666) != 0) || listen(listen_.get(), 64) != 0) {
      *why = "cannot listen on " + p + ": " + strerror(errno);
      return false;
    }
    return true;
  }

  void accept_one() {
    UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!c) return;
    Client cl;
    socklen_t l = sizeof cl.cred;
    if (getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cl.cred, &l) != 0) return;
    size_t mine = 0;
    for (auto& o : clients_) mine += o.cred.uid == cl.cred.uid;
    if (clients_.size() >= kMaxClients || mine >= kMaxPerUid) {
      logf("uid %u: too many connections, refused", cl.cred.uid);
      return;
    }
    gid_t gs[256];
    socklen_t gl = sizeof gs;
    if (getsockopt(c.get(), SOL_SOCKET, SO_PEERGROUPS, gs, &gl) == 0)
      for (size_t i = 0; i < gl / sizeof(gid_t); i++) cl.groups.push_back(gs[i]);
    cl.conn = std::move(c);
    clients_.push_back(std::move(cl));
  }

  bool may_use(const Client& c, const std::string& iface) const {
    for (const Allow& a : cfg_.allows) {
      if (a.iface != "*" && a.iface != iface) continue;
      for (const Who& w : a.who) {
        if (w.kind == Who::kAll) return true;
        if (w.kind == Who::kUser && w.id == c.cred.uid) return true;
        if (w.kind == Who::kGroup) {
          if (w.id == c.cred.gid) return true;
          for (uint32_t g : c.groups)
            if (g == w.id) return true;
        }
      }
    }
    return false;
  }

  void reply(Client& c, Reply& r, int fd) {
    iovec iov{&r, sizeof r};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (fd >= 0) {
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      cmsghdr* h = CMSG_FIRSTHDR(&m);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(h), &fd, sizeof fd);
    }
    sendmsg(c.conn.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void refuse(Client& c, Reply& r, int status, const std::string& reason) {
    r.status = status;
    snprintf(r.reason, sizeof r.reason, "%s", reason.c_str());
    logf("pid %d uid %u: refused: %s", c.cred.pid, c.cred.uid, reason.c_str());
    reply(c, r, -1);
  }

  void drop(size_t i) {
    Client& c = clients_[i];
    if (c.granted) {
      fw_.withdraw(c.grant.rule);
      retired_.push_back(c.grant);  // its mark and id stay taken while the socket lives
      logf("pid %d uid %u: endpoint 0x%08x released", c.cred.pid, c.cred.uid, c.grant.ep);
    }
    clients_.erase(clients_.begin() + long(i));
  }

  void serve(size_t i) {
    Client& c = clients_[i];
    Request rq;
    ssize_t n = recv(c.conn.get(), &rq, sizeof rq, MSG_DONTWAIT | MSG_TRUNC);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return drop(i);
    if (n < 0) return;
    if (c.granted || n != ssize_t(sizeof rq) || rq.magic != kMagic || rq.version != kVersion) {
      logf("pid %d uid %u: malformed or repeated request (%zd bytes), connection closed", c.cred.pid, c.cred.uid, n);
      return drop(i);
    }
    Reply r{};
    r.magic = kMagic;
    r.version = kVersion;
    r.op = rq.op;
    if (rq.op == kOpList) return list(c, r);
    if (rq.op != kOpOpen) return refuse(c, r, -FI_EINVAL, "unknown operation");
    if (memchr(rq.iface, 0, sizeof rq.iface) == nullptr || rq.iface[0] == 0)
      return refuse(c, r, -FI_EINVAL, "interface name not terminated");
    std::string iface = rq.iface;
    // The name goes into an nftables rule: only the characters interface
    // names normally have.
    if (iface.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-@") !=
        std::string::npos)
      return refuse(c, r, -FI_EINVAL, "interface name with unusual characters: not served");
    if (rq.ethertype != cfg_.ethertype || rq.reserved != 0)
      return refuse(c, r, -FI_EINVAL, "EtherType " + hex16(rq.ethertype) + " is not pmeth's (" +
                                          hex16(cfg_.ethertype) + ") on this broker");
    if (rq.ep_id == 0) return refuse(c, r, -FI_EINVAL, "endpoint id 0");
    if (!may_use(c, iface))
      return refuse(c, r, -FI_EACCES, "uid " + std::to_string(c.cred.uid) + " may not use " + iface +
                                          " (pmethd configuration)");
    int ifindex = int(if_nametoindex(iface.c_str()));
    if (ifindex == 0) return refuse(c, r, -FI_ENODEV, "no interface " + iface + " in the broker's namespace");
    reap_retired();
    if (ep_taken(rq.ep_id)) return refuse(c, r, -FI_EADDRINUSE, "endpoint id " + hex32(rq.ep_id) + " in use");
    uint32_t slot = free_slot();
    if (slot == 0) return refuse(c, r, -FI_EAGAIN, "no free socket mark");
    std::string why;
    uint8_t mac[6];
    if (!iface_mac(iface, mac)) return refuse(c, r, -FI_ENODEV, "cannot read the address of " + iface);
    if (!fw_.refresh_devices(&why)) return refuse(c, r, -FI_EIO, why);
    uint32_t mark = cfg_.mark_base | slot;
    UniqueFd pkt;
    if (int rc = make_packet_socket(ifindex, cfg_.ethertype, rq.ep_id, mark, &pkt, &why))
      return refuse(c, r, rc, why);
    uint64_t rule = fw_.allow(mark, iface, mac, rq.ep_id, &why);
    if (!rule) return refuse(c, r, -FI_EIO, why);
    struct stat st{};
    fstat(pkt.get(), &st);
    c.granted = true;
    c.grant = {slot, rq.ep_id, rule, (unsigned long)st.st_ino};
    memcpy(r.mac, mac, 6);
    reply(c, r, pkt.get());
    logf("pid %d uid %u: socket on %s for endpoint 0x%08x (mark %s)", c.cred.pid, c.cred.uid, iface.c_str(),
         rq.ep_id, hex32(mark).c_str());
  }

  void list(Client& c, Reply& r) {
    struct if_nameindex* ni = if_nameindex();
    for (struct if_nameindex* p = ni; p && p->if_index && r.count < uint32_t(kMaxIfaces); p++)
      if (may_use(c, p->if_name) && strlen(p->if_name) < size_t(kIfNameLen))
        snprintf(r.ifaces[r.count++], kIfNameLen, "%s", p->if_name);
    if (ni) if_freenameindex(ni);
    if (r.count == 0)
      snprintf(r.reason, sizeof r.reason, "uid %u may use no interface here (pmethd configuration)", c.cred.uid);
    reply(c, r, -1);
  }

  static bool iface_mac(const std::string& iface, uint8_t* mac) {
    UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq ifr{};
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", iface.c_str());
    if (!s || ioctl(s.get(), SIOCGIFHWADDR, &ifr) != 0) return false;
    memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
    return true;
  }

  // Retired grants whose socket is gone free their mark and id.
  void reap_retired() {
    if (retired_.empty()) return;
    std::set<unsigned long> live = live_packet_inodes();
    std::vector<Grant> keep;
    for (const Grant& g : retired_)
      if (live.count(g.inode)) keep.push_back(g);
    retired_.swap(keep);
  }

  bool ep_taken(uint32_t ep) const {
    for (auto& c : clients_)
      if (c.granted && c.grant.ep == ep) return true;
    for (auto& g : retired_)
      if (g.ep == ep) return true;
    return false;
  }

  uint32_t free_slot() const {
    std::set<uint32_t> used;
    for (auto& c : clients_)
      if (c.granted) used.insert(c.grant.slot);
    for (auto& g : retired_) used.insert(g.slot);
    for (uint32_t s = 1; s <= 0xffff; s++)
      if (!used.count(s)) return s;
    return 0;
  }

  const Config& cfg_;
  Firewall fw_;
  UniqueFd listen_, lock_;
  std::string lock_path_;
  std::vector<Client> clients_;
  std::vector<Grant> retired_;
};

int usage() {
  fprintf(stderr,
          "usage: pmethd [-c config] [-s socket] [-q] [--check]\n"
          "  -c config   configuration file (default /etc/pmethd.conf)\n"
          "  -s socket   Unix socket path, or @name (abstract, per network namespace)\n"
          "  -q          quiet (no log on stderr)\n"
          "  --check     parse the configuration and exit\n");
  return 2;
}

}  // namespace
}  // namespace pm::eth::broker

int main(int argc, char** argv) {
  using namespace pm::eth::broker;
  std::string conf = "/etc/pmethd.conf", sock;
  bool check = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-c" && i + 1 < argc) conf = argv[++i];
    else if (a == "-s" && i + 1 < argc) sock = argv[++i];
    else if (a == "-q") g_verbose = false;
    else if (a == "--check") check = true;
    else return usage();
  }
  Config cfg;
  std::string why;
  if (!parse_config(conf, &cfg, &why)) {
    fprintf(stderr, "pmethd: %s\n", why.c_str());
    return 1;
  }
  if (!sock.empty()) cfg.socket_path = sock;
  if (check) {
    printf("pmethd: %s: socket %s, ethertype 0x%04x, mark 0x%08x, %zu allow rules\n", conf.c_str(),
           cfg.socket_path.c_str(), cfg.ethertype, cfg.mark_base, cfg.allows.size());
    return 0;
  }
  Broker b(cfg);
  return b.run();
}
