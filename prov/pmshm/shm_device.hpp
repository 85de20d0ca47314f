// The pmshm device: packets through the receiver's queue, payloads inline in
// the queue cell or in a bounce chunk of the sender's region, and single copy
// with process_vm_readv (CMA) where the kernel allows it. Sending is in
// shm_tx.cpp, receiving in shm_rx.cpp, the rest in shm_device.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/unique_fd.hpp"
#include "core/copy_choice.hpp"
#include "device.hpp"
#include "shm_region.hpp"

namespace pm::shm {

enum class CmaPolicy { kOff, kOn, kAuto };
// Fault injection (the cma_fault knob): every CMA data copy in one direction
// fails as a kernel that refuses it would, after the peer checks.
enum class CmaFault : uint8_t { kNone, kRead, kWrite };
// The cma_fault knob's value: "read", "write" or "" (none); anything else
// is none, with a warning.
CmaFault parse_cma_fault(const std::string& s);

struct DeviceConfig {
  RegionConfig region;
  CmaPolicy cma = CmaPolicy::kAuto;  // kOff: FI_PMSHM_DISABLE_CMA; kAuto: when it is faster
  int connect_timeout_ms; // how long a peer's region may be missing
  int claim_timeout_ms;   // a queue cell claimed but unpublished this long: is its claimant alive?
  CmaFault cma_fault = CmaFault::kNone;

  // pmshm's knob defaults (pmeth's composite device uses these).
  static DeviceConfig defaults() {
    return DeviceConfig{RegionConfig{"/dev/shm", 1024, 32, 32768}, CmaPolicy::kAuto, 2000, 1000};
  }
};

class ShmDevice final : public Device {
 public:
  // `key`: a well-known key (is_service_key) to take, 0 for a random one.
  // -FI_EADDRINUSE when a live endpoint holds that key.
  static std::unique_ptr<ShmDevice> open(const DeviceConfig& cfg, uint64_t host, int* err, uint64_t key = 0);
  ~ShmDevice() override;

  const void* name() const noexcept override { return &name_; }
  size_t name_len() const noexcept override { return sizeof(ShmName); }
  std::string name_str(const void* name, size_t len) const override;
  PeerId resolve(const void* name, size_t len) noexcept override;
  const void* peer_name(PeerId peer, size_t* len) const noexcept override;
  size_t max_payload() const noexcept override { return cfg_.region.chunk_size; }
  // The same for every peer, declared here so that calls on this (final)
  // type, the composite device's, are direct.
  size_t max_payload(PeerId) const noexcept override { return cfg_.region.chunk_size; }
  size_t max_payload(PeerId, const PktHdr&) const noexcept override { return cfg_.region.chunk_size; }
  size_t rx_max_payload(PeerId) const noexcept override { return cfg_.region.chunk_size; }
  size_t rndv_threshold(PeerId, size_t thr) const noexcept override { return thr; }
  int send(PeerId peer, const PktHdr& hdr, const struct iovec* iov, size_t iovcnt, size_t offset,
           size_t len) noexcept override;
  uint64_t tx_ticket(PeerId peer) const noexcept override;
  int tx_state(PeerId peer, uint64_t ticket) noexcept override;
  int poll(PacketSink& sink, int budget) noexcept override;
  bool can_read_remote(PeerId peer) noexcept override;
  bool prefer_read_remote(PeerId peer, size_t len) noexcept override;
  void note_transfer(PeerId peer, bool single, size_t len) noexcept override;
  ssize_t read_remote(PeerId peer, const struct iovec* local, size_t lcnt, const struct iovec* remote,
                      size_t rcnt) noexcept override;
  ssize_t write_remote(PeerId peer, const struct iovec* local, size_t lcnt, const struct iovec* remote,
                       size_t rcnt) noexcept override;
  bool peer_alive(PeerId peer) noexcept override;
  int wait_fd() const noexcept override { return own_.wake_fd(); }
  void arm_wait(bool armed) noexcept override;
  void drain_wait() noexcept override;
  void append_stats(std::string& out, size_t max_peers) const override;

