#include "shm_region.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/log.hpp"
#include "shm_proc.hpp"
#include "shm_signals.hpp"

namespace pm::shm {

namespace {
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

// [off, off + len) lies inside [0, size): overflow-safe.
bool inside(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }
}  // namespace

Layout plan_layout(const RegionConfig& cfg) {
  Layout l;
  l.cells = cfg.cells;
  l.intros = kIntroSlots;
  l.chunks = cfg.chunks;
  l.chunk_size = cfg.chunk_size;
  l.cells_off = kHdrBytes;
  l.intros_off = l.cells_off + uint64_t(l.cells) * kCellSize;
  l.states_off = align_up(l.intros_off + uint64_t(l.intros) * sizeof(IntroSlot), 64);
  l.chunks_off = align_up(l.states_off + uint64_t(l.chunks) * sizeof(ChunkState), 4096);
  l.size = align_up(l.chunks_off + uint64_t(l.chunks) * l.chunk_size, 4096);
  return l;
}

bool validate_layout(const RegionInfo& h, uint64_t file_size, Layout* out) {
  if (h.magic != kRegionMagic || h.version != kVersion || h.hdr_size != sizeof(RegionHdr)) return false;
  if (h.size != file_size || h.size < kHdrBytes || h.cell_size != kCellSize) return false;
  if (h.cells == 0 || h.cells > kMaxCells || (h.cells & (h.cells - 1))) return false;
  if (h.intros == 0 || h.intros > 255) return false;
  if (h.chunks == 0 || h.chunks > kMaxChunks || h.chunk_size == 0 || h.chunk_size > kMaxChunkSize) return false;
  if (h.alias_len > kAliasMax) return false;
  for (uint64_t off : {h.cells_off, h.intros_off, h.states_off, h.chunks_off})
    if (off % 64) return false;
  // The factors are bounded above, so the products cannot overflow.
  uint64_t cells_len = uint64_t(h.cells) * kCellSize;
  uint64_t intros_len = uint64_t(h.intros) * sizeof(IntroSlot);
  uint64_t states_len = uint64_t(h.chunks) * sizeof(ChunkState);
  uint64_t chunks_len = uint64_t(h.chunks) * h.chunk_size;
  // In order, each inside the file and starting after the previous one.
  if (h.cells_off < kHdrBytes || !inside(h.cells_off, cells_len, h.size)) return false;
  if (h.intros_off < h.cells_off || h.intros_off - h.cells_off < cells_len) return false;
  if (!inside(h.intros_off, intros_len, h.size)) return false;
  if (h.states_off < h.intros_off || h.states_off - h.intros_off < intros_len) return false;
  if (!inside(h.states_off, states_len, h.size)) return false;
  if (h.chunks_off < h.states_off || h.chunks_off - h.states_off < states_len) return false;
  if (!inside(h.chunks_off, chunks_len, h.size)) return false;
  out->size = h.size;
  out->cells_off = h.cells_off;
  out->intros_off = h.intros_off;
  out->states_off = h.states_off;
  out->chunks_off = h.chunks_off;
  out->cells = h.cells;
  out->intros = h.intros;
  out->chunks = h.chunks;
  out->chunk_size = h.chunk_size;
  return true;
}

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
    layout_ = o.layout_;
    info_ = o.info_;
    fd_ = std::move(o.fd_);
    wake_ = std::move(o.wake_);
    path_ = std::move(o.path_);
    dir_ = std::move(o.dir_);
    uid_ = o.uid_;
    guard_ = std::exchange(o.guard_, -1);
    track_ = std::exchange(o.track_, -1);
    owner_ = std::exchange(o.owner_, false);
    creator_ = o.creator_;
  }
  return *this;
}

Region::~Region() { unmap(); }

