#pragma once

#include <atomic>
#include <condition_variable>

#include "base/spin_lock.hpp"
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <rdma/fi_domain.h>

#include "abi/fid_box.hpp"

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
  // Polls every endpoint's device and runs their timers (lock held).
  void progress_locked();
  // Starts the progress helper: while the application makes no libfabric
  // calls, it runs progress every interval so that retransmissions,
  // acknowledgements and streamed transfers keep moving.
  void start_helper(unsigned interval_us);
  // Stops and joins every domain's helper: libfabric is about to unload the
  // provider (fi_fini at exit), possibly with domains still open.
  static void stop_all_helpers() noexcept;

  void add_ep(Endpoint* ep) { eps_.push_back(ep); }
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

  void helper_loop(unsigned interval_us);
  void stop_helper() noexcept;
  std::atomic<uint64_t> progress_calls_{0};
  std::thread helper_;
  std::mutex helper_mu_;
  std::condition_variable helper_cv_;
  bool helper_stop_ = false;
};

} // namespace pm
