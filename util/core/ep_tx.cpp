// Send side: eager (one packet or segmented) below the rendezvous threshold,
// RTS above it; per-peer FIFO so messages match in the order they were sent.
#include <algorithm>
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"
#include "core/cntr.hpp"
#include "core/endpoint.hpp"
#include "core/rx_check.hpp"

namespace pm {

namespace {
constexpr unsigned kIdBits = 20;
constexpr uint64_t kIdMask = (1u << kIdBits) - 1;

// The largest segment of a message's frames to one peer: the device is
// asked again only when the header's op or its offset's side of 4 GiB
// changes (Device::max_payload), not for every frame (a virtual call and
// the composite's dispatch: 3-4 % of a 1 MiB stream's sender).
class SegLimit {
 public:
  SegLimit(const Device& dev, PeerId peer) : dev_(dev), peer_(peer) {}
  size_t operator()(const PktHdr& h) {
    unsigned key = unsigned(h.op) << 1 | (h.offset >> 32 ? 1u : 0u);
    if (key != key_) {
      key_ = key;
      max_ = dev_.max_payload(peer_, h);
    }
    return max_;
  }

 private:
  const Device& dev_;
  PeerId peer_;
  unsigned key_ = ~0u;
  size_t max_ = 0;
};
}  // namespace

TxOp* Endpoint::alloc_tx() {
  if (tx_free_.empty()) return nullptr;
  TxOp* op = tx_free_.back();
  tx_free_.pop_back();
  op->gen++;
  op->state = TxOp::kQueued;
  op->sent = 0;
  op->limit = 0;
  op->silent = false;
  op->helped = false;
  op->wait_ack = false;
  op->by_ref = false;
  op->injected = false;
  op->ref_decided = false;
  op->ref_err = 0;
  op->rescnt = 0;
  return op;
}

void Endpoint::free_tx(TxOp* op) {
  op->state = TxOp::kFree;
  tx_free_.push_back(op);
}

TxOp* Endpoint::tx_by_id(uint64_t msg_id) {
  uint64_t idx = msg_id & kIdMask;
  if (idx >= tx_ops_.size()) return nullptr;
  TxOp* op = &tx_ops_[idx];
  if (op->state == TxOp::kFree || op->gen != uint32_t(msg_id >> kIdBits)) return nullptr;
  return op;
}

ssize_t Endpoint::send(const struct iovec* iov, size_t iovcnt, fi_addr_t dest, uint64_t tag,
                       uint64_t data, void* context, uint64_t flags, bool tagged, SuccessEntry entry) {
  if (!enabled_) return -FI_EOPBADSTATE;
  if (iovcnt > kMaxIov) return -FI_EINVAL;
  PeerId peer = peer_of(dest);
  if (peer == kNoPeer) {
    PM_WARN(FI_LOG_EP_DATA, "send to fi_addr %llu that is not in the address vector",
            (unsigned long long)dest);
    return -FI_EINVAL;
  }
  size_t len = iov_total(iov, iovcnt);
  bool inject = flags & FI_INJECT;
  if (inject && len > inject_size_) return -FI_EINVAL;
  if (dgram_ && len > dev_->max_payload()) return -FI_EMSGSIZE;
  TxOp* op = alloc_tx();
  if (!op) return -FI_EAGAIN;

  op->context = context;
  op->peer = peer;
  op->cq_flags = FI_SEND | (tagged ? FI_TAGGED : FI_MSG);
  op->completion = wants_success(flags, entry);
  op->wait_ack = (flags | tx_op_flags_) & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE);
  op->hdr = PktHdr{};
  op->hdr.op = !inject && len > rndv_threshold(peer) ? kPktRts : kPktEager;
  op->hdr.flags = uint8_t((tagged ? kPktTagged : 0) | ((flags & FI_REMOTE_CQ_DATA) ? kPktCqData : 0));
  if (flags & FI_REMOTE_CQ_DATA) op->cq_flags |= FI_REMOTE_CQ_DATA;
  op->hdr.tag = tagged ? tag : 0;
  op->hdr.cq_data = data;
  op->hdr.msg_len = len;
  op->hdr.msg_id = (uint64_t(op->gen) << kIdBits) | op->index;
  std::copy(iov, iov + iovcnt, op->iov);
  op->iovcnt = iovcnt;
  op->start_ns = 0;

