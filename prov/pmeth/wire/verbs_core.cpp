#include "wire/verbs_core.hpp"

#include <algorithm>
#include <cstring>

namespace pm::eth::verbs {

EthFlowRule make_flow_rule(const uint8_t mac[6], uint16_t ethertype, uint8_t port) {
  EthFlowRule r{};
  r.port = port;
  r.priority = 0;
  memcpy(r.dst_mac, mac, 6);
  memset(r.dst_mac_mask, 0xff, 6);
  r.ether_type_be = __builtin_bswap16(ethertype);
  r.ether_type_mask = 0xffff;
  return r;
}

Rings::Rings(const RingConfig& cfg, const VerbsOps& ops, uint8_t* buf, uint32_t lkey)
    : cfg_(cfg), ops_(ops), buf_(buf), lkey_(lkey) {
  cfg_.signal_every = std::max(1u, std::min(cfg_.signal_every, cfg_.tx_slots));
  cfg_.max_batch = std::max(1u, cfg_.max_batch);
  for (uint32_t i = 0; i < cfg_.tx_slots; i++) tx_free_.push_back(cfg_.rx_slots + cfg_.tx_slots - 1 - i);
  in_flight_.assign(cfg_.tx_slots, ~0u);
  pending_.reserve(cfg_.max_batch);
  rx_wc_.resize(std::min<uint32_t>(cfg_.rx_slots, 256));
  tx_wc_.resize(std::min<uint32_t>(cfg_.tx_slots, 256));
  rx_taken_.reserve(cfg_.rx_slots);
  rx_repost_.reserve(cfg_.max_batch);
}

int Rings::start() {
  for (uint32_t s = 0; s < cfg_.rx_slots; s++) rx_taken_.push_back(s);
  size_t before = rx_taken_.size();
  rx_release();
  return rx_taken_.empty() ? 0 : (rx_taken_.size() == before ? 5 /* EIO */ : 12 /* ENOMEM: some posted */);
}

void Rings::reclaim() noexcept {
  int n = ops_.poll_send_cq(ops_.ctx, tx_wc_.data(), int(tx_wc_.size()));
  for (int i = 0; i < n; i++) {
    const Completion& c = tx_wc_[size_t(i)];
    if (c.status != 0) st_.send_errors++;
    // Sends complete in order: c covers every unsignalled one before it.
    if (c.wr_id < done_seq_ || c.wr_id >= posted_seq_) continue;
    for (uint64_t q = done_seq_; q <= c.wr_id; q++) {
      uint32_t slot = in_flight_[q % cfg_.tx_slots];
      if (slot != ~0u) tx_free_.push_back(slot);
    }
    done_seq_ = c.wr_id + 1;
  }
}

int Rings::tx_burst(const Frame* f, int n) noexcept {
  reclaim();
  int k = 0;
  for (; k < n; k++) {
    size_t len = f[k].len;
    if (len > cfg_.slot_bytes) break;
    if (sq_outstanding() >= cfg_.tx_slots || tx_free_.empty()) {
      tx_flush();
      reclaim();
      if (sq_outstanding() >= cfg_.tx_slots || tx_free_.empty()) break;
    }
    // Always copied into a send buffer (the caller's frame may go at once);
    // small ones also go inline (the NIC need not read the buffer).
    uint32_t slot = tx_free_.back();
    tx_free_.pop_back();
    uint64_t addr = slot_addr(slot);
    memcpy(reinterpret_cast<void*>(uintptr_t(addr)), f[k].data, len);
    uint64_t seq = next_seq_++;
    in_flight_[seq % cfg_.tx_slots] = slot;
    bool sig = ++since_signal_ >= cfg_.signal_every;
    if (sig) since_signal_ = 0;
    pending_.push_back(SendWr{seq, Sge{addr, uint32_t(len), lkey_}, sig, len <= cfg_.max_inline});
    if (pending_.size() >= cfg_.max_batch) tx_flush();
  }
  return k;
}

// One chain per call, its last request signalled, so that every send is
// eventually reported and its buffer comes back.
void Rings::tx_flush() noexcept {
  if (pending_.empty()) return;
  pending_.back().signaled = true;
  since_signal_ = 0;
  int n = int(pending_.size());
  st_.posts_send++;
  if (ops_.post_send(ops_.ctx, pending_.data(), n) != 0) {
    // Nothing of the chain was posted: the frames are lost (the reliability
    // layer resends), their buffers are free again.
    st_.post_failures++;
    for (const SendWr& w : pending_) {
      uint32_t slot = in_flight_[w.wr_id % cfg_.tx_slots];
      if (slot != ~0u) tx_free_.push_back(slot);
    }
    next_seq_ -= uint64_t(n);
  } else {
    posted_seq_ = next_seq_;
  }
  pending_.clear();
}

int Rings::rx_burst(Frame* f, int max) noexcept {
  int m = std::min<int>(max, int(rx_wc_.size()));
  int n = ops_.poll_recv_cq(ops_.ctx, rx_wc_.data(), m);
  if (n <= 0 && !armed_) {
    // Nothing: ask for an event (the fd wakes a blocked waiter), then look
    // once more so that a completion between the poll and the arming is seen.
    armed_ = ops_.arm_recv(ops_.ctx) == 0;
    n = ops_.poll_recv_cq(ops_.ctx, rx_wc_.data(), m);
  }
  if (n <= 0) return 0;
  armed_ = false;
  int out = 0;
  for (int i = 0; i < n; i++) {
    const Completion& c = rx_wc_[size_t(i)];
    if (c.wr_id >= cfg_.rx_slots) {
      st_.recv_errors++;  // not one of ours: nothing to give back
      continue;
    }
    uint32_t slot = uint32_t(c.wr_id);
    rx_posted_--;
    rx_taken_.push_back(slot);
    if (c.status != 0 || c.byte_len > cfg_.slot_bytes) {
      st_.recv_errors++;
      continue;
    }
    f[out].data = buf_ + size_t(slot) * cfg_.slot_bytes;
    f[out].len = c.byte_len;
    out++;
  }
  return out;
}

// The buffers of the last burst go back to the receive queue, a chain per
// max_batch; what cannot be posted now is retried on the next release.
void Rings::rx_release() noexcept {
  size_t done = 0;
  while (done < rx_taken_.size()) {
    rx_repost_.clear();
    for (size_t i = done; i < rx_taken_.size() && rx_repost_.size() < cfg_.max_batch; i++) {
      uint32_t s = rx_taken_[i];
      rx_repost_.push_back(RecvWr{s, Sge{slot_addr(s), cfg_.slot_bytes, lkey_}});
    }
    st_.posts_recv++;
    if (ops_.post_recv(ops_.ctx, rx_repost_.data(), int(rx_repost_.size())) != 0) {
      st_.post_failures++;
      break;
    }
    rx_posted_ += uint32_t(rx_repost_.size());
    done += rx_repost_.size();
  }
  rx_taken_.erase(rx_taken_.begin(), rx_taken_.begin() + long(done));
}

}  // namespace pm::eth::verbs
