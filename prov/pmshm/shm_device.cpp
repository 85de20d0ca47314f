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

// Is one kernel copy (CMA) worth it against the pipelined bounce path,
// whose two copies run on the two processes' cores at once? Times 1 MiB
// both ways, once per process; on virtual machines page pinning often
// makes CMA several times slower than memcpy.
bool cma_pays_off() {
  static const bool pays = [] {
    constexpr size_t kLen = 1 << 20;
    std::unique_ptr<char[]> a(new char[kLen]), b(new char[kLen]);
    memset(a.get(), 1, kLen);
    memset(b.get(), 2, kLen);
    uint64_t best_cma = UINT64_MAX, best_cpy = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
      uint64_t t0 = now_ns();
      iovec l{b.get(), kLen}, r{a.get(), kLen};
      if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != ssize_t(kLen)) return false;
      uint64_t t1 = now_ns();
      memcpy(b.get(), a.get(), kLen);
      asm volatile("" ::"r"(b.get()) : "memory");
      uint64_t t2 = now_ns();
      best_cma = std::min(best_cma, t1 - t0);
      best_cpy = std::min(best_cpy, t2 - t1);
    }
    bool ok = best_cma <= 2 * best_cpy;
    PM_INFO(FI_LOG_EP_CTRL, "1 MiB: CMA %.1f GB/s, memcpy %.1f GB/s: %s", double(kLen) / double(best_cma),
            double(kLen) / double(best_cpy),
            ok ? "rendezvous uses single copy" : "rendezvous uses the pipelined bounce path");
    return ok;
  }();
  return pays;
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
  if (d->cma_self_ && cfg.cma == CmaPolicy::kAuto) d->cma_self_ = cma_pays_off();
  return d;
}

void ShmDevice::set_alias(const void* name, size_t len) noexcept {
  RegionHdr* h = own_.hdr();
  h->alias_len = uint32_t(std::min(len, kAliasMax));
  memcpy(h->alias, name, h->alias_len);
}

bool ShmDevice::peer_alias(PeerId peer, const void** name, size_t* len) noexcept {
  if (peer >= peers_.size() || map_peer(peers_[peer]) != 0) return false;
  const RegionHdr* h = peers_[peer].region.hdr();
  if (!h->alias_len || h->alias_len > kAliasMax) return false;
  *name = h->alias;
  *len = h->alias_len;
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
  snprintf(buf, sizeof buf, "pmshm://%u/%016llx@%016llx", n.uid, (unsigned long long)n.key,
           (unsigned long long)n.host);
  return buf;
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

int ShmDevice::map_peer(Peer& p) noexcept {
  if (p.region.mapped()) return 0;
  if (p.dead) return -FI_ECONNRESET;
  if (p.failed) return -FI_EHOSTUNREACH;
  int rc = p.region.open(cfg_.region.dir, p.name.uid, p.name.key);
  if (rc == 0) {
    // The key found a region: it must be the endpoint the name describes.
    const RegionHdr* h = p.region.hdr();
    if ((h->owner_pid == p.name.pid || (p.name.pid == 0 && is_service_key(p.name.key))) &&
        h->host == p.name.host && h->uid == p.name.uid)
      return 0;
    p.region = Region();
    rc = -FI_EINVAL;
  }
  uint64_t now = now_ns();
  if (!p.first_try_ns) p.first_try_ns = now;
  if (rc == -FI_ENOENT && now - p.first_try_ns < uint64_t(cfg_.connect_timeout_ms) * 1000000ull)
    return -FI_EAGAIN;
  p.failed = true;
  PM_WARN(FI_LOG_EP_DATA, "no endpoint %s: its region %s cannot be opened (%s)",
          format_name(p.name).c_str(), region_path(cfg_.region.dir, p.name.uid, p.name.key).c_str(),
          fi_strerror(-rc));
  return -FI_EHOSTUNREACH;
}

// A sender seen for the first time: its name is rebuilt from its region so
// it equals, byte for byte, the name the application inserts in the AV.
PeerId ShmDevice::peer_for_key(uint64_t key) noexcept {
  if (key == last_key_) return last_peer_;
  auto it = by_key_.find(key);
  PeerId id;
  if (it != by_key_.end()) {
    id = it->second;
  } else {
    Region r;
    if (r.open(cfg_.region.dir, name_.uid, key) != 0) return kNoPeer;
    const RegionHdr* h = r.hdr();
    ShmName n{kNameMagic, kVersion, 0, h->uid, is_service_key(key) ? 0 : h->owner_pid, key, h->host};
    id = resolve(&n, sizeof n);
    if (id == kNoPeer) return kNoPeer;
    peers_[id].region = std::move(r);
  }
  last_key_ = key;
  last_peer_ = id;
  return id;
}

int ShmDevice::alloc_chunk() noexcept {
  ChunkState* s = own_.states();
  uint32_t n = cfg_.region.chunks;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = (chunk_cursor_ + i) % n;
    if (s[c].busy.load(std::memory_order_acquire) == 0) {
      s[c].busy.store(1, std::memory_order_relaxed);
      chunk_cursor_ = (c + 1) % n;
      return int(c);
    }
  }
  return -1;
}

