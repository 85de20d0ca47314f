#include "core/cq.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/log.hpp"
#include "core/domain.hpp"
#include "core/endpoint.hpp"
#include "core/fabric.hpp"
#include "base/param.hpp"
#include "core/provider.hpp"

namespace pm {

extern const fi_ops kCqFiOps;
extern const fi_ops_cq kCqOps;

static size_t format_size(fi_cq_format f) {
  switch (f) {
  case FI_CQ_FORMAT_CONTEXT: return sizeof(fi_cq_entry);
  case FI_CQ_FORMAT_MSG: return sizeof(fi_cq_msg_entry);
  case FI_CQ_FORMAT_DATA: return sizeof(fi_cq_data_entry);
  case FI_CQ_FORMAT_TAGGED: return sizeof(fi_cq_tagged_entry);
  default: return 0;
  }
}

Cq::Cq(Domain& dom, const fi_cq_attr& attr, void* context) : dom_(dom) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_CQ;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kCqFiOps);
  box_.fid.ops = const_cast<fi_ops_cq*>(&kCqOps);
  format_ = attr.format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr.format;
  wait_obj_ = attr.wait_obj;
  entry_size_ = format_size(format_);
  spin_ns_ = uint64_t(g_params.get_int("spin_us")) * 1000;
}

Cq::~Cq() = default;

void Cq::bind_ep(Endpoint* ep) {
  if (std::find(eps_.begin(), eps_.end(), ep) != eps_.end()) return;
  eps_.push_back(ep);
  if (epfd_) {
    epoll_event ev{EPOLLIN, {.ptr = ep}};
    epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, ep->device().wait_fd(), &ev);
  }
}

void Cq::unbind_ep(Endpoint* ep) {
  auto it = std::find(eps_.begin(), eps_.end(), ep);
  if (it == eps_.end()) return;
  if (epfd_) epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, ep->device().wait_fd(), nullptr);
  eps_.erase(it);
}

int Cq::ensure_epoll() {
  if (epfd_) return 0;
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  UniqueFd sig(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!ep || !sig || !wake) return -FI_ENOMEM;
  epoll_event ev{EPOLLIN, {.ptr = nullptr}};
  epoll_ctl(ep.get(), EPOLL_CTL_ADD, sig.get(), &ev);
  epoll_ctl(ep.get(), EPOLL_CTL_ADD, wake.get(), &ev);
  wakefd_ = std::move(wake);
  for (Endpoint* e : eps_) {
    epoll_event eev{EPOLLIN, {.ptr = e}};
    epoll_ctl(ep.get(), EPOLL_CTL_ADD, e->device().wait_fd(), &eev);
  }
  epfd_ = std::move(ep);
  sigfd_ = std::move(sig);
  return 0;
}

// Passed fi_trywait with nothing to read, until the next entry: the domain
// keeps the devices armed meanwhile (Domain::trywait_hold).
void Cq::set_trywait(bool on) {
  if (on == trywait_armed_) return;
  trywait_armed_ = on;
  dom_.trywait_hold(on);
}

void Cq::wake() {
  set_trywait(false);
  uint64_t one = 1;
  if (wakefd_) (void)!::write(wakefd_.get(), &one, sizeof one);
}

void Cq::write_entry(void* dst, const Completion& c) const {
  switch (format_) {
  case FI_CQ_FORMAT_CONTEXT: {
    auto* e = static_cast<fi_cq_entry*>(dst);
    e->op_context = c.op_context;
    break;
  }
  case FI_CQ_FORMAT_MSG: {
    auto* e = static_cast<fi_cq_msg_entry*>(dst);
    *e = fi_cq_msg_entry{c.op_context, c.flags, c.len};
    break;
  }
  case FI_CQ_FORMAT_DATA: {
    auto* e = static_cast<fi_cq_data_entry*>(dst);
    *e = fi_cq_data_entry{c.op_context, c.flags, c.len, c.buf, c.data};
    break;
  }
  default: {
    auto* e = static_cast<fi_cq_tagged_entry*>(dst);
    *e = fi_cq_tagged_entry{c.op_context, c.flags, c.len, c.buf, c.data, c.tag};
    break;
  }
  }
}

ssize_t Cq::read_locked(void* buf, size_t count, fi_addr_t* src) {
  dom_.progress_locked();
  if (q_.empty()) return -FI_EAGAIN;
  if (q_.front().err) return -FI_EAVAIL;
  size_t n = 0;
  char* out = static_cast<char*>(buf);
  while (n < count && !q_.empty() && !q_.front().err) {
    const Completion& c = q_.front();
    write_entry(out + n * entry_size_, c);
    if (src) src[n] = c.src;
    q_.pop_front();
    n++;
  }
  head_seq_ += n;
  return ssize_t(n);
}

