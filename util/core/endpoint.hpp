// The RDM endpoint: two-sided messaging semantics over one device. The send
// side (ep_tx.cpp) picks eager / segmented / rendezvous per message and keeps
// per-peer FIFO order; the receive side (ep_rx.cpp) matches, reassembles,
// single-copies and completes. Everything runs under the domain lock.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <rdma/fi_endpoint.h>

#include "abi/fid_box.hpp"
#include "base/list.hpp"
#include "core/live_stats.hpp"
#include "core/cq.hpp"
#include "core/rx_check.hpp"
#include "core/tag_matcher.hpp"
#include "device.hpp"

namespace pm {

class Av;
class Cntr;
class Domain;
class Mr;

// Where an RMA or atomic targets (fi_rma_iov / fi_rma_ioc, one entry).
struct RmaTarget {
  uint64_t addr;
  size_t len;
  uint64_t key;
};

// Whether a posting call writes a success completion as its flags say
// (fi_send, fi_sendmsg with or without FI_INJECT, ...) or never: fi_inject
// and its kin (fi_msg(3): "no CQ entry will be written if the transfer
// completes successfully"; the FI_INJECT operation flag alone does not
// suppress the completion).
enum class SuccessEntry : uint8_t { kByFlags, kNever };

struct TxOp {
  ListHook hook;
  enum State : uint8_t { kFree, kQueued, kWaitCts, kStreaming, kWaitFin, kWaitAck, kWaitResp };
  State state = kFree;
  uint32_t index = 0;
  uint32_t gen = 0;
  void* context = nullptr;
  uint64_t cq_flags = 0;     // FI_SEND | FI_MSG / FI_TAGGED ...
  bool completion = true;
  bool wait_ack = false;     // FI_TRANSMIT_COMPLETE: complete when the peer has it
  bool by_ref = false;       // the device reads its buffer until the ACK (Device::send_ref)
  bool injected = false;     // the payload was the caller's only during the call (FI_INJECT)
  bool ref_decided = false;  // by_ref, in kWaitAck: it ends with ref_err once the device lets go
  int ref_err = 0;
  bool silent = false;       // the provider's own (a target's response): no events
  bool helped = false;       // it wrote its tail of a shared single copy (kPktHelp): once
  struct iovec res[kMaxIov]; // fetching atomic: where the old values go
  size_t rescnt = 0;
  PeerId peer = kNoPeer;
  PktHdr hdr{};              // op, flags, tag, cq_data, msg_len, msg_id
  struct iovec iov[kMaxIov];
  size_t iovcnt = 0;
  size_t sent = 0;           // payload bytes handed to the device
  size_t limit = 0;          // bytes to stream (CTS-accepted length)
  uint64_t start_ns = 0;
  uint64_t ticket = 0;       // device delivery ticket of the last packet
  std::unique_ptr<uint8_t[]> inject;  // copy of an injected payload, operands, results
  size_t inject_cap = 0;
};

// A message being reassembled from DATA packets, keyed by (peer, msg_id).
struct Assembly {
  PeerId peer = kNoPeer;
  RecvOp* recv = nullptr;    // destination receive (nullptr: unexpected)
  Unexp* unexp = nullptr;    // or unexpected buffer
  size_t base = 0;           // offset inside the receive (multi-recv)
  size_t total = 0;          // bytes that will arrive
  size_t msg_len = 0;        // length the sender sent
  size_t received = 0;
  uint64_t tag = 0, data = 0;
  uint8_t flags = 0;
  uint64_t start_ns = 0;
  // The device was asked which path this rendezvous takes (prefer_read_remote)
  // and must hear how it ended (note_transfer): 1 it chose the copy path,
  // 2 single copy, which failed and fell back to the copy path.
  uint8_t asked = 0;
  // A shared single copy (kPktHelp): the receiver read the head, the sender
  // writes the rest. kHelpWaiting: the head is in; kHelpHeadFailed: the
  // receiver's read failed (after the sender's answer, the copy path).
  enum : uint8_t { kNoHelp, kHelpWaiting, kHelpHeadFailed };
  uint8_t help = kNoHelp;
  size_t head = 0;                // the part this side read
  std::vector<RemoteIov> riov;    // the sender's buffer (to read the rest if it cannot write)
};

struct AsmKey {
  PeerId peer;
  uint64_t msg_id;
  bool operator==(const AsmKey& o) const { return peer == o.peer && msg_id == o.msg_id; }
};
struct AsmKeyHash {
  size_t operator()(const AsmKey& k) const { return std::hash<uint64_t>()(k.msg_id * 0x9E3779B97F4A7C15ull ^ k.peer); }
};

// The messages being assembled. A stream's frames look up the same one,
// frame after frame: the one found last is kept, and found again without
// hashing. An element stays where it is until it is erased (inserting
// moves none), so only erase and clear forget it.
class AsmTable {
 public:
  using Map = std::unordered_map<AsmKey, Assembly, AsmKeyHash>;
  AsmTable() = default;
  AsmTable(const AsmTable&) = delete;  // a copy's cache would point into this map
  AsmTable& operator=(const AsmTable&) = delete;
  Assembly* find(const AsmKey& k) {
    if (hit_ && hit_key_ == k) return hit_;
    auto it = map_.find(k);
    if (it == map_.end()) return nullptr;
    hit_key_ = k;
    hit_ = &it->second;
    return hit_;
  }
  Assembly& operator[](const AsmKey& k) { return map_[k]; }
  size_t count(const AsmKey& k) const { return map_.count(k); }
  void erase(const AsmKey& k) {
    hit_ = nullptr;
    map_.erase(k);
  }
  Map::iterator erase(Map::iterator it) {
    hit_ = nullptr;
    return map_.erase(it);
  }
  void clear() {
    hit_ = nullptr;
    map_.clear();
  }
  bool empty() const { return map_.empty(); }
  size_t size() const { return map_.size(); }
  Map::iterator begin() { return map_.begin(); }
  Map::iterator end() { return map_.end(); }
  Map::const_iterator begin() const { return map_.begin(); }
  Map::const_iterator end() const { return map_.end(); }

