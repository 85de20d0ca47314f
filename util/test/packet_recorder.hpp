// A PacketSink for device unit tests: keeps a copy of every packet.
#pragma once

#include <cstdint>
#include <vector>

#include "device.hpp"

struct Got {
  pm::PeerId peer;
  pm::PktHdr hdr;
  std::vector<uint8_t> data;
};

class Recorder final : public pm::PacketSink {
 public:
  bool on_packet(const pm::RxPacket& p) noexcept override {
    if (got.size() >= room) {  // backpressure: "no room now", offered again later
      refused++;
      return false;
    }
    const uint8_t* b = static_cast<const uint8_t*>(p.payload);
    got.push_back({p.peer, *p.hdr, std::vector<uint8_t>(b, b + p.payload_len)});
    return true;
  }
  void on_peer_reset(pm::PeerId peer) noexcept override { resets.push_back(peer); }
  std::vector<Got> got;
  size_t room = SIZE_MAX;           // packets taken before the sink says "no room"
  uint64_t refused = 0;
  std::vector<pm::PeerId> resets;
};
