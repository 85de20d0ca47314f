// The receive side of the pmshm device: taking cells from our queue, naming
// their senders, validating what they say, and getting past cells whose
// claimant died before publishing them. Every field of a cell, an
// introduction or a sender's region is checked before it is used.
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/log.hpp"
#include "shm_device.hpp"
#include "shm_proc.hpp"

namespace pm::shm {

// Copies out the introduction `intro` (slot + 1) if it is the sender
// `key`'s, and frees the slot. False if there is none or it is not sound.
bool ShmDevice::take_intro(uint64_t key, uint8_t intro, ShmName* name, uint8_t* alias,
                           uint8_t* alias_len) noexcept {
  if (intro == 0 || intro > own_.intro_count()) return false;
  IntroSlot& s = own_.intros()[intro - 1];
  uint64_t v = s.state.load(std::memory_order_acquire);
  if ((v & 3) != kIntroReady) return false;
  ShmName n;
  uint8_t a[kAliasMax];
  memcpy(&n, &s.name, sizeof n);
  uint32_t alen = s.alias_len;
  memcpy(a, s.alias, sizeof a);
  if (n.key != key) return false;  // another sender's: not ours to free
  if (!s.state.compare_exchange_strong(v, 0, std::memory_order_acq_rel)) return false;
  if (!valid_name(&n, sizeof n) || n.uid != name_.uid || alen > kAliasMax) return false;
  *name = n;
  memcpy(alias, a, alen);
  *alias_len = uint8_t(alen);
  return true;
}

// A sender seen for the first time: named by its introduction, or else by
// its region (rebuilt from it, so it equals byte for byte the name the
// application inserts in the AV).
PeerId ShmDevice::learn_sender(uint64_t key, uint8_t intro) noexcept {
  ShmName n;
  uint8_t alias[kAliasMax];
  uint8_t alias_len = 0;
  Region r;
  if (!take_intro(key, intro, &n, alias, &alias_len)) {
    if (intro == 0) collect_intros(true);  // it found no free slot: reclaim those of dead writers
    if (r.open(cfg_.region.dir, name_.uid, key) != 0) return kNoPeer;
    const RegionInfo& h = r.info();
    n = ShmName{kNameMagic, kVersion, 0, h.uid, is_service_key(key) ? 0 : h.owner_pid, key, h.host};
    alias_len = uint8_t(h.alias_len);  // validated <= kAliasMax
    memcpy(alias, h.alias, alias_len);
  }
  PeerId id = resolve(&n, sizeof n);
  if (id == kNoPeer) return kNoPeer;
  Peer& p = peers_[id];
  p.introduced = true;
  if (alias_len && !p.alias_len) {
    memcpy(p.alias, alias, alias_len);
    p.alias_len = alias_len;
  }
  if (r.mapped() && !p.region.mapped()) p.region = std::move(r);
  return id;
}

PeerId ShmDevice::sender_of(const Cell& c) noexcept {
  uint64_t key = c.src_key;
  uint8_t intro = c.intro;
  if (key == last_key_ && key) return last_peer_;
  PeerId id;
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    id = it->second;
    Peer& p = peers_[id];
    if (!p.introduced) {  // known from the AV: its introduction only needs freeing
      p.introduced = true;
      ShmName n;
      uint8_t alias[kAliasMax], alias_len = 0;
      if (take_intro(key, intro, &n, alias, &alias_len) && alias_len && !p.alias_len) {
        memcpy(p.alias, alias, alias_len);
        p.alias_len = alias_len;
      }
    }
  } else {
    id = learn_sender(key, intro);
    if (id == kNoPeer) return kNoPeer;
  }
  last_key_ = key;
  last_peer_ = id;
  return id;
}

// The payload of a chunk packet, in the sender's region (mapped now if it
// was not: the sender itself may have gone, its region stays while the
// chunk is busy). nullptr if the chunk or the region is not sound.
const void* ShmDevice::chunk_payload(PeerId peer, uint32_t chunk, uint32_t len,
                                     std::atomic<uint32_t>** release) noexcept {
  Peer& p = peers_[peer];
  if (!p.region.mapped()) {
    Region r;
    if (r.open(cfg_.region.dir, p.name.uid, p.name.key) != 0) return nullptr;
    const RegionInfo& h = r.info();
    bool pid_ok = h.owner_pid == p.name.pid || (p.name.pid == 0 && is_service_key(p.name.key));
    if (!pid_ok || h.uid != p.name.uid || h.host != p.name.host) return nullptr;
    p.region = std::move(r);
  }
  const Region& r = p.region;
  if (chunk >= r.chunk_count() || len > r.chunk_size() || r.broken()) return nullptr;
  char* data = r.chunk(chunk);
  // A file truncated under the chunk faults here, on its last byte (and is
  // patched with zero pages), rather than in the middle of the copy.
  if (len) {
    volatile char last = data[len - 1];
    (void)last;
    if (r.broken()) return nullptr;
  }
  *release = &r.states()[chunk].busy;
  return data;
}

