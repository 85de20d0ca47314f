// The pmeth device's reliability protocol end to end: two or three EthDevices
// of one process on an in-process loopback segment (a fresh segment per
// test), with the segment's programmable faults (drop, dup, reorder, corrupt,
// delay); raw frames crafted by hand on another LoopWire of the segment for
// the frame format and the malformed-frame checks.
#include <criterion/criterion.h>

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "device.hpp"
#include "eth_device.hpp"
#include "eth_wire.hpp"
#include "wire/loop_wire.hpp"
#include "wire/wire.hpp"
#include "packet_recorder.hpp"

using pm::kNoPeer;
using pm::PeerId;
using pm::PktHdr;
using pm::eth::DeviceConfig;
using pm::eth::EthDevice;
using pm::eth::EthName;
using pm::eth::Frame;
using pm::eth::FrameHdr;
using pm::eth::LoopFaults;
using pm::eth::Wire;
using pm::eth::WireConfig;

namespace {

constexpr uint64_t kHost = 0x0123456789abcdefull;
constexpr uint32_t kJob = 7;
constexpr uint32_t kWindow = 32;
constexpr size_t kMaxPayload = 1500 - pm::eth::kPmHdr - pm::eth::kCoreHdr;  // loop wire MTU 1500

// --- fixture ----------------------------------------------------------------
// Criterion runs every test in its own process: the segment registry starts
// empty; the name still carries the pid and a counter so that no two
// segments of a test collide.
std::string g_seg;
int g_seg_count = 0;
std::unique_ptr<EthDevice> g_a, g_b, g_c;
std::unique_ptr<Wire> g_raw;

std::string new_segment() {
  char buf[64];
  snprintf(buf, sizeof buf, "pmut-eth-%d-%d", int(getpid()), g_seg_count++);
  return buf;
}

void setup() { g_seg = new_segment(); }

void teardown() {
  g_raw.reset();
  g_c.reset();
  g_b.reset();
  g_a.reset();
}

DeviceConfig config() {
  DeviceConfig cfg;
  cfg.job = kJob;
  cfg.host = kHost;
  cfg.window = kWindow;
  cfg.ack_every = 32;  // one immediate ACK per full window of the tests
  cfg.rto_init_us = 500;
  cfg.rto_min_us = 200;
  cfg.rto_max_us = 20000;
  cfg.retries = 6;
  cfg.dead_ms = 400;  // unreachable after the retries and 400 ms without a word
  cfg.bundle = false;  // one frame per send (the bundling tests turn it on)
  // A test process descheduled for 10 ms (a loaded CI machine) must not
  // find its window stale in the middle of a burst; the stale window's own
  // test sets it.
  cfg.stale_window_ms = 0;
  return cfg;
}

// Slow timers: step-by-step tests where no timer may fire between steps.
DeviceConfig slow_config() {
  DeviceConfig cfg = config();
  cfg.delayed_ack_us = 0;  // the ACK goes at the end of the poll that took the DATA
  cfg.rto_init_us = 50000;
  cfg.rto_min_us = 50000;
  cfg.rto_max_us = 100000;
  return cfg;
}

// gso: the loop wire with the AF_PACKET wire's GSO-mode sizes (loop_wire.hpp).
std::unique_ptr<Wire> open_wire(uint32_t ep, const std::string& seg, bool gso = false) {
  WireConfig wc{seg, pm::eth::kDefaultEtherType, ep, 0, 0};
  wc.gso = gso;
  int err = 0;
  std::string why;
  std::unique_ptr<Wire> w = pm::eth::open_loop_wire(wc, &err, &why);
  cr_assert_not_null(w.get(), "open_loop_wire: %d %s", err, why.c_str());
  return w;
}

// `wire_ep` is the endpoint id the loop wire routes to (normally ep).
std::unique_ptr<EthDevice> open_dev(uint32_t ep, const DeviceConfig& cfg = config(),
                                    const std::string& seg = g_seg, uint32_t wire_ep = 0) {
  std::unique_ptr<EthDevice> d = EthDevice::open(cfg, open_wire(wire_ep ? wire_ep : ep, seg), ep);
  cr_assert_not_null(d.get());
  return d;
}

PeerId resolve(EthDevice& at, const EthDevice& who) {
  PeerId id = at.resolve(who.name(), who.name_len());
  cr_assert_neq(id, kNoPeer);
  return id;
}

// The name of an endpoint of the segment's MAC that has no device.
std::vector<uint8_t> ghost_name(const EthDevice& same_segment, uint32_t ep) {
  EthName n;
  cr_assert(pm::eth::decode_name(same_segment.name(), same_segment.name_len(), &n));
  n.ep_id = ep;
  std::vector<uint8_t> b(pm::eth::kNameLen);
  pm::eth::encode_name(b.data(), n);
  return b;
}

void set_faults(const LoopFaults& f, const std::string& seg = g_seg) { pm::eth::loop_set_faults(seg, f); }

// --- packets ----------------------------------------------------------------
// Got and Recorder: packet_recorder.hpp
Recorder g_ra, g_rb, g_rc;

PktHdr make_hdr(uint64_t i, size_t len) {
  PktHdr h{};
  h.op = uint8_t(i % 3 == 0 ? pm::kPktEager : i % 3 == 1 ? pm::kPktData : pm::kPktRts);
  h.flags = uint8_t(i & 1 ? pm::kPktTagged : pm::kPktCqData);
  h.reserved = uint16_t(0xa5a5 ^ i);
  h.seg_len = uint32_t(len);
  h.msg_id = 0x1000 + i;
  h.tag = 0xfeed000000000000ull | i;
  h.cq_data = ~i;
  h.msg_len = len + 1000 + i;
  h.offset = i * 7 + 0x0102030405060708ull;
  return h;
}

std::vector<uint8_t> payload(uint64_t i, size_t len) {
  std::vector<uint8_t> v(len);
  uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;
  for (auto& c : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = uint8_t(x);
  }
  return v;
}

// Sends packet i of `len` bytes from two iov entries, at an offset.
int send_pkt(EthDevice& from, PeerId to, uint64_t i, size_t len) {
  std::vector<uint8_t> p = payload(i, len);
  std::vector<uint8_t> buf(len + 3, 0xee);
  std::copy(p.begin(), p.end(), buf.begin() + 3);
  size_t cut = (len + 3) / 2;
  struct iovec iov[2] = {{buf.data(), cut}, {buf.data() + cut, len + 3 - cut}};
  return from.send(to, make_hdr(i, len), iov, 2, 3, len);
}

void check_pkt(const Got& g, PeerId peer, uint64_t i, size_t len) {
  cr_assert_eq(g.peer, peer, "packet %" PRIu64 " from peer %u, want %u", i, g.peer, peer);
  PktHdr want = make_hdr(i, len);
  cr_assert_eq(memcmp(&g.hdr, &want, sizeof want), 0, "header of packet %" PRIu64 " differs (msg_id 0x%" PRIx64 ")",
               i, g.hdr.msg_id);
  cr_assert_eq(g.data.size(), len, "packet %" PRIu64 " has %zu bytes, want %zu", i, g.data.size(), len);
  std::vector<uint8_t> ref = payload(i, len);
  for (size_t b = 0; b < len; b++)
    if (g.data[b] != ref[b])
      cr_assert_fail("packet %" PRIu64 " byte %zu is 0x%02x, want 0x%02x", i, b, g.data[b], ref[b]);
}

// Polls every open device until done() or the deadline; each() runs first on
// every round (a sender's retry loop).
bool pump(const std::function<bool()>& done, double seconds = 5, const std::function<void()>& each = {}) {
  uint64_t end = pm::now_ns() + uint64_t(seconds * 1e9);
  for (;;) {
    if (each) each();
    if (done()) return true;
    if (pm::now_ns() > end) return false;
    if (g_a) g_a->poll(g_ra, 64);
    if (g_b) g_b->poll(g_rb, 64);
    if (g_c) g_c->poll(g_rc, 64);
  }
}

void pump_for(double seconds) {
  pump([] { return false; }, seconds);
}

// Sends packet i, pumping until the device takes it (handshake, window).
void send_blocking(EthDevice& from, PeerId to, uint64_t i, size_t len) {
  int rc = -FI_EAGAIN;
  bool ok = pump([&] { return rc != -FI_EAGAIN; }, 5, [&] {
    if (rc == -FI_EAGAIN) rc = send_pkt(from, to, i, len);
  });
  cr_assert(ok, "send of packet %" PRIu64 " stayed -FI_EAGAIN", i);
  cr_assert_eq(rc, 0, "send of packet %" PRIu64 ": %d", i, rc);
}

// --- statistics -------------------------------------------------------------
// stats(): "<name> wire=loopback drops: bad_len=.. bad_version=.. ..." and one
// line per peer "  peer pmeth://mac/<ep 8 hex>@<host>: tx_frames=.. ...".
uint64_t value_in(const std::string& line, const char* key) {
  std::string k = std::string(" ") + key + "=";
  size_t at = line.find(k);
  cr_assert_neq(at, std::string::npos, "no %s in \"%s\"", key, line.c_str());
  return strtoull(line.c_str() + at + k.size(), nullptr, 10);
}

uint64_t dev_stat(const EthDevice& d, const char* key) {
  std::string s = d.stats();
  return value_in(s.substr(0, s.find('\n')), key);
}

bool has_peer_line(const EthDevice& d, uint32_t ep) {
  char tag[32];
  snprintf(tag, sizeof tag, "/%08x@", ep);
  std::string s = d.stats();
  for (size_t at = s.find("\n  peer "); at != std::string::npos; at = s.find("\n  peer ", at + 1)) {
    std::string line = s.substr(at + 1, s.find('\n', at + 1) - at - 1);
    if (line.find(tag) != std::string::npos) return true;
  }
  return false;
}

uint64_t peer_stat(const EthDevice& d, uint32_t ep, const char* key) {
  char tag[32];
  snprintf(tag, sizeof tag, "/%08x@", ep);
  std::string s = d.stats();
  for (size_t at = s.find("\n  peer "); at != std::string::npos; at = s.find("\n  peer ", at + 1)) {
    std::string line = s.substr(at + 1, s.find('\n', at + 1) - at - 1);
    if (line.find(tag) != std::string::npos) return value_in(line, key);
  }
  cr_assert_fail("no peer %08x in the stats of %s", ep, s.c_str());
  return 0;
}

struct Drops {
  uint64_t bad_len, bad_version, bad_job, bad_ep, bad_csum, stale, injected;
};

Drops drops(const EthDevice& d) {
  return Drops{dev_stat(d, "bad_len"), dev_stat(d, "bad_version"), dev_stat(d, "bad_job"), dev_stat(d, "bad_ep"),
               dev_stat(d, "bad_csum"), dev_stat(d, "stale"), dev_stat(d, "injected")};
}

void check_drops(const EthDevice& d, const Drops& w, const char* step) {
  Drops g = drops(d);
  cr_assert(g.bad_len == w.bad_len && g.bad_version == w.bad_version && g.bad_job == w.bad_job &&
                g.bad_ep == w.bad_ep && g.bad_csum == w.bad_csum && g.stale == w.stale && g.injected == w.injected,
            "%s: drops bad_len=%" PRIu64 " bad_version=%" PRIu64 " bad_job=%" PRIu64 " bad_ep=%" PRIu64
            " bad_csum=%" PRIu64 " stale=%" PRIu64 " injected=%" PRIu64 ", want %" PRIu64 " %" PRIu64 " %" PRIu64
            " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
            step, g.bad_len, g.bad_version, g.bad_job, g.bad_ep, g.bad_csum, g.stale, g.injected, w.bad_len,
            w.bad_version, w.bad_job, w.bad_ep, w.bad_csum, w.stale, w.injected);
}

}  // namespace

TestSuite(eth, .init = setup, .fini = teardown, .timeout = 20);

// --- 1. handshake -----------------------------------------------------------

Test(eth, handshake_then_byte_exact_delivery) {
  g_a = open_dev(1, slow_config());
  g_b = open_dev(2, slow_config());
  cr_assert_eq(g_a->max_payload(), kMaxPayload);
  PeerId to_b = resolve(*g_a, *g_b);
  const size_t len = 777;

  // The first send starts the handshake, the next ones wait for it.
  cr_assert_eq(send_pkt(*g_a, to_b, 5, len), -FI_EAGAIN);
  cr_assert_eq(send_pkt(*g_a, to_b, 5, len), -FI_EAGAIN);
  cr_assert_eq(g_a->tx_ticket(to_b), 0u);
  cr_assert_eq(peer_stat(*g_a, 2, "tx_frames"), 1u);  // the HELLO

  // B answers the HELLO (HELLO_ACK), delivers nothing.
  cr_assert_eq(g_b->poll(g_rb, 64), 1);
  cr_assert_eq(g_rb.got.size(), 0u);
  cr_assert_eq(peer_stat(*g_b, 1, "rx_frames"), 1u);
  cr_assert_eq(peer_stat(*g_b, 1, "tx_frames"), 1u);
  // B learnt A's whole name (host id included) from the HELLO.
  PeerId from_a = resolve(*g_b, *g_a);
  size_t nlen = 0;
  const void* n = g_b->peer_name(from_a, &nlen);
  cr_assert_not_null(n);
  cr_assert_eq(nlen, pm::eth::kNameLen);
  cr_assert_eq(memcmp(n, g_a->name(), nlen), 0);
  // Named strings: the assertion keeps the c_str() pointers past the full expression.
  std::string learnt = g_b->name_str(n, nlen), own = g_a->name_str(g_a->name(), g_a->name_len());
  cr_assert_str_eq(learnt.c_str(), own.c_str());

  cr_assert_eq(send_pkt(*g_a, to_b, 5, len), -FI_EAGAIN);  // HELLO_ACK not read yet
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  cr_assert_eq(g_ra.got.size(), 0u);
  cr_assert_eq(send_pkt(*g_a, to_b, 5, len), 0);
  cr_assert_eq(g_a->tx_ticket(to_b), 1u);

  cr_assert_eq(g_b->poll(g_rb, 64), 1);
  cr_assert_eq(g_rb.got.size(), 1u);
  check_pkt(g_rb.got[0], from_a, 5, len);
  cr_assert_eq(g_b->poll(g_rb, 64), 0);
  { int n = g_a->poll(g_ra, 64); cr_assert_eq(n, 1, "poll %d\n%s\n%s", n, g_a->stats().c_str(), g_b->stats().c_str()); }  // the ACK
  cr_assert_eq(g_a->tx_state(to_b, 1), 1);
  cr_assert_eq(peer_stat(*g_a, 2, "tx_frames"), 2u);
  cr_assert_eq(peer_stat(*g_a, 2, "rx_frames"), 2u);
  cr_assert_eq(peer_stat(*g_a, 2, "retrans"), 0u);
  cr_assert_eq(peer_stat(*g_b, 1, "rx_frames"), 2u);
  cr_assert_eq(peer_stat(*g_b, 1, "tx_frames"), 2u);

  // Zero-length and maximal payloads; one byte more is refused. The most
  // a packet carries depends on its header's encoding (make_hdr's: 41 of
  // the 45 bytes at most, encode_core).
  size_t most7 = g_a->max_payload(to_b, make_hdr(7, 0)), most8 = g_a->max_payload(to_b, make_hdr(8, 0));
  cr_assert_eq(most7, kMaxPayload + pm::eth::kCoreHdr - pm::eth::core_len(make_hdr(7, 0)));
  cr_assert_eq(most7, kMaxPayload + 4);
  cr_assert_eq(send_pkt(*g_a, to_b, 6, 0), 0);
  cr_assert_eq(send_pkt(*g_a, to_b, 7, most7), 0);
  cr_assert_eq(send_pkt(*g_a, to_b, 8, most8 + 1), -FI_EINVAL);
  cr_assert_eq(send_pkt(*g_a, to_b + 100, 8, 1), -FI_EINVAL);
  cr_assert_eq(g_b->poll(g_rb, 64), 2);
  cr_assert_eq(g_rb.got.size(), 3u);
  check_pkt(g_rb.got[1], from_a, 6, 0);
  check_pkt(g_rb.got[2], from_a, 7, most7);
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  cr_assert_eq(g_a->tx_state(to_b, 3), 1);

  // And B answers over the same conversation, no second handshake.
  PeerId to_a = from_a;
  cr_assert_eq(send_pkt(*g_b, to_a, 9, 10), 0);
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  cr_assert_eq(g_ra.got.size(), 1u);
  check_pkt(g_ra.got[0], to_b, 9, 10);
}

Test(eth, sender_stops_at_the_window_until_acknowledged) {
  g_a = open_dev(1, slow_config());
  g_b = open_dev(2, slow_config());
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1; }));
  cr_assert_eq(g_rb.got.size(), 1u);

  for (uint64_t i = 1; i <= kWindow; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 100), 0, "send %" PRIu64, i);
  cr_assert_eq(send_pkt(*g_a, to_b, 99, 100), -FI_EAGAIN);
  cr_assert_eq(send_pkt(*g_a, to_b, 99, 100), -FI_EAGAIN);
  cr_assert_eq(peer_stat(*g_a, 2, "window_stalls"), 2u);
  cr_assert_eq(g_a->tx_ticket(to_b), 1u + kWindow);

  cr_assert_eq(g_b->poll(g_rb, 64), int(kWindow));
  cr_assert_eq(g_a->poll(g_ra, 64), 1);  // one ACK for the whole window (ack_every 32)
  cr_assert_eq(g_a->tx_state(to_b, 1 + kWindow), 1);
  cr_assert_eq(send_pkt(*g_a, to_b, kWindow + 1, 100), 0);
  cr_assert_eq(g_b->poll(g_rb, 64), 1);
  cr_assert_eq(g_rb.got.size(), kWindow + 2);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 1; i <= kWindow + 1; i++) check_pkt(g_rb.got[i], from_a, i, 100);
  cr_assert_eq(peer_stat(*g_a, 2, "retrans"), 0u);
}

// --- 2. in-order delivery under faults --------------------------------------

namespace {

// A fresh segment and pair of devices on every call.
void stream_under(const LoopFaults& faults, const char* what) {
  const uint64_t N = 2000;
  g_b.reset();
  g_a.reset();
  g_ra.got.clear();
  g_rb.got.clear();
  g_seg = new_segment();
  g_a = open_dev(1);
  g_b = open_dev(2);
  set_faults(faults);
  PeerId to_b = resolve(*g_a, *g_b);
  std::mt19937_64 rng(1234);
  std::vector<size_t> lens(N);
  for (auto& l : lens) l = size_t(rng() % (kMaxPayload + 1));

  uint64_t next = 0, eagain = 0;
  bool ok = pump(
      [&] { return next == N && g_rb.got.size() >= N && g_a->tx_state(to_b, N) == 1; }, 8,
      [&] {
        while (next < N) {
          int rc = send_pkt(*g_a, to_b, next, lens[next]);
          if (rc == -FI_EAGAIN) {
            eagain++;
            break;
          }
          cr_assert_eq(rc, 0, "%s: send %" PRIu64 ": %d", what, next, rc);
          next++;
          // Ticket k is the k-th packet; at most a window of them unacknowledged.
          cr_assert_eq(g_a->tx_ticket(to_b), next);
          if (next > kWindow)
            cr_assert_eq(g_a->tx_state(to_b, next - kWindow), 1, "%s: more than a window in flight at %" PRIu64,
                         what, next);
        }
      });
  cr_assert(ok, "%s: %" PRIu64 " sent, %zu delivered before the deadline\n%s\n%s", what, next, g_rb.got.size(),
            g_a->stats().c_str(), g_b->stats().c_str());
  pump_for(0.03);  // late duplicates would show up now
  cr_log_info("%s: %" PRIu64 " EAGAIN\n%s\n%s", what, eagain, g_a->stats().c_str(), g_b->stats().c_str());
  cr_assert_eq(g_rb.got.size(), N, "%s: %zu packets delivered, want %" PRIu64, what, g_rb.got.size(), N);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < N; i++) check_pkt(g_rb.got[i], from_a, i, lens[i]);
  cr_assert_eq(g_ra.got.size(), 0u);
  cr_assert_gt(eagain, 0u, "%s: the window never filled", what);
  cr_assert_gt(peer_stat(*g_a, 2, "window_stalls"), 0u);
  cr_assert(g_a->peer_alive(to_b));
  cr_assert_eq(g_a->tx_state(to_b, N), 1);
}

LoopFaults faults() {
  LoopFaults f;
  f.seed = 99;
  return f;
}

}  // namespace

