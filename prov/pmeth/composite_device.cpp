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

PeerId CompositeDevice::bind(Kind kind, PeerId sub, const void* name) noexcept {
  if (sub == kNoPeer) return kNoPeer;
  try {
    std::vector<PeerId>& m = by_sub_[kind];
    if (sub >= m.size()) m.resize(size_t(sub) + 1, kNoPeer);
    PeerId id = m[sub];
    if (id == kNoPeer) {
      id = PeerId(peers_.size());
      peers_.push_back(Peer{kind, sub});
      m[sub] = id;
    }
    Peer& p = peers_[id];
    if (name && !p.name_known) {
      memcpy(p.name, name, kNameLen);
      p.name_known = true;
    }
    return id;
  } catch (...) {
    return kNoPeer;
  }
}

// Same host id and a shared-memory part: shared memory. Otherwise Ethernet.
PeerId CompositeDevice::resolve(const void* name, size_t len) noexcept {
  EthName n;
  if (!decode_name(name, len, &n)) return kNoPeer;
  if (n.has_shm && n.host == eth_->self().host) {
    shm::ShmName s{shm::kNameMagic, shm::kVersion, 0, n.shm_uid, n.shm_pid, n.shm_key, n.host};
    return bind(kShm, shm_->resolve(&s, sizeof s), name);
  }
  return bind(kEth, eth_->resolve(name, len), name);
}

// A sender not bound yet (UpSink looked first): named by what its device
// learnt (the handshake's name, or the alias in its shared-memory region).
PeerId CompositeDevice::up_id(Kind kind, PeerId sub) noexcept {
  const void* name = nullptr;
  size_t len = 0;
  if (kind == kShm) {
    if (!shm_->peer_alias(sub, &name, &len) || len != kNameLen) name = nullptr;
  } else {
    name = eth_->peer_name(sub, &len);
  }
  return bind(kind, sub, name);
}

bool CompositeDevice::UpSink::on_packet(const RxPacket& pkt) noexcept {
  RxPacket q = pkt;
  const std::vector<PeerId>& m = self->by_sub_[kind];
  q.peer = pkt.peer < m.size() && m[pkt.peer] != kNoPeer ? m[pkt.peer] : self->up_id(kind, pkt.peer);
  return q.peer == kNoPeer || up->on_packet(q);
}

void CompositeDevice::UpSink::on_peer_reset(PeerId peer) noexcept {
  const std::vector<PeerId>& m = self->by_sub_[kind];
  if (peer < m.size() && m[peer] != kNoPeer) up->on_peer_reset(m[peer]);
}

const void* CompositeDevice::peer_name(PeerId peer, size_t* len) const noexcept {
  if (peer >= peers_.size()) return nullptr;
  const Peer& p = peers_[peer];
  if (p.name_known) {
    *len = kNameLen;
    return p.name;
  }
  return p.kind == kEth ? eth_->peer_name(p.sub, len) : nullptr;
}

// One progress engine: an empty poll is a read of the shared-memory queue
// and of each rail's ring (of the rings only every kEthIdleVisit polls while
// no peer is bound to Ethernet).
int CompositeDevice::poll(PacketSink& sink, int budget) noexcept {
  sinks_[kShm].up = &sink;
  if (by_sub_[kEth].empty() && eth_skip_++ % kEthIdleVisit != 0) return shm_->poll(sinks_[kShm], budget);
  return poll_both(sink, budget);
}

// Out of line, so that poll() above is a test and a jump.
int CompositeDevice::poll_both(PacketSink& sink, int budget) noexcept {
  int n = shm_->poll(sinks_[kShm], budget);
  if (eth_->quiet()) return n;
  sinks_[kEth].up = &sink;
  return n + eth_->poll_busy(sinks_[kEth], std::max(budget - n, 1));
}

void CompositeDevice::append_stats(std::string& out, size_t max_peers) const {
  size_t count[2] = {0, 0};
  for (const Peer& p : peers_) count[p.kind]++;
  char buf[128];
  int n = snprintf(buf, sizeof buf, "composite: %zu peers through shared memory, %zu through Ethernet\n shm: ",
                   count[kShm], count[kEth]);
  out.append(buf, size_t(std::clamp(n, 0, int(sizeof buf) - 1)));
  shm_->append_stats(out, max_peers);
  out += "\n eth: ";
  eth_->append_stats(out, max_peers);
}

}  // namespace pm::eth
