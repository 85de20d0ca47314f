#pragma once

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <rdma/fi_domain.h>

#include "abi/fid_box.hpp"
#include "base/spin_lock.hpp"

namespace pm {

class Fabric;
class Domain;
class Endpoint;

// A registered memory region. This providers move two-sided data
// only, so registration records the range and key for local descriptors.
class Cntr;

// A registered memory region: its ranges, access rights, key, and the
// counters bound to it for remote accesses.
class Mr {
 public:
  Mr(Domain& dom, const fi_mr_attr& attr, uint64_t key, uint64_t flags);
  fid_mr* fid() { return &box_.fid; }
  static Mr* from(fid_mr* f) { return self_of<Mr>(f); }
  Domain& dom;
  std::vector<iovec> iov;
  uint64_t access;
  uint64_t offset;              // attr.offset: base of addresses without FI_MR_VIRT_ADDR
  Cntr* rwrite_cntr = nullptr;  // FI_REMOTE_WRITE events
  Cntr* rread_cntr = nullptr;   // FI_REMOTE_READ events

 private:
  FidBox<fid_mr, Mr> box_;
};

class Domain {
 public:
  Domain(Fabric& fab, const fi_info& info, void* context);
  ~Domain();
  fid_domain* fid() { return &box_.fid; }
  static Domain* from(fid_domain* f) { return self_of<Domain>(f); }

  // One lock per domain serialises every object of the domain (FI_THREAD_SAFE).
  SpinLock& lock() { return mu_; }
  // Polls every endpoint's device and runs their timers (lock held). Counts
  // as the application's progress: the helper stays out of the way while
  // these calls keep coming.
  void progress_locked();
  // How many times the progress thread stepped in (an interval without a
  // progress call), for the endpoint statistics.
  uint64_t helper_serves() const noexcept { return serves_.load(std::memory_order_relaxed); }
  // Whether the application asked for FI_PROGRESS_AUTO (control or data).
  bool auto_progress() const { return auto_; }

  // The progress helper thread (one per domain, started with the first
  // endpoint; see docs/fi_pmeth.7.md "Progress"). It watches the
  // application's progress calls on a timer the calls push out (it sleeps
  // while they keep coming); after a whole interval without one it runs
  // progress itself and then sleeps on the devices' wait fds until a packet
  // arrives, a device timer is due or (with work queued) the next interval.
  // With FI_PROGRESS_AUTO it insists on the domain lock; with manual
  // progress it only ever try-locks.
  // start_helper: 0, or a negative FI_E* code.
  int start_helper();
  // Stops and joins the helper (idempotent, bounded: a helper that cannot
  // stop within 2 s is left running and the DSO is pinned in memory).
  void stop_helper() noexcept;
  // The same, for stop_all_helpers() (its registry lock held).
  void join_helper() noexcept;
  // In a fork()ed child: the thread does not exist there (nor may the
  // child push out the parent's watch timer, a shared open file).
  void forget_helper() noexcept {
    helper_running_ = false;
    drop_watch();
  }
  // After a posting call (lock held or not): wakes a helper that sleeps
  // with nothing to do, so that the new operation gets progress.
  void poke() noexcept {
    if (helper_asleep_.load(std::memory_order_relaxed)) kick_helper();
  }

  // Blocking waits (lock held): while at least one waiter sleeps, every
  // endpoint's device is armed (its wait fd fires on arrival).
  void arm_devices(bool on);
  // Consumes the devices' wake-ups (after a sleep), then runs progress
  // (not counted as the application's): what arrived is handled, so a
  // thread asleep on a CQ's fd after fi_trywait is woken by the entry it
  // makes, not left waiting on the wake-up consumed here.
  void drain_devices();
  // A CQ that passed fi_trywait with nothing to read (until its next entry)
  // holds the devices armed: the last blocking waiter leaving does not
  // disarm them, so an application asleep on the CQ's fd is not left
  // watching nothing; the last hold released with no waiter disarms them.
  void trywait_hold(bool on);
  // epoll fd watching every endpoint's device wait fd; -1 if it cannot be made.
  int devices_fd();
  // Earliest time a device timer of the domain is due (UINT64_MAX: none).
  uint64_t next_timer_ns() const;