// Each fault alone (and none), 2000 packets each, on a fresh segment.
Test(eth, stream_under_each_fault_alone) {
  stream_under(faults(), "no faults");
  // Nothing is lost: a retransmission can only be spurious (the process
  // descheduled past the 200 µs RTO) and then arrives as a duplicate.
  cr_assert_eq(peer_stat(*g_b, 1, "dups"), peer_stat(*g_a, 2, "retrans"), "%s\n%s", g_a->stats().c_str(),
               g_b->stats().c_str());
  cr_assert_eq(peer_stat(*g_b, 1, "out_of_order"), 0u);
  check_drops(*g_b, Drops{}, "no faults: receiver");
  check_drops(*g_a, Drops{}, "no faults: sender");

  LoopFaults f = faults();
  f.drop = 0.05;
  stream_under(f, "drop 5%");
  cr_assert_gt(peer_stat(*g_a, 2, "retrans"), 0u);
  cr_assert_gt(peer_stat(*g_b, 1, "out_of_order"), 0u);
  check_drops(*g_b, Drops{}, "drop: receiver");

  f = faults();
  f.dup = 0.05;
  stream_under(f, "dup 5%");
  cr_assert_gt(peer_stat(*g_b, 1, "dups"), 0u);
  check_drops(*g_b, Drops{}, "dup: receiver");

  f = faults();
  f.reorder = 0.10;
  stream_under(f, "reorder 10%");
  cr_assert_gt(peer_stat(*g_b, 1, "out_of_order"), 0u);
  check_drops(*g_b, Drops{}, "reorder: receiver");

  f = faults();
  f.corrupt = 0.02;
  stream_under(f, "corrupt 2%");
  cr_assert_gt(dev_stat(*g_b, "bad_csum"), 0u, "%s", g_b->stats().c_str());
  cr_assert_gt(peer_stat(*g_a, 2, "retrans"), 0u);

  f = faults();
  f.delay_us = 200;
  stream_under(f, "delay 200us");
  // Every round trip takes two 200 µs hops (µs timestamps: allow truncation).
  cr_assert_geq(peer_stat(*g_a, 2, "srtt_us"), 399u, "%s", g_a->stats().c_str());
  cr_assert_geq(peer_stat(*g_a, 2, "rto_us"), 399u);
  check_drops(*g_b, Drops{}, "delay: receiver");
}

Test(eth, stream_with_all_faults) {
  LoopFaults f = faults();
  f.drop = 0.05;
  f.dup = 0.05;
  f.reorder = 0.10;
  f.corrupt = 0.02;
  f.delay_us = 200;
  stream_under(f, "all faults");
  cr_assert_gt(dev_stat(*g_b, "bad_csum"), 0u);
  cr_assert_gt(peer_stat(*g_a, 2, "retrans"), 0u);
  cr_assert_gt(peer_stat(*g_b, 1, "dups"), 0u);
  cr_assert_gt(peer_stat(*g_b, 1, "out_of_order"), 0u);
}

// send_ref: a payload in one iov entry (or all but a short first part)
// stays in the sender's buffer and is read again for every resend; under
// every fault each packet arrives byte for byte (checksums over the two
// pieces included: corrupted frames are refused, the resends accepted).
// A payload spread otherwise is copied (0).
Test(eth, payload_by_reference_under_all_faults) {
  const uint64_t N = 1500;
  LoopFaults f = faults();
  f.drop = 0.05;
  f.dup = 0.05;
  f.reorder = 0.10;
  f.corrupt = 0.02;
  set_faults(f);
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  std::mt19937_64 rng(4321);
  std::vector<size_t> lens(N);
  for (auto& l : lens) l = 1 + size_t(rng() % kMaxPayload);
  // Every buffer lives until the end: the device may read it until the ACK.
  std::vector<std::vector<uint8_t>> bufs(N);
  uint64_t next = 0, refs = 0, copies = 0;
  bool ok = pump(
      [&] { return next == N && g_rb.got.size() >= N && g_a->tx_state(to_b, N) == 1; }, 8,
      [&] {
        while (next < N) {
          size_t len = lens[next];
          if (bufs[next].empty()) {
            std::vector<uint8_t> p = payload(next, len);
            bufs[next].assign(len + 5, 0xee);
            std::copy(p.begin(), p.end(), bufs[next].begin() + 5);
          }
          uint8_t* b = bufs[next].data();
          // The payload in one entry; or across two, cut after a short
          // first part (8 bytes, copied into the frame, as an RMA write's
          // offset), or after a long one (all copied).
          int mode = int(next % 4);
          size_t cut = mode == 2 ? 8 : len / 2 + 65;
          struct iovec one[1] = {{b, len + 5}};
          struct iovec two[2] = {{b, 5 + cut}, {b + 5 + cut, len - cut}};
          bool split = mode >= 2 && cut < len;
          int rc = split ? g_a->send_ref(to_b, make_hdr(next, len), two, 2, 5, len)
                         : g_a->send_ref(to_b, make_hdr(next, len), one, 1, 5, len);
          if (rc == -FI_EAGAIN) break;
          cr_assert(rc == 0 || rc == 1, "send_ref %" PRIu64 ": %d", next, rc);
          cr_assert_eq(rc, split && mode == 3 ? 0 : 1, "packet %" PRIu64 " (mode %d): %d", next, mode, rc);
          (rc ? refs : copies)++;
          next++;
        }
      });
  cr_assert(ok, "%" PRIu64 " sent, %zu delivered\n%s\n%s", next, g_rb.got.size(), g_a->stats().c_str(),
            g_b->stats().c_str());
  pump_for(0.03);
  cr_assert_eq(g_rb.got.size(), N);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < N; i++) check_pkt(g_rb.got[i], from_a, i, lens[i]);
  cr_assert_eq(dev_stat(*g_a, "by_ref"), refs);
  cr_assert_gt(copies, 0u);
  cr_assert_gt(dev_stat(*g_b, "bad_csum"), 0u);
  cr_assert_gt(peer_stat(*g_a, 2, "retrans"), 0u);
}

// want_ack: a sender that waits for the ACK of a payload sent by
// reference asks for it with a probe, which the peer answers at once; the
// peer's delayed-ACK time (2 s here) does not hold the send back.
Test(eth, want_ack_brings_the_ack_before_the_delayed_ack_time) {
  DeviceConfig cfg = config();
  cfg.delayed_ack_us = 2000000;
  cfg.ack_every = 1000;
  cfg.rto_init_us = cfg.rto_min_us = 2000000;  // no resend answers for it either
  cfg.rto_max_us = 4000000;
  g_a = open_dev(1, cfg);
  g_b = open_dev(2, cfg);
  PeerId to_b = resolve(*g_a, *g_b);
  std::vector<uint8_t> buf = payload(7, 1000);
  struct iovec iov = {buf.data(), buf.size()};
  auto send_one = [&](uint64_t i) {
    int rc = -FI_EAGAIN;
    cr_assert(pump([&] { return rc != -FI_EAGAIN; }, 5,
                   [&] { if (rc == -FI_EAGAIN) rc = g_a->send_ref(to_b, make_hdr(i, 1000), &iov, 1, 0, 1000); }));
    cr_assert_eq(rc, 1);
  };
  // Without asking: no ACK within 50 ms (the control).
  send_one(1);
  uint64_t t1 = g_a->tx_ticket(to_b);
  pump_for(0.05);
  cr_assert_eq(g_rb.got.size(), 1u);
  cr_assert_eq(g_a->tx_state(to_b, t1), 0, "%s", g_b->stats().c_str());
  // Asking: the ACK comes (for both) well before the 2 s.
  send_one(2);
  uint64_t t2 = g_a->tx_ticket(to_b);
  g_a->want_ack(to_b);
  g_a->flush();
  uint64_t t0 = pm::now_ns();
  cr_assert(pump([&] { return g_a->tx_state(to_b, t2) == 1; }, 1.5));
  cr_assert_lt(pm::now_ns() - t0, 1000000000ull);
  cr_assert_eq(dev_stat(*g_a, "ack_asks"), 1u);
  cr_assert_eq(g_rb.got.size(), 2u);
  for (int k = 0; k < 2; k++) {
    cr_assert_eq(g_rb.got[size_t(k)].hdr.msg_id, make_hdr(uint64_t(k + 1), 1000).msg_id);
    cr_assert_eq(g_rb.got[size_t(k)].data.size(), 1000u);
    cr_assert_eq(memcmp(g_rb.got[size_t(k)].data.data(), buf.data(), 1000), 0);
  }
}

// Both directions at once under all faults: piggy-backed ACKs.
Test(eth, two_way_stream_with_all_faults) {
  const uint64_t N = 1000;
  g_a = open_dev(1);
  g_b = open_dev(2);
  LoopFaults f = faults();
  f.drop = 0.05;
  f.dup = 0.05;
  f.reorder = 0.10;
  f.corrupt = 0.02;
  f.seed = 7;
  set_faults(f);
  PeerId to_b = resolve(*g_a, *g_b), to_a = resolve(*g_b, *g_a);
  uint64_t na = 0, nb = 0;
  auto len = [](uint64_t i) { return size_t((i * 131) % (kMaxPayload + 1)); };
  bool ok = pump(
      [&] {
        return na == N && nb == N && g_ra.got.size() >= N && g_rb.got.size() >= N && g_a->tx_state(to_b, N) == 1 &&
               g_b->tx_state(to_a, N) == 1;
      },
      8,
      [&] {
        while (na < N && send_pkt(*g_a, to_b, na, len(na)) == 0) na++;
        while (nb < N && send_pkt(*g_b, to_a, 100000 + nb, len(nb)) == 0) nb++;
      });
  cr_assert(ok, "%" PRIu64 "/%" PRIu64 " sent, %zu/%zu delivered\n%s\n%s", na, nb, g_rb.got.size(), g_ra.got.size(),
            g_a->stats().c_str(), g_b->stats().c_str());
  pump_for(0.02);
  cr_assert_eq(g_rb.got.size(), N);
  cr_assert_eq(g_ra.got.size(), N);
  for (uint64_t i = 0; i < N; i++) {
    check_pkt(g_rb.got[i], to_a, i, len(i));
    check_pkt(g_ra.got[i], to_b, 100000 + i, len(i));
  }
}

namespace {
class Counter final : public pm::PacketSink {
 public:
  bool on_packet(const pm::RxPacket&) noexcept override {
    n++;
    return true;
  }
  uint64_t n = 0;
};
}  // namespace

// BUG 3 (eth_device.cpp handle_frame/poll, delayed ACK): in two-way traffic
// every send() clears ack_deadline ("the ACK rode along") while the peer stays
// in ack_due_, so the next DATA pushes it again: ack_due_ grows by one entry
// per poll without bound and every poll walks all of it (quadratic).
Test(eth, two_way_traffic_keeps_the_poll_cost_flat, .disabled = true) {
  g_a = open_dev(1);  // default delayed ACK
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b), to_a = resolve(*g_b, *g_a);
  send_blocking(*g_a, to_b, 0, 16);
  send_blocking(*g_b, to_a, 1, 16);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1 && g_b->tx_state(to_a, 1) == 1; }));
  Counter ca, cb;
  uint64_t sa = 0, sb = 0;
  const int kChunk = 500, kChunks = 60;
  std::vector<uint64_t> cost;
  for (int c = 0; c < kChunks; c++) {
    uint64_t t0 = pm::now_ns();
    for (int r = 0; r < kChunk; r++) {
      if (send_pkt(*g_a, to_b, 2, 16) == 0) sa++;
      if (send_pkt(*g_b, to_a, 3, 16) == 0) sb++;
      g_a->poll(ca, 64);
      g_b->poll(cb, 64);
    }
    cost.push_back(pm::now_ns() - t0);
  }
  cr_assert(pump([&] { return g_a->tx_state(to_b, 2 + sa - 1) == 1 && g_b->tx_state(to_a, 2 + sb - 1) == 1; }, 2));
  g_a->poll(ca, 64);
  g_b->poll(cb, 64);
  cr_assert_eq(cb.n, sa);
  cr_assert_eq(ca.n, sb);
  uint64_t first = *std::min_element(cost.begin(), cost.begin() + 5);
  uint64_t last = *std::min_element(cost.end() - 5, cost.end());
  cr_assert_lt(last, 4 * first + 2000000, "%d chunks of %d rounds: %" PRIu64 " us per chunk at the start, %" PRIu64 " us at the end",
               kChunks, kChunk, first / 1000, last / 1000);
}

// Three endpoints all sending to each other under all faults: order is per
// peer, nothing is mixed up between the conversations.
Test(eth, three_endpoints_cross_traffic_with_all_faults) {
  const uint64_t N = 400;
  g_a = open_dev(1);
  g_b = open_dev(2);
  g_c = open_dev(3);
  LoopFaults f = faults();
  f.drop = 0.05;
  f.dup = 0.05;
  f.reorder = 0.10;
  f.corrupt = 0.02;
  f.seed = 3;
  set_faults(f);
  EthDevice* dev[3] = {g_a.get(), g_b.get(), g_c.get()};
  Recorder* rec[3] = {&g_ra, &g_rb, &g_rc};
  PeerId to[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) to[i][j] = i == j ? kNoPeer : resolve(*dev[i], *dev[j]);
  uint64_t sent[3][3] = {};
  // Packet ids: 10000 * (from + 1) + 1000 * to + k.
  auto id = [](int i, int j, uint64_t k) { return uint64_t(10000 * (i + 1) + 1000 * j) + k; };
  auto len = [](uint64_t i) { return size_t((i * 37) % (kMaxPayload + 1)); };
  bool ok = pump(
      [&] {
        for (int i = 0; i < 3; i++)
          for (int j = 0; j < 3; j++)
            if (i != j && (sent[i][j] < N || dev[i]->tx_state(to[i][j], N) != 1)) return false;
        return true;
      },
      8,
      [&] {
        for (int i = 0; i < 3; i++)
          for (int j = 0; j < 3; j++)
            while (i != j && sent[i][j] < N && send_pkt(*dev[i], to[i][j], id(i, j, sent[i][j]), len(sent[i][j])) == 0)
              sent[i][j]++;
      });
  cr_assert(ok, "%s\n%s\n%s", g_a->stats().c_str(), g_b->stats().c_str(), g_c->stats().c_str());
  pump_for(0.02);
  for (int j = 0; j < 3; j++) {
    cr_assert_eq(rec[j]->got.size(), 2 * N);
    uint64_t next[3] = {};
    for (const Got& g : rec[j]->got) {
      int i = -1;
      for (int k = 0; k < 3; k++)
        if (k != j && g.peer == resolve(*dev[j], *dev[k])) i = k;
      cr_assert_neq(i, -1);
      check_pkt(g, g.peer, id(i, j, next[i]), len(next[i]));
      next[i]++;
    }
  }
}

// Endpoints with different windows: the sender keeps to the smaller one.
Test(eth, sender_keeps_to_the_receivers_smaller_window) {
  DeviceConfig big = config(), small = config();
  big.window = 64;
  small.window = 8;
  g_a = open_dev(1, big);
  g_b = open_dev(2, small);
  LoopFaults f = faults();
  f.drop = 0.05;
  f.reorder = 0.10;
  f.dup = 0.05;
  set_faults(f);
  PeerId to_b = resolve(*g_a, *g_b);
  const uint64_t N = 1000;
  uint64_t next = 0;
  bool ok = pump([&] { return next == N && g_a->tx_state(to_b, N) == 1; }, 8, [&] {
    while (next < N && send_pkt(*g_a, to_b, next, 100) == 0) {
      next++;
      if (next > 8) cr_assert_eq(g_a->tx_state(to_b, next - 8), 1, "more than 8 in flight at %" PRIu64, next);
    }
  });
  cr_assert(ok, "%s\n%s", g_a->stats().c_str(), g_b->stats().c_str());
  pump_for(0.02);
  cr_assert_eq(g_rb.got.size(), N);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < N; i++) check_pkt(g_rb.got[i], from_a, i, 100);
}

namespace {
// Answers every packet from inside on_packet (as the core does with CTS and
// FIN): a reentrant send() in the middle of the device's receive path.
class Echo final : public pm::PacketSink {
 public:
  bool on_packet(const pm::RxPacket& p) noexcept override {
    got.push_back({p.peer, *p.hdr, {}});
    pending.push_back(p.hdr->msg_id - 0x1000);
    peer = p.peer;
    flush();
    return true;
  }
  void flush() {
    while (!pending.empty() && dev && send_pkt(*dev, peer, 50000 + pending.front(), 33) == 0) pending.erase(pending.begin());
  }
  EthDevice* dev = nullptr;
  PeerId peer = kNoPeer;
  std::vector<uint64_t> pending;
  std::vector<Got> got;
};
}  // namespace

Test(eth, replies_sent_from_inside_the_receive_callback) {
  g_a = open_dev(1);
  std::unique_ptr<EthDevice> b = open_dev(2);
  LoopFaults f = faults();
  f.drop = 0.05;
  f.dup = 0.05;
  f.reorder = 0.10;
  f.corrupt = 0.02;
  f.seed = 11;
  set_faults(f);
  Echo echo;
  echo.dev = b.get();
  PeerId to_b = resolve(*g_a, *b);
  const uint64_t N = 1000;
  uint64_t next = 0;
  bool ok = pump(
      [&] { return next == N && g_ra.got.size() >= N; }, 8,
      [&] {
        while (next < N && send_pkt(*g_a, to_b, next, 200) == 0) next++;
        b->poll(echo, 64);
        echo.flush();
      });
  cr_assert(ok, "%" PRIu64 " sent, %zu echoed, %zu back\n%s\n%s", next, echo.got.size(), g_ra.got.size(),
            g_a->stats().c_str(), b->stats().c_str());
  for (int k = 0; k < 20; k++) {
    g_a->poll(g_ra, 64);
    b->poll(echo, 64);
  }
  cr_assert_eq(echo.got.size(), N);
  cr_assert_eq(g_ra.got.size(), N);
  for (uint64_t i = 0; i < N; i++) {
    cr_assert_eq(echo.got[i].hdr.msg_id, 0x1000 + i);
    check_pkt(g_ra.got[i], to_b, 50000 + i, 33);
  }
}

// An endpoint may send to itself.
Test(eth, an_endpoint_sends_to_itself) {
  g_a = open_dev(1);
  PeerId self = resolve(*g_a, *g_a);
  for (uint64_t i = 0; i < 100; i++) send_blocking(*g_a, self, i, 300);
  cr_assert(pump([&] { return g_ra.got.size() >= 100 && g_a->tx_state(self, 100) == 1; }, 2), "%zu\n%s",
            g_ra.got.size(), g_a->stats().c_str());
  cr_assert_eq(g_ra.got.size(), 100u);
  for (uint64_t i = 0; i < 100; i++) check_pkt(g_ra.got[i], self, i, 300);
}

// --- 3. tickets -------------------------------------------------------------

Test(eth, tickets_complete_when_the_peer_acknowledges) {
  g_a = open_dev(1, slow_config());
  g_b = open_dev(2, slow_config());
  PeerId to_b = resolve(*g_a, *g_b);
  // Nothing sent yet: ticket 0, complete.
  cr_assert_eq(g_a->tx_ticket(to_b), 0u);
  cr_assert_eq(g_a->tx_state(to_b, 0), 1);

  send_blocking(*g_a, to_b, 0, 64);
  uint64_t t1 = g_a->tx_ticket(to_b);
  cr_assert_eq(t1, 1u);
  cr_assert_eq(g_a->tx_state(to_b, t1), 0);
  cr_assert_eq(g_b->poll(g_rb, 64), 1);
  cr_assert_eq(g_rb.got.size(), 1u);
  cr_assert_eq(g_a->tx_state(to_b, t1), 0);  // the ACK is on the wire, not read
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  cr_assert_eq(g_a->tx_state(to_b, t1), 1);
  cr_assert_eq(g_a->tx_state(to_b, 0), 1);

  // Ten at once: one cumulative ACK completes them all.
  for (uint64_t i = 1; i <= 10; i++) {
    cr_assert_eq(send_pkt(*g_a, to_b, i, 64), 0);
    cr_assert_eq(g_a->tx_ticket(to_b), 1 + i);
  }
  for (uint64_t t = 2; t <= 11; t++) cr_assert_eq(g_a->tx_state(to_b, t), 0, "ticket %" PRIu64, t);
  cr_assert_eq(g_a->tx_state(to_b, 1), 1);
  cr_assert_eq(g_b->poll(g_rb, 64), 10);
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  for (uint64_t t = 1; t <= 11; t++) cr_assert_eq(g_a->tx_state(to_b, t), 1, "ticket %" PRIu64, t);
  cr_assert_eq(peer_stat(*g_b, 1, "tx_frames"), 3u);  // HELLO_ACK and two ACKs
  cr_assert_eq(peer_stat(*g_a, 2, "rx_frames"), 3u);

  // A lost ACK: the ticket stays in flight until the retransmission is
  // acknowledged again; B delivers the packet once.
  cr_assert_eq(send_pkt(*g_a, to_b, 12, 64), 0);
  LoopFaults f = faults();
  f.drop = 1.0;
  set_faults(f);
  cr_assert_eq(g_b->poll(g_rb, 64), 1);  // delivers, its ACK is lost
  cr_assert_eq(g_rb.got.size(), 12u);
  cr_assert_eq(g_a->poll(g_ra, 64), 0);
  cr_assert_eq(g_a->tx_state(to_b, 12), 0);
  set_faults(faults());
  cr_assert(pump([&] { return g_a->tx_state(to_b, 12) == 1; }, 2));
  cr_assert_eq(peer_stat(*g_a, 2, "retrans"), 1u);
  cr_assert_eq(peer_stat(*g_b, 1, "dups"), 1u);
  pump_for(0.01);
  cr_assert_eq(g_rb.got.size(), 12u);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i <= 10; i++) check_pkt(g_rb.got[i], from_a, i, 64);
  check_pkt(g_rb.got[11], from_a, 12, 64);
  cr_assert(g_a->peer_alive(to_b));

  // Tickets are per peer: a third endpoint starts at 1.
  g_c = open_dev(3, slow_config());
  PeerId to_c = resolve(*g_a, *g_c);
  cr_assert_neq(to_b, to_c);
  cr_assert_eq(g_a->tx_ticket(to_c), 0u);
  send_blocking(*g_a, to_c, 20, 8);
  cr_assert_eq(g_a->tx_ticket(to_c), 1u);
  cr_assert_eq(g_a->tx_ticket(to_b), 12u);
  cr_assert_eq(g_a->tx_state(to_c, 1), 0);
  cr_assert_eq(g_a->tx_state(to_b, 12), 1);
  cr_assert(pump([&] { return g_a->tx_state(to_c, 1) == 1; }));
  cr_assert_eq(g_rc.got.size(), 1u);
  check_pkt(g_rc.got[0], resolve(*g_c, *g_a), 20, 8);
  cr_assert_eq(g_rb.got.size(), 12u);
}

