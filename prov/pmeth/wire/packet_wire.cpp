// AF_PACKET backend: receive ring polled from user space (an empty poll is a
// memory read), transmit ring filled in user space and kicked once per burst.
#include <arpa/inet.h>
#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/sockios.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/unique_fd.hpp"
#include "broker/broker_client.hpp"
#include "wire/wire.hpp"

namespace pm::eth {
namespace {

size_t pow2_at_least(size_t v) {
  size_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

class PacketWire final : public Wire {
 public:
  ~PacketWire() override {
    if (ring_ && ring_ != MAP_FAILED) munmap(ring_, ring_len_);
  }

  int open(const WireConfig& cfg, std::string* why) {
    fd_.reset(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(cfg.ethertype)));
    if (!fd_ && errno == EPERM && !cfg.broker.empty()) {
      // No CAP_NET_RAW: pmethd's socket, already bound, its receive filter
      // locked (the SO_ATTACH_FILTER below is refused and not needed).
      BrokeredSocket b;
      std::string no;
      if (int rc = broker_open(cfg.broker, cfg.iface, cfg.ethertype, cfg.ep_id, &b, &no)) {
        *why = "no CAP_NET_RAW (raw packet sockets need it), and " + no;
        return rc;
      }
      fd_ = std::move(b.packet);
      broker_conn_ = std::move(b.conn);
    } else if (!fd_) {
      *why = errno == EPERM ? "no CAP_NET_RAW (raw packet sockets need it)" : strerror(errno);
      return errno == EPERM ? -FI_EPERM : -FI_EIO;
    }
    ifreq ifr{};
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", cfg.iface.c_str());
    if (ioctl(fd_.get(), SIOCGIFINDEX, &ifr) != 0) {
      *why = "no interface " + cfg.iface;
      return -FI_ENODEV;
    }
    int ifindex = ifr.ifr_ifindex;
    iface_ = cfg.iface;
    if (ioctl(fd_.get(), SIOCGIFMTU, &ifr) == 0) mtu_ = size_t(ifr.ifr_mtu);
    if (ioctl(fd_.get(), SIOCGIFHWADDR, &ifr) == 0) memcpy(mac_, ifr.ifr_hwaddr.sa_data, 6);

    int one = 1;
    setsockopt(fd_.get(), SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    int ver = TPACKET_V2;
    if (setsockopt(fd_.get(), SOL_PACKET, PACKET_VERSION, &ver, sizeof ver) != 0) {
      *why = std::string("TPACKET_V2: ") + strerror(errno);
      return -FI_EIO;
    }
    // Keep only frames addressed to this endpoint: the little-endian
    // destination endpoint id at byte 22, loaded big-endian by BPF.
    uint32_t want = __builtin_bswap32(cfg.ep_id);
    sock_filter code[] = {
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, 22},
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, want},
        {BPF_RET | BPF_K, 0, 0, 0x40000},
        {BPF_RET | BPF_K, 0, 0, 0},
    };
    sock_fprog prog{sizeof code / sizeof code[0], code};
    setsockopt(fd_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);

    frame_size_ = pow2_at_least(TPACKET2_HDRLEN + 64 + mtu_ + 14);
    size_t block = frame_size_ > (1u << 16) ? frame_size_ : (1u << 16);
    rx_ = make_req(cfg.rx_ring_bytes, block);
    tx_ = make_req(cfg.tx_ring_bytes, block);
    if (setsockopt(fd_.get(), SOL_PACKET, PACKET_RX_RING, &rx_, sizeof rx_) != 0 ||
        setsockopt(fd_.get(), SOL_PACKET, PACKET_TX_RING, &tx_, sizeof tx_) != 0) {
      *why = std::string("packet rings: ") + strerror(errno);
      return -FI_ENOMEM;
    }
    ring_len_ = size_t(rx_.tp_block_size) * rx_.tp_block_nr + size_t(tx_.tp_block_size) * tx_.tp_block_nr;
    ring_ = static_cast<uint8_t*>(mmap(nullptr, ring_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0));
    if (ring_ == MAP_FAILED) {
      *why = std::string("mmap of packet rings: ") + strerror(errno);
      return -FI_ENOMEM;
    }
    tx_base_ = ring_ + size_t(rx_.tp_block_size) * rx_.tp_block_nr;
    track_rx_head();
    if (broker_conn_) return 0;  // bound by the broker
    if (cfg.qdisc_bypass && setsockopt(fd_.get(), SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0) {
      *why = std::string("PACKET_QDISC_BYPASS: ") + strerror(errno);
      return -FI_EIO;
    }
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(cfg.ethertype);
    sll.sll_ifindex = ifindex;
    if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      *why = std::string("bind to ") + cfg.iface + ": " + strerror(errno);
      return -FI_EIO;
    }
    return 0;
  }

