// The pmshm device: packets through the receiver's queue, payloads inline in
// the queue cell or in a bounce chunk of the sender's region, and single copy
// with process_vm_readv (CMA) where the kernel allows it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "device.hpp"
#include "shm_region.hpp"

namespace pm::shm {

enum class CmaPolicy { kOff, kOn, kAuto };

struct DeviceConfig {
  RegionConfig region;
  CmaPolicy cma = CmaPolicy::kAuto;  // kOff: FI_PMSHM_DISABLE_CMA; kAuto: when it is faster
  int connect_timeout_ms; // how long a peer's region may be missing

  // pmshm's knob defaults (pmeth's composite device uses these).
  static DeviceConfig defaults() {
    return DeviceConfig{RegionConfig{"/dev/shm", 1024, 32, 32768}, CmaPolicy::kAuto, 2000};
  }
};

class ShmDevice final : public Device {
 public:
  // `key`: a well-known key (is_service_key) to take, 0 for a random one.
  // -FI_EADDRINUSE when a live endpoint holds that key.
  static std::unique_ptr<ShmDevice> open(const DeviceConfig& cfg, uint64_t host, int* err, uint64_t key = 0);

  const void* name() const noexcept override { return &name_; }
  size_t name_len() const noexcept override { return sizeof(ShmName); }
  std::string name_str(const void* name, size_t len) const override;
  PeerId resolve(const void* name, size_t len) noexcept override;
  const void* peer_name(PeerId peer, size_t* len) const noexcept override;
  size_t max_payload() const noexcept override { return cfg_.region.chunk_size; }
  int send(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
           size_t len) noexcept override;
  uint64_t tx_ticket(PeerId peer) const noexcept override;
  int tx_state(PeerId peer, uint64_t ticket) noexcept override;
  int poll(PacketSink& sink, int budget) noexcept override;
  bool can_read_remote(PeerId peer) noexcept override;
  ssize_t read_remote(PeerId peer, const struct iovec* local, size_t lcnt, const struct iovec* remote,
                      size_t rcnt) noexcept override;
  ssize_t write_remote(PeerId peer, const struct iovec* local, size_t lcnt, const struct iovec* remote,
                       size_t rcnt) noexcept override;
  bool peer_alive(PeerId peer) noexcept override;
  int wait_fd() const noexcept override { return own_.wake_fd(); }
  void arm_wait(bool armed) noexcept override;
  void drain_wait() noexcept override;
  std::string stats() const override;

  // The composite device: this endpoint's name in the enclosing provider,
  // kept in the region so peers that first hear from it can name it; and a
  // peer's alias (false if it has none).
  void set_alias(const void* name, size_t len) noexcept;
  bool peer_alias(PeerId peer, const void** name, size_t* len) noexcept;

  static bool valid_name(const void* name, size_t len);
  static std::string format_name(const ShmName& n);

 private:
  struct Peer {
    ShmName name{};
    Region region;
    uint64_t first_try_ns = 0;
    enum { kUnknown, kYes, kNo } cma = kUnknown;
    bool failed = false;     // never reached
    bool dead = false;       // its owner died
    uint64_t head_cache = 0;  // last `head` read from the peer's region
    uint64_t last_pos = 0;    // queue position after our last packet to it
  };
  explicit ShmDevice(const DeviceConfig& cfg) : cfg_(cfg) {}
  int map_peer(Peer& p) noexcept;
  PeerId peer_for_key(uint64_t key) noexcept;
  int alloc_chunk() noexcept;

  DeviceConfig cfg_;
  ShmName name_{};
  Region own_;
  uint64_t head_ = 0;
  uint32_t mask_ = 0;
  uint32_t chunk_cursor_ = 0;
  std::vector<Peer> peers_;
  std::unordered_map<uint64_t, PeerId> by_key_;
  uint64_t last_key_ = 0;
  PeerId last_peer_ = kNoPeer;
  bool cma_self_ = false;
  bool fence_free_ = false;  // registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED

  struct Stats {
    uint64_t tx_pkts = 0, tx_inline = 0, tx_chunk = 0, rx_pkts = 0, cma_reads = 0, cma_bytes = 0;
    uint64_t full_queue = 0, no_chunk = 0, wakes = 0, dropped = 0, held = 0;
  } st_;
};

} // namespace pm::shm