// --- 4. unreachable peers ---------------------------------------------------

namespace {

// A's ticket t to `peer` fails within the retry budget (well under 2 s).
uint64_t wait_failure(PeerId peer, uint64_t t) {
  uint64_t t0 = pm::now_ns();
  cr_assert(pump([&] { return g_a->tx_state(peer, t) != 0; }, 3), "ticket %" PRIu64 " still in flight", t);
  uint64_t ms = (pm::now_ns() - t0) / 1000000;
  cr_assert_lt(ms, 2000u, "failing took %" PRIu64 " ms", ms);
  return ms;
}

void check_sender_still_works_with_c() {
  g_c = open_dev(3);
  PeerId to_c = resolve(*g_a, *g_c);
  for (uint64_t i = 0; i < 100; i++) send_blocking(*g_a, to_c, 500 + i, 200);
  cr_assert(pump([&] { return g_a->tx_state(to_c, 100) == 1; }));
  cr_assert_eq(g_rc.got.size(), 100u);
  PeerId from_a = resolve(*g_c, *g_a);
  for (uint64_t i = 0; i < 100; i++) check_pkt(g_rc.got[i], from_a, 500 + i, 200);
  cr_assert(g_a->peer_alive(to_c));
}

}  // namespace

Test(eth, destroyed_peer_becomes_unreachable_after_the_retries) {
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1; }));
  cr_assert(g_a->peer_alive(to_b));
  const uint64_t retrans0 = peer_stat(*g_a, 2, "retrans");

  g_b.reset();
  for (uint64_t i = 1; i <= 3; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 10), 0);
  cr_assert_eq(g_a->tx_ticket(to_b), 4u);
  cr_assert_eq(g_a->tx_state(to_b, 4), 0);
  uint64_t ms = wait_failure(to_b, 4);
  cr_log_info("unreachable after %" PRIu64 " ms", ms);
  cr_assert_eq(g_a->tx_state(to_b, 4), -FI_EHOSTUNREACH);
  cr_assert_eq(g_a->tx_state(to_b, 2), -FI_EHOSTUNREACH);
  // The timer resent the oldest frame at least `retries` times (and on
  // until dead_ms had passed without a word from the peer).
  uint64_t resent = peer_stat(*g_a, 2, "retrans") - retrans0;
  cr_assert_geq(resent, 6u);
  cr_assert_geq(ms, 400u, "unreachable after %" PRIu64 " ms, before dead_ms", ms);
  cr_assert_not(g_a->peer_alive(to_b));
  cr_assert_not(g_a->peer_alive(to_b));
  cr_assert_eq(send_pkt(*g_a, to_b, 9, 10), -FI_EHOSTUNREACH);
  cr_assert_eq(send_pkt(*g_a, to_b, 9, 10), -FI_EHOSTUNREACH);
  pump_for(0.03);  // no timer runs on for it
  cr_assert_eq(peer_stat(*g_a, 2, "retrans") - retrans0, resent);

  check_sender_still_works_with_c();
}

Test(eth, lossy_segment_makes_the_peer_unreachable) {
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1; }));
  const uint64_t retrans0 = peer_stat(*g_a, 2, "retrans");

  LoopFaults f = faults();
  f.drop = 1.0;
  set_faults(f);
  cr_assert_eq(send_pkt(*g_a, to_b, 1, 10), 0);
  wait_failure(to_b, 2);
  cr_assert_eq(g_a->tx_state(to_b, 2), -FI_EHOSTUNREACH);
  cr_assert_geq(peer_stat(*g_a, 2, "retrans") - retrans0, 6u);
  cr_assert_not(g_a->peer_alive(to_b));
  cr_assert_eq(send_pkt(*g_a, to_b, 2, 10), -FI_EHOSTUNREACH);
  cr_assert_eq(g_rb.got.size(), 1u);

  // The segment heals. A stays unreachable for B until B is heard again;
  // then the two start a new session (both sides reset: what was under way
  // failed) and A's new packets reach B.
  set_faults(faults());
  check_sender_still_works_with_c();
  cr_assert_eq(send_pkt(*g_a, to_b, 3, 10), -FI_EHOSTUNREACH);
  PeerId to_a = resolve(*g_b, *g_a);
  send_blocking(*g_b, to_a, 77, 10);  // the old session's: lost, B's side is reset
  int rc = -FI_EHOSTUNREACH;
  cr_assert(pump([&] { return rc == 0; }, 2, [&] {
    if (rc != 0) rc = send_pkt(*g_a, to_b, 4, 10);
  }), "A never got a new session with B\n%s\n%s", g_a->stats().c_str(), g_b->stats().c_str());
  cr_assert(pump([&] { return g_rb.got.size() == 2; }, 2));
  check_pkt(g_rb.got[1], to_a, 4, 10);
  cr_assert_geq(dev_stat(*g_a, "revived"), 1u);
  cr_assert_eq(std::count(g_rb.resets.begin(), g_rb.resets.end(), to_a), 1);
}

Test(eth, handshake_without_answer_becomes_unreachable) {
  g_a = open_dev(1);
  std::vector<uint8_t> ghost = ghost_name(*g_a, 0x4242);
  PeerId to_x = g_a->resolve(ghost.data(), ghost.size());
  cr_assert_neq(to_x, kNoPeer);
  cr_assert_eq(send_pkt(*g_a, to_x, 0, 10), -FI_EAGAIN);
  cr_assert(g_a->peer_alive(to_x));  // still handshaking
  uint64_t t0 = pm::now_ns();
  int rc = -FI_EAGAIN;
  cr_assert(pump([&] { return rc != -FI_EAGAIN; }, 3, [&] { rc = send_pkt(*g_a, to_x, 0, 10); }));
  cr_assert_lt((pm::now_ns() - t0) / 1000000, 2000u);
  cr_assert_eq(rc, -FI_EHOSTUNREACH);
  cr_assert_geq(peer_stat(*g_a, 0x4242, "tx_frames"), 7u);  // HELLO + at least 6 retries
  cr_assert_geq((pm::now_ns() - t0) / 1000000, 400u);      // and not before dead_ms
  cr_assert_not(g_a->peer_alive(to_x));
  cr_assert_eq(g_a->tx_state(to_x, g_a->tx_ticket(to_x)), -FI_EHOSTUNREACH);
  check_sender_still_works_with_c();
}

// An idle peer is probed (peer_alive after rto_max of silence); probes are
// answered while it lives; a dead one is declared unreachable on the 6th
// unanswered probe.
Test(eth, idle_peer_is_probed_and_a_dead_one_is_found) {
  DeviceConfig cfg = config();
  cfg.rto_max_us = 5000;  // the silence that makes peer_alive probe
  g_a = open_dev(1, cfg);
  g_b = open_dev(2, cfg);
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1; }));
  // Counted from here: a resend of packet 0 by a timer that fired before its
  // ACK came (a slow, sanitized build), and b's answer to it, are over.
  pump_for(0.02);
  uint64_t tx0 = peer_stat(*g_a, 2, "tx_frames"), rx0 = peer_stat(*g_a, 2, "rx_frames");
  for (int k = 0; k < 3; k++) {
    pump_for(0.007);  // quiet for longer than rto_max (5 ms)
    cr_assert(g_a->peer_alive(to_b));
    uint64_t want = rx0 + k + 1;
    cr_assert(pump([&] { return peer_stat(*g_a, 2, "rx_frames") == want; }, 1), "probe %d unanswered", k);
  }
  // Asked at once after the last answer (reading the statistics first took
  // longer than rto_max in a sanitized build): just heard from, no probe.
  bool heard = g_a->peer_alive(to_b);
  cr_assert_eq(peer_stat(*g_a, 2, "tx_frames"), tx0 + 3, "three probes, %llu frames:\n%s\n%s",
               (unsigned long long)(peer_stat(*g_a, 2, "tx_frames") - tx0), g_a->stats().c_str(),
               g_b->stats().c_str());
  cr_assert(heard);

  g_b.reset();
  // Probed at doubling intervals; unreachable only after dead_ms (400 ms)
  // of silence, not after a count of probes.
  uint64_t t0 = pm::now_ns();
  int alive = 0;
  for (int k = 0; k < 600 && g_a->peer_alive(to_b); k++) {
    pump_for(0.007);
    alive++;
  }
  double waited = double(pm::now_ns() - t0) / 1e9;
  cr_assert(waited >= 0.39 && waited < 3.0, "declared unreachable after %.3f s of silence", waited);
  uint64_t probes = peer_stat(*g_a, 2, "tx_frames") - (tx0 + 3);
  cr_assert(probes >= 3 && probes <= 100, "%llu probes to the dead peer (doubling gaps, at most rto_max apart)",
            (unsigned long long)probes);
  cr_assert_not(g_a->peer_alive(to_b));
  cr_assert_eq(send_pkt(*g_a, to_b, 1, 10), -FI_EHOSTUNREACH);
}

// --- 5. restart -------------------------------------------------------------

namespace {

// A talks to B (ep 2), B goes away with 3 of A's packets unacknowledged,
// B' opens with the same ep id: returns the ticket of the old packets.
uint64_t restart_b() {
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < 5; i++) send_blocking(*g_a, to_b, i, 100);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 5) == 1; }));
  cr_assert_eq(g_rb.got.size(), 5u);
  std::vector<uint8_t> old_name(static_cast<const uint8_t*>(g_b->name()),
                                static_cast<const uint8_t*>(g_b->name()) + g_b->name_len());

  g_b.reset();
  g_rb.got.clear();
  for (uint64_t i = 5; i < 8; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 100), 0);
  uint64_t old_ticket = g_a->tx_ticket(to_b);
  cr_assert_eq(old_ticket, 8u);
  g_b = open_dev(2);
  // Same name: the same peer for A.
  cr_assert_eq(g_b->name_len(), old_name.size());
  cr_assert_eq(memcmp(g_b->name(), old_name.data(), old_name.size()), 0);
  cr_assert_eq(resolve(*g_a, *g_b), to_b);
  return old_ticket;
}

}  // namespace

Test(eth, restarted_peer_gets_a_new_handshake_and_old_tickets_fail) {
  uint64_t old_ticket = restart_b();
  PeerId to_b = resolve(*g_a, *g_b);
  // A's retransmission reaches B', which does not know A's epoch pairing:
  // it answers with a HELLO, A sees the new epoch and resets the peer.
  cr_assert(pump([&] { return g_a->tx_state(to_b, old_ticket) != 0; }, 2), "%s\n%s", g_a->stats().c_str(),
            g_b->stats().c_str());
  int st = g_a->tx_state(to_b, old_ticket);
  cr_assert(st == -FI_ECONNRESET || st == -FI_EHOSTUNREACH, "old ticket state %d", st);
  cr_assert_eq(st, -FI_ECONNRESET);  // B' answered, so a reset, not unreachable
  cr_assert_eq(g_a->tx_state(to_b, 6), -FI_ECONNRESET);
  cr_assert_geq(dev_stat(*g_b, "stale"), 1u);
  // The reset is reported to the endpoint once (on_peer_reset), and the
  // peer is alive in its new session.
  cr_assert_eq(std::count(g_ra.resets.begin(), g_ra.resets.end(), to_b), 1);
  cr_assert(g_a->peer_alive(to_b));
  cr_assert_eq(g_rb.got.size(), 0u);  // nothing of the old conversation reached B'

  // New packets reach B' in order, from the start.
  const uint64_t N = 100;
  for (uint64_t i = 0; i < N; i++) send_blocking(*g_a, to_b, 1000 + i, 300);
  cr_assert(pump([&] { return g_rb.got.size() >= N; }, 3));
  pump_for(0.02);
  cr_assert_eq(g_rb.got.size(), N);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < N; i++) check_pkt(g_rb.got[i], from_a, 1000 + i, 300);
  // And B' answers A over the new conversation.
  send_blocking(*g_b, from_a, 77, 10);
  cr_assert(pump([&] { return g_ra.got.size() == 1; }, 2));
  check_pkt(g_ra.got[0], to_b, 77, 10);
  cr_assert(g_a->peer_alive(to_b));
}

// BUG 1 (eth_device.cpp reset_peer): tickets_sent / tickets_acked survive a
// peer reset, so after a restart the new incarnation's tickets stay behind by
// the number of frames that were unacknowledged at the reset: they never
// complete (tx_state 0 forever).
Test(eth, tickets_after_a_restart_complete, .disabled = true) {
  uint64_t old_ticket = restart_b();
  PeerId to_b = resolve(*g_a, *g_b);
  cr_assert(pump([&] { return g_a->tx_state(to_b, old_ticket) != 0; }, 2));
  cr_assert_eq(g_a->tx_state(to_b, old_ticket), -FI_ECONNRESET);
  for (uint64_t i = 0; i < 10; i++) send_blocking(*g_a, to_b, 1000 + i, 300);
  uint64_t t = g_a->tx_ticket(to_b);
  cr_assert(pump([&] { return g_rb.got.size() >= 10; }, 3));
  bool done = pump([&] { return g_a->tx_state(to_b, t) != 0; }, 1);
  cr_assert(done, "ticket 0x%" PRIx64 " of the new incarnation never completes although B' got all %zu packets\n%s", t,
            g_rb.got.size(), g_a->stats().c_str());
  cr_assert_eq(g_a->tx_state(to_b, t), 1);
}

// A peer that restarts while A is idle: A's next packet goes to the old
// epoch, B' asks for a handshake, that packet fails and the later ones flow.
Test(eth, restart_while_idle_is_found_by_the_next_send) {
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1; }));
  g_b.reset();
  g_b = open_dev(2);
  g_rb.got.clear();
  cr_assert_eq(send_pkt(*g_a, to_b, 1, 10), 0);
  uint64_t t = g_a->tx_ticket(to_b);
  cr_assert(pump([&] { return g_a->tx_state(to_b, t) != 0; }, 2));
  cr_assert_eq(g_a->tx_state(to_b, t), -FI_ECONNRESET);
  cr_assert_eq(g_rb.got.size(), 0u);
  send_blocking(*g_a, to_b, 2, 10);
  cr_assert(pump([&] { return g_rb.got.size() == 1; }, 2));
  check_pkt(g_rb.got[0], resolve(*g_b, *g_a), 2, 10);
}

// The sender restarts: A' (same ep id, new epoch) talks to B, which still
// holds A's conversation; B resets it and takes A''s packets from seq 1 on.
Test(eth, restarted_sender_is_taken_fresh) {
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < 20; i++) send_blocking(*g_a, to_b, i, 50);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 20) == 1; }));
  cr_assert_eq(g_rb.got.size(), 20u);
  // B had sent to A as well: that ticket must not hang either.
  PeerId to_a = resolve(*g_b, *g_a);
  send_blocking(*g_b, to_a, 900, 10);
  cr_assert(pump([&] { return g_b->tx_state(to_a, 1) == 1; }));

  g_a.reset();
  g_a = open_dev(1);
  g_ra.got.clear();
  g_rb.got.clear();
  to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < 20; i++) send_blocking(*g_a, to_b, 100 + i, 50);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 20) == 1; }, 2));
  pump_for(0.01);
  cr_assert_eq(g_rb.got.size(), 20u, "%s", g_b->stats().c_str());
  for (uint64_t i = 0; i < 20; i++) check_pkt(g_rb.got[i], to_a, 100 + i, 50);
  // B saw the restart once, and talks to A' from a fresh start.
  cr_assert_eq(std::count(g_rb.resets.begin(), g_rb.resets.end(), to_a), 1);
  cr_assert(g_b->peer_alive(to_a));
  send_blocking(*g_b, to_a, 901, 10);
  cr_assert(pump([&] { return g_ra.got.size() == 1; }, 2));
  check_pkt(g_ra.got[0], to_b, 901, 10);
}

// --- 6. malformed frames ----------------------------------------------------

namespace {

constexpr uint32_t kRawEp = 99;
constexpr uint32_t kRawEpoch = 0x5eed0001;
constexpr size_t kBody = pm::eth::kEthHdr + pm::eth::kPmHdr;

const uint8_t* seg_mac() { return g_raw->mac(); }

FrameHdr raw_hdr(uint8_t type, uint32_t dst_ep, uint32_t dst_epoch, uint32_t seq = 0, uint32_t ack = 1) {
  FrameHdr h;
  h.type = type;
  h.job = kJob;
  h.dst_ep = dst_ep;
  h.src_ep = kRawEp;
  h.src_epoch = kRawEpoch;
  h.dst_epoch = dst_epoch;
  h.seq = seq;
  h.ack = ack;
  h.window = uint16_t(kWindow);
  h.ts = 0;
  h.ts_echo = 0;
  return h;
}

// A whole frame: Ethernet header, pmeth header (len = body size unless set),
// body, checksum over the header (checksum field 0) and the body.
std::vector<uint8_t> raw_frame(FrameHdr h, const std::vector<uint8_t>& body, bool set_len = true,
                               uint16_t ethertype = pm::eth::kDefaultEtherType) {
  std::vector<uint8_t> f(kBody + body.size());
  memcpy(f.data(), seg_mac(), 6);
  memcpy(f.data() + 6, seg_mac(), 6);
  f[12] = uint8_t(ethertype >> 8);
  f[13] = uint8_t(ethertype);
  if (set_len) h.len = uint16_t(body.size());
  h.csum = 0;
  pm::eth::encode_hdr(f.data() + pm::eth::kEthHdr, h);
  if (!body.empty()) memcpy(f.data() + kBody, body.data(), body.size());
  uint32_t c = pm::eth::frame_sum(f.data() + pm::eth::kEthHdr, f.data() + kBody, std::min<size_t>(h.len, body.size()));
  pm::eth::put32(f.data() + pm::eth::kEthHdr + 44, c);
  return f;
}

std::vector<uint8_t> data_body(uint64_t i, size_t len) {
  PktHdr h = make_hdr(i, len);
  std::vector<uint8_t> b(pm::eth::core_len(h) + len);
  size_t n = pm::eth::encode_core(b.data(), h);
  std::vector<uint8_t> p = payload(i, len);
  if (len) memcpy(b.data() + n, p.data(), len);
  return b;
}

std::vector<uint8_t> raw_name(uint32_t ep) {
  EthName n;
  n.ep_id = ep;
  n.host = 0xabcd;
  memcpy(n.mac, seg_mac(), 6);
  std::vector<uint8_t> b(pm::eth::kNameLen);
  pm::eth::encode_name(b.data(), n);
  return b;
}

// Puts one frame on the segment and lets the device read it.
void inject(EthDevice& d, const std::vector<uint8_t>& f) {
  Frame fr{f.data(), f.size()};
  cr_assert_eq(g_raw->tx_burst(&fr, 1), 1);
  g_raw->tx_flush();
  cr_assert_eq(d.poll(g_ra, 64), 1);
}

struct RawRx {
  std::vector<uint8_t> bytes;
  FrameHdr h;
};

// What the device sent to the raw endpoint.
std::vector<RawRx> raw_rx() {
  std::vector<RawRx> out;
  Frame fr[32];
  int n = g_raw->rx_burst(fr, 32);
  for (int i = 0; i < n; i++) {
    RawRx r;
    r.bytes.assign(fr[i].data, fr[i].data + fr[i].len);
    cr_assert_geq(r.bytes.size(), kBody);
    r.h = pm::eth::decode_hdr(r.bytes.data() + pm::eth::kEthHdr);
    out.push_back(std::move(r));
  }
  g_raw->rx_release();
  return out;
}

// raw_rx() every 100 us until at least n frames came, at most `polls` times.
std::vector<RawRx> raw_rx_wait(size_t n, int polls) {
  std::vector<RawRx> rx, more;
  for (int k = 0; k < polls && rx.size() < n; k++) {
    usleep(100);
    more = raw_rx();
    rx.insert(rx.end(), more.begin(), more.end());
  }
  return rx;
}

// A NAK to a (ep 1) as from b (ep 2), at `ack` with bitmap `bits` (bit i:
// ack + 1 + i arrived), in the session of d0 (a frame a sent to b).
std::vector<uint8_t> nak_to_a(const FrameHdr& d0, uint32_t ack, uint64_t bits, uint16_t window) {
  FrameHdr h;
  h.type = pm::eth::kNak;
  h.job = kJob;
  h.dst_ep = 1;
  h.src_ep = 2;
  h.src_epoch = d0.dst_epoch;
  h.dst_epoch = d0.src_epoch;
  h.ack = ack;
  h.window = window;
  std::vector<uint8_t> body(8);
  for (int i = 0; i < 8; i++) body[i] = uint8_t(bits >> (8 * i));
  return raw_frame(h, body);
}

// Common checks of a frame the device (ep 10) sent to the raw endpoint.
void check_from_dev(const RawRx& r, uint8_t type, uint32_t dst_epoch, uint16_t len) {
  const uint8_t* f = r.bytes.data();
  cr_assert_eq(memcmp(f, seg_mac(), 6), 0);
  cr_assert_eq(memcmp(f + 6, seg_mac(), 6), 0);
  cr_assert_eq(f[12], 0x88);
  cr_assert_eq(f[13], 0xB5);
  cr_assert_eq(r.h.version, pm::eth::kWireVersion);
  cr_assert_eq(r.h.type, type, "frame type %u, want %u", r.h.type, type);
  cr_assert_eq(r.h.flags, 0);
  // Byte 3 is the hold of the echoed frame: none without an echo.
  if (!r.h.ts_echo) cr_assert_eq(f[pm::eth::kEthHdr + 3], 0);
  cr_assert_eq(r.h.job, kJob);
  cr_assert_eq(r.h.dst_ep, kRawEp);
  cr_assert_eq(r.h.src_ep, 10u);
  cr_assert_neq(r.h.src_epoch, 0u);
  cr_assert_eq(r.h.dst_epoch, dst_epoch);
  cr_assert_eq(r.h.window, kWindow);
  cr_assert_eq(r.h.len, len);
  cr_assert_geq(r.bytes.size(), kBody + len);
  std::vector<uint8_t> hdr(f + pm::eth::kEthHdr, f + kBody);
  pm::eth::put32(hdr.data() + 44, 0);
  uint32_t c = pm::eth::frame_sum(hdr.data(), f + kBody, len);
  cr_assert_eq(r.h.csum, c, "checksum 0x%08x, want 0x%08x", r.h.csum, c);
}

}  // namespace