ssize_t Cq::read(void* buf, size_t count, fi_addr_t* src) {
  std::lock_guard<SpinLock> g(dom_.lock());
  return read_locked(buf, count, src);
}

void Cq::push_source_err(const Completion& c, const void* name, size_t len) {
  names_.emplace_back(head_seq_ + q_.size(), std::string(static_cast<const char*>(name), len));
  q_.push_back(c);
  if (sleepers_ || trywait_armed_) wake();
}

ssize_t Cq::readerr(fi_cq_err_entry* buf, uint64_t flags) {
  std::lock_guard<SpinLock> g(dom_.lock());
  if (q_.empty() || !q_.front().err) dom_.progress_locked();
  if (q_.empty() || !q_.front().err) return -FI_EAGAIN;
  const Completion& c = q_.front();
  // err_data (fi_cq(3)): only FI_EADDRNOTAVAIL entries have some, the
  // sender's name. With api >= 1.5 and err_data_size > 0 on input it is
  // copied into the application's buffer (err_data_size = bytes copied);
  // otherwise err_data points to a provider buffer valid until the next
  // fi_cq_readerr. Releases before 1.5 have no err_data_size field.
  bool api15 = dom_.fabric.api_version() >= FI_VERSION(1, 5);
  if (!names_.empty() && names_.front().first == head_seq_) {
    std::string name = std::move(names_.front().second);
    names_.pop_front();
    if (api15 && buf->err_data_size > 0 && buf->err_data) {
      size_t n = std::min(buf->err_data_size, name.size());
      memcpy(buf->err_data, name.data(), n);
      buf->err_data_size = n;
    } else {
      err_data_ = std::move(name);
      buf->err_data = err_data_.data();
      if (api15) buf->err_data_size = err_data_.size();
    }
  } else if (api15) {
    buf->err_data_size = 0;  // the application's buffer is left untouched
  }
  buf->op_context = c.op_context;
  buf->flags = c.flags;
  buf->len = c.len;
  buf->buf = c.buf;
  buf->data = c.data;
  buf->tag = c.tag;
  buf->olen = c.olen;
  buf->err = c.err;
  buf->prov_errno = -c.err;
  q_.pop_front();
  head_seq_++;
  return 1;
}

ssize_t Cq::sread(void* buf, size_t count, fi_addr_t* src, const void* cond, int timeout) {
  if (wait_obj_ == FI_WAIT_NONE) return -FI_EINVAL;
  uint64_t start = now_ns();
  uint64_t spin_ns = spin_ns_;
  uint64_t limit = timeout < 0 ? UINT64_MAX : uint64_t(timeout) * 1000000ull;
  std::unique_lock<SpinLock> g(dom_.lock());
  for (;;) {
    ssize_t n = read_locked(buf, count, src);
    if (n != -FI_EAGAIN) return n;
    if (signaled_) {
      signaled_ = false;
      return -FI_EAGAIN;
    }
    uint64_t el = now_ns() - start;
    if (el >= limit) return -FI_EAGAIN;
    if (el < spin_ns) {
      g.unlock();
      g.lock();
      continue;
    }
    // Sleep: arm the devices, look once more, then wait on all their fds.
    if (int rc = ensure_epoll()) return rc;
    dom_.arm_devices(true);
    n = read_locked(buf, count, src);
    if (n == -FI_EAGAIN && !signaled_) {
      // Until the caller's limit, at most 50 ms, and no later than the
      // devices' next timer (an acknowledgement, retransmission or window
      // probe due: the peers may be waiting on it), as Cntr::wait does.
      uint64_t now = start + el;
      uint64_t ns = std::min<uint64_t>(limit - el, 50000000ull);
      uint64_t timer = dom_.next_timer_ns();
      if (timer != UINT64_MAX) ns = std::min(ns, timer > now ? std::max<uint64_t>(timer - now, 20000) : 20000);
      sleepers_++;
      g.unlock();
      epoll_event evs[8];
      timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
      if (epoll_pwait2(epfd_.get(), evs, 8, &ts, nullptr) < 0 && errno == ENOSYS)
        epoll_wait(epfd_.get(), evs, 8, int((ns + 999999) / 1000000));
      g.lock();
      sleepers_--;
    }
    dom_.arm_devices(false);
    dom_.drain_devices();
    uint64_t v;
    if (sigfd_ && ::read(sigfd_.get(), &v, sizeof v) == sizeof v) signaled_ = true;
    while (::read(wakefd_.get(), &v, sizeof v) > 0) {
    }
    if (n != -FI_EAGAIN) return n;
  }
}

