// The Ethernet device: per-peer reliability (Go-Back-N for PM, extended:
// piggy-backed coalesced ACKs, LOSE with a selective bitmap, receiver window
// as STOP/GO, RTO from measured RTT, epoch handshake) over a wire backend.
// Unreliable datagram endpoints use the same framing without sequencing.
// Network trunking (PMv2's, improved): one device may drive several rails
// (wires on different NICs) as one channel. The sequence space is per peer,
// not per rail, so the receiver's reorder buffer is the seed's ordering
// queue; large frames are striped round-robin over the usable rails, small
// ones stay on one rail, and a rail whose link goes down or that stops
// hearing from a peer is taken out of use with its unacknowledged frames
// resent on the others (the sequence numbers make duplicates harmless).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <deque>
#include <unordered_map>
#include <vector>

#include "base/clock.hpp"
#include "base/unique_fd.hpp"
#include "device.hpp"
#include "eth_auth.hpp"
#include "eth_wire.hpp"
#include "wire/wire.hpp"

namespace pm::eth {

struct DeviceConfig {
  uint16_t ethertype = kDefaultEtherType;
  uint32_t job = 0;
  uint64_t host = 0;
  bool reliable = true;
  uint32_t window = 128;        // frames in flight per peer
  uint32_t ack_every = 64;      // frames received before an immediate ACK
  uint32_t delayed_ack_us = 50; // otherwise the longest wait for a piggy-back
  uint32_t rto_init_us = 2000;
  uint32_t rto_min_us = 200;
  uint32_t rto_max_us = 1000000;
  uint32_t retries = 40;        // retransmissions of one frame before the peer may be unreachable
  // A peer is declared unreachable only after this long without a frame
  // from it (while frames or probes to it go unanswered): a slow peer
  // answers eventually and is never declared dead for it.
  uint32_t dead_ms = 60000;
  double drop_rate = 0;         // receive-side fault injection
  // Messages above this many bytes go by rendezvous (Device::rndv_threshold):
  // over the wire it saves no copy, only the receiver's buffering of an
  // unexpected message whole (bounded by the endpoint's cap, at which the
  // peer waits): one sender's 256 outstanding sends (tx_size) of 256 KiB
  // fill a quarter of the default cap.
  size_t rndv_threshold = size_t(256) << 10;
  bool checksum = true;
  // Small packets to one peer between two flushes share a frame.
  bool bundle = true;
  // Frames say how long this side held the frame whose timestamp they echo
  // (from the kernel's receive time where the wire gives it), and RTT
  // samples take the peer's hold out and end at the echo's kernel arrival:
  // a descheduled receiver or sender does not inflate the RTT.
  bool echo_hold = true;
  // After a retransmission timeout, the acknowledgement of the resent frame
  // releases the resending of what followed it (a lost tail costs one RTO,
  // not one per frame); off: one frame per RTO.
  bool tail_recovery = true;
  // A peer's window not confirmed by a frame from it for this long is stale
  // (its receiver may share its ring with more senders by now): only a few
  // frames go until the peer is heard again (0: never stale).
  uint32_t stale_window_ms = 10;
  // Frame authentication (eth_auth.hpp): every frame carries a MAC under
  // `key`; frames without a valid one are dropped before any state exists.
  bool auth = false;
  AuthKey key;
  // With `auth`: the MAC also covers the payload through a keyed hash
  // (payload_hash; pmeth_init sets it where the job has a secret: with the
  // default key anyone can sign, so there it would cost without protecting).
  // Peers with the same key agree on it.
  bool payload_mac = false;
};

class EthDevice final : public Device {
 public:
  static std::unique_ptr<EthDevice> open(const DeviceConfig& cfg, std::unique_ptr<Wire> wire,
                                         uint32_t ep_id);
  // A trunk: rails[i] pairs with the peer's rail i (1..kMaxRails rails).
  static std::unique_ptr<EthDevice> open(const DeviceConfig& cfg, std::vector<std::unique_ptr<Wire>> rails,
                                         uint32_t ep_id, int* err);
  // Adds the shared-memory part to this endpoint's name (the composite
  // device does, before any traffic).
  void set_shm_part(uint32_t uid, uint32_t pid, uint64_t key);
  const EthName& self() const noexcept { return self_; }
  // Descriptors that hold this endpoint's well-known id (claim_service_id)
  // for as long as the device lives.
  void keep_claims(std::vector<UniqueFd> claims) { claims_ = std::move(claims); }
  size_t rails() const noexcept { return rails_.size(); }
  ~EthDevice() override;

