#include "core/domain.hpp"
#include "core/addr_str.hpp"

#include <dlfcn.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
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
  if (const fi_domain_attr* a = in.domain_attr)
    auto_ = a->control_progress == FI_PROGRESS_AUTO || a->data_progress == FI_PROGRESS_AUTO;
}

Domain::~Domain() {
  stop_helper();
  if (kick_fd_ >= 0) ::close(kick_fd_);
  if (watch_fd_ >= 0) ::close(watch_fd_);
  if (dev_epfd_ >= 0) ::close(dev_epfd_);
  fi_freeinfo(info);
}

// ---------------------------------------------------------------- devices

int Domain::devices_fd() {
  if (dev_epfd_ >= 0) return dev_epfd_;
  dev_epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (dev_epfd_ < 0) return -1;
  for (Endpoint* ep : eps_) {
    epoll_event ev{EPOLLIN, {.ptr = ep}};
    epoll_ctl(dev_epfd_, EPOLL_CTL_ADD, ep->device().wait_fd(), &ev);
  }
  return dev_epfd_;
}

void Domain::add_ep(Endpoint* ep) {
  eps_.push_back(ep);
  if (dev_epfd_ >= 0) {
    epoll_event ev{EPOLLIN, {.ptr = ep}};
    epoll_ctl(dev_epfd_, EPOLL_CTL_ADD, ep->device().wait_fd(), &ev);
  }
  if (armed_.load(std::memory_order_relaxed) || trywaits_) ep->device().arm_wait(true);
}

void Domain::remove_ep(Endpoint* ep) {
  auto it = std::find(eps_.begin(), eps_.end(), ep);
  if (it == eps_.end()) return;
  eps_.erase(it);
  if (dev_epfd_ >= 0) epoll_ctl(dev_epfd_, EPOLL_CTL_DEL, ep->device().wait_fd(), nullptr);
  if (armed_.load(std::memory_order_relaxed) || trywaits_) ep->device().arm_wait(false);
}

void Domain::arm_devices(bool on) {
  int n = armed_.load(std::memory_order_relaxed);
  armed_.store(on ? n + 1 : n - 1, std::memory_order_relaxed);
  if ((on ? n == 0 : n == 1) && trywaits_ == 0)
    for (Endpoint* ep : eps_) ep->device().arm_wait(on);
}

void Domain::trywait_hold(bool on) {
  int before = trywaits_;
  trywaits_ += on ? 1 : -1;
  if ((on ? before == 0 : trywaits_ == 0) && armed_.load(std::memory_order_relaxed) == 0)
    for (Endpoint* ep : eps_) ep->device().arm_wait(on);
}

void Domain::drain_devices() {
  for (Endpoint* ep : eps_) ep->device().drain_wait();
  for (Endpoint* ep : eps_) ep->progress();
}

uint64_t Domain::next_timer_ns() const {
  uint64_t t = UINT64_MAX;
  for (Endpoint* ep : eps_) t = std::min(t, ep->device().next_timer_ns());
  return t;
}

void Domain::progress_locked() {
  uint64_t calls = progress_calls_.load(std::memory_order_relaxed) + 1;
  progress_calls_.store(calls, std::memory_order_relaxed);
  // The helper's watch: a timer these calls push out to about two
  // intervals ahead, on the kernel's tick (push_watch; a system call at
  // most once per interval; the clock read every kWatchCalls calls), so
  // that it fires one to two intervals after the last call (up to a tick
  // later where the interval is under two ticks), and the helper sleeps
  // while they keep coming. The helper then learns from last_call_ns_ when
  // the calls stopped, if the last call was the one that read the clock.
  if (watch_fd_ >= 0 && calls % kWatchCalls == 0) {
    uint64_t now = now_ns();
    last_call_ns_.store(now, std::memory_order_relaxed);
    last_call_count_.store(calls, std::memory_order_release);
    if (now - pushed_ns_ >= interval_ns_) {
      pushed_ns_ = now;
      push_watch(now + 2 * interval_ns_);
    }
  }
  for (Endpoint* ep : eps_) ep->progress();
}

