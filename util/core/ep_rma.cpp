// One-sided operations: RMA writes and reads and atomics. The initiator
// sends requests through the device like messages (per-peer FIFO); the
// target executes them in its own progress after checking the key, the range
// and the access rights, answers with an ACK, the data, or the old values,
// and refuses anything else with an error the initiator completes with.
#include <algorithm>
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/iov.hpp"
#include "base/log.hpp"
#include "core/atomic_ops.hpp"
#include "core/cntr.hpp"
#include "core/domain.hpp"
#include "core/endpoint.hpp"
#include "core/rx_check.hpp"

namespace pm {

namespace {
constexpr unsigned kIdBits = 20;

uint16_t pack_atomic(fi_op op, fi_datatype dt) { return uint16_t(unsigned(op) | (unsigned(dt) << 8)); }
}  // namespace

ssize_t Endpoint::rma(bool write, const struct iovec* iov, size_t iovcnt, fi_addr_t dest,
                      const RmaTarget& t, uint64_t data, void* context, uint64_t flags,
                      SuccessEntry entry) {
  if (!enabled_) return -FI_EOPBADSTATE;
  if (iovcnt > kMaxIov || !(info_->caps & FI_RMA)) return -FI_EINVAL;
  PeerId peer = peer_of(dest);
  if (peer == kNoPeer) return -FI_EINVAL;
  size_t len = iov_total(iov, iovcnt);
  if (len != t.len) return -FI_EINVAL;
  bool inject = flags & FI_INJECT;
  if (inject && (!write || len > inject_size_)) return -FI_EINVAL;
  TxOp* op = alloc_tx();
  if (!op) return -FI_EAGAIN;
  op->context = context;
  op->peer = peer;
  op->cq_flags = FI_RMA | (write ? FI_WRITE : FI_READ);
  op->completion = wants_success(flags, entry);
  op->hdr = PktHdr{};
  op->hdr.op = write ? kPktWrite : kPktRead;
  if (write && (flags & FI_REMOTE_CQ_DATA)) {
    op->hdr.flags = kPktCqData;
    op->hdr.cq_data = data;
  }
  op->hdr.tag = t.key;
  op->hdr.offset = t.addr;
  op->hdr.msg_len = len;
  op->hdr.msg_id = (uint64_t(op->gen) << kIdBits) | op->index;
  // Large transfers to a peer we can reach by single copy: the target
  // checks the request, then copies straight between the two processes.
  if (!inject && len > rndv_threshold_ && dev_->can_read_remote(peer)) op->hdr.flags |= kPktCma;
  std::copy(iov, iov + iovcnt, op->iov);
  op->iovcnt = iovcnt;
  return queue_op(op, inject, flags & FI_MORE);
}

int Endpoint::atomic_valid(fi_datatype dt, fi_op op, int kind, size_t* count) const {
  if (!pm::atomic_valid(dt, op, AtomicKind(kind))) return -FI_EOPNOTSUPP;
  size_t per = atomic_size(dt) * (kind == int(AtomicKind::kCompare) ? 2 : 1);
  if (count) *count = dev_->max_payload() / per;
  return 0;
}

ssize_t Endpoint::atomic(const struct iovec* iov, size_t iovcnt, const struct iovec* cmp, size_t cmpcnt,
                         const struct iovec* res, size_t rescnt, fi_addr_t dest, const RmaTarget& t,
                         fi_datatype dt, fi_op op, void* context, uint64_t flags, int kind,
                         SuccessEntry entry) {
  if (!enabled_) return -FI_EOPBADSTATE;
  if (!(info_->caps & FI_ATOMIC) || iovcnt > kMaxIov || rescnt > kMaxIov) return -FI_EINVAL;
  size_t max = 0;
  if (int rc = atomic_valid(dt, op, kind, &max)) return rc;
  PeerId peer = peer_of(dest);
  if (peer == kNoPeer) return -FI_EINVAL;
  size_t sz = atomic_size(dt);
  size_t count = t.len;  // elements
  bool reads = op == FI_ATOMIC_READ;
  size_t opbytes = reads ? 0 : count * sz;
  if (count == 0 || count > max || (!reads && iov_total(iov, iovcnt) != opbytes)) return -FI_EINVAL;
  bool compare = kind == int(AtomicKind::kCompare);
  if (compare && iov_total(cmp, cmpcnt) != count * sz) return -FI_EINVAL;
  bool fetch = kind != int(AtomicKind::kWrite);
  if (fetch && iov_total(res, rescnt) != count * sz) return -FI_EINVAL;
  TxOp* o = alloc_tx();
  if (!o) return -FI_EAGAIN;
  // Operands (and compares) travel in one packet, copied now.
  size_t plen = opbytes + (compare ? count * sz : 0);
  uint8_t* buf = op_buffer(o, plen);
  if (!reads) iov_copy_from(iov, iovcnt, 0, buf, opbytes);
  if (compare) iov_copy_from(cmp, cmpcnt, 0, buf + opbytes, count * sz);
  o->iov[0] = iovec{buf, plen};
  o->iovcnt = 1;
  std::copy(res, res + rescnt, o->res);
  o->rescnt = rescnt;
  o->context = context;
  o->peer = peer;
  o->cq_flags = FI_ATOMIC | (fetch ? FI_READ : FI_WRITE);
  o->completion = wants_success(flags, entry);
  o->hdr = PktHdr{};
  o->hdr.op = kPktAtomic;
  o->hdr.flags = uint8_t((fetch ? kPktFetch : 0) | (compare ? kPktCompare : 0));
  o->hdr.reserved = pack_atomic(op, dt);
  o->hdr.tag = t.key;
  o->hdr.offset = t.addr;
  o->hdr.msg_len = count;
  o->hdr.msg_id = (uint64_t(o->gen) << kIdBits) | o->index;
  return queue_op(o, false, flags & FI_MORE);
}

// ---- target side ----------------------------------------------------------

void Endpoint::refuse(PeerId peer, const char* what, uint64_t key, int err) {
  if (refused_++ < 16)  // logged, not flooded: the count is in the statistics
    PM_WARN(FI_LOG_EP_DATA, "refused %s from %s (key 0x%llx): %s; memory untouched", what,
            peer_str(peer).c_str(), (unsigned long long)key, fi_strerror(err));
}

void Endpoint::remote_event(Mr* mr, bool write, const PktHdr* h) {
  Cntr* ep_cntr = write ? rwrite_cntr_ : rread_cntr_;
  Cntr* mr_cntr = mr ? (write ? mr->rwrite_cntr : mr->rread_cntr) : nullptr;
  if (ep_cntr) ep_cntr->inc();
  if (mr_cntr && mr_cntr != ep_cntr) mr_cntr->inc();
  if (write && h && (h->flags & kPktCqData)) {
    Completion c{nullptr, FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA, 0, nullptr, h->cq_data, 0,
                 FI_ADDR_NOTAVAIL, 0, 0};
    write_cq(rx_cq_, c);
  }
}

bool Endpoint::on_write(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  size_t plen = pk.len();  // >= 8 (rx_check)
  const uint8_t* p = pk.payload();
  uint64_t seg_off = get_le64(p);  // read once; checked against msg_len below
  size_t seg = plen - 8;
  AsmKey k{peer, h.msg_id};
  auto found = seg == h.msg_len ? rma_in_.end() : rma_in_.find(k);
  if (seg != h.msg_len && found == rma_in_.end() && rma_in_.size() >= kMaxRmaIn)
    return false;  // as many multi-packet writes in progress as kept: this one waits in the device
  struct iovec dst[kMaxIov];
  size_t ndst = 0;
  Mr* mr = nullptr;
  int st = dom_.mr_locate(h.tag, h.offset, h.msg_len, FI_REMOTE_WRITE, dst, kMaxIov, &ndst, &mr);
  if (st == 0 && (seg_off > h.msg_len || seg > h.msg_len - seg_off)) st = FI_EINVAL;
  if (st == 0) iov_copy_to(dst, ndst, seg_off, p + 8, seg);
  bool last;
  if (seg == h.msg_len) {
    last = true;
  } else {
    RmaIn& in = found != rma_in_.end() ? found->second : rma_in_[k];
    in.received += seg;
    if (st && !in.status) in.status = st;
    if (!st) in.mr = mr;
    last = in.received >= h.msg_len;
    if (last) {
      st = in.status;
      rma_in_.erase(k);
    } else if (st == in.status && in.received == seg && st) {
      refuse(peer, "RMA write", h.tag, st);
    }
  }
  if (!last) return true;
  if (st) refuse(peer, "RMA write", h.tag, st);
  else remote_event(mr, true, &h);
  send_ctrl(peer, kPktRmaAck, h.msg_id, uint64_t(st));
  return true;
}

// A single-copy write or read: checked like any other, then one CMA call
// between the target's registered memory and the initiator's buffers.
bool Endpoint::on_rma_cma(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  bool write = h.op == kPktWrite;
  size_t rcnt = pk.len() / sizeof(RemoteIov);  // <= kMaxIov (rx_check)
  RemoteIov riov[kMaxIov];
  memcpy(riov, pk.payload(), rcnt * sizeof(RemoteIov));  // one read of the peer's bytes
  struct iovec local[kMaxIov], remote[kMaxIov];
  size_t lcnt = 0;
  Mr* mr = nullptr;
  int st = dom_.mr_locate(h.tag, h.offset, h.msg_len, write ? FI_REMOTE_WRITE : FI_REMOTE_READ, local, kMaxIov,
                          &lcnt, &mr);
  uint64_t rlen = 0;
  bool wrapped = false;
  for (size_t i = 0; i < rcnt; i++) {
    remote[i] = iovec{reinterpret_cast<void*>(riov[i].addr), size_t(riov[i].len)};
    wrapped |= riov[i].len > UINT64_MAX - rlen;
    rlen += riov[i].len;
  }
  if (!st && (wrapped || rlen != h.msg_len)) st = FI_EINVAL;
  if (!st) {
    ssize_t n = write ? dev_->read_remote(peer, local, lcnt, remote, rcnt)
                      : dev_->write_remote(peer, local, lcnt, remote, rcnt);
    if (n != ssize_t(h.msg_len)) {
      PM_WARN(FI_LOG_EP_DATA, "single-copy %s with %s failed (%zd)", write ? "write" : "read",
              peer_str(peer).c_str(), n);
      st = FI_EIO;
    }
  }
  if (st && st != FI_EIO) refuse(peer, write ? "RMA write" : "RMA read", h.tag, st);
  if (!st) remote_event(mr, write, write ? &h : nullptr);
  send_ctrl(peer, write ? kPktRmaAck : kPktReadResp, h.msg_id, uint64_t(st), kPktCma);
  return true;
}

bool Endpoint::on_read(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  if (pending_reads_.size() >= kMaxPendingTargetOps) return false;  // waits in the device
  struct iovec src[kMaxIov];
  size_t nsrc = 0;
  Mr* mr = nullptr;
  int st = dom_.mr_locate(h.tag, h.offset, h.msg_len, FI_REMOTE_READ, src, kMaxIov, &nsrc, &mr);
  if (st) {
    refuse(peer, "RMA read", h.tag, st);
    send_ctrl(peer, kPktReadResp, h.msg_id, uint64_t(st));
    return true;
  }
  remote_event(mr, false, nullptr);
  start_read_resp(peer, h);
  return true;
}

// Streams the data of a checked read back; without a free tx op it waits.
void Endpoint::start_read_resp(PeerId peer, const PktHdr& h) {
  struct iovec src[kMaxIov];
  size_t nsrc = 0;
  Mr* mr = nullptr;
  if (dom_.mr_locate(h.tag, h.offset, h.msg_len, FI_REMOTE_READ, src, kMaxIov, &nsrc, &mr)) {
    send_ctrl(peer, kPktReadResp, h.msg_id, uint64_t(FI_EKEYREJECTED));  // closed meanwhile
    return;
  }
  TxOp* op = alloc_tx();
  if (!op) {
    pending_reads_.emplace_back(peer, h);
    return;
  }
  op->silent = true;
  op->completion = false;
  op->peer = peer;
  op->cq_flags = 0;
  op->hdr = PktHdr{};
  op->hdr.op = kPktReadResp;
  op->hdr.msg_id = h.msg_id;
  op->hdr.msg_len = h.msg_len;
  std::copy(src, src + nsrc, op->iov);
  op->iovcnt = nsrc;
  op->limit = h.msg_len;
  op->state = TxOp::kStreaming;
  op->start_ns = now_ns();
  if (h.msg_len == 0) {
    send_ctrl(peer, kPktReadResp, h.msg_id, 0);
    free_tx(op);
    return;
  }
  streams_.push_back(op);
}

bool Endpoint::on_atomic(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  const void* payload = pk.payload();
  size_t plen = pk.len();
  fi_op op = fi_op(h.reserved & 0xff);
  fi_datatype dt = fi_datatype(h.reserved >> 8);
  bool fetch = h.flags & kPktFetch;
  bool compare = h.flags & kPktCompare;
  AtomicKind kind = compare ? AtomicKind::kCompare : fetch ? AtomicKind::kFetch : AtomicKind::kWrite;
  size_t sz = atomic_size(dt);
  size_t count = h.msg_len;
  int st = 0;
  if (!pm::atomic_valid(dt, op, kind)) st = FI_EOPNOTSUPP;  // count and sizes: rx_check
  size_t want = op == FI_ATOMIC_READ ? 0 : count * sz * (compare ? 2 : 1);
  if (!st && plen != want) st = FI_EINVAL;
  uint64_t access = op == FI_ATOMIC_READ ? FI_REMOTE_READ
                    : fetch              ? (FI_REMOTE_READ | FI_REMOTE_WRITE)
                                         : FI_REMOTE_WRITE;
  char* va = nullptr;
  Mr* mr = nullptr;
  if (!st) st = dom_.mr_check(h.tag, h.offset, count * sz, access, &va, &mr);
  TxOp* resp = nullptr;
  if (fetch && !st) {
    // Behind fetches already waiting, so fetches run in order (ATOMIC_RAR).
    resp = pending_atomics_.empty() ? alloc_tx() : nullptr;
    if (!resp) {  // FI_RM_ENABLED: retried once a tx op frees up, not failed
      if (pending_atomics_.size() >= kMaxPendingTargetOps) return false;  // waits in the device
      const uint8_t* p = static_cast<const uint8_t*>(payload);
      pending_atomics_.push_back({peer, h, std::vector<uint8_t>(p, p + plen)});
      return true;
    }
  }
  if (st) {
    refuse(peer, "atomic", h.tag, st);
    send_ctrl(peer, fetch ? kPktAtomicResp : kPktRmaAck, h.msg_id, uint64_t(st));
    return true;
  }
  const uint8_t* operand = op == FI_ATOMIC_READ ? nullptr : static_cast<const uint8_t*>(payload);
  const uint8_t* cmp = compare ? static_cast<const uint8_t*>(payload) + count * sz : nullptr;
  uint8_t* old = nullptr;
  if (resp) {
    old = op_buffer(resp, count * sz);
  }
  atomic_apply(dt, op, va, operand, cmp, old, count);
  // fi_endpoint(3): an endpoint's FI_REMOTE_WRITE counter counts RMA writes and
  // base atomics, its FI_REMOTE_READ counter reads, fetch and compare atomics;
  // fi_mr(3): a region's FI_REMOTE_WRITE counter every atomic that modifies it.
  if (!fetch) {
    remote_event(mr, true, nullptr);
  } else {
    remote_event(mr, false, nullptr);
    if (op != FI_ATOMIC_READ && mr && mr->rwrite_cntr) mr->rwrite_cntr->inc();
  }
  if (!resp) {
    send_ctrl(peer, kPktRmaAck, h.msg_id, 0);
    return true;
  }
  resp->silent = true;
  resp->completion = false;
  resp->peer = peer;
  resp->hdr = PktHdr{};
  resp->hdr.op = kPktAtomicResp;
  resp->hdr.msg_id = h.msg_id;
  resp->hdr.msg_len = count * sz;
  resp->iov[0] = iovec{old, count * sz};
  resp->iovcnt = 1;
  queue_op(resp, false);
  return true;
}

// ---- initiator side: replies ----------------------------------------------

void Endpoint::on_rma_reply(const CheckedPacket& pk) {
  const PktHdr& h = pk.hdr();
  PeerId peer = pk.peer();
  const void* payload = pk.payload();
  size_t plen = pk.len();
  TxOp* op = tx_by_id(h.msg_id);
  if (!op || op->state != TxOp::kWaitResp || op->peer != peer) return;
  int st = int(h.tag);
  if (h.op == kPktReadResp && !st && !(h.flags & kPktCma)) {
    size_t len = op->hdr.msg_len;
    // Only what is still missing of what we asked for (overflow-safe).
    if (h.offset > len || plen > len - h.offset || plen > len - op->sent) return;
    iov_copy_to(op->iov, op->iovcnt, h.offset, payload, plen);
    op->sent += plen;
    if (op->sent < len) return;
  } else if (h.op == kPktAtomicResp && !st) {
    iov_copy_to(op->res, op->rescnt, 0, payload, std::min(plen, iov_total(op->res, op->rescnt)));
  }
  waiting_.remove(op);
  if (op->by_ref) finish_by_ref(op, st, op->ticket);  // the reply's ACK normally released every frame
  else complete_tx(op, st);
}

}  // namespace pm