 private:
  Map map_;
  AsmKey hit_key_{kNoPeer, 0};
  Assembly* hit_ = nullptr;
};

struct PeerState {
  IntrusiveList<TxOp, &TxOp::hook> queue;  // FIFO of ops not fully sent
  bool active = false;                     // in the active-peer list
  fi_addr_t addr = FI_ADDR_NOTAVAIL;       // cached reverse lookup
  uint64_t addr_gen = 0;
  bool no_help = false;  // it answered a shared single copy with a failure: not asked again
  // Unexpected messages fill the peer (kPktRndvHint): eager messages of
  // rendezvous size (over rndv_threshold_) go by rendezvous until it says
  // otherwise; and whether we said so to it.
  bool rndv_asked = false;
  bool rndv_told = false;
};

class Endpoint final : public PacketSink {
 public:
  Endpoint(Domain& dom, const fi_info& info, std::unique_ptr<Device> dev, void* context);
  ~Endpoint();
  fid_ep* fid() { return &box_.fid; }
  static Endpoint* from(fid_ep* f) { return self_of<Endpoint>(f); }
  static Endpoint* from(fid_t f) { return self_of_fid<Endpoint, fid_ep>(f); }

  // control path
  int bind(struct fid* bfid, uint64_t flags);
  int enable();
  int close();
  int getname(void* addr, size_t* len);
  ssize_t cancel(void* context);
  int getopt(int level, int optname, void* optval, size_t* optlen);
  int setopt(int level, int optname, const void* optval, size_t optlen);