// Owner: a busy chunk whose receiver still lives may yet be read.
bool Region::chunks_pending() const {
  if (!base_ || broken()) return false;
  const ChunkState* s = states();
  for (uint32_t i = 0; i < layout_.chunks; i++) {
    if (!s[i].busy.load(std::memory_order_acquire)) continue;
    uint64_t rx = s[i].rx_key;  // ourselves (a message to our own endpoint): closing too
    if (rx && rx != info_.key && lock_held(region_path(dir_, uid_, rx))) return true;
  }
  return false;
}

void Region::unmap() {
  if (owner_ && !path_.empty()) {
    untrack_owned(track_);
    track_ = -1;
    if (getpid() != creator_) {
      // A forked child's copy: the files are its parent's.
    } else if (chunks_pending()) {
      // A sender may close right after its sends completed: the receivers
      // still need these chunks. The files stay until they are consumed
      // (remove_if_abandoned, called by peers and at every endpoint open).
      PM_INFO(FI_LOG_EP_CTRL, "keeping %s: bounce chunks not consumed yet by live receivers", path_.c_str());
    } else {
      unlink(path_.c_str());
      unlink((path_ + ".wake").c_str());
    }
  }
  if (base_) {
    unguard_mapping(guard_);
    munmap(base_, size_);
  }
  guard_ = -1;
  base_ = nullptr;
  owner_ = false;
}

bool Region::broken() const { return mapping_broken(guard_); }

