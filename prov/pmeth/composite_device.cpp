#include "composite_device.hpp"

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include <rdma/fi_errno.h>

namespace pm::eth {

std::unique_ptr<CompositeDevice> CompositeDevice::open(std::unique_ptr<EthDevice> eth,
                                                       std::unique_ptr<shm::ShmDevice> shm, int* err) {
  if (!eth || !shm) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  const auto* sn = static_cast<const shm::ShmName*>(shm->name());
  eth->set_shm_part(sn->uid, sn->pid, sn->key);
  shm->set_alias(eth->name(), eth->name_len());
  std::unique_ptr<CompositeDevice> c(new CompositeDevice(std::move(eth), std::move(shm)));
  c->epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!c->epfd_) {
    *err = -FI_ENOMEM;
    return nullptr;
  }
  for (int fd : {c->shm_->wait_fd(), c->eth_->wait_fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epoll_ctl(c->epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      *err = -FI_EIO;
      return nullptr;
    }
  }
  return c;
}

// Keeps the name a peer (composite id) was resolved by.
PeerId CompositeDevice::bind(PeerId id, const void* name) noexcept {
  if (id == kNoPeer) return kNoPeer;
  try {
    if (id >= names_.size()) names_.resize(size_t(id) + 1);
  } catch (...) {
    return kNoPeer;
  }
  Known& k = names_[id];
  if (!k.known) {
    memcpy(k.name, name, kNameLen);
    k.known = true;
  }
  if ((id & 1) == kEth) eth_bound_ = true;
  return id;
}

// Same host id and a shared-memory part: shared memory. Otherwise Ethernet.
PeerId CompositeDevice::resolve(const void* name, size_t len) noexcept {
  EthName n;
  if (!decode_name(name, len, &n)) return kNoPeer;
  if (n.has_shm && n.host == eth_->self().host) {
    shm::ShmName s{shm::kNameMagic, shm::kVersion, 0, n.shm_uid, n.shm_pid, n.shm_key, n.host};
    return bind(shm_->up_id(shm_->resolve(&s, sizeof s)), name);
  }
  return bind(eth_->up_id(eth_->resolve(name, len)), name);
}

// The name it was resolved by; else (a sender not resolved here) what its
// device learnt: the handshake's name, or the alias its introduction or
// shared-memory region gave at its first packet.
const void* CompositeDevice::peer_name(PeerId peer, size_t* len) const noexcept {
  if (peer < names_.size() && names_[peer].known) {
    *len = kNameLen;
    return names_[peer].name;
  }
  if ((peer & 1) == kEth) return eth_->peer_name(peer >> 1, len);
  size_t n = 0;
  const void* name = shm_->known_alias(peer >> 1, &n);
  if (!name || n != kNameLen) return nullptr;
  *len = n;
  return name;
}

// One progress engine: an empty poll is a read of the shared-memory queue
// and of each rail's ring (of the rings only every kEthIdleVisit polls while
// Ethernet has no peer).
int CompositeDevice::poll(PacketSink& sink, int budget) noexcept {
  if (!eth_bound_ && eth_skip_++ % kEthIdleVisit != 0) return shm_->poll(sink, budget);
  return poll_both(sink, budget);
}

// Out of line, so that poll() above is a test and a jump.
int CompositeDevice::poll_both(PacketSink& sink, int budget) noexcept {
  int n = shm_->poll(sink, budget);
  if (eth_->quiet()) return n;
  int m = eth_->poll_busy(sink, std::max(budget - n, 1));
  if (!eth_bound_ && eth_->has_peers()) eth_bound_ = true;  // one heard from (or answered) there
  return n + m;
}

void CompositeDevice::append_stats(std::string& out, size_t max_peers) const {
  char buf[128];
  int n = snprintf(buf, sizeof buf, "composite: %zu peers through shared memory, %zu through Ethernet\n shm: ",
                   shm_->peer_count(), eth_->peer_count());
  out.append(buf, size_t(std::clamp(n, 0, int(sizeof buf) - 1)));
  shm_->append_stats(out, max_peers);
  out += "\n eth: ";
  eth_->append_stats(out, max_peers);
}

}  // namespace pm::eth
