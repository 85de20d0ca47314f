#include "core/cntr.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/param.hpp"
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
  spin_ns_ = uint64_t(g_params.get_int("spin_us")) * 1000;
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
  if (sleepers_) wake();
  return 0;
}

int Cntr::set(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  value_ = v;
  if (sleepers_) wake();
  return 0;
}

int Cntr::adderr(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  err_ += v;
  if (sleepers_) wake();
  return 0;
}

int Cntr::seterr(uint64_t v) {
  std::lock_guard<SpinLock> g(dom_.lock());
  err_ = v;
  if (sleepers_) wake();
  return 0;
}

void Cntr::wake() {
  uint64_t one = 1;
  if (wakefd_) (void)!::write(wakefd_.get(), &one, sizeof one);
}

// Progress until the count reaches the threshold (0), an error is counted
// (-FI_EAVAIL) or the timeout passes (-FI_ETIMEDOUT; timeout < 0: none).
// Like fi_cq_sread: progress and spin for spin_us, then sleep on every
// device of the domain (armed) and on the counter's own eventfd (updates by
// other threads), never past the devices' next timer, and at most 50 ms at
// a time, so timers keep running.
int Cntr::wait(uint64_t threshold, int timeout_ms) {
  uint64_t start = now_ns();
  uint64_t limit = timeout_ms < 0 ? UINT64_MAX : uint64_t(timeout_ms) * 1000000ull;
  std::unique_lock<SpinLock> g(dom_.lock());
  const uint64_t err0 = err_;
  auto done = [&]() -> int {
    if (value_ >= threshold) return 0;
    if (err_ != err0) return -FI_EAVAIL;
    return 1;
  };
  for (;;) {
    dom_.progress_locked();
    if (int rc = done(); rc <= 0) return rc;
    uint64_t now = now_ns();
    uint64_t el = now - start;
    if (el >= limit) return -FI_ETIMEDOUT;
    if (el < spin_ns_) {
      g.unlock();
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      g.lock();
      continue;
    }
    if (!wakefd_) wakefd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    int devfd = dom_.devices_fd();
    if (!wakefd_ || devfd < 0) return -FI_ENOMEM;
    dom_.arm_devices(true);
    dom_.progress_locked();  // what arrived before the devices were armed
    int rc = done();
    if (rc > 0) {
      uint64_t ns = std::min<uint64_t>(limit - el, 50000000ull);
      uint64_t timer = dom_.next_timer_ns();
      if (timer != UINT64_MAX) ns = std::min(ns, timer > now ? std::max<uint64_t>(timer - now, 20000) : 20000);
      sleepers_++;
      g.unlock();
      pollfd pf[2] = {{devfd, POLLIN, 0}, {wakefd_.get(), POLLIN, 0}};
      timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
      ppoll(pf, 2, &ts, nullptr);
      g.lock();
      sleepers_--;
      uint64_t v;
      while (::read(wakefd_.get(), &v, sizeof v) > 0) {
      }
    }
    dom_.arm_devices(false);
    dom_.drain_devices();
    if (rc <= 0) return rc;
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
