#include "shm_region.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <rdma/fi_errno.h>

#include "base/log.hpp"

namespace pm::shm {

// --- cleanup at exit and on fatal signals ---------------------------------
// Paths are kept in a fixed table so the signal handler touches no heap.
namespace {
constexpr int kMaxOwned = 64;
constexpr int kPathMax = 256;
char g_owned[kMaxOwned][kPathMax];
enum : int { kFree, kClaimed, kReady };
std::atomic<int> g_used[kMaxOwned];
std::once_flag g_handlers_once;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
struct sigaction g_prev[sizeof(kSignals) / sizeof(kSignals[0])];

void unlink_all() noexcept {
  char wake[kPathMax + 8];
  for (int i = 0; i < kMaxOwned; i++) {
    if (g_used[i].load() != kReady) continue;
    unlink(g_owned[i]);
    size_t n = strnlen(g_owned[i], kPathMax);
    memcpy(wake, g_owned[i], n);
    memcpy(wake + n, ".wake", 6);
    unlink(wake);
  }
}

// Unlinks our regions, then hands the signal to whoever had it before us.
void on_signal(int sig, siginfo_t* info, void* uc) {
  unlink_all();
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); i++) {
    if (kSignals[i] != sig) continue;
    const struct sigaction& p = g_prev[i];
    if (p.sa_flags & SA_SIGINFO) {
      if (p.sa_sigaction) p.sa_sigaction(sig, info, uc);
      return;
    }
    if (p.sa_handler == SIG_IGN) return;
    if (p.sa_handler != SIG_DFL && p.sa_handler) {
      p.sa_handler(sig);
      return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
}

void install_handlers() {
  atexit(unlink_all);
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); i++) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, &g_prev[i]);
  }
}

// A slot is claimed (kClaimed), then filled, then published (kReady): the
// signal handler only reads published slots.
void track(const std::string& path) {
  std::call_once(g_handlers_once, install_handlers);
  if (path.size() >= kPathMax) return;
  for (int i = 0; i < kMaxOwned; i++) {
    int f = kFree;
    if (g_used[i].compare_exchange_strong(f, kClaimed)) {
      strcpy(g_owned[i], path.c_str());
      g_used[i].store(kReady);
      return;
    }
  }
}

void untrack(const std::string& path) {
  for (int i = 0; i < kMaxOwned; i++)
    if (g_used[i].load() == kReady && path == g_owned[i]) g_used[i].store(kFree);
}

size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }
}  // namespace

std::string region_path(const std::string& dir, uint32_t uid, uint64_t key) {
  char name[64];
  snprintf(name, sizeof name, "/pmshm_%u_%016llx", uid, (unsigned long long)key);
  return dir + name;
}

Region::Region(Region&& o) noexcept { *this = std::move(o); }

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    unmap();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::move(o.fd_);
    wake_ = std::move(o.wake_);
    path_ = std::move(o.path_);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

Region::~Region() { unmap(); }

void Region::unmap() {
  if (owner_ && !path_.empty()) {
    unlink(path_.c_str());
    unlink((path_ + ".wake").c_str());
    untrack(path_);
  }
  if (base_) munmap(base_, size_);
  base_ = nullptr;
  owner_ = false;
}

