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
  // Received frames: when the kernel took it (CLOCK_REALTIME, ns), where the
  // backend knows; 0 otherwise (the device then counts from its poll).
  uint64_t rx_real_ns = 0;
  // Frames sent: the peer said it takes frames carried in GSO packets (its
  // HELLO), so this one may travel in one (FI_PMETH_GSO); else it goes alone.
  bool gso = false;
  // The sender keeps the data where it is, unchanged, until the next
  // tx_flush() returns: the backend may keep a pointer instead of a copy
  // (it copies what it still holds when tx_flush returns, Wire::tx_held).
  bool stays = false;
  // Backends that gather (Wire::gathers): the frame goes on with tail_len
  // more bytes from here (a message's payload where it is; it stays
  // unchanged until tx_flush() returns, as `stays` data does).
  const uint8_t* tail = nullptr;
  size_t tail_len = 0;
  size_t size() const noexcept { return len + tail_len; }
};

class Wire {
 public:
  virtual ~Wire() = default;
  // Queues up to n frames; returns how many were taken (fewer when full).
  virtual int tx_burst(const Frame* f, int n) noexcept = 0;
  // Whether tx_burst takes frames in two pieces (Frame::tail).
  virtual bool gathers() const noexcept { return false; }
  // Hands queued frames to the hardware / kernel.
  virtual void tx_flush() noexcept = 0;
  // After tx_flush: frames taken by tx_burst still wait in the backend (no
  // room in the ring yet); the device flushes again later.
  virtual bool tx_held() const noexcept { return false; }
  // Up to max received frames, valid until rx_release().
  virtual int rx_burst(Frame* f, int max) noexcept = 0;
  // Cheap test before rx_burst: false only when nothing has arrived (a
  // load of the next receive slot's status word, no call).
  bool rx_maybe() const noexcept {
    return !rx_flag_ || (__atomic_load_n(rx_flag_, __ATOMIC_ACQUIRE) & rx_mask_);
  }
  virtual void rx_release() noexcept = 0;
  // After rx_burst returned fewer than asked: whether it stopped with frames
  // still waiting (not for want of them).
  virtual bool rx_more() const noexcept { return false; }
  // After a burst that left frames waiting: whether the receive ring may be
  // near full, where a loss at the tail of the arrivals would show in no
  // later frame (the device then reads the kernel's count once drained).
  // A backend that cannot tell says yes.
  virtual bool rx_crowded() const noexcept { return true; }
  // Readable when frames are waiting.
  virtual int fd() const noexcept = 0;
  virtual size_t mtu() const noexcept = 0;
  // The interface's MTU: what a peer whose frames are not shortened (no
  // GSO mode) may send; mtu() where the backend does not shorten them.
  virtual size_t link_mtu() const noexcept { return mtu(); }
  // Frames the receive side can hold before the kernel drops (0: unbounded).
  virtual size_t rx_capacity() const noexcept { return 0; }
  // Frames for this endpoint the kernel dropped for want of room on the
  // receive side since the wire opened (slow path: may syscall; 0 where the
  // backend cannot tell).
  virtual uint64_t rx_dropped() noexcept { return 0; }
  // Whether the kernel dropped frames for want of room since the last call:
  // a received frame said so (AF_PACKET's TP_STATUS_LOSING), or rx_dropped()
  // found new drops. Cleared by the call.
  bool take_losing() noexcept {
    bool l = losing_;
    losing_ = false;
    return l;
  }
  // Whether frames carried in GSO packets (UDP/IPv4, packet_wire.cpp)
  // reach this endpoint: advertised in its HELLO.
  virtual bool accepts_gso() const noexcept { return false; }
  virtual const uint8_t* mac() const noexcept = 0;
  // Whether the link can carry frames now (slow path: may syscall).
  virtual bool link_up() noexcept { return true; }
  virtual const char* kind() const noexcept = 0;
  // The backend's own counters for the statistics (" name=value" each; may
  // be empty).
  virtual void append_counters(std::string& out) const {}
 protected:
  // Backends that can: the word that changes when the next frame arrives,
  // and the bits that mean it has (kept current by rx_release()).
  const uint32_t* rx_flag_ = nullptr;
  uint32_t rx_mask_ = 0;
  bool losing_ = false;
};

