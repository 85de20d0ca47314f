#include "shm_device.hpp"

#include <linux/membarrier.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <memory>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"
#include "shm_proc.hpp"

namespace pm::shm {

namespace {
uint64_t random_key() {
  uint64_t k = 0;
  while (k == 0 || is_service_key(k))
    if (getrandom(&k, sizeof k, 0) != sizeof k) k = now_ns() ^ (uint64_t(getpid()) << 32);
  return k;
}

// CMA on ourselves: process_vm_readv must be allowed at all (seccomp, caps).
bool cma_self_probe() {
  uint64_t src = 0x1234567890abcdefull, dst = 0;
  iovec l{&dst, sizeof dst}, r{&src, sizeof src};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == sizeof dst && dst == src;
}

}  // namespace

std::unique_ptr<ShmDevice> ShmDevice::open(const DeviceConfig& cfg, uint64_t host, int* err, uint64_t key) {
  std::unique_ptr<ShmDevice> d(new ShmDevice(cfg));
  uint32_t uid = getuid();
  cleanup_stale(cfg.region.dir, uid);
  if (!is_service_key(key)) key = random_key();
  // Registered processes can be fenced by a sleeping owner (see send());
  // registration is per process, so it is done once.
  static const bool registered =
      syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  d->fence_free_ = registered;
  if (int rc = d->own_.create(cfg.region, key, host, d->fence_free_)) {
    *err = rc;
    return nullptr;
  }
  d->name_ = ShmName{kNameMagic, kVersion, 0, uid, is_service_key(key) ? 0 : uint32_t(getpid()), key, host};
  d->mask_ = cfg.region.cells - 1;
  d->cma_self_ = cfg.cma != CmaPolicy::kOff && cma_self_probe();
  if (cfg.cma != CmaPolicy::kOff && !d->cma_self_)
    PM_WARN(FI_LOG_EP_CTRL,
            "process_vm_readv (CMA) is not permitted here (seccomp or missing CAP_SYS_PTRACE); "
            "large messages use the bounce-buffer path");
  // auto: each rendezvous of 64 KiB or more is timed, and the faster path
  // per size class is taken from then on (CopyChoice).
  d->cma_learn_ = d->cma_self_ && cfg.cma == CmaPolicy::kAuto;
  return d;
}

ShmDevice::~ShmDevice() {
  // Regions of peers that are gone: ours is the last look at them. Chunks
  // they left for us that we did not consume never will be.
  for (Peer& p : peers_)
    if (p.region.mapped() && (p.dead || !p.region.owner_alive())) {
      std::string path = p.region.path();
      p.region = Region();
      remove_if_abandoned(cfg_.region.dir, p.name.uid, path, name_.key);
    }
}

void ShmDevice::set_alias(const void* name, size_t len) noexcept {
  alias_len_ = uint8_t(std::min(len, kAliasMax));
  memcpy(alias_, name, alias_len_);
  RegionInfo& h = own_.hdr()->info;
  h.alias_len = alias_len_;
  memcpy(h.alias, alias_, alias_len_);
}

// From its introduction, else from its region (as validated when mapped).
bool ShmDevice::peer_alias(PeerId peer, const void** name, size_t* len) noexcept {
  if (peer >= peers_.size()) return false;
  Peer& p = peers_[peer];
  if (!p.alias_len) {
    if (!p.region.mapped() && map_peer(p) != 0) return false;
    const RegionInfo& h = p.region.info();
    if (!h.alias_len) return false;
    p.alias_len = uint8_t(h.alias_len);
    memcpy(p.alias, h.alias, p.alias_len);
  }
  *name = p.alias;
  *len = p.alias_len;
  return true;
}

bool ShmDevice::valid_name(const void* name, size_t len) {
  if (len != sizeof(ShmName)) return false;
  ShmName n;
  memcpy(&n, name, sizeof n);
  return n.magic == kNameMagic && n.version == kVersion && n.key != 0;
}

std::string ShmDevice::format_name(const ShmName& n) {
  char buf[96];
  return std::string(buf, format_name(n, buf));
}

size_t ShmDevice::format_name(const ShmName& n, char (&buf)[96]) {
  int k = snprintf(buf, sizeof buf, "pmshm://%u/%016llx@%016llx", n.uid, (unsigned long long)n.key,
                   (unsigned long long)n.host);
  return size_t(std::clamp(k, 0, int(sizeof buf) - 1));
}

std::string ShmDevice::name_str(const void* name, size_t len) const {
  if (!valid_name(name, len)) return "";
  ShmName n;
  memcpy(&n, name, sizeof n);
  return format_name(n);
}

PeerId ShmDevice::resolve(const void* name, size_t len) noexcept {
  if (!valid_name(name, len)) return kNoPeer;
  ShmName n;
  memcpy(&n, name, sizeof n);
  auto it = by_key_.find(n.key);
  if (it != by_key_.end()) return it->second;
  try {
    PeerId id = PeerId(peers_.size());
    peers_.emplace_back();
    peers_.back().name = n;
    by_key_.emplace(n.key, id);
    return id;
  } catch (...) {
    return kNoPeer;
  }
}

const void* ShmDevice::peer_name(PeerId peer, size_t* len) const noexcept {
  if (peer >= peers_.size()) return nullptr;
  *len = sizeof(ShmName);
  return &peers_[peer].name;
}

// A packet is processed once the receiver's published head passed it: the
// receiver publishes head only after handling a batch.
uint64_t ShmDevice::tx_ticket(PeerId peer) const noexcept {
  return peer < peers_.size() ? peers_[peer].last_pos : 0;
}

int ShmDevice::tx_state(PeerId peer, uint64_t ticket) noexcept {
  if (peer >= peers_.size()) return -FI_EINVAL;
  Peer& p = peers_[peer];
  if (p.dead) return -FI_ECONNRESET;
  if (!p.region.mapped()) return ticket == 0 ? 1 : -FI_ECONNRESET;
  if (p.head_cache >= ticket) return 1;
  p.head_cache = p.region.hdr()->head.load(std::memory_order_acquire);
  return p.head_cache >= ticket ? 1 : 0;
}

// Single copy targets a process the kernel vouches for: the one holding
// the region's owner lock (/proc/locks), pinned by a pidfd, and able to
// show the region's probe word at the address the region names. The pid a
// region header claims is never used for it.
bool ShmDevice::verify_cma(Peer& p) noexcept {
  if (p.cma != Peer::kUnknown) return p.cma == Peer::kYes && !p.dead;
  if (p.dead) return false;
  if (!p.region.mapped() && map_peer(p) != 0) return false;  // maybe later
  int pid = flock_owner_pid(p.region.fd());
  UniqueFd pidfd(open_pidfd(pid));
  // Still the lock holder once pinned: the pidfd is the owner's.
  bool ok = pid > 0 && pidfd && flock_owner_pid(p.region.fd()) == pid;
  if (ok) {
    uint64_t v = 0;
    iovec l{&v, sizeof v};
    iovec r{reinterpret_cast<void*>(p.region.info().self_va + offsetof(RegionInfo, probe)), sizeof v};
    ok = process_vm_readv(pid_t(pid), &l, 1, &r, 1, 0) == sizeof v && v == (p.name.key ^ kProbeSalt) &&
         pidfd_alive(pidfd.get());
  }
  p.cma = ok ? Peer::kYes : Peer::kNo;
  if (ok) {
    p.cma_pid = pid;
    p.pidfd = std::move(pidfd);
  } else {
    PM_INFO(FI_LOG_EP_DATA, "single copy (CMA) to %s not possible; using bounce buffers",
            format_name(p.name).c_str());
  }
  return ok;
}

CmaFault parse_cma_fault(const std::string& s) {
  if (s == "read") return CmaFault::kRead;
  if (s == "write") return CmaFault::kWrite;
  if (!s.empty()) PM_WARN(FI_LOG_EP_CTRL, "CMA_FAULT=%s is neither read nor write: ignored", s.c_str());
  return CmaFault::kNone;
}

bool ShmDevice::can_read_remote(PeerId peer) noexcept {
  return cma_self_ && peer < peers_.size() && verify_cma(peers_[peer]);
}

bool ShmDevice::prefer_read_remote(PeerId peer, size_t len) noexcept {
  if (!can_read_remote(peer)) return false;
  return !cma_learn_ || choice_.prefer_single(len, now_ns());
}

void ShmDevice::note_transfer(PeerId, bool single, size_t len) noexcept {
  if (cma_learn_ && choice_.note(single, len, now_ns()))
    PM_INFO(FI_LOG_EP_DATA, "large messages, measured here: %s", choice_.describe().c_str());
}

// The verified process, checked alive before the copy (its pid cannot have
// been reused then) and after a read (the bytes came from it).
ssize_t ShmDevice::read_remote(PeerId peer, const struct iovec* local, size_t lcnt,
                               const struct iovec* remote, size_t rcnt) noexcept {
  if (peer >= peers_.size()) return -FI_EINVAL;
  Peer& p = peers_[peer];
  if (!verify_cma(p) || !pidfd_alive(p.pidfd.get())) return -FI_ECONNRESET;
  if (cfg_.cma_fault == CmaFault::kRead) return -FI_EPERM;
  ssize_t n = process_vm_readv(pid_t(p.cma_pid), local, lcnt, remote, rcnt, 0);
  if (n < 0) return -errno;
  if (!pidfd_alive(p.pidfd.get())) return -FI_ECONNRESET;
  st_.cma_reads++;
  st_.cma_bytes += uint64_t(n);
  return n;
}

ssize_t ShmDevice::write_remote(PeerId peer, const struct iovec* local, size_t lcnt,
                                const struct iovec* remote, size_t rcnt) noexcept {
  if (peer >= peers_.size()) return -FI_EINVAL;
  Peer& p = peers_[peer];
  if (!verify_cma(p) || !pidfd_alive(p.pidfd.get())) return -FI_ECONNRESET;
  if (cfg_.cma_fault == CmaFault::kWrite) return -FI_EPERM;
  ssize_t n = process_vm_writev(pid_t(p.cma_pid), local, lcnt, remote, rcnt, 0);
  if (n < 0) return -errno;
  st_.cma_reads++;
  st_.cma_bytes += uint64_t(n);
  return n;
}

// A dead peer takes no more packets, but what it published before stays
// ours to deliver: its region stays mapped, and its files stay until its
// chunks are consumed.
void ShmDevice::found_dead(Peer& p, const char* why) noexcept {
  if (p.dead) return;
  p.dead = true;
  p.dead_tail = own_.hdr()->tail.load(std::memory_order_acquire);
  p.cma = Peer::kNo;
  p.pidfd.reset();
  PM_WARN(FI_LOG_EP_DATA, "peer %s %s", format_name(p.name).c_str(), why);
  p.files_left = p.region.mapped() && !remove_if_abandoned(cfg_.region.dir, p.name.uid, p.region.path(), 0);
}

// To the core a dead peer stays alive until our head has passed every
// position claimed before we found it dead: its last packets (the end of
// a message whose send completed) are delivered before its operations fail.
bool ShmDevice::peer_alive(PeerId peer) noexcept {
  if (own_broken_ || peer >= peers_.size()) return false;
  Peer& p = peers_[peer];
  if (!p.dead) {
    if (!p.region.mapped()) {
      int rc = map_peer(p);
      if (rc == -FI_EAGAIN) return true;  // still within the connect timeout
      if (rc && !p.dead) return false;
    }
    if (!p.dead) {
      if (p.region.broken()) found_dead(p, "has a truncated region (another process shrank its file)");
      else if (p.region.owner_alive()) return true;
      else found_dead(p, "died");
    }
  }
  if (head_ < p.dead_tail) return true;
  if (p.files_left)  // kept for chunks it left us, consumed by now
    p.files_left = !remove_if_abandoned(cfg_.region.dir, p.name.uid, p.region.path(), 0);
  return false;
}

void ShmDevice::arm_wait(bool armed) noexcept {
  own_.hdr()->sleeping.store(armed ? 1 : 0, std::memory_order_seq_cst);
  // Senders read `sleeping` without a fence: make every registered process
  // pass a full barrier, so a packet published before it is visible to the
  // caller's next poll, and a packet published after it sees the flag.
  if (armed && fence_free_) syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
}

void ShmDevice::drain_wait() noexcept {
  char buf[256];
  while (::read(own_.wake_fd(), buf, sizeof buf) > 0) {
  }
}

void ShmDevice::append_stats(std::string& out, size_t) const {
  char name[96], buf[512];
  format_name(name_, name);
  int n = snprintf(buf, sizeof buf,
           "%s tx_pkts=%llu inline=%llu chunk=%llu rx_pkts=%llu cma_reads=%llu cma_bytes=%llu "
           "queue_full=%llu no_chunk=%llu wakes=%llu dropped=%llu held=%llu skipped=%llu intro_full=%llu "
           "broken=%d region_bytes=%zu rndv_single=%llu rndv_copy=%llu",
           name, (unsigned long long)st_.tx_pkts,
           (unsigned long long)st_.tx_inline, (unsigned long long)st_.tx_chunk,
           (unsigned long long)st_.rx_pkts, (unsigned long long)st_.cma_reads,
           (unsigned long long)st_.cma_bytes, (unsigned long long)st_.full_queue,
           (unsigned long long)st_.no_chunk, (unsigned long long)st_.wakes,
           (unsigned long long)st_.dropped, (unsigned long long)st_.held, (unsigned long long)st_.skipped,
           (unsigned long long)st_.intro_full, own_broken_ ? 1 : 0, own_.size(),
           (unsigned long long)choice_.singles(), (unsigned long long)choice_.copies());
  out.append(buf, size_t(std::clamp(n, 0, int(sizeof buf) - 1)));
}

}  // namespace pm::shm
