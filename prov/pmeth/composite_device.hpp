// PM/Composite (PMv2, chapter 7): one endpoint, two devices. Every peer is
// bound, when it is first resolved, to shared memory (same host id, and the
// peer has a shared-memory region) or to Ethernet (another host); the binding
// never changes, so per-peer order holds. The core above sees one device;
// one poll visits both, and one fd wakes a blocking wait on either.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "device.hpp"
#include "eth_device.hpp"
#include "shm_device.hpp"

namespace pm::eth {

class CompositeDevice final : public Device {
 private:
  enum Kind : uint8_t { kShm = 0, kEth = 1 };
  // A peer's id here is its id in its device, doubled, plus its device's
  // Kind: the fast paths find the device and its id with no table, and the
  // device checks that id as it does for any caller. The devices map
  // their ids to these (Device::set_up_ids, up_id) for what they hand up
  // and for resolve().
  // f(device, sub-device peer id) on the peer's device, called through its
  // final type (no second virtual dispatch on the fast path).
  template <class F>
  auto on(PeerId peer, F&& f) const {
    return (peer & 1) == kShm ? f(*shm_, peer >> 1) : f(*eth_, peer >> 1);
  }

 public:
  // Takes both devices; the Ethernet name gains the shared-memory part.
  static std::unique_ptr<CompositeDevice> open(std::unique_ptr<EthDevice> eth,
                                               std::unique_ptr<shm::ShmDevice> shm, int* err);

  const void* name() const noexcept override { return eth_->name(); }
  size_t name_len() const noexcept override { return eth_->name_len(); }
  std::string name_str(const void* name, size_t len) const override { return eth_->name_str(name, len); }
  PeerId resolve(const void* name, size_t len) noexcept override;
  const void* peer_name(PeerId peer, size_t* len) const noexcept override;
  size_t max_payload() const noexcept override { return std::min(eth_->max_payload(), shm_->max_payload()); }
  size_t max_payload(PeerId peer) const noexcept override {
    return on(peer, [](auto& d, PeerId q) { return d.max_payload(q); });
  }
  size_t max_payload(PeerId peer, const PktHdr& h) const noexcept override {
    return on(peer, [&](auto& d, PeerId q) { return d.max_payload(q, h); });
  }
  size_t rx_max_payload(PeerId peer) const noexcept override {
    return on(peer, [](auto& d, PeerId q) { return d.rx_max_payload(q); });
  }
  int send(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
           size_t len) noexcept override {
    return on(peer, [&](auto& d, PeerId sub) { return d.send(sub, hdr, iov, iovcnt, offset, len); });
  }
  int send_ref(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
               size_t len) noexcept override {
    return on(peer, [&](auto& d, PeerId sub) { return d.send_ref(sub, hdr, iov, iovcnt, offset, len); });
  }
  void want_ack(PeerId peer) noexcept override {
    on(peer, [](auto& d, PeerId sub) { d.want_ack(sub); });
  }
  // Until Ethernet has a peer (eth_bound_), the only frames it can have
  // queued are its own answers inside its poll, which flushes them itself.
  void flush() noexcept override {
    shm_->flush();
    if (eth_bound_) eth_->flush();
  }
  uint64_t tx_ticket(PeerId peer) const noexcept override {
    return on(peer, [](auto& d, PeerId sub) { return d.tx_ticket(sub); });
  }
  int tx_state(PeerId peer, uint64_t ticket) noexcept override {
    return on(peer, [&](auto& d, PeerId sub) { return d.tx_state(sub, ticket); });
  }
  int poll(PacketSink& sink, int budget) noexcept override;
  size_t rndv_threshold(PeerId peer, size_t thr) const noexcept override {
    return on(peer, [&](auto& d, PeerId q) { return d.rndv_threshold(q, thr); });
  }
  bool can_read_remote(PeerId peer) noexcept override {
    return on(peer, [](auto& d, PeerId sub) { return d.can_read_remote(sub); });
  }
  bool prefer_read_remote(PeerId peer, size_t len) noexcept override {
    return on(peer, [&](auto& d, PeerId sub) { return d.prefer_read_remote(sub, len); });
  }
  void note_transfer(PeerId peer, bool single, size_t len) noexcept override {
    on(peer, [&](auto& d, PeerId sub) { d.note_transfer(sub, single, len); return 0; });
  }
  ssize_t read_remote(PeerId peer, const struct iovec* local, size_t lcnt, const struct iovec* remote,
                      size_t rcnt) noexcept override {
    return on(peer, [&](auto& d, PeerId sub) { return d.read_remote(sub, local, lcnt, remote, rcnt); });
  }
  ssize_t write_remote(PeerId peer, const struct iovec* local, size_t lcnt, const struct iovec* remote,
                       size_t rcnt) noexcept override {
    return on(peer, [&](auto& d, PeerId sub) { return d.write_remote(sub, local, lcnt, remote, rcnt); });
  }
  bool peer_alive(PeerId peer) noexcept override {
    return on(peer, [](auto& d, PeerId sub) { return d.peer_alive(sub); });
  }
  int wait_fd() const noexcept override { return epfd_.get(); }
  void tick() noexcept override {
    eth_->tick();
    eth_skip_ = 0;  // the timers' turn: visit Ethernet on the next poll
  }
  bool close_drained() noexcept override {
    bool shm = shm_->close_drained(), eth = eth_->close_drained();  // both asked, always (each drains)
    return shm && eth;
  }
  uint64_t next_timer_ns() const noexcept override { return eth_->next_timer_ns(); }
  void arm_wait(bool armed) noexcept override {
    shm_->arm_wait(armed);
    eth_->arm_wait(armed);
  }
  void drain_wait() noexcept override {
    shm_->drain_wait();
    eth_->drain_wait();
    eth_skip_ = 0;  // after every wake-up (sread, counter waits, the progress thread, fi_trywait)
  }
  void append_stats(std::string& out, size_t max_peers) const override;

 private:
  CompositeDevice(std::unique_ptr<EthDevice> eth, std::unique_ptr<shm::ShmDevice> shm)
      : eth_(std::move(eth)), shm_(std::move(shm)) {
    shm_->set_up_ids(1, kShm);
    eth_->set_up_ids(1, kEth);
  }
  PeerId bind(PeerId id, const void* name) noexcept;
  [[gnu::noinline]] int poll_both(PacketSink& sink, int budget) noexcept;

  std::unique_ptr<EthDevice> eth_;
  std::unique_ptr<shm::ShmDevice> shm_;
  UniqueFd epfd_;
  // The names given to resolve(), by id (peer_name returns them; a peer
  // first heard from is named by what its device learnt).
  struct Known {
    bool known = false;
    uint8_t name[kNameLen];
  };
  std::vector<Known> names_;
  // Until Ethernet has a peer (eth_bound_: one resolved to it, or one that
  // reached its poll; every peer so far is on this host),
  // Ethernet is visited once every kEthIdleVisit polls, not on each: a
  // first frame from another host waits at most that many polls, and the
  // same-host round trip does not pay for an empty ring on every poll.
  static constexpr unsigned kEthIdleVisit = 16;
  bool eth_bound_ = false;
  unsigned eth_skip_ = 0;
};

} // namespace pm::eth
