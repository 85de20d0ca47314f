#include "shm_signals.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace pm::shm {

// Everything the handlers read lives in fixed tables: no heap, no locks.
// A slot is claimed (kClaimed), filled, then published (kUsed); handlers
// only read published slots.
namespace {
enum : uint32_t { kFree, kClaimed, kUsed };

// --- mappings protected from SIGBUS -----------------------------------------
constexpr int kMaxGuarded = 4096;
struct Guarded {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> broken;
  std::atomic<uintptr_t> base;
  std::atomic<size_t> len;
};
Guarded g_guarded[kMaxGuarded];
std::atomic<int> g_guarded_hw{0};  // slots at and above are free
uintptr_t g_page = 4096;

// --- regions this process owns ------------------------------------------------
constexpr int kMaxOwned = 64;
constexpr int kPathMax = 256;
struct Owned {
  std::atomic<uint32_t> state;
  pid_t pid;                  // the creator: a forked child never unlinks them
  const ChunkState* states;
  uint32_t chunks;
  char path[kPathMax];
};
Owned g_owned[kMaxOwned];

// --- fatal signals --------------------------------------------------------------
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr size_t kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);
struct sigaction g_prev[kNumSignals];
bool g_installed[kNumSignals];
std::once_flag g_once;

bool chunks_busy(const Owned& o) noexcept {
  for (uint32_t i = 0; i < o.chunks; i++)
    if (o.states[i].busy.load(std::memory_order_acquire)) return true;
  return false;
}

// Unlinks the files of this process's regions, but not those of a region
// whose chunks still wait for a receiver (they go once consumed).
void unlink_owned() noexcept {
  char wake[kPathMax + 8];
  pid_t self = getpid();
  for (Owned& o : g_owned) {
    if (o.state.load(std::memory_order_acquire) != kUsed || o.pid != self) continue;
    if (chunks_busy(o)) continue;
    unlink(o.path);
    size_t n = strnlen(o.path, kPathMax);
    memcpy(wake, o.path, n);
    memcpy(wake + n, ".wake", 6);
    unlink(wake);
  }
}

void at_exit() { unlink_owned(); }

bool fault_code(int sig, const siginfo_t* info) {
  return (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL) && info && info->si_code > 0;
}