Test(eth, malformed_frames_are_dropped_and_counted) {
  DeviceConfig cfg = config();
  cfg.delayed_ack_us = 0;  // ACKs leave at the end of the poll that took the DATA
  g_a = open_dev(10, cfg);
  g_raw = open_wire(kRawEp, g_seg);
  EthDevice& d = *g_a;
  Drops w{};
  check_drops(d, w, "start");
  std::vector<uint8_t> hello_body = raw_name(kRawEp);

  // Too short for a pmeth header (long enough for the wire to route it).
  {
    std::vector<uint8_t> f = raw_frame(raw_hdr(pm::eth::kHello, 10, 0), hello_body);
    f.resize(40);
    inject(d, f);
    w.bad_len++;
    check_drops(d, w, "too short");
    f.resize(kBody - 1);
    inject(d, f);
    w.bad_len++;
    check_drops(d, w, "one byte short");
  }
  // Another EtherType.
  inject(d, raw_frame(raw_hdr(pm::eth::kHello, 10, 0), hello_body, true, 0x0800));
  w.bad_len++;
  check_drops(d, w, "ethertype");
  // Wrong version.
  {
    FrameHdr h = raw_hdr(pm::eth::kHello, 10, 0);
    h.version = pm::eth::kWireVersion + 1;
    inject(d, raw_frame(h, hello_body));
    w.bad_version++;
    check_drops(d, w, "version");
    h.version = 0;
    inject(d, raw_frame(h, hello_body));
    w.bad_version++;
    check_drops(d, w, "version 0");
  }
  // Wrong job key.
  {
    FrameHdr h = raw_hdr(pm::eth::kHello, 10, 0);
    h.job = kJob + 1;
    inject(d, raw_frame(h, hello_body));
    w.bad_job++;
    check_drops(d, w, "job");
  }
  // Length field larger than the frame.
  {
    FrameHdr h = raw_hdr(pm::eth::kHello, 10, 0);
    h.len = uint16_t(hello_body.size() + 1);
    inject(d, raw_frame(h, hello_body, false));
    w.bad_len++;
    check_drops(d, w, "len + 1");
    h.len = 0xffff;
    inject(d, raw_frame(h, hello_body, false));
    w.bad_len++;
    check_drops(d, w, "len 0xffff");
  }
  // Bad checksum: in the checksum field, in the header, in the body.
  {
    std::vector<uint8_t> f = raw_frame(raw_hdr(pm::eth::kHello, 10, 0), hello_body);
    std::vector<uint8_t> g = f;
    g[pm::eth::kEthHdr + 44] ^= 1;
    inject(d, g);
    g = f;
    g[pm::eth::kEthHdr + 3] ^= 0x80;  // reserved byte
    inject(d, g);
    g = f;
    g[kBody + 9] ^= 0x10;
    inject(d, g);
    w.bad_csum += 3;
    check_drops(d, w, "checksum");
  }
  cr_assert_not(has_peer_line(d, kRawEp));
  // HELLOs whose name does not match the sender, or is cut short (from
  // endpoint 98, so that 99 stays unknown for the DATA test below).
  {
    const uint32_t other = kRawEp - 1;
    FrameHdr h = raw_hdr(pm::eth::kHello, 10, 0);
    h.src_ep = other;
    inject(d, raw_frame(h, raw_name(kRawEp)));
    w.bad_len++;
    check_drops(d, w, "hello name of another endpoint");
    std::vector<uint8_t> name98 = raw_name(other);
    std::vector<uint8_t> shortname(name98.begin(), name98.end() - 1);
    inject(d, raw_frame(h, shortname));
    w.bad_len++;
    check_drops(d, w, "hello name short");
    std::vector<uint8_t> bad = name98;
    bad[0] ^= 1;  // magic
    inject(d, raw_frame(h, bad));
    w.bad_len++;
    check_drops(d, w, "hello bad magic");
    // A HELLO_ACK for an epoch that is not this endpoint's.
    FrameHdr ha = raw_hdr(pm::eth::kHelloAck, 10, 0x12345678);
    ha.src_ep = other;
    inject(d, raw_frame(ha, name98));
    w.stale++;
    check_drops(d, w, "hello_ack of another epoch");
  }
  cr_assert_eq(g_ra.got.size(), 0u);
  cr_assert_eq(raw_rx().size(), 0u, "the device answered a malformed frame");
  cr_assert_not(has_peer_line(d, kRawEp));

  // DATA from an unknown peer, no handshake, wrong destination epoch: stale,
  // answered with a HELLO (dst epoch 0 = unknown, body = the device's name).
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, 0x12345678, 1, 1), data_body(1, 20)));
  w.stale++;
  check_drops(d, w, "data of a foreign epoch");
  cr_assert_eq(g_ra.got.size(), 0u);
  std::vector<RawRx> rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kHello, 0, pm::eth::kNameLen + pm::eth::kHelloCapsLen);
  cr_assert_eq(memcmp(rx[0].bytes.data() + kBody, d.name(), pm::eth::kNameLen), 0);
  // Capabilities after the name: the in-process wire takes no GSO packets.
  cr_assert_eq(pm::eth::get32(rx[0].bytes.data() + kBody + pm::eth::kNameLen), 0u);
  const uint32_t dev_epoch = rx[0].h.src_epoch;
  cr_assert(has_peer_line(d, kRawEp));
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, 0, 1, 1), data_body(1, 20)));
  w.stale++;
  check_drops(d, w, "data with dst epoch 0");
  raw_rx();  // maybe another HELLO (after the device's hello timer)

  // With the right epoch the DATA is taken (our HELLO_ACK is implied): the
  // packet is delivered byte-exact and acknowledged.
  FrameHdr h = raw_hdr(pm::eth::kData, 10, dev_epoch, 1, 1);
  h.ts = 0x01020304;
  inject(d, raw_frame(h, data_body(1, 20)));
  check_drops(d, w, "good data");
  cr_assert_eq(g_ra.got.size(), 1u);
  PeerId from_raw = g_ra.got[0].peer;
  check_pkt(g_ra.got[0], from_raw, 1, 20);
  rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kAck, kRawEpoch, 0);
  cr_assert_eq(rx[0].h.src_epoch, dev_epoch);
  cr_assert_eq(rx[0].h.ack, 2u);
  cr_assert_eq(rx[0].h.seq, 0u);
  cr_assert_eq(rx[0].h.ts_echo, 0x01020304u);
  // With how long the device held it (echo_hold): a few ms at most.
  cr_assert_lt(pm::eth::hold_ns(rx[0].h.hold), 5000000u, "hold code 0x%02x", rx[0].h.hold);

  // A duplicate: not delivered again, acknowledged at once.
  inject(d, raw_frame(h, data_body(1, 20)));
  cr_assert_eq(g_ra.got.size(), 1u);
  rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kAck, kRawEpoch, 0);
  cr_assert_eq(rx[0].h.ack, 2u);
  cr_assert_eq(peer_stat(d, kRawEp, "dups"), 1u);

  // The same sender with another source epoch but this one as destination.
  {
    FrameHdr x = raw_hdr(pm::eth::kData, 10, dev_epoch, 2, 1);
    x.src_epoch = kRawEpoch + 1;
    inject(d, raw_frame(x, data_body(2, 20)));
    w.stale++;
    check_drops(d, w, "data of another source epoch");
    cr_assert_eq(g_ra.got.size(), 1u);
    cr_assert_eq(raw_rx().size(), 0u);
  }

  // A gap: seq 3 before 2 is held back and NAKed (first missing = 2, bitmap
  // bit 0 = seq 2+1+0 = 3 arrived); then 2 delivers both.
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, dev_epoch, 3, 1), data_body(3, 30)));
  cr_assert_eq(g_ra.got.size(), 1u);
  rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kNak, kRawEpoch, 8);
  cr_assert_eq(rx[0].h.ack, 2u);
  cr_assert_eq(pm::eth::get64(rx[0].bytes.data() + kBody), 0x1u);
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, dev_epoch, 2, 1), data_body(2, 0)));
  cr_assert_eq(g_ra.got.size(), 3u);
  check_pkt(g_ra.got[1], from_raw, 2, 0);
  check_pkt(g_ra.got[2], from_raw, 3, 30);
  rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kAck, kRawEpoch, 0);
  cr_assert_eq(rx[0].h.ack, 4u);
  // Beyond the receive window: dropped (NAKed, not stored).
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, dev_epoch, 4 + kWindow, 1), data_body(9, 10)));
  cr_assert_eq(g_ra.got.size(), 3u);
  rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kNak, kRawEpoch, 8);
  cr_assert_eq(rx[0].h.ack, 4u);
  cr_assert_eq(pm::eth::get64(rx[0].bytes.data() + kBody), 0u);
  // A probe is answered with an ACK.
  inject(d, raw_frame(raw_hdr(pm::eth::kProbe, 10, dev_epoch), {}));
  rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  check_from_dev(rx[0], pm::eth::kAck, kRawEpoch, 0);
  cr_assert_eq(rx[0].h.ack, 4u);
  // Unknown frame types are dropped and counted.
  inject(d, raw_frame(raw_hdr(0x7f, 10, dev_epoch), {}));
  cr_assert_eq(raw_rx().size(), 0u);
  w.bad_len++;
  // DGRAM frames on a reliable endpoint are ignored.
  inject(d, raw_frame(raw_hdr(pm::eth::kDgram, 10, 0), data_body(4, 5)));
  cr_assert_eq(g_ra.got.size(), 3u);
  check_drops(d, w, "after the conversation");

  // Wrong destination endpoint: a device whose wire receives frames for
  // endpoint 20 but which is endpoint 21 (as on a shared NIC without filter).
  g_b = open_dev(21, config(), g_seg, 20);
  {
    Frame fr;
    std::vector<uint8_t> f = raw_frame(raw_hdr(pm::eth::kHello, 20, 0), hello_body);
    fr = Frame{f.data(), f.size()};
    cr_assert_eq(g_raw->tx_burst(&fr, 1), 1);
    cr_assert_eq(g_b->poll(g_rb, 64), 1);
    check_drops(*g_b, Drops{0, 0, 0, 1, 0, 0, 0}, "wrong dst ep");
    cr_assert_not(has_peer_line(*g_b, kRawEp));
  }
  cr_assert_eq(g_rb.got.size(), 0u);
  cr_assert_eq(g_ra.got.size(), 3u);
}

// BUG 2 (eth_device.cpp deliver): a DATA frame whose body is shorter than the
// core header passes every check, consumes its sequence number and vanishes
// without being counted anywhere.
Test(eth, data_shorter_than_the_core_header_is_counted, .disabled = true) {
  g_a = open_dev(10);
  g_raw = open_wire(kRawEp, g_seg);
  inject(*g_a, raw_frame(raw_hdr(pm::eth::kData, 10, 0x1, 1, 1), data_body(1, 20)));
  std::vector<RawRx> rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  uint32_t dev_epoch = rx[0].h.src_epoch;
  Drops w = drops(*g_a);
  std::vector<uint8_t> body = data_body(1, 0);
  body.resize(pm::eth::kCoreMin - 1);
  inject(*g_a, raw_frame(raw_hdr(pm::eth::kData, 10, dev_epoch, 1, 1), body));
  cr_assert_eq(g_ra.got.size(), 0u);
  w.bad_len++;
  check_drops(*g_a, w, "short DATA body");
}

// Garbage never crashes the device: fully random frames are all counted as
// drops; well-formed frames (right checksum and epochs) with random fields
// are survived, and the device still talks to a real peer afterwards.
Test(eth, random_frames_never_crash) {
  g_a = open_dev(10);
  g_raw = open_wire(kRawEp, g_seg);
  std::mt19937_64 rng(4711);
  const int N = 2000;
  for (int i = 0; i < N; i++) {
    std::vector<uint8_t> f(26 + rng() % (1514 - 26));
    for (auto& c : f) c = uint8_t(rng());
    memcpy(f.data(), seg_mac(), 6);
    f[12] = 0x88;
    f[13] = 0xB5;
    pm::eth::put32(f.data() + 22, 10);  // dst ep: routed to the device
    inject(*g_a, f);
  }
  Drops dr = drops(*g_a);
  cr_assert_eq(dr.bad_len + dr.bad_version + dr.bad_job + dr.bad_ep + dr.bad_csum + dr.stale, uint64_t(N),
               "%s", g_a->stats().c_str());
  cr_assert_eq(g_ra.got.size(), 0u);

  // Learn the device's epoch.
  inject(*g_a, raw_frame(raw_hdr(pm::eth::kData, 10, 1, 1, 1), data_body(1, 20)));
  std::vector<RawRx> rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  uint32_t dev_epoch = rx[0].h.src_epoch;
  for (int i = 0; i < N; i++) {
    uint8_t type = uint8_t(1 + rng() % 8);
    FrameHdr h = raw_hdr(type, 10, rng() % 8 ? dev_epoch : uint32_t(rng()), uint32_t(rng() % 64),
                         uint32_t(rng() % 64));
    if (rng() % 16 == 0) h.src_epoch = uint32_t(rng());
    h.window = uint16_t(rng() % 70);
    h.ts = uint32_t(rng());
    h.ts_echo = uint32_t(rng());
    std::vector<uint8_t> body(rng() % 200);
    for (auto& c : body) c = uint8_t(rng());
    if (type == pm::eth::kHello || type == pm::eth::kHelloAck) {
      if (rng() % 2) {
        std::vector<uint8_t> n = raw_name(kRawEp);
        if (body.size() < n.size()) body.resize(n.size());
        memcpy(body.data(), n.data(), n.size());
      }
    }
    FrameHdr hh = h;
    bool lie = rng() % 8 == 0;
    if (lie) hh.len = uint16_t(rng() % (body.size() + 1));
    inject(*g_a, raw_frame(hh, body, !lie));
    raw_rx();
  }
  // The device still works with a real peer.
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < 50; i++) send_blocking(*g_a, to_b, i, 100);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 50) == 1; }, 2));
  cr_assert_eq(g_rb.got.size(), 50u);
  for (uint64_t i = 0; i < 50; i++) check_pkt(g_rb.got[i], resolve(*g_b, *g_a), i, 100);
}

// --- 7. datagrams -----------------------------------------------------------

namespace {
DeviceConfig dgram_config() {
  DeviceConfig cfg = config();
  cfg.reliable = false;
  return cfg;
}
}  // namespace

Test(eth, dgram_needs_no_handshake) {
  g_a = open_dev(1, dgram_config());
  g_b = open_dev(2, dgram_config());
  PeerId to_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_pkt(*g_a, to_b, 0, 100), 0);
  cr_assert_eq(send_pkt(*g_a, to_b, 1, kMaxPayload), 0);
  cr_assert_eq(send_pkt(*g_a, to_b, 2, g_a->max_payload(to_b, make_hdr(2, 0)) + 1), -FI_EINVAL);
  cr_assert_eq(g_a->tx_ticket(to_b), 0u);
  cr_assert_eq(g_a->tx_state(to_b, 0), 1);
  cr_assert_eq(g_b->poll(g_rb, 64), 2);
  cr_assert_eq(g_rb.got.size(), 2u);
  PeerId from_a = g_rb.got[0].peer;
  cr_assert_eq(resolve(*g_b, *g_a), from_a);
  check_pkt(g_rb.got[0], from_a, 0, 100);
  check_pkt(g_rb.got[1], from_a, 1, kMaxPayload);
  cr_assert_eq(peer_stat(*g_a, 2, "tx_frames"), 2u);  // no HELLO
  cr_assert_eq(peer_stat(*g_b, 1, "rx_frames"), 2u);
  cr_assert_eq(g_a->poll(g_ra, 64), 0);  // no ACK
  cr_assert(g_a->peer_alive(to_b));
  // Replies go back without a handshake either.
  cr_assert_eq(send_pkt(*g_b, from_a, 3, 1), 0);
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  check_pkt(g_ra.got[0], to_b, 3, 1);

  // A reliable endpoint ignores datagrams, a datagram endpoint the HELLO of
  // a reliable one (which gets no HELLO_ACK).
  g_c = open_dev(3, config());
  PeerId to_c = resolve(*g_a, *g_c);
  cr_assert_eq(send_pkt(*g_a, to_c, 4, 10), 0);
  cr_assert_eq(g_c->poll(g_rc, 64), 1);
  cr_assert_eq(g_rc.got.size(), 0u);
  PeerId c_to_a = resolve(*g_c, *g_a);
  cr_assert_eq(send_pkt(*g_c, c_to_a, 5, 10), -FI_EAGAIN);  // HELLO
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  cr_assert_eq(g_ra.got.size(), 1u);
  cr_assert_eq(g_c->poll(g_rc, 64), 0);
  check_drops(*g_a, Drops{}, "dgram endpoint");
  check_drops(*g_c, Drops{}, "reliable endpoint");
}