  // The composite device: this endpoint's name in the enclosing provider,
  // kept in the region and in introductions so peers that first hear from
  // it can name it; and a peer's alias (false if it has none).
  void set_alias(const void* name, size_t len) noexcept;
  bool peer_alias(PeerId peer, const void** name, size_t* len) noexcept;
  // The alias learnt so far (from its introduction or region at its first
  // packet), with no I/O; nullptr if none.
  const void* known_alias(PeerId peer, size_t* len) const noexcept {
    if (peer >= peers_.size() || !peers_[peer].alias_len) return nullptr;
    *len = peers_[peer].alias_len;
    return peers_[peer].alias;
  }
  size_t peer_count() const noexcept { return peers_.size(); }  // peers resolved or heard from

  static bool valid_name(const void* name, size_t len);
  static std::string format_name(const ShmName& n);
  static size_t format_name(const ShmName& n, char (&buf)[96]);  // the same, allocating nothing

 private:
  struct Peer {
    ShmName name{};
    Region region;
    uint64_t first_try_ns = 0;
    enum { kUnknown, kYes, kNo } cma = kUnknown;
    int cma_pid = 0;          // the verified owner of its region (our pid namespace)
    UniqueFd pidfd;           // ... pinned: CMA stops once it exits
    bool failed = false;      // never reached
    bool dead = false;        // its owner died (or its region broke): no more sends
    bool reset_sent = false;  // a packet of it was lost: its session reset (once)
    bool introduced = false;  // receiver: its introduction slot was looked at
    bool intro_tried = false; // sender: we introduced ourselves (or found no slot)
    uint8_t intro = 0;        // sender: our introduction slot in its region + 1
    uint8_t alias_len = 0;    // receiver: its alias, from its introduction
    uint8_t alias[kAliasMax];
    uint64_t head_cache = 0;  // last `head` read from the peer's region
    uint64_t last_pos = 0;    // queue position after our last packet to it
    uint64_t dead_tail = 0;   // our queue's tail when we found it dead
    bool files_left = false;  // dead, but its files were kept (chunks for live receivers)
  };
  explicit ShmDevice(const DeviceConfig& cfg) : cfg_(cfg) {}
  // tx (shm_tx.cpp)
  int map_peer(Peer& p) noexcept;
  void introduce(Peer& p) noexcept;
  int alloc_chunk(uint64_t rx_key) noexcept;
  // rx (shm_rx.cpp)
  PeerId sender_of(const Cell& c) noexcept;
  PeerId learn_sender(uint64_t key, uint8_t intro) noexcept;
  bool take_intro(uint64_t key, uint8_t intro, ShmName* name, uint8_t* alias, uint8_t* alias_len) noexcept;
  const void* chunk_payload(PeerId peer, uint32_t chunk, uint32_t len, std::atomic<uint32_t>** release) noexcept;
  bool skip_dead_claim(uint64_t seq) noexcept;
  void collect_intros(bool check_writers) noexcept;
  void own_region_broke(PacketSink& sink) noexcept;
  // liveness and single copy (shm_device.cpp)
  void found_dead(Peer& p, const char* why) noexcept;
  bool verify_cma(Peer& p) noexcept;

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
  bool cma_learn_ = false;  // FI_PMSHM_CMA=auto: choose per size class by measurement (choice_)
  CopyChoice choice_;
  bool fence_free_ = false;  // registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED
  bool own_broken_ = false;  // our region was truncated: we cannot receive any more
  bool own_reported_ = false;  // ... and the peers' sessions were reset for it
  uint8_t alias_len_ = 0;
  uint8_t alias_[kAliasMax] = {};
  uint64_t stuck_pos_ = UINT64_MAX;  // head position seen claimed but unpublished
  uint64_t stuck_since_ns_ = 0;
  struct IntroGc {
    uint64_t state = 0;  // the slot's state when its writer was found dead
    uint64_t tail = 0;   // our tail then: the writer's packets are all below
  };
  std::vector<IntroGc> intro_gc_;    // per introduction slot
  bool intro_gc_pending_ = false;    // a dead writer's slot waits for head to pass its tail
  uint64_t intro_check_ns_ = 0;      // last round of writer liveness checks

  struct Stats {
    uint64_t tx_pkts = 0, tx_inline = 0, tx_chunk = 0, rx_pkts = 0, cma_reads = 0, cma_bytes = 0;
    uint64_t full_queue = 0, no_chunk = 0, wakes = 0, dropped = 0, held = 0;
    uint64_t skipped = 0, intro_full = 0;
  } st_;
};

} // namespace pm::shm