  return queue_op(op, inject, flags & FI_MORE);
}

// The op's own buffer, kept across reuses of the op slot: grown to at least
// `bytes` (and never below inject_size, so injects never reallocate).
uint8_t* Endpoint::op_buffer(TxOp* op, size_t bytes) {
  size_t want = std::max({bytes, inject_size_, size_t(1)});
  if (op->inject_cap < want) {
    op->inject.reset(new uint8_t[want]);
    op->inject_cap = want;
  }
  return op->inject.get();
}

// Appends the op to its peer's FIFO and sends what the device takes now.
// An injected payload still queued is copied before the call returns
// (offsets stay valid: the copy holds the whole payload). With FI_MORE
// (more requests follow at once, fi_msg(3)) the device is not kicked: the
// next request, or the next progress call, does it, and small packets to
// one peer share frames meanwhile.
ssize_t Endpoint::queue_op(TxOp* op, bool copy_payload, bool more) {
  PeerState& ps = peer_state(op->peer);
  bool was_empty = ps.queue.empty();
  ps.queue.push_back(op);
  op->start_ns = 0;
  op->injected = copy_payload;  // the buffer is the caller's only during this call
  if (was_empty && advance_tx(op)) {
    if (!more) dev_->flush();
    return 0;
  }
  if (!more) dev_->flush();
  if (copy_payload && op->state == TxOp::kQueued) {
    size_t len = iov_total(op->iov, op->iovcnt);
    uint8_t* buf = op_buffer(op, len);
    iov_copy_from(op->iov, op->iovcnt, 0, buf, len);
    op->iov[0].iov_base = buf;
    op->iov[0].iov_len = len;
    op->iovcnt = 1;
  }
  op->start_ns = now_ns();
  if (!ps.active) {
    ps.active = true;
    active_peers_.push_back(op->peer);
  }
  return 0;
}

// The op's buffers as the peer sees them (single copy), as one payload.
static struct iovec remote_iovs(const TxOp* op, RemoteIov* riov) {
  to_remote(op->iov, op->iovcnt, riov);
  return iovec{riov, op->iovcnt * sizeof(RemoteIov)};
}

