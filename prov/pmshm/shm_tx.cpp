// The send side of the pmshm device: connecting to a peer's region,
// introducing ourselves in it, claiming and filling a queue cell.
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"
#include "shm_device.hpp"

namespace pm::shm {

int ShmDevice::map_peer(Peer& p) noexcept {
  if (p.dead) return -FI_ECONNRESET;
  if (p.region.mapped()) return 0;
  if (p.failed) return -FI_EHOSTUNREACH;
  int rc = p.region.open(cfg_.region.dir, p.name.uid, p.name.key);
  if (rc == 0) {
    // The key found a region: it must be the endpoint the name describes.
    const RegionInfo& h = p.region.info();
    // (A well-known service name carries pid 0: any owner of that key.)
    bool pid_ok = h.owner_pid == p.name.pid || (p.name.pid == 0 && is_service_key(p.name.key));
    if (pid_ok && h.host == p.name.host && h.uid == p.name.uid) {
      if (p.region.owner_alive()) return 0;
      found_dead(p, "has left (its region remains for its receivers)");
      return -FI_ECONNRESET;
    }
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

// Our name (and alias) in a free introduction slot of the peer's region,
// once per peer, before our first packet to it: the receiver then knows
// who we are even if our own region is gone by the time it polls. No free
// slot: the receiver falls back to opening our region.
void ShmDevice::introduce(Peer& p) noexcept {
  p.intro_tried = true;
  IntroSlot* slots = p.region.intros();
  uint32_t n = p.region.intro_count();
  const uint64_t writing = intro_state(name_.pid, kIntroWriting);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = uint32_t((name_.key + k) % n);
    uint64_t expect = 0;
    if (slots[i].state.load(std::memory_order_relaxed) != 0 ||
        !slots[i].state.compare_exchange_strong(expect, writing, std::memory_order_acquire,
                                                std::memory_order_relaxed))
      continue;
    memcpy(&slots[i].name, &name_, sizeof name_);
    slots[i].alias_len = alias_len_;
    memcpy(slots[i].alias, alias_, sizeof alias_);
    slots[i].state.store(intro_state(name_.pid, kIntroReady), std::memory_order_release);
    p.intro = uint8_t(i + 1);
    return;
  }
  st_.intro_full++;
}

int ShmDevice::alloc_chunk(uint64_t rx_key) noexcept {
  ChunkState* s = own_.states();
  uint32_t n = own_.chunk_count();
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = (chunk_cursor_ + i) % n;
    if (s[c].busy.load(std::memory_order_acquire) == 0) {
      s[c].rx_key = rx_key;
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
  if (own_broken_) return -FI_EIO;
  Peer& p = peers_[peer];
  if (!p.region.mapped() || p.dead) {
    if (int rc = map_peer(p)) return rc;
  }
  if (!p.intro_tried) introduce(p);
  bool compact = hdr.op == kPktEager && hdr.offset == 0 && hdr.msg_len == len && len <= kCompactInline;
  int chunk = -1;
  if (!compact && len > kCellInline) {
    if (len > cfg_.region.chunk_size) return -FI_EINVAL;
    chunk = alloc_chunk(p.name.key);
    if (chunk < 0) {
      st_.no_chunk++;
      return -FI_EAGAIN;
    }
  }
  auto unclaim_chunk = [&] {
    if (chunk >= 0) own_.states()[chunk].busy.store(0, std::memory_order_release);
  };
  // Claim a position: the cell's seq goes from "a lap behind" to "claimed
  // by us for pos" (so a receiver can tell who holds it), then tail moves
  // past pos; whoever finds a claimed cell at tail moves tail for its
  // claimant. Bounded: a corrupted queue gives -FI_EAGAIN, not a spin.
  RegionHdr* rh = p.region.hdr();
  Cell* cells = p.region.cells();
  uint64_t ncells = p.region.cell_count();
  Cell* c = nullptr;
  uint64_t pos = 0;
  for (int tries = 0; tries < 256; tries++) {
    pos = rh->tail.load(std::memory_order_acquire);
    if (pos - p.head_cache >= ncells) {
      p.head_cache = rh->head.load(std::memory_order_acquire);
      int64_t used = int64_t(pos - p.head_cache);
      if (used < 0) continue;  // tail read before head moved on: read it again
      if (uint64_t(used) >= ncells) break;
    }
    Cell* cand = &cells[pos & (ncells - 1)];
    uint64_t v = cand->seq.load(std::memory_order_acquire);
    int32_t lap = seq_lap(v, pos);
    if (lap < 0) {
      if (cand->seq.compare_exchange_strong(v, seq_claimed(pos, name_.pid), std::memory_order_acq_rel,
                                            std::memory_order_relaxed)) {
        c = cand;
        break;
      }
    } else if (lap == 0) {
      uint64_t t = pos;  // claimed but tail not moved yet: help its claimant
      rh->tail.compare_exchange_strong(t, pos + 1, std::memory_order_release, std::memory_order_relaxed);
    }
  }
  if (!c) {
    unclaim_chunk();
    st_.full_queue++;
    return p.region.broken() ? -FI_ECONNRESET : -FI_EAGAIN;
  }
  uint64_t t = pos;
  rh->tail.compare_exchange_strong(t, pos + 1, std::memory_order_release, std::memory_order_relaxed);
  c->src_key = name_.key;
  c->intro = p.intro;
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
  c->seq.store(seq_published(pos), std::memory_order_release);
  p.last_pos = pos + 1;
  st_.tx_pkts++;
  if (p.region.broken()) {
    // Its file was truncated under us: the packet went to zero pages.
    unclaim_chunk();
    found_dead(p, "has a truncated region (another process shrank its file)");
    return -FI_ECONNRESET;
  }
  if (chunk >= 0 && own_.broken()) {
    // Ours was: the payload went to zero pages (the receiver drops it);
    // the next poll reports it.
    own_broken_ = true;
    return -FI_EIO;
  }
  // Dekker with a sleeping owner: either side must fence. Owners that run
  // membarrier() before sleeping take that cost off the send path.
  if (!fence_free_ || !p.region.info().fence_free) std::atomic_thread_fence(std::memory_order_seq_cst);
  else std::atomic_signal_fence(std::memory_order_seq_cst);
  if (rh->sleeping.load(std::memory_order_relaxed)) {
    p.region.wake();
    st_.wakes++;
  }
  return 0;
}

}  // namespace pm::shm
