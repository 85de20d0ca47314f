// Posted-receive and unexpected-message queues with libfabric matching
// rules: FIFO order, 64-bit tags with ignore bits, directed receives,
// separate tagged and untagged spaces. Independent of any device.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include <rdma/fabric.h>

#include "base/list.hpp"
#include "core/packet.hpp"
#include "device.hpp"

namespace pm {

constexpr size_t kMaxIov = 8;

struct RecvOp {
  ListHook hook;
  void* context = nullptr;
  uint64_t flags = 0;        // FI_MULTI_RECV, FI_COMPLETION, FI_CLAIM ...
  bool tagged = false;
  bool completion = true;    // write a success completion
  PeerId src = kNoPeer;      // kNoPeer: any source
  uint64_t tag = 0;
  uint64_t ignore = 0;
  struct iovec iov[kMaxIov];
  size_t iovcnt = 0;
  size_t len = 0;
  // multi-receive state
  size_t used = 0;           // bytes of the buffer consumed
  size_t inflight = 0;       // messages placed but not yet complete
  bool retired = false;      // no more messages will be placed
};

struct Unexp {
  ListHook hook;
  PeerId peer = kNoPeer;
  PktHdr hdr{};              // the EAGER or RTS header as received
  std::unique_ptr<uint8_t[]> data;  // EAGER payload (msg_len bytes)
  size_t received = 0;       // EAGER bytes arrived so far
  std::unique_ptr<RemoteIov[]> riov;  // RTS: sender's iovs
  size_t riovcnt = 0;
  void* claim_ctx = nullptr; // claimed by a FI_PEEK|FI_CLAIM with this context
  RecvOp* waiting = nullptr; // matched before all segments arrived
  size_t base = 0;           // where in `waiting` it goes (a multi-receive buffer's place kept for it)
  // The endpoint's unexpected-memory total, charged `charge` bytes for this
  // message for as long as it exists (see Endpoint's cap).
  size_t* account = nullptr;
  size_t charge = 0;

  Unexp() = default;
  Unexp(const Unexp&) = delete;
  Unexp& operator=(const Unexp&) = delete;
  ~Unexp() {
    if (account) *account -= charge;
  }

  bool tagged() const { return hdr.flags & kPktTagged; }
  bool complete() const { return hdr.op != kPktEager || received >= hdr.msg_len; }
};

inline bool tag_match(uint64_t want, uint64_t ignore, uint64_t tag) {
  return ((want ^ tag) & ~ignore) == 0;
}

class TagMatcher {
 public:
  using RecvList = IntrusiveList<RecvOp, &RecvOp::hook>;
  using UnexpList = IntrusiveList<Unexp, &Unexp::hook>;

  void post(RecvOp* r) { posted(r->tagged).push_back(r); }

  // The first posted receive an incoming message matches (not removed).
  RecvOp* find_posted(PeerId peer, bool tagged, uint64_t tag) {
    RecvList& l = posted(tagged);
    for (RecvOp* r = l.front(); r; r = l.next(r))
      if ((r->src == kNoPeer || r->src == peer) && (!tagged || tag_match(r->tag, r->ignore, tag)))
        return r;
    return nullptr;
  }

  void add_unexpected(Unexp* u) { unexpected(u->tagged()).push_back(u); }

  // The first unexpected message a receive matches (not removed). Claimed
  // messages and those a receive already waits for are skipped.
  Unexp* find_unexpected(PeerId src, bool tagged, uint64_t tag, uint64_t ignore) {
    UnexpList& l = unexpected(tagged);
    for (Unexp* u = l.front(); u; u = l.next(u))
      if (!u->claim_ctx && !u->waiting && (src == kNoPeer || src == u->peer) &&
          (!tagged || tag_match(tag, ignore, u->hdr.tag)))
        return u;
    return nullptr;
  }

  Unexp* find_claimed(void* ctx) {
    if (!ctx) return nullptr;  // unclaimed messages have no context
    for (bool t : {true, false}) {
      UnexpList& l = unexpected(t);
      for (Unexp* u = l.front(); u; u = l.next(u))
        if (u->claim_ctx == ctx) return u;
    }
    return nullptr;
  }

  RecvOp* find_context(void* ctx) {
    for (bool t : {true, false}) {
      RecvList& l = posted(t);
      for (RecvOp* r = l.front(); r; r = l.next(r))
        if (r->context == ctx) return r;
    }
    return nullptr;
  }

  RecvList& posted(bool tagged) { return tagged ? posted_tagged_ : posted_msg_; }
  UnexpList& unexpected(bool tagged) { return tagged ? unexp_tagged_ : unexp_msg_; }

 private:
  RecvList posted_tagged_, posted_msg_;
  UnexpList unexp_tagged_, unexp_msg_;
};

} // namespace pm
