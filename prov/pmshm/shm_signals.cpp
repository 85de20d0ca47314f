#include "shm_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
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

constexpr int kMaxOwned = 64;
constexpr int kPathMax = 256;
struct Owned {
  std::atomic<uint32_t> state;
  const ChunkState* states;
  uint32_t chunks;
  char path[kPathMax];
};
Owned g_owned[kMaxOwned];

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr size_t kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);
struct sigaction g_prev[kNumSignals];
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
  for (Owned& o : g_owned) {
    if (o.state.load(std::memory_order_acquire) != kUsed) continue;
    if (chunks_busy(o)) continue;
    unlink(o.path);
    size_t n = strnlen(o.path, kPathMax);
    memcpy(wake, o.path, n);
    memcpy(wake + n, ".wake", 6);
    unlink(wake);
  }
}

void at_exit() { unlink_owned(); }

// Unlinks our regions, then hands the signal to whoever had it before us.
void on_signal(int sig, siginfo_t* info, void* uc) {
  unlink_owned();
  for (size_t i = 0; i < kNumSignals; i++) {
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

void install() {
  atexit(at_exit);
  for (size_t i = 0; i < kNumSignals; i++) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, &g_prev[i]);
  }
}
}  // namespace

int track_owned(const std::string& path, const ChunkState* states, uint32_t chunks) noexcept {
  std::call_once(g_once, install);
  if (path.size() >= kPathMax) return -1;
  for (int i = 0; i < kMaxOwned; i++) {
    uint32_t f = kFree;
    if (!g_owned[i].state.compare_exchange_strong(f, kClaimed)) continue;
    Owned& o = g_owned[i];
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
