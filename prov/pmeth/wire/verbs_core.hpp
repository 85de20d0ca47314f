// The protocol-independent half of the verbs raw-packet wire: the receive
// and send rings over one registered buffer, work-request batching and
// selective signalling, completion bookkeeping, the flow-steering rule. It
// calls the verbs library only through VerbsOps, a table of functions that
// verbs_wire.cpp fills with libibverbs calls and the unit test
// (util/test/test_verbs_core.cpp) with a fake, so that all of it is tested
// without an RDMA device.
#pragma once

#include <cstdint>
#include <vector>

#include "wire/wire.hpp"

namespace pm::eth::verbs {

struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
struct SendWr {
  uint64_t wr_id;
  Sge sge;
  bool signaled;
  bool inline_data;  // small: the data goes in the work request (IBV_SEND_INLINE)
};
struct RecvWr {
  uint64_t wr_id;
  Sge sge;
};
struct Completion {
  uint64_t wr_id;
  uint32_t byte_len;
  int status;  // 0: success (IBV_WC_SUCCESS)
};

// The verbs calls the rings make. post_*: the n work requests as one chain
// (one doorbell), 0 or a positive errno. poll_*: completions written, or < 0.
// arm_recv: request an event on the next receive completion and consume the
// events already delivered (the wire's fd becomes readable on the next one).
struct VerbsOps {
  void* ctx;
  int (*post_send)(void* ctx, const SendWr* wr, int n);
  int (*post_recv)(void* ctx, const RecvWr* wr, int n);
  int (*poll_send_cq)(void* ctx, Completion* wc, int max);
  int (*poll_recv_cq)(void* ctx, Completion* wc, int max);
  int (*arm_recv)(void* ctx);
};

struct RingConfig {
  uint32_t rx_slots = 512;      // receive buffers, all posted
  uint32_t tx_slots = 256;      // send buffers = send queue depth
  uint32_t slot_bytes = 2048;   // one frame each
  uint32_t signal_every = 32;   // a signalled send at least this often (and the last of each flush)
  uint32_t max_inline = 0;      // frames up to this size also go inline
  uint32_t max_batch = 64;      // work requests per post_send chain
};

// The flow-steering rule that brings this endpoint's frames to its QP:
// destination MAC (ours) and EtherType, both fully masked; byte order as the
// verbs structure wants it (big-endian EtherType).
struct EthFlowRule {
  uint8_t port;
  uint16_t priority;
  uint8_t dst_mac[6];
  uint8_t dst_mac_mask[6];
  uint16_t ether_type_be;
  uint16_t ether_type_mask;
};
EthFlowRule make_flow_rule(const uint8_t mac[6], uint16_t ethertype, uint8_t port);

struct RingStats {
  uint64_t posts_send = 0, posts_recv = 0;  // post calls (doorbells)
  uint64_t send_errors = 0, recv_errors = 0;  // completions with an error status
  uint64_t post_failures = 0;
};

class Rings {
 public:
  // buf: (rx_slots + tx_slots) * slot_bytes, registered under lkey; the
  // receive slots first.
  Rings(const RingConfig& cfg, const VerbsOps& ops, uint8_t* buf, uint32_t lkey);
  // Posts every receive slot. 0 or a positive errno.
  int start();

  int tx_burst(const Frame* f, int n) noexcept;
  void tx_flush() noexcept;
  int rx_burst(Frame* f, int max) noexcept;
  void rx_release() noexcept;

  uint32_t tx_free() const { return uint32_t(tx_free_.size()); }
  uint32_t sq_outstanding() const { return uint32_t(posted_seq_ - done_seq_) + uint32_t(pending_.size()); }
  uint32_t rx_posted() const { return rx_posted_; }
  const RingStats& stats() const { return st_; }
  const RingConfig& config() const { return cfg_; }

 private:
  void reclaim() noexcept;
  uint64_t slot_addr(uint32_t slot) const { return uint64_t(uintptr_t(buf_)) + uint64_t(slot) * cfg_.slot_bytes; }

  RingConfig cfg_;
  VerbsOps ops_;
  uint8_t* buf_;
  uint32_t lkey_;
  // Send side: wr_id = posting sequence number; sends complete in order, so
  // a signalled completion of s frees every slot posted up to s.
  std::vector<uint32_t> tx_free_;
  std::vector<uint32_t> in_flight_;  // slot of sequence s at s % tx_slots
  std::vector<SendWr> pending_;      // built, not yet posted
  uint64_t next_seq_ = 0, posted_seq_ = 0, done_seq_ = 0;
  uint32_t since_signal_ = 0;
  // Receive side.
  std::vector<Completion> rx_wc_;
  std::vector<uint32_t> rx_taken_;
  std::vector<RecvWr> rx_repost_;
  uint32_t rx_posted_ = 0;
  bool armed_ = false;
  std::vector<Completion> tx_wc_;
  RingStats st_;
};

}  // namespace pm::eth::verbs
