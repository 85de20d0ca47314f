#pragma once

#include <cstdint>
#include <mutex>
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
class Mr {
 public:
  Mr(Domain& dom, const fi_mr_attr& attr, uint64_t key, uint64_t flags);
  fid_mr* fid() { return &box_.fid; }
  static Mr* from(fid_mr* f) { return self_of<Mr>(f); }
  Domain& dom;
  std::vector<iovec> iov;
  uint64_t access;

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
  std::mutex& lock() { return mu_; }
  // Polls every endpoint's device and runs their timers (lock held).
  void progress_locked();

  void add_ep(Endpoint* ep) { eps_.push_back(ep); }
  void remove_ep(Endpoint* ep);
  int mr_reg(const fi_mr_attr& attr, uint64_t flags, fid_mr** out);
  int mr_close(Mr* mr);

  Fabric& fabric;
  fi_info* info;  // owned copy
  int refs = 0;

 private:
  FidBox<fid_domain, Domain> box_;
  std::mutex mu_;
  std::vector<Endpoint*> eps_;
  std::unordered_map<uint64_t, Mr*> mrs_;
  uint64_t next_key_ = 1;
};

} // namespace pm