  // data path (domain lock taken by the caller)
  ssize_t send(const struct iovec* iov, size_t iovcnt, fi_addr_t dest, uint64_t tag,
               uint64_t data, void* context, uint64_t flags, bool tagged,
               SuccessEntry entry = SuccessEntry::kByFlags);
  ssize_t recv(const struct iovec* iov, size_t iovcnt, fi_addr_t src, uint64_t tag,
               uint64_t ignore, void* context, uint64_t flags, bool tagged);
  // one-sided (ep_rma.cpp)
  ssize_t rma(bool write, const struct iovec* iov, size_t iovcnt, fi_addr_t dest,
              const RmaTarget& t, uint64_t data, void* context, uint64_t flags,
              SuccessEntry entry = SuccessEntry::kByFlags);
  ssize_t atomic(const struct iovec* iov, size_t iovcnt, const struct iovec* cmp, size_t cmpcnt,
                 const struct iovec* res, size_t rescnt, fi_addr_t dest, const RmaTarget& t,
                 fi_datatype dt, fi_op op, void* context, uint64_t flags, int kind,
                 SuccessEntry entry = SuccessEntry::kByFlags);
  int atomic_valid(fi_datatype dt, fi_op op, int kind, size_t* count) const;

  // progress (lock held)
  void progress();
  bool on_packet(const RxPacket& pkt) noexcept override;
  void on_peer_reset(PeerId peer) noexcept override;
  // For the progress helper (lock held). tick(): time passed without polls;
  // the next progress() runs the device's and the endpoint's timers.
  // helper_need(): what the endpoint needs while the application is away:
  // kPoll, polling once per interval (work waits for room, replies or
  // acknowledgements that no packet of ours will announce); kTimers, a look
  // now and then (operations wait on peers: liveness); kNone, nothing until
  // a packet arrives.
  enum class Need { kNone, kTimers, kPoll };
  void tick() {
    dev_->tick();
    poll_count_ |= 63;
  }
  Need helper_need() const {
    if (!active_peers_.empty() || !ctrl_.empty() || !streams_.empty() || !acking_.empty() ||
        !pending_reads_.empty() || !pending_atomics_.empty() || rndv_release_due())
      return Need::kPoll;
    if (!waiting_.empty() || !assemblies_.empty() || !rma_in_.empty()) return Need::kTimers;
    return Need::kNone;
  }

  Device& device() { return *dev_; }
  Domain& domain() { return dom_; }
  uint64_t tx_op_flags() const { return tx_op_flags_; }
  uint64_t rx_op_flags() const { return rx_op_flags_; }
  size_t inject_size() const { return inject_size_; }
  // Operations that can still be posted (fi_tx_size_left / fi_rx_size_left).
  size_t tx_left() const { return tx_free_.size(); }
  size_t rx_left() const { return rx_size_ - rx_outstanding_; }

 private:
  // tx (ep_tx.cpp)
  TxOp* alloc_tx();
  void free_tx(TxOp* op);
  TxOp* tx_by_id(uint64_t msg_id);
  bool advance_tx(TxOp* op);          // true when the op left the queue head
  void progress_tx();
  void progress_streams();
  void complete_tx(TxOp* op, int err);
  void sent_all(TxOp* op);           // last packet handed over
  void progress_acks();
  void fail_peer_ops(PeerId peer, int err);
  void finish_by_ref(TxOp* op, int err, uint64_t ticket);
  void on_cts(const CheckedPacket& pk);
  void on_fin(const CheckedPacket& pk);
  void on_help(const CheckedPacket& pk);
  void on_helped(const CheckedPacket& pk);
  void assembled(const Assembly& done);
  bool ask_help(PeerId peer, RecvOp* r, size_t base, size_t head, size_t tail, uint64_t msg_id);
  // A sender may still write into a receive of a shared single copy.
  bool help_pending() const {
    for (const auto& [k, a] : assemblies_)
      if (a.help != Assembly::kNoHelp) return true;
    return false;
  }
  void send_ctrl(PeerId peer, uint8_t op, uint64_t msg_id, uint64_t value, uint8_t flags = 0);
  void flush_ctrl();
  void check_timers();
  ssize_t queue_op(TxOp* op, bool copy_payload, bool more = false);
  uint8_t* op_buffer(TxOp* op, size_t bytes);  // op->inject, at least `bytes`  // FIFO per peer, sending what fits now
  void count_tx(const TxOp* op, bool ok);

