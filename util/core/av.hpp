// Address vector: table and map, insert / remove / lookup / straddr. Names are
// opaque device names; fi_addr_t is the slot index in both types. Each entry
// of an insert takes the lowest unused slot, in order (fi_av(3)): a duplicate
// name gets a slot of its own, an invalid name keeps its slot empty, so the
// fi_addr of every valid entry is predictable from the insertion order.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <rdma/fi_domain.h>

#include "abi/fid_box.hpp"

namespace pm {

class Domain;

class Av {
 public:
  Av(Domain& dom, const fi_av_attr& attr, void* context);
  fid_av* fid() { return &box_.fid; }
  static Av* from(fid_av* f) { return self_of<Av>(f); }

  int insert(const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags, void* context);
  int remove(fi_addr_t* fi_addr, size_t count, uint64_t flags);
  int lookup(fi_addr_t addr, void* out, size_t* addrlen);
  const char* straddr(const void* addr, char* buf, size_t* len);
  // Domains opened with FI_ADDR_STR: names come and go as strings (addr_str.hpp).
  bool strings() const { return str_; }
  int insert_str(const void* addr, size_t count, fi_addr_t* fi_addr, uint64_t flags, void* context);

  // For endpoints (domain lock held).
  const std::string* name_of(fi_addr_t a) const {
    return a < names_.size() && valid_[a] ? &names_[a] : nullptr;
  }
  fi_addr_t addr_of(const void* name, size_t len) const;
  uint64_t generation() const { return gen_; }
  size_t addrlen() const { return addrlen_; }
  Domain& domain() { return dom_; }
  int refs = 0;

 private:
  FidBox<fid_av, Av> box_;
  Domain& dom_;
  fi_av_type type_;
  size_t addrlen_;
  bool str_ = false;
  fi_addr_t take_slot();

  std::vector<std::string> names_;
  std::vector<bool> valid_;
  std::set<fi_addr_t> free_;  // slots below names_.size() that hold no name
  std::unordered_map<std::string, std::vector<fi_addr_t>> index_;  // name -> its slots, ascending
  uint64_t gen_ = 1;
};

} // namespace pm
