#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include <rdma/fi_eq.h>

#include "abi/fid_box.hpp"

namespace pm {

class Fabric {
 public:
  Fabric(const fi_fabric_attr& attr, void* context);
  fid_fabric* fid() { return &box_.fid; }
  static Fabric* from(fid_fabric* f) { return self_of<Fabric>(f); }
  uint32_t api_version() const { return api_version_; }
  void set_api_version(uint32_t v) { api_version_ = v; }
  int refs = 0;

 private:
  FidBox<fid_fabric, Fabric> box_;
  uint32_t api_version_ = 0;
};

// Event queue: RDM endpoints generate no connection events, but libfabric
// applications (fi_pingpong among them) open and bind one; fi_eq_write and
// the blocking read work as specified.
class Eq {
 public:
  Eq(Fabric& fab, const fi_eq_attr& attr, void* context);
  fid_eq* fid() { return &box_.fid; }
  static Eq* from(fid_eq* f) { return self_of<Eq>(f); }
  ssize_t read(uint32_t* event, void* buf, size_t len, uint64_t flags, int timeout);
  ssize_t write(uint32_t event, const void* buf, size_t len, uint64_t flags);
  ssize_t readerr(fi_eq_err_entry* buf, uint64_t flags);
  Fabric& fabric;

 private:
  struct Event {
    uint32_t type;
    std::vector<uint8_t> data;
  };
  FidBox<fid_eq, Eq> box_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

} // namespace pm