  // one-sided target side and replies (ep_rma.cpp)
  // Handlers take only packets that passed the validation boundary
  // (rx_check.hpp); false = "no room now", the device offers it again.
  bool on_write(const CheckedPacket& pk);
  bool on_rma_cma(const CheckedPacket& pk);
  bool on_read(const CheckedPacket& pk);
  bool on_atomic(const CheckedPacket& pk);
  void on_rma_reply(const CheckedPacket& pk);
  void start_read_resp(PeerId peer, const PktHdr& h);
  void refuse(PeerId peer, const char* what, uint64_t key, int err);
  void remote_event(Mr* mr, bool write, const PktHdr* h);

  // rx (ep_rx.cpp)
  bool on_eager(const CheckedPacket& pk);
  bool on_data(const CheckedPacket& pk);
  bool on_rts(const CheckedPacket& pk);
  bool id_in_use(PeerId peer, uint64_t msg_id);
  bool unexp_room(size_t bytes);
  Unexp* new_unexp(const CheckedPacket& pk, size_t bytes);
  void drop(PeerId peer, const char* why);
  bool match_incoming(PeerId peer, const PktHdr& h, RecvOp** r, size_t* base);
  void deliver_rts(RecvOp* r, size_t base, PeerId peer, const PktHdr& h,
                   const RemoteIov* riov, size_t riovcnt);
  void deliver_unexpected(RecvOp* r, Unexp* u);
  void place_unexpected(RecvOp* r, Unexp* u, size_t base);
  void finish_recv(RecvOp* r, size_t base, size_t msg_len, size_t copied, const PktHdr& h,
                   PeerId peer);
  void complete_recv_err(RecvOp* r, int err, size_t len);
  void write_rx(const Completion& c, PeerId peer);
  ssize_t peek(const RecvOp& want);
  void discard(Unexp* u);
  void free_recv(RecvOp* r);
  RecvOp* alloc_recv();
  void multi_recv_done(RecvOp* r, Completion& c);

  // shared helpers
  PeerId peer_of(fi_addr_t addr);
  fi_addr_t addr_of(PeerId peer);
  PeerState& peer_state(PeerId peer);
  void write_cq(Cq* cq, const Completion& c);
  bool wants_success(uint64_t flags, SuccessEntry entry) const {
    return entry == SuccessEntry::kByFlags && (!selective_tx_ || (flags & FI_COMPLETION));
  }
  std::string peer_str(PeerId peer) const;
  void append_endpoint_stats(std::string& out) const;  // the endpoint's own line of the statistics
  void publish_live();

  FidBox<fid_ep, Endpoint> box_;
  Domain& dom_;
  fi_info* info_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<LiveStats> live_;  // pmstat's page (FI_<PROV>_LIVE_STATS)
  std::string live_text_;            // its text, reused: publishing allocates nothing
  Av* av_ = nullptr;
  Cq* tx_cq_ = nullptr;
  Cq* rx_cq_ = nullptr;
  Cntr* send_cntr_ = nullptr;
  Cntr* recv_cntr_ = nullptr;
  Cntr* read_cntr_ = nullptr;
  Cntr* write_cntr_ = nullptr;
  Cntr* rread_cntr_ = nullptr;
  Cntr* rwrite_cntr_ = nullptr;
  bool enabled_ = false;
  bool selective_tx_ = false, selective_rx_ = false;
  bool source_err_ = false;  // FI_SOURCE_ERR: unknown senders' names in error entries
  bool dgram_ = false;       // FI_EP_DGRAM: one packet per message, unreliable
  uint64_t tx_op_flags_ = 0, rx_op_flags_ = 0;
  size_t inject_size_;
  size_t rndv_threshold_;
  // Messages to `peer` above this many bytes go by rendezvous: the device's
  // word for the path (Device::rndv_threshold), within the protocol's bound
  // of an eager message; none on a datagram endpoint.
  size_t rndv_threshold(PeerId peer) const noexcept {
    return dgram_ ? SIZE_MAX : std::min<size_t>(dev_->rndv_threshold(peer, rndv_threshold_), kMaxEagerMsg);
  }
  size_t help_min_ = 0;  // cma_share_min: shared single copies from this size (0: never)
  size_t min_multi_recv_ = 64;
  uint64_t peer_timeout_ns_;
  uint64_t close_timeout_ns_;
  uint64_t last_timer_ns_ = 0;
  unsigned poll_count_ = 0;