  const void* name() const noexcept override { return name_; }
  size_t name_len() const noexcept override { return kNameLen; }
  std::string name_str(const void* name, size_t len) const override;
  PeerId resolve(const void* name, size_t len) noexcept override;
  const void* peer_name(PeerId peer, size_t* len) const noexcept override;
  size_t max_payload() const noexcept override { return max_payload_; }
  // Per peer: where both sides take GSO packets, frames 42 bytes shorter
  // (they may travel in one); else as long as the link allows. From any
  // peer, frames as long as the link allows (it may not know about us).
  size_t max_payload(PeerId peer) const noexcept override {
    return peer < peers_.size() && gso_to(peers_[peer]) ? max_payload_ : link_payload_;
  }
  // These count the core header's longest encoding (kCoreHdr); a header
  // that encodes shorter (encode_core) leaves room for more payload.
  size_t max_payload(PeerId peer, const PktHdr& h) const noexcept override {
    return max_payload(peer) + kCoreHdr - core_len(h);
  }
  size_t rx_max_payload(PeerId) const noexcept override { return link_payload_ + kCoreHdr - kCoreMin; }
  size_t rndv_threshold(PeerId, size_t) const noexcept override { return cfg_.rndv_threshold; }
  int send(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
           size_t len) noexcept override {
    return send_frame(peer, hdr, iov, iovcnt, offset, len, false);
  }
  // A probe: the peer answers it with an ACK at once.
  void want_ack(PeerId peer) noexcept override;
  // A full data frame's payload stays where it is when the wires gather
  // (Wire::gathers) and it lies in one iov entry: the frame's slot holds
  // the headers, the payload is read on every (re)send until the ACK.
  int send_ref(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
               size_t len) noexcept override {
    return send_frame(peer, hdr, iov, iovcnt, offset, len, gathers_);
  }
  void flush() noexcept override {
    if (open_.peer != kNoPeer) close_open();
    flush_wires();
    tx_clock_uses_ = 0;
  }
  uint64_t tx_ticket(PeerId peer) const noexcept override;
  int tx_state(PeerId peer, uint64_t ticket) noexcept override;
  int poll(PacketSink& sink, int budget) noexcept override {
    return quiet() ? 0 : poll_busy(sink, budget);
  }
  // The empty poll, inline: true when nothing arrived on any rail and the
  // timers are not due (every kIdleClockPolls empty polls they are); then
  // poll_busy() need not run. An empty poll reads each rail's next receive
  // slot and nothing else.
  bool quiet() noexcept {
    for (const Rail& r : rails_)
      if (r.wire->rx_maybe()) return false;
    if (!held_.empty()) return false;  // packets wait for room in the endpoint
    if (++idle_polls_ < kIdleClockPolls) {
      flush();
      return true;
    }
    return false;
  }
  int poll_busy(PacketSink& sink, int budget) noexcept;
  void tick() noexcept override { idle_polls_ = kIdleClockPolls; }
  // The session incarnation of a peer: bumped whenever its session is reset.
  uint32_t incarnation(PeerId peer) const noexcept {
    return peer < peers_.size() ? peers_[peer].incarnation : 0;
  }
  // The clock and the timers: every so many empty polls, and on every poll
  // of the progress helper (tick()).
  static constexpr unsigned kIdleClockPolls = 16;
  uint64_t next_timer_ns() const noexcept override;
  bool peer_alive(PeerId peer) noexcept override;
  // Peers whose name is known (resolved here, or told in a handshake).
  size_t peer_count() const noexcept {
    return size_t(std::count_if(peers_.begin(), peers_.end(), [](const Peer& p) { return p.name_known; }));
  }
  // Any peer at all: frames are only ever queued to one.
  bool has_peers() const noexcept { return !peers_.empty(); }
  bool close_drained() noexcept override;
  int wait_fd() const noexcept override { return epfd_.get(); }
  void arm_wait(bool armed) noexcept override;
  void drain_wait() noexcept override {}
  void append_stats(std::string& out, size_t max_peers) const override;

