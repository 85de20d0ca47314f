// Completion counters: success and error counts, add / set, and waits that
// drive the domain's progress until a threshold or a timeout.
#pragma once

#include <cstdint>

#include <rdma/fi_eq.h>

#include "abi/fid_box.hpp"

namespace pm {

class Domain;

class Cntr {
 public:
  Cntr(Domain& dom, const fi_cntr_attr& attr, void* context);
  fid_cntr* fid() { return &box_.fid; }
  static Cntr* from(fid_cntr* f) { return self_of<Cntr>(f); }

  // Under the domain lock.
  void inc() { value_++; }
  void inc_err() { err_++; }

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
  Domain& dom_;
  uint64_t value_ = 0;
  uint64_t err_ = 0;
};

} // namespace pm
