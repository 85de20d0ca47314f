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
  void on_packet(const pm::RxPacket& p) noexcept override {
    const uint8_t* b = static_cast<const uint8_t*>(p.payload);
    got.push_back({p.peer, *p.hdr, std::vector<uint8_t>(b, b + p.payload_len)});
  }
  std::vector<Got> got;
};
