#include "core/rx_check.hpp"

#include <algorithm>

#include "core/atomic_ops.hpp"
#include "core/tag_matcher.hpp"

namespace pm {

namespace {

// Completion statuses travel as positive FI_E* codes; nothing larger.
constexpr uint64_t kMaxStatus = 0xffff;

// `off` and `len` lie inside a message of `total` bytes.
bool within(uint64_t off, uint64_t len, uint64_t total) { return off <= total && len <= total - off; }

// A payload that is a list of the sender's buffers (single copy): whole
// entries, at most kMaxIov, adding up exactly to `total` (no wrap).
bool remote_iovs_ok(const uint8_t* p, size_t plen, uint64_t total) {
  if (plen % sizeof(RemoteIov) || plen / sizeof(RemoteIov) > kMaxIov) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < plen / sizeof(RemoteIov); i++) {
    uint64_t l = get_le64(p + i * sizeof(RemoteIov) + 8);
    if (l > total - sum) return false;
    sum += l;
  }
  return sum == total;
}

const char* check_core(const PktHdr& h, const uint8_t* p, size_t plen, const RxLimits& lim) {
  constexpr uint8_t kMsgFlags = kPktTagged | kPktCqData;
  if (h.seg_len != plen) return "segment length differs from the payload";
  if (plen > lim.max_payload) return "payload larger than a packet";
  if (h.reserved && h.op != kPktAtomic) return "reserved field set";
  switch (h.op) {
  case kPktEager:
    if (h.flags & ~kMsgFlags) return "unknown flags";
    if (h.offset) return "eager packet with an offset";
    if (plen > h.msg_len) return "eager payload longer than its message";
    if (lim.dgram ? plen != h.msg_len : h.msg_len > lim.eager_max) return "eager message too long";
    return nullptr;
  case kPktData:
    if (lim.dgram) return "segment on a datagram endpoint";
    if (h.flags & ~kMsgFlags) return "unknown flags";
    if (h.msg_len > lim.max_msg) return "message longer than max_msg_size";
    if (!plen || !within(h.offset, plen, h.msg_len)) return "segment outside its message";
    return nullptr;
  case kPktRts:
    if (lim.dgram) return "rendezvous on a datagram endpoint";
    if (h.flags & ~kMsgFlags) return "unknown flags";
    if (h.msg_len > lim.max_msg) return "message longer than max_msg_size";
    if (h.offset || !remote_iovs_ok(p, plen, h.msg_len)) return "malformed rendezvous request";
    return nullptr;
  case kPktHelp:
    if (lim.dgram) return "rendezvous on a datagram endpoint";
    if (h.flags) return "unknown flags";
    if (!h.msg_len || h.msg_len > lim.max_msg || h.offset > lim.max_msg - h.msg_len)
      return "help request outside a message";
    if (!remote_iovs_ok(p, plen, h.msg_len)) return "malformed help request";
    return nullptr;
  case kPktCts:
  case kPktFin:
  case kPktHelped:
  case kPktRmaAck:
    if (lim.dgram) return "control packet on a datagram endpoint";
    if (plen || (h.flags & ~kPktCma)) return "malformed control packet";
    if (h.op != kPktCts && h.tag > kMaxStatus) return "status out of range";
    return nullptr;
  case kPktRndvHint:
    if (lim.dgram) return "control packet on a datagram endpoint";
    if (plen || h.flags || h.msg_len || h.offset || h.msg_id || h.cq_data || h.tag > 1)
      return "malformed rendezvous hint";
    return nullptr;
  case kPktWrite:
  case kPktRead:
    if (lim.dgram) return "RMA on a datagram endpoint";
    if (h.msg_len > lim.max_msg) return "RMA longer than max_msg_size";
    if (h.flags & kPktCma) {
      if (h.flags & ~(kPktCma | kPktCqData)) return "unknown flags";
      return remote_iovs_ok(p, plen, h.msg_len) ? nullptr : "malformed single-copy request";
    }
    if (h.op == kPktRead) return plen || h.flags ? "malformed read request" : nullptr;
    if (h.flags & ~kPktCqData) return "unknown flags";
    if (plen < 8 || !within(get_le64(p), plen - 8, h.msg_len)) return "write segment outside its region";
    return nullptr;
  case kPktAtomic: {
    if (lim.dgram) return "atomic on a datagram endpoint";
    if (h.flags & ~(kPktFetch | kPktCompare)) return "unknown flags";
    if ((h.flags & kPktCompare) && !(h.flags & kPktFetch)) return "compare without fetch";
    fi_op op = fi_op(h.reserved & 0xff);
    fi_datatype dt = fi_datatype(h.reserved >> 8);
    size_t sz = atomic_size(dt);
    if (!sz) return "unknown atomic datatype";
    size_t reply = lim.reply_payload ? std::min(lim.reply_payload, lim.max_payload) : lim.max_payload;
    if (!h.msg_len || h.msg_len > kMaxAtomicCount || h.msg_len * sz > reply)
      return "atomic count out of range";
    uint64_t want = op == FI_ATOMIC_READ ? 0 : h.msg_len * sz * ((h.flags & kPktCompare) ? 2 : 1);
    if (plen != want) return "atomic operands of the wrong size";
    return nullptr;  // the (op, datatype) pair is checked by the handler, which answers
  }
  case kPktReadResp:
    if (lim.dgram) return "RMA on a datagram endpoint";
    if (h.flags & ~kPktCma) return "unknown flags";
    if (h.tag > kMaxStatus || !within(h.offset, plen, h.msg_len)) return "malformed read response";
    return nullptr;
  case kPktAtomicResp:
    if (lim.dgram) return "atomic on a datagram endpoint";
    if (h.flags || h.tag > kMaxStatus) return "malformed atomic response";
    return nullptr;
  default:
    return "unknown op";
  }
}

}  // namespace

const char* check_packet(const RxPacket& in, const RxLimits& lim, CheckedPacket* out) noexcept {
  if (!in.hdr || in.peer == kNoPeer || (in.payload_len && !in.payload)) return "no header or payload";
  const uint8_t* p = static_cast<const uint8_t*>(in.payload);
  if (const char* why = check_core(*in.hdr, p, in.payload_len, lim)) return why;
  out->peer_ = in.peer;
  out->hdr_ = *in.hdr;  // a copy: shared memory cannot change it after the check
  out->payload_ = p;
  out->len_ = in.payload_len;
  return nullptr;
}

}  // namespace pm
