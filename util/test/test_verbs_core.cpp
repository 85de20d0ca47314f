// The verbs wire's rings (prov/pmeth/wire/verbs_core.*) against a fake verbs
// layer: a send queue that completes in order and a receive queue that the
// test fills with frames, as a raw-packet QP would. No RDMA device needed.
#include <criterion/criterion.h>

#include <cstring>
#include <deque>
#include <vector>

#include "wire/verbs_core.hpp"

using namespace pm::eth;
using namespace pm::eth::verbs;

namespace {

struct Fake {
  // Send side: posted requests not yet completed, and what "went out".
  std::deque<SendWr> sq;
  std::vector<std::vector<uint8_t>> wire;
  std::vector<int> chain_lengths;
  std::vector<bool> inline_flags;
  int fail_next_send = 0;
  int send_status = 0;  // status of the next completions
  // Receive side: posted buffers, and completions waiting.
  std::deque<RecvWr> rq;
  std::deque<Completion> rcq;
  std::vector<int> recv_chains;
  int fail_next_recv = 0;
  int arms = 0;
  uint32_t sq_depth = 0, rq_depth = 0;
  size_t max_sq = 0;

  // The NIC sends the first n posted requests; completions for the
  // signalled ones only.
  std::deque<Completion> scq;
  void transmit(size_t n) {
    for (size_t i = 0; i < n && !sq.empty(); i++) {
      SendWr w = sq.front();
      sq.pop_front();
      const uint8_t* p = reinterpret_cast<const uint8_t*>(uintptr_t(w.sge.addr));
      wire.emplace_back(p, p + w.sge.length);
      if (w.signaled) scq.push_back(Completion{w.wr_id, w.sge.length, send_status});
    }
  }
  // A frame arrives into the oldest posted buffer.
  bool arrive(const std::vector<uint8_t>& f, int status = 0) {
    if (rq.empty()) return false;
    RecvWr w = rq.front();
    rq.pop_front();
    cr_assert_leq(f.size(), w.sge.length);
    memcpy(reinterpret_cast<void*>(uintptr_t(w.sge.addr)), f.data(), f.size());
    rcq.push_back(Completion{w.wr_id, uint32_t(f.size()), status});
    return true;
  }
};

int f_post_send(void* c, const SendWr* w, int n) {
  auto* f = static_cast<Fake*>(c);
  if (f->fail_next_send) {
    f->fail_next_send--;
    return 12;
  }
  for (int i = 0; i < n; i++) {
    f->sq.push_back(w[i]);
    f->inline_flags.push_back(w[i].inline_data);
  }
  f->max_sq = std::max(f->max_sq, f->sq.size());
  cr_assert_leq(f->sq.size(), f->sq_depth, "send queue overrun: %zu > %u", f->sq.size(), f->sq_depth);
  f->chain_lengths.push_back(n);
  return 0;
}
int f_post_recv(void* c, const RecvWr* w, int n) {
  auto* f = static_cast<Fake*>(c);
  if (f->fail_next_recv) {
    f->fail_next_recv--;
    return 12;
  }
  for (int i = 0; i < n; i++) f->rq.push_back(w[i]);
  cr_assert_leq(f->rq.size(), f->rq_depth, "receive queue overrun");
  f->recv_chains.push_back(n);
  return 0;
}
int poll_q(std::deque<Completion>& q, Completion* out, int max) {
  int n = 0;
  while (n < max && !q.empty()) {
    out[n++] = q.front();
    q.pop_front();
  }
  return n;
}
int f_poll_send(void* c, Completion* out, int max) { return poll_q(static_cast<Fake*>(c)->scq, out, max); }
int f_poll_recv(void* c, Completion* out, int max) { return poll_q(static_cast<Fake*>(c)->rcq, out, max); }
int f_arm(void* c) {
  static_cast<Fake*>(c)->arms++;
  return 0;
}

struct Setup {
  Fake fake;
  RingConfig cfg;
  std::vector<uint8_t> buf;
  std::unique_ptr<Rings> rings;
  explicit Setup(RingConfig c) : cfg(c) {
    fake.sq_depth = c.tx_slots;
    fake.rq_depth = c.rx_slots;
    buf.resize(size_t(c.rx_slots + c.tx_slots) * c.slot_bytes);
    VerbsOps ops{&fake, f_post_send, f_post_recv, f_poll_send, f_poll_recv, f_arm};
    rings = std::make_unique<Rings>(cfg, ops, buf.data(), 0x1234);
    cr_assert_eq(rings->start(), 0);
  }
};

std::vector<uint8_t> frame(size_t len, uint8_t seed) {
  std::vector<uint8_t> f(len);
  for (size_t i = 0; i < len; i++) f[i] = uint8_t(seed * 31 + i * 7);
  return f;
}

RingConfig small() {
  RingConfig c;
  c.rx_slots = 16;
  c.tx_slots = 8;
  c.slot_bytes = 256;
  c.signal_every = 4;
  c.max_batch = 4;
  c.max_inline = 32;
  return c;
}

}  // namespace

