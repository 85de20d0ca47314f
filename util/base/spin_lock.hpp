// The domain lock: uncontended, lock is one atomic exchange and unlock one
// release store (a pthread mutex pays a second atomic operation and two
// calls on every libfabric call). Contended, it spins briefly, then yields.
// Meets Lockable, so std::lock_guard / std::unique_lock work with it.
#pragma once

#include <sched.h>

#include <atomic>

namespace pm {

class SpinLock {
 public:
  void lock() noexcept {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  bool try_lock() noexcept {
    return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  void lock_slow() noexcept {
    for (unsigned i = 0;; i++) {
      if (try_lock()) return;
      if (i < 100) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        sched_yield();
      }
    }
  }
  std::atomic<bool> flag_{false};
};

}  // namespace pm
