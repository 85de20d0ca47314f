#include "core/live_stats.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>

#include "base/clock.hpp"
#include "base/log.hpp"

namespace pm {
namespace {

constexpr uint64_t kPeriodNs = 100000000ull;

uint64_t real_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void copy_str(char* dst, size_t cap, std::string_view s) {
  size_t n = std::min(s.size(), cap - 1);
  memcpy(dst, s.data(), n);
  dst[n] = 0;
}

// Decimal digits only (at most 20; a value past 2^64-1 saturates).
bool numeric(std::string_view v, uint64_t* out) {
  if (v.empty() || v.size() > 20) return false;
  uint64_t x = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
    unsigned d = unsigned(c - '0');
    x = x > (UINT64_MAX - d) / 10 ? UINT64_MAX : x * 10 + d;
  }
  *out = x;
  return true;
}

// The words of a line, separated by white space.
constexpr const char* kSpace = " \t\r\v\f";
struct Words {
  std::string_view rest;
  bool next(std::string_view* w) {
    size_t b = rest.find_first_not_of(kSpace);
    if (b == std::string_view::npos) return false;
    size_t e = std::min(rest.find_first_of(kSpace, b), rest.size());
    *w = rest.substr(b, e - b);
    rest.remove_prefix(e);
    return true;
  }
};

// Appends the counter "<a>.<b>.<name>" (empty parts left out; the name cut
// at PMSTAT_NAME_LEN - 1) unless the array is full.
void add(pmstat_counter* arr, uint32_t* n, uint32_t cap, std::string_view a, std::string_view b,
         std::string_view name, uint64_t v) {
  if (*n >= cap) return;
  char* dst = arr[*n].name;
  size_t len = 0;
  for (std::string_view part : {a, b, name}) {
    if (part.empty()) continue;
    if (len && len < PMSTAT_NAME_LEN - 1) dst[len++] = '.';
    size_t k = std::min(part.size(), PMSTAT_NAME_LEN - 1 - len);
    memcpy(dst + len, part.data(), k);
    len += k;
  }
  dst[len] = 0;
  arr[*n].value = v;
  (*n)++;
}

// Whether path names the file open on fd.
bool same_file(int fd, const char* path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

// Pages our dead processes left (same user; nobody holds the page's lock,
// pmstat.h): removed once per process, when its first page is made. Not by
// pid: in another PID namespace (runfabtests runs in one) every pid of this
// one looks gone, and a live process's page was removed. Also the hidden
// names pages are made under (LiveStats::create), left when a process died
// before its rename: only when older than kHiddenAgeS, since a page being
// made is unlocked for a moment. The rule and its checks (owner, type,
// links, the lock held across the removal): pmstat_remove_orphaned.
constexpr time_t kHiddenAgeS = 60;
constexpr unsigned kMaxReaped = 1024;

void reap_stale(uid_t uid) {
  DIR* d = opendir(PMSTAT_DIR);
  if (!d) return;
  const std::string mine = std::string(PMSTAT_PREFIX) + std::to_string(uid) + "-";
  const time_t young = time(nullptr) - kHiddenAgeS;
  unsigned reaped = 0;
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    const bool hidden = !n.empty() && n[0] == '.';
    if (hidden) n.remove_prefix(1);
    if (n.compare(0, mine.size(), mine) != 0) continue;
    if (pmstat_remove_orphaned(dirfd(d), e->d_name, long(uid), hidden ? young : 0) == 1 && ++reaped >= kMaxReaped)
      break;
  }
  closedir(d);
}

}  // namespace

void parse_stats_text(std::string_view text, pmstat_page* page) {
  page->address[0] = 0;
  page->wire[0] = 0;
  page->ncounters = 0;
  page->npeers = 0;
  page->peers_total = 0;
  while (!text.empty()) {
    size_t nl = std::min(text.find('\n'), text.size());
    std::string_view t = text.substr(0, nl);
    text.remove_prefix(std::min(nl + 1, text.size()));
    size_t b = t.find_first_not_of(kSpace);
    if (b == std::string_view::npos) continue;
    t.remove_prefix(b);
    if (t.substr(0, 5) == "peer ") {
      page->peers_total++;
      size_t colon = t.find(": ");
      if (page->npeers >= PMSTAT_MAX_PEERS || colon == std::string_view::npos) continue;
      pmstat_peer& p = page->peers[page->npeers++];
      copy_str(p.address, PMSTAT_TEXT_LEN, t.substr(5, colon - 5));
      p.nfields = 0;
      Words toks{t.substr(colon + 2)};
      for (std::string_view tok; toks.next(&tok);) {
        size_t eq = tok.find('=');
        uint64_t v;
        if (eq != std::string_view::npos && numeric(tok.substr(eq + 1), &v))
          add(p.fields, &p.nfields, PMSTAT_MAX_PEER_FIELDS, {}, {}, tok.substr(0, eq), v);
      }
      continue;
    }
    Words toks{t};
    std::string_view tok, section, sub;
    bool first = true;
    while (toks.next(&tok)) {
      if (tok.back() == ';') tok.remove_suffix(1);
      if (tok.empty()) continue;
      if (tok.back() == ':') {
        std::string_view name = tok.substr(0, tok.size() - 1);
        if (first) section = name;  // "shm:", "eth:", "composite:", "endpoint:"
        else sub = name;            // "rail0:", "drops:"
        first = false;
        continue;
      }
      bool was_first = first;
      first = false;
      size_t eq = tok.find('=');
      uint64_t v;
      if (tok.find("://") != std::string_view::npos) {
        // A device's line without a section (pmshm's, pmeth's without the
        // composite): the scheme names it, as the composite's sections do.
        if (was_first && section.empty()) section = tok.substr(0, 8) == "pmshm://" ? "shm" : "eth";
        // A name (pmeth's own over its shm device's; "...;shm=..." is part of it).
        if (!page->address[0] || (tok.substr(0, 8) == "pmeth://" && strncmp(page->address, "pmeth://", 8) != 0))
          copy_str(page->address, PMSTAT_TEXT_LEN, tok);
        continue;
      }
      if (eq == std::string_view::npos) {
        if (tok == "up" || tok == "down") {
          add(page->counters, &page->ncounters, PMSTAT_MAX_COUNTERS, section, sub, "up", tok == "up");
        } else if (numeric(tok, &v) && section == "composite") {
          // "composite: N peers through shared memory, M through Ethernet"
          bool shm = false;
          std::string_view w;
          for (int i = 0; i < 3 && toks.next(&w); i++) shm |= w == "shared";
          add(page->counters, &page->ncounters, PMSTAT_MAX_COUNTERS, section, sub, shm ? "shm_peers" : "eth_peers", v);
        }
        continue;
      }
      std::string_view k = tok.substr(0, eq), val = tok.substr(eq + 1);
      if (numeric(val, &v)) add(page->counters, &page->ncounters, PMSTAT_MAX_COUNTERS, section, sub, k, v);
      else if (k == "wire" && !page->wire[0]) copy_str(page->wire, sizeof page->wire, val);
    }
  }
}