// The watch timer to `ns` (from now, or with TFD_TIMER_ABSTIME on the
// clock's time).
void Domain::arm_watch(uint64_t ns, int flags) noexcept {
  itimerspec it{};
  it.it_value.tv_sec = time_t(ns / 1000000000ull);
  it.it_value.tv_nsec = long(ns % 1000000000ull);
  (void)timerfd_settime(watch_fd_, flags, &it, nullptr);
}

void Domain::set_watch(uint64_t ns) noexcept {
  arm_watch(ns, 0);
  // After the setting: the calls' next push sets the timer again (a push
  // that raced with this and skipped costs at most one more wake-up).
  watch_at_.store(0, std::memory_order_relaxed);
}

// The kernel's tick: the resolution of the coarse clock (a jiffy; the
// ticks of a busy CPU come at its multiples, where the kernel aligns them:
// Linux 5.11 and later, without skew_tick or nohz_full). 0 where it is not
// a plausible tick (then pushes are not rounded).
static uint64_t kernel_tick_ns() noexcept {
  timespec r{};
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &r) != 0 || r.tv_sec != 0) return 0;
  uint64_t t = uint64_t(r.tv_nsec);
  return t >= 100000 && t <= 20000000 ? t : 0;
}

// Sets the watch to `at` moved onto a tick: down when the interval is two
// ticks or more (then still 1.5 intervals or more after the push, later
// than the next push), else up (up to a tick later). On the tick, the
// timer never fires before the CPU's own tick while that runs, so the
// kernel does not reprogram the CPU's timer for a push: in a virtual
// machine that is an exit to the host (a stall of 5-15 us per push here,
// once per interval in each process). A push that changes nothing makes
// no system call.
void Domain::push_watch(uint64_t at) noexcept {
  if (tick_ns_) at = (2 * tick_ns_ <= interval_ns_ ? at : at + tick_ns_ - 1) / tick_ns_ * tick_ns_;
  if (at == watch_at_.load(std::memory_order_relaxed)) return;
  watch_at_.store(at, std::memory_order_relaxed);
  arm_watch(at, TFD_TIMER_ABSTIME);
}

// ----------------------------------------------------------------- helper
//
// Lifetime. libfabric unloads the DSO from its destructor (fi_fini calls the
// provider's cleanup, then dlclose); a helper still running then executes
// unmapped code. Every helper is registered here and stopped (woken through
// its eventfd, joined) by stop_all_helpers(), which runs from the first of:
// the destructor of a static made when the first helper starts (exit() runs
// it before the DSO's older statics are destroyed and before fi_fini), the
// DSO's destructor function, and the provider's cleanup. A helper never
// blocks on the domain lock (it try-locks and looks at its stop flag in
// between), so joining it cannot deadlock on a lock the exiting thread holds.