  static std::string format_name(const EthName& n);
  // The same into buf (kNameText bytes; always NUL-terminated); returns
  // the length. Allocates nothing.
  static constexpr size_t kNameText = 160;
  static size_t format_name(const EthName& n, char* buf);

 private:
  struct TxSlot {
    std::unique_ptr<uint8_t[]> frame;  // frame_cap_ bytes from the pool while unacknowledged
    uint32_t len = 0;
    uint32_t seq = 0;
    uint64_t sent_ns = 0;
    uint8_t rail = 0;             // where it last went
    bool resent = false;          // sent again since its first time (retransmit)
    uint32_t lent = 0;            // flushes_ when last lent to a wire (Frame::stays)
    const uint8_t* tail = nullptr;  // the payload, in the sender's buffer (send_ref), or in the frame
    uint16_t head = 0;              // with a tail: the frame's bytes before it
  };
  struct RxSlot {
    std::vector<uint8_t> frame;
    bool present = false;
  };
  struct Peer {
    PeerId id = kNoPeer;
    bool timed = false;           // in timed_ (needs the timer pass)
    uint32_t heard_epoch = 0;     // window accounting: last epoch a frame came
    EthName name;
    uint8_t name_bytes[kNameLen] = {0};
    bool name_known = false;      // host id learnt (AV insert or handshake)
    bool gso = false;             // its HELLO of this session said kCapGso
    enum State : uint8_t { kNew, kHelloSent, kUp, kUnreachable } state = kNew;
    uint32_t epoch = 0;           // the peer's epoch, 0 until known
    uint32_t my_epoch = 0;        // ours in this session (new after unreachable)
    uint32_t old_epochs[4] = {};  // the peer's earlier epochs: their HELLOs are replays
    uint8_t old_next = 0;
    bool rx_held = false;         // the endpoint had no room: delivery waits, window 0
    uint64_t hello_start_ns = 0;  // first HELLO of this handshake
    uint64_t persist_ns = 0;      // window 0 from the peer: next probe for its GO
    uint64_t probe_gap_ns = 0;    // liveness probes: doubling interval
    // transmit side
    uint32_t next_seq = 1;        // next sequence number to use
    uint32_t una = 1;             // oldest unacknowledged
    uint32_t incarnation = 0;     // bumped on reset: older tickets fail
    uint32_t probes = 0;          // liveness probes without an answer
    uint16_t peer_window = 0;
    std::vector<TxSlot> ring;
    uint64_t rto_ns = 0, srtt_ns = 0, rttvar_ns = 0;
    uint64_t hold_ns = 0;         // the peer's longest recent hold before answering (part of the RTO)
    uint64_t tail_resent_ns = 0;  // last resend_lost_tail
    uint64_t rto_deadline = 0;    // 0: no timer
    uint32_t tries = 0;
    // Tail recovery (cfg.tail_recovery): after an RTO resent `una`, frames
    // [recover_next, recover_end) are resent as acknowledgements come back,
    // unless the first one shows the originals arrived (a spurious RTO).
    uint32_t recover_end = 0, recover_next = 0;
    bool recovering = false;
    bool recover_first = false;   // no acknowledgement since the RTO yet
    uint32_t recover_ts = 0;      // the RTO's resent frame's timestamp (echoes before it: originals)
    // After a ring-overflow notice (resend_lost_tail): the frames then
    // younger than a round trip, [kick_from, kick_end), resent as
    // acknowledgements show them lost (continue_kick_tail): kick_burst
    // frames at the next one, twice as many at each after.
    bool kick_tail = false;
    bool kick_echoed = false;  // an acknowledgement echoed a frame resent from kick_ts on
    uint32_t kick_from = 0, kick_end = 0, kick_ts = 0, kick_burst = 1;
    uint32_t kicked = 0;          // kick_stamp_ of the last kick it got
    uint64_t hello_deadline = 0;
    uint32_t hello_tries = 0;
    uint64_t tickets_sent = 0;    // frames ever sent in this incarnation
    uint64_t tickets_acked = 0;
    // receive side
    uint32_t expected = 1;
    uint16_t rx_part = 0;         // records of the bundle at `expected` already delivered
    uint32_t rx_since_ack = 0;
    uint64_t ack_deadline = 0;    // nonzero: an ACK is owed by then
    bool ack_queued = false;      // in ack_due_ (at most once)
    uint32_t last_ts = 0;         // newest timestamp seen, echoed back
    uint64_t last_ts_at = 0;      // when the frame that carried it arrived
    uint64_t nak_sent_ns = 0;
    uint32_t nak_seq = 0;
    std::vector<RxSlot> reorder;
    uint64_t gap_since_ns = 0;    // trunks: when the current reorder gap opened
    // rails (trunks): how many are shared with this peer, which ones are
    // out of use for it, when each last carried a frame from it
    uint8_t rails = 1;
    uint8_t tx_rr = 0, ack_rr = 0;
    bool rail_down[kMaxRails] = {};
    uint64_t rail_heard_ns[kMaxRails] = {};
    uint64_t rail_probe_ns[kMaxRails] = {};
    uint32_t rail_timeouts[kMaxRails] = {};  // RTOs in a row with that rail silent
    uint64_t last_heard_ns = 0;
    // Since when we ask (resend, probe) without an answer (0: not asking).
    // Death is decided on it, not on the silence alone: a peer that was
    // quiet because nobody asked it anything is not dead for it.
    uint64_t asking_since_ns = 0;
    uint64_t probe_sent_ns = 0;
    // statistics
    uint64_t tx_frames = 0, tx_bytes = 0, rx_frames = 0, rx_bytes = 0, retrans = 0, dups = 0, ooo = 0,
             window_stalls = 0;
  };