  std::vector<TxOp> tx_ops_;
  std::vector<TxOp*> tx_free_;
  IntrusiveList<TxOp, &TxOp::hook> streams_;   // CTS-accepted, sending DATA
  IntrusiveList<TxOp, &TxOp::hook> waiting_;   // RTS sent, awaiting CTS/FIN
  IntrusiveList<TxOp, &TxOp::hook> acking_;    // all sent, awaiting the device's ACK
  std::vector<std::unique_ptr<PeerState>> peers_;
  std::vector<PeerId> active_peers_;
  std::vector<fi_addr_t> addr_peer_cache_;     // fi_addr -> PeerId+1 (0 = none)
  uint64_t addr_cache_gen_ = 0;

  struct Ctrl {
    PeerId peer;
    PktHdr hdr;
  };
  std::vector<Ctrl> ctrl_;                     // control packets not yet sent

  TagMatcher matcher_;
  std::vector<std::unique_ptr<RecvOp>> rx_pool_;
  std::vector<RecvOp*> rx_free_;
  size_t rx_outstanding_ = 0;
  size_t rx_size_;
  AsmTable assemblies_;

  struct RmaIn {                 // a multi-packet remote write in progress
    size_t received = 0;
    int status = 0;
    Mr* mr = nullptr;
  };
  std::unordered_map<AsmKey, RmaIn, AsmKeyHash> rma_in_;
  std::vector<std::pair<PeerId, PktHdr>> pending_reads_;  // no tx op free yet
  struct PendingAtomic {                 // a fetching atomic waiting for a tx op
    PeerId peer;
    PktHdr hdr;
    std::vector<uint8_t> payload;
  };
  std::vector<PendingAtomic> pending_atomics_;
  uint64_t refused_ = 0;         // remote accesses refused (statistics)

  // The validation boundary's limits, and what it dropped.
  RxLimits limits_;
  uint64_t bad_packets_ = 0;
  // Memory held for unexpected messages: capped; at the cap packets that
  // would add more wait in the device and their senders are held back.
  size_t unexp_cap_ = 0;
  size_t unexp_bytes_ = 0;
  size_t unexp_peak_ = 0;
  bool unexp_full_ = false;
  uint64_t unexp_stalls_ = 0;
  // Above this, a sender whose large eager message arrives unexpected is
  // asked to send such messages by rendezvous (only a header waits here
  // then); below a quarter of it, the peers asked are told it is over.
  size_t unexp_soft_ = 0;
  std::vector<PeerId> rndv_told_;
  bool rndv_recent_ = false;  // a packet asked since the last progress call
  uint64_t rndv_hints_ = 0;   // asks sent (statistics)
  uint64_t rndv_hints_taken_ = 0;  // changes a peer asked for
  void ask_rndv(PeerId peer);
  void release_rndv();
  bool rndv_release_due() const { return !rndv_told_.empty() && unexp_bytes_ < unexp_soft_ / 4; }
  uint64_t helped_ = 0;  // rendezvous finished by a shared single copy
  // Other state a peer's packets create at this endpoint, bounded alike.
  static constexpr size_t kMaxRmaIn = 4096;
  static constexpr size_t kMaxPendingTargetOps = 4096;
};

} // namespace pm