  int tx_burst(const Frame* f, int n) noexcept override {
    int done = 0;
    for (; done < n; done++) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(tx_base_ + size_t(tx_head_) * frame_size_);
      uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
      if (st != TP_STATUS_AVAILABLE && st != TP_STATUS_WRONG_FORMAT) break;
      if (f[done].len > frame_size_ - TPACKET2_HDRLEN) break;
      uint8_t* data = reinterpret_cast<uint8_t*>(h) + TPACKET2_HDRLEN - sizeof(sockaddr_ll);
      memcpy(data, f[done].data, f[done].len);
      h->tp_len = uint32_t(f[done].len);
      __atomic_store_n(&h->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
      tx_head_ = (tx_head_ + 1) % tx_.tp_frame_nr;
      pending_++;
    }
    if (done < n && pending_) {
      tx_flush();  // ring full: kick the kernel so slots come back
    }
    return done;
  }

  void tx_flush() noexcept override {
    if (!pending_) return;
    pending_ = 0;
    sendto(fd_.get(), nullptr, 0, MSG_DONTWAIT, nullptr, 0);
  }

  int rx_burst(Frame* f, int max) noexcept override {
    int n = 0;
    uint32_t idx = rx_head_;
    while (n < max) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(idx) * frame_size_);
      uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
      if (!(st & TP_STATUS_USER)) break;
      if (st & TP_STATUS_LOSING) losing_ = true;
      f[n].data = reinterpret_cast<uint8_t*>(h) + h->tp_mac;
      f[n].len = h->tp_snaplen;
      f[n].rx_real_ns = uint64_t(h->tp_sec) * 1000000000ull + h->tp_nsec;
      n++;
      idx = (idx + 1) % rx_.tp_frame_nr;
    }
    rx_taken_ = n;
    return n;
  }

  void rx_release() noexcept override {
    for (int i = 0; i < rx_taken_; i++) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(rx_head_) * frame_size_);
      __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      rx_head_ = (rx_head_ + 1) % rx_.tp_frame_nr;
    }
    rx_taken_ = 0;
    track_rx_head();
  }

  int fd() const noexcept override { return fd_.get(); }
  size_t mtu() const noexcept override { return mtu_; }
  size_t rx_capacity() const noexcept override { return rx_.tp_frame_nr; }
  // The kernel's count (a full ring, or the socket's receive buffer) is
  // reset by every read: accumulated here.
  uint64_t rx_dropped() noexcept override {
    tpacket_stats st{};
    socklen_t l = sizeof st;
    if (getsockopt(fd_.get(), SOL_PACKET, PACKET_STATISTICS, &st, &l) == 0 && st.tp_drops) {
      drops_ += st.tp_drops;
      losing_ = true;  // the read cleared the kernel's flag: keep the news
    }
    return drops_;
  }
  const uint8_t* mac() const noexcept override { return mac_; }
  const char* kind() const noexcept override { return broker_conn_ ? "af_packet/broker" : "af_packet"; }
  // Administratively up and with carrier. The carrier comes from ethtool
  // (immediate); IFF_RUNNING follows the operational state, which the
  // kernel may update up to a second later.
  bool link_up() noexcept override {
    ifreq ifr{};
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", iface_.c_str());
    if (ioctl(fd_.get(), SIOCGIFFLAGS, &ifr) != 0 || !(ifr.ifr_flags & IFF_UP)) return false;
    ethtool_value ev{};
    ev.cmd = ETHTOOL_GLINK;
    ifr.ifr_data = reinterpret_cast<char*>(&ev);
    if (ioctl(fd_.get(), SIOCETHTOOL, &ifr) == 0) return ev.data != 0;
    return ifr.ifr_flags & IFF_RUNNING;
  }

 private:
  void track_rx_head() {
    rx_flag_ = &reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(rx_head_) * frame_size_)->tp_status;
    rx_mask_ = TP_STATUS_USER;
  }

  tpacket_req make_req(size_t bytes, size_t block) const {
    tpacket_req r{};
    size_t nblocks = (bytes + block - 1) / block;
    if (nblocks < 2) nblocks = 2;
    r.tp_block_size = unsigned(block);
    r.tp_block_nr = unsigned(nblocks);
    r.tp_frame_size = unsigned(frame_size_);
    r.tp_frame_nr = unsigned(block / frame_size_ * nblocks);
    return r;
  }

  UniqueFd fd_;
  UniqueFd broker_conn_;  // open while the broker's socket is in use
  std::string iface_;
  size_t mtu_ = 1500;
  uint8_t mac_[6] = {0};
  size_t frame_size_ = 0;
  tpacket_req rx_{}, tx_{};
  uint8_t* ring_ = nullptr;
  size_t ring_len_ = 0;
  uint8_t* tx_base_ = nullptr;
  uint32_t rx_head_ = 0, tx_head_ = 0;
  int rx_taken_ = 0;
  int pending_ = 0;
  uint64_t drops_ = 0;
};

}  // namespace

std::unique_ptr<Wire> open_packet_wire(const WireConfig& cfg, int* err, std::string* why) {
  auto w = std::make_unique<PacketWire>();
  if (int rc = w->open(cfg, why)) {
    *err = rc;
    return nullptr;
  }
  return w;
}

}  // namespace pm::eth
