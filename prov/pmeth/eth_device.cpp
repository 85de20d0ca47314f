#include "eth_device.hpp"

#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"

namespace pm::eth {

namespace {
constexpr uint64_t kTicketBits = 40;
constexpr uint64_t kTicketMask = (uint64_t(1) << kTicketBits) - 1;
constexpr size_t kBodyOff = kEthHdr + kPmHdr;
constexpr size_t kStripeMin = 512;             // smaller frames are not striped
constexpr uint64_t kLinkCheckNs = 20000000;    // local link state, every 20 ms
constexpr uint64_t kRailProbeNs = 10000000;    // a rail out of use is probed every 10 ms
constexpr uint32_t kRailSilentRtos = 3;        // timeouts with a rail silent before it is taken out
constexpr uint64_t kNakHoldMinNs = 100000;     // trunks: a gap may be striping, not loss
constexpr uint32_t kStaleWindowFrames = 4;     // in flight on a stale window (cfg.stale_window_ms)

uint32_t random32() {
  uint32_t v = 0;
  while (v == 0)
    if (getrandom(&v, sizeof v, 0) != sizeof v) v = uint32_t(now_ns());
  return v;
}

uint64_t mac48(const uint8_t* m) {
  uint64_t v = 0;
  for (int i = 0; i < 6; i++) v = (v << 8) | m[i];
  return v;
}
}  // namespace

std::unique_ptr<EthDevice> EthDevice::open(const DeviceConfig& cfg, std::unique_ptr<Wire> wire,
                                           uint32_t ep_id) {
  std::vector<std::unique_ptr<Wire>> rails;
  rails.push_back(std::move(wire));
  int err = 0;
  return open(cfg, std::move(rails), ep_id, &err);
}

std::unique_ptr<EthDevice> EthDevice::open(const DeviceConfig& cfg, std::vector<std::unique_ptr<Wire>> rails,
                                           uint32_t ep_id, int* err) {
  if (rails.empty() || rails.size() > kMaxRails) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  std::unique_ptr<EthDevice> d(new EthDevice(cfg, std::move(rails), ep_id));
  // The wait fd: the rails' sockets join it only while a thread means to
  // sleep (arm_wait), so that a frame arriving while the endpoint is polled
  // wakes no one (a registered socket costs the sending CPU a wake-up call
  // per frame: 7-11 % of the sending CPU in a 64 KiB stream over veth).
  d->epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!d->epfd_) {
    *err = -FI_ENOMEM;
    return nullptr;
  }
  return d;
}

EthDevice::EthDevice(const DeviceConfig& cfg, std::vector<std::unique_ptr<Wire>> rails, uint32_t ep_id)
    : cfg_(cfg), ep_id_(ep_id), epoch_(random32()), rng_(random32()) {
  self_.ep_id = ep_id_;
  self_.host = cfg.host;
  self_.rails = uint8_t(rails.size());
  size_t mtu = SIZE_MAX, link_mtu = SIZE_MAX;
  for (size_t r = 0; r < rails.size(); r++) {
    memcpy(self_.mac[r], rails[r]->mac(), 6);
    mtu = std::min(mtu, rails[r]->mtu());
    link_mtu = std::min(link_mtu, rails[r]->link_mtu());
    adv_gso_ = (r == 0 || adv_gso_) && rails[r]->accepts_gso();
    gathers_ = gathers_ && rails[r]->gathers();
    rails_.push_back(Rail{std::move(rails[r])});
  }
  encode_name(name_, self_);
  max_payload_ = mtu > kPmHdr + kCoreHdr + 64 ? mtu - kPmHdr - kCoreHdr : 64;
  link_payload_ = std::max(max_payload_, link_mtu > kPmHdr + kCoreHdr + 64 ? link_mtu - kPmHdr - kCoreHdr : 64);
  // A power of two, so that `seq % window` stays continuous across the
  // 2^32 wrap of the sequence numbers (at most 32768: the window field).
  uint32_t w = 8;
  while (w < cfg_.window && w < 32768) w <<= 1;
  cfg_.window = w;
  scratch_.resize(kEthHdr + link_mtu + 64);  // link_mtu >= mtu: frames to peers without GSO
  frame_cap_ = kEthHdr + link_mtu;
  frame_pool_.reserve(cfg_.window);  // give_frame never grows it: an ACK read in fi_cq_read allocates nothing
  adv_window_ = uint16_t(std::min<uint32_t>(cfg_.window, 65535));
  cfg_.payload_mac = cfg_.payload_mac && cfg_.auth;
  if (cfg_.payload_mac) payload_key_ = payload_key(cfg_.key);
  update_window(now_ns());
}

EthDevice::~EthDevice() { flush(); }

void EthDevice::arm_wait(bool armed) noexcept {
  if (armed == armed_) return;
  bool ok = true;
  for (Rail& r : rails_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    // Adding a socket with frames already waiting makes the fd ready at
    // once: nothing that came before the arming is slept through.
    if (epoll_ctl(epfd_.get(), armed ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, r.wire->fd(), &ev) != 0 && armed &&
        errno != EEXIST) {
      ok = false;
      PM_WARN(FI_LOG_EP_CTRL, "cannot watch the %s socket: %s (the next arming tries again)", r.wire->kind(),
              strerror(errno));
    }
  }
  // Not armed unless every socket is watched: the next arming adds the rest.
  armed_ = armed && ok;
}

void EthDevice::set_shm_part(uint32_t uid, uint32_t pid, uint64_t key) {
  self_.has_shm = true;
  self_.shm_uid = uid;
  self_.shm_pid = pid;
  self_.shm_key = key;
  encode_name(name_, self_);
}

size_t EthDevice::format_name(const EthName& n, char* buf) {
  size_t len = 0;
  auto put = [&](int k) { len = std::min(len + size_t(std::max(k, 0)), kNameText - 1); };
  put(snprintf(buf, kNameText, "pmeth://"));
  for (unsigned r = 0; r < n.rails && r < kMaxRails; r++) {
    const uint8_t* m = n.mac[r];
    put(snprintf(buf + len, kNameText - len, "%s%02x:%02x:%02x:%02x:%02x:%02x", r ? "+" : "", m[0], m[1], m[2], m[3],
                 m[4], m[5]));
  }
  put(snprintf(buf + len, kNameText - len, "/%08x@%016llx", n.ep_id, (unsigned long long)n.host));
  if (n.has_shm) put(snprintf(buf + len, kNameText - len, ";shm=%016llx", (unsigned long long)n.shm_key));
  return len;
}

std::string EthDevice::format_name(const EthName& n) {
  char buf[kNameText];
  return std::string(buf, format_name(n, buf));
}

std::string EthDevice::name_str(const void* name, size_t len) const {
  EthName n;
  return decode_name(name, len, &n) ? format_name(n) : "";
}

PeerId EthDevice::peer_by_addr(const uint8_t* mac, uint32_t ep_id) {
  AddrKey k{mac48(mac), ep_id};
  if (k == last_addr_) return last_peer_;  // a stream's frames come from one peer
  auto it = by_addr_.find(k);
  if (it != by_addr_.end()) {
    last_addr_ = k;
    last_peer_ = it->second;
    return it->second;
  }
  PeerId id = PeerId(peers_.size());
  peers_.emplace_back();
  Peer& p = peers_.back();
  p.id = id;
  p.name.ep_id = ep_id;
  memcpy(p.name.mac[0], mac, 6);
  encode_name(p.name_bytes, p.name);
  p.rto_ns = uint64_t(cfg_.rto_init_us) * 1000;
  p.peer_window = uint16_t(std::min<uint32_t>(cfg_.window, 65535));
  p.my_epoch = epoch_;
  by_addr_.emplace(k, id);
  return id;
}

PeerId EthDevice::resolve(const void* name, size_t len) noexcept {
  EthName n;
  if (!decode_name(name, len, &n)) return kNoPeer;
  try {
    PeerId id = peer_by_addr(n.mac[0], n.ep_id);
    peers_[id].name_known = false;  // the application's name wins over one a handshake told
    learn_name(id, n, name);
    return id;
  } catch (...) {
    return kNoPeer;
  }
}

// The first name learnt for a peer stays (AV insert or handshake); every
// rail's MAC then leads to it.
void EthDevice::learn_name(PeerId id, const EthName& n, const void* bytes) {
  Peer& p = peers_[id];
  if (p.name_known) return;
  p.name = n;
  memcpy(p.name_bytes, bytes, kNameLen);
  p.name_known = true;
  p.rails = uint8_t(std::min<size_t>(n.rails, rails_.size()));
  for (unsigned r = 0; r < n.rails; r++) by_addr_[AddrKey{mac48(n.mac[r]), n.ep_id}] = id;
  last_addr_ = AddrKey{};  // an address may now lead to another peer
}

const void* EthDevice::peer_name(PeerId peer, size_t* len) const noexcept {
  if (peer >= peers_.size() || !peers_[peer].name_known) return nullptr;
  *len = kNameLen;
  return peers_[peer].name_bytes;
}

uint32_t EthDevice::now_us() const { return uint32_t(now_ns() / 1000); }

// Control frames (ACKs, NAKs) rotate over the usable rails, so that each
// one carries frames back and its silence means something.
unsigned EthDevice::ctrl_rail(Peer& p) {
  if (p.rails == 1) return 0;
  for (unsigned k = 0; k < p.rails; k++) {
    unsigned r = p.ack_rr++ % p.rails;
    if (rail_usable(p, r)) return r;
  }
  return 0;
}