namespace {

struct Registry {
  std::mutex mu;
  std::vector<Domain*> doms;
  bool closed = false;  // the DSO is going away: no new helpers
};
// Made when the first helper starts and never destroyed (it is used from
// destructors). Until then stop_all_helpers() has nothing to do and must not
// allocate: exit() may come from a signal handler that interrupted malloc.
std::atomic<Registry*> g_registry{nullptr};
Registry& registry() {
  static Registry* r = [] {
    auto* n = new Registry;
    n->doms.reserve(16);
    g_registry.store(n, std::memory_order_release);
    return n;
  }();
  return *r;
}

// A fork()ed child has none of its parent's threads: forget them there.
void atfork_prepare() { registry().mu.lock(); }
void atfork_parent() { registry().mu.unlock(); }
void atfork_child() {
  for (Domain* d : registry().doms) d->forget_helper();
  registry().doms.clear();
  registry().mu.unlock();
}

struct Reaper {
  ~Reaper() { stop_all_helpers(); }
};

__attribute__((destructor)) void helpers_fini() { stop_all_helpers(); }

// Keeps this DSO mapped for the rest of the process (a helper that did not
// stop in time may still run its code).
void pin_dso() {
  Dl_info di;
  if (dladdr(reinterpret_cast<void*>(&pin_dso), &di) && di.dli_fname)
    dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

constexpr uint64_t kIdleSleepNs = 1000000000ull;  // longest sleep with nothing pending
constexpr uint64_t kMinSleepNs = 20000;           // a timer already due: look again soon

}  // namespace

void stop_all_helpers() noexcept {
  Registry* rp = g_registry.load(std::memory_order_acquire);
  if (!rp) return;
  Registry& r = *rp;
  // The exiting thread may have been interrupted while it held the mutex
  // (exit() from a signal handler): do not wait for it for ever.
  bool locked = false;
  for (int i = 0; i < 2000 && !(locked = r.mu.try_lock()); i++) usleep(1000);
  if (!locked) {
    pin_dso();
    return;
  }
  r.closed = true;
  for (Domain* d : r.doms) d->join_helper();
  r.doms.clear();  // no free(): see g_registry
  r.mu.unlock();
}

int Domain::start_helper() {
  if (helper_running_) return 0;
  if (!g_params.get_bool("progress_thread")) return auto_ ? -FI_EOPNOTSUPP : 0;
  long long us = g_params.get_int("progress_interval_us");
  if (us <= 0) return auto_ ? -FI_EOPNOTSUPP : 0;
  interval_ns_ = uint64_t(std::min(us, 3600LL * 1000000)) * 1000;  // at most an hour
  static const uint64_t tick = kernel_tick_ns();
  tick_ns_ = tick;
  timers_ns_ = std::max<uint64_t>(uint64_t(std::max(0LL, g_params.get_int("peer_timeout_ms"))) * 250000ull,
                                  interval_ns_);
  helper_cpu_ = int(g_params.get_int("progress_cpu"));
  if (kick_fd_ < 0) kick_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (kick_fd_ < 0 || devices_fd() < 0) return -FI_ENOMEM;
  // Without the timer the helper looks once per interval instead.
  if (watch_fd_ < 0) watch_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  static Reaper reaper;  // constructed now, so destroyed before the DSO's other statics
  (void)reaper;
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); });
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  // No helper, no watch: the progress calls must not push a timer for nobody.
  if (r.closed) {
    drop_watch();
    return auto_ ? -FI_ESHUTDOWN : 0;
  }
  helper_stop_.store(false);
  // The helper takes no signals: they stay with the application's threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&helper_, nullptr, &Domain::helper_main, this);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    PM_WARN(FI_LOG_DOMAIN, "cannot start the progress thread: %s", strerror(rc));
    drop_watch();
    return auto_ ? -FI_ENOMEM : 0;
  }
  helper_running_ = true;
  r.doms.push_back(this);
  return 0;
}

void Domain::stop_helper() noexcept {
  {
    // Waits while stop_all_helpers() stops every helper (this one included).
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.doms.erase(std::remove(r.doms.begin(), r.doms.end(), this), r.doms.end());
  }
  join_helper();
}

void Domain::join_helper() noexcept {
  if (!helper_running_) return;
  helper_stop_.store(true, std::memory_order_release);
  kick_helper();
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 2;
  int rc = pthread_timedjoin_np(helper_, nullptr, &deadline);
  if (rc != 0) {
    PM_WARN(FI_LOG_DOMAIN, "the progress thread did not stop within 2 s; it is left running");
    pin_dso();
    pthread_detach(helper_);
  }
  helper_running_ = false;
}

void Domain::kick_helper() noexcept {
  helper_asleep_.store(false, std::memory_order_relaxed);
  uint64_t one = 1;
  if (kick_fd_ >= 0) (void)!::write(kick_fd_, &one, sizeof one);
}

void* Domain::helper_main(void* self) {
  pthread_setname_np(pthread_self(), "pm-progress");
  static_cast<Domain*>(self)->helper_loop();
  return nullptr;
}