int Region::create(const RegionConfig& cfg, uint64_t key, uint64_t host, bool fence_free) {
  Layout l = plan_layout(cfg);

  struct statvfs vfs;
  if (statvfs(cfg.dir.c_str(), &vfs) == 0) {
    size_t avail = size_t(vfs.f_bavail) * vfs.f_bsize;
    if (avail < l.size) {
      PM_WARN(FI_LOG_EP_CTRL,
              "not enough space in %s for an endpoint region: need %zu bytes, %zu available; "
              "enlarge it (docker run --shm-size), lower FI_PMSHM_CHUNK_COUNT / FI_PMSHM_QUEUE_CELLS, "
              "or point FI_PMSHM_DIR at another tmpfs",
              cfg.dir.c_str(), size_t(l.size), avail);
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
  dir_ = cfg.dir;
  uid_ = uid;
  owner_ = true;
  creator_ = getpid();
  if (ftruncate(fd.get(), off_t(l.size)) != 0) {
    PM_WARN(FI_LOG_EP_CTRL, "cannot size %s to %zu bytes: %s", path.c_str(), size_t(l.size), strerror(errno));
    return -FI_ENOSPC;
  }
  void* base = mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return -FI_ENOMEM;
  base_ = base;
  size_ = l.size;
  layout_ = l;
  guard_ = guard_mapping(base_, size_);
  fd_ = std::move(fd);

  std::string wake = path + ".wake";
  if (mkfifo(wake.c_str(), 0600) != 0) {
    PM_WARN(FI_LOG_EP_CTRL, "cannot create %s: %s", wake.c_str(), strerror(errno));
    return -FI_EIO;
  }
  wake_.reset(::open(wake.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
  if (!wake_) return -FI_EIO;

  RegionHdr* h = new (base_) RegionHdr{};
  RegionInfo& i = h->info;
  i.version = kVersion;
  i.hdr_size = sizeof(RegionHdr);
  i.owner_pid = uint32_t(getpid());
  i.uid = uid;
  i.key = key;
  i.host = host;
  i.self_va = reinterpret_cast<uint64_t>(base_);
  i.probe = key ^ kProbeSalt;
  i.size = l.size;
  i.cells = l.cells;
  i.cell_size = kCellSize;
  i.cells_off = l.cells_off;
  i.chunks = l.chunks;
  i.chunk_size = l.chunk_size;
  i.states_off = l.states_off;
  i.chunks_off = l.chunks_off;
  i.intros_off = l.intros_off;
  i.intros = l.intros;
  i.fence_free = fence_free ? 1 : 0;
  // Cell k starts one lap back, published: free for position k.
  for (uint32_t k = 0; k < l.cells; k++)
    new (&cells()[k].seq) std::atomic<uint64_t>(seq_published(uint64_t(k) - l.cells));
  for (uint32_t k = 0; k < l.intros; k++) new (&intros()[k].state) std::atomic<uint64_t>(0);
  for (uint32_t k = 0; k < l.chunks; k++) new (&states()[k].busy) std::atomic<uint32_t>(0);
  h->head.store(0);
  h->sleeping.store(0);
  h->tail.store(0);
  info_ = i;
  info_.magic = kRegionMagic;
  track_ = track_owned(path_, states(), l.chunks);
  // The magic goes last: a peer that maps the region early sees 0 and retries.
  __atomic_store_n(&i.magic, kRegionMagic, __ATOMIC_RELEASE);
  return 0;
}

int Region::open(const std::string& dir, uint32_t uid, uint64_t key) {
  std::string path = region_path(dir, uid, key);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return errno == ENOENT ? -FI_ENOENT : -FI_EACCES;
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return -FI_EINVAL;
  if (size_t(st.st_size) < kHdrBytes) return -FI_ENOENT;  // being created (or bogus)
  void* base = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return -FI_ENOMEM;
  // Guarded before the first access: the file may shrink under us any time.
  base_ = base;
  size_ = size_t(st.st_size);
  guard_ = guard_mapping(base_, size_);
  auto* h = static_cast<RegionHdr*>(base);
  if (__atomic_load_n(&h->info.magic, __ATOMIC_ACQUIRE) == 0) {  // still being set up
    unmap();
    return -FI_ENOENT;
  }
  RegionInfo copy;
  memcpy(&copy, &h->info, sizeof copy);
  Layout l;
  if (broken() || !validate_layout(copy, uint64_t(st.st_size), &l) || copy.key != key) {
    unmap();
    return -FI_EINVAL;
  }
  info_ = copy;
  layout_ = l;
  fd_ = std::move(fd);
  path_ = path;
  dir_ = dir;
  uid_ = uid;
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

bool remove_if_abandoned(const std::string& dir, uint32_t uid, const std::string& path, uint64_t closing) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return false;
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  // A creator locks right after creating; an empty young file may be mid-creation.
  if (st.st_size == 0 && time(nullptr) - st.st_mtime < 10) return false;
  if (flock(fd.get(), LOCK_SH | LOCK_NB) != 0) return false;  // owner alive
  RegionInfo h;
  Layout l;
  if (pread(fd.get(), &h, sizeof h, 0) == ssize_t(sizeof h) && validate_layout(h, uint64_t(st.st_size), &l)) {
    // A chunk still busy for a live receiver: that receiver has not read it yet.
    std::vector<unsigned char> raw(size_t(l.chunks) * sizeof(ChunkState));
    if (pread(fd.get(), raw.data(), raw.size(), off_t(l.states_off)) != ssize_t(raw.size())) return false;
    for (uint32_t i = 0; i < l.chunks; i++) {
      uint32_t busy;
      uint64_t rx;
      memcpy(&busy, &raw[i * sizeof(ChunkState) + offsetof(ChunkState, busy)], sizeof busy);
      memcpy(&rx, &raw[i * sizeof(ChunkState) + offsetof(ChunkState, rx_key)], sizeof rx);
      if (busy && rx && rx != closing && lock_held(region_path(dir, uid, rx))) return false;
    }
  }
  unlink(path.c_str());
  unlink((path + ".wake").c_str());
  return true;
}

void cleanup_stale(const std::string& dir, uint32_t uid) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "pmshm_%u_", uid);
  std::vector<std::string> found;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix, size_t(plen)) != 0) continue;
    if (strlen(e->d_name) != size_t(plen) + 16) continue;  // the ".wake" FIFOs go with their region
    found.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  for (const std::string& path : found)
    if (remove_if_abandoned(dir, uid, path, 0))
      PM_INFO(FI_LOG_EP_CTRL, "removed stale region %s of a dead endpoint", path.c_str());
}

}  // namespace pm::shm