unsigned EthDevice::data_rail(Peer& p, size_t flen) {
  if (p.rails == 1) return 0;
  if (flen >= kStripeMin) {
    for (unsigned k = 0; k < p.rails; k++) {
      unsigned r = p.tx_rr++ % p.rails;
      if (rail_usable(p, r)) return r;
    }
  }
  for (unsigned r = 0; r < p.rails; r++)
    if (rail_usable(p, r)) return r;
  return 0;
}

// The next usable rail after r (r itself when it is the only one).
unsigned EthDevice::other_rail(const Peer& p, unsigned r) const {
  for (unsigned k = 1; k <= p.rails; k++) {
    unsigned o = (r + k) % p.rails;
    if (rail_usable(p, o)) return o;
  }
  return r;
}

// Rail r is out of use for p: what was sent on it and is not yet
// acknowledged goes again on the others.
void EthDevice::rail_failover(Peer& p, unsigned r) {
  if (p.state != Peer::kUp || p.ring.empty()) return;
  for (uint32_t s = p.una; seq_lt(s, p.next_seq); s++) {
    TxSlot& t = p.ring[s % cfg_.window];
    if (t.seq == s && t.rail == r) {
      unsigned o = other_rail(p, r);
      if (o == r) break;
      retransmit(p, s, int(o));
      rails_[r].failovers++;
    }
  }
}

void EthDevice::build_hdr(uint8_t* f, Peer& p, uint8_t type, uint32_t seq, uint16_t len, uint64_t now) {
  f[12] = uint8_t(cfg_.ethertype >> 8);
  f[13] = uint8_t(cfg_.ethertype);
  FrameHdr h;
  h.type = type;
  h.job = cfg_.job;
  h.dst_ep = p.name.ep_id;
  h.src_ep = ep_id_;
  h.src_epoch = p.my_epoch;
  h.dst_epoch = p.epoch;
  h.seq = seq;
  h.ack = p.expected;
  h.window = p.rx_held ? 0 : adv_window_;  // 0 = STOP: the endpoint has no room
  h.len = len;
  h.ts = uint32_t((now ? now : now_ns()) / 1000);
  // A timestamp is echoed once, by the first frame back after the frame that
  // carried it arrived in order: duplicates and later ACKs echo nothing, so
  // they cannot pass a stale timestamp off as a slow round trip.
  h.ts_echo = p.last_ts;
  if (p.last_ts && cfg_.echo_hold) {
    // With how long we held it: the peer takes that out of its RTT sample,
    // which is then the network's, not our scheduling's.
    uint64_t t = now ? now : now_ns();
    h.hold = hold_code(t > p.last_ts_at ? t - p.last_ts_at : 0);
  }
  p.last_ts = 0;
  encode_hdr(f + kEthHdr, h);
}

// A frame whose payload stays in the sender's buffer after its first
// `head` bytes (tail) is summed as the same frame copied whole would be.
// With payload_mac the payload's keyed hash is kept for the MAC that emit()
// adds, and the checksum is the header's alone: the MAC, checked first,
// covers the payload (a checksum of the hash would show its bits).
void EthDevice::seal(uint8_t* f, size_t len, const uint8_t* tail, size_t head) {
  put64(f + kEthHdr + kMacOff, 0);  // emit() signs, once the addresses are known
  uint32_t body = 0;
  if (cfg_.payload_mac) {
    sealed_ = f;
    sealed_hash_ = body_hash(f, len, tail, head);
  }
  if (!cfg_.checksum) return;
  put32(f + kEthHdr + 44, 0);
  if (!cfg_.payload_mac)
    body = tail ? payload_sum2(f + kBodyOff, head - kBodyOff, tail, len - head)
                : payload_sum(f + kBodyOff, len - kBodyOff);
  put32(f + kEthHdr + 44, crc32c(0, f + kEthHdr, kPmHdr) ^ body);
}

PayloadHash EthDevice::body_hash(const uint8_t* f, size_t len, const uint8_t* tail, size_t head) const {
  return tail ? payload_hash(payload_key_, f + kBodyOff, head - kBodyOff, tail, len - head)
              : payload_hash(payload_key_, f + kBodyOff, len - kBodyOff);
}

// The MAC covers the Ethernet addresses and the header up to the MAC (the
// checksum, and through it the payload's sum, included); with payload_mac
// also the payload's keyed hash, which makes it the payload's MAC.
namespace {
constexpr size_t kMacIn = 12 + kMacOff;
size_t mac_input(uint8_t (&m)[kMacIn + 16], const uint8_t* f, const PayloadHash* ph) {
  memcpy(m, f, 12);
  memcpy(m + 12, f + kEthHdr, kMacOff);
  if (!ph) return kMacIn;
  put64(m + kMacIn, ph->h0);
  put64(m + kMacIn + 8, ph->h1);
  return kMacIn + 16;
}
}  // namespace

void EthDevice::sign(uint8_t* f, const PayloadHash& ph) const {
  if (!cfg_.auth) return;
  uint8_t m[kMacIn + 16];
  size_t n = mac_input(m, f, cfg_.payload_mac ? &ph : nullptr);
  put64(f + kEthHdr + kMacOff, siphash24(cfg_.key, m, n));
}

bool EthDevice::authentic(const uint8_t* f, const PayloadHash& ph, const uint64_t* pre) const {
  if (!cfg_.auth) return true;
  if (pre) return *pre == get64(f + kEthHdr + kMacOff);
  uint8_t m[kMacIn + 16];
  size_t n = mac_input(m, f, cfg_.payload_mac ? &ph : nullptr);
  return siphash24(cfg_.key, m, n) == get64(f + kEthHdr + kMacOff);
}

// Every frame's MAC input has one length (kMacIn bytes of its first
// kBodyOff, and with payload_mac its payload's hash): the MACs of a burst
// are computed in groups of four (a short group repeats its last input).
// Only for frames that pass the checks before the MAC (precheck), so that
// no payload is hashed for a frame handle_frame refuses before its MAC.
// The frames stay where they are (the ring or the receive buffer) until
// handle_frame has seen them.
void EthDevice::mac_burst(const Frame* fr, int n, uint64_t* pre, bool* has) {
  uint8_t m[4][kMacIn + 16];
  const uint8_t* msg[4];
  int idx[4], k = 0;
  size_t in_len = cfg_.payload_mac ? kMacIn + 16 : kMacIn;
  auto run = [&] {
    for (int j = k; j < 4; j++) msg[j] = msg[k - 1];
    uint64_t out[4];
    siphash24_x4(cfg_.key, msg, in_len, out);
    for (int j = 0; j < k; j++) {
      pre[idx[j]] = out[j];
      has[idx[j]] = true;
    }
    st_.burst_macs += unsigned(k);
    k = 0;
  };
  for (int i = 0; i < n; i++) {
    has[i] = false;
    FrameHdr h;
    if (precheck(fr[i].data, fr[i].len, &h) != Pre::kOk) continue;  // handle_frame refuses it
    PayloadHash ph;
    if (cfg_.payload_mac) ph = payload_hash(payload_key_, fr[i].data + kBodyOff, h.len);
    mac_input(m[k], fr[i].data, cfg_.payload_mac ? &ph : nullptr);
    msg[k] = m[k];
    idx[k++] = i;
    if (k == 4) run();
  }
  if (k > 1) {
    run();
  } else if (k == 1) {  // alone (its payload's hash is computed already)
    pre[idx[0]] = siphash24(cfg_.key, m[0], in_len);
    has[idx[0]] = true;
  }
}

// Addresses the frame for `rail` and queues it there.
bool EthDevice::emit(Peer& p, unsigned rail, uint8_t* f, size_t len, TxSlot* lend) {
  memcpy(f, p.name.mac[rail], 6);
  memcpy(f + 6, self_.mac[rail], 6);
  if (cfg_.payload_mac && f != sealed_) {
    sealed_ = f;  // every emit follows its seal, but should one not: the hash from the frame
    sealed_hash_ = body_hash(f, len, lend ? lend->tail : nullptr, lend ? lend->head : 0);
  }
  sign(f, sealed_hash_);
  Frame fr{f, len};
  fr.gso = gso_to(p);
  fr.stays = lend != nullptr;
  if (lend && lend->tail) {
    fr.len = lend->head;
    fr.tail = lend->tail;
    fr.tail_len = len - lend->head;
  }
  Rail& r = rails_[rail];
  if (r.wire->tx_burst(&fr, 1) == 1) {
    tx_pending_ = true;
    if (lend) lend->lent = flushes_;
    r.tx_frames++;
    r.tx_bytes += len;
    return true;
  }
  st_.tx_full++;
  return false;
}

void EthDevice::send_ctrl(Peer& p, uint8_t type, int rail) {
  uint8_t* f = scratch_.data();
  uint16_t len = 0;
  if (type == kNak) {
    // Bitmap of what arrived beyond the first gap, for selective resends.
    uint64_t bits = 0;
    for (uint32_t i = 0; i < 64 && i + 1 < cfg_.window; i++) {
      uint32_t s = p.expected + 1 + i;
      const RxSlot& r = p.reorder[s % cfg_.window];
      if (r.present && decode_hdr(r.frame.data() + kEthHdr).seq == s) bits |= uint64_t(1) << i;
    }
    put64(f + kBodyOff, bits);
    len = 8;
  }
  build_hdr(f, p, type, 0, len);
  seal(f, kBodyOff + len);
  if (emit(p, rail < 0 ? ctrl_rail(p) : unsigned(rail), f, kBodyOff + len) && (type == kAck || type == kNak)) {
    p.rx_since_ack = 0;
    p.ack_deadline = 0;
  }
  p.tx_frames++;
}