  void add_ep(Endpoint* ep);
  void remove_ep(Endpoint* ep);
  int mr_reg(const fi_mr_attr& attr, uint64_t flags, fid_mr** out);
  int mr_close(Mr* mr);
  // Checks a remote access: the key names a live region, [addr, addr+len)
  // lies inside one of its ranges, and it grants `access`. 0 and the local
  // address, or the positive FI_E* code that refuses it.
  int mr_check(uint64_t key, uint64_t addr, size_t len, uint64_t access, char** va, Mr** mr) const;
  // Same, for ranges that may cover several of the region's iovs (fi_mr_regv
  // without FI_MR_VIRT_ADDR: the iovs are one region, back to back): fills up
  // to `max` pieces of local memory, *n of them.
  int mr_locate(uint64_t key, uint64_t addr, size_t len, uint64_t access, struct iovec* out, size_t max,
                size_t* n, Mr** mr) const;

  Fabric& fabric;
  fi_info* info;  // owned copy
  int refs = 0;

 private:
  FidBox<fid_domain, Domain> box_;
  SpinLock mu_;
  std::vector<Endpoint*> eps_;
  std::unordered_map<uint64_t, Mr*> mrs_;
  bool virt_addr_ = false;
  bool auto_ = false;
  // Written under the lock only (a plain increment, no locked instruction);
  // read by the helper without it.
  std::atomic<uint64_t> progress_calls_{0};
  // When a progress call last read the clock (every kWatchCalls calls), and
  // the call count then (stored after the time, with release); written
  // under the lock, read by the helper without it.
  std::atomic<uint64_t> last_call_ns_{0};
  std::atomic<uint64_t> last_call_count_{0};
  // Times the helper stepped in (statistics: helper_serves).
  std::atomic<uint64_t> serves_{0};
  // Sleeping waiters (arm_devices); changed under the lock, read by the
  // helper without it.
  std::atomic<int> armed_{0};
  int trywaits_ = 0;       // CQs holding their trywait arming (lock held)
  int dev_epfd_ = -1;      // devices_fd()

  // helper
  static void* helper_main(void* self);
  void helper_loop();
  bool helper_lock(bool insist, uint64_t seen);
  void helper_progress_locked();
  uint64_t helper_sleep_ns_locked() const;
  void kick_helper() noexcept;
  pthread_t helper_{};
  bool helper_running_ = false;
  std::atomic<bool> helper_stop_{false};
  std::atomic<bool> helper_asleep_{false};
  int kick_fd_ = -1;       // eventfd: stop, or an operation posted while asleep
  // The helper's watch timer (timerfd; -1: it looks once per interval),
  // pushed out by the application's progress calls (lock held) to two
  // intervals ahead (on the kernel's tick), once per interval: the time of
  // the last push, and how many calls go between two looks at the clock.
  int watch_fd_ = -1;
  uint64_t pushed_ns_ = 0;
  static constexpr uint64_t kWatchCalls = 16;
  void arm_watch(uint64_t ns, int flags) noexcept;
  void set_watch(uint64_t ns) noexcept;    // ns from now (the helper)
  void push_watch(uint64_t at) noexcept;   // near `at` (now_ns's clock), on a tick (the calls)
  std::atomic<uint64_t> watch_at_{0};      // what the last push set, 0 once the helper set it since
  uint64_t tick_ns_ = 0;                   // the kernel's tick (0: pushes not rounded)
  void drop_watch() noexcept {  // no helper to watch for
    if (watch_fd_ >= 0) ::close(watch_fd_);
    watch_fd_ = -1;
    watch_at_.store(0, std::memory_order_relaxed);
    pushed_ns_ = 0;
  }
  uint64_t interval_ns_ = 1000000;
  uint64_t timers_ns_ = 250000000;  // operations waiting on peers: liveness checks
  int helper_cpu_ = -1;
};

// Stops every progress helper of this DSO (the provider's cleanup, and the
// DSO's destructors: no helper may run library code once it is unloaded).
void stop_all_helpers() noexcept;

} // namespace pm
