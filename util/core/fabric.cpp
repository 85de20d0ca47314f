#include "core/fabric.hpp"

#include <chrono>
#include <cstring>

#include <rdma/fi_errno.h>

#include "core/cq.hpp"
#include "core/domain.hpp"
#include "core/provider.hpp"

namespace pm {

extern const fi_ops kFabricFiOps;
extern const fi_ops_fabric kFabricOps;
extern const fi_ops kEqFiOps;
extern const fi_ops_eq kEqOps;

Fabric::Fabric(const fi_fabric_attr& attr, void* context) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_FABRIC;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kFabricFiOps);
  box_.fid.ops = const_cast<fi_ops_fabric*>(&kFabricOps);
  api_version_ = attr.api_version;
}

Eq::Eq(Fabric& fab, const fi_eq_attr& attr, void* context) : fabric(fab) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_EQ;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kEqFiOps);
  box_.fid.ops = const_cast<fi_ops_eq*>(&kEqOps);
}

ssize_t Eq::read(uint32_t* event, void* buf, size_t len, uint64_t flags, int timeout) {
  std::unique_lock<std::mutex> g(mu_);
  if (q_.empty() && timeout != 0) {
    auto ready = [&] { return !q_.empty(); };
    if (timeout < 0) {
      // Bounded by the application's choice; wake periodically regardless.
      while (!cv_.wait_for(g, std::chrono::milliseconds(100), ready)) {
      }
    } else {
      cv_.wait_for(g, std::chrono::milliseconds(timeout), ready);
    }
  }
  if (q_.empty()) return -FI_EAGAIN;
  Event& e = q_.front();
  if (len < e.data.size()) return -FI_ETOOSMALL;
  if (event) *event = e.type;
  memcpy(buf, e.data.data(), e.data.size());
  ssize_t n = ssize_t(e.data.size());
  if (!(flags & FI_PEEK)) q_.pop_front();
  return n;
}

ssize_t Eq::write(uint32_t event, const void* buf, size_t len, uint64_t flags) {
  std::lock_guard<std::mutex> g(mu_);
  const uint8_t* b = static_cast<const uint8_t*>(buf);
  q_.push_back(Event{event, std::vector<uint8_t>(b, b + len)});
  cv_.notify_all();
  return ssize_t(len);
}

ssize_t Eq::readerr(fi_eq_err_entry*, uint64_t) { return -FI_EAGAIN; }

namespace {
int pm_fabric_close(fid_t f) noexcept {
  Fabric* fab = self_of_fid<Fabric, fid_fabric>(f);
  if (fab->refs) return -FI_EBUSY;
  delete fab;
  return 0;
}

int pm_domain_open(fid_fabric* f, fi_info* info, fid_domain** out, void* ctx) noexcept {
  Fabric* fab = Fabric::from(f);
  return guard([&] {
    if (!info || !info->domain_attr) return -FI_EINVAL;
    auto* d = new Domain(*fab, *info, ctx);
    fab->refs++;
    *out = d->fid();
    return 0;
  });
}

int pm_eq_open(fid_fabric* f, fi_eq_attr* attr, fid_eq** out, void* ctx) noexcept {
  Fabric* fab = Fabric::from(f);
  return guard([&] {
    if (!attr) return -FI_EINVAL;
    if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS;
    auto* eq = new Eq(*fab, *attr, ctx);
    fab->refs++;
    *out = eq->fid();
    return 0;
  });
}

int pm_trywait(fid_fabric* f, fid** fids, int count) noexcept {
  return guard([&] {
    for (int i = 0; i < count; i++) {
      if (fids[i]->fclass != FI_CLASS_CQ) return -FI_EINVAL;
      int rc = self_of_fid<Cq, fid_cq>(fids[i])->trywait();
      if (rc) return rc;
    }
    return 0;
  });
}

int pm_eq_close(fid_t f) noexcept {
  Eq* eq = self_of_fid<Eq, fid_eq>(f);
  eq->fabric.refs--;
  delete eq;
  return 0;
}
ssize_t pm_eq_read(fid_eq* f, uint32_t* ev, void* buf, size_t len, uint64_t flags) noexcept {
  return guard([&] { return Eq::from(f)->read(ev, buf, len, flags, 0); });
}
ssize_t pm_eq_sread(fid_eq* f, uint32_t* ev, void* buf, size_t len, int timeout, uint64_t flags) noexcept {
  return guard([&] { return Eq::from(f)->read(ev, buf, len, flags, timeout); });
}
ssize_t pm_eq_write(fid_eq* f, uint32_t ev, const void* buf, size_t len, uint64_t flags) noexcept {
  return guard([&] { return Eq::from(f)->write(ev, buf, len, flags); });
}
ssize_t pm_eq_readerr(fid_eq* f, fi_eq_err_entry* buf, uint64_t flags) noexcept {
  return guard([&] { return Eq::from(f)->readerr(buf, flags); });
}
const char* pm_eq_strerror(fid_eq*, int prov_errno, const void*, char* buf, size_t len) noexcept {
  const char* s = fi_strerror(prov_errno < 0 ? -prov_errno : prov_errno);
  if (buf && len) {
    snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}
}  // namespace

const fi_ops kFabricFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_fabric_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = PM_ENOSYS(fi_ops, control),
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

const fi_ops_fabric kFabricOps = {
    .size = ops_size<fi_ops_fabric>(),
    .domain = pm_domain_open,
    .passive_ep = PM_ENOSYS(fi_ops_fabric, passive_ep),
    .eq_open = pm_eq_open,
    .wait_open = PM_ENOSYS(fi_ops_fabric, wait_open),
    .trywait = pm_trywait,
    .domain2 = PM_ENOSYS(fi_ops_fabric, domain2),
};

const fi_ops kEqFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_eq_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = PM_ENOSYS(fi_ops, control),
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

const fi_ops_eq kEqOps = {
    .size = ops_size<fi_ops_eq>(),
    .read = pm_eq_read,
    .readerr = pm_eq_readerr,
    .write = pm_eq_write,
    .sread = pm_eq_sread,
    .strerror = pm_eq_strerror,
};

// The fabric entry point libfabric calls after fi_getinfo.
int fabric_open(fi_fabric_attr* attr, fid_fabric** out, void* ctx) noexcept {
  return guard([&] {
    auto* fab = new Fabric(*attr, ctx);
    *out = fab->fid();
    return 0;
  });
}

}  // namespace pm