void EthDevice::send_hello(Peer& p, uint8_t type) {
  uint8_t* f = scratch_.data();
  build_hdr(f, p, type, 0, uint16_t(kNameLen + kHelloCapsLen));
  memcpy(f + kBodyOff, name_, kNameLen);
  uint32_t caps = adv_gso_ ? kCapGso : 0;
  put32(f + kBodyOff + kNameLen, caps);
  seal(f, kBodyOff + kNameLen + kHelloCapsLen);
  emit(p, ctrl_rail(p), f, kBodyOff + kNameLen + kHelloCapsLen);
  p.tx_frames++;
}

int EthDevice::send_frame(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
                          size_t len, bool ref) noexcept {
  if (peer >= peers_.size() || len > max_payload(peer, hdr)) return -FI_EINVAL;
  Peer& p = peers_[peer];
  size_t clen = core_len(hdr);
  size_t at = kBodyOff + clen;  // the payload's place in the frame
  size_t flen = at + len;
  if (!cfg_.reliable) {
    uint8_t* f = scratch_.data();
    build_hdr(f, p, kDgram, 0, uint16_t(clen + len));
    encode_core(f + kBodyOff, hdr);
    iov_copy_from(iov, iovcnt, offset, f + at, len);
    seal(f, flen);
    if (!emit(p, 0, f, flen)) return -FI_EAGAIN;
    p.tx_frames++;
    p.tx_bytes += flen;
    return 0;
  }
  switch (p.state) {
  case Peer::kUnreachable:
    return -FI_EHOSTUNREACH;
  case Peer::kNew: {
    uint64_t now = now_ns();
    if (p.ring.empty()) p.ring.resize(cfg_.window);
    if (p.reorder.empty()) p.reorder.resize(cfg_.window);
    send_hello(p, kHello);
    p.state = Peer::kHelloSent;
    p.hello_start_ns = now;
    p.hello_deadline = now + p.rto_ns;
    track(p);
    flush();
    return -FI_EAGAIN;
  }
  case Peer::kHelloSent:
    return -FI_EAGAIN;
  case Peer::kUp:
    break;
  }
  if (open_.peer == peer && open_.seq + 1 == p.next_seq) {
    // Into the open frame when it has room (the first packet then becomes
    // the first record of a bundle).
    TxSlot& o = p.ring[open_.seq % cfg_.window];
    size_t add = kRecHdr + clen + len + (open_.recs == 1 ? kRecHdr : 0);
    if (o.seq == open_.seq && bundleable(len) && open_.len + add <= kFrameOverhead + max_payload(peer)) {
      uint8_t* f = o.frame.get();
      if (open_.recs == 1) {
        size_t r0 = open_.len - kBodyOff;
        memmove(f + kBodyOff + kRecHdr, f + kBodyOff, r0);
        put16(f + kBodyOff, uint16_t(r0));
        f[kEthHdr + 2] |= kFlagBundle;
        open_.len += kRecHdr;
      }
      put16(f + open_.len, uint16_t(clen + len));
      encode_core(f + open_.len + kRecHdr, hdr);
      iov_copy_from(iov, iovcnt, offset, f + open_.len + kRecHdr + clen, len);
      open_.len += kRecHdr + clen + len;
      open_.recs++;
      p.tx_bytes += add;
      st_.bundled++;
      return 0;
    }
  }
  if (open_.peer != kNoPeer) close_open();
  uint32_t limit = std::min<uint32_t>(cfg_.window, p.peer_window);
  uint32_t in_flight = p.next_seq - p.una;
  if (in_flight >= limit) {
    p.window_stalls++;
    tx_clock_uses_ = 0;  // the message goes on later
    return -FI_EAGAIN;
  }
  // Only for a frame that goes (tx_clock: possibly older than a frame
  // heard since).
  uint64_t now = tx_clock(peer, hdr.msg_id);
  // The peer's window is a share of its receive ring among the senders it
  // heard lately; one learnt long ago may be stale (more senders since):
  // until the peer is heard again, only a few frames go (as TCP restarts
  // its window after idle).
  if (in_flight >= kStaleWindowFrames && cfg_.stale_window_ms && now > p.last_heard_ns &&
      now - p.last_heard_ns > uint64_t(cfg_.stale_window_ms) * 1000000) {
    p.window_stalls++;
    tx_clock_uses_ = 0;
    return -FI_EAGAIN;
  }
  TxSlot& s = p.ring[p.next_seq % cfg_.window];
  unlend(s);
  if (!s.frame) s.frame = take_frame();
  uint8_t* f = s.frame.get();
  build_hdr(f, p, kData, p.next_seq, uint16_t(clen + len), now);
  encode_core(f + kBodyOff, hdr);
  s.tail = ref && len && !bundleable(len) ? ref_tail(iov, iovcnt, offset, len, at, &s.head) : nullptr;
  if (s.tail) iov_copy_from(iov, iovcnt, offset, f + at, s.head - at);
  else iov_copy_from(iov, iovcnt, offset, f + at, len);
  unsigned rail = 0;
  if (bundleable(len)) {
    // A small packet: the frame stays open for more until flush().
    open_ = Open{peer, p.next_seq, flen, 1};
  } else {
    seal(f, flen, s.tail, s.head);
    rail = data_rail(p, flen);
    if (!emit(p, rail, f, flen, &s)) {
      // That rail's ring is full: another may have room (a slower rail
      // takes fewer frames).
      unsigned o = other_rail(p, rail);
      if (o == rail || !emit(p, o, f, flen, &s)) {
        tx_clock_uses_ = 0;
        return -FI_EAGAIN;
      }
      rail = o;
    }
  }
  s.len = uint32_t(flen);
  s.rail = uint8_t(rail);
  s.seq = p.next_seq;
  s.sent_ns = now;
  s.resent = false;
  p.next_seq++;
  p.tickets_sent++;
  p.rx_since_ack = 0;  // the ACK rode along
  p.ack_deadline = 0;
  p.tx_frames++;
  p.tx_bytes += flen;
  if (!p.rto_deadline) p.rto_deadline = now + p.rto_ns;
  track(p);
  if (!s.tail) return 0;
  st_.by_ref++;  // frames whose payload stayed in the sender's buffer
  return 1;
}

// Where the payload [offset, offset+len) of iov can stay: all of it in one
// entry, or all but a short first part (an RMA write's offset), which the
// frame then carries (*head: the frame's bytes before the tail).
const uint8_t* EthDevice::ref_tail(const struct iovec* iov, size_t iovcnt, size_t offset, size_t len, size_t at,
                                   uint16_t* head) noexcept {
  size_t first = 0;
  const void* t = iov_at(iov, iovcnt, offset, &first);
  if (!t) return nullptr;
  if (len <= first) {
    *head = uint16_t(at);
    return static_cast<const uint8_t*>(t);
  }
  if (first > kMaxRefHead) return nullptr;
  t = iov_contiguous(iov, iovcnt, offset + first, len - first);
  if (!t) return nullptr;
  *head = uint16_t(at + first);
  return static_cast<const uint8_t*>(t);
}

void EthDevice::want_ack(PeerId peer) noexcept {
  if (!cfg_.reliable || peer >= peers_.size()) return;
  Peer& p = peers_[peer];
  if (p.state != Peer::kUp || p.una == p.next_seq) return;
  if (open_.peer != kNoPeer) close_open();  // the probe goes after every frame
  send_ctrl(p, kProbe);
  st_.ack_asks++;
}

std::unique_ptr<uint8_t[]> EthDevice::take_frame() {
  if (frame_pool_.empty()) return std::unique_ptr<uint8_t[]>(new uint8_t[frame_cap_]);
  std::unique_ptr<uint8_t[]> f = std::move(frame_pool_.back());
  frame_pool_.pop_back();
  return f;
}

// At most a window's worth stays pooled; the rest goes back to the system.
void EthDevice::give_frame(std::unique_ptr<uint8_t[]> f) {
  if (f && frame_pool_.size() < cfg_.window) frame_pool_.push_back(std::move(f));
}

// Frames [from, to) were acknowledged: their buffers go back to the pool.
void EthDevice::release_acked(Peer& p, uint32_t from, uint32_t to) {
  if (p.ring.empty()) return;
  for (uint32_t s = from; seq_lt(s, to); s++) {
    TxSlot& t = p.ring[s % cfg_.window];
    if (t.seq != s) continue;
    // Not sent yet, so no genuine ACK covers it: one that does (broken or
    // forged) must not take the buffer the open frame is still filled in.
    if (open_.peer == p.id && open_.seq == s) continue;
    unlend(t);  // resent since the last flush
    give_frame(std::move(t.frame));
    t.len = 0;
    t.tail = nullptr;  // the sender's buffer is no longer read
  }
}

// The open frame goes out: its final length, the newest acknowledgement
// and window, sealed. If the ring has no room it stays unsent, like a
// frame lost on the wire, and the retransmission timer sends it again.
void EthDevice::close_open() noexcept {
  Open o = open_;
  open_ = Open{};
  Peer& p = peers_[o.peer];
  if (p.ring.empty()) return;
  TxSlot& s = p.ring[o.seq % cfg_.window];
  if (s.seq != o.seq) return;
  uint8_t* f = s.frame.get();
  uint8_t* h = f + kEthHdr;
  put32(h + 28, p.expected);
  put16(h + 32, p.rx_held ? 0 : adv_window_);
  put16(h + 34, uint16_t(o.len - kBodyOff));
  seal(f, o.len);
  s.len = uint32_t(o.len);
  unsigned rail = data_rail(p, o.len);
  if (!emit(p, rail, f, o.len, &s)) {
    unsigned r2 = other_rail(p, rail);
    if (r2 == rail || !emit(p, r2, f, o.len, &s)) return;
    rail = r2;
  }
  s.rail = uint8_t(rail);
}

uint64_t EthDevice::tx_ticket(PeerId peer) const noexcept {
  if (!cfg_.reliable || peer >= peers_.size()) return 0;
  const Peer& p = peers_[peer];
  return (uint64_t(p.incarnation) << kTicketBits) | (p.tickets_sent & kTicketMask);
}