// Pushes the queue head as far as the device takes it. True when the op is
// no longer at the head of its peer's queue (sent, waiting, or failed).
bool Endpoint::advance_tx(TxOp* op) {
  PeerState& ps = *peers_[op->peer];
  size_t len = op->hdr.msg_len;
  auto wait_reply = [&] {
    ps.queue.remove(op);
    op->state = TxOp::kWaitResp;
    op->start_ns = now_ns();
    op->sent = 0;
    waiting_.push_back(op);
    return true;
  };
  auto failed = [&](int rc) {
    ps.queue.remove(op);
    if (op->by_ref) finish_by_ref(op, -rc, dev_->tx_ticket(op->peer));
    else complete_tx(op, -rc);
    return true;
  };
  if (op->hdr.flags & kPktCma) {  // one request naming our buffers
    RemoteIov riov[kMaxIov];
    struct iovec piov = remote_iovs(op, riov);
    PktHdr h = op->hdr;
    h.seg_len = uint32_t(piov.iov_len);
    int rc = dev_->send(op->peer, h, &piov, 1, 0, piov.iov_len);
    if (rc == -FI_EAGAIN) return false;
    return rc < 0 ? failed(rc) : wait_reply();
  }
  if (op->hdr.op == kPktRead || op->hdr.op == kPktAtomic) {  // one request packet
    size_t plen = op->hdr.op == kPktAtomic ? iov_total(op->iov, op->iovcnt) : 0;
    PktHdr h = op->hdr;
    h.seg_len = uint32_t(plen);
    int rc = dev_->send(op->peer, h, op->iov, op->iovcnt, 0, plen);
    if (rc == -FI_EAGAIN) return false;
    return rc < 0 ? failed(rc) : wait_reply();
  }
  if (op->hdr.op == kPktWrite) {  // segments, each led by its offset
    size_t maxp = dev_->max_payload(op->peer, op->hdr) - 8;
    do {
      size_t seg = std::min(maxp, len - op->sent);
      uint8_t off[8];
      put_le64(off, op->sent);
      struct iovec g[kMaxIov + 1];
      g[0] = iovec{off, 8};
      size_t n = 1 + iov_slice(op->iov, op->iovcnt, op->sent, seg, g + 1, kMaxIov);
      PktHdr h = op->hdr;
      h.seg_len = uint32_t(8 + seg);
      // The data may stay in the user's buffer (the offset goes in the
      // frame): the write then ends once the reply came and the device
      // no longer reads it (finish_by_ref). Not an injected write's (the
      // caller may reuse it when the call returns), nor an empty segment
      // (its payload is `off`, on this stack).
      int rc = op->injected || !seg ? dev_->send(op->peer, h, g, n, 0, 8 + seg)
                                    : dev_->send_ref(op->peer, h, g, n, 0, 8 + seg);
      if (rc == 1) {
        op->by_ref = true;
        rc = 0;
      }
      if (rc == -FI_EAGAIN) return false;
      if (rc < 0) return failed(rc);
      op->sent += seg;
    } while (op->sent < len);
    // Its last frame's ticket: the reply does not wait for later ones.
    if (op->by_ref) op->ticket = dev_->tx_ticket(op->peer);
    return wait_reply();
  }
  // The peer holds many unexpected messages (kPktRndvHint): an eager message
  // of rendezvous size not started yet goes by rendezvous, so that only its
  // header waits there until a receive matches it.
  if (ps.rndv_asked && op->hdr.op == kPktEager && !op->sent && !op->injected && len > rndv_threshold_)
    op->hdr.op = kPktRts;
  if (op->hdr.op == kPktRts) {
    RemoteIov riov[kMaxIov];
    struct iovec piov = remote_iovs(op, riov);
    PktHdr h = op->hdr;
    h.seg_len = uint32_t(piov.iov_len);
    int rc = dev_->send(op->peer, h, &piov, 1, 0, piov.iov_len);
    if (rc == -FI_EAGAIN) return false;
    ps.queue.remove(op);
    if (rc < 0) {
      complete_tx(op, -rc);
      return true;
    }
    op->state = TxOp::kWaitCts;
    op->start_ns = now_ns();
    waiting_.push_back(op);
    return true;
  }
  // An eager message of rendezvous size (a device that sends those eagerly,
  // Device::rndv_threshold) may stay in the user's buffer, as a rendezvous'
  // data would: it then completes once the peer has it all (sent_all).
  bool ref = !op->injected && len > rndv_threshold_;
  SegLimit limit(*dev_, op->peer);
  do {
    PktHdr h = op->hdr;
    if (op->sent) {
      h.op = kPktData;
      h.offset = op->sent;
    }
    size_t seg = std::min(limit(h), len - op->sent);
    h.seg_len = uint32_t(seg);
    int rc = ref ? dev_->send_ref(op->peer, h, op->iov, op->iovcnt, op->sent, seg)
                 : dev_->send(op->peer, h, op->iov, op->iovcnt, op->sent, seg);
    if (rc == 1) {
      op->wait_ack = op->by_ref = true;
      rc = 0;
    }
    if (rc == -FI_EAGAIN) return false;
    if (rc < 0) return failed(rc);  // frames sent by reference may still be read
    op->sent += seg;
  } while (op->sent < len);
  ps.queue.remove(op);
  if (op->by_ref) dev_->want_ack(op->peer);
  sent_all(op);
  return true;
}

