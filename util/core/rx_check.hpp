// The validation boundary of the core (STYLE rule 13): every packet a
// device hands up passes check_packet() before any handler sees it. It
// checks the core header against the protocol and the endpoint's limits
// with overflow-safe arithmetic (`a <= total && b <= total - a`), and only
// a packet that passed becomes a CheckedPacket, the one type the handlers
// take. Handlers may then trust op, flags, lengths, offsets and counts;
// what depends on state (which message a DATA segment belongs to, which
// registered region a key names) is still checked where that state is.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device.hpp"

namespace pm {

// Limits an endpoint sets for what a peer may claim.
struct RxLimits {
  size_t max_payload = 0;   // largest payload of one packet from this peer
  size_t reply_payload = 0; // largest packet to it (an atomic's reply fits one); 0: max_payload
  uint64_t max_msg = 0;     // ep_attr->max_msg_size
  uint64_t eager_max = 0;   // largest message a peer may send eagerly
  bool dgram = false;       // FI_EP_DGRAM: one packet per message
};

// The protocol's bound on eagerly sent messages: the rendezvous threshold
// (and inject size) are clamped to it, so a receiver can refuse an eager
// header that claims more, whatever the sender's settings.
constexpr uint64_t kMaxEagerMsg = uint64_t(1) << 20;
// Largest count of one remote atomic (bounded again by the packet size).
constexpr uint64_t kMaxAtomicCount = uint64_t(1) << 16;

class CheckedPacket {
 public:
  PeerId peer() const { return peer_; }
  const PktHdr& hdr() const { return hdr_; }
  const uint8_t* payload() const { return payload_; }
  size_t len() const { return len_; }

 private:
  friend const char* check_packet(const RxPacket& in, const RxLimits& lim, CheckedPacket* out) noexcept;
  PeerId peer_ = kNoPeer;
  PktHdr hdr_{};
  const uint8_t* payload_ = nullptr;
  size_t len_ = 0;
};

// nullptr and *out filled when the packet is well formed; otherwise the
// reason it is not (for the statistics and the log), *out untouched.
const char* check_packet(const RxPacket& in, const RxLimits& lim, CheckedPacket* out) noexcept;

}  // namespace pm
