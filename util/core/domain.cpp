#include "core/domain.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <sys/random.h>

#include <rdma/fi_errno.h>

#include "abi/api_version.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"
#include "core/atomic_ops.hpp"
#include "core/av.hpp"
#include "core/cntr.hpp"
#include "core/cq.hpp"
#include "core/endpoint.hpp"
#include "core/fabric.hpp"
#include "base/param.hpp"
#include "core/provider.hpp"

namespace pm {

extern const fi_ops kDomainFiOps;
extern const fi_ops_domain kDomainOps;
extern const fi_ops_mr kDomainMrOps;
extern const fi_ops kMrFiOps;

Domain::Domain(Fabric& fab, const fi_info& in, void* context) : fabric(fab), info(fi_dupinfo(&in)) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_DOMAIN;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kDomainFiOps);
  box_.fid.ops = const_cast<fi_ops_domain*>(&kDomainOps);
  box_.fid.mr = const_cast<fi_ops_mr*>(&kDomainMrOps);
}

Domain::~Domain() {
  if (helper_.joinable()) {
    {
      std::lock_guard<std::mutex> g(helper_mu_);
      helper_stop_ = true;
    }
    helper_cv_.notify_all();
    helper_.join();
  }
  fi_freeinfo(info);
}

void Domain::start_helper(unsigned interval_us) {
  if (helper_.joinable() || interval_us == 0) return;
  helper_ = std::thread([this, interval_us] { helper_loop(interval_us); });
}

// Runs progress only when the application did not during a whole interval,
// and never waits for the domain lock: an application that progresses
// itself does not see this thread.
void Domain::helper_loop(unsigned interval_us) {
  uint64_t seen = progress_calls_.load(std::memory_order_relaxed);
  std::unique_lock<std::mutex> g(helper_mu_);
  while (!helper_cv_.wait_for(g, std::chrono::microseconds(interval_us), [&] { return helper_stop_; })) {
    uint64_t now = progress_calls_.load(std::memory_order_relaxed);
    if (now != seen) {
      seen = now;
      continue;
    }
    std::unique_lock<SpinLock> l(mu_, std::try_to_lock);
    if (!l.owns_lock()) continue;
    // A whole interval passed: devices run their timers on this poll.
    for (Endpoint* ep : eps_) ep->device().tick();
    progress_locked();
    seen = progress_calls_.load(std::memory_order_relaxed);
  }
}

void Domain::remove_ep(Endpoint* ep) {
  eps_.erase(std::remove(eps_.begin(), eps_.end(), ep), eps_.end());
}

void Domain::progress_locked() {
  progress_calls_.fetch_add(1, std::memory_order_relaxed);
  for (Endpoint* ep : eps_) ep->progress();
}

Mr::Mr(Domain& d, const fi_mr_attr& attr, uint64_t key, uint64_t flags)
    : dom(d), iov(attr.mr_iov, attr.mr_iov + attr.iov_count), access(attr.access), offset(attr.offset) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_MR;
  box_.fid.fid.context = attr.context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kMrFiOps);
  box_.fid.mem_desc = this;
  box_.fid.key = key;
}

int Domain::mr_reg(const fi_mr_attr& attr, uint64_t flags, fid_mr** out) {
  if (attr.iov_count > 0 && !attr.mr_iov) return -FI_EINVAL;
  if (attr.access & ~uint64_t(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE))
    return -FI_EINVAL;
  int mode = info->domain_attr->mr_mode;
  bool basic = mode == kMrBasic;
  virt_addr_ = basic || (mode & FI_MR_VIRT_ADDR);
  uint64_t key;
  if (basic || (mode & FI_MR_PROV_KEY)) {
    // Unguessable provider keys: a peer cannot name a region it was not told.
    do {
      if (getrandom(&key, sizeof key, 0) != sizeof key) return -FI_EOTHER;
    } while (key == 0 || mrs_.count(key));
  } else {
    key = attr.requested_key;
    if (mrs_.count(key)) return -FI_ENOKEY;
  }
  auto* mr = new Mr(*this, attr, key, flags);
  mrs_[key] = mr;
  refs++;
  *out = mr->fid();
  return 0;
}