Test(verbs_core, flow_rule_matches_our_mac_and_ethertype) {
  const uint8_t mac[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
  EthFlowRule r = make_flow_rule(mac, 0x88B5, 1);
  cr_assert_eq(r.port, 1);
  cr_assert_eq(memcmp(r.dst_mac, mac, 6), 0);
  for (int i = 0; i < 6; i++) cr_assert_eq(r.dst_mac_mask[i], 0xff);
  // Big-endian in memory: 0x88 then 0xB5.
  const uint8_t* et = reinterpret_cast<const uint8_t*>(&r.ether_type_be);
  cr_assert_eq(et[0], 0x88);
  cr_assert_eq(et[1], 0xB5);
  cr_assert_eq(r.ether_type_mask, 0xffff);
}

Test(verbs_core, start_posts_every_receive_buffer_in_batches) {
  Setup s(small());
  cr_assert_eq(s.fake.rq.size(), 16u);
  cr_assert_eq(s.rings->rx_posted(), 16u);
  cr_assert_eq(s.fake.recv_chains.size(), 4u, "16 buffers in chains of 4: %zu chains", s.fake.recv_chains.size());
  for (const RecvWr& w : s.fake.rq) {
    cr_assert_eq(w.sge.lkey, 0x1234u);
    cr_assert_eq(w.sge.length, 256u);
    cr_assert_lt(w.wr_id, 16u);
    // Receive buffers are the first rx_slots slots of the buffer.
    cr_assert_eq(w.sge.addr, uint64_t(uintptr_t(s.buf.data())) + w.wr_id * 256);
  }
}

Test(verbs_core, frames_go_out_byte_for_byte_in_batched_chains) {
  Setup s(small());
  std::vector<std::vector<uint8_t>> sent;
  std::vector<Frame> fr;
  for (int i = 0; i < 6; i++) sent.push_back(frame(size_t(20 + 40 * i), uint8_t(i)));
  for (auto& f : sent) fr.push_back(Frame{f.data(), f.size()});
  cr_assert_eq(s.rings->tx_burst(fr.data(), 6), 6);
  // One chain of 4 posted at max_batch, the remaining 2 wait for the flush.
  cr_assert_eq(s.fake.sq.size(), 4u);
  s.rings->tx_flush();
  cr_assert_eq(s.fake.sq.size(), 6u);
  cr_assert_eq(s.fake.chain_lengths.size(), 2u);
  // The caller's frames may be reused at once: overwrite them.
  for (auto& f : sent) memset(f.data(), 0xee, f.size());
  s.fake.transmit(6);
  cr_assert_eq(s.fake.wire.size(), 6u);
  for (int i = 0; i < 6; i++) cr_assert(s.fake.wire[size_t(i)] == frame(size_t(20 + 40 * i), uint8_t(i)), "frame %d", i);
  // Inline only up to max_inline (32): the first frame (20 bytes).
  cr_assert(s.fake.inline_flags[0]);
  for (size_t i = 1; i < 6; i++) cr_assert_not(s.fake.inline_flags[i]);
}

Test(verbs_core, every_chain_ends_signalled_and_buffers_come_back) {
  Setup s(small());
  auto f = frame(100, 1);
  Frame fr{f.data(), f.size()};
  for (int round = 0; round < 50; round++) {
    cr_assert_eq(s.rings->tx_burst(&fr, 1), 1, "round %d", round);
    s.rings->tx_flush();
    cr_assert(s.fake.sq.back().signaled, "a chain of one is signalled");
    s.fake.transmit(1);
  }
  // 50 sends through 8 buffers: they were reclaimed from the completions.
  s.rings->tx_burst(&fr, 0);
  cr_assert_eq(s.rings->tx_free(), 8u);
  cr_assert_eq(s.fake.wire.size(), 50u);
}

Test(verbs_core, full_send_queue_takes_fewer_and_never_overruns) {
  Setup s(small());
  std::vector<std::vector<uint8_t>> fs;
  std::vector<Frame> fr;
  for (int i = 0; i < 20; i++) fs.push_back(frame(64, uint8_t(i)));
  for (auto& f : fs) fr.push_back(Frame{f.data(), f.size()});
  // Nothing completes: 8 buffers, 8 queue entries.
  int took = s.rings->tx_burst(fr.data(), 20);
  cr_assert_eq(took, 8);
  s.rings->tx_flush();
  cr_assert_eq(s.fake.sq.size(), 8u);
  cr_assert_eq(s.rings->tx_burst(fr.data() + 8, 12), 0, "no buffer while all are in flight");
  // Only signalled requests complete, and they cover the ones before them.
  int signalled = 0;
  for (const SendWr& w : s.fake.sq) signalled += w.signaled;
  cr_assert_lt(signalled, 8, "selective signalling: %d of 8 signalled", signalled);
  s.fake.transmit(8);
  cr_assert_eq(s.rings->tx_burst(fr.data() + 8, 12), 8);
  s.rings->tx_flush();
  s.fake.transmit(8);
  for (int i = 0; i < 16; i++) cr_assert(s.fake.wire[size_t(i)] == fs[size_t(i)], "frame %d", i);
  cr_assert_leq(s.fake.max_sq, 8u);
}

Test(verbs_core, send_error_completions_are_counted_and_buffers_freed) {
  Setup s(small());
  auto f = frame(64, 3);
  Frame fr[4] = {{f.data(), 64}, {f.data(), 64}, {f.data(), 64}, {f.data(), 64}};
  s.fake.send_status = 5;  // e.g. IBV_WC_WR_FLUSH_ERR
  cr_assert_eq(s.rings->tx_burst(fr, 4), 4);
  s.rings->tx_flush();
  s.fake.transmit(4);
  s.rings->tx_burst(fr, 0);
  cr_assert_eq(s.rings->stats().send_errors, 1u);  // one signalled completion for the chain
  cr_assert_eq(s.rings->tx_free(), 8u);
}

Test(verbs_core, failed_post_gives_the_buffers_back) {
  Setup s(small());
  auto f = frame(64, 4);
  Frame fr[2] = {{f.data(), 64}, {f.data(), 64}};
  s.fake.fail_next_send = 1;
  cr_assert_eq(s.rings->tx_burst(fr, 2), 2);
  s.rings->tx_flush();
  cr_assert_eq(s.rings->stats().post_failures, 1u);
  cr_assert_eq(s.rings->tx_free(), 8u);
  cr_assert_eq(s.rings->sq_outstanding(), 0u);
  // The next sends get fresh sequence numbers that the fake completes.
  cr_assert_eq(s.rings->tx_burst(fr, 2), 2);
  s.rings->tx_flush();
  s.fake.transmit(2);
  s.rings->tx_burst(fr, 0);
  cr_assert_eq(s.rings->tx_free(), 8u);
  cr_assert_eq(s.fake.wire.size(), 2u);
}

Test(verbs_core, oversized_frame_is_not_taken) {
  Setup s(small());
  auto big = frame(257, 5);
  Frame fr{big.data(), big.size()};
  cr_assert_eq(s.rings->tx_burst(&fr, 1), 0);
}

Test(verbs_core, received_frames_are_delivered_and_buffers_reposted) {
  Setup s(small());
  std::vector<std::vector<uint8_t>> in;
  for (int i = 0; i < 10; i++) in.push_back(frame(size_t(60 + i * 19), uint8_t(100 + i)));
  for (auto& f : in) cr_assert(s.fake.arrive(f));
  cr_assert_eq(s.rings->rx_posted(), 16u, "the rings learn of arrivals from completions only");
  Frame got[16];
  int n = s.rings->rx_burst(got, 16);
  cr_assert_eq(n, 10);
  cr_assert_eq(s.rings->rx_posted(), 6u);
  for (int i = 0; i < n; i++) {
    cr_assert_eq(got[i].len, in[size_t(i)].size());
    cr_assert_eq(memcmp(got[i].data, in[size_t(i)].data(), got[i].len), 0, "frame %d", i);
  }
  s.rings->rx_release();
  cr_assert_eq(s.rings->rx_posted(), 16u);
  cr_assert_eq(s.fake.rq.size(), 16u);
  // 200 more frames through 16 buffers.
  int total = 0;
  for (int i = 0; i < 200; i++) {
    auto f = frame(128, uint8_t(i));
    cr_assert(s.fake.arrive(f), "frame %d: no buffer posted", i);
    n = s.rings->rx_burst(got, 16);
    cr_assert_eq(n, 1);
    cr_assert_eq(memcmp(got[0].data, f.data(), 128), 0);
    s.rings->rx_release();
    total += n;
  }
  cr_assert_eq(total, 200);
}

Test(verbs_core, bad_receive_completions_are_dropped_and_buffer_reused) {
  Setup s(small());
  auto f = frame(80, 9);
  cr_assert(s.fake.arrive(f, 4));  // error status
  cr_assert(s.fake.arrive(f));
  s.fake.rcq.push_back(Completion{999, 10, 0});  // not a buffer of ours
  Frame got[4];
  int n = s.rings->rx_burst(got, 4);
  cr_assert_eq(n, 1);
  cr_assert_eq(got[0].len, 80u);
  cr_assert_eq(s.rings->stats().recv_errors, 2u);
  s.rings->rx_release();
  cr_assert_eq(s.rings->rx_posted(), 16u, "both buffers of ours posted again");
}

Test(verbs_core, failed_repost_is_retried) {
  Setup s(small());
  auto f = frame(80, 9);
  cr_assert(s.fake.arrive(f));
  Frame got[4];
  cr_assert_eq(s.rings->rx_burst(got, 4), 1);
  s.fake.fail_next_recv = 1;
  s.rings->rx_release();
  cr_assert_eq(s.rings->rx_posted(), 15u);
  cr_assert_eq(s.rings->rx_burst(got, 4), 0);
  s.rings->rx_release();
  cr_assert_eq(s.rings->rx_posted(), 16u);
}

Test(verbs_core, empty_poll_arms_once_until_something_arrives) {
  Setup s(small());
  Frame got[4];
  for (int i = 0; i < 5; i++) cr_assert_eq(s.rings->rx_burst(got, 4), 0);
  cr_assert_eq(s.fake.arms, 1, "armed once for a run of empty polls, not %d times", s.fake.arms);
  auto f = frame(70, 1);
  s.fake.arrive(f);
  cr_assert_eq(s.rings->rx_burst(got, 4), 1);
  s.rings->rx_release();
  cr_assert_eq(s.rings->rx_burst(got, 4), 0);
  cr_assert_eq(s.fake.arms, 2, "armed again after a completion");
}