Test(eth, dgram_losses_are_not_retransmitted) {
  g_a = open_dev(1, dgram_config());
  g_b = open_dev(2, dgram_config());
  LoopFaults f = faults();
  f.drop = 0.5;
  set_faults(f);
  PeerId to_b = resolve(*g_a, *g_b);
  const uint64_t N = 400;
  for (uint64_t i = 0; i < N; i++) {
    cr_assert_eq(send_pkt(*g_a, to_b, i, 64 + i), 0);
    if (i % 16 == 0) g_b->poll(g_rb, 64);
  }
  pump_for(0.03);
  size_t got = g_rb.got.size();
  cr_log_info("dgram: %zu of %" PRIu64 " arrived", got, N);
  cr_assert_gt(got, N / 4);
  cr_assert_lt(got, 3 * N / 4);
  PeerId from_a = resolve(*g_b, *g_a);
  uint64_t last = 0;
  for (size_t k = 0; k < got; k++) {
    uint64_t i = g_rb.got[k].hdr.msg_id - 0x1000;
    cr_assert(k == 0 || i > last, "packet %" PRIu64 " after %" PRIu64, i, last);
    check_pkt(g_rb.got[k], from_a, i, 64 + i);
    last = i;
  }
  cr_assert_eq(peer_stat(*g_a, 2, "tx_frames"), N);
  cr_assert_eq(peer_stat(*g_a, 2, "retrans"), 0u);
  cr_assert_eq(peer_stat(*g_b, 1, "rx_frames"), got);
  cr_assert_eq(g_a->poll(g_ra, 64), 0);  // nothing ever comes back
  pump_for(0.03);
  cr_assert_eq(g_rb.got.size(), got);

  // The device's own receive-side fault injection counts exactly what it
  // drops (fresh segment, no segment faults).
  g_b.reset();
  g_a.reset();
  g_rb.got.clear();
  g_seg = new_segment();
  DeviceConfig lossy = dgram_config();
  lossy.drop_rate = 0.5;
  g_a = open_dev(1, dgram_config());
  g_b = open_dev(2, lossy);
  to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < N; i++) {
    cr_assert_eq(send_pkt(*g_a, to_b, i, 10), 0);
    if (i % 16 == 0) g_b->poll(g_rb, 64);
  }
  pump_for(0.02);
  uint64_t injected = dev_stat(*g_b, "injected");
  cr_assert_gt(injected, 0u);
  cr_assert_lt(injected, N);
  cr_assert_eq(g_rb.got.size() + injected, N);
}

// --- 8. job keys ------------------------------------------------------------

Test(eth, different_jobs_do_not_talk) {
  DeviceConfig j1 = config(), j2 = config();
  j1.job = 1;
  j2.job = 2;
  g_a = open_dev(1, j1);
  g_b = open_dev(2, j2);
  PeerId to_b = resolve(*g_a, *g_b), to_a = resolve(*g_b, *g_a);
  int ra = -FI_EAGAIN, rb = -FI_EAGAIN;
  cr_assert(pump([&] { return ra != -FI_EAGAIN && rb != -FI_EAGAIN; }, 3, [&] {
    if (ra == -FI_EAGAIN) ra = send_pkt(*g_a, to_b, 0, 10);
    if (rb == -FI_EAGAIN) rb = send_pkt(*g_b, to_a, 1, 10);
  }));
  cr_assert_eq(ra, -FI_EHOSTUNREACH);
  cr_assert_eq(rb, -FI_EHOSTUNREACH);
  // Each side sent a HELLO and its retries, every one dropped as bad_job.
  uint64_t ta = peer_stat(*g_a, 2, "tx_frames"), tb = peer_stat(*g_b, 1, "tx_frames");
  cr_assert_geq(ta, 7u);
  cr_assert_geq(tb, 7u);
  cr_assert_eq(peer_stat(*g_a, 2, "rx_frames"), 0u);
  check_drops(*g_a, Drops{0, 0, tb, 0, 0, 0, 0}, "A");
  check_drops(*g_b, Drops{0, 0, ta, 0, 0, 0, 0}, "B");
  cr_assert_eq(g_ra.got.size(), 0u);
  cr_assert_eq(g_rb.got.size(), 0u);

  // A third endpoint of job 1 on the same segment still talks to A.
  g_c = open_dev(3, j1);
  PeerId to_c = resolve(*g_a, *g_c);
  send_blocking(*g_a, to_c, 5, 10);
  cr_assert(pump([&] { return g_rc.got.size() == 1; }, 2));
  check_pkt(g_rc.got[0], resolve(*g_c, *g_a), 5, 10);

  // Datagrams of another job are dropped the same way (fresh segment).
  g_c.reset();
  g_b.reset();
  g_a.reset();
  g_seg = new_segment();
  DeviceConfig d1 = j1, d2 = j2;
  d1.reliable = d2.reliable = false;
  g_a = open_dev(1, d1);
  g_b = open_dev(2, d2);
  to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < 5; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 10), 0);
  cr_assert_eq(g_b->poll(g_rb, 64), 5);
  cr_assert_eq(g_rb.got.size(), 0u);
  check_drops(*g_b, Drops{0, 0, 5, 0, 0, 0, 0}, "dgram B");
  cr_assert_not(has_peer_line(*g_b, 1));
}

// --- trunking ---------------------------------------------------------------
namespace {

// A device over one rail per segment (rail i of every device on segs[i]).
std::unique_ptr<EthDevice> open_trunk(uint32_t ep, const std::vector<std::string>& segs,
                                      const DeviceConfig& cfg = config()) {
  std::vector<std::unique_ptr<Wire>> rails;
  for (const std::string& s : segs) rails.push_back(open_wire(ep, s));
  int err = 0;
  std::unique_ptr<EthDevice> d = EthDevice::open(cfg, std::move(rails), ep, &err);
  cr_assert_not_null(d.get(), "EthDevice::open with %zu rails: %d", segs.size(), err);
  return d;
}

// "railN: up|down tx_frames=..": the value of `key` in rail N's part.
uint64_t rail_stat(const EthDevice& d, unsigned rail, const char* key) {
  std::string s = d.stats();
  std::string tag = " rail" + std::to_string(rail) + ": ";
  size_t at = s.find(tag);
  cr_assert_neq(at, std::string::npos, "no %s in %s", tag.c_str(), s.c_str());
  size_t end = s.find(';', at);
  return value_in(s.substr(at, end - at), key);
}

bool rail_up(const EthDevice& d, unsigned rail) {
  std::string s = d.stats();
  return s.find(" rail" + std::to_string(rail) + ": up ") != std::string::npos;
}

// Streams packets [first, last) from A to B over whatever rails work,
// pumping; `each(i)` runs before packet i is offered.
void trunk_stream(PeerId to_b, uint64_t first, uint64_t last, const std::vector<size_t>& lens,
                  const std::function<void(uint64_t)>& each = {}) {
  uint64_t next = first;
  bool ok = pump([&] { return next == last && g_rb.got.size() >= last && g_a->tx_state(to_b, last) == 1; }, 10,
                 [&] {
                   while (next < last) {
                     if (each) each(next);
                     int rc = send_pkt(*g_a, to_b, next, lens[next]);
                     if (rc == -FI_EAGAIN) break;
                     cr_assert_eq(rc, 0, "send %" PRIu64 ": %d", next, rc);
                     next++;
                   }
                 });
  cr_assert(ok, "%" PRIu64 " sent, %zu delivered before the deadline\n%s\n%s", next, g_rb.got.size(),
            g_a->stats().c_str(), g_b->stats().c_str());
}

void check_stream(uint64_t n, const std::vector<size_t>& lens) {
  pump_for(0.03);  // late duplicates would show up now
  cr_assert_eq(g_rb.got.size(), n, "%zu packets delivered, want %" PRIu64 "\n%s", g_rb.got.size(), n,
               g_b->stats().c_str());
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < n; i++) check_pkt(g_rb.got[i], from_a, i, lens[i]);
}

std::vector<size_t> trunk_lens(uint64_t n) {
  std::mt19937_64 rng(77);
  std::vector<size_t> lens(n);
  for (uint64_t i = 0; i < n; i++) lens[i] = i % 10 == 0 ? size_t(rng() % 100) : 600 + size_t(rng() % (kMaxPayload - 600));
  return lens;
}

}  // namespace

// Large frames spread over both rails, small ones on one; one rail slower
// than the other reorders them, and the receiver restores the order.
Test(eth, trunk_stripes_and_restores_order) {
  std::vector<std::string> segs = {new_segment(), new_segment()};
  LoopFaults slow;
  slow.delay_us = 300;
  set_faults(slow, segs[1]);
  g_a = open_trunk(1, segs);
  g_b = open_trunk(2, segs);
  cr_assert_eq(g_a->rails(), 2u);
  EthName n;
  cr_assert(pm::eth::decode_name(g_a->name(), g_a->name_len(), &n));
  cr_assert_eq(n.rails, 2);
  cr_assert_neq(memcmp(n.mac[0], n.mac[1], 6), 0);
  PeerId to_b = resolve(*g_a, *g_b);
  const uint64_t N = 3000;
  std::vector<size_t> lens = trunk_lens(N);
  trunk_stream(to_b, 0, N, lens);
  check_stream(N, lens);
  uint64_t r0 = rail_stat(*g_a, 0, "tx_frames"), r1 = rail_stat(*g_a, 1, "tx_frames");
  cr_log_info("rail frames %" PRIu64 " / %" PRIu64 "\n%s", r0, r1, g_b->stats().c_str());
  cr_assert_gt(r1 * 3, r0, "rail 1 carried %" PRIu64 " frames, rail 0 %" PRIu64, r1, r0);
  cr_assert_gt(r0 * 3, r1, "rail 0 carried %" PRIu64 " frames, rail 1 %" PRIu64, r0, r1);
  cr_assert_gt(peer_stat(*g_b, 1, "out_of_order"), 0u, "the slower rail never reordered anything");
}

// A rail whose link goes down in mid-stream: its unacknowledged frames go
// on the other rail, nothing is lost or delivered twice, and it is used
// again once its link is back.
Test(eth, trunk_rail_down_mid_stream_then_back) {
  std::vector<std::string> segs = {new_segment(), new_segment()};
  g_a = open_trunk(1, segs);
  g_b = open_trunk(2, segs);
  PeerId to_b = resolve(*g_a, *g_b);
  const uint64_t N = 3000;
  std::vector<size_t> lens = trunk_lens(N);
  LoopFaults down;
  down.down = true;
  trunk_stream(to_b, 0, 2000, lens, [&](uint64_t i) {
    if (i != 500) return;
    set_faults(down, segs[1]);
    // The link check runs every 20 ms: the stream waits for it.
    cr_assert(pump([&] { return !rail_up(*g_a, 1); }, 1), "link down not seen");
  });
  cr_assert_eq(rail_stat(*g_a, 1, "downs"), 1u, "%s", g_a->stats().c_str());
  cr_assert_not(rail_up(*g_a, 1));
  uint64_t r1_down = rail_stat(*g_a, 1, "tx_frames");
  set_faults(LoopFaults{}, segs[1]);
  pump_for(0.05);  // the link check runs every 20 ms
  cr_assert(rail_up(*g_a, 1), "%s", g_a->stats().c_str());
  trunk_stream(to_b, 2000, N, lens);
  check_stream(N, lens);
  cr_assert_gt(rail_stat(*g_a, 1, "tx_frames"), r1_down + 100, "rail 1 not used again after its link came back");
}

// A rail that silently loses everything (link up): the sender notices the
// silence, moves the rail's frames to the other one, and keeps probing it;
// when it carries frames again it is taken back.
Test(eth, trunk_silent_rail_is_taken_out_and_back) {
  std::vector<std::string> segs = {new_segment(), new_segment()};
  g_a = open_trunk(1, segs);
  g_b = open_trunk(2, segs);
  PeerId to_b = resolve(*g_a, *g_b);
  const uint64_t N = 2000;
  std::vector<size_t> lens = trunk_lens(N);
  LoopFaults black;
  black.drop = 1.0;
  trunk_stream(to_b, 0, 1200, lens, [&](uint64_t i) {
    if (i == 300) set_faults(black, segs[1]);
  });
  cr_assert_gt(rail_stat(*g_a, 1, "failovers"), 0u, "%s", g_a->stats().c_str());
  set_faults(LoopFaults{}, segs[1]);
  uint64_t rx1 = rail_stat(*g_a, 1, "rx_frames");
  cr_assert(pump([&] { return rail_stat(*g_a, 1, "rx_frames") > rx1; }, 1), "no answer to the rail probes");
  uint64_t tx1 = rail_stat(*g_a, 1, "tx_frames");
  trunk_stream(to_b, 1200, N, lens);
  check_stream(N, lens);
  cr_assert_gt(rail_stat(*g_a, 1, "tx_frames"), tx1 + 100, "rail 1 not taken back");
}

// --- 10. authenticated frames, STOP/GO ---------------------------------------

namespace {
DeviceConfig auth_config(const char* secret) {
  DeviceConfig cfg = config();
  cfg.auth = true;
  cfg.key = pm::eth::derive_key(secret, strlen(secret));
  cfg.job = kJob;  // the same job id: only the key tells the jobs apart
  return cfg;
}
}  // namespace

// The published SipHash-2-4 test vector (key 00..0f, message 00..0e).
Test(eth, siphash_matches_the_reference_vector) {
  pm::eth::AuthKey k{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  uint8_t m[15];
  for (int i = 0; i < 15; i++) m[i] = uint8_t(i);
  cr_assert_eq(pm::eth::siphash24(k, m, sizeof m), 0xa129ca6149be45e5ull);
  cr_assert_neq(pm::eth::job_id(pm::eth::derive_key("a", 1)), pm::eth::job_id(pm::eth::derive_key("b", 1)));
}

// The core header's encoding (wire version 4): every combination of wide
// and present fields, and every op and flags byte, decodes to the header
// that was encoded (seg_len: the payload's length); the length is what
// core_len says; one byte short, or an undefined field named, does not fit.
Test(eth, core_header_encoding_round_trips_every_form) {
  std::mt19937_64 rng(7);
  for (unsigned form = 0; form < 16; form++)
    for (unsigned byte = 0; byte < 256; byte++) {
      PktHdr h{};
      h.op = uint8_t(byte);
      h.flags = uint8_t(255 - byte);
      h.msg_id = rng();
      h.tag = rng();
      h.msg_len = form & 1 ? (rng() | (uint64_t(1) << 32)) : uint32_t(rng());
      h.offset = form & 2 ? (rng() | (uint64_t(1) << 63)) : uint32_t(rng());
      h.cq_data = form & 4 ? rng() | 1 : 0;
      h.reserved = form & 8 ? uint16_t(rng() | 1) : 0;
      size_t plen = byte % 7;
      h.seg_len = uint32_t(plen);
      size_t want = pm::eth::kCoreMin + (form & 1 ? 4 : 0) + (form & 2 ? 4 : 0) + (form & 4 ? 8 : 0) + (form & 8 ? 2 : 0);
      cr_assert_eq(pm::eth::core_len(h), want);
      cr_assert_leq(want, pm::eth::kCoreHdr);
      std::vector<uint8_t> b(want + plen + 8, 0xcc);
      cr_assert_eq(pm::eth::encode_core(b.data(), h), want);
      cr_assert_eq(b[want], 0xcc, "encode_core wrote past its length");
      cr_assert_eq(pm::eth::core_fits(b.data(), want + plen), want);
      cr_assert_eq(pm::eth::core_fits(b.data(), want - 1), 0u, "form %u: a byte short fits", form);
      PktHdr d;
      cr_assert_eq(pm::eth::decode_core(b.data(), want + plen, &d), want);
      cr_assert(memcmp(&d, &h, sizeof h) == 0, "form %u byte %u: decoded differs", form, byte);
      for (uint8_t bit = 0x10; bit; bit = uint8_t(bit << 1)) {
        std::vector<uint8_t> o = b;
        o[2] |= bit;
        cr_assert_eq(pm::eth::core_fits(o.data(), o.size()), 0u, "undefined field 0x%x taken", bit);
      }
    }
}

// A packet carries as much more payload as its header encodes shorter: a
// message's (27 bytes) 18 more than the longest header leaves.
Test(eth, max_payload_counts_the_header_encoding) {
  g_a = open_dev(10);
  g_b = open_dev(20);
  PeerId to_b = g_a->resolve(g_b->name(), g_b->name_len());
  PktHdr m{};
  m.op = pm::kPktData;
  m.msg_len = 1 << 20;
  m.offset = 4096;
  cr_assert_eq(g_a->max_payload(to_b, m), g_a->max_payload(to_b) + 18);
  PktHdr w = m;
  w.op = pm::kPktWrite;
  w.offset = 0x7f0000001000ull;  // an address
  w.cq_data = 5;
  cr_assert_eq(g_a->max_payload(to_b, w), g_a->max_payload(to_b) + 6);
  cr_assert_eq(g_a->rx_max_payload(to_b), g_a->max_payload(to_b) + 18);
}

// Four messages at once (the receive burst's MAC check) give what one at a
// time gives, on every path the CPU has: every length to 100 (the frames' MAC input is 60 bytes), the
// reference vector in one lane, messages that differ in one lane only.
Test(eth, siphash_of_four_at_once_matches_one_by_one) {
  pm::eth::AuthKey k{0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  uint8_t buf[4][104];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& m : buf)
    for (uint8_t& b : m) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = uint8_t(x);
    }
  for (int i = 0; i < 15; i++) buf[2][i] = uint8_t(i);
  const uint8_t* msg[4] = {buf[0], buf[1], buf[2], buf[3]};
  for (size_t len = 0; len <= 100; len++) {
    for (int path : {-1, 0, 1, 2}) {
      uint64_t out[4];
      pm::eth::siphash24_x4(k, msg, len, out, path);
      for (int i = 0; i < 4; i++)
        cr_assert_eq(out[i], pm::eth::siphash24(k, msg[i], len), "len %zu lane %d path %d", len, i, path);
    }
    uint64_t same[4];
    const uint8_t* one[4] = {buf[1], buf[1], buf[1], buf[1]};
    pm::eth::siphash24_x4(k, one, len, same);
    cr_assert(same[0] == same[1] && same[1] == same[2] && same[2] == same[3]);
  }
  uint64_t out[4];
  pm::eth::siphash24_x4(k, msg, 15, out);
  cr_assert_eq(out[2], 0xa129ca6149be45e5ull);
  pm::eth::siphash24_x4(k, msg, 60, out);
  buf[3][59] ^= 1;  // one bit of lane 3's 60-byte input changes lane 3 only
  uint64_t after[4];
  pm::eth::siphash24_x4(k, msg, 60, after);
  cr_assert_neq(after[3], out[3]);
  cr_assert(after[0] == out[0] && after[1] == out[1] && after[2] == out[2]);
}

// Same job id, same key: a session. A member with another key (or anyone
// forging frames) gets nothing through, and B keeps no state for it.
Test(eth, frames_without_the_key_are_dropped_before_any_state) {
  g_a = open_dev(1, auth_config("job-secret"));
  g_b = open_dev(2, auth_config("job-secret"));
  PeerId to_b = resolve(*g_a, *g_b);
  for (uint64_t i = 0; i < 20; i++) send_blocking(*g_a, to_b, i, 100 + i);
  cr_assert(pump([&] { return g_rb.got.size() == 20; }));
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < 20; i++) check_pkt(g_rb.got[i], from_a, i, 100 + i);
  cr_assert_eq(dev_stat(*g_b, "bad_mac"), 0u);

  // An intruder that knows the job id, names and epochs (they travel in
  // clear) but not the key: its HELLO and DATA frames are dropped.
  g_c = open_dev(3, auth_config("guessed"));
  PeerId c_to_b = resolve(*g_c, *g_b);
  int rc = send_pkt(*g_c, c_to_b, 500, 10);
  cr_assert_eq(rc, -FI_EAGAIN);  // handshaking
  pump_for(0.1);
  cr_assert_gt(dev_stat(*g_b, "bad_mac"), 0u);
  cr_assert_not(has_peer_line(*g_b, 3), "B keeps state for an unauthenticated sender:\n%s", g_b->stats().c_str());
  cr_assert_eq(g_rb.got.size(), 20u);
  cr_assert_eq(g_rb.resets.size(), 0u);
  // The genuine session goes on.
  send_blocking(*g_a, to_b, 21, 50);
  cr_assert(pump([&] { return g_rb.got.size() == 21; }));
  check_pkt(g_rb.got[20], from_a, 21, 50);
}

// The receiver has room for 5 packets: the rest wait at the receiver's
// device (unacknowledged, window 0 = STOP) and the sender stops; longer
// than dead_ms, without the peer being declared dead. When there is room
// again (GO) everything arrives, once and in order.
Test(eth, receiver_without_room_stops_the_sender_and_loses_nothing) {
  g_a = open_dev(1);
  g_b = open_dev(2);
  PeerId to_b = resolve(*g_a, *g_b);
  g_rb.room = 5;
  const uint64_t N = 60;
  uint64_t sent = 0;
  pump([&] { return false; }, 1.0, [&] {  // 1 s: over twice dead_ms
    while (sent < N && send_pkt(*g_a, to_b, sent, 200) == 0) sent++;
  });
  cr_assert_eq(g_rb.got.size(), 5u);
  cr_assert_lt(sent, N, "the sender never stopped");
  cr_assert_gt(dev_stat(*g_b, "held"), 0u);
  pump_for(0.02);  // what b said while this process was descheduled (a loaded machine) is read first
  cr_assert(g_a->peer_alive(to_b), "a stopped receiver was declared dead:\n%s", g_a->stats().c_str());
  cr_assert_neq(g_a->tx_state(to_b, 1), -FI_EHOSTUNREACH);
  g_rb.room = SIZE_MAX;
  cr_assert(pump([&] { return g_rb.got.size() == N; }, 5, [&] {
    while (sent < N && send_pkt(*g_a, to_b, sent, 200) == 0) sent++;
  }), "%zu of %llu arrived after GO\n%s\n%s", g_rb.got.size(), (unsigned long long)N, g_a->stats().c_str(),
            g_b->stats().c_str());
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i < N; i++) check_pkt(g_rb.got[i], from_a, i, 200);
  pump_for(0.05);
  cr_assert_eq(g_rb.got.size(), N);  // no duplicates
}