// Checks a remote access and finds the local memory: the key names a live
// region that grants `access`, and the range lies inside it. With
// FI_MR_VIRT_ADDR the range must lie in one of the region's buffers;
// without, addresses are offsets (from the offset given at registration)
// into the region's buffers taken as one, and the range may span several.
int Domain::mr_locate(uint64_t key, uint64_t addr, size_t len, uint64_t access, struct iovec* out, size_t max,
                      size_t* n, Mr** mrp) const {
  auto it = mrs_.find(key);
  if (it == mrs_.end()) return FI_EKEYREJECTED;
  Mr* mr = it->second;
  if ((mr->access & access) != access) return FI_EACCES;
  if (virt_addr_) {
    for (const iovec& v : mr->iov) {
      uint64_t base = reinterpret_cast<uint64_t>(v.iov_base);
      if (addr >= base && len <= v.iov_len && addr - base <= v.iov_len - len) {
        out[0] = iovec{static_cast<char*>(v.iov_base) + (addr - base), len};
        *n = 1;
        *mrp = mr;
        return 0;
      }
    }
    return FI_EINVAL;
  }
  if (addr < mr->offset) return FI_EINVAL;
  uint64_t pos = addr - mr->offset;
  size_t total = iov_total(mr->iov.data(), mr->iov.size());
  if (pos > total || len > total - pos) return FI_EINVAL;
  size_t k = iov_slice(mr->iov.data(), mr->iov.size(), pos, len, out, max);
  if (iov_total(out, k) != len) return FI_EINVAL;  // more pieces than `max`
  *n = k;
  *mrp = mr;
  return 0;
}

int Domain::mr_check(uint64_t key, uint64_t addr, size_t len, uint64_t access, char** va, Mr** out) const {
  iovec piece{nullptr, 0};
  size_t n = 0;
  int st = mr_locate(key, addr, len, access, &piece, 1, &n, out);
  if (st == 0) *va = static_cast<char*>(piece.iov_base);
  return st;
}

int Domain::mr_close(Mr* mr) {
  for (Cntr* c : {mr->rwrite_cntr, mr->rread_cntr})
    if (c) c->refs--;
  mrs_.erase(mr->fid()->key);
  refs--;
  delete mr;
  return 0;
}