void restore_default(int sig) noexcept {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

// The signal as if we had never been there.
void chain(size_t i, int sig, siginfo_t* info, void* uc) noexcept {
  const struct sigaction& p = g_prev[i];
  if (p.sa_flags & SA_SIGINFO) {
    if (p.sa_sigaction) {
      p.sa_sigaction(sig, info, uc);
      return;
    }
  } else if (p.sa_handler == SIG_IGN) {
    // Only SIGBUS is installed over SIG_IGN; a fault cannot be ignored:
    // the kernel would kill, so return to the fault with the default.
    if (fault_code(sig, info)) restore_default(sig);
    return;
  } else if (p.sa_handler != SIG_DFL && p.sa_handler) {
    p.sa_handler(sig);
    return;
  }
  // Default: every signal here terminates the process.
  unlink_owned();
  restore_default(sig);
  if (!fault_code(sig, info)) raise(sig);  // delivered when we return
  // a fault happens again on return, now with the default action
}

void on_signal(int sig, siginfo_t* info, void* uc) {
  int saved = errno;
  for (size_t i = 0; i < kNumSignals; i++)
    if (kSignals[i] == sig) {
      chain(i, sig, info, uc);
      break;
    }
  errno = saved;
}

// A SIGBUS inside a region: the file was truncated under the mapping. Zero
// pages from the faulting page to the end of the mapping let the access
// complete; the owner of the mapping sees it broken and fails the peer.
bool repair_mapping(const siginfo_t* info) noexcept {
  if (!info || info->si_code <= 0) return false;  // sent by kill(), not a fault
  uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  int hw = g_guarded_hw.load(std::memory_order_acquire);
  for (int i = 0; i < hw; i++) {
    Guarded& g = g_guarded[i];
    if (g.state.load(std::memory_order_acquire) != kUsed) continue;
    uintptr_t base = g.base.load(std::memory_order_relaxed);
    size_t len = g.len.load(std::memory_order_relaxed);
    if (a < base || a - base >= len) continue;
    uintptr_t page = a & ~(g_page - 1);
    void* r = mmap(reinterpret_cast<void*>(page), base + len - page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r == MAP_FAILED) return false;
    g.broken.store(1, std::memory_order_release);
    return true;
  }
  return false;
}

void on_sigbus(int sig, siginfo_t* info, void* uc) {
  int saved = errno;
  if (!repair_mapping(info)) on_signal(sig, info, uc);
  errno = saved;
}

void install() {
  long pg = sysconf(_SC_PAGESIZE);
  if (pg > 0) g_page = uintptr_t(pg);
  atexit(at_exit);
  for (size_t i = 0; i < kNumSignals; i++) {
    int sig = kSignals[i];
    if (sigaction(sig, nullptr, &g_prev[i]) != 0) continue;
    bool ignored = !(g_prev[i].sa_flags & SA_SIGINFO) && g_prev[i].sa_handler == SIG_IGN;
    if (ignored && sig != SIGBUS) continue;  // nohup, background jobs: leave them alone
    struct sigaction sa {};
    sa.sa_sigaction = sig == SIGBUS ? on_sigbus : on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    g_installed[i] = sigaction(sig, &sa, nullptr) == 0;
  }
}

void install_once() { std::call_once(g_once, install); }

// The DSO is unloaded (libfabric's fi_fini, also at exit): handlers that
// are still ours go back to what they replaced, so no signal jumps into
// unmapped code.
struct Uninstall {
  ~Uninstall() {
    for (size_t i = 0; i < kNumSignals; i++) {
      struct sigaction cur {};
      if (!g_installed[i] || sigaction(kSignals[i], nullptr, &cur) != 0) continue;
      if ((cur.sa_flags & SA_SIGINFO) && (cur.sa_sigaction == on_signal || cur.sa_sigaction == on_sigbus))
        sigaction(kSignals[i], &g_prev[i], nullptr);
    }
  }
} g_uninstall;
}  // namespace

int guard_mapping(void* base, size_t len) noexcept {
  install_once();
  for (int i = 0; i < kMaxGuarded; i++) {
    uint32_t f = kFree;
    if (!g_guarded[i].state.compare_exchange_strong(f, kClaimed)) continue;
    g_guarded[i].broken.store(0, std::memory_order_relaxed);
    g_guarded[i].base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
    g_guarded[i].len.store(len, std::memory_order_relaxed);
    int hw = g_guarded_hw.load();
    while (hw < i + 1 && !g_guarded_hw.compare_exchange_weak(hw, i + 1)) {
    }
    g_guarded[i].state.store(kUsed, std::memory_order_release);
    return i;
  }
  return -1;
}

void unguard_mapping(int id) noexcept {
  if (id >= 0 && id < kMaxGuarded) g_guarded[id].state.store(kFree, std::memory_order_release);
}

bool mapping_broken(int id) noexcept {
  return id >= 0 && id < kMaxGuarded && g_guarded[id].broken.load(std::memory_order_acquire);
}

int track_owned(const std::string& path, const ChunkState* states, uint32_t chunks) noexcept {
  install_once();
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kMaxOwned; i++) {
    uint32_t f = kFree;
    if (!g_owned[i].state.compare_exchange_strong(f, kClaimed)) continue;
    Owned& o = g_owned[i];
    o.pid = getpid();
    o.states = states;
    o.chunks = chunks;
    memcpy(o.path, path.c_str(), path.size() + 1);
    o.state.store(kUsed, std::memory_order_release);
    return i;
  }
  return -1;
}

void untrack_owned(int id) noexcept {
  if (id >= 0 && id < kMaxOwned) g_owned[id].state.store(kFree, std::memory_order_release);
}

}  // namespace pm::shm