int EthDevice::tx_state(PeerId peer, uint64_t ticket) noexcept {
  if (!cfg_.reliable || peer >= peers_.size()) return 1;
  const Peer& p = peers_[peer];
  if (p.state == Peer::kUnreachable) return -FI_EHOSTUNREACH;
  if ((ticket >> kTicketBits) != p.incarnation) return -FI_ECONNRESET;
  return (ticket & kTicketMask) <= (p.tickets_acked & kTicketMask) ? 1 : 0;
}

// Resends one frame: on `rail`, or (-1) where it went before while that
// rail is usable. False when it did not go (not in flight, or the ring is
// full); *ts gets the timestamp it carries.
bool EthDevice::retransmit(Peer& p, uint32_t seq, int rail, uint32_t* ts) {
  if (seq_lt(seq, p.una) || !seq_lt(seq, p.next_seq)) return false;
  if (open_.peer != kNoPeer) close_open();  // it may be the open frame
  TxSlot& s = p.ring[seq % cfg_.window];
  if (s.seq != seq || !s.len || !s.frame) return false;
  unlend(s);  // sent since the last flush, and rewritten now
  uint8_t* f = s.frame.get();
  FrameHdr h = decode_hdr(f + kEthHdr);
  h.ack = p.expected;
  h.ts = now_us();
  h.ts_echo = 0;  // a resent frame's echo would be stale
  h.hold = 0;
  h.dst_epoch = p.epoch;
  h.window = p.rx_held ? 0 : adv_window_;
  h.csum = 0;
  encode_hdr(f + kEthHdr, h);
  seal(f, s.len, s.tail, s.head);
  unsigned r = rail >= 0 ? unsigned(rail) : rail_usable(p, s.rail) ? s.rail : other_rail(p, s.rail);
  if (!emit(p, r, f, s.len, &s)) return false;
  s.sent_ns = now_ns();
  s.resent = true;
  s.rail = uint8_t(r);
  p.retrans++;
  if (ts) *ts = h.ts;
  return true;
}

void EthDevice::handle_ack(Peer& p, const FrameHdr& h, uint64_t now) {
  uint32_t ack = h.ack, ts_echo = h.ts_echo;
  uint16_t window = h.window;
  // 0 is STOP: nothing new goes until a GO (a later window); a stalled
  // sender probes for it (run_timers), so a lost GO cannot stall it.
  p.peer_window = uint16_t(std::min<uint32_t>(window, cfg_.window));
  if (window && p.persist_ns) p.persist_ns = 0;
  if (!seq_lt(p.una, ack) || !seq_le(ack, p.next_seq)) return;
  p.tickets_acked += ack - p.una;
  release_acked(p, p.una, ack);
  p.una = ack;
  p.tries = 0;
  if (p.recovering) continue_recovery(p, ts_echo);
  if (p.kick_tail && h.type != kNak) continue_kick_tail(p, ts_echo);
  if (ts_echo) {
    // From our timestamp to when the kernel took the echo (where the wire
    // says: our delay in reading it is not the network's), less how long
    // the peer held the frame before answering.
    uint64_t rtt = uint64_t(uint32_t((cfg_.echo_hold ? frame_rx_ns_ : now) / 1000) - ts_echo) * 1000;
    uint64_t held = cfg_.echo_hold ? hold_ns(h.hold) : 0;
    rtt = rtt >= held ? rtt - held : UINT64_MAX;
    if (rtt < 10000000000ull) {
      // The timer must still wait for a peer that answers late: its
      // longest recent hold (a maximum that decays by an eighth a sample)
      // is added to the RTO, as QUIC adds the peer's ACK delay, not to the
      // round trip that tells losses apart. Losses at a peer that was away
      // are reported by the peer itself once back (kick_senders).
      p.hold_ns = std::max(held, p.hold_ns - p.hold_ns / 8);
      if (!p.srtt_ns) {
        p.srtt_ns = rtt;
        p.rttvar_ns = rtt / 2;
      } else {
        uint64_t d = rtt > p.srtt_ns ? rtt - p.srtt_ns : p.srtt_ns - rtt;
        p.rttvar_ns = (3 * p.rttvar_ns + d) / 4;
        p.srtt_ns = (7 * p.srtt_ns + rtt) / 8;
      }
      p.rto_ns = std::clamp<uint64_t>(p.srtt_ns + 4 * p.rttvar_ns + p.hold_ns, uint64_t(cfg_.rto_min_us) * 1000,
                                      uint64_t(cfg_.rto_max_us) * 1000);
    }
  }
  p.rto_deadline = p.una != p.next_seq ? now + p.rto_ns : 0;
}

// An RTO resent `una`: what was sent after it is suspect too. It is resent
// as acknowledgements show the peer is back (continue_recovery), not now:
// a receiver that is only slow would get it all twice.
void EthDevice::start_recovery(Peer& p, uint32_t retx_ts) {
  p.kick_tail = false;  // this recovery covers what a notice's tail had left
  if (!cfg_.tail_recovery || p.una + 1 == p.next_seq) return;  // nothing after it
  if (!p.recovering) st_.recoveries++;
  // Again from the start on every RTO: what this recovery resent before
  // may have been lost as well.
  p.recovering = true;
  p.recover_end = p.next_seq;
  p.recover_next = p.una + 1;
  p.recover_first = true;
  p.recover_ts = retx_ts;  // the timestamp the resent frame carries
}

// Frames were just acknowledged during a recovery. The first
// acknowledgement after the RTO with an echo tells whether it was
// spurious: it echoes the last frame that arrived in order, so an echo
// older than the RTO means an original arrived (the peer was slow, not the
// frame lost) and nothing more is resent; an echo of the resent frame
// means it filled the gap (frames the peer had beyond it were delivered
// with it), and the frames after the new `una` that went before the RTO
// are resent, up to the peer's window, each once per recovery, as
// acknowledgements come.
void EthDevice::continue_recovery(Peer& p, uint32_t ts_echo) {
  bool first = p.recover_first;
  // Without an echo it cannot tell: the next one decides (each in-order
  // arrival is echoed by the next frame back).
  if (first && !ts_echo && seq_lt(p.una, p.recover_end)) return;
  p.recover_first = false;
  bool spurious = first && int32_t(ts_echo - p.recover_ts) < 0;
  if (!seq_lt(p.una, p.recover_end) || spurious) {
    if (spurious) st_.spurious_rto++;
    p.recovering = false;
    return;
  }
  if (seq_lt(p.recover_next, p.una)) p.recover_next = p.una;
  uint32_t limit = p.una + std::max<uint32_t>(p.peer_window, 1);
  if (seq_lt(p.recover_end, limit)) limit = p.recover_end;
  while (seq_lt(p.recover_next, limit)) {
    if (!retransmit(p, p.recover_next)) break;  // the ring is full: the next ACK goes on
    st_.recovery_resends++;
    p.recover_next++;
  }
  if (!seq_lt(p.recover_next, p.recover_end)) p.recovering = false;
}

// The peer drained its ring after the kernel dropped frames, and has
// nothing of ours beyond `una`: what we sent at least a round trip ago and
// is unacknowledged was lost. Up to the peer's window goes now, the rest as
// acknowledgements come (a recovery known not to be spurious). What we sent
// less than a round trip ago may still be on its way; continue_kick_tail
// resends it once acknowledgements show it is not.
void EthDevice::resend_lost_tail(Peer& p, uint64_t now) {
  // At most once per round trip (and 64 frames at a time, as a NAK's
  // bitmap): a forged or repeated notice cannot make us resend more.
  uint64_t rtt = p.srtt_ns ? p.srtt_ns + 4 * p.rttvar_ns : p.rto_ns;
  if (now - p.tail_resent_ns < std::max<uint64_t>(rtt, uint64_t(cfg_.rto_min_us) * 1000)) return;
  uint64_t age = rtt;  // frames younger than a round trip may still be on their way
  uint32_t end = p.una;
  while (seq_lt(end, p.next_seq)) {
    const TxSlot& t = p.ring[end % cfg_.window];
    if (t.seq != end || t.sent_ns + age > now) break;
    end++;
  }
  if (end == p.una) return;  // all of it may still be on its way (this notice resends nothing)
  p.tail_resent_ns = now;
  uint32_t limit = p.una + std::min<uint32_t>(std::max<uint32_t>(p.peer_window, 1), 64);
  if (seq_lt(end, limit)) limit = end;
  uint32_t s = p.una, ts = 0;
  for (; seq_lt(s, limit) && retransmit(p, s, -1, s == p.una ? &ts : nullptr); s++) st_.recovery_resends++;
  st_.kicked++;
  if (seq_lt(s, end)) {
    p.recovering = true;
    p.recover_first = false;
    p.recover_next = s;
    p.recover_end = end;
  } else {
    p.recovering = false;  // an RTO's recovery covered no more than this
  }
  p.kick_tail = s != p.una && seq_lt(end, p.next_seq);
  p.kick_echoed = false;
  p.kick_from = end;
  p.kick_end = p.next_seq;
  p.kick_ts = ts;
  p.kick_burst = 1;
}