// --- bundles (the seed's network burst) ---------------------------------------

namespace {
DeviceConfig bundle_config() {
  DeviceConfig cfg = config();
  cfg.bundle = true;
  return cfg;
}

size_t small_len(uint64_t i) { return size_t((i * 37) % 200); }  // 0 .. 199 bytes
}  // namespace

Test(eth, small_packets_share_frames_byte_exact) {
  g_a = open_dev(1, bundle_config());
  g_b = open_dev(2, bundle_config());
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, small_len(0));
  cr_assert(pump([&] { return g_rb.got.size() == 1; }));
  // Sent one after the other before a flush: they go in few frames.
  const uint64_t N = 30;  // within the window of 32 frames even unbundled
  uint64_t frames0 = peer_stat(*g_a, 2, "tx_frames");
  for (uint64_t i = 1; i <= N; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, small_len(i)), 0);
  g_a->flush();
  cr_assert(pump([&] { return g_rb.got.size() == N + 1; }), "%zu of %llu arrived\n%s\n%s", g_rb.got.size(),
            (unsigned long long)N + 1, g_a->stats().c_str(), g_b->stats().c_str());
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i <= N; i++) check_pkt(g_rb.got[i], from_a, i, small_len(i));
  uint64_t frames = peer_stat(*g_a, 2, "tx_frames") - frames0;
  cr_assert_leq(frames, 8u, "%llu frames for %llu small packets\n%s", (unsigned long long)frames,
                (unsigned long long)N, g_a->stats().c_str());
  cr_assert_geq(dev_stat(*g_b, "rx_bundles"), 1u);
  cr_assert_eq(dev_stat(*g_a, "bundled"), N - dev_stat(*g_b, "rx_bundles"));
  // Every frame acknowledged: the tickets of the bundled packets complete.
  cr_assert(pump([&] { return g_a->tx_state(to_b, g_a->tx_ticket(to_b)) == 1; }));
  pump_for(0.02);
  cr_assert_eq(g_rb.got.size(), N + 1);  // no duplicates
}

Test(eth, a_bundle_waits_record_by_record_for_room) {
  g_a = open_dev(1, bundle_config());
  g_b = open_dev(2, bundle_config());
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 8);
  cr_assert(pump([&] { return g_rb.got.size() == 1; }));
  const uint64_t N = 12;
  g_rb.room = 4;  // the endpoint takes 3 more, then has no room
  for (uint64_t i = 1; i <= N; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, small_len(i)), 0);
  g_a->flush();
  pump_for(0.1);
  cr_assert_eq(g_rb.got.size(), 4u);
  cr_assert_gt(g_rb.refused, 0u);
  cr_assert_gt(dev_stat(*g_b, "held"), 0u);
  g_rb.room = SIZE_MAX;
  cr_assert(pump([&] { return g_rb.got.size() == N + 1; }), "%zu arrived\n%s", g_rb.got.size(), g_b->stats().c_str());
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t i = 0; i <= N; i++) check_pkt(g_rb.got[i], from_a, i, i ? small_len(i) : 8);
  pump_for(0.05);
  cr_assert_eq(g_rb.got.size(), N + 1);  // nothing delivered twice
}

Test(eth, forged_bundles_are_dropped_whole) {
  DeviceConfig cfg = config();
  cfg.delayed_ack_us = 0;
  g_a = open_dev(10, cfg);
  g_raw = open_wire(kRawEp, g_seg);
  EthDevice& d = *g_a;
  // The device's epoch, from the HELLO it answers a foreign DATA frame with.
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, 0x12345678, 1, 1), data_body(1, 20)));
  std::vector<RawRx> rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  const uint32_t dev_epoch = rx[0].h.src_epoch;
  Drops w = drops(d);

  auto rec = [](std::vector<uint8_t>& b, const std::vector<uint8_t>& r, size_t claimed) {
    uint8_t l[2];
    pm::eth::put16(l, uint16_t(claimed));
    b.insert(b.end(), l, l + 2);
    b.insert(b.end(), r.begin(), r.end());
  };
  auto bundle_frame = [&](const std::vector<uint8_t>& body, uint8_t flags = pm::eth::kFlagBundle,
                          uint8_t type = pm::eth::kData) {
    FrameHdr h = raw_hdr(type, 10, dev_epoch, 1, 1);
    h.flags = flags;
    return raw_frame(h, body);
  };
  std::vector<uint8_t> r1 = data_body(1, 20), r2 = data_body(2, 0), r3 = data_body(3, 33);
  struct Case {
    const char* what;
    std::vector<uint8_t> body;
    uint8_t flags, type;
    bool version;  // counted as bad_version (else bad_len)
  };
  std::vector<Case> cases;
  {
    std::vector<uint8_t> b;
    rec(b, r1, r1.size());
    cases.push_back({"one record only", b, pm::eth::kFlagBundle, pm::eth::kData, false});
    rec(b, r2, r2.size() - 1);
    cases.push_back({"record shorter than it says", b, pm::eth::kFlagBundle, pm::eth::kData, false});
  }
  {
    std::vector<uint8_t> b;
    rec(b, r1, r1.size());
    rec(b, r3, r3.size() + 1);
    cases.push_back({"record past the frame", b, pm::eth::kFlagBundle, pm::eth::kData, false});
  }
  {
    std::vector<uint8_t> b;
    rec(b, r1, r1.size());
    std::vector<uint8_t> tiny(pm::eth::kCoreMin - 1, 0);
    rec(b, tiny, tiny.size());
    cases.push_back({"record without a core header", b, pm::eth::kFlagBundle, pm::eth::kData, false});
  }
  {
    // A header whose encoding byte claims fields the record has no room
    // for (27 bytes: CQ data and a wide length need 39), and one that
    // names a field not defined.
    std::vector<uint8_t> b;
    rec(b, r1, r1.size());
    std::vector<uint8_t> claims(pm::eth::kCoreMin, 0);
    claims[2] = pm::eth::kCoreCq | pm::eth::kCoreLenWide;
    rec(b, claims, claims.size());
    cases.push_back({"record shorter than its header's fields", b, pm::eth::kFlagBundle, pm::eth::kData, false});
    std::vector<uint8_t> b2;
    rec(b2, r1, r1.size());
    std::vector<uint8_t> odd = data_body(2, 10);
    odd[2] |= 0x40;
    rec(b2, odd, odd.size());
    cases.push_back({"record header with an undefined field", b2, pm::eth::kFlagBundle, pm::eth::kData, false});
    // The same headers as a frame's one packet (no bundle), DATA and DGRAM.
    cases.push_back({"DATA shorter than its header's fields", claims, 0, pm::eth::kData, false});
    cases.push_back({"DATA header with an undefined field", odd, 0, pm::eth::kData, false});
    cases.push_back({"DGRAM shorter than its header's fields", claims, 0, pm::eth::kDgram, false});
  }
  {
    std::vector<uint8_t> b;
    rec(b, r1, r1.size());
    rec(b, r2, r2.size());
    b.push_back(0);
    cases.push_back({"a byte after the last record", b, pm::eth::kFlagBundle, pm::eth::kData, false});
    b.pop_back();
    cases.push_back({"bundle flag on a DGRAM frame", b, pm::eth::kFlagBundle, pm::eth::kDgram, false});
    cases.push_back({"unknown flag", b, uint8_t(pm::eth::kFlagBundle | 0x40), pm::eth::kData, true});
  }
  for (const Case& c : cases) {
    inject(d, bundle_frame(c.body, c.flags, c.type));
    (c.version ? w.bad_version : w.bad_len)++;
    check_drops(d, w, c.what);
    cr_assert_eq(g_ra.got.size(), 0u, "%s: delivered", c.what);
    for (const RawRx& x : raw_rx())  // (the device's own HELLO retries may come: no session yet)
      cr_assert_eq(x.h.type, pm::eth::kHello, "%s: answered with frame type %u", c.what, x.h.type);
  }
  // The well-formed bundle: three packets, byte-exact, one ACK.
  std::vector<uint8_t> b;
  rec(b, r1, r1.size());
  rec(b, r2, r2.size());
  rec(b, r3, r3.size());
  raw_rx();
  inject(d, bundle_frame(b));
  check_drops(d, w, "good bundle");
  cr_assert_eq(g_ra.got.size(), 3u);
  check_pkt(g_ra.got[0], g_ra.got[0].peer, 1, 20);
  check_pkt(g_ra.got[1], g_ra.got[0].peer, 2, 0);
  check_pkt(g_ra.got[2], g_ra.got[0].peer, 3, 33);
  rx = raw_rx();
  size_t acks = 0;
  for (const RawRx& x : rx) {
    if (x.h.type == pm::eth::kHello) continue;
    cr_assert_eq(x.h.type, pm::eth::kAck);
    cr_assert_eq(x.h.ack, 2u);
    acks++;
  }
  cr_assert_eq(acks, 1u);
}

// An ACK that covers the frame still open for bundling (it was never sent,
// so only a broken or forged peer can send one) must not take its buffer:
// the frame still goes out whole at the next flush.
Test(eth, an_ack_for_the_open_frame_leaves_it_intact) {
  DeviceConfig cfg = bundle_config();
  cfg.delayed_ack_us = 0;
  g_a = open_dev(10, cfg);
  g_raw = open_wire(kRawEp, g_seg);
  EthDevice& d = *g_a;
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, 0x12345678, 1, 1), data_body(1, 20)));
  std::vector<RawRx> rx = raw_rx();
  cr_assert_eq(rx.size(), 1u);
  const uint32_t dev_epoch = rx[0].h.src_epoch;
  // A genuine first DATA: the session is up (our HELLO_ACK implied).
  inject(d, raw_frame(raw_hdr(pm::eth::kData, 10, dev_epoch, 1, 1), data_body(1, 20)));
  cr_assert_eq(g_ra.got.size(), 1u);
  PeerId to_raw = g_ra.got[0].peer;
  raw_rx();
  // A small packet: its frame (seq 1) stays open until the next flush.
  cr_assert_eq(send_pkt(d, to_raw, 7, 40), 0);
  // The raw side "acknowledges" seq 1 before it was sent.
  FrameHdr ack = raw_hdr(pm::eth::kAck, 10, dev_epoch, 0, 2);
  inject(d, raw_frame(ack, {}));  // the poll ends with a flush: the open frame leaves
  bool seen = false;
  for (const RawRx& x : raw_rx()) {
    if (x.h.type != pm::eth::kData) continue;
    cr_assert_eq(x.h.seq, 1u);
    cr_assert_eq(x.h.len, pm::eth::core_len(make_hdr(7, 40)) + 40);
    std::vector<uint8_t> body(x.bytes.begin() + kBody, x.bytes.begin() + kBody + x.h.len);
    cr_assert(body == data_body(7, 40), "the open frame's payload was altered");
    seen = true;
  }
  cr_assert(seen, "the open frame was not sent");
}

// --- a descheduled receiver, a lost tail -----------------------------------------

namespace {

// Devices a (1) and b (2) with `cfg`, their session up: packet 0 (10 bytes)
// delivered and acknowledged. Returns b as a's peer.
PeerId pair_up(const DeviceConfig& cfg) {
  g_a = open_dev(1, cfg);
  g_b = open_dev(2, cfg);
  PeerId to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, to_b, 0, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1) == 1; }));
  return to_b;
}

// Polls only `dev` for `seconds` (the other side is "descheduled").
void poll_only(EthDevice& dev, Recorder& rec, double seconds) {
  uint64_t end = pm::now_ns() + uint64_t(seconds * 1e9);
  while (pm::now_ns() < end) dev.poll(rec, 64);
}

// a sends `n` packets while b is not polled for `hold_s`; then both run
// until every packet is acknowledged. Returns a's RTO towards b after.
uint64_t rto_after_a_held_receiver(const DeviceConfig& cfg, unsigned n, double hold_s) {
  PeerId to_b = pair_up(cfg);
  for (unsigned i = 1; i <= n; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 100), 0);
  poll_only(*g_a, g_ra, hold_s);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1 + n) == 1; }), "%s\n%s", g_a->stats().c_str(),
            g_b->stats().c_str());
  cr_assert_eq(g_rb.got.size(), n + 1);
  PeerId from_a = resolve(*g_b, *g_a);
  for (unsigned i = 1; i <= n; i++) check_pkt(g_rb.got[i], from_a, i, 100);
  return peer_stat(*g_a, 2, "rto_us");
}

}  // namespace

// The frames waited 300 ms in the receiver's queue: its frames say so, and
// the sender's round trip stays the network's (its RTO adds the hold once,
// as the peer's recent maximum, not the hold and four times its variation
// as a round trip). Bounds with margins of 3x or more for a loaded machine.
Test(eth, a_descheduled_receiver_does_not_inflate_the_senders_round_trip) {
  DeviceConfig cfg = config();
  cfg.rto_max_us = 1000000;
  cfg.retries = 40;
  uint64_t rto = rto_after_a_held_receiver(cfg, 4, 0.3);
  uint64_t srtt = peer_stat(*g_a, 2, "srtt_us");
  cr_assert_lt(srtt, 10000u, "SRTT %llu us after a 300 ms hold:\n%s", (unsigned long long)srtt, g_a->stats().c_str());
  cr_assert_lt(rto, 600000u, "RTO %llu us after a 300 ms hold:\n%s", (unsigned long long)rto, g_a->stats().c_str());
  // The spurious RTOs during the hold were recognised: nothing but the
  // timer's own resends of the oldest frame went twice.
  cr_assert_eq(dev_stat(*g_a, "recovery_resends"), 0u, "%s", g_a->stats().c_str());
  cr_assert_geq(dev_stat(*g_a, "spurious_rto"), 1u, "%s", g_a->stats().c_str());
}

// Without the correction the same hold inflates it (the test above can fail).
Test(eth, without_echo_hold_the_held_receiver_inflates_the_round_trip) {
  DeviceConfig cfg = config();
  cfg.rto_max_us = 1000000;
  cfg.retries = 40;
  cfg.echo_hold = false;
  rto_after_a_held_receiver(cfg, 4, 0.3);
  uint64_t srtt = peer_stat(*g_a, 2, "srtt_us");
  cr_assert_gt(srtt, 30000u, "SRTT %llu us after a 300 ms hold:\n%s", (unsigned long long)srtt, g_a->stats().c_str());
}

namespace {

// A window of 32 loses its tail: all but the first `cap` frames. By a full
// receive queue (ring: the receiver's wire knows it dropped frames, as
// AF_PACKET's ring does), or on the way (the receiver cannot know). Returns
// how many frames were resent.
uint64_t lose_a_tail(DeviceConfig cfg, unsigned cap, bool ring = true) {
  PeerId to_b = pair_up(cfg);
  LoopFaults f = faults();
  f.rx_cap = ring ? cap : 0;
  set_faults(f);
  // b takes in its smaller ring (its window shares); a does not know yet
  // (as a sender that last heard b before others started sending to it).
  poll_only(*g_b, g_rb, 0.003);
  const unsigned n = kWindow;
  for (unsigned i = 1; i <= n; i++) {
    if (!ring && i == cap + 1) {
      f.drop = 1;
      set_faults(f);
    }
    cr_assert_eq(send_pkt(*g_a, to_b, i, 300), 0, "send %u", i);
  }
  g_a->flush();
  f.drop = 0;
  set_faults(f);
  cr_assert_eq(dev_stat(*g_b, "rx_ring_drops"), ring ? n - cap : 0, "%s", g_b->stats().c_str());
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1 + n) == 1; }, 10), "%s\n%s", g_a->stats().c_str(),
            g_b->stats().c_str());
  cr_assert_eq(g_rb.got.size(), n + 1);
  PeerId from_a = resolve(*g_b, *g_a);
  for (unsigned i = 1; i <= n; i++) check_pkt(g_rb.got[i], from_a, i, 300);
  pump_for(0.02);
  cr_assert_eq(g_rb.got.size(), n + 1, "duplicates delivered");
  return peer_stat(*g_a, 2, "retrans");
}

}  // namespace

// 28 of 32 frames lost on the way, none after them to show the gap: after
// one RTO, the acknowledgements of the resent frames release the rest
// (counted as recovery resends), instead of one RTO per frame.
Test(eth, a_lost_tail_is_resent_after_one_timeout) {
  DeviceConfig cfg = slow_config();  // RTO 50 ms: an RTO per frame would be 28 of them
  cfg.retries = 40;
  cfg.dead_ms = 60000;
  uint64_t t0 = pm::now_ns();
  uint64_t resent = lose_a_tail(cfg, 4, false);
  double s = double(pm::now_ns() - t0) / 1e9;
  uint64_t rec = dev_stat(*g_a, "recoveries"), res = dev_stat(*g_a, "recovery_resends");
  cr_log_info("tail of 28: %llu resent, %llu recoveries, %llu recovery resends, %.3f s", (unsigned long long)resent,
              (unsigned long long)rec, (unsigned long long)res, s);
  cr_assert_geq(res, kWindow - 4 - 1, "%s", g_a->stats().c_str());
  // One RTO, one recovery (two if a resend was lost to a stall).
  cr_assert_leq(rec, 2u, "%s", g_a->stats().c_str());
  cr_assert_eq(dev_stat(*g_a, "spurious_rto"), 0u, "%s", g_a->stats().c_str());
  cr_assert_eq(dev_stat(*g_b, "kicks"), 0u, "the receiver cannot know of losses on the way");
}

// 28 of 32 dropped by the receiver's full queue: the receiver's wire says so
// (AF_PACKET: TP_STATUS_LOSING), and once the receiver has drained it, it
// tells the sender (a NAK at the first missing frame with nothing beyond):
// the tail is resent at once, with no RTO (50 ms here) at all.
Test(eth, a_tail_dropped_by_a_full_receive_ring_is_resent_without_a_timeout) {
  DeviceConfig cfg = slow_config();
  cfg.retries = 40;
  cfg.dead_ms = 60000;
  lose_a_tail(cfg, 4, true);
  cr_assert_geq(dev_stat(*g_b, "kicks"), 1u, "%s", g_b->stats().c_str());
  cr_assert_geq(dev_stat(*g_a, "kicked"), 1u, "%s", g_a->stats().c_str());
  cr_assert_geq(dev_stat(*g_a, "recovery_resends"), kWindow - 4, "%s", g_a->stats().c_str());
  cr_assert_eq(dev_stat(*g_a, "recoveries"), 0u, "an RTO was needed:\n%s", g_a->stats().c_str());
}

// A window learnt 60 ms ago may be stale (the receiver may share its ring
// with more senders since): only a few frames go until the peer is heard
// again, then the whole window.
Test(eth, a_stale_window_lets_only_a_few_frames_go_until_the_peer_is_heard) {
  DeviceConfig cfg = slow_config();
  cfg.stale_window_ms = 40;  // (a test process stalled longer than that would fail the second part)
  PeerId to_b = pair_up(cfg);
  usleep(60000);
  unsigned sent = 0;
  while (sent < kWindow && send_pkt(*g_a, to_b, 1 + sent, 100) == 0) sent++;
  cr_assert_eq(sent, 4u, "%u frames went on a 60 ms old window", sent);
  // b takes them and acknowledges: the window is current again.
  cr_assert(pump([&] { return g_a->tx_state(to_b, 1 + sent) == 1; }));
  unsigned more = 0;
  while (sent + more < kWindow && send_pkt(*g_a, to_b, 1 + sent + more, 100) == 0) more++;
  cr_assert_eq(more, kWindow - 4, "%u more after the peer was heard", more);
  cr_assert(pump([&] { return g_rb.got.size() == 1 + kWindow; }));
  PeerId from_a = resolve(*g_b, *g_a);
  for (unsigned i = 1; i <= kWindow; i++) check_pkt(g_rb.got[i], from_a, i, 100);
}

// The other half: the acknowledgements wait 300 ms in the sender's queue.
// The sample runs to when they arrived, not to when the sender read them.
Test(eth, a_sender_reading_its_acks_late_keeps_its_rto) {
  for (bool hold : {true, false}) {
    DeviceConfig cfg = config();
    cfg.rto_max_us = 1000000;
    cfg.retries = 40;
    cfg.echo_hold = hold;
    g_b.reset();
    g_a.reset();
    g_rb.got.clear();
    g_seg = new_segment();
    PeerId to_b = pair_up(cfg);
    for (unsigned i = 1; i <= 4; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 100), 0);
    g_a->flush();
    poll_only(*g_b, g_rb, 0.3);
    cr_assert_eq(g_rb.got.size(), 5u);
    cr_assert(pump([&] { return g_a->tx_state(to_b, 5) == 1; }));
    uint64_t rto = peer_stat(*g_a, 2, "rto_us");
    if (hold)
      cr_assert_lt(rto, 150000u, "RTO %llu us:\n%s", (unsigned long long)rto, g_a->stats().c_str());
    else
      cr_assert_gt(rto, 200000u, "RTO %llu us without echo_hold:\n%s", (unsigned long long)rto, g_a->stats().c_str());
  }
}

