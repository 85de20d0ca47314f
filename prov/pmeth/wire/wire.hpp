// The narrow burst interface between the Ethernet device and a wire
// backend: one virtual call per burst. Frames are whole Ethernet frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pm::eth {

struct Frame {
  const uint8_t* data;
  size_t len;
};

class Wire {
 public:
  virtual ~Wire() = default;
  // Queues up to n frames; returns how many were taken (fewer when full).
  virtual int tx_burst(const Frame* f, int n) noexcept = 0;
  // Hands queued frames to the hardware / kernel.
  virtual void tx_flush() noexcept = 0;
  // Up to max received frames, valid until rx_release().
  virtual int rx_burst(Frame* f, int max) noexcept = 0;
  // Cheap test before rx_burst: false only when nothing has arrived (a
  // load of the next receive slot's status word, no call).
  bool rx_maybe() const noexcept {
    return !rx_flag_ || (__atomic_load_n(rx_flag_, __ATOMIC_ACQUIRE) & rx_mask_);
  }
  virtual void rx_release() noexcept = 0;
  // Readable when frames are waiting.
  virtual int fd() const noexcept = 0;
  virtual size_t mtu() const noexcept = 0;
  // Frames the receive side can hold before the kernel drops (0: unbounded).
  virtual size_t rx_capacity() const noexcept { return 0; }
  virtual const uint8_t* mac() const noexcept = 0;
  // Whether the link can carry frames now (slow path: may syscall).
  virtual bool link_up() noexcept { return true; }
  virtual const char* kind() const noexcept = 0;
 protected:
  // Backends that can: the word that changes when the next frame arrives,
  // and the bits that mean it has (kept current by rx_release()).
  const uint32_t* rx_flag_ = nullptr;
  uint32_t rx_mask_ = 0;
};

struct WireConfig {
  std::string iface;
  uint16_t ethertype;
  uint32_t ep_id;          // frames for other endpoint ids may be filtered out
  size_t rx_ring_bytes;
  size_t tx_ring_bytes;
};

// AF_PACKET with mmap'ed TPACKET_V2 rings (needs CAP_NET_RAW).
std::unique_ptr<Wire> open_packet_wire(const WireConfig& cfg, int* err, std::string* why);
// In-process wire with programmable faults (tests).
std::unique_ptr<Wire> open_loop_wire(const WireConfig& cfg, int* err, std::string* why);

} // namespace pm::eth