namespace {
Domain* dom_of(fid_domain* f) { return Domain::from(f); }

int pm_domain_close(fid_t f) noexcept {
  Domain* d = self_of_fid<Domain, fid_domain>(f);
  if (d->refs) return -FI_EBUSY;
  d->fabric.refs--;
  delete d;
  return 0;
}

int pm_av_open(fid_domain* f, fi_av_attr* attr, fid_av** out, void* ctx) noexcept {
  Domain* d = dom_of(f);
  return guard([&] {
    if (!attr) return -FI_EINVAL;
    if (attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP && attr->type != FI_AV_TABLE)
      return -FI_EINVAL;
    if (attr->rx_ctx_bits || (attr->flags & (FI_EVENT | FI_SYMMETRIC)) || attr->name)
      return -FI_ENOSYS;
    std::lock_guard<SpinLock> g(d->lock());
    auto* av = new Av(*d, *attr, ctx);
    d->refs++;
    *out = av->fid();
    return 0;
  });
}

int pm_cq_open(fid_domain* f, fi_cq_attr* attr, fid_cq** out, void* ctx) noexcept {
  Domain* d = dom_of(f);
  return guard([&] {
    if (!attr) return -FI_EINVAL;
    switch (attr->format) {
    case FI_CQ_FORMAT_UNSPEC: case FI_CQ_FORMAT_CONTEXT: case FI_CQ_FORMAT_MSG:
    case FI_CQ_FORMAT_DATA: case FI_CQ_FORMAT_TAGGED: break;
    default: return -FI_ENOSYS;
    }
    switch (attr->wait_obj) {
    case FI_WAIT_NONE: case FI_WAIT_UNSPEC: case FI_WAIT_FD: break;
    default: return -FI_ENOSYS;
    }
    if (attr->wait_cond != FI_CQ_COND_NONE) return -FI_ENOSYS;
    std::lock_guard<SpinLock> g(d->lock());
    auto* cq = new Cq(*d, *attr, ctx);
    d->refs++;
    *out = cq->fid();
    return 0;
  });
}

int pm_endpoint(fid_domain* f, fi_info* info, fid_ep** out, void* ctx) noexcept {
  Domain* d = dom_of(f);
  return guard([&] {
    if (!info || !info->ep_attr ||
        (info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_DGRAM))
      return -FI_EINVAL;
    int err = 0;
    std::unique_ptr<Device> dev = g_provdef->open_device(*d, *info, &err);
    if (!dev) return err ? err : -FI_EOTHER;
    std::lock_guard<SpinLock> g(d->lock());
    auto* ep = new Endpoint(*d, *info, std::move(dev), ctx);
    d->refs++;
    if (g_params.get_bool("progress_thread"))
      d->start_helper(unsigned(g_params.get_int("progress_interval_us")));
    *out = ep->fid();
    return 0;
  });
}

int pm_cntr_open(fid_domain* f, fi_cntr_attr* attr, fid_cntr** out, void* ctx) noexcept {
  Domain* d = dom_of(f);
  return guard([&] {
    fi_cntr_attr a{};
    if (attr) a = *attr;
    if (a.events != FI_CNTR_EVENTS_COMP) return -FI_ENOSYS;
    if (a.wait_obj != FI_WAIT_NONE && a.wait_obj != FI_WAIT_UNSPEC) return -FI_ENOSYS;
    std::lock_guard<SpinLock> g(d->lock());
    auto* c = new Cntr(*d, a, ctx);
    d->refs++;
    *out = c->fid();
    return 0;
  });
}

int pm_query_atomic(fid_domain* f, fi_datatype dt, fi_op op, fi_atomic_attr* attr, uint64_t flags) noexcept {
  AtomicKind kind = (flags & FI_COMPARE_ATOMIC) ? AtomicKind::kCompare
                    : (flags & FI_FETCH_ATOMIC) ? AtomicKind::kFetch
                                                : AtomicKind::kWrite;
  if (!(dom_of(f)->info->caps & FI_ATOMIC) || !atomic_valid(dt, op, kind)) return -FI_EOPNOTSUPP;
  if (attr) {
    attr->size = atomic_size(dt);
    // One packet carries an operation (as the endpoint's *valid calls say).
    attr->count = g_provdef->packet_size(*dom_of(f)->info) / (attr->size * (kind == AtomicKind::kCompare ? 2 : 1));
  }
  return 0;
}

int pm_mr_regattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) noexcept {
  Domain* d = self_of_fid<Domain, fid_domain>(f);
  return guard([&] {
    if (!attr || !out) return -FI_EINVAL;
    std::lock_guard<SpinLock> g(d->lock());
    return d->mr_reg(*attr, flags, out);
  });
}
int pm_mr_regv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
               uint64_t key, uint64_t flags, fid_mr** out, void* ctx) noexcept {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = key;
  attr.context = ctx;
  return pm_mr_regattr(f, &attr, flags, out);
}
int pm_mr_reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset, uint64_t key,
              uint64_t flags, fid_mr** out, void* ctx) noexcept {
  iovec v{const_cast<void*>(buf), len};
  return pm_mr_regv(f, &v, 1, access, offset, key, flags, out, ctx);
}
int pm_mr_bind(fid_t f, fid_t bf, uint64_t flags) noexcept {
  Mr* mr = self_of_fid<Mr, fid_mr>(f);
  return guard([&] {
    if (bf->fclass != FI_CLASS_CNTR) return -FI_EINVAL;
    if (!(flags & (FI_REMOTE_WRITE | FI_REMOTE_READ)) || (flags & ~uint64_t(FI_REMOTE_WRITE | FI_REMOTE_READ)))
      return -FI_EBADFLAGS;
    Cntr* c = self_of_fid<Cntr, fid_cntr>(bf);
    if (&c->domain() != &mr->dom) return -FI_EINVAL;
    std::lock_guard<SpinLock> g(mr->dom.lock());
    for (auto [bit, slot] : {std::pair{FI_REMOTE_WRITE, &mr->rwrite_cntr}, {FI_REMOTE_READ, &mr->rread_cntr}})
      if (flags & bit) {
        if (*slot) (*slot)->refs--;
        *slot = c;
        c->refs++;
      }
    return 0;
  });
}

int pm_mr_close(fid_t f) noexcept {
  Mr* mr = self_of_fid<Mr, fid_mr>(f);
  return guard([&] {
    Domain& d = mr->dom;
    std::lock_guard<SpinLock> g(d.lock());
    return d.mr_close(mr);
  });
}
}  // namespace

const fi_ops kDomainFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_domain_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = PM_ENOSYS(fi_ops, control),
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

const fi_ops_domain kDomainOps = {
    .size = ops_size<fi_ops_domain>(),
    .av_open = pm_av_open,
    .cq_open = pm_cq_open,
    .endpoint = pm_endpoint,
    .scalable_ep = PM_ENOSYS(fi_ops_domain, scalable_ep),
    .cntr_open = pm_cntr_open,
    .poll_open = PM_ENOSYS(fi_ops_domain, poll_open),
    .stx_ctx = PM_ENOSYS(fi_ops_domain, stx_ctx),
    .srx_ctx = PM_ENOSYS(fi_ops_domain, srx_ctx),
    .query_atomic = pm_query_atomic,
    .query_collective = PM_ENOSYS(fi_ops_domain, query_collective),
    .endpoint2 = PM_ENOSYS(fi_ops_domain, endpoint2),
};

const fi_ops_mr kDomainMrOps = {
    .size = ops_size<fi_ops_mr>(),
    .reg = pm_mr_reg,
    .regv = pm_mr_regv,
    .regattr = pm_mr_regattr,
};

const fi_ops kMrFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_mr_close,
    .bind = pm_mr_bind,
    .control = PM_ENOSYS(fi_ops, control),
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

}  // namespace pm
