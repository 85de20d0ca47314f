#include "wire/loop_wire.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/unique_fd.hpp"
#include "wire/wire.hpp"

namespace pm::eth {
namespace {

class LoopWire;

struct Segment {
  LoopFaults faults;
  std::mt19937_64 rng{1};
  std::vector<LoopWire*> wires;
};

std::mutex g_mu;
std::map<std::string, Segment>& segments() {
  static std::map<std::string, Segment> s;
  return s;
}

struct Pkt {
  std::vector<uint8_t> data;
  uint64_t at;
  bool losing = false;  // frames were dropped before it (AF_PACKET's TP_STATUS_LOSING)
};

class LoopWire final : public Wire {
 public:
  LoopWire(const WireConfig& cfg) : cfg_(cfg), efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    // One MAC per segment, like several endpoints on one NIC.
    uint64_t h = std::hash<std::string>()(cfg.iface);
    mac_[0] = 0x02;  // locally administered
    for (int i = 1; i < 6; i++) mac_[i] = uint8_t(h >> (8 * i));
    std::lock_guard<std::mutex> g(g_mu);
    segments()[cfg_.iface].wires.push_back(this);
  }
  ~LoopWire() override {
    std::lock_guard<std::mutex> g(g_mu);
    auto& w = segments()[cfg_.iface].wires;
    for (size_t i = 0; i < w.size(); i++)
      if (w[i] == this) {
        w.erase(w.begin() + long(i));
        break;
      }
  }

  bool gathers() const noexcept override { return true; }  // it copies both pieces at once
  int tx_burst(const Frame* f, int n) noexcept override {
    std::lock_guard<std::mutex> g(g_mu);
    Segment& s = segments()[cfg_.iface];
    std::uniform_real_distribution<double> u(0, 1);
    uint64_t now = now_ns();
    for (int i = 0; i < n; i++) {
      if (f[i].len < 26) continue;
      uint32_t dst = uint32_t(f[i].data[22]) | uint32_t(f[i].data[23]) << 8 | uint32_t(f[i].data[24]) << 16 |
                     uint32_t(f[i].data[25]) << 24;
      LoopWire* to = nullptr;
      for (LoopWire* w : s.wires)
        if (w->cfg_.ep_id == dst && memcmp(w->mac_, f[i].data, 6) == 0) to = w;
      if (!to || s.faults.down || u(s.rng) < s.faults.drop) continue;
      if (s.faults.rx_cap && to->q_.size() >= s.faults.rx_cap) {
        to->dropped_++;  // a full receive ring
        continue;
      }
      Pkt p{std::vector<uint8_t>(f[i].data, f[i].data + f[i].len), now + uint64_t(s.faults.delay_us) * 1000,
            to->dropped_ != to->dropped_seen_};
      p.data.insert(p.data.end(), f[i].tail, f[i].tail + f[i].tail_len);
      if (u(s.rng) < s.faults.corrupt && p.data.size() > 14) {
        size_t k = 14 + s.rng() % (p.data.size() - 14);
        p.data[k] ^= uint8_t(1u << (s.rng() % 8));
      }
      int copies = u(s.rng) < s.faults.dup ? 2 : 1;
      for (int c = 0; c < copies; c++) {
        if (to->held_) {  // a held frame goes out behind this one
          to->q_.push_back(p);
          to->q_.push_back(std::move(*to->held_));
          to->held_.reset();
        } else if (u(s.rng) < s.faults.reorder) {
          to->held_ = std::make_unique<Pkt>(p);
        } else {
          to->q_.push_back(p);
        }
      }
      uint64_t one = 1;
      ssize_t r = write(to->efd_.get(), &one, sizeof one);
      (void)r;
    }
    return n;
  }

  void tx_flush() noexcept override {}

  int rx_burst(Frame* f, int max) noexcept override {
    taken_.clear();
    taken_at_.clear();
    {
      std::lock_guard<std::mutex> g(g_mu);
      uint64_t now = now_ns();
      while (int(taken_.size()) < max && !q_.empty() && q_.front().at <= now) {
        taken_.push_back(std::move(q_.front().data));
        taken_at_.push_back(q_.front().at);
        if (q_.front().losing) losing_ = true;
        q_.pop_front();
      }
      // A held frame with nothing behind it is released after a while.
      if (held_ && q_.empty()) {
        q_.push_back(std::move(*held_));
        held_.reset();
      }
    }
    // Arrival times on the real-time clock, as AF_PACKET's ring gives them.
    timespec rt{}, mt{};
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    int64_t off = (int64_t(rt.tv_sec) - int64_t(mt.tv_sec)) * 1000000000 + (rt.tv_nsec - mt.tv_nsec);
    for (size_t i = 0; i < taken_.size(); i++)
      f[i] = Frame{taken_[i].data(), taken_[i].size(), uint64_t(int64_t(taken_at_[i]) + off)};
    uint64_t v;
    ssize_t r = read(efd_.get(), &v, sizeof v);
    (void)r;
    return int(taken_.size());
  }

  void rx_release() noexcept override { taken_.clear(); }
  int fd() const noexcept override { return efd_.get(); }
  size_t mtu() const noexcept override { return cfg_.gso ? 1500 - kGsoOuter : 1500; }
  size_t link_mtu() const noexcept override { return 1500; }
  bool accepts_gso() const noexcept override { return cfg_.gso; }
  const uint8_t* mac() const noexcept override { return mac_; }
  const char* kind() const noexcept override { return "loopback"; }
  bool link_up() noexcept override {
    std::lock_guard<std::mutex> g(g_mu);
    return !segments()[cfg_.iface].faults.down;
  }
  size_t rx_capacity() const noexcept override {
    std::lock_guard<std::mutex> g(g_mu);
    return segments()[cfg_.iface].faults.rx_cap;
  }
  uint64_t rx_dropped() noexcept override {
    std::lock_guard<std::mutex> g(g_mu);
    if (dropped_ != dropped_seen_) losing_ = true;
    dropped_seen_ = dropped_;
    return dropped_;
  }

 private:
  friend void pm::eth::loop_set_faults(const std::string&, const LoopFaults&);
  WireConfig cfg_;
  UniqueFd efd_;
  uint8_t mac_[6];
  std::deque<Pkt> q_;
  std::unique_ptr<Pkt> held_;
  std::vector<std::vector<uint8_t>> taken_;
  std::vector<uint64_t> taken_at_;
  uint64_t dropped_ = 0, dropped_seen_ = 0;
};

}  // namespace

void loop_set_faults(const std::string& segment, const LoopFaults& f) {
  std::lock_guard<std::mutex> g(g_mu);
  Segment& s = segments()[segment];
  s.faults = f;
  s.rng.seed(f.seed);
}

std::unique_ptr<Wire> open_loop_wire(const WireConfig& cfg, int* err, std::string* why) {
  return std::make_unique<LoopWire>(cfg);
}

}  // namespace pm::eth
