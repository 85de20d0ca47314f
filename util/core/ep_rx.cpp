// Receive side: posting and matching receives, unexpected messages, peek /
// claim / discard, multi-receive buffers, reassembly of segmented messages,
// rendezvous by single copy or by CTS + streamed data, and cancel.
#include <algorithm>
#include <cstring>

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "base/clock.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"
#include "core/av.hpp"
#include "core/cntr.hpp"
#include "core/addr_str.hpp"
#include "core/endpoint.hpp"
#include "core/rx_check.hpp"

namespace pm {

namespace {
// Marks an unexpected message discarded while its segments still arrive.
void* const kDiscarded = reinterpret_cast<void*>(uintptr_t(1));

uint64_t rx_flags(const PktHdr& h) {
  return FI_RECV | ((h.flags & kPktTagged) ? FI_TAGGED : FI_MSG) |
         ((h.flags & kPktCqData) ? FI_REMOTE_CQ_DATA : 0);
}
}  // namespace

RecvOp* Endpoint::alloc_recv() {
  if (rx_outstanding_ >= rx_size_) return nullptr;
  rx_outstanding_++;
  if (rx_free_.empty()) {
    rx_pool_.push_back(std::make_unique<RecvOp>());
    return rx_pool_.back().get();
  }
  RecvOp* r = rx_free_.back();
  rx_free_.pop_back();
  *r = RecvOp{};
  return r;
}

void Endpoint::free_recv(RecvOp* r) {
  rx_outstanding_--;
  rx_free_.push_back(r);
}

// Takes a posted receive for a message of msg_len: removes it from the posted
// list, or for a multi-receive buffer carves out room and retires the buffer
// once less than the minimum is left. Returns the offset inside the buffer.
static size_t reserve(TagMatcher& m, RecvOp* r, size_t msg_len, size_t min_left) {
  if (!(r->flags & FI_MULTI_RECV)) {
    if (r->hook.linked()) m.posted(r->tagged).remove(r);
    return 0;
  }
  size_t base = r->used;
  size_t take = std::min(r->len - r->used, (msg_len + 7) & ~size_t(7));
  r->used += take;
  r->inflight++;
  if (r->len - r->used < min_left) {
    r->retired = true;
    if (r->hook.linked()) m.posted(r->tagged).remove(r);
  }
  return base;
}

static size_t capacity(const RecvOp* r, size_t base) { return r->len - base; }

ssize_t Endpoint::recv(const struct iovec* iov, size_t iovcnt, fi_addr_t src, uint64_t tag,
                       uint64_t ignore, void* context, uint64_t flags, bool tagged) {
  if (!enabled_) return -FI_EOPBADSTATE;
  if (iovcnt > kMaxIov) return -FI_EINVAL;
  PeerId peer = kNoPeer;
  if (src != FI_ADDR_UNSPEC && (info_->caps & FI_DIRECTED_RECV)) {
    peer = peer_of(src);
    if (peer == kNoPeer) return -FI_EINVAL;
  }
  if ((flags & FI_CLAIM) && !context) return -FI_EINVAL;  // claims are keyed by context
  if (flags & FI_PEEK) {
    RecvOp want;
    want.context = context;
    want.flags = flags;
    want.tagged = tagged;
    want.src = peer;
    want.tag = tag;
    want.ignore = ignore;
    return peek(want);
  }
  RecvOp* r = alloc_recv();
  if (!r) return -FI_EAGAIN;
  r->context = context;
  r->flags = flags;
  r->tagged = tagged;
  r->completion = !selective_rx_ || (flags & FI_COMPLETION);
  r->src = peer;
  r->tag = tag;
  r->ignore = ignore;
  std::copy(iov, iov + iovcnt, r->iov);
  r->iovcnt = iovcnt;
  r->len = iov_total(iov, iovcnt);

  if (flags & FI_CLAIM) {
    Unexp* u = matcher_.find_claimed(context);
    if (!u) {
      free_recv(r);
      return -FI_EINVAL;
    }
    u->claim_ctx = nullptr;
    if (flags & FI_DISCARD) {
      Completion c{context, rx_flags(u->hdr), 0, nullptr, u->hdr.cq_data, u->hdr.tag,
                   addr_of(u->peer), 0, 0};
      PeerId from = u->peer;
      discard(u);
      free_recv(r);
      write_rx(c, from);
      return 0;
    }
    deliver_unexpected(r, u);
    return 0;
  }

  if (r->flags & FI_MULTI_RECV) {
    // Fill the buffer with what already waits, in arrival order, then post
    // what is left. A message still arriving keeps its place and is
    // finished there (assembled): what follows it from its sender, matched
    // to this buffer later, lands after it, as it was sent.
    while (!r->retired) {
      Unexp* u = matcher_.find_unexpected(kNoPeer, tagged, tag, ignore);
      if (!u) break;
      deliver_unexpected(r, u);
    }
    if (!r->retired) matcher_.post(r);
    return 0;
  }
  if (Unexp* u = matcher_.find_unexpected(peer, tagged, tag, ignore)) {
    deliver_unexpected(r, u);
    return 0;
  }
  matcher_.post(r);
  return 0;
}

// FI_DISCARD: drops an unexpected message; a rendezvous sender is released
// (FIN), one still arriving is freed when its last segment comes.
void Endpoint::discard(Unexp* u) {
  matcher_.unexpected(u->tagged()).remove(u);
  if (u->hdr.op == kPktRts) send_ctrl(u->peer, kPktFin, u->hdr.msg_id, 0);
  if (!u->complete()) u->claim_ctx = kDiscarded;
  else delete u;
}

ssize_t Endpoint::peek(const RecvOp& want) {
  Unexp* u = matcher_.find_unexpected(want.src, want.tagged, want.tag, want.ignore);
  if (!u) {
    Completion c{want.context, FI_RECV | (want.tagged ? FI_TAGGED : FI_MSG), 0, nullptr, 0, 0,
                 FI_ADDR_NOTAVAIL, FI_ENOMSG, 0};
    write_cq(rx_cq_, c);
    return 0;
  }
  Completion c{want.context, rx_flags(u->hdr), size_t(u->hdr.msg_len), nullptr, u->hdr.cq_data,
               u->hdr.tag, addr_of(u->peer), 0, 0};
  PeerId from = u->peer;
  if (want.flags & FI_DISCARD) {
    discard(u);
  } else if (want.flags & FI_CLAIM) {
    u->claim_ctx = want.context;
  }
  write_rx(c, from);
  return 0;
}

// A sender the AV does not hold is matched like any other: only receives
// from FI_ADDR_UNSPEC can name it, and its completion reports
// FI_ADDR_NOTAVAIL, or with FI_SOURCE_ERR its name (write_rx).
bool Endpoint::match_incoming(PeerId peer, const PktHdr& h, RecvOp** r, size_t* base) {
  RecvOp* m = matcher_.find_posted(peer, h.flags & kPktTagged, h.tag);
  if (!m) return false;
  *base = reserve(matcher_, m, h.msg_len, min_multi_recv_);
  *r = m;
  return true;
}

// Whether an unexpected message costing `bytes` fits under the endpoint's
// cap now. The first one always does (so one message larger than the cap
// still gets through); otherwise the packet waits in the device and the
// sender is held back (STOP/GO) until receives consume what is stored.
bool Endpoint::unexp_room(size_t bytes) {
  if (unexp_bytes_ == 0 || bytes <= unexp_cap_ - std::min(unexp_bytes_, unexp_cap_)) return true;
  if (!unexp_full_) {
    unexp_full_ = true;
    if (unexp_stalls_++ == 0)  // once; the count is in the statistics
      PM_WARN(FI_LOG_EP_DATA,
            "unexpected messages hold %zu bytes, the cap (unexp_cap_kb): senders wait until receives "
            "are posted",
            unexp_bytes_);
  }
  return false;
}

// A device may send messages of rendezvous size eagerly (pmeth over
// Ethernet, Device::rndv_threshold): each then waits here whole until a
// receive matches it. Once those fill a quarter of the cap, their sender is
// asked to send them by rendezvous, before the cap holds back all it sends
// (an application that receives them only after a later message would wait
// forever). Said once per peer, until the memory is mostly free again.
void Endpoint::ask_rndv(PeerId peer) {
  rndv_recent_ = true;
  PeerState& ps = peer_state(peer);
  if (ps.rndv_told) return;
  rndv_told_.push_back(peer);  // first: if it throws, nothing changed
  try {
    send_ctrl(peer, kPktRndvHint, 0, 1);
  } catch (...) {
    rndv_told_.pop_back();
    throw;
  }
  ps.rndv_told = true;
  rndv_hints_++;
  PM_INFO(FI_LOG_EP_DATA, "unexpected messages hold %zu bytes: %s is asked to send messages above %zu bytes "
          "by rendezvous", unexp_bytes_, peer_str(peer).c_str(), rndv_threshold_);
}

void Endpoint::release_rndv() {
  while (!rndv_told_.empty()) {
    PeerId p = rndv_told_.back();
    try {
      send_ctrl(p, kPktRndvHint, 0, 0);
    } catch (const std::bad_alloc&) {
      return;  // the rest at a later progress call
    }
    rndv_told_.pop_back();
    peer_state(p).rndv_told = false;
  }
}

Unexp* Endpoint::new_unexp(const CheckedPacket& pk, size_t bytes) {
  auto u = std::make_unique<Unexp>();
  u->peer = pk.peer();
  u->hdr = pk.hdr();
  u->charge = bytes;
  u->account = &unexp_bytes_;
  unexp_bytes_ += bytes;
  unexp_peak_ = std::max(unexp_peak_, unexp_bytes_);
  unexp_full_ = false;
  return u.release();
}

// A peer may not start a message under the id of one of its messages that
// is still arriving (the assembly would be lost, and what it holds with it).
bool Endpoint::id_in_use(PeerId peer, uint64_t msg_id) {
  if (!assemblies_.count(AsmKey{peer, msg_id})) return false;
  drop(peer, "a new message reuses the id of one still arriving");
  return true;
}

bool Endpoint::on_eager(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  size_t plen = pk.len();  // <= msg_len <= the eager bound (rx_check)
  if (h.msg_len > plen && id_in_use(peer, h.msg_id)) return true;
  RecvOp* r;
  size_t base;
  if (match_incoming(peer, h, &r, &base)) {
    size_t cap = capacity(r, base);
    iov_copy_to(r->iov, r->iovcnt, base, pk.payload(), std::min(plen, cap));
    if (h.msg_len > plen) {
      Assembly& a = assemblies_[AsmKey{peer, h.msg_id}];
      a = Assembly{peer, r, nullptr, base, size_t(h.msg_len), size_t(h.msg_len), plen, h.tag,
                   h.cq_data, h.flags, now_ns()};
      return true;
    }
    PktHdr hh = h;
    finish_recv(r, base, h.msg_len, std::min(plen, cap), hh, peer);
    return true;
  }
  size_t bytes = sizeof(Unexp) + size_t(h.msg_len);
  if (h.msg_len > rndv_threshold_ && unexp_bytes_ + bytes > unexp_soft_) ask_rndv(peer);
  if (!unexp_room(bytes)) return false;
  std::unique_ptr<uint8_t[]> data(new uint8_t[h.msg_len ? h.msg_len : 1]);
  Unexp* u = new_unexp(pk, bytes);
  u->data = std::move(data);
  memcpy(u->data.get(), pk.payload(), plen);
  u->received = plen;
  if (h.msg_len > plen) {
    Assembly& a = assemblies_[AsmKey{peer, h.msg_id}];
    a = Assembly{peer, nullptr, u, 0, size_t(h.msg_len), size_t(h.msg_len), plen, h.tag,
                 h.cq_data, h.flags, now_ns()};
  }
  matcher_.add_unexpected(u);
  return true;
}

bool Endpoint::on_data(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  size_t plen = pk.len();
  AsmKey key{peer, h.msg_id};
  Assembly* found = assemblies_.find(key);
  if (!found) return true;  // discarded or failed message
  Assembly& a = *found;
  if (a.help != Assembly::kNoHelp) {
    drop(peer, "a segment of a message shared by single copy");
    return true;
  }
  // Inside what this message's first packet announced, and no more bytes
  // than are still missing (overflow-safe; a peer's offsets are not trusted).
  if (h.offset > a.total || plen > a.total - h.offset || plen > a.total - a.received) {
    drop(peer, "segment outside its message");
    return true;
  }
  a.start_ns = coarse_ns();  // for the peer timeout only; once per segment, so the cheap clock
  if (a.recv) {
    size_t cap = std::min(a.total, capacity(a.recv, a.base));
    if (h.offset < cap)
      iov_copy_to(a.recv->iov, a.recv->iovcnt, a.base + h.offset, pk.payload(),
                  std::min<size_t>(plen, cap - h.offset));
  } else {
    memcpy(a.unexp->data.get() + h.offset, pk.payload(), plen);  // total == the buffer's size
    a.unexp->received += plen;
  }
  a.received += plen;
  if (a.received < a.total) return true;
  Assembly done = std::move(a);
  assemblies_.erase(key);
  assembled(done);
  return true;
}

// A message whose bytes are all in (DATA, or a shared single copy): the
// device hears how it went, the receive completes (or the unexpected
// message waits for one).
void Endpoint::assembled(const Assembly& done) {
  PeerId peer = done.peer;
  if (done.asked) dev_->note_transfer(peer, done.asked == 2, done.total);
  PktHdr hh{};
  hh.tag = done.tag;
  hh.cq_data = done.data;
  hh.flags = done.flags;
  if (done.recv) {
    finish_recv(done.recv, done.base, done.msg_len, std::min(done.total, capacity(done.recv, done.base)),
                hh, peer);
    return;
  }
  Unexp* u = done.unexp;
  if (u->claim_ctx == kDiscarded) {
    delete u;
  } else if (u->waiting) {
    RecvOp* r = u->waiting;
    u->waiting = nullptr;
    place_unexpected(r, u, u->base);
  }
}

bool Endpoint::on_rts(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  if (id_in_use(peer, h.msg_id)) return true;
  size_t cnt = pk.len() / sizeof(RemoteIov);  // whole entries, <= kMaxIov (rx_check)
  RemoteIov riov[kMaxIov];
  memcpy(riov, pk.payload(), cnt * sizeof(RemoteIov));  // one read of the peer's bytes
  RecvOp* r;
  size_t base;
  if (match_incoming(peer, h, &r, &base)) {
    deliver_rts(r, base, peer, h, riov, cnt);
    return true;
  }
  size_t bytes = sizeof(Unexp) + cnt * sizeof(RemoteIov);
  if (!unexp_room(bytes)) return false;
  Unexp* u = new_unexp(pk, bytes);
  u->riov.reset(new RemoteIov[cnt ? cnt : 1]);
  std::copy(riov, riov + cnt, u->riov.get());
  u->riovcnt = cnt;
  matcher_.add_unexpected(u);
  return true;
}

void Endpoint::deliver_rts(RecvOp* r, size_t base, PeerId peer, const PktHdr& h,
                           const RemoteIov* riov, size_t riovcnt) {
  size_t accept = std::min<size_t>(h.msg_len, capacity(r, base));
  if (id_in_use(peer, h.msg_id)) {  // two unexpected RTS under one id
    complete_recv_err(r, FI_EIO, 0);
    return;
  }
  // asked: the device chooses the path (and hears how the message ended).
  uint8_t asked = accept && riovcnt && dev_->can_read_remote(peer) ? 1 : 0;
  if (asked && dev_->prefer_read_remote(peer, accept)) {
    // A large message is shared: the sender writes the tail into this
    // receive while this side reads the head (two cpus copy at once).
    size_t tail = help_min_ && accept >= help_min_ ? (accept / 2) & ~size_t(4095) : 0;
    size_t head = accept - tail;
    if (tail && !ask_help(peer, r, base, head, tail, h.msg_id)) head = accept;
    struct iovec local[kMaxIov], theirs[kMaxIov], remote[kMaxIov];
    riovcnt = std::min<size_t>(riovcnt, kMaxIov);
    from_remote(riov, riovcnt, theirs);
    size_t lcnt = iov_slice(r->iov, r->iovcnt, base, head, local, kMaxIov);
    size_t rcnt = iov_slice(theirs, riovcnt, 0, head, remote, kMaxIov);
    ssize_t n = dev_->read_remote(peer, local, lcnt, remote, rcnt);
    if (head < accept) {
      // The sender's answer (on_helped) finishes it, or moves it to the copy
      // path. Charged to single copy whatever happens.
      Assembly& a = assemblies_[AsmKey{peer, h.msg_id}];
      a = Assembly{peer, r, nullptr, base, accept, size_t(h.msg_len), 0, h.tag, h.cq_data, h.flags,
                   now_ns(), 2};
      a.help = n == ssize_t(head) ? Assembly::kHelpWaiting : Assembly::kHelpHeadFailed;
      a.head = head;
      a.riov.assign(riov, riov + riovcnt);
      return;
    }
    if (n == ssize_t(accept)) {
      dev_->note_transfer(peer, true, accept);
      send_ctrl(peer, kPktFin, h.msg_id, 0);
      finish_recv(r, base, h.msg_len, accept, h, peer);
      return;
    }
    PM_INFO(FI_LOG_EP_DATA, "single copy from %s failed (%zd); using the copy path",
            peer_str(peer).c_str(), n);
    asked = 2;  // charged to single copy
  }
  send_ctrl(peer, kPktCts, h.msg_id, accept);
  if (accept == 0) {
    finish_recv(r, base, h.msg_len, 0, h, peer);
    return;
  }
  Assembly& a = assemblies_[AsmKey{peer, h.msg_id}];
  a = Assembly{peer, r, nullptr, base, accept, size_t(h.msg_len), 0, h.tag, h.cq_data, h.flags,
               now_ns(), asked};
}

// Asks the sender of msg_id to write bytes [head, head + tail) of it into this
// receive (at base + head); false when it cannot be asked (this side then
// reads everything).
bool Endpoint::ask_help(PeerId peer, RecvOp* r, size_t base, size_t head, size_t tail, uint64_t msg_id) {
  if (peer_state(peer).no_help) return false;
  struct iovec mine[kMaxIov];
  size_t cnt = iov_slice(r->iov, r->iovcnt, base + head, tail, mine, kMaxIov);
  if (iov_total(mine, cnt) != tail) return false;
  RemoteIov riov[kMaxIov];
  to_remote(mine, cnt, riov);
  PktHdr h{};
  h.op = kPktHelp;
  h.msg_id = msg_id;
  h.offset = head;
  h.msg_len = tail;
  h.seg_len = uint32_t(cnt * sizeof(RemoteIov));
  struct iovec piov{riov, cnt * sizeof(RemoteIov)};
  return dev_->send(peer, h, &piov, 1, 0, piov.iov_len) == 0;
}

// The sender's answer to kPktHelp: the message is complete; or the sender
// could not write its part, which this side then reads itself (and asks
// that sender no more); or, when a read failed, the message goes the copy
// path from its start.
void Endpoint::on_helped(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  AsmKey key{peer, h.msg_id};
  Assembly* found = assemblies_.find(key);
  if (!found || found->help == Assembly::kNoHelp) return;  // not asked: ignored
  Assembly& a = *found;
  bool whole = a.help == Assembly::kHelpWaiting && h.tag == 0;
  if (a.help == Assembly::kHelpWaiting && h.tag != 0) {
    peer_state(peer).no_help = true;
    PM_INFO(FI_LOG_EP_DATA, "%s could not write its part of a shared single copy (%s); reading it here",
            peer_str(peer).c_str(), fi_strerror(int(h.tag)));
    struct iovec theirs[kMaxIov], remote[kMaxIov], local[kMaxIov];
    from_remote(a.riov.data(), a.riov.size(), theirs);
    size_t tail = a.total - a.head;
    size_t rcnt = iov_slice(theirs, a.riov.size(), a.head, tail, remote, kMaxIov);
    size_t lcnt = iov_slice(a.recv->iov, a.recv->iovcnt, a.base + a.head, tail, local, kMaxIov);
    whole = dev_->read_remote(peer, local, lcnt, remote, rcnt) == ssize_t(tail);
  }
  if (whole) {
    Assembly done = std::move(a);  // asked == 2: charged to single copy
    assemblies_.erase(key);
    if (h.tag == 0) helped_++;  // shared: the sender wrote its part (not read here after a refusal)
    send_ctrl(peer, kPktFin, h.msg_id, 0);
    assembled(done);
    return;
  }
  PM_INFO(FI_LOG_EP_DATA, "shared single copy with %s failed; using the copy path", peer_str(peer).c_str());
  a.help = Assembly::kNoHelp;
  a.riov.clear();
  a.received = 0;
  a.start_ns = now_ns();
  send_ctrl(peer, kPktCts, h.msg_id, a.total);
}

// A receive takes a message that arrived before it (u is in the unexpected list).
void Endpoint::deliver_unexpected(RecvOp* r, Unexp* u) {
  size_t base = reserve(matcher_, r, u->hdr.msg_len, min_multi_recv_);
  if (u->hdr.op == kPktRts) {
    matcher_.unexpected(u->tagged()).remove(u);
    deliver_rts(r, base, u->peer, u->hdr, u->riov.get(), u->riovcnt);
    delete u;
    return;
  }
  if (!u->complete()) {  // the rest is still arriving: finish when it has, at this place
    // (a multi-receive buffer counts it in flight: its release waits for it)
    u->waiting = r;
    u->base = base;
    return;
  }
  place_unexpected(r, u, base);
}

// An unexpected message whose bytes are all in goes to its receive.
void Endpoint::place_unexpected(RecvOp* r, Unexp* u, size_t base) {
  matcher_.unexpected(u->tagged()).remove(u);
  size_t n = std::min<size_t>(u->hdr.msg_len, capacity(r, base));
  iov_copy_to(r->iov, r->iovcnt, base, u->data.get(), n);
  finish_recv(r, base, u->hdr.msg_len, n, u->hdr, u->peer);
  delete u;
}

void Endpoint::finish_recv(RecvOp* r, size_t base, size_t msg_len, size_t copied, const PktHdr& h,
                           PeerId peer) {
  Completion c{r->context, rx_flags(h), copied, nullptr, h.cq_data, h.tag, addr_of(peer), 0, 0};
  if (!(h.flags & kPktCqData)) c.data = 0;
  if (!(h.flags & kPktTagged)) c.tag = 0;
  bool multi = r->flags & FI_MULTI_RECV;
  if (multi) {
    c.buf = static_cast<char*>(r->iov[0].iov_base) + base;
    r->inflight--;
    if (r->retired && r->inflight == 0) c.flags |= FI_MULTI_RECV;
  } else {
    c.buf = r->iovcnt ? r->iov[0].iov_base : nullptr;
  }
  if (copied < msg_len) {
    c.err = FI_ETRUNC;
    c.olen = msg_len - copied;
    PM_INFO(FI_LOG_EP_DATA, "message of %zu bytes truncated to %zu", msg_len, copied);
  }
  if (c.err || r->completion || (c.flags & FI_MULTI_RECV)) write_rx(c, peer);
  if (recv_cntr_) {
    if (c.err) recv_cntr_->inc_err();
    else recv_cntr_->inc();
  }
  if (!multi || (r->retired && r->inflight == 0)) free_recv(r);
}

void Endpoint::complete_recv_err(RecvOp* r, int err, size_t len) {
  Completion c{r->context, FI_RECV | (r->tagged ? FI_TAGGED : FI_MSG), len, nullptr, 0, 0,
               FI_ADDR_NOTAVAIL, err, 0};
  bool multi = r->flags & FI_MULTI_RECV;
  if (multi) {
    r->inflight--;
    if (r->retired && r->inflight == 0) c.flags |= FI_MULTI_RECV;
  }
  write_cq(rx_cq_, c);
  if (recv_cntr_) recv_cntr_->inc_err();
  if (!multi || (r->retired && r->inflight == 0)) free_recv(r);
}

// A receive-side entry: with FI_SOURCE_ERR, a success whose sender the AV
// does not hold becomes an FI_EADDRNOTAVAIL error entry carrying the
// sender's name (fi_cq(3)), which the application can fi_av_insert.
void Endpoint::write_rx(const Completion& c, PeerId peer) {
  if (!rx_cq_) return;
  size_t len = 0;
  const void* name = nullptr;
  if (source_err_ && c.err == 0 && c.src == FI_ADDR_NOTAVAIL) name = dev_->peer_name(peer, &len);
  if (!name) {
    rx_cq_->push(c);
    return;
  }
  Completion e = c;
  e.err = FI_EADDRNOTAVAIL;
  if (info_->addr_format == FI_ADDR_STR) {  // in the AV's format: the string, NUL included
    std::string u = name_to_uri(name, len);
    rx_cq_->push_source_err(e, u.c_str(), u.size() + 1);
    return;
  }
  rx_cq_->push_source_err(e, name, len);
}

ssize_t Endpoint::cancel(void* context) {
  RecvOp* r = matcher_.find_context(context);
  if (!r) return -FI_ENOENT;
  matcher_.posted(r->tagged).remove(r);
  Completion c{context, FI_RECV | (r->tagged ? FI_TAGGED : FI_MSG), 0, nullptr, 0, 0,
               FI_ADDR_NOTAVAIL, FI_ECANCELED, 0};
  if (r->flags & FI_MULTI_RECV) {
    r->retired = true;
    // Messages placed in it still arriving: the buffer is not released yet
    // (fi_cq(3)), so no FI_MULTI_RECV here; the last of them carries it.
    if (r->inflight) {
      write_cq(rx_cq_, c);
      return 0;
    }
    c.flags |= FI_MULTI_RECV;
  }
  write_cq(rx_cq_, c);
  free_recv(r);
  return 0;
}

} // namespace pm
