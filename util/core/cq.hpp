// Completion queue: success and error entries in one FIFO, the four libfabric
// formats, FI_SOURCE, and blocking reads that spin, then sleep on every bound
// endpoint's device fd at once.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include <rdma/fi_eq.h>

#include "abi/fid_box.hpp"
#include "base/unique_fd.hpp"

namespace pm {

class Domain;
class Endpoint;

struct Completion {
  void* op_context;
  uint64_t flags;
  size_t len;
  void* buf;
  uint64_t data;
  uint64_t tag;
  fi_addr_t src;
  int err;        // 0, or a positive FI_E* code
  size_t olen;
};

class Cq {
 public:
  Cq(Domain& dom, const fi_cq_attr& attr, void* context);
  ~Cq();
  fid_cq* fid() { return &box_.fid; }
  static Cq* from(fid_cq* f) { return self_of<Cq>(f); }
  Domain& domain() { return dom_; }

  // Called by endpoints under the domain lock. A thread asleep in
  // fi_cq_sread, or one that passed fi_trywait, is woken: the entry may have
  // been made by another thread (the progress helper), which then consumed
  // the device readiness the sleeper waits for.
  void push(const Completion& c) {
    q_.push_back(c);
    if (sleepers_ || trywait_armed_) wake();
  }
  // An FI_EADDRNOTAVAIL entry (FI_SOURCE_ERR) and the sender's name, which
  // fi_cq_readerr returns as err_data.
  void push_source_err(const Completion& c, const void* name, size_t len);
  void bind_ep(Endpoint* ep);
  void unbind_ep(Endpoint* ep);

  ssize_t read(void* buf, size_t count, fi_addr_t* src);
  ssize_t readerr(fi_cq_err_entry* buf, uint64_t flags);
  ssize_t sread(void* buf, size_t count, fi_addr_t* src, const void* cond, int timeout);
  int signal();
  int control(int cmd, void* arg);
  int trywait();
  int close();

 private:
  ssize_t read_locked(void* buf, size_t count, fi_addr_t* src);
  void write_entry(void* dst, const Completion& c) const;
  int ensure_epoll();
  void wake();
  void set_trywait(bool on);

  FidBox<fid_cq, Cq> box_;
  Domain& dom_;
  fi_cq_format format_;
  fi_wait_obj wait_obj_;
  size_t entry_size_;
  uint64_t spin_ns_;
  std::deque<Completion> q_;
  uint64_t head_seq_ = 0;          // entries popped so far: the number of q_.front()
  std::deque<std::pair<uint64_t, std::string>> names_;  // err_data: (number of its entry, name)
  std::string err_data_;           // provider-owned err_data of the last fi_cq_readerr
  std::vector<Endpoint*> eps_;
  UniqueFd epfd_;
  UniqueFd sigfd_;   // eventfd for fi_cq_signal
  UniqueFd wakefd_;  // eventfd: an entry arrived while a reader sleeps
  bool signaled_ = false;
  int sleepers_ = 0;
  bool trywait_armed_ = false;
};

} // namespace pm