// The frames younger than a round trip at a ring-overflow notice: sent
// before the frames the notice had resent, so on their rail they arrived
// before those, if at all. An acknowledgement that covers every frame
// resent so far and stops right there, at the first young frame not
// resent, echoing a resent frame (the peer's in-order arrivals had reached
// one), means that frame was lost: it is resent, with the frames after it,
// one at the first such acknowledgement and twice as many at each next
// (at most the peer's window and 64), each once. An acknowledgement past
// it (the peer has frames beyond: its NAK names the missing ones), a NAK,
// or an echo of an original (the young frames arriving) resends nothing;
// a forged notice costs at most what real acknowledgements ask for.
void EthDevice::continue_kick_tail(Peer& p, uint32_t ts_echo) {
  if (!seq_lt(p.una, p.kick_end)) {
    p.kick_tail = false;
    return;
  }
  if (ts_echo && int32_t(ts_echo - p.kick_ts) >= 0) p.kick_echoed = true;
  else if (ts_echo) return;  // the last in-order arrival is an original
  // It must stop right after what was resent (past it, the peer has frames
  // beyond: its NAK names the missing ones), echo a resent frame or, without
  // an echo (a GO after a STOP has none), come after one that did.
  if (p.recovering || p.una != p.kick_from || !p.kick_echoed) return;
  uint32_t n = std::min<uint32_t>({p.kick_burst, std::max<uint32_t>(p.peer_window, 1), 64, p.kick_end - p.una});
  uint32_t s = p.una;
  for (; s != p.una + n && retransmit(p, s); s++) st_.recovery_resends++;
  p.kick_burst = std::min<uint32_t>(p.kick_burst * 2, 64);
  // What was resent is not resent again: the next acknowledgement that
  // stops short of it is answered by the RTO or a NAK.
  p.kick_from = s;
  if (s == p.kick_end) p.kick_tail = false;
}

// The kernel dropped frames for us (a full receive ring) and the ring is
// drained now: the senders heard lately learn where each of them stands
// (a NAK at `expected`; with nothing beyond it, resend_lost_tail at the
// sender), so a lost tail costs a round trip, not their RTOs.
void EthDevice::kick_senders(uint64_t now) {
  kick_pending_ = false;
  next_kick_ns_ = now + 1000000;  // at most once a millisecond
  st_.kicks++;
  kick_stamp_++;
  for (const std::vector<PeerId>* list : {&heard_ids_, &heard_prev_ids_})
    for (PeerId id : *list) {
      Peer& p = peers_[id];
      if (p.kicked == kick_stamp_ || p.state != Peer::kUp || p.rx_held || p.reorder.empty()) continue;
      p.kicked = kick_stamp_;
      if (p.nak_seq == p.expected && now - p.nak_sent_ns < p.rto_ns / 2) continue;  // told already
      send_ctrl(p, kNak);
      p.nak_seq = p.expected;
      p.nak_sent_ns = now;
    }
}

// Hands the frame's packets to the endpoint. A bundle (records checked in
// handle_frame) goes record by record: when the endpoint has no room for
// one, the records before it stay delivered (rx_part) and the frame waits.
bool EthDevice::deliver(PeerId id, uint8_t flags, const uint8_t* body, size_t len, PacketSink& sink) {
  // handle_frame checked that the core header fits (core_fits, bundle_valid).
  PktHdr h;
  if (!(flags & kFlagBundle)) {
    size_t n = decode_core(body, len, &h);
    RxPacket pkt{up_id(id), &h, body + n, len - n};
    return sink.on_packet(pkt);
  }
  size_t off = 0;
  unsigned k = 0;
  unsigned done = peers_[id].rx_part;
  while (off < len) {
    size_t r = get16(body + off);
    const uint8_t* rec = body + off + kRecHdr;
    off += kRecHdr + r;
    if (k++ < done) continue;
    size_t n = decode_core(rec, r, &h);
    RxPacket pkt{up_id(id), &h, rec + n, r - n};
    if (!sink.on_packet(pkt)) {
      peers_[id].rx_part = uint16_t(k - 1);
      return false;
    }
  }
  peers_[id].rx_part = 0;
  return true;
}

// Delivers what waits in order in p's reorder buffer; false when the
// endpoint has no room for the next one (it stays, the peer is held).
bool EthDevice::deliver_held(PeerId id, PacketSink& sink) {
  uint32_t W = cfg_.window;
  for (;;) {
    Peer& q = peers_[id];
    if (q.reorder.empty()) return true;
    RxSlot& r = q.reorder[q.expected % W];
    if (!r.present) return true;
    FrameHdr rh = decode_hdr(r.frame.data() + kEthHdr);
    if (rh.seq != q.expected) {
      r.present = false;
      continue;
    }
    if (!deliver(id, rh.flags, r.frame.data() + kBodyOff, rh.len, sink)) return false;
    Peer& q2 = peers_[id];
    if (q2.reorder.empty()) return true;  // the session was reset meanwhile
    q2.reorder[q2.expected % W].present = false;
    q2.expected++;
  }
}

// A new session with the peer: sequence state from scratch, a new
// incarnation (tickets of the old one fail), and the endpoint told, so
// that operations of the old session fail and cut messages complete with
// an error.
void EthDevice::reset_peer(PeerId id, PacketSink* sink) {
  Peer& p = peers_[id];
  p.incarnation++;
  st_.resets++;
  if (p.rx_held) {
    p.rx_held = false;
    held_.erase(std::remove(held_.begin(), held_.end(), id), held_.end());
  }
  p.persist_ns = 0;
  p.next_seq = p.una = 1;
  p.tickets_sent = p.tickets_acked = 0;  // tickets count frames of this incarnation
  p.expected = 1;
  p.rx_part = 0;
  if (open_.peer == id) open_ = Open{};
  p.rto_deadline = 0;
  p.tries = 0;
  p.recovering = p.recover_first = p.kick_tail = false;
  p.rx_since_ack = 0;
  p.ack_deadline = 0;
  p.gap_since_ns = 0;
  for (auto& r : p.reorder) r.present = false;
  flush_wires();  // the ring's frames may be lent
  for (auto& t : p.ring) {
    t.seq = 0;
    t.len = 0;
    t.tail = nullptr;
    give_frame(std::move(t.frame));
  }
  if (sink) sink->on_peer_reset(up_id(id));
}

// An unreachable peer was heard again: a new session, under a new epoch
// of ours for it, so the peer resets its side too (its old operations were
// lost with ours).
void EthDevice::revive(PeerId id, uint64_t now, PacketSink& sink) {
  reset_peer(id, &sink);
  Peer& p = peers_[id];
  PM_INFO(FI_LOG_EP_DATA, "peer %s is heard again: new session", format_name(p.name).c_str());
  st_.revived++;
  uint32_t e;
  do e = random32(); while (e == p.my_epoch);
  p.my_epoch = e;
  p.epoch = 0;
  p.gso = false;
  if (p.ring.empty()) p.ring.resize(cfg_.window);
  if (p.reorder.empty()) p.reorder.resize(cfg_.window);
  p.state = Peer::kNew;
  p.tries = p.hello_tries = 0;
  p.probe_gap_ns = 0;
  p.asking_since_ns = 0;
  p.last_heard_ns = now;
}

void EthDevice::declare_unreachable(Peer& p, const char* why) {
  PM_WARN(FI_LOG_EP_DATA, "peer %s unreachable: %s; its operations fail", format_name(p.name).c_str(), why);
  p.state = Peer::kUnreachable;
  p.rto_deadline = p.hello_deadline = p.ack_deadline = 0;
  p.rx_part = 0;
  if (open_.peer != kNoPeer && &peers_[open_.peer] == &p) open_ = Open{};
  p.persist_ns = 0;
  if (p.rx_held) {
    p.rx_held = false;
    held_.erase(std::remove_if(held_.begin(), held_.end(), [&](PeerId h) { return &peers_[h] == &p; }),
                held_.end());
  }
  flush_wires();  // the ring's frames may be lent
  p.ring.clear();
  p.reorder.clear();
}

// The checks before the MAC (handle_frame and mac_burst).
EthDevice::Pre EthDevice::precheck(const uint8_t* f, size_t len, FrameHdr* h) const noexcept {
  if (len < kBodyOff || ((uint16_t(f[12]) << 8) | f[13]) != cfg_.ethertype) return Pre::kBadLen;
  *h = decode_hdr(f + kEthHdr);
  if (h->version != kWireVersion) return Pre::kBadVersion;
  if (h->job != cfg_.job) return Pre::kBadJob;
  if (h->dst_ep != ep_id_) return Pre::kBadEp;
  if (kBodyOff + size_t(h->len) > len) return Pre::kBadLen;
  return Pre::kOk;
}