int ShmDevice::send(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt,
                    size_t offset, size_t len) noexcept {
  if (peer >= peers_.size()) return -FI_EINVAL;
  Peer& p = peers_[peer];
  if (!p.region.mapped()) {
    if (int rc = map_peer(p)) return rc;
  }
  bool compact = hdr.op == kPktEager && hdr.offset == 0 && hdr.msg_len == len && len <= kCompactInline;
  int chunk = -1;
  if (!compact && len > kCellInline) {
    if (len > cfg_.region.chunk_size) return -FI_EINVAL;
    chunk = alloc_chunk();
    if (chunk < 0) {
      st_.no_chunk++;
      return -FI_EAGAIN;
    }
  }
  RegionHdr* rh = p.region.hdr();
  uint64_t ncells = rh->cells;
  uint64_t pos = rh->tail.load(std::memory_order_relaxed);
  for (;;) {
    if (pos - p.head_cache >= ncells) {
      p.head_cache = rh->head.load(std::memory_order_acquire);
      if (pos - p.head_cache >= ncells) {
        if (chunk >= 0) own_.states()[chunk].busy.store(0, std::memory_order_release);
        st_.full_queue++;
        return -FI_EAGAIN;
      }
    }
    if (rh->tail.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
  }
  Cell* c = &p.region.cells()[pos & (ncells - 1)];
  c->src_key = name_.key;
  c->len = uint32_t(len);
  c->flags = hdr.flags;
  if (compact) {
    c->fmt = kFmtCompact;
    c->op = kPktEager;
    c->compact.tag = hdr.tag;
    c->compact.cq_data = hdr.cq_data;
    iov_copy_from(iov, iovcnt, offset, c->compact.data, len);
    st_.tx_inline++;
  } else {
    c->fmt = kFmtFull;
    c->op = hdr.op;
    c->full.hdr = hdr;
    if (chunk < 0) {
      c->full.chunk = kInline;
      iov_copy_from(iov, iovcnt, offset, c->full.data, len);
      st_.tx_inline++;
    } else {
      c->full.chunk = uint32_t(chunk);
      iov_copy_from(iov, iovcnt, offset, own_.chunk(uint32_t(chunk)), len);
      st_.tx_chunk++;
    }
  }
  c->seq.store(pos + 1, std::memory_order_release);
  p.last_pos = pos + 1;
  st_.tx_pkts++;
  // Dekker with a sleeping owner: either side must fence. Owners that run
  // membarrier() before sleeping take that cost off the send path.
  if (!fence_free_ || !rh->fence_free) std::atomic_thread_fence(std::memory_order_seq_cst);
  else std::atomic_signal_fence(std::memory_order_seq_cst);
  if (rh->sleeping.load(std::memory_order_relaxed)) {
    p.region.wake();
    st_.wakes++;
  }
  return 0;
}

int ShmDevice::poll(PacketSink& sink, int budget) noexcept {
  Cell* cells = own_.cells();
  int n = 0;
  while (n < budget) {
    Cell* c = &cells[head_ & mask_];
    if (c->seq.load(std::memory_order_acquire) != head_ + 1) break;
    PeerId peer = peer_for_key(c->src_key);
    PktHdr local;
    const PktHdr* hdr = &local;
    const void* payload = nullptr;
    // Taken before the callback, which may grow peers_: mappings stay put.
    std::atomic<uint32_t>* release = nullptr;
    bool ok = peer != kNoPeer;
    if (ok && c->fmt == kFmtCompact) {
      local = PktHdr{};
      local.op = kPktEager;
      local.flags = c->flags;
      local.seg_len = c->len;
      local.tag = c->compact.tag;
      local.cq_data = c->compact.cq_data;
      local.msg_len = c->len;
      payload = c->compact.data;
      ok = c->len <= kCompactInline;
    } else if (ok && c->fmt == kFmtFull) {
      hdr = &c->full.hdr;
      if (c->full.chunk == kInline) {
        payload = c->full.data;
        ok = c->len <= kCellInline;
      } else {
        Peer& p = peers_[peer];
        uint32_t ch = c->full.chunk;
        ok = map_peer(p) == 0 && ch < p.region.hdr()->chunks && c->len <= p.region.hdr()->chunk_size;
        if (ok) {
          payload = p.region.chunk(ch);
          release = &p.region.states()[ch].busy;
        }
      }
    } else {
      ok = false;
    }
    if (ok) {
      RxPacket pkt{peer, hdr, payload, c->len};
      if (!sink.on_packet(pkt)) {
        // No room in the endpoint now: the packet stays at the head of the
        // queue (so senders find it full and wait) and is offered again.
        st_.held++;
        break;
      }
      st_.rx_pkts++;
    } else {
      st_.dropped++;
      PM_WARN(FI_LOG_EP_DATA, "dropping a malformed packet or one from an unknown sender");
    }
    if (release) release->store(0, std::memory_order_release);
    head_++;
    n++;
  }
  if (n) own_.hdr()->head.store(head_, std::memory_order_release);
  return n;
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

bool ShmDevice::can_read_remote(PeerId peer) noexcept {
  if (!cma_self_ || peer >= peers_.size()) return false;
  Peer& p = peers_[peer];
  if (p.cma != Peer::kUnknown) return p.cma == Peer::kYes;
  if (map_peer(p) != 0) return false;
  // Read the peer's probe word through CMA: right pid namespace, permitted.
  const RegionHdr* h = p.region.hdr();
  uint64_t v = 0;
  iovec l{&v, sizeof v};
  iovec r{reinterpret_cast<void*>(h->self_va + offsetof(RegionHdr, probe)), sizeof v};
  bool ok = process_vm_readv(pid_t(h->owner_pid), &l, 1, &r, 1, 0) == sizeof v && v == h->probe;
  p.cma = ok ? Peer::kYes : Peer::kNo;
  if (!ok)
    PM_INFO(FI_LOG_EP_DATA, "single copy (CMA) to %s not possible; using bounce buffers",
            format_name(p.name).c_str());
  return ok;
}

ssize_t ShmDevice::read_remote(PeerId peer, const struct iovec* local, size_t lcnt,
                               const struct iovec* remote, size_t rcnt) noexcept {
  if (peer >= peers_.size() || !peers_[peer].region.mapped()) return -FI_ECONNRESET;
  Peer& p = peers_[peer];
  ssize_t n = process_vm_readv(pid_t(p.region.hdr()->owner_pid), local, lcnt, remote, rcnt, 0);
  if (n < 0) return -errno;
  st_.cma_reads++;
  st_.cma_bytes += uint64_t(n);
  return n;
}

ssize_t ShmDevice::write_remote(PeerId peer, const struct iovec* local, size_t lcnt,
                                const struct iovec* remote, size_t rcnt) noexcept {
  if (peer >= peers_.size() || !peers_[peer].region.mapped()) return -FI_ECONNRESET;
  ssize_t n = process_vm_writev(pid_t(peers_[peer].region.hdr()->owner_pid), local, lcnt, remote, rcnt, 0);
  if (n < 0) return -errno;
  st_.cma_reads++;
  st_.cma_bytes += uint64_t(n);
  return n;
}

bool ShmDevice::peer_alive(PeerId peer) noexcept {
  if (peer >= peers_.size()) return false;
  Peer& p = peers_[peer];
  if (!p.region.mapped()) {
    int rc = map_peer(p);
    if (rc == -FI_EAGAIN) return true;  // still within the connect timeout
    if (rc) return false;
  }
  if (p.region.owner_alive()) return true;
  // Dead: later sends fail at once, and its files go (nobody holds its lock).
  PM_WARN(FI_LOG_EP_DATA, "peer %s died; removing its region %s", format_name(p.name).c_str(),
          p.region.path().c_str());
  unlink(p.region.path().c_str());
  unlink((p.region.path() + ".wake").c_str());
  p.region = Region();
  p.dead = true;
  p.cma = Peer::kNo;
  if (last_peer_ == peer) last_key_ = 0;
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

std::string ShmDevice::stats() const {
  char buf[512];
  snprintf(buf, sizeof buf,
           "%s tx_pkts=%llu inline=%llu chunk=%llu rx_pkts=%llu cma_reads=%llu cma_bytes=%llu "
           "queue_full=%llu no_chunk=%llu wakes=%llu dropped=%llu held=%llu region_bytes=%zu",
           format_name(name_).c_str(), (unsigned long long)st_.tx_pkts,
           (unsigned long long)st_.tx_inline, (unsigned long long)st_.tx_chunk,
           (unsigned long long)st_.rx_pkts, (unsigned long long)st_.cma_reads,
           (unsigned long long)st_.cma_bytes, (unsigned long long)st_.full_queue,
           (unsigned long long)st_.no_chunk, (unsigned long long)st_.wakes,
           (unsigned long long)st_.dropped, (unsigned long long)st_.held, own_.size());
  return buf;
}

}  // namespace pm::shm