// The op's data is all with the device, copied out of the user's buffers:
// that is inject-complete, the default. FI_TRANSMIT_COMPLETE and
// FI_DELIVERY_COMPLETE wait until the device says the peer's provider has
// processed every packet (matched or buffered the message).
void Endpoint::sent_all(TxOp* op) {
  if (!op->wait_ack) {
    complete_tx(op, 0);
    return;
  }
  op->ticket = dev_->tx_ticket(op->peer);
  int st = dev_->tx_state(op->peer, op->ticket);
  if (st != 0) {
    complete_tx(op, st > 0 ? 0 : -st);
    return;
  }
  op->state = TxOp::kWaitAck;
  op->start_ns = now_ns();
  acking_.push_back(op);
}

// An op whose buffer the device may still read (by_ref) ends with `err`
// once it no longer does: at once if `ticket` (its last frame's, or a
// later one) is acknowledged, else when tx_state says so (progress_acks,
// after asking for the ACK; a peer that dies meanwhile fails it,
// fail_peer_ops).
void Endpoint::finish_by_ref(TxOp* op, int err, uint64_t ticket) {
  op->ticket = ticket;
  if (dev_->tx_state(op->peer, op->ticket) != 0) {
    complete_tx(op, err);
    return;
  }
  dev_->want_ack(op->peer);
  op->ref_err = err;
  op->ref_decided = true;
  op->state = TxOp::kWaitAck;
  op->start_ns = now_ns();
  acking_.push_back(op);
}

void Endpoint::progress_acks() {
  for (TxOp* op = acking_.front(); op;) {
    TxOp* next = acking_.next(op);
    int st = dev_->tx_state(op->peer, op->ticket);
    if (st != 0) {
      acking_.remove(op);
      complete_tx(op, op->ref_decided ? op->ref_err : st > 0 ? 0 : -st);
    }
    op = next;
  }
}

void Endpoint::progress_tx() {
  for (size_t i = 0; i < active_peers_.size();) {
    PeerId p = active_peers_[i];
    PeerState& ps = *peers_[p];
    while (TxOp* op = ps.queue.front())
      if (!advance_tx(op)) break;
    if (ps.queue.empty()) {
      ps.active = false;
      active_peers_[i] = active_peers_.back();
      active_peers_.pop_back();
    } else {
      i++;
    }
  }
}

void Endpoint::progress_streams() {
  for (TxOp* op = streams_.front(); op;) {
    TxOp* next = streams_.next(op);
    bool failed = false;
    SegLimit limit(*dev_, op->peer);
    while (op->sent < op->limit) {
      PktHdr h = op->hdr;
      if (h.op != kPktReadResp) h.op = kPktData;  // read responses keep theirs
      h.offset = op->sent;
      size_t seg = std::min(limit(h), op->limit - op->sent);
      h.seg_len = uint32_t(seg);
      // A message's data may stay in the user's buffer until the peer has
      // it (the device then reads it again for a resend): the send
      // completes only then. Not a read response: the target's memory
      // region may close meanwhile.
      int rc = op->silent || op->injected ? dev_->send(op->peer, h, op->iov, op->iovcnt, op->sent, seg)
                                          : dev_->send_ref(op->peer, h, op->iov, op->iovcnt, op->sent, seg);
      if (rc == 1) {
        op->wait_ack = op->by_ref = true;
        rc = 0;
      }
      if (rc == -FI_EAGAIN) break;
      if (rc < 0) {
        streams_.remove(op);
        if (op->by_ref) finish_by_ref(op, -rc, dev_->tx_ticket(op->peer));  // frames sent before may still be read
        else complete_tx(op, -rc);
        failed = true;
        break;
      }
      op->sent += seg;
    }
    if (!failed && op->sent >= op->limit) {
      streams_.remove(op);
      // Its buffer is read until the ACK: that comes at once, not after
      // the peer's delayed-ACK time (a lone send would wait for it).
      if (op->by_ref) dev_->want_ack(op->peer);
      sent_all(op);
    }
    op = next;
  }
}

