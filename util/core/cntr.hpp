// Completion counters: success and error counts, add / set, and waits that
// drive the domain's progress until a threshold or a timeout, spinning
// briefly and then sleeping on the devices' fds (as fi_cq_sread does).
#pragma once

#include <cstdint>

#include <rdma/fi_eq.h>

#include "abi/fid_box.hpp"
#include "base/unique_fd.hpp"

namespace pm {

class Domain;

class Cntr {
 public:
  Cntr(Domain& dom, const fi_cntr_attr& attr, void* context);
  fid_cntr* fid() { return &box_.fid; }
  static Cntr* from(fid_cntr* f) { return self_of<Cntr>(f); }

  // Under the domain lock. A thread asleep in fi_cntr_wait is woken (the
  // event may come from another thread's progress: the helper).
  void inc() {
    value_++;
    if (sleepers_) wake();
  }
  void inc_err() {
    err_++;
    if (sleepers_) wake();
  }

  uint64_t read();
  uint64_t readerr();
  int add(uint64_t v);
  int set(uint64_t v);
  int adderr(uint64_t v);
  int seterr(uint64_t v);
  int wait(uint64_t threshold, int timeout_ms);
  Domain& domain() { return dom_; }
  int refs = 0;

 private:
  FidBox<fid_cntr, Cntr> box_;
  void wake();
  Domain& dom_;
  uint64_t value_ = 0;
  uint64_t err_ = 0;
  uint64_t spin_ns_;
  int sleepers_ = 0;
  UniqueFd wakefd_;  // eventfd: the count changed while a waiter sleeps
};

} // namespace pm