// The head cell is claimed but not published. A claim older than the
// claim timeout whose claimant is dead (killed while filling it) is
// skipped; a live claimant, even a stopped one, is always waited for: its
// cell could not be reused safely.
bool ShmDevice::skip_dead_claim(uint64_t seq) noexcept {
  if (seq_is_published(seq)) return false;
  uint64_t now = now_ns();
  if (stuck_pos_ != head_) {
    stuck_pos_ = head_;
    stuck_since_ns_ = now;
    return false;
  }
  if (now - stuck_since_ns_ < uint64_t(cfg_.claim_timeout_ms) * 1000000ull || own_.broken()) return false;
  stuck_since_ns_ = now;  // next look one timeout later
  uint32_t pid = seq_pid(seq);
  if (claimant_alive(cfg_.region.dir, name_.uid, pid)) return false;
  PM_WARN(FI_LOG_EP_DATA, "%s: skipping queue position %llu, claimed by process %u which died before filling it",
          format_name(name_).c_str(), (unsigned long long)head_, pid);
  uint64_t t = head_;  // it may have died before moving tail past its cell
  own_.hdr()->tail.compare_exchange_strong(t, head_ + 1, std::memory_order_acq_rel);
  head_++;
  own_.hdr()->head.store(head_, std::memory_order_release);
  stuck_pos_ = UINT64_MAX;
  st_.skipped++;
  if (intro_gc_pending_) collect_intros(false);
  return true;
}

// Introduction slots whose writer died before its first packet reached us
// would stay taken for good: they are freed once the writer is dead and our
// head has passed every position claimed before that was seen. With
// check_writers false only slots already seen dead are looked at.
void ShmDevice::collect_intros(bool check_writers) noexcept {
  IntroSlot* slots = own_.intros();
  uint32_t n = own_.intro_count();
  if (intro_gc_.size() != n) intro_gc_.assign(n, IntroGc{});
  uint64_t tail = own_.hdr()->tail.load(std::memory_order_acquire);
  uint64_t now = now_ns();
  if (check_writers && now - intro_check_ns_ < uint64_t(cfg_.claim_timeout_ms) * 1000000ull)
    check_writers = false;  // the checks cost syscalls: one round per claim timeout
  if (check_writers) intro_check_ns_ = now;
  intro_gc_pending_ = false;
  for (uint32_t i = 0; i < n; i++) {
    IntroGc& g = intro_gc_[i];
    uint64_t v = slots[i].state.load(std::memory_order_acquire);
    if (v != g.state) g = IntroGc{};  // freed or taken again since
    if (v == 0) continue;
    if (!g.state) {
      if (!check_writers) continue;
      bool alive;
      if ((v & 3) == kIntroReady) {
        ShmName w;
        memcpy(&w, &slots[i].name, sizeof w);
        alive = lock_held(region_path(cfg_.region.dir, name_.uid, w.key));
      } else {
        alive = claimant_alive(cfg_.region.dir, name_.uid, uint32_t(v >> 2));
      }
      if (alive) continue;
      g = IntroGc{v, tail};  // its packets, if any, are all below tail
    }
    if (head_ >= g.tail) {
      slots[i].state.compare_exchange_strong(v, 0, std::memory_order_acq_rel);
      g = IntroGc{};
    } else {
      intro_gc_pending_ = true;
    }
  }
}

void ShmDevice::own_region_broke(PacketSink& sink) noexcept {
  own_broken_ = true;
  own_reported_ = true;
  PM_WARN(FI_LOG_EP_CTRL,
          "%s: another process truncated this endpoint's region %s; it can no longer receive, and "
          "every operation waiting on a peer fails",
          format_name(name_).c_str(), own_.path().c_str());
  for (PeerId i = 0; i < peers_.size(); i++) sink.on_peer_reset(up_id(i));
}

int ShmDevice::poll(PacketSink& sink, int budget) noexcept {
  if (own_broken_) {
    if (!own_reported_) own_region_broke(sink);
    return 0;
  }
  Cell* cells = own_.cells();
  int n = 0;
  while (n < budget) {
    Cell* c = &cells[head_ & mask_];
    uint64_t v = c->seq.load(std::memory_order_acquire);
    if (v != seq_published(head_)) {
      if (seq_lap(v, head_) == 0 && skip_dead_claim(v)) continue;
      break;
    }
    // The cell is ours until head passes it; what the sender wrote is read
    // once into locals (a misbehaving writer cannot change it under a check).
    uint8_t fmt = c->fmt;
    uint32_t len = c->len;
    PeerId peer = sender_of(*c);
    PktHdr local;
    const void* payload = nullptr;
    std::atomic<uint32_t>* release = nullptr;
    bool ok = peer != kNoPeer;
    if (ok && fmt == kFmtCompact) {
      local = PktHdr{};
      local.op = kPktEager;
      local.flags = c->flags;
      local.seg_len = len;
      local.tag = c->compact.tag;
      local.cq_data = c->compact.cq_data;
      local.msg_len = len;
      payload = c->compact.data;
      ok = len <= kCompactInline;
    } else if (ok && fmt == kFmtFull) {
      memcpy(&local, &c->full.hdr, sizeof local);
      uint32_t ch = c->full.chunk;
      if (ch == kInline) {
        payload = c->full.data;
        ok = len <= kCellInline;
      } else {
        payload = chunk_payload(peer, ch, len, &release);
        ok = payload != nullptr;
      }
    } else {
      ok = false;
    }
    if (ok) {
      RxPacket pkt{up_id(peer), &local, payload, len};
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
    // A chunk that could not be read (its region is gone, shrunk or bogus),
    // or that broke while it was read: the message is lost, the session
    // with its sender is over. peers_ may have grown in the callback.
    if (peer != kNoPeer && ((!ok && fmt == kFmtFull) || (release && peers_[peer].region.broken())) &&
        !peers_[peer].reset_sent) {
      peers_[peer].reset_sent = true;
      found_dead(peers_[peer], "left a bounce chunk that cannot be read (its region is gone or truncated)");
      sink.on_peer_reset(up_id(peer));
    }
    if (release) release->store(0, std::memory_order_release);
    head_++;
    n++;
  }
  if (n) own_.hdr()->head.store(head_, std::memory_order_release);
  if (own_.broken()) own_region_broke(sink);
  if (intro_gc_pending_ && n) collect_intros(false);
  return n;
}

}  // namespace pm::shm
