// Client of pmethd: one connection per request; for kOpOpen it stays open
// with the socket. Every wait is bounded (kTimeoutMs) and the reply is
// checked as strictly as the broker checks requests.
#include "broker/broker_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <vector>
#include <cstring>

#include <rdma/fi_errno.h>

#include "broker/broker_proto.hpp"

namespace pm::eth {
namespace {

using broker::Reply;
using broker::Request;

constexpr int kTimeoutMs = 3000;

bool make_addr(const std::string& path, sockaddr_un* a, socklen_t* len) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a->sun_path) return false;
  memcpy(a->sun_path, path.data(), path.size());
  if (path[0] == '@') a->sun_path[0] = 0;  // abstract: the leading NUL, no terminator
  *len = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + (path[0] == '@' ? 0 : 1));
  return true;
}

// Connects and checks that the other side runs as root: anyone can bind an
// abstract name, and a broker's descriptor is trusted with our traffic.
int connect_broker(const std::string& path, UniqueFd* out, std::string* why) {
  sockaddr_un a;
  socklen_t len;
  if (!make_addr(path, &a, &len)) {
    *why = "broker path '" + path + "' is not a valid Unix socket name";
    return -FI_EINVAL;
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) {
    *why = std::string("socket: ") + strerror(errno);
    return -FI_EIO;
  }
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
    *why = "no pmethd broker at " + path + " (" + strerror(errno) + ")";
    return -FI_ENODATA;
  }
  ucred cr{};
  socklen_t cl = sizeof cr;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.uid != 0) {
    *why = "the broker at " + path + " does not run as root (uid " + std::to_string(cr.uid) + "): not trusted";
    return -FI_EACCES;
  }
  *out = std::move(fd);
  return 0;
}

// One request out, one reply (and maybe a descriptor) back, bounded in time.
int exchange(int fd, const Request& rq, Reply* rp, UniqueFd* passed, std::string* why) {
  if (send(fd, &rq, sizeof rq, MSG_NOSIGNAL) != ssize_t(sizeof rq)) {
    *why = std::string("sending to the broker: ") + strerror(errno);
    return -FI_EIO;
  }
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, kTimeoutMs) != 1) {
    *why = "the broker did not answer within " + std::to_string(kTimeoutMs) + " ms";
    return -FI_ETIMEDOUT;
  }
  iovec iov{rp, sizeof *rp};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 4)];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  // Take every descriptor that came, so none leaks whatever the verdict.
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; i++) {
      int d;
      memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof d);
      fds.emplace_back(d);
    }
  }
  if (n != ssize_t(sizeof *rp) || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || rp->magic != broker::kMagic ||
      rp->version != broker::kVersion || rp->op != rq.op) {
    *why = "malformed reply from the broker";
    return -FI_EIO;
  }
  rp->reason[broker::kReasonLen - 1] = 0;
  if (rp->status > 0 || rp->status < -4096) {
    *why = "malformed reply from the broker (status)";
    return -FI_EIO;
  }
  if (rp->status != 0) {
    *why = std::string("the broker refused: ") + rp->reason;
    return rp->status;
  }
  if (passed) {
    if (fds.size() != 1) {
      *why = "the broker's reply carried " + std::to_string(fds.size()) + " descriptors, not 1";
      return -FI_EIO;
    }
    *passed = std::move(fds[0]);
  } else if (!fds.empty()) {
    *why = "unexpected descriptor in the broker's reply";
    return -FI_EIO;
  }
  return 0;
}

Request make_request(uint16_t op) {
  Request rq{};
  rq.magic = broker::kMagic;
  rq.version = broker::kVersion;
  rq.op = op;
  return rq;
}

}  // namespace

int broker_open(const std::string& path, const std::string& iface, uint16_t ethertype, uint32_t ep_id,
                BrokeredSocket* out, std::string* why) {
  if (iface.empty() || iface.size() >= size_t(broker::kIfNameLen)) {
    *why = "interface name '" + iface + "' too long for the broker";
    return -FI_EINVAL;
  }
  UniqueFd conn;
  if (int rc = connect_broker(path, &conn, why)) return rc;
  Request rq = make_request(broker::kOpOpen);
  memcpy(rq.iface, iface.data(), iface.size());
  rq.ep_id = ep_id;
  rq.ethertype = ethertype;
  Reply rp{};
  UniqueFd pkt;
  if (int rc = exchange(conn.get(), rq, &rp, &pkt, why)) return rc;
  // It must be what was asked for: a raw packet socket.
  int dom = 0, type = 0;
  socklen_t l1 = sizeof dom, l2 = sizeof type;
  if (getsockopt(pkt.get(), SOL_SOCKET, SO_DOMAIN, &dom, &l1) != 0 ||
      getsockopt(pkt.get(), SOL_SOCKET, SO_TYPE, &type, &l2) != 0 || dom != AF_PACKET || type != SOCK_RAW) {
    *why = "the broker passed a descriptor that is not a raw packet socket";
    return -FI_EIO;
  }
  out->packet = std::move(pkt);
  out->conn = std::move(conn);
  memcpy(out->mac, rp.mac, 6);
  return 0;
}

int broker_list(const std::string& path, std::vector<std::string>* ifaces, std::string* why) {
  UniqueFd conn;
  if (int rc = connect_broker(path, &conn, why)) return rc;
  Reply rp{};
  if (int rc = exchange(conn.get(), make_request(broker::kOpList), &rp, nullptr, why)) return rc;
  if (rp.count > uint32_t(broker::kMaxIfaces)) {
    *why = "malformed reply from the broker (count)";
    return -FI_EIO;
  }
  ifaces->clear();
  for (uint32_t i = 0; i < rp.count; i++) {
    rp.ifaces[i][broker::kIfNameLen - 1] = 0;
    ifaces->emplace_back(rp.ifaces[i]);
  }
  if (ifaces->empty()) {
    *why = std::string("the broker allows this user no interface") + (rp.reason[0] ? ": " : "") + rp.reason;
    return -FI_ENODATA;
  }
  return 0;
}

}  // namespace pm::eth