std::unique_ptr<LiveStats> LiveStats::create(const char* provider) {
  static std::once_flag reaped;
  static std::atomic<unsigned> seq{0};
  uid_t uid = getuid();
  std::call_once(reaped, [uid] { reap_stale(uid); });
  std::unique_ptr<LiveStats> ls(new LiveStats);
  const std::string name = std::string(PMSTAT_PREFIX) + std::to_string(uid) + "-" + std::to_string(getpid()) + "-" +
                           std::to_string(seq.fetch_add(1));
  ls->path_ = std::string(PMSTAT_DIR) + "/" + name;
  // Made and locked under a name no reader or reaper looks at, then renamed:
  // the page is never seen without its owner's lock (nor half written).
  const std::string tmp = std::string(PMSTAT_DIR) + "/." + name;
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    PM_INFO(FI_LOG_EP_CTRL, "no live statistics: %s: %s", tmp.c_str(), strerror(errno));
    return nullptr;
  }
  void* m = MAP_FAILED;
  // Once locked, the hidden name is still ours only if no reaper took it
  // (this process stopped for over a minute) and another made it anew.
  bool ours = false;
  int e = 0;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0) e = errno;
  else if (!(ours = same_file(fd, tmp.c_str()))) e = EEXIST;
  else if (ftruncate(fd, sizeof(pmstat_page)) != 0) e = errno;
  else if ((m = mmap(nullptr, sizeof(pmstat_page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) e = errno;
  if (m == MAP_FAILED) {
    if (ours) unlink(tmp.c_str());
    close(fd);
    PM_INFO(FI_LOG_EP_CTRL, "no live statistics: %s: %s", tmp.c_str(), strerror(e));
    return nullptr;
  }
  ls->fd_ = fd;
  ls->page_ = static_cast<pmstat_page*>(m);
  pmstat_page* p = ls->page_;
  p->size = sizeof(pmstat_page);
  p->pid = int32_t(getpid());
  p->uid = uint32_t(uid);
  p->start_ns = real_ns();
  copy_str(p->provider, sizeof p->provider, provider ? provider : "?");
  p->version = PMSTAT_VERSION;
  __atomic_store_n(&p->magic, PMSTAT_MAGIC, __ATOMIC_RELEASE);
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, ls->path_.c_str(), RENAME_NOREPLACE) != 0) {
    PM_INFO(FI_LOG_EP_CTRL, "no live statistics: %s: %s", ls->path_.c_str(), strerror(errno));
    unlink(tmp.c_str());
    munmap(ls->page_, sizeof(pmstat_page));
    ls->page_ = nullptr;  // path_ is another's page (or none): the destructor must not remove it
    return nullptr;       // (and closes fd_)
  }
  return ls;
}

LiveStats::~LiveStats() {
  if (page_) {
    if (same_file(fd_, path_.c_str())) unlink(path_.c_str());  // not a page that took the name since
    munmap(page_, sizeof(pmstat_page));
  }
  if (fd_ >= 0) close(fd_);
}

bool LiveStats::due() noexcept {
  uint64_t now = coarse_ns();
  if (now < next_ns_) return false;
  next_ns_ = now + kPeriodNs;
  return true;
}

void LiveStats::publish(std::string_view text) {
  pmstat_page* p = page_;
  __atomic_store_n(&p->seq, p->seq + 1, __ATOMIC_RELAXED);  // odd: writing
  __atomic_thread_fence(__ATOMIC_RELEASE);
  parse_stats_text(text, p);
  p->update_ns = real_ns();
  p->updates++;
  __atomic_store_n(&p->seq, p->seq + 1, __ATOMIC_RELEASE);  // even: consistent
}

}  // namespace pm