// Takes the domain lock for the helper. With `insist` (automatic progress)
// it keeps trying while the application makes no progress call of its own,
// so an application that holds the lock in a tight loop of calls that do
// not progress (posts that return -FI_EAGAIN, counter updates) cannot starve
// it; otherwise one try. Spins, then yields, then naps 50 us between tries.
// Never blocks: it gives up when told to stop.
bool Domain::helper_lock(bool insist, uint64_t seen) {
  for (unsigned i = 0;; i++) {
    if (mu_.try_lock()) return true;
    if (!insist || helper_stop_.load(std::memory_order_relaxed)) return false;
    if (seen != UINT64_MAX && progress_calls_.load(std::memory_order_relaxed) != seen) return false;
    if (i < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (i < 1024) {
      sched_yield();
    } else {
      // Held for long (an fi_close draining its endpoint): stop burning a CPU.
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }
}

// The helper's progress: timers first (time passed without polls), then
// every endpoint; not counted as the application's progress.
void Domain::helper_progress_locked() {
  for (Endpoint* ep : eps_) ep->tick();
  for (Endpoint* ep : eps_) ep->progress();
}

// How long the helper may sleep before it must look again, with nothing
// arriving: the interval while work waits for room, the liveness period
// while operations wait on peers, else until the next device timer (at
// most a second).
uint64_t Domain::helper_sleep_ns_locked() const {
  uint64_t now = now_ns();
  uint64_t wake = now + kIdleSleepNs;
  for (Endpoint* ep : eps_) {
    switch (ep->helper_need()) {
    case Endpoint::Need::kPoll: wake = std::min(wake, now + interval_ns_); break;
    case Endpoint::Need::kTimers: wake = std::min(wake, now + timers_ns_); break;
    case Endpoint::Need::kNone: break;
    }
    wake = std::min(wake, ep->device().next_timer_ns());
  }
  return wake > now + kMinSleepNs ? wake - now : kMinSleepNs;
}

void Domain::helper_loop() {
  if (helper_cpu_ >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(helper_cpu_, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
      PM_WARN(FI_LOG_DOMAIN, "cannot pin the progress thread to cpu %d", helper_cpu_);
  }
  auto stopping = [this] { return helper_stop_.load(std::memory_order_acquire); };
  auto drain = [](int fd) {
    uint64_t v;
    while (::read(fd, &v, sizeof v) > 0) {
    }
  };
  // Sleeps until a kick, `fd` (-1: none) is readable or `ns` passed.
  auto sleep_on = [&](int fd, uint64_t ns) {
    pollfd pf[2] = {{kick_fd_, POLLIN, 0}, {fd, POLLIN, 0}};
    timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
    ppoll(pf, fd >= 0 ? 2 : 1, &ts, nullptr);
    drain(kick_fd_);
  };
  // Watching: until the application has made no progress call for a whole
  // interval. With the watch timer (pushed out by the calls themselves,
  // progress_locked) the helper sleeps while they keep coming, rather than
  // waking every interval on a CPU an application thread is polling on.
  auto watch = [&](uint64_t ns) {
    if (watch_fd_ < 0) return sleep_on(-1, ns);
    set_watch(ns);
    sleep_on(watch_fd_, kIdleSleepNs);
    drain(watch_fd_);
  };
  // The calls counted when the helper last looked, and when that was: it
  // steps in only after a whole interval in which the count did not move.
  uint64_t seen = progress_calls_.load(std::memory_order_relaxed);
  uint64_t seen_ns = now_ns(), wait_ns = interval_ns_;
  while (!stopping()) {
    watch(wait_ns);
    if (stopping()) break;
    uint64_t calls = progress_calls_.load(std::memory_order_relaxed), now = now_ns();
    wait_ns = interval_ns_;
    if (calls != seen) {
      // Calls came since the last look. If the last of them read the clock,
      // that is when they stopped; else one may have come just now (an
      // application calling less often than kWatchCalls per interval is
      // never served between its calls).
      seen = calls;
      seen_ns = now;
      if (watch_fd_ >= 0 && last_call_count_.load(std::memory_order_acquire) == calls)
        seen_ns = std::min(now, last_call_ns_.load(std::memory_order_relaxed));
    }
    if (now - seen_ns < interval_ns_) {  // woken early (a kick, the 1 s bound), or the calls just stopped
      wait_ns = std::max<uint64_t>(interval_ns_ - (now - seen_ns), kMinSleepNs);
      continue;
    }
    // With manual progress, an application thread asleep in fi_cq_sread or
    // fi_cntr_wait is in libfabric and progresses on arrivals itself.
    if (!auto_ && armed_.load(std::memory_order_relaxed) > 0) continue;
    if (!helper_lock(auto_, seen)) continue;
    // The count again, exact under the lock (the calls increment it there):
    // a call that came between the look and the lock keeps the thread out.
    if (uint64_t c = progress_calls_.load(std::memory_order_relaxed); c != seen) {
      mu_.unlock();
      seen = c;
      seen_ns = now_ns();
      continue;
    }
    serves_.fetch_add(1, std::memory_order_relaxed);
    // Serving: a whole interval without a progress call. The devices stay
    // armed while serving (a peer's packet then fires our wait fd), and
    // each round runs progress, then sleeps until something arrives, a
    // timer is due, an operation is posted (poke) or, with work queued, an
    // interval.
    arm_devices(true);
    for (;;) {
      helper_progress_locked();  // (the first round: also what came before the arming)
      uint64_t ns = helper_sleep_ns_locked();
      helper_asleep_.store(true, std::memory_order_relaxed);
      mu_.unlock();
      sleep_on(dev_epfd_, ns);
      helper_asleep_.store(false, std::memory_order_relaxed);
      // Insist even with manual progress: the devices must be disarmed
      // once the application is back (armed, every peer's send to them is a
      // system call). Gives up only when stopping.
      if (!helper_lock(true, UINT64_MAX)) break;
      drain_devices();
      calls = progress_calls_.load(std::memory_order_relaxed);
      if (calls != seen || stopping()) {
        arm_devices(false);
        seen = calls;
        seen_ns = now_ns();
        mu_.unlock();
        break;  // the application progresses again: back to watching
      }
    }
  }
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
    // String addresses: the device sees the binary name of src_addr.
    std::unique_ptr<fi_info, void (*)(fi_info*)> bin(nullptr, fi_freeinfo);
    if (info->addr_format == FI_ADDR_STR && info->src_addr) {
      std::string name, why;
      if (!uri_to_name(static_cast<const char*>(info->src_addr), info->src_addrlen, &name, &why, false)) {
        PM_INFO(FI_LOG_EP_CTRL, "src_addr: %s", why.c_str());
        return -FI_EINVAL;
      }
      bin.reset(fi_dupinfo(info));
      if (!bin || !set_info_addr(&bin->src_addr, &bin->src_addrlen, name.data(), name.size())) return -FI_ENOMEM;
      bin->addr_format = FI_FORMAT_UNSPEC;
    }
    std::unique_ptr<Device> dev = g_provdef->open_device(*d, bin ? *bin : *info, &err);
    if (!dev) return err ? err : -FI_EOTHER;
    std::lock_guard<SpinLock> g(d->lock());
    // With FI_PROGRESS_AUTO an endpoint without its progress thread would
    // break the promise: refuse it (fi_getinfo offers AUTO only with the
    // thread enabled).
    if (int rc = d->start_helper()) {
      PM_WARN(FI_LOG_DOMAIN, "FI_PROGRESS_AUTO needs the progress thread (%s_PROGRESS_THREAD=1, "
              "PROGRESS_INTERVAL_US > 0): %s", "FI_<PROV>", fi_strerror(-rc));
      return rc;
    }
    auto* ep = new Endpoint(*d, *info, std::move(dev), ctx);
    d->refs++;
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