// The hold byte never overstates a hold and keeps it within 1/8 (+8 µs).
Test(eth, hold_codes_round_down_within_an_eighth) {
  for (uint64_t ns = 0; ns < 4000000000ull; ns = ns * 9 / 8 + 1234) {
    uint64_t back = pm::eth::hold_ns(pm::eth::hold_code(ns));
    if (ns <= 15ull * 32768 * 8000) {
      cr_assert_leq(back, ns, "%llu ns encoded as %llu", (unsigned long long)ns, (unsigned long long)back);
      cr_assert_geq(back + 8000 + ns / 8, ns, "%llu ns encoded as %llu", (unsigned long long)ns,
                    (unsigned long long)back);
    }
  }
  cr_assert_eq(pm::eth::hold_code(UINT64_MAX), 0xffu);
  cr_assert_eq(pm::eth::hold_ns(0xff), 15ull * 32768 * 8000);
  cr_assert_eq(pm::eth::hold_ns(0), 0u);
}

// The NAK tests' configuration: a window of 128, no end to the retries nor
// death for a while, RTO from rto_us to twice that.
DeviceConfig nak_config(uint32_t rto_us) {
  DeviceConfig cfg = config();
  cfg.window = 128;
  cfg.retries = 1000;
  cfg.dead_ms = 60000;
  cfg.rto_init_us = rto_us;
  cfg.rto_min_us = rto_us;
  cfg.rto_max_us = 2 * rto_us;
  return cfg;
}

// A forged (or repeated) empty-bitmap NAK, sent by whoever can put frames
// on the segment under b's name: the first makes a resend at most 64
// frames (of 128 in flight), the next ones within a round trip (RTO_MIN
// 200 ms here) nothing. Before the cap, each one resent the whole window.
Test(eth, empty_bitmap_naks_cannot_multiply_resends) {
  PeerId to_b = pair_up(nak_config(200000));
  g_raw = open_wire(2, g_seg);  // opened after b: it takes b's frames from now on
  unsigned sent = 0;
  int rc = 0;
  while (sent < 128 && (rc = send_pkt(*g_a, to_b, 1 + sent, 1000)) == 0) sent++;
  g_a->flush();
  std::vector<RawRx> rx, more;
  while (!(more = raw_rx()).empty()) rx.insert(rx.end(), more.begin(), more.end());
  cr_assert_geq(rx.size(), 100u, "a sent %zu frames (%u taken, then %d)\n%s", rx.size(), sent, rc, g_a->stats().c_str());
  FrameHdr d0 = rx[0].h;
  usleep(2000);  // older than a round trip (the frames it may resend)
  size_t resent = 0;
  for (int round = 0; round < 3; round++) {
    std::vector<uint8_t> fb = nak_to_a(d0, d0.seq, 0, 128);
    Frame fr{fb.data(), fb.size()};
    cr_assert_eq(g_raw->tx_burst(&fr, 1), 1);
    g_a->poll(g_ra, 64);
    g_a->flush();
    size_t n = 0;
    while (!(more = raw_rx()).empty()) n += more.size();
    if (round == 0) cr_assert(n > 0 && n <= 64, "the first NAK: %zu frames resent", n);
    resent += n;
  }
  cr_assert_leq(resent, 64u, "three NAKs within a round trip: %zu frames resent", resent);
  cr_assert_eq(dev_stat(*g_a, "kicked"), 1u);
}

// NAKs with a bitmap (forged, or repeated) resend a frame sent once at the
// first, however young, and a resent one at most once per quarter of the
// round trip and of the minimum RTO (1 s here: no RTO fires during the
// test): three at once resend the 64 frames they name once; one more, a
// quarter of the minimum RTO later, resends them again.
Test(eth, bitmap_naks_resend_a_frame_once_per_quarter_round_trip) {
  DeviceConfig cfg = nak_config(1000000);
  LoopFaults f = faults();
  f.delay_us = 5000;  // a round trip of at least 10 ms
  set_faults(f);
  PeerId to_b = pair_up(cfg);
  uint64_t srtt_us = peer_stat(*g_a, 2, "srtt_us");
  cr_assert_geq(srtt_us, 10000u);
  g_raw = open_wire(2, g_seg);  // opened after b: it takes b's frames from now on
  for (unsigned i = 1; i <= 100; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 300), 0, "send %u", i);
  g_a->flush();
  std::vector<RawRx> rx = raw_rx_wait(100, 5000);
  cr_assert_eq(rx.size(), 100u);
  FrameHdr d0 = rx[0].h;
  uint64_t re0 = peer_stat(*g_a, 2, "retrans");
  // Three NAKs at d0 naming the 64 frames from d0 (only bit 63 set).
  std::vector<uint8_t> nak = nak_to_a(d0, d0.seq, uint64_t(1) << 63, 128);
  std::array<Frame, 3> naks{Frame{nak.data(), nak.size()}, Frame{nak.data(), nak.size()},
                            Frame{nak.data(), nak.size()}};
  cr_assert_eq(g_raw->tx_burst(naks.data(), 3), 3);
  auto resent = [&] { return peer_stat(*g_a, 2, "retrans") - re0; };
  cr_assert(pump([&] { return dev_stat(*g_a, "nak_skips") == 128; }, 2),
            "%llu resent\n%s", (unsigned long long)resent(), g_a->stats().c_str());
  cr_assert_eq(resent(), 64u, "three NAKs at once");
  cr_assert_eq(raw_rx_wait(64, 5000).size(), 64u);
  usleep(cfg.rto_min_us / 4 + 20000);
  cr_assert_eq(g_raw->tx_burst(naks.data(), 1), 1);
  cr_assert(pump([&] { return resent() == 128; }, 2), "a NAK 270 ms later: %llu resent\n%s",
            (unsigned long long)resent(), g_a->stats().c_str());
  cr_assert_eq(dev_stat(*g_a, "nak_skips"), 128u);
  cr_assert_eq(dev_stat(*g_a, "kicked"), 0u);
}

// Two peers with nothing to say to each other for longer than the dead time
// (400 ms here), then an operation asks whether b is alive: b is probed, not
// declared dead for the silence nobody asked it to break; it answers.
Test(eth, a_peer_quiet_past_the_dead_time_is_probed_not_declared_dead) {
  PeerId to_b = pair_up(config());
  usleep(600000);
  cr_assert(g_a->peer_alive(to_b), "an idle peer was declared dead at the first question:\n%s", g_a->stats().c_str());
  cr_assert(pump([&] { return dev_stat(*g_a, "peers") == 1 && g_a->peer_alive(to_b) && g_rb.got.size() == 1; }, 0.2));
  send_blocking(*g_a, to_b, 1, 10);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 2) == 1; }), "%s", g_a->stats().c_str());
  cr_assert_eq(g_rb.got.size(), 2u);
  cr_assert_eq(dev_stat(*g_a, "resets"), 0u, "%s", g_a->stats().c_str());
}

// --- the payload sum's fast paths, and the wait fd ---------------------------------

// The vector paths compute the wire's sum exactly: against the word-by-word
// definition at every length up to 300 and every start offset in a 32-byte
// block, at 9,000 random bytes, and against values the definition gave
// before the fast paths existed (a change to both would break the wire).
Test(eth, payload_sum_fast_paths_match_the_definition) {
  std::vector<uint8_t> v(9100);
  std::mt19937_64 rng(12345);
  for (auto& x : v) x = uint8_t(rng());
  for (size_t off = 0; off < 32; off++)
    for (size_t n = 0; n <= 300; n++)
      cr_assert_eq(pm::eth::payload_sum(v.data() + off, n), pm::eth::payload_sum_portable(v.data() + off, n),
                   "offset %zu length %zu", off, n);
  cr_assert_eq(pm::eth::payload_sum(v.data() + 3, 9000), pm::eth::payload_sum_portable(v.data() + 3, 9000));
  // Each path on its own (the dispatch takes only one here), over buffers of
  // exactly the summed size (a read past the end is a sanitizer report).
  int paths = 0;
  for (int path = 0; path < 3; path++) {
    uint32_t probe;
    if (!pm::eth::payload_sum_by(path, v.data(), 0, &probe)) continue;
    paths++;
    for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(63), size_t(64), size_t(100),
                     size_t(1441), size_t(9000)}) {
      std::unique_ptr<uint8_t[]> b(new uint8_t[n ? n : 1]);
      memcpy(b.get(), v.data() + 5, n);
      uint32_t got = 0;
      cr_assert(pm::eth::payload_sum_by(path, b.get(), n, &got));
      cr_assert_eq(got, pm::eth::payload_sum_portable(v.data() + 5, n), "path %d length %zu", path, n);
    }
  }
#if defined(__x86_64__)
  cr_assert_geq(paths, 2, "the portable and the SSE2 path at least");
#endif
  for (size_t i = 0; i < v.size(); i++) v[i] = uint8_t(i * 7 + 3);
  const std::pair<size_t, uint32_t> known[] = {{0, 0xb5b36b62}, {31, 0x2d593cdd}, {32, 0xd16d50cb},
                                               {1000, 0x852dc18a}, {1441, 0x65146f18}, {9000, 0x762e5951}};
  for (auto [n, sum] : known) {
    cr_assert_eq(pm::eth::payload_sum(v.data(), n), sum, "length %zu", n);
    cr_assert_eq(pm::eth::payload_sum_portable(v.data(), n), sum, "length %zu", n);
  }
}

// A frame whose payload stays in the sender's buffer is summed in two
// pieces (its core header, then the payload): the same value as the
// pieces put together, wherever the cut falls in a block, each piece in a
// buffer of exactly its size.
Test(eth, payload_sum_in_two_pieces_matches_the_whole) {
  std::vector<uint8_t> v(9100);
  std::mt19937_64 rng(777);
  for (auto& x : v) x = uint8_t(rng());
  for (size_t total : {size_t(0), size_t(1), size_t(31), size_t(47), size_t(48), size_t(64), size_t(65),
                       size_t(100), size_t(1458), size_t(9000)})
    for (size_t cut = 0; cut <= std::min<size_t>(total, 70); cut++) {
      std::vector<uint8_t> a(v.begin(), v.begin() + long(cut)), b(v.begin() + long(cut), v.begin() + long(total));
      cr_assert_eq(pm::eth::payload_sum2(a.data(), a.size(), b.data(), b.size()),
                   pm::eth::payload_sum_portable(v.data(), total), "length %zu cut at %zu", total, cut);
    }
  cr_assert_eq(pm::eth::payload_sum2(v.data(), 48, v.data() + 48, 1410), pm::eth::payload_sum(v.data(), 1458));
}

// The payload's keyed hash (payload_mac): the vector path is the
// definition's value at every length up to 300 from every offset in a
// block and at the longest payloads; a payload in two pieces (a frame whose
// payload stays in the sender's buffer) hashes as the whole, wherever the
// cut falls; each half of the pair changes with the key, and a change the
// frame sum cannot see changes both.
Test(eth, payload_hash_fast_path_and_pieces_match_the_definition) {
  pm::eth::PayloadKey k = pm::eth::payload_key(pm::eth::derive_key("job-secret", 10));
  pm::eth::PayloadKey k2 = pm::eth::payload_key(pm::eth::derive_key("other", 5));
  cr_assert_eq(k.w.size(), pm::eth::kNhMaxPayload / 4 + 4);
  std::vector<uint8_t> v(pm::eth::kNhMaxPayload + 40);
  std::mt19937_64 rng(4242);
  for (auto& x : v) x = uint8_t(rng());
  for (size_t off = 0; off < 32; off++)
    for (size_t n = 0; n <= 300; n++)
      cr_assert(pm::eth::payload_hash(k, v.data() + off, n) == pm::eth::payload_hash_portable(k, v.data() + off, n),
                "offset %zu length %zu", off, n);
  for (size_t n : {size_t(1458), size_t(8950), pm::eth::kNhMaxPayload - 1, pm::eth::kNhMaxPayload})
    cr_assert(pm::eth::payload_hash(k, v.data() + 3, n) == pm::eth::payload_hash_portable(k, v.data() + 3, n),
              "length %zu", n);
  for (size_t total : {size_t(0), size_t(1), size_t(31), size_t(48), size_t(65), size_t(1458), size_t(9000)})
    for (size_t cut = 0; cut <= std::min<size_t>(total, 70); cut++) {
      std::vector<uint8_t> a(v.begin(), v.begin() + long(cut)), b(v.begin() + long(cut), v.begin() + long(total));
      cr_assert(pm::eth::payload_hash(k, a.data(), a.size(), b.data(), b.size()) ==
                    pm::eth::payload_hash_portable(k, v.data(), total),
                "length %zu cut at %zu", total, cut);
    }
  pm::eth::PayloadHash h = pm::eth::payload_hash(k, v.data(), 1000), o = pm::eth::payload_hash(k2, v.data(), 1000);
  cr_assert(h.h0 != o.h0 && h.h1 != o.h1, "the hash does not follow the key");
  cr_assert_neq(h.h0, h.h1);
  // +d, -2d, +d to lane 0 of three blocks in a row: the frame sum stays.
  std::vector<uint8_t> w(v.begin(), v.begin() + 1000);
  auto add64 = [&](size_t at, uint64_t d) {
    uint64_t x;
    memcpy(&x, w.data() + at, 8);
    x += d;
    memcpy(w.data() + at, &x, 8);
  };
  add64(64, 0x1234567);
  add64(96, uint64_t(-2 * 0x1234567));
  add64(128, 0x1234567);
  cr_assert_eq(pm::eth::payload_sum(w.data(), w.size()), pm::eth::payload_sum(v.data(), 1000));
  cr_assert_neq(memcmp(w.data(), v.data(), 1000), 0);
  pm::eth::PayloadHash hw = pm::eth::payload_hash(k, w.data(), w.size());
  cr_assert(hw.h0 != h.h0 && hw.h1 != h.h1, "a change the frame sum cannot see left the hash");
}

namespace {
// An attacker on the segment takes A's DATA frame to B (a second wire of
// B's id), alters its payload so that the frame sum stays (+d, -2d, +d to
// lane 0 of three blocks in a row) and puts it on the wire in place of the
// genuine one. The header, and so the MAC over it, is unchanged.
// A and B under one job secret, packet 0 (`len` bytes) delivered; then an
// attacker's two wires: `mitm`, of B's id (opened last: B's frames come to
// it), and g_raw, to put frames on the segment.
struct Intercept {
  PeerId to_b, from_a;
  std::unique_ptr<Wire> mitm;
};
Intercept intercept_a_to_b(const DeviceConfig& cfg, uint32_t len) {
  g_a = open_dev(1, cfg);
  g_b = open_dev(2, cfg);
  Intercept x;
  x.to_b = resolve(*g_a, *g_b);
  send_blocking(*g_a, x.to_b, 0, len);
  cr_assert(pump([&] { return g_rb.got.size() == 1; }));
  x.from_a = resolve(*g_b, *g_a);
  x.mitm = open_wire(2, g_seg);
  g_raw = open_wire(kRawEp, g_seg);
  return x;
}

// The first `want` DATA frames from A that the mitm wire takes whose
// payload is longer than `min_len`, whole (A is polled meanwhile).
std::vector<std::vector<uint8_t>> take_data_frames(Wire& mitm, size_t want, size_t min_len) {
  std::vector<std::vector<uint8_t>> got;
  for (int k = 0; k < 2000 && got.size() < want; k++) {
    g_a->poll(g_ra, 64);
    Frame fr[16];
    int n = mitm.rx_burst(fr, 16);
    for (int i = 0; i < n; i++) {
      FrameHdr h = pm::eth::decode_hdr(fr[i].data + pm::eth::kEthHdr);
      if (h.type == pm::eth::kData && h.len > min_len && got.size() < want)
        got.emplace_back(fr[i].data, fr[i].data + fr[i].len);
    }
    mitm.rx_release();
    usleep(100);
  }
  cr_assert_eq(got.size(), want, "the DATA frames were not seen");
  return got;
}

void forge_payload_under_the_same_sum(bool payload_mac) {
  DeviceConfig cfg = auth_config("job-secret");
  cfg.payload_mac = payload_mac;
  Intercept x = intercept_a_to_b(cfg, 300);
  PeerId to_b = x.to_b, from_a = x.from_a;
  std::unique_ptr<Wire> mitm = std::move(x.mitm);
  cr_assert_eq(send_pkt(*g_a, to_b, 1, 300), 0);
  g_a->flush();
  std::vector<uint8_t> f = std::move(take_data_frames(*mitm, 1, 200)[0]);
  FrameHdr h = pm::eth::decode_hdr(f.data() + pm::eth::kEthHdr);
  uint8_t* body = f.data() + kBody;
  uint32_t sum = pm::eth::payload_sum(body, h.len);
  auto add64 = [&](size_t at, uint64_t d) {
    uint64_t x;
    memcpy(&x, body + at, 8);
    x += d;
    memcpy(body + at, &x, 8);
  };
  add64(64, 0x0101010101ull);
  add64(96, uint64_t(-2 * 0x0101010101ll));
  add64(128, 0x0101010101ull);
  cr_assert_eq(pm::eth::payload_sum(body, h.len), sum, "the forgery changed the frame sum");
  mitm.reset();  // B's wire takes its frames again
  Frame fr{f.data(), f.size()};
  cr_assert_eq(g_raw->tx_burst(&fr, 1), 1);
  g_raw->tx_flush();
  cr_assert(pump([&] { return g_rb.got.size() == 2; }), "packet 1 never arrived\n%s\n%s", g_a->stats().c_str(),
            g_b->stats().c_str());
  std::vector<uint8_t> want = payload(1, 300);
  bool altered = g_rb.got[1].data != want;
  if (payload_mac) {
    cr_assert_not(altered, "B took the altered payload in spite of payload_mac");
    check_pkt(g_rb.got[1], from_a, 1, 300);  // the genuine copy, resent
    cr_assert_geq(dev_stat(*g_b, "bad_mac"), 1u);  // the MAC is checked first
  } else {
    cr_assert(altered, "without payload_mac the forgery should pass the MAC (the test did not forge)");
  }
  pump_for(0.05);
  cr_assert_eq(g_rb.got.size(), 2u);  // nothing delivered twice
}
}  // namespace

// A burst's MACs are checked four at a time (mac_burst): each frame gets
// its own verdict. Ten genuine DATA frames, captured, reach B in two
// bursts with copies whose header (inside the MAC's input, so that each
// lane's input differs) was altered, between them and in every lane
// position, and frames too short for a MAC that shift the groups: nine
// MAC inputs in the first burst (two groups and a single one, hashed
// alone), seven in the second (a group of three, padded). Exactly the
// altered copies count as bad_mac (and a copy cut shorter than the payload
// its header claims as bad_len), and the ten packets arrive once each,
// in order; burst_macs shows the groups were used. With payload_mac the
// copies differ in a payload byte instead, which only the MAC covers
// (through the payload's hash, computed before the group's MACs).
namespace {
void burst_verdicts(bool payload_mac) {
  DeviceConfig cfg = auth_config("job-secret");
  cfg.payload_mac = payload_mac;
  Intercept x = intercept_a_to_b(cfg, 100);
  for (int i = 1; i <= 10; i++) cr_assert_eq(send_pkt(*g_a, x.to_b, uint32_t(i), 100 + 10 * i), 0);
  g_a->flush();
  std::vector<std::vector<uint8_t>> data = take_data_frames(*x.mitm, 10, 0);
  x.mitm.reset();  // B's wire takes its frames again
  PeerId from_a = x.from_a;
  auto forged = [&](size_t i) {
    std::vector<uint8_t> f = data[i];
    if (payload_mac) f.back() ^= 0x10;  // the payload's last byte: its hash differs
    else f[pm::eth::kEthHdr + 20] ^= 0x10;  // a header byte: another MAC input, the same MAC field
    return f;
  };
  std::vector<uint8_t> stub(data[0].begin(), data[0].begin() + 40);  // shorter than a MAC's input
  // Long enough for a MAC's input, shorter than the payload its header
  // claims: refused before any MAC (or payload hash) is computed for it.
  std::vector<uint8_t> cut(data[7].begin(), data[7].end() - 10);
  auto send_burst = [&](const std::vector<std::vector<uint8_t>>& burst) {
    std::vector<Frame> fr;
    for (auto& f : burst) fr.push_back(Frame{f.data(), f.size()});
    cr_assert_eq(g_raw->tx_burst(fr.data(), int(fr.size())), int(fr.size()));
    g_raw->tx_flush();
  };
  uint64_t bad0 = dev_stat(*g_b, "bad_mac"), len0 = dev_stat(*g_b, "bad_len"), burst0 = dev_stat(*g_b, "burst_macs");
  // MAC inputs: f0 F1 d1 F2 | d2 F3 d3 d4 | F4  (stubs skipped)
  send_burst({data[0], forged(1), stub, data[1], forged(2), data[2], forged(3), data[3], data[4], stub, forged(4)});
  cr_assert(pump([&] { return g_rb.got.size() == 6; }), "%s", g_b->stats().c_str());
  // MAC inputs: F5 d5 d6 d7 | F8 d8 d9  (a group of three; the cut copy skipped)
  send_burst({forged(5), data[5], stub, data[6], cut, data[7], forged(8), data[8], data[9]});
  cr_assert(pump([&] { return g_rb.got.size() == 11; }), "%s", g_b->stats().c_str());
  cr_assert_eq(dev_stat(*g_b, "bad_mac") - bad0, 6u, "%s", g_b->stats().c_str());
  cr_assert_eq(dev_stat(*g_b, "bad_len") - len0, 4u, "%s", g_b->stats().c_str());
  cr_assert_geq(dev_stat(*g_b, "burst_macs") - burst0, 15u, "the bursts were not checked four at a time: %s",
                g_b->stats().c_str());
  for (int i = 1; i <= 10; i++) check_pkt(g_rb.got[size_t(i)], from_a, uint32_t(i), 100 + 10 * i);
  pump_for(0.05);
  cr_assert_eq(g_rb.got.size(), 11u);  // nothing delivered twice (A's own frames are duplicates now)
}
}  // namespace