// GSO mode's outer headers (Ethernet, IPv4, UDP) before each frame carried
// in a GSO packet: frames to a peer in it are this much shorter.
constexpr size_t kGsoOuter = 14 + 20 + 8;

// How an XDP program is attached: native (in the driver) or generic (SKB).
enum class XdpMode { kAuto, kNative, kSkb };

struct WireConfig {
  std::string iface;
  uint16_t ethertype;
  uint32_t ep_id;          // frames for other endpoint ids may be filtered out
  size_t rx_ring_bytes;
  size_t tx_ring_bytes;
  // AF_PACKET without CAP_NET_RAW: the pmethd broker to ask (empty: none).
  std::string broker;
  // AF_PACKET only: transmit past the qdisc (not for brokered sockets).
  bool qdisc_bypass = false;
  // AF_PACKET only: a run of full frames to one peer leaves as one UDP/IPv4
  // packet the kernel segments (GSO), one frame per segment, and such
  // packets are taken apart on receipt (packet_wire.cpp). The wire's mtu()
  // is then 42 bytes less: the outer Ethernet, IPv4 and UDP headers.
  bool gso = false;
  // AF_XDP only.
  XdpMode xdp_mode = XdpMode::kAuto;
  uint32_t xdp_queue = 0;   // the receive queue the socket binds to
  bool xdp_zerocopy = false;  // require zero-copy (else the kernel's choice)
  unsigned busy_poll_us = 0;  // SO_BUSY_POLL on the socket (0: off)
  // Refuse frames of several chunks in copy mode (FI_PMETH_WIRE=auto: on
  // veth they cost the sending cpu a third kernel copy, and AF_PACKET is
  // faster; docs/performance.md).
  bool xdp_single_chunk = false;
};

// The backends a user can ask for (FI_PMETH_WIRE); auto tries the best
// first (see open_wire).
enum class WireKind { kAuto, kPacket, kXdp, kVerbs, kLoop };
const char* wire_kind_name(WireKind k);
bool parse_wire_kind(const std::string& s, WireKind* k);
bool parse_xdp_mode(const std::string& s, XdpMode* m);

// AF_PACKET with mmap'ed TPACKET_V2 rings (needs CAP_NET_RAW).
std::unique_ptr<Wire> open_packet_wire(const WireConfig& cfg, int* err, std::string* why);
// In-process wire with programmable faults (tests).
std::unique_ptr<Wire> open_loop_wire(const WireConfig& cfg, int* err, std::string* why);
// AF_XDP through libxdp/libbpf (needs CAP_NET_RAW, CAP_NET_ADMIN and
// CAP_BPF); -FI_ENOSYS where the build had no libxdp.
std::unique_ptr<Wire> open_xdp_wire(const WireConfig& cfg, int* err, std::string* why);
// A verbs raw-packet QP (rdma-core); -FI_ENOSYS where the build had no
// libibverbs, -FI_ENODEV where no device can do raw packets.
std::unique_ptr<Wire> open_verbs_wire(const WireConfig& cfg, int* err, std::string* why);
// Whether a device that may do raw-packet QPs (an rdma-core device with an
// Ethernet port) exists; else false with the reason.
bool verbs_raw_device_present(std::string* why);
// Whether this build has the backend at all.
bool xdp_wire_built();
bool verbs_wire_built();

// The wire of kind k (kAuto: verbs where a raw-packet device is present, then
// AF_XDP where it works, else AF_PACKET). Each backend that auto passed
// over is named with its reason in *notes (for an info-level log).
std::unique_ptr<Wire> open_wire(const WireConfig& cfg, WireKind k, int* err, std::string* why,
                                std::string* notes);

} // namespace pm::eth