void Endpoint::complete_tx(TxOp* op, int err) {
  if (op->silent) {  // a response of ours to a peer's request
    free_tx(op);
    return;
  }
  count_tx(op, err == 0);
  if (err) {
    PM_WARN(FI_LOG_EP_DATA, "send of %zu bytes to %s failed: %s", size_t(op->hdr.msg_len),
            peer_str(op->peer).c_str(), fi_strerror(err));
    Completion c{op->context, op->cq_flags, 0, nullptr, 0, 0, FI_ADDR_NOTAVAIL, err, 0};
    write_cq(tx_cq_, c);
  } else if (op->completion) {
    Completion c{op->context, op->cq_flags, 0, nullptr, 0, 0, FI_ADDR_NOTAVAIL, 0, 0};
    write_cq(tx_cq_, c);
  }
  free_tx(op);
}

// Counters bound for this op's kind: sends, RMA/atomic writes or reads.
void Endpoint::count_tx(const TxOp* op, bool ok) {
  Cntr* c = (op->cq_flags & FI_SEND) ? send_cntr_ : (op->cq_flags & FI_READ) ? read_cntr_ : write_cntr_;
  if (!c) return;
  if (ok) c->inc();
  else c->inc_err();
}

void Endpoint::on_cts(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  TxOp* op = tx_by_id(h.msg_id);
  if (!op || op->state != TxOp::kWaitCts || op->peer != peer) return;
  waiting_.remove(op);
  op->limit = std::min<size_t>(h.msg_len, op->hdr.msg_len);
  op->sent = 0;
  op->state = TxOp::kStreaming;
  op->start_ns = now_ns();
  streams_.push_back(op);
  progress_streams();
}

void Endpoint::on_fin(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  TxOp* op = tx_by_id(h.msg_id);
  if (!op || op->state != TxOp::kWaitCts || op->peer != peer) return;
  waiting_.remove(op);
  complete_tx(op, int(h.tag));
}

// The receiver of a rendezvous asks this side to write part of the message
// into its receive (a shared single copy): once per message, only what the
// message holds, only to a peer this device can write to.
void Endpoint::on_help(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  TxOp* op = tx_by_id(h.msg_id);
  if (!op || op->state != TxOp::kWaitCts || op->peer != peer || op->helped) return;
  op->helped = true;
  op->start_ns = now_ns();
  uint64_t len = op->hdr.msg_len;
  int status = FI_EIO;
  if (h.offset <= len && h.msg_len <= len - h.offset && dev_->can_read_remote(peer)) {
    struct iovec local[kMaxIov], remote[kMaxIov];
    size_t lcnt = iov_slice(op->iov, op->iovcnt, h.offset, h.msg_len, local, kMaxIov);
    size_t rcnt = pk.len() / sizeof(RemoteIov);  // whole entries summing to msg_len (rx_check)
    RemoteIov riov[kMaxIov];
    memcpy(riov, pk.payload(), rcnt * sizeof(RemoteIov));  // one read of the peer's bytes
    from_remote(riov, rcnt, remote);
    if (dev_->write_remote(peer, local, lcnt, remote, rcnt) == ssize_t(h.msg_len)) status = 0;
  }
  send_ctrl(peer, kPktHelped, h.msg_id, uint64_t(status));
}

void Endpoint::send_ctrl(PeerId peer, uint8_t op, uint64_t msg_id, uint64_t value, uint8_t flags) {
  PktHdr h{};
  h.op = op;
  h.flags = flags;
  h.msg_id = msg_id;
  if (op == kPktCts) h.msg_len = value;
  else h.tag = value;
  if (ctrl_.empty()) {
    int rc = dev_->send(peer, h, nullptr, 0, 0, 0);
    if (rc != -FI_EAGAIN) return;  // sent, or the peer is gone (its op fails there)
  }
  ctrl_.push_back(Ctrl{peer, h});
}