Test(eth, each_frame_of_a_burst_gets_its_own_mac_verdict) { burst_verdicts(false); }
Test(eth, each_frame_of_a_burst_gets_its_own_mac_verdict_with_payload_mac) { burst_verdicts(true); }

// With payload_mac the MAC covers the payload's keyed hash: the altered
// frame is refused and the genuine one (resent) is what B gets.
Test(eth, a_payload_altered_under_the_same_frame_sum_is_refused_with_payload_mac) {
  forge_payload_under_the_same_sum(true);
}

// The control: with the MAC over the header alone, the same forgery is
// taken (what payload_mac is for; pmeth turns it on wherever the job has a
// secret).
Test(eth, without_payload_mac_a_payload_altered_under_the_same_sum_gets_through) {
  forge_payload_under_the_same_sum(false);
}

namespace {
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}
}  // namespace

// Frames arriving while no thread means to sleep do not touch the wait fd
// (a watched socket costs the sender a wake-up per frame); arming with a
// frame already waiting makes it readable at once (no arrival slept
// through), and while armed every new frame does.
Test(eth, the_wait_fd_is_fed_only_while_armed) {
  PeerId to_b = pair_up(config());
  g_b->poll(g_rb, 64);
  g_a->poll(g_ra, 64);
  cr_assert_eq(send_pkt(*g_a, to_b, 1, 100), 0);
  g_a->flush();
  usleep(2000);
  cr_assert(!readable(g_b->wait_fd()), "a frame made the unarmed wait fd readable");
  g_b->arm_wait(true);
  cr_assert(readable(g_b->wait_fd()), "the frame waiting before the arming was slept through");
  cr_assert(pump([&] { return g_rb.got.size() == 2; }));
  check_pkt(g_rb.got[1], resolve(*g_b, *g_a), 1, 100);
  cr_assert(pump([&] { return g_a->tx_state(to_b, 2) == 1; }));
  g_b->poll(g_rb, 64);
  cr_assert(!readable(g_b->wait_fd()), "readable with nothing waiting");
  cr_assert_eq(send_pkt(*g_a, to_b, 2, 100), 0);
  g_a->flush();
  uint64_t end = pm::now_ns() + 1000000000ull;
  while (!readable(g_b->wait_fd()) && pm::now_ns() < end) g_a->poll(g_ra, 64);  // b "asleep"
  cr_assert(readable(g_b->wait_fd()), "an armed wait fd missed a frame");
  g_b->arm_wait(false);
  cr_assert(pump([&] { return g_rb.got.size() == 3; }));
  check_pkt(g_rb.got[2], resolve(*g_b, *g_a), 2, 100);
}

// --- GSO mode: what each side learns of the other --------------------------
namespace {

// A device on a loop wire in the AF_PACKET wire's GSO mode (it takes GSO
// packets, its mtu() is kGsoOuter less than the link's).
std::unique_ptr<EthDevice> open_gso_dev(uint32_t ep, const DeviceConfig& cfg) {
  std::unique_ptr<Wire> w = open_wire(ep, g_seg, true);
  cr_assert(w->accepts_gso());
  std::unique_ptr<EthDevice> d = EthDevice::open(cfg, std::move(w), ep);
  cr_assert_not_null(d.get());
  return d;
}

constexpr size_t kGsoPayload = kMaxPayload - pm::eth::kGsoOuter;

}  // namespace

// Frames are shortened only between two peers that both take GSO packets
// (each said so in its HELLO); to and from a peer that does not, they are
// as long as the link allows, both ways.
Test(eth, frames_are_shorter_only_between_two_gso_peers) {
  g_a = open_gso_dev(1, slow_config());
  g_b = open_gso_dev(2, slow_config());
  g_c = open_dev(3, slow_config());
  PeerId a_b = resolve(*g_a, *g_b), a_c = resolve(*g_a, *g_c);
  cr_assert_eq(g_a->max_payload(), kGsoPayload);
  cr_assert_eq(g_c->max_payload(), kMaxPayload);
  send_blocking(*g_a, a_b, 1, 10);
  send_blocking(*g_a, a_c, 2, 10);
  cr_assert(pump([&] { return g_rb.got.size() == 1 && g_rc.got.size() == 1; }));
  PeerId b_a = resolve(*g_b, *g_a), c_a = resolve(*g_c, *g_a);
  cr_assert_eq(g_a->max_payload(a_b), kGsoPayload);
  cr_assert_eq(g_b->max_payload(b_a), kGsoPayload);
  cr_assert_eq(g_a->max_payload(a_c), kMaxPayload);
  cr_assert_eq(g_c->max_payload(c_a), kMaxPayload);
  // Whatever a peer knows of us, we take frames as long as the link allows
  // (with the shortest core header: 18 bytes more payload).
  cr_assert_eq(g_a->rx_max_payload(a_b), kMaxPayload + 18);
  cr_assert_eq(g_a->rx_max_payload(a_c), kMaxPayload + 18);
  cr_assert_eq(send_pkt(*g_a, a_b, 3, g_a->max_payload(a_b, make_hdr(3, 0)) + 1), -FI_EINVAL);
  cr_assert_eq(send_pkt(*g_a, a_b, 4, kGsoPayload), 0);
  cr_assert_eq(send_pkt(*g_a, a_c, 5, kMaxPayload), 0);
  cr_assert_eq(send_pkt(*g_c, c_a, 6, kMaxPayload), 0);
  cr_assert_eq(send_pkt(*g_b, b_a, 7, kGsoPayload), 0);
  g_a->flush(), g_b->flush(), g_c->flush();
  cr_assert(pump([&] { return g_ra.got.size() == 2 && g_rb.got.size() == 2 && g_rc.got.size() == 2; }));
  check_pkt(g_rb.got[1], b_a, 4, kGsoPayload);
  check_pkt(g_rc.got[1], c_a, 5, kMaxPayload);
  bool c_first = g_ra.got[0].peer == a_c;
  check_pkt(g_ra.got[c_first ? 0 : 1], a_c, 6, kMaxPayload);
  check_pkt(g_ra.got[c_first ? 1 : 0], a_b, 7, kGsoPayload);
  check_drops(*g_a, Drops{}, "a");
}

// A's HELLO reaches B, B's HELLO_ACK does not reach A (a wire of the
// segment takes it in A's place), and B's first DATA brings A's side of the
// session up (the ACK is implied): A never learnt that B takes GSO packets,
// so it sends B frames as long as the link allows, which B takes; B, which
// learnt A's from the HELLO, sends shorter ones. When the HELLO_ACK arrives
// late, under traffic, A keeps to what it had.
Test(eth, a_session_up_without_the_hello_ack_keeps_to_what_each_side_learnt) {
  g_a = open_gso_dev(1, slow_config());
  g_b = open_gso_dev(2, slow_config());
  PeerId a_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_pkt(*g_a, a_b, 1, 10), -FI_EAGAIN);  // the HELLO
  g_raw = open_wire(1, g_seg);                             // now gets A's frames
  cr_assert_eq(g_b->poll(g_rb, 64), 1);
  Frame fr[4];
  cr_assert_eq(g_raw->rx_burst(fr, 4), 1);
  std::vector<uint8_t> hello_ack(fr[0].data, fr[0].data + fr[0].len);
  g_raw->rx_release();
  cr_assert_eq(pm::eth::decode_hdr(hello_ack.data() + pm::eth::kEthHdr).type, pm::eth::kHelloAck);
  g_raw.reset();
  PeerId b_a = resolve(*g_b, *g_a);
  cr_assert_eq(g_b->max_payload(b_a), kGsoPayload);
  cr_assert_eq(send_pkt(*g_b, b_a, 2, kGsoPayload), 0);
  g_b->flush();
  cr_assert_eq(g_a->poll(g_ra, 64), 1);
  cr_assert_eq(g_ra.got.size(), 1u);
  check_pkt(g_ra.got[0], a_b, 2, kGsoPayload);
  cr_assert_eq(g_a->max_payload(a_b), kMaxPayload, "A learnt B's GSO mode without its HELLO_ACK");
  cr_assert_eq(send_pkt(*g_a, a_b, 3, kMaxPayload), 0);
  g_a->flush();
  cr_assert(pump([&] { return g_rb.got.size() == 1 && g_a->tx_state(a_b, 1) == 1; }));
  check_pkt(g_rb.got[0], b_a, 3, kMaxPayload);
  // B's receive limit is the link's, whatever A knows of B.
  cr_assert_eq(g_b->rx_max_payload(b_a), kMaxPayload + 18);
  // The HELLO_ACK, late: taken (not stale), and nothing changes.
  while (g_a->poll(g_ra, 64) > 0 || g_b->poll(g_rb, 64) > 0) {
  }
  uint64_t stale = dev_stat(*g_a, "stale"), heard = peer_stat(*g_a, 2, "rx_frames");
  g_raw = open_wire(99, g_seg);
  cr_assert_eq(g_raw->tx_burst(std::array<Frame, 1>{Frame{hello_ack.data(), hello_ack.size()}}.data(), 1), 1);
  cr_assert_eq(g_a->poll(g_ra, 64), 1, "the late HELLO_ACK did not reach A");
  cr_assert_eq(peer_stat(*g_a, 2, "rx_frames"), heard + 1);
  cr_assert_eq(dev_stat(*g_a, "stale"), stale, "the late HELLO_ACK was not taken as one of this session");
  cr_assert_eq(g_a->max_payload(a_b), kMaxPayload, "a late HELLO_ACK changed the size");
  cr_assert_eq(send_pkt(*g_a, a_b, 4, kMaxPayload), 0);
  cr_assert_eq(send_pkt(*g_b, b_a, 5, kGsoPayload), 0);
  g_a->flush(), g_b->flush();
  cr_assert(pump([&] { return g_ra.got.size() == 2 && g_rb.got.size() == 2; }));
  cr_assert_eq(dev_stat(*g_a, "stale"), stale);
  cr_assert_eq(g_a->max_payload(a_b), kMaxPayload, "a late HELLO_ACK changed the size under traffic");
  check_pkt(g_rb.got[1], b_a, 4, kMaxPayload);
  check_pkt(g_ra.got[1], a_b, 5, kGsoPayload);
  check_drops(*g_a, Drops{}, "a");
  check_drops(*g_b, Drops{}, "b");
  cr_assert_eq(peer_stat(*g_a, 2, "retrans"), 0u);
  cr_assert_eq(peer_stat(*g_b, 1, "retrans"), 0u);
}
namespace {
// a and b paired for the ring-overflow notice tests: RTO 200 ms, an ACK
// every 4 frames (else after delayed_ack_us), the loop
// wire's faults f (its delay: half the round trip); 20 exchanges settle a's
// round-trip estimate (at least twice the delay). A fresh segment and
// devices each time: the tests below may start over.
PeerId pair_for_kicks(uint32_t delayed_ack_us, const LoopFaults& f) {
  teardown();
  g_ra.got.clear();
  g_rb.got.clear();
  g_seg = new_segment();
  DeviceConfig cfg = slow_config();
  cfg.rto_init_us = cfg.rto_min_us = 200000;
  cfg.rto_max_us = 400000;
  cfg.retries = 40;
  cfg.dead_ms = 60000;
  cfg.ack_every = 4;
  cfg.delayed_ack_us = delayed_ack_us;
  set_faults(f);
  PeerId to_b = pair_up(cfg);
  for (int i = 0; i < 20; i++) {
    send_blocking(*g_a, to_b, 100 + i, 100);
    cr_assert(pump([&] { return g_a->tx_state(to_b, 2 + i) == 1; }));
  }
  return to_b;
}

// Polls only a until it has taken a ring-overflow notice (at most 50 ms);
// returns when, 0 if it did not.
uint64_t poll_a_until_kicked() {
  uint64_t end = pm::now_ns() + 50000000;
  while (pm::now_ns() < end) {
    g_a->poll(g_ra, 64);
    if (dev_stat(*g_a, "kicked") != 0) return pm::now_ns();
  }
  return 0;
}

// The scenarios below need frames younger than a round trip when a takes
// the notice. A process descheduled for longer than that (a loaded CI
// machine) makes them old, and resending them is then right: such a run
// proves nothing and the scenario starts over, at most kAttempts times.
// Each restart is logged at info level: Criterion exits 1 after any
// cr_log_warn, even when every test passed.
constexpr int kAttempts = 6;

// b's ring takes 4 of 20 frames from a; the 20 are older than a round trip
// (6 ms) when b drains its ring and sends its ring-overflow notice. Then 8
// more go, younger than a round trip when a reads the notice: they arrive
// (and are acknowledged a few at a time: ack_every 4), or are lost on the
// way. Either way all 28 arrive once, in order, without an RTO (200 ms); the
// 16 old frames are resent, and the young ones only if they were lost.
// False when the young frames were a round trip old at the notice.
bool kick_with_young_frames(bool young_lost, uint32_t delayed_ack_us) {
  LoopFaults f = faults();
  f.delay_us = 3000;  // a round trip of at least 6 ms
  PeerId to_b = pair_for_kicks(delayed_ack_us, f);
  size_t base = g_rb.got.size();
  f.rx_cap = 4;
  set_faults(f);
  poll_only(*g_b, g_rb, 0.003);
  for (unsigned i = 1; i <= 20; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 300), 0, "send %u", i);
  g_a->flush();
  usleep(30000);                 // 1..20 are old; b's ring took 4
  poll_only(*g_b, g_rb, 0.001);  // b drains, sends its notice (NAK at 5, nothing beyond)
  f.rx_cap = 0;
  f.drop = young_lost ? 1 : 0;
  set_faults(f);
  uint64_t t0 = pm::now_ns();
  for (unsigned i = 21; i <= 28; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 300), 0, "send %u", i);
  g_a->flush();  // young when the notice reaches a, about 3 ms from now
  f.drop = 0;
  set_faults(f);
  uint64_t kicked_at = poll_a_until_kicked();
  cr_assert_neq(kicked_at, 0u, "the notice was not taken:\n%s", g_a->stats().c_str());
  if (kicked_at - t0 >= 2ull * f.delay_us * 1000) {
    cr_log_info("young frames %s: the notice was taken %.1f ms after them; again", young_lost ? "lost" : "arrive",
                double(kicked_at - t0) / 1e6);
    return false;
  }
  cr_assert(pump([&] { return g_a->tx_state(to_b, g_a->tx_ticket(to_b)) == 1; }, 5));
  double ms = double(pm::now_ns() - t0) / 1e6;
  pump_for(0.02);
  cr_log_info("young frames %s: all acknowledged in %.1f ms, %llu recovery resends", young_lost ? "lost" : "arrive",
              ms, (unsigned long long)dev_stat(*g_a, "recovery_resends"));
  cr_assert_eq(g_rb.got.size() - base, 28u);
  PeerId from_a = resolve(*g_b, *g_a);
  for (unsigned i = 1; i <= 28; i++) check_pkt(g_rb.got[base + i - 1], from_a, i, 300);
  cr_assert_eq(dev_stat(*g_a, "kicked"), 1u, "%s", g_a->stats().c_str());
  cr_assert_eq(dev_stat(*g_a, "recovery_resends"), young_lost ? 24u : 16u, "%s", g_a->stats().c_str());
  cr_assert_eq(peer_stat(*g_b, 1, "dups"), 0u, "frames that arrived were resent:\n%s", g_b->stats().c_str());
  cr_assert_eq(dev_stat(*g_a, "recoveries"), 0u, "an RTO was needed:\n%s", g_a->stats().c_str());
  return true;
}

// One forged ring-overflow notice (an empty-bitmap NAK at `una`, from a
// third station) while b is briefly away: 10 frames older than a round
// trip and 20 younger on their way. The notice may cost the 10 old ones,
// never the young ones: b's acknowledgements echo them as they arrive.
// False when the young frames were a round trip old at the notice.
bool forged_kick() {
  LoopFaults f = faults();
  f.delay_us = 3000;  // a round trip of at least 6 ms
  PeerId to_b = pair_for_kicks(config().delayed_ack_us, f);
  // Learn the epochs and the next seq: one frame captured by a station that takes b's frames.
  g_raw = open_wire(2, g_seg);
  cr_assert_eq(send_pkt(*g_a, to_b, 500, 100), 0);
  g_a->flush();
  std::vector<RawRx> rx = raw_rx_wait(1, 2000);
  cr_assert(!rx.empty());
  FrameHdr d0 = rx[0].h;
  g_raw = open_wire(9, g_seg);  // b gets its frames again; the forger is ep 9
  cr_assert(pump([&] { return g_a->tx_state(to_b, g_a->tx_ticket(to_b)) == 1; }, 5));
  uint64_t dups0 = peer_stat(*g_b, 1, "dups"), re0 = peer_stat(*g_a, 2, "retrans");
  for (unsigned i = 1; i <= 10; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 300), 0);
  g_a->flush();
  usleep(30000);  // b descheduled: these 10 are now older than a round trip
  uint64_t t0 = pm::now_ns();
  for (unsigned i = 11; i <= 30; i++) cr_assert_eq(send_pkt(*g_a, to_b, i, 300), 0);
  g_a->flush();
  std::vector<uint8_t> fb = nak_to_a(d0, d0.seq + 1, 0, 32);
  Frame fr{fb.data(), fb.size()};
  cr_assert_eq(g_raw->tx_burst(&fr, 1), 1);
  uint64_t kicked_at = poll_a_until_kicked();
  cr_assert_neq(kicked_at, 0u, "the forged notice was not taken: the test proves nothing\n%s", g_a->stats().c_str());
  if (kicked_at - t0 >= 2ull * f.delay_us * 1000) {
    cr_log_info("forged notice taken %.1f ms after the young frames; again", double(kicked_at - t0) / 1e6);
    return false;
  }
  cr_assert(pump([&] { return g_a->tx_state(to_b, g_a->tx_ticket(to_b)) == 1; }, 5));
  pump_for(0.02);
  uint64_t resent = peer_stat(*g_a, 2, "retrans") - re0, dups = peer_stat(*g_b, 1, "dups") - dups0;
  cr_log_info("forged notice: %llu resent, %llu duplicates at b", (unsigned long long)resent, (unsigned long long)dups);
  cr_assert_eq(dev_stat(*g_a, "kicked"), 1u);
  cr_assert_geq(resent, 1u);
  cr_assert_leq(resent, 10u, "a forged notice resent %llu of 30 frames (10 older than a round trip)",
                (unsigned long long)resent);
  return true;
}

void run_attempts(const std::function<bool()>& attempt) {
  for (int i = 0; i < kAttempts; i++)
    if (attempt()) return;
  cr_assert_fail("%d attempts, each descheduled for a round trip (6 ms): nothing shown", kAttempts);
}
}  // namespace

Test(eth, a_kick_does_not_resend_young_frames_that_arrive) {
  run_attempts([] { return kick_with_young_frames(false, 0); });
}

// The same with the default delayed ACK (50 us): the young frames' resends
// are acknowledged a few at a time, and go 1, 2, 4... per acknowledgement.
Test(eth, a_kick_resends_young_frames_that_were_lost) {
  run_attempts([] { return kick_with_young_frames(true, 50); });
}

Test(eth, a_forged_kick_resends_the_old_frames_not_the_window) { run_attempts(forged_kick); }