  struct Rail {
    std::unique_ptr<Wire> wire;
    bool up = true;               // local link state
    uint64_t tx_frames = 0, tx_bytes = 0, rx_frames = 0, rx_bytes = 0, downs = 0, failovers = 0, checks = 0;
  };

  EthDevice(const DeviceConfig& cfg, std::vector<std::unique_ptr<Wire>> rails, uint32_t ep_id);
  PeerId peer_by_addr(const uint8_t* mac, uint32_t ep_id);
  void learn_name(PeerId id, const EthName& n, const void* bytes);
  bool rail_usable(const Peer& p, unsigned r) const {
    return r < p.rails && rails_[r].up && !p.rail_down[r];
  }
  unsigned ctrl_rail(Peer& p);
  unsigned data_rail(Peer& p, size_t flen);
  unsigned other_rail(const Peer& p, unsigned r) const;
  void rail_failover(Peer& p, unsigned r);
  void check_links(uint64_t now);
  void reset_peer(PeerId id, PacketSink* sink);
  void revive(PeerId id, uint64_t now, PacketSink& sink);
  bool deliver_held(PeerId id, PacketSink& sink);
  // `pre`: the MAC this frame's input gives, computed already (mac_burst).
  bool authentic(const uint8_t* f, const PayloadHash& ph, const uint64_t* pre = nullptr) const;
  // The MACs of a burst's frames, four at a time (with payload_mac, over
  // each payload's hash, computed first): pre[i] for frame i (has[i]
  // false: not computed, the frame fails a check that comes before it).
  void mac_burst(const Frame* fr, int n, uint64_t* pre, bool* has);
  // The checks before the MAC, cheapest first (length, EtherType, version,
  // job, endpoint, the payload's length): what a frame must pass for its
  // MAC to be worth computing. `h`: its header, decoded.
  enum class Pre : uint8_t { kOk, kBadLen, kBadVersion, kBadJob, kBadEp };
  Pre precheck(const uint8_t* f, size_t len, FrameHdr* h) const noexcept;
  void sign(uint8_t* f, const PayloadHash& ph) const;
  // The payload's keyed hash (payload_mac) of a frame as seal() took it.
  PayloadHash body_hash(const uint8_t* f, size_t len, const uint8_t* tail, size_t head) const;
  uint32_t now_us() const;
  void build_hdr(uint8_t* f, Peer& p, uint8_t type, uint32_t seq, uint16_t len, uint64_t now = 0);
  void seal(uint8_t* f, size_t len, const uint8_t* tail = nullptr, size_t head = 0);
  // send_ref: at most this much of a payload's start is copied into the frame.
  static constexpr size_t kMaxRefHead = 64;
  // `at`: where the payload begins in the frame (after its core header).
  static const uint8_t* ref_tail(const struct iovec* iov, size_t iovcnt, size_t offset, size_t len, size_t at,
                                 uint16_t* head) noexcept;
  int send_frame(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset, size_t len,
                 bool ref) noexcept;
  bool emit(Peer& p, unsigned rail, uint8_t* f, size_t len, TxSlot* lend = nullptr);
  // The wires hand on what they queued. Frames lent to them (emit's
  // `lend`) are theirs to read until then: a lent frame is changed or
  // freed only after unlend().
  void flush_wires() noexcept {
    if (!tx_pending_) return;
    tx_pending_ = false;
    flushes_++;
    for (Rail& r : rails_) {
      r.wire->tx_flush();
      if (r.wire->tx_held()) tx_pending_ = true;  // again at the next flush (copies: nothing lent)
    }
  }
  void unlend(const TxSlot& s) noexcept {
    if (s.lent == flushes_) flush_wires();
  }
  void send_ctrl(Peer& p, uint8_t type, int rail = -1);
  void send_hello(Peer& p, uint8_t type);
  bool retransmit(Peer& p, uint32_t seq, int rail = -1, uint32_t* ts = nullptr);
  void handle_frame(unsigned rail, const uint8_t* f, size_t len, PacketSink& sink, uint64_t now,
                    const uint64_t* pre_mac = nullptr);
  void handle_ack(Peer& p, const FrameHdr& h, uint64_t now);
  void start_recovery(Peer& p, uint32_t retx_ts);
  void resend_lost_tail(Peer& p, uint64_t now);
  void kick_senders(uint64_t now);
  void continue_recovery(Peer& p, uint32_t ts_echo);
  void continue_kick_tail(Peer& p, uint32_t ts_echo);
  void refresh_real_offset();
  bool deliver(PeerId id, uint8_t flags, const uint8_t* body, size_t len, PacketSink& sink);
  void close_open() noexcept;
  bool bundleable(size_t len) const noexcept { return cfg_.bundle && kFrameOverhead + len <= frame_cap_ / 2; }
  void run_timers(uint64_t now);
  void run_peer_timers(Peer& p, uint64_t now, uint64_t rto_max, uint64_t dead);
  // Timers visit only the peers that have one running (timed_), so an idle
  // endpoint's cost does not grow with its peers.
  static bool needs_timer(const Peer& p) noexcept;
  void track(Peer& p) {
    if (!p.timed && needs_timer(p)) {
      p.timed = true;
      timed_.push_back(p.id);
    }
  }
  // Transmit frames come from a pool and go back to it when acknowledged:
  // memory follows the frames in flight, not the peers ever talked to.
  std::unique_ptr<uint8_t[]> take_frame();
  void give_frame(std::unique_ptr<uint8_t[]> f);
  void release_acked(Peer& p, uint32_t from, uint32_t to);
  void update_window(uint64_t now);
  void set_shares();
  void declare_unreachable(Peer& p, const char* why);
  // How long the peer has left us asking unanswered (0: not asking).
  static uint64_t unanswered_for(const Peer& p, uint64_t now) noexcept {
    if (!p.asking_since_ns) return 0;
    return std::min(now - p.asking_since_ns, now - p.last_heard_ns);
  }