int Cq::signal() {
  std::lock_guard<SpinLock> g(dom_.lock());
  if (int rc = ensure_epoll()) return rc;
  uint64_t one = 1;
  if (::write(sigfd_.get(), &one, sizeof one) != sizeof one) return -FI_EOTHER;
  return 0;
}

int Cq::control(int cmd, void* arg) {
  std::lock_guard<SpinLock> g(dom_.lock());
  switch (cmd) {
  case FI_GETWAIT:
    if (wait_obj_ != FI_WAIT_FD && wait_obj_ != FI_WAIT_UNSPEC) return -FI_ENODATA;
    if (int rc = ensure_epoll()) return rc;
    *static_cast<int*>(arg) = epfd_.get();
    return 0;
  case FI_GETWAITOBJ:
    *static_cast<fi_wait_obj*>(arg) = FI_WAIT_FD;
    return 0;
  default:
    return -FI_ENOSYS;
  }
}

// fi_trywait: arms the devices so the fd fires on the next arrival; says
// -FI_EAGAIN when completions are already there.
int Cq::trywait() {
  std::lock_guard<SpinLock> g(dom_.lock());
  if (int rc = ensure_epoll()) return rc;
  uint64_t v;
  while (::read(wakefd_.get(), &v, sizeof v) > 0) {
  }
  for (Endpoint* e : eps_) e->device().drain_wait();
  // Armed before looking, so that nothing arriving after the look is
  // missed; released at once if there is something to read.
  set_trywait(true);
  dom_.progress_locked();
  if (!q_.empty()) set_trywait(false);
  return q_.empty() ? 0 : -FI_EAGAIN;
}

int Cq::close() {
  std::lock_guard<SpinLock> g(dom_.lock());
  if (!eps_.empty()) return -FI_EBUSY;
  set_trywait(false);
  dom_.refs--;
  return 0;
}

namespace {
Cq* cq_of(fid_cq* f) { return Cq::from(f); }
ssize_t pm_cq_read(fid_cq* f, void* buf, size_t n) noexcept {
  return guard([&] { return cq_of(f)->read(buf, n, nullptr); });
}
ssize_t pm_cq_readfrom(fid_cq* f, void* buf, size_t n, fi_addr_t* src) noexcept {
  return guard([&] { return cq_of(f)->read(buf, n, src); });
}
ssize_t pm_cq_readerr(fid_cq* f, fi_cq_err_entry* buf, uint64_t flags) noexcept {
  return guard([&] { return cq_of(f)->readerr(buf, flags); });
}
ssize_t pm_cq_sread(fid_cq* f, void* buf, size_t n, const void* cond, int timeout) noexcept {
  return guard([&] { return cq_of(f)->sread(buf, n, nullptr, cond, timeout); });
}
ssize_t pm_cq_sreadfrom(fid_cq* f, void* buf, size_t n, fi_addr_t* src, const void* cond,
                        int timeout) noexcept {
  return guard([&] { return cq_of(f)->sread(buf, n, src, cond, timeout); });
}
int pm_cq_signal(fid_cq* f) noexcept {
  return guard([&] { return cq_of(f)->signal(); });
}
const char* pm_cq_strerror(fid_cq* f, int prov_errno, const void* err_data, char* buf,
                           size_t len) noexcept {
  const char* s = fi_strerror(prov_errno < 0 ? -prov_errno : prov_errno);
  if (buf && len) {
    snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}
int pm_cq_close(fid_t f) noexcept {
  Cq* cq = self_of_fid<Cq, fid_cq>(f);
  return guard([&] {
    int rc = cq->close();
    if (rc == 0) delete cq;
    return rc;
  });
}
int pm_cq_control(fid_t f, int cmd, void* arg) noexcept {
  return guard([&] { return self_of_fid<Cq, fid_cq>(f)->control(cmd, arg); });
}
}  // namespace

const fi_ops kCqFiOps = {
    .size = ops_size<fi_ops>(),
    .close = pm_cq_close,
    .bind = PM_ENOSYS(fi_ops, bind),
    .control = pm_cq_control,
    .ops_open = PM_ENOSYS(fi_ops, ops_open),
    .tostr = PM_ENOSYS(fi_ops, tostr),
    .ops_set = PM_ENOSYS(fi_ops, ops_set),
};

const fi_ops_cq kCqOps = {
    .size = ops_size<fi_ops_cq>(),
    .read = pm_cq_read,
    .readfrom = pm_cq_readfrom,
    .readerr = pm_cq_readerr,
    .sread = pm_cq_sread,
    .sreadfrom = pm_cq_sreadfrom,
    .signal = pm_cq_signal,
    .strerror = pm_cq_strerror,
};

}  // namespace pm