void Endpoint::flush_ctrl() {
  size_t i = 0;
  for (; i < ctrl_.size(); i++)
    if (dev_->send(ctrl_[i].peer, ctrl_[i].hdr, nullptr, 0, 0, 0) == -FI_EAGAIN) break;
  ctrl_.erase(ctrl_.begin(), ctrl_.begin() + i);
}

// Fails every operation that waits on `peer` (it died or cannot be reached).
void Endpoint::fail_peer_ops(PeerId peer, int err) {
  // A peer never sent to has no state (and gets none: its id may be a
  // device's, handed up with its reset only).
  PeerState* ps = peer < peers_.size() ? peers_[peer].get() : nullptr;
  if (ps)
    while (TxOp* op = ps->queue.pop_front()) complete_tx(op, err);
  for (auto* list : {&waiting_, &streams_, &acking_})
    while (TxOp* op = list->remove_first([&](TxOp* o) { return o->peer == peer; }))
      complete_tx(op, op->ref_decided ? op->ref_err : err);  // a write the target confirmed stays done
  for (auto it = assemblies_.begin(); it != assemblies_.end();) {
    if (it->second.peer == peer) {
      // Ended: the device's measurement must not wait for it.
      if (it->second.asked) dev_->note_transfer(peer, it->second.asked == 2, it->second.total);
      if (it->second.recv) complete_recv_err(it->second.recv, err, it->second.received);
      if (it->second.unexp) {
        // A discarded message still arriving left the list already.
        if (it->second.unexp->hook.linked())
          matcher_.unexpected(it->second.unexp->tagged()).remove(it->second.unexp);
        if (it->second.unexp->waiting) complete_recv_err(it->second.unexp->waiting, err, 0);
        delete it->second.unexp;
      }
      it = assemblies_.erase(it);
    } else {
      ++it;
    }
  }
  ctrl_.erase(std::remove_if(ctrl_.begin(), ctrl_.end(), [&](const Ctrl& c) { return c.peer == peer; }),
              ctrl_.end());
  // What either side said about unexpected messages belonged to that session.
  if (!ps) return;
  ps->rndv_asked = false;
  if (ps->rndv_told) {
    ps->rndv_told = false;
    auto it = std::find(rndv_told_.begin(), rndv_told_.end(), peer);
    if (it != rndv_told_.end()) rndv_told_.erase(it);
  }
}

// Operations waiting on a peer for longer than the peer timeout ask the
// device whether the peer still lives; a dead peer fails them all.
void Endpoint::check_timers() {
  uint64_t now = now_ns();
  if (now - last_timer_ns_ < peer_timeout_ns_ / 4) return;
  last_timer_ns_ = now;
  std::vector<PeerId> dead;
  auto check = [&](PeerId peer, uint64_t& since) {
    if (now - since < peer_timeout_ns_) return;
    since = now;
    if (std::find(dead.begin(), dead.end(), peer) == dead.end() && !dev_->peer_alive(peer))
      dead.push_back(peer);
  };
  for (auto* list : {&waiting_, &streams_, &acking_})
    for (TxOp* op = list->front(); op; op = list->next(op)) check(op->peer, op->start_ns);
  for (PeerId p : active_peers_)
    if (TxOp* op = peers_[p]->queue.front()) check(p, op->start_ns);
  for (auto& [key, a] : assemblies_) check(a.peer, a.start_ns);
  for (PeerId p : dead) {
    PM_WARN(FI_LOG_EP_DATA, "peer %s is gone; failing its pending operations", peer_str(p).c_str());
    fail_peer_ops(p, FI_ECONNRESET);
  }
}

} // namespace pm