  DeviceConfig cfg_;
  std::vector<UniqueFd> claims_;
  std::vector<Rail> rails_;
  UniqueFd epfd_;                 // every rail's fd while armed
  bool armed_ = false;
  uint32_t ep_id_;
  uint32_t epoch_;
  EthName self_;
  uint8_t name_[kNameLen];
  size_t max_payload_;
  size_t link_payload_;           // from the links' MTU: peers that take no GSO packets
  bool adv_gso_ = false;          // every rail takes GSO packets: the HELLO says so
  bool gso_to(const Peer& p) const noexcept { return adv_gso_ && p.gso; }
  size_t frame_cap_;              // the largest frame: Ethernet header + MTU
  // The data frame being filled with small packets for one peer (the
  // seed's network burst): it goes out at flush(), or when the next packet
  // is for another peer or does not fit.
  struct Open {
    PeerId peer = kNoPeer;
    uint32_t seq = 0;
    size_t len = 0;               // bytes of the frame so far
    unsigned recs = 0;            // packets in it
  } open_;
  std::deque<Peer> peers_;       // deque: references stay valid as it grows
  struct AddrKey {
    uint64_t mac = ~0ull;  // no MAC (48 bits) is this
    uint32_t ep = 0;
    bool operator==(const AddrKey& o) const { return mac == o.mac && ep == o.ep; }
  };
  struct AddrHash {
    size_t operator()(const AddrKey& k) const { return std::hash<uint64_t>()(k.mac * 31 + k.ep); }
  };
  std::unordered_map<AddrKey, PeerId, AddrHash> by_addr_;
  AddrKey last_addr_;               // the address peer_by_addr found last, and its peer
  PeerId last_peer_ = kNoPeer;
  std::vector<uint8_t> scratch_;
  PayloadKey payload_key_;               // payload_mac only
  const uint8_t* sealed_ = nullptr;      // the frame seal() took last, and its payload's hash
  PayloadHash sealed_hash_;
  std::vector<PeerId> ack_due_;   // peers owed an ACK (delayed-ACK timer)
  std::vector<PeerId> held_;      // peers whose next frame waits for room
  std::vector<PeerId> timed_;     // peers with a timer running (needs_timer)
  PeerId touched_ = kNoPeer;      // the peer the frame being handled came from
  std::vector<std::unique_ptr<uint8_t[]>> frame_pool_;
  // Peers heard in the current and the previous 100 ms (receive window
  // shares), counted as frames arrive.
  uint32_t heard_epoch_ = 1;
  uint64_t heard_epoch_ns_ = 0;
  size_t heard_now_ = 0, heard_prev_ = 0;
  size_t window_active_ = 0;      // the senders adv_window_ was shared among
  // The peers heard in this epoch and the previous one (whom to kick).
  std::vector<PeerId> heard_ids_, heard_prev_ids_;
  bool kick_pending_ = false;     // the kernel dropped frames: kick_senders()
  bool backlog_ = false;          // a burst found more frames than it took
  uint64_t next_kick_ns_ = 0;
  uint32_t kick_stamp_ = 0;
  uint64_t last_rx_ns_ = 0;       // any frame (close lingers while they come)
  // CLOCK_REALTIME minus CLOCK_MONOTONIC (wires stamp frames in real time),
  // refreshed with the receive window (every millisecond of polling).
  int64_t real_off_ns_ = 0;
  uint64_t frame_rx_ns_ = 0;      // when the frame being handled arrived (monotonic)
  std::mt19937_64 rng_;
  uint64_t next_timer_ns_ = 0;
  uint64_t next_window_ns_ = 0;
  uint64_t next_link_ns_ = 0;
  // The clock for the data frames that go (a read costs tens of ns in
  // virtual machines): read afresh for a message's first frame, after a
  // flush or a refused frame, and every kTxClockFrames-th frame; else the
  // stamp of this message's frame built just before (no application code
  // runs between the frames of one message that are not refused).
  static constexpr unsigned kTxClockFrames = 8;
  uint64_t tx_clock(PeerId peer, uint64_t msg) noexcept {
    if (tx_clock_uses_++ % kTxClockFrames == 0 || peer != tx_clock_peer_ || msg != tx_clock_msg_) {
      tx_clock_ns_ = now_ns();
      tx_clock_uses_ = 1;
      tx_clock_peer_ = peer;
      tx_clock_msg_ = msg;
    }
    return tx_clock_ns_;
  }
  uint64_t tx_clock_ns_ = 0, tx_clock_msg_ = 0;
  PeerId tx_clock_peer_ = kNoPeer;
  unsigned tx_clock_uses_ = 0;  // 0: read afresh
  bool tx_pending_ = false;         // frames queued since the last flush
  bool gathers_ = true;             // every rail's wire takes frames in two pieces (send_ref)
  uint32_t flushes_ = 1;            // flush_wires() calls (a TxSlot's lent: 0 is never current)
  unsigned idle_polls_ = 0;
  uint16_t adv_window_ = 0;         // receive window offered to each peer
  struct Stats {
    uint64_t bad_len = 0, bad_version = 0, bad_job = 0, bad_ep = 0, bad_csum = 0, stale = 0,
             injected_drops = 0, tx_full = 0, bad_mac = 0, replays = 0, held = 0, revived = 0,
             resets = 0, bundled = 0, rx_bundles = 0, timer_visits = 0, timer_passes = 0,
             recoveries = 0, spurious_rto = 0, recovery_resends = 0, kicks = 0, kicked = 0,
             by_ref = 0, ack_asks = 0, nak_skips = 0, burst_macs = 0;
  } st_;
};

} // namespace pm::eth
