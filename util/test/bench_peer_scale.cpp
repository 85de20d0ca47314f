// Per-peer cost of the Ethernet device at scale (issue "from one machine to a
// cluster", item 3): one hub device and N peer devices on one in-process
// loop segment. Reports, for the hub only (heap measured around the hub's
// own calls, mallinfo2):
//   resolve   bytes per peer after naming N peers (what fi_av_insert costs the device)
//   message   bytes per peer after one message to each, acknowledged
//   timers    peers the timer pass visits on an idle endpoint (0 expected),
//             and ns per idle poll pass with the timers due
// With --check it fails (exit 1) when a bound is exceeded: the counts are
// exact, the heap bounds generous (see docs/scale.md).
//   pm_bench_peer_scale [--check] N...
#include <malloc.h>
#include <sys/resource.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "eth_device.hpp"
#include "packet_recorder.hpp"
#include "wire/loop_wire.hpp"

using namespace pm;
using namespace pm::eth;

namespace {

size_t heap() { return mallinfo2().uordblks; }

uint64_t stat_of(const std::string& s, const char* key) {
  std::string k = std::string(" ") + key + "=";
  size_t at = s.find(k);
  return at == std::string::npos ? UINT64_MAX : strtoull(s.c_str() + at + k.size(), nullptr, 10);
}

std::unique_ptr<EthDevice> open_dev(const std::string& seg, uint32_t ep) {
  WireConfig wc{seg, kDefaultEtherType, ep, 0, 0};
  int err = 0;
  std::string why;
  auto w = open_loop_wire(wc, &err, &why);
  if (!w) {
    fprintf(stderr, "open_loop_wire: %d %s\n", err, why.c_str());
    exit(2);
  }
  DeviceConfig cfg;
  cfg.job = 7;
  cfg.host = 0x1234;
  return EthDevice::open(cfg, std::move(w), ep);
}

bool run(size_t n, bool check) {
  std::string seg = "pmscale-" + std::to_string(getpid()) + "-" + std::to_string(n);
  std::vector<std::unique_ptr<EthDevice>> peers;
  std::vector<Recorder> rec(n);
  for (size_t i = 0; i < n; i++) peers.push_back(open_dev(seg, uint32_t(100000 + i)));
  Recorder hub_rec;
  size_t h0 = heap();
  auto hub = open_dev(seg, 99);
  size_t h_open = heap();
  std::vector<PeerId> ids(n);
  uint64_t t0 = now_ns();
  for (size_t i = 0; i < n; i++) ids[i] = hub->resolve(peers[i]->name(), peers[i]->name_len());
  uint64_t t_resolve = now_ns() - t0;
  size_t h_resolve = heap();

  // One 64-byte message to each, until every one is delivered and acknowledged.
  size_t hub_bytes = h_resolve;  // heap attributed to the hub: its calls only
  auto hub_call = [&](auto&& f) {
    size_t before = heap();
    f();
    hub_bytes += heap() - before;  // (frees inside hub calls count as negative)
  };
  std::vector<uint8_t> payload(64, 0x5a);
  iovec iov{payload.data(), payload.size()};
  std::vector<int> sent(n, 0);
  size_t done = 0;
  uint64_t deadline = now_ns() + 120ull * 1000000000ull;
  std::vector<uint64_t> tickets(n, 0);
  while (now_ns() < deadline) {
    for (size_t i = 0; i < n; i++) {
      if (sent[i]) continue;
      PktHdr h{};
      h.op = kPktEager;
      h.msg_id = i;
      h.msg_len = payload.size();
      h.seg_len = uint32_t(payload.size());
      int rc = 0;
      hub_call([&] { rc = hub->send(ids[i], h, &iov, 1, 0, payload.size()); });
      if (rc == 0) {
        sent[i] = 1;
        tickets[i] = hub->tx_ticket(ids[i]);
      }
    }
    hub_call([&] { hub->flush(); });
    for (size_t i = 0; i < n; i++) peers[i]->poll(rec[i], 64);
    hub_call([&] {
      while (hub->poll(hub_rec, 256) > 0) {
      }
    });
    done = 0;
    for (size_t i = 0; i < n; i++) done += sent[i] && rec[i].got.size() == 1 && hub->tx_state(ids[i], tickets[i]) == 1;
    if (done == n) break;
  }
  // Let the last ACKs and timers settle, then measure the idle timer pass.
  for (int k = 0; k < 200; k++) {
    for (size_t i = 0; i < n; i++) peers[i]->poll(rec[i], 64);
    hub_call([&] { hub->poll(hub_rec, 256); });
  }
  std::string st0 = hub->stats();
  uint64_t passes0 = stat_of(st0, "timer_passes"), visits0 = stat_of(st0, "timer_visits");
  const int kIdle = 2000;
  uint64_t t1 = now_ns();
  for (int k = 0; k < kIdle; k++) {
    hub->tick();  // the timers' turn on every poll
    hub->poll(hub_rec, 256);
    uint64_t until = now_ns() + 12000;  // past the 10 us timer step
    while (now_ns() < until) {
    }
  }
  uint64_t t_idle = now_ns() - t1 - uint64_t(kIdle) * 12000;
  std::string st = hub->stats();
  uint64_t passes = stat_of(st, "timer_passes") - passes0, visits = stat_of(st, "timer_visits") - visits0;
  uint64_t timed = stat_of(st, "timed"), pooled = stat_of(st, "pooled_frames");
  double per_resolve = double(h_resolve - h_open) / double(n);
  double per_msg = double(hub_bytes - h_open) / double(n);
  printf("peers=%zu delivered=%zu open_bytes=%zu resolve_bytes_per_peer=%.0f resolve_ns_per_peer=%.0f "
         "after_message_bytes_per_peer=%.0f idle_timer_passes=%" PRIu64 " idle_timer_visits=%" PRIu64
         " timed=%" PRIu64 " pooled_frames=%" PRIu64 " idle_poll_ns=%.0f\n",
         n, done, h_open - h0, per_resolve, double(t_resolve) / double(n), per_msg, passes, visits, timed, pooled,
         double(t_idle) / kIdle);
  fflush(stdout);
  bool ok = true;
  if (check) {
    auto fail = [&](const char* what) {
      fprintf(stderr, "peers=%zu: %s\n", n, what);
      ok = false;
    };
    if (done != n) fail("not every message was delivered and acknowledged");
    if (passes == 0) fail("no timer pass ran while idle");
    if (visits != 0) fail("the idle timer pass visited peers (it must visit only peers with a timer running)");
    if (timed != 0) fail("peers remain on the timer list with nothing outstanding");
    if (per_resolve > 1024) fail("more than 1 KiB per named peer");
    if (per_msg > 16384) fail("more than 16 KiB per peer after one message each");
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  bool check = false;
  std::vector<size_t> ns;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--check")) check = true;
    else ns.push_back(strtoull(argv[i], nullptr, 10));
  }
  if (ns.empty()) ns = {1, 1024, 10000};
  // One eventfd per loop wire: room for 10,000 peers.
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  bool ok = true;
  for (size_t n : ns) ok = run(n, check) && ok;
  return ok ? 0 : 1;
}