int Region::create(const RegionConfig& cfg, uint64_t key, uint64_t host, bool fence_free) {
  size_t cells_off = 4096;
  size_t states_off = align_up(cells_off + size_t(cfg.cells) * kCellSize, 64);
  size_t chunks_off = align_up(states_off + size_t(cfg.chunks) * sizeof(ChunkState), 4096);
  size_t size = align_up(chunks_off + size_t(cfg.chunks) * cfg.chunk_size, 4096);

  struct statvfs vfs;
  if (statvfs(cfg.dir.c_str(), &vfs) == 0) {
    size_t avail = size_t(vfs.f_bavail) * vfs.f_bsize;
    if (avail < size) {
      PM_WARN(FI_LOG_EP_CTRL,
              "not enough space in %s for an endpoint region: need %zu bytes, %zu available; "
              "enlarge it (docker run --shm-size), lower FI_PMSHM_CHUNK_COUNT / FI_PMSHM_QUEUE_CELLS, "
              "or point FI_PMSHM_DIR at another tmpfs",
              cfg.dir.c_str(), size, avail);
      return -FI_ENOSPC;
    }
  }

  uint32_t uid = getuid();
  std::string path = region_path(cfg.dir, uid, key);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) {
    if (errno == EEXIST) return -FI_EADDRINUSE;  // a well-known key another endpoint holds
    PM_WARN(FI_LOG_EP_CTRL, "cannot create %s: %s", path.c_str(), strerror(errno));
    return -FI_EIO;
  }
  flock(fd.get(), LOCK_EX);  // held until the process closes the fd or dies
  path_ = path;
  owner_ = true;
  track(path);
  if (ftruncate(fd.get(), off_t(size)) != 0) {
    PM_WARN(FI_LOG_EP_CTRL, "cannot size %s to %zu bytes: %s", path.c_str(), size, strerror(errno));
    return -FI_ENOSPC;
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return -FI_ENOMEM;
  base_ = base;
  size_ = size;
  fd_ = std::move(fd);

  std::string wake = path + ".wake";
  if (mkfifo(wake.c_str(), 0600) != 0) {
    PM_WARN(FI_LOG_EP_CTRL, "cannot create %s: %s", wake.c_str(), strerror(errno));
    return -FI_EIO;
  }
  wake_.reset(::open(wake.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!wake_) return -FI_EIO;

  RegionHdr* h = new (base_) RegionHdr{};
  h->version = kVersion;
  h->hdr_size = sizeof(RegionHdr);
  h->owner_pid = uint32_t(getpid());
  h->uid = uid;
  h->key = key;
  h->host = host;
  h->self_va = reinterpret_cast<uint64_t>(base_);
  h->probe = key ^ kProbeSalt;
  h->size = size;
  h->cells = cfg.cells;
  h->cell_size = kCellSize;
  h->cells_off = cells_off;
  h->chunks = cfg.chunks;
  h->chunk_size = cfg.chunk_size;
  h->states_off = states_off;
  h->chunks_off = chunks_off;
  h->fence_free = fence_free ? 1 : 0;
  for (uint32_t i = 0; i < cfg.cells; i++) new (&cells()[i].seq) std::atomic<uint64_t>(0);
  h->head.store(0);
  for (uint32_t i = 0; i < cfg.chunks; i++) new (&states()[i].busy) std::atomic<uint32_t>(0);
  h->sleeping.store(0);
  h->tail.store(0);
  // The magic goes last: a peer that maps the region early sees 0 and retries.
  __atomic_store_n(&h->magic, kRegionMagic, __ATOMIC_RELEASE);
  return 0;
}

int Region::open(const std::string& dir, uint32_t uid, uint64_t key) {
  std::string path = region_path(dir, uid, key);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return errno == ENOENT ? -FI_ENOENT : -FI_EACCES;
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || size_t(st.st_size) < sizeof(RegionHdr)) return -FI_ENOENT;
  void* base = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return -FI_ENOMEM;
  auto* h = static_cast<RegionHdr*>(base);
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == 0) {  // still being set up
    munmap(base, size_t(st.st_size));
    return -FI_ENOENT;
  }
  if (h->magic != kRegionMagic || h->version != kVersion || h->key != key ||
      h->size != size_t(st.st_size) || h->cell_size != kCellSize || (h->cells & (h->cells - 1)) ||
      h->chunks_off + size_t(h->chunks) * h->chunk_size > h->size) {
    munmap(base, size_t(st.st_size));
    return -FI_EINVAL;
  }
  base_ = base;
  size_ = size_t(st.st_size);
  fd_ = std::move(fd);
  path_ = path;
  return 0;
}

bool Region::owner_alive() const {
  if (!fd_) return false;
  if (flock(fd_.get(), LOCK_SH | LOCK_NB) == 0) {
    flock(fd_.get(), LOCK_UN);
    return false;
  }
  return errno == EWOULDBLOCK;
}

void Region::wake() {
  if (!wake_) {
    wake_.reset(::open((path_ + ".wake").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
    if (!wake_) return;
  }
  char c = 1;
  ssize_t rc = ::write(wake_.get(), &c, 1);
  (void)rc;  // a full FIFO already wakes the owner
}

void cleanup_stale(const std::string& dir, uint32_t uid) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "pmshm_%u_", uid);
  time_t now = time(nullptr);
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix, size_t(plen)) != 0) continue;
    if (strlen(e->d_name) != size_t(plen) + 16) continue;  // the ".wake" FIFOs go with their region
    std::string path = dir + "/" + e->d_name;
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd) continue;
    struct stat st;
    if (fstat(fd.get(), &st) != 0) continue;
    // A creator locks right after creating; an empty young file may be mid-creation.
    if (st.st_size == 0 && now - st.st_mtime < 10) continue;
    if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // owner alive
    PM_INFO(FI_LOG_EP_CTRL, "removing stale region %s of a dead endpoint", path.c_str());
    unlink(path.c_str());
    unlink((path + ".wake").c_str());
  }
  closedir(d);
}

}  // namespace pm::shm