// The device's half of the validation boundary: the frame's length,
// version, job, endpoint, MAC and checksum, then the session (epochs,
// sequence numbers); only then does the core see the packet (and checks
// the core header: core/rx_check.hpp). No peer state exists for a frame
// that failed any of this.
void EthDevice::handle_frame(unsigned rail, const uint8_t* f, size_t len, PacketSink& sink, uint64_t now,
                             const uint64_t* pre_mac) {
  FrameHdr h;
  switch (precheck(f, len, &h)) {
  case Pre::kOk: break;
  case Pre::kBadLen: st_.bad_len++; return;
  case Pre::kBadVersion: st_.bad_version++; return;
  case Pre::kBadJob: st_.bad_job++; return;
  case Pre::kBadEp: st_.bad_ep++; return;
  }
  PayloadHash ph;
  // pre_mac: mac_burst's, over the same header and payload hash (poll_busy).
  if (cfg_.payload_mac && !pre_mac) ph = payload_hash(payload_key_, f + kBodyOff, h.len);  // h.len < kNhMaxPayload
  if (!authentic(f, ph, pre_mac)) {
    st_.bad_mac++;  // not from a member of this job (or altered)
    return;
  }
  if (cfg_.checksum) {
    uint8_t hdr[kPmHdr];
    memcpy(hdr, f + kEthHdr, kPmHdr);
    put32(hdr + 44, 0);
    put64(hdr + kMacOff, 0);
    uint32_t c = cfg_.payload_mac ? crc32c(0, hdr, kPmHdr) : frame_sum(hdr, f + kBodyOff, h.len);
    if (c != h.csum) {
      st_.bad_csum++;
      return;
    }
  }
  if ((h.type == kData || h.type == kDgram) && !(h.flags & kFlagBundle) && !core_fits(f + kBodyOff, h.len)) {
    st_.bad_len++;  // no room for its core header: would consume a seq and vanish
    return;
  }
  if (h.type < kData || h.type > kDgram || (h.type == kNak && h.len < 8)) {
    st_.bad_len++;
    return;
  }
  if (h.flags & ~kKnownFlags) {
    st_.bad_version++;
    return;
  }
  if ((h.flags & kFlagBundle) && (h.type != kData || !bundle_valid(f + kBodyOff, h.len))) {
    st_.bad_len++;  // records that do not tile the frame
    return;
  }
  if (h.flags & kFlagBundle) st_.rx_bundles++;
  if (cfg_.drop_rate > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < cfg_.drop_rate) {
    st_.injected_drops++;
    return;
  }
  if (!cfg_.reliable && h.type != kDgram) return;
  PeerId id = peer_by_addr(f + 6, h.src_ep);
  Peer& p = peers_[id];
  touched_ = id;
  last_rx_ns_ = now;
  p.last_heard_ns = now;
  if (p.heard_epoch != heard_epoch_) {
    p.heard_epoch = heard_epoch_;
    // More senders than the current shares were made for: smaller shares
    // now, not at the next update (the ACKs about to go carry them).
    if (++heard_now_ > window_active_) set_shares();
    heard_ids_.push_back(id);
  }
  p.probe_gap_ns = 0;
  p.asking_since_ns = 0;
  p.rx_frames++;
  p.rx_bytes += len;
  rails_[rail].rx_frames++;
  rails_[rail].rx_bytes += len;
  const uint8_t* body = f + kBodyOff;

  if (h.type == kDgram) {
    if (!cfg_.reliable && !deliver(id, 0, body, h.len, sink)) st_.held++;  // unreliable: no room, lost
    return;
  }
  auto replayed = [&](uint32_t e) {
    return std::find(std::begin(p.old_epochs), std::end(p.old_epochs), e) != std::end(p.old_epochs);
  };
  if (p.state == Peer::kUnreachable) {
    // Heard again after it was given up: a new session (both sides reset).
    revive(id, now, sink);
    if (h.type != kHello) {
      send_hello(p, kHello);
      p.state = Peer::kHelloSent;
      p.hello_start_ns = now;
      p.hello_deadline = now + p.rto_ns;
      return;
    }
  }
  if (h.type == kHello || h.type == kHelloAck) {
    EthName n;
    if (h.len < kNameLen || !decode_name(body, kNameLen, &n) || n.ep_id != h.src_ep || rail >= n.rails ||
        memcmp(n.mac[rail], f + 6, 6) != 0) {
      st_.bad_len++;
      return;
    }
    if ((h.type == kHelloAck && h.dst_epoch != p.my_epoch) || replayed(h.src_epoch)) {
      st_.stale++;
      return;
    }
    learn_name(id, n, body);
    if (p.epoch && p.epoch != h.src_epoch) {
      PM_INFO(FI_LOG_EP_DATA, "peer %s started a new session (restart); operations of the old one fail",
              format_name(p.name).c_str());
      p.old_epochs[p.old_next++ % 4] = p.epoch;
      reset_peer(id, &sink);
    }
    Peer& q = peers_[id];
    // Learnt once per session: the payload size to the peer (and an
    // atomic's reply) must not change under traffic (a late HELLO_ACK
    // after the session came up without it leaves it as it was).
    if (q.state != Peer::kUp || q.epoch != h.src_epoch)
      q.gso = h.len >= kNameLen + kHelloCapsLen && (get32(body + kNameLen) & kCapGso);
    q.epoch = h.src_epoch;
    if (q.ring.empty()) q.ring.resize(cfg_.window);
    if (q.reorder.empty()) q.reorder.resize(cfg_.window);
    q.state = Peer::kUp;
    std::fill(std::begin(q.rail_heard_ns), std::end(q.rail_heard_ns), now);
    q.hello_deadline = 0;
    q.hello_tries = 0;
    q.peer_window = uint16_t(std::min<uint32_t>(h.window, cfg_.window));
    if (h.type == kHello) send_hello(q, kHelloAck);
    return;
  }
  // Sequenced traffic: both epochs must be the ones of this conversation.
  if (h.dst_epoch != p.my_epoch) {
    st_.stale++;  // meant for an earlier session with this endpoint
    if (now >= p.hello_deadline) {
      if (p.ring.empty()) p.ring.resize(cfg_.window);
      if (p.reorder.empty()) p.reorder.resize(cfg_.window);
      send_hello(p, kHello);
      if (p.state == Peer::kNew) {
        p.state = Peer::kHelloSent;
        p.hello_start_ns = now;
      }
      p.hello_deadline = now + p.rto_ns;
    }
    return;
  }
  if (!p.epoch) {
    if (replayed(h.src_epoch)) {
      st_.replays++;
      return;
    }
    p.epoch = h.src_epoch;  // our HELLO_ACK is still on its way: implied
    if (p.ring.empty()) p.ring.resize(cfg_.window);
    if (p.reorder.empty()) p.reorder.resize(cfg_.window);
    p.state = Peer::kUp;
    std::fill(std::begin(p.rail_heard_ns), std::end(p.rail_heard_ns), now);
  } else if (h.src_epoch != p.epoch) {
    st_.stale++;
    return;
  }
  if (rail < kMaxRails) {
    p.rail_heard_ns[rail] = now;
    p.rail_timeouts[rail] = 0;
    if (p.rail_down[rail]) {
      p.rail_down[rail] = false;
      PM_INFO(FI_LOG_EP_DATA, "rail %u to %s carries frames again", rail, format_name(p.name).c_str());
    }
  }
  handle_ack(p, h, now);
  switch (h.type) {
  case kData: {
    uint32_t W = cfg_.window;
    // The endpoint has no room: the next frame waits here, unacknowledged,
    // and the peer is told to STOP (window 0) until there is room.
    auto stop = [&] {
      Peer& q = peers_[id];
      q.rx_held = true;
      held_.push_back(id);
      st_.held++;
      send_ctrl(q, kAck);
    };
    if (h.seq == p.expected && !p.rx_held) {
      p.last_ts = h.ts;
      p.last_ts_at = frame_rx_ns_;
      p.gap_since_ns = 0;
      if (!deliver(id, h.flags, body, h.len, sink)) {
        RxSlot& r = peers_[id].reorder[h.seq % W];
        r.frame.assign(f, f + kBodyOff + h.len);
        r.present = true;
        stop();
        break;
      }
      Peer& q0 = peers_[id];
      if (q0.reorder.empty()) break;  // the session was reset meanwhile
      q0.expected++;
      // Frames that arrived early and are now in order.
      if (!deliver_held(id, sink)) {
        stop();
        break;
      }
      Peer& q = peers_[id];
      // ACK every ack_every frames; otherwise traffic back carries it, or
      // the delayed-ACK timer sends it.
      if (++q.rx_since_ack >= cfg_.ack_every) send_ctrl(q, kAck);
      else if (!q.ack_deadline) {
        q.ack_deadline = now + uint64_t(cfg_.delayed_ack_us) * 1000;
        if (!q.ack_queued) {
          q.ack_queued = true;
          ack_due_.push_back(id);
        }
      }
    } else if (seq_lt(h.seq, p.expected) || (h.seq == p.expected && p.rx_held)) {
      p.dups++;
      send_ctrl(p, kAck);  // its ACK was lost (or it waits for room): say it again
    } else {
      if (h.seq - p.expected < W) {
        RxSlot& r = p.reorder[h.seq % W];
        if (!r.present) {
          r.frame.assign(f, f + kBodyOff + h.len);
          r.present = true;
          p.ooo++;
        } else {
          p.dups++;
        }
      }
      if (p.rx_held) break;  // no gap: the next frame is here, waiting for room
      // Over a trunk a gap is usually a frame still on a slower rail: a
      // LOSE waits until the gap has lasted a while.
      bool hold = false;
      if (p.rails > 1) {
        if (!p.gap_since_ns) p.gap_since_ns = now;
        hold = now - p.gap_since_ns < std::max<uint64_t>(kNakHoldMinNs, p.srtt_ns / 2);
      }
      if (!hold && (p.nak_seq != p.expected || now - p.nak_sent_ns > p.rto_ns / 2)) {
        send_ctrl(p, kNak);
        p.nak_seq = p.expected;
        p.nak_sent_ns = now;
      }
    }
    break;
  }
  case kNak: {
    uint64_t bits = get64(body);
    if (!bits && h.ack == p.una && seq_lt(p.una, p.next_seq) && cfg_.tail_recovery) {
      // Nothing seen beyond `ack`: the peer's ring overflowed (kick_senders).
      resend_lost_tail(p, now);
      break;
    }
    // A frame that was resent goes again for a NAK only after a quarter of
    // the round trip and of the minimum RTO (the peer repeats a NAK for the
    // same gap after half its RTO), and once per batch of frames read: a
    // repeated or forged NAK does not make it go again and again, nor does
    // one the peer sent before the resend reached it (a second gap's NAK,
    // about a round trip later, on a short link). A frame sent once goes at
    // the first NAK that names it, however short the round trip was.
    uint64_t fresh = std::max<uint64_t>(p.srtt_ns, uint64_t(cfg_.rto_min_us) * 1000) / 4;
    auto named = [&](uint32_t seq) {
      const TxSlot& t = p.ring[seq % cfg_.window];
      if (t.seq == seq && t.resent && t.sent_ns + fresh > now && seq_lt(seq, p.next_seq) && !seq_lt(seq, p.una)) {
        st_.nak_skips++;
        return;
      }
      retransmit(p, seq);
    };
    named(h.ack);
    int top = bits ? 63 - __builtin_clzll(bits) : -1;
    for (int i = 0; i < top; i++)
      if (!(bits & (uint64_t(1) << i))) named(h.ack + 1 + uint32_t(i));
    break;
  }
  case kProbe:
    send_ctrl(p, kAck, int(rail));  // back on the rail it came by: that rail is probed
    break;
  default:
    break;
  }
}

