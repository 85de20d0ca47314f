#include "core/cntr.hpp"

#include <sched.h>

#include <mutex>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "core/domain.hpp"

namespace pm {

extern const fi_ops kCntrFiOps;
extern const fi_ops_cntr kCntrOps;

Cntr::Cntr(Domain& dom, const fi_cntr_attr& attr, void* context) : dom_(dom) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_CNTR;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kCntrFiOps);
  box_.fid.ops = const_cast<fi_ops_cntr*>(&kCntrOps);
}

uint64_t Cntr::read() {
  std::lock_guard<SpinLock> g(dom_.lock());
  dom_.progress_locked();
  return value_;
}

uint64_t Cntr::readerr() {
  std::lock_guard<SpinLock> g(dom_.lock());
  dom_.progress_locked();
  return err_;
}

int Cntr::add(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  value_ += v;
  return 0;
}

int Cntr::set(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  value_ = v;
  return 0;
}

int Cntr::adderr(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  err_ += v;
  return 0;
}

int Cntr::seterr(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  err_ = v;
  return 0;
}

// Progress until the count reaches the threshold (0), an error is counted
// (-FI_EAVAIL) or the timeout passes (-FI_ETIMEDOUT; timeout < 0: none).
int Cntr::wait(uint64_t threshold, int timeout_ms) {
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_ns() + uint64_t(timeout_ms) * 1000000ull;
  uint64_t err0;
  {
    std::lock_guard<SpinLock> g(dom_.lock());
    err0 = err_;
  }
  for (unsigned spins = 0;; spins++) {
    {
      std::lock_guard<SpinLock> g(dom_.lock());
      dom_.progress_locked();
      if (value_ >= threshold) return 0;
      if (err_ != err0) return -FI_EAVAIL;
    }
    if (now_ns() >= deadline) return -FI_ETIMEDOUT;
    if ((spins & 255) == 255) sched_yield();
  }
}

namespace {
Cntr* cntr_of(fid_cntr* f) { return Cntr::from(f); }
uint64_t pm_cntr_read(fid_cntr* f) noexcept { return guard([&] { return cntr_of(f)->read(); }); }
uint64_t pm_cntr_readerr(fid_cntr* f) noexcept { return guard([&] { return cntr_of(f)->readerr(); }); }
int pm_cntr_add(fid_cntr* f, uint64_t v) noexcept { return guard([&] { return cntr_of(f)->add(v); }); }
int pm_cntr_set(fid_cntr* f, uint64_t v) noexcept { return guard([&] { return cntr_of(f)->set(v); }); }
int pm_cntr_adderr(fid_cntr* f, uint64_t v) noexcept { return guard([&] { return cntr_of(f)->adderr(v); }); }
int pm_cntr_seterr(fid_cntr* f, uint64_t v) noexcept { return guard([&] { return cntr_of(f)->seterr(v); }); }
int pm_cntr_wait(fid_cntr* f, uint64_t t, int timeout) noexcept {
  return guard([&] { return cntr_of(f)->wait(t, timeout); });
}
int pm_cntr_close(fid_t f) noexcept {
  Cntr* c = self_of_fid<Cntr, fid_cntr>(f);
  return guard([&] {
    {
      std::lock_guard<SpinLock> g(c->domain().lock());
      if (c->refs) return -FI_EBUSY;
      c->domain().refs--;
    }
    delete c;
    return 0;
  });
}
}  // namespace

extern const fi_ops kCntrFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_cntr_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = PM_ENOSYS(fi_ops, control),
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

extern const fi_ops_cntr kCntrOps = {
    .size = ops_size<fi_ops_cntr>(),
    .read = pm_cntr_read,
    .readerr = pm_cntr_readerr,
    .add = pm_cntr_add,
    .set = pm_cntr_set,
    .wait = pm_cntr_wait,
    .adderr = pm_cntr_adderr,
    .seterr = pm_cntr_seterr,
};

}  // namespace pm