// Receiver-driven flow control: the receive ring is shared by every sender,
// so each is offered its share of it; a sender keeps at most that many
// frames in flight, and a receiver that stops polling stops the senders
// before its ring overflows (the seed's STOP/GO, as credits).
void EthDevice::update_window(uint64_t now) {
  next_window_ns_ = now + 1000000;  // once per millisecond
  refresh_real_offset();
  // A tail dropped by a full ring has no frame after it to say so: the
  // kernel's count is read here (a syscall a millisecond), which also
  // re-arms its per-frame flag.
  if (cfg_.reliable && cfg_.tail_recovery)
    for (Rail& r : rails_) r.wire->rx_dropped();
  size_t cap = 0;
  for (const Rail& r : rails_) cap += r.wire->rx_capacity();
  if (!cap) return;
  // Senders: the peers heard in this 100 ms epoch and the previous one,
  // counted as their frames came (no pass over every peer).
  if (now - heard_epoch_ns_ >= 100000000ull) {
    heard_epoch_ns_ = now;
    heard_prev_ = heard_now_;
    heard_now_ = 0;
    heard_epoch_++;
    heard_prev_ids_.swap(heard_ids_);
    heard_ids_.clear();
  }
  set_shares();
}

// CLOCK_REALTIME − CLOCK_MONOTONIC, from a real-time reading between two
// monotonic ones (not the poll's `now`, which may be a while old).
void EthDevice::refresh_real_offset() {
  timespec a, r, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  clock_gettime(CLOCK_REALTIME, &r);
  clock_gettime(CLOCK_MONOTONIC, &b);
  auto ns = [](const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; };
  real_off_ns_ = ns(r) - (ns(a) + (ns(b) - ns(a)) / 2);
}

void EthDevice::set_shares() {
  size_t cap = 0;
  for (const Rail& r : rails_) cap += r.wire->rx_capacity();
  if (!cap) return;
  size_t active = std::max(heard_now_, heard_prev_);
  window_active_ = active;
  size_t share = cap / std::max<size_t>(active, 1) * 3 / 4;
  adv_window_ = uint16_t(std::clamp<size_t>(share, 2, std::min<uint32_t>(cfg_.window, 65535)));
}

bool EthDevice::needs_timer(const Peer& p) noexcept {
  if (p.state == Peer::kHelloSent) return true;
  if (p.state != Peer::kUp) return false;
  if (p.rto_deadline || (p.peer_window == 0 && p.una == p.next_seq)) return true;
  for (unsigned r = 0; r < p.rails; r++)
    if (p.rail_down[r]) return true;
  return false;
}

void EthDevice::run_timers(uint64_t now) {
  uint64_t rto_max = uint64_t(cfg_.rto_max_us) * 1000;
  uint64_t dead = uint64_t(cfg_.dead_ms) * 1000000;
  st_.timer_passes++;
  // Peers whose timers are all off leave the list; the others stay.
  size_t keep = 0;
  for (size_t i = 0; i < timed_.size(); i++) {
    Peer& p = peers_[timed_[i]];
    st_.timer_visits++;
    run_peer_timers(p, now, rto_max, dead);
    if (needs_timer(p)) timed_[keep++] = p.id;
    else p.timed = false;
  }
  timed_.resize(keep);
}

void EthDevice::run_peer_timers(Peer& p, uint64_t now, uint64_t rto_max, uint64_t dead) {
  {
    if (p.state == Peer::kHelloSent && p.hello_deadline && now >= p.hello_deadline) {
      // Given up only after the retry budget and the dead time both passed
      // without a word from the peer.
      if (++p.hello_tries > cfg_.retries && now - std::max(p.hello_start_ns, p.last_heard_ns) > dead) {
        declare_unreachable(p, "no answer to the handshake");
        return;
      }
      send_hello(p, kHello);
      p.hello_deadline = now + std::min(p.rto_ns << std::min(p.hello_tries, 16u), rto_max);
    }
    if (p.state == Peer::kUp && p.rto_deadline && now >= p.rto_deadline) {
      if (!p.asking_since_ns) p.asking_since_ns = now;
      if (++p.tries > cfg_.retries && unanswered_for(p, now) > dead) {
        declare_unreachable(p, "nothing heard from it for the dead time, and no acknowledgement after the retry budget");
        return;
      }
      int rail = -1;
      if (p.rails > 1) {
        // Nothing heard on the rail the oldest frame took, for a whole
        // RTO: that rail is out of use for this peer until it answers.
        // (Only when another rail was heard well after it: a peer that is
        // silent everywhere is slow, not a rail.)
        unsigned r = p.ring[p.una % cfg_.window].rail;
        bool others_heard = false;
        for (unsigned o = 0; o < p.rails; o++)
          if (o != r && rail_usable(p, o) && p.rail_heard_ns[o] > p.rail_heard_ns[r] + p.rto_ns) others_heard = true;
        // Three such timeouts in a row: a queue on a slow rail can delay
        // one RTO's worth of acknowledgements, not three.
        bool silent = now - p.rail_heard_ns[r] > p.rto_ns && others_heard;
        p.rail_timeouts[r] = silent ? p.rail_timeouts[r] + 1 : 0;
        if (!p.rail_down[r] && p.rail_timeouts[r] >= kRailSilentRtos) {
          p.rail_down[r] = true;
          p.rail_probe_ns[r] = now;
          PM_INFO(FI_LOG_EP_DATA, "rail %u to %s is silent: its frames go on the other rails", r,
                  format_name(p.name).c_str());
          rail_failover(p, r);
        }
        rail = int(other_rail(p, r));
      }
      uint32_t ts;
      if (retransmit(p, p.una, rail, &ts)) start_recovery(p, ts);
      p.rto_deadline = now + std::min(p.rto_ns << std::min(p.tries, 16u), rto_max);
    }
    // The peer said STOP and nothing of ours is in flight: ask it for its
    // window now and then (backing off), so a lost GO cannot stall us.
    if (p.state == Peer::kUp && p.peer_window == 0 && p.una == p.next_seq) {
      if (!p.persist_ns) p.persist_ns = now + p.rto_ns;
      else if (now >= p.persist_ns) {
        send_ctrl(p, kProbe);
        if (!p.asking_since_ns) p.asking_since_ns = now;
        p.persist_ns = now + std::min(p.rto_ns << std::min(++p.tries, 16u), rto_max);
        if (unanswered_for(p, now) > dead) {
          declare_unreachable(p, "no answer to window probes for the dead time");
          return;
        }
      }
    }
    if (p.state == Peer::kUp)
      for (unsigned r = 0; r < p.rails; r++)
        if (p.rail_down[r] && rails_[r].up && now - p.rail_probe_ns[r] >= kRailProbeNs) {
          send_ctrl(p, kProbe, int(r));
          p.rail_probe_ns[r] = now;
        }
  }
}

// When the progress helper must poll again with nothing arriving: the
// earliest owed ACK, retransmission, handshake retry, window probe, rail
// probe or (trunks) link check.
uint64_t EthDevice::next_timer_ns() const noexcept {
  uint64_t t = rails_.size() > 1 ? next_link_ns_ : UINT64_MAX;
  if (tx_pending_) t = now_ns() + 20000;  // a run the ring had no room for (Wire::tx_held)
  if (kick_pending_) t = std::min(t, next_kick_ns_);
  for (PeerId id : ack_due_) t = std::min(t, peers_[id].ack_deadline ? peers_[id].ack_deadline : t);
  for (PeerId id : timed_) {
    const Peer& p = peers_[id];
    if (p.state == Peer::kHelloSent && p.hello_deadline) t = std::min(t, p.hello_deadline);
    if (p.state != Peer::kUp) continue;
    if (p.rto_deadline) t = std::min(t, p.rto_deadline);
    if (p.peer_window == 0 && p.una == p.next_seq) t = std::min(t, p.persist_ns);  // 0: set on the next poll
    for (unsigned r = 0; r < p.rails; r++)
      if (p.rail_down[r]) t = std::min(t, p.rail_probe_ns[r] + kRailProbeNs);
  }
  return t;
}

// Local link state of every rail: a rail whose link went down takes no
// frames, and what it held unacknowledged goes on the others.
void EthDevice::check_links(uint64_t now) {
  next_link_ns_ = now + kLinkCheckNs;
  for (unsigned r = 0; r < rails_.size(); r++) {
    Rail& rl = rails_[r];
    bool up = rl.wire->link_up();
    rl.checks++;
    if (up == rl.up) continue;
    rl.up = up;
    PM_INFO(FI_LOG_EP_DATA, "rail %u (%s) link %s", r, format_name(self_).c_str(), up ? "up" : "down");
    if (up) continue;
    rl.downs++;
    for (Peer& p : peers_)
      if (p.rails > 1) rail_failover(p, r);
  }
}

// Frames, or the timers' turn (see quiet()): the clock (expensive in
// virtual machines) is read only then.
int EthDevice::poll_busy(PacketSink& sink, int budget) noexcept {
  Frame fr[32];
  int total = 0;
  uint64_t now = 0;
  bool drained = true;
  for (unsigned r = 0; r < rails_.size(); r++) {
    Wire& w = *rails_[r].wire;
    if (!w.rx_maybe()) continue;
    int want = std::min(budget - total, 32);
    int n = w.rx_burst(fr, want);
    if (n == want || w.rx_more()) {  // more may wait behind these
      drained = false;
      if (w.rx_crowded()) backlog_ = true;  // not for the rest of a GSO packet in an empty ring
    }
    if (n == 0) continue;
    if (!now) now = now_ns();
    uint64_t pre[32];
    bool has[32];
    bool burst = cfg_.auth && n > 1;
    if (burst) mac_burst(fr, n, pre, has);
    for (int i = 0; i < n; i++) {
      touched_ = kNoPeer;
      // When the kernel took it (a clock step cannot put it in the future
      // or further back than a hold can say); else now.
      frame_rx_ns_ = now;
      if (fr[i].rx_real_ns) {
        int64_t at = int64_t(fr[i].rx_real_ns) - real_off_ns_;
        if (at < int64_t(now) && int64_t(now) - at < 4000000000) frame_rx_ns_ = uint64_t(at);
      }
      handle_frame(r, fr[i].data, fr[i].len, sink, now, burst && has[i] ? &pre[i] : nullptr);
      if (touched_ != kNoPeer) track(peers_[touched_]);
    }
    w.rx_release();
    total += n;
    if (total >= budget) break;
  }
  idle_polls_ = 0;
  if (!now) now = now_ns();
  int n = total;
  if (!held_.empty()) {
    // Peers waiting for room: deliver what the endpoint takes now; a peer
    // whose frames all went gets GO (an ACK with its window).
    auto waiting = held_;
    held_.clear();
    for (PeerId id : waiting) {
      if (!peers_[id].rx_held) continue;
      if (!deliver_held(id, sink)) {
        held_.push_back(id);
        continue;
      }
      Peer& p = peers_[id];
      p.rx_held = false;
      send_ctrl(p, kAck);
    }
  }
  if (!ack_due_.empty()) {
    size_t keep = 0;
    for (PeerId id : ack_due_) {
      Peer& p = peers_[id];
      if (!p.ack_deadline || !p.rx_since_ack) p.ack_deadline = 0;  // a DATA frame carried it
      else if (now >= p.ack_deadline) send_ctrl(p, kAck);  // clears ack_deadline once sent
      if (p.ack_deadline) ack_due_[keep++] = id;            // not due yet, or the ring was full
      else p.ack_queued = false;
    }
    ack_due_.resize(keep);
  }
  if (now >= next_timer_ns_) {
    run_timers(now);
    next_timer_ns_ = now + 10000;
  }
  if (now >= next_window_ns_) update_window(now);
  if (rails_.size() > 1 && now >= next_link_ns_) check_links(now);
  if (drained && backlog_) {
    // A backlog just drained: the ring may have overflowed meanwhile with
    // no frame after the loss to say so (the kernel's count tells).
    backlog_ = false;
    if (cfg_.reliable && cfg_.tail_recovery)
      for (Rail& r : rails_) r.wire->rx_dropped();
  }
  for (Rail& r : rails_)
    if (r.wire->take_losing() && cfg_.reliable && cfg_.tail_recovery) kick_pending_ = true;
  // Only once the ring is drained: a sender's frames still waiting in it
  // would be resent for nothing (and overflow it again).
  if (kick_pending_ && drained && now >= next_kick_ns_) kick_senders(now);
  flush();
  return n;
}

bool EthDevice::peer_alive(PeerId peer) noexcept {
  if (peer >= peers_.size()) return false;
  Peer& p = peers_[peer];
  if (p.state == Peer::kUnreachable) return false;
  if (!cfg_.reliable || p.state != Peer::kUp) return true;
  // Quiet peer: probe it, at doubling intervals (from one RTO up to
  // RTO_MAX) however many operations ask; it is unreachable only after the
  // dead time without a word from it.
  uint64_t now = now_ns();
  uint64_t silent = now - p.last_heard_ns;
  if (unanswered_for(p, now) > uint64_t(cfg_.dead_ms) * 1000000) {
    declare_unreachable(p, "no answer to liveness probes for the dead time");
    return false;
  }
  if (!p.probe_gap_ns) p.probe_gap_ns = p.rto_ns;
  if (silent > p.probe_gap_ns && now - p.probe_sent_ns >= p.probe_gap_ns) {
    if (!p.asking_since_ns) p.asking_since_ns = now;
    send_ctrl(p, kProbe);
    p.probe_sent_ns = now;
    p.probe_gap_ns = std::min(p.probe_gap_ns * 2, uint64_t(cfg_.rto_max_us) * 1000);
    flush();
  }
  return true;
}

bool EthDevice::close_drained() noexcept {
  if (!cfg_.reliable) return true;
  uint64_t now = now_ns();
  bool acked = true;
  uint64_t linger = 0;
  for (Peer& p : peers_) {
    if (p.state != Peer::kUp) continue;
    if (p.rx_since_ack || p.ack_deadline) send_ctrl(p, kAck);  // what arrived, acknowledged now
    if (p.una != p.next_seq) acked = false;
    linger = std::max(linger, 2 * p.rto_ns);
  }
  flush();
  // Everything of ours acknowledged; then stay a little while frames still
  // come (a peer that lost our last ACK resends, and is answered).
  return acked && now - last_rx_ns_ >= std::min<uint64_t>(linger, 20000000);
}

void EthDevice::append_stats(std::string& s, size_t max_peers) const {
  // The longest group, " drops: ...", is 327 characters of text and 31
  // values: at most 928 with every value at its widest (20 digits).
  char buf[1024];
  // Appends what snprintf made of buf (cut at the buffer, never past it).
  auto put = [&](int n) { s.append(buf, size_t(std::clamp(n, 0, int(sizeof buf) - 1))); };
  char name[kNameText];
  s.append(name, format_name(self_, name));
  s += " wire=";
  s += rails_[0].wire->kind();
  // Frames the kernel dropped before we saw them (a full receive ring).
  uint64_t ring_drops = 0;
  for (const Rail& rl : rails_) ring_drops += rl.wire->rx_dropped();
  for (unsigned r = 0; r < rails_.size(); r++) {
    const Rail& rl = rails_[r];
    put(snprintf(buf, sizeof buf, " rail%u: %s tx_frames=%llu tx_bytes=%llu rx_frames=%llu rx_bytes=%llu downs=%llu failovers=%llu link_checks=%llu", r,
             rl.up ? "up" : "down", (unsigned long long)rl.tx_frames, (unsigned long long)rl.tx_bytes,
             (unsigned long long)rl.rx_frames, (unsigned long long)rl.rx_bytes, (unsigned long long)rl.downs,
             (unsigned long long)rl.failovers, (unsigned long long)rl.checks));
    rl.wire->append_counters(s);  // the wire's counters belong to the rail
    s += ';';
  }
  put(snprintf(buf, sizeof buf,
           " drops: bad_len=%llu bad_version=%llu bad_job=%llu bad_ep=%llu bad_csum=%llu stale=%llu "
           "injected=%llu tx_ring_full=%llu bad_mac=%llu replays=%llu held=%llu revived=%llu "
           "resets=%llu auth=%d bundled=%llu rx_bundles=%llu timer_passes=%llu timer_visits=%llu peers=%zu "
           "timed=%zu pooled_frames=%zu rx_ring_drops=%llu recoveries=%llu spurious_rto=%llu "
           "recovery_resends=%llu adv_window=%u kicks=%llu kicked=%llu by_ref=%llu ack_asks=%llu nak_skips=%llu "
           "burst_macs=%llu",
           (unsigned long long)st_.bad_len, (unsigned long long)st_.bad_version,
           (unsigned long long)st_.bad_job, (unsigned long long)st_.bad_ep, (unsigned long long)st_.bad_csum,
           (unsigned long long)st_.stale, (unsigned long long)st_.injected_drops,
           (unsigned long long)st_.tx_full, (unsigned long long)st_.bad_mac,
           (unsigned long long)st_.replays, (unsigned long long)st_.held, (unsigned long long)st_.revived,
           (unsigned long long)st_.resets, int(cfg_.auth), (unsigned long long)st_.bundled,
           (unsigned long long)st_.rx_bundles, (unsigned long long)st_.timer_passes,
           (unsigned long long)st_.timer_visits, peers_.size(), timed_.size(), frame_pool_.size(),
           (unsigned long long)ring_drops, (unsigned long long)st_.recoveries,
           (unsigned long long)st_.spurious_rto, (unsigned long long)st_.recovery_resends, unsigned(adv_window_),
           (unsigned long long)st_.kicks, (unsigned long long)st_.kicked, (unsigned long long)st_.by_ref,
           (unsigned long long)st_.ack_asks, (unsigned long long)st_.nak_skips,
           (unsigned long long)st_.burst_macs));
  for (const Peer& p : peers_) {
    if (max_peers-- == 0) break;
    format_name(p.name, name);
    put(snprintf(buf, sizeof buf,
             "\n  peer %s: tx_frames=%llu tx_bytes=%llu rx_frames=%llu rx_bytes=%llu retrans=%llu dups=%llu "
             "out_of_order=%llu window_stalls=%llu srtt_us=%llu rto_us=%llu window=%u",
             name, (unsigned long long)p.tx_frames, (unsigned long long)p.tx_bytes,
             (unsigned long long)p.rx_frames, (unsigned long long)p.rx_bytes, (unsigned long long)p.retrans,
             (unsigned long long)p.dups, (unsigned long long)p.ooo, (unsigned long long)p.window_stalls,
             (unsigned long long)(p.srtt_ns / 1000), (unsigned long long)(p.rto_ns / 1000), unsigned(p.peer_window)));
  }
}

}  // namespace pm::eth
