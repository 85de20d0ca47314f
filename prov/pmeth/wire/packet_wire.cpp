// AF_PACKET backend: receive ring polled from user space (an empty poll is a
// memory read), transmit ring filled in user space and kicked once per burst.
#include <algorithm>
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
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/unique_fd.hpp"
#include "broker/broker_client.hpp"
#include "wire/wire.hpp"

namespace pm::eth {
namespace {

// The virtio-net header before each frame of a PACKET_VNET_HDR socket, in
// host byte order (<linux/virtio_net.h> does not compile as C++).
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);
constexpr uint8_t kVnetNeedsCsum = 1;
constexpr uint8_t kGsoNone = 0;
constexpr uint8_t kGsoUdpL4 = 5;  // Linux 6.2 and later; older kernels refuse it

// GSO mode (WireConfig::gso): a run of full frames to one peer is sent as
// one packet of Ethernet, IPv4 (source 0.0.0.0, destination kGsoGroup),
// UDP (both ports the EtherType) and the frames, whole, back to back; the virtio-net header asks the kernel to cut it into UDP
// segments of one frame each. A NIC or the kernel cuts it at the sending
// interface; veth passes it whole to its peer, as it does TCP's. Either
// way each segment begins with the frame's own Ethernet header, so the
// receiver hands segments on as frames without copying.
constexpr size_t kVnet = sizeof(VnetHdr);
constexpr size_t kOuter = kGsoOuter;  // Ethernet, IPv4, UDP
constexpr size_t kMaxGsoPayload = 65535 - 20 - 8;
constexpr size_t kMaxSegs = 64;  // the kernel's UDP_MAX_SEGMENTS (at least 64)
// The packets' IPv4 destination: a multicast group (organisation-local
// scope) that, with source 0.0.0.0, the receiving host's IP stack refuses
// at its first routing check, silently, whether or not a socket there has
// joined it (a zero source may only reach link-local groups): no route is
// made, and no local socket gets the frames. (Source and destination both
// 0.0.0.0, as wire version 2 had them, are taken as broadcast: every packet
// made a route and went to any UDP socket on the port, which anyone may
// bind. An address logged as a martian, also dropped early, would fill the
// kernel's log where log_martians is on.) Receivers take only these
// addresses (the socket filter and open_packet).
constexpr uint8_t kGsoGroup[4] = {239, 255, 0x88, 0xb5};
constexpr size_t kFrameIds = 26;  // a frame's MACs and destination endpoint id (bytes 22-25)
// GSO mode's receive slot at least: a packet of five frames at MTU 1500
// (a 4 KiB message) fits whole, with the slot's and virtio-net headers.
// Larger packets wait in the socket's queue (TP_STATUS_COPY) and cost a
// recv; measured, that took 3-5 us of a 2 KiB message's half round trip
// over veth (docs/performance.md). The ring then has a quarter of the
// slots it had at 2 KiB, so a quarter of the receive window to share.
constexpr size_t kGsoRxSlot = 8192;

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
void put_be16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
uint16_t fold(uint32_t s) {
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(s);
}

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
    ethertype_ = cfg.ethertype;
    // Runs need room for two frames at least in one IPv4 packet (not so on
    // lo, whose MTU is 64 KiB), and frames room for their own headers;
    // elsewhere frames go one by one, as without FI_PMETH_GSO.
    bool gso_fits = mtu_ >= 576 && kMaxGsoPayload / (14 + mtu_ - kOuter) >= 2;
    if (cfg.gso && !broker_conn_ && gso_fits) {
      if (int rc = open_gso(cfg, want, why)) return rc;
    } else {
      setsockopt(fd_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
    }

    // GSO mode: a packet of one segment cut by a NIC (outer headers and a
    // full frame: the MTU before the 42 bytes went) and its virtio-net
    // header fit too; and receive slots take a packet of a short run whole
    // (kGsoRxSlot), so that it skips the socket's queue and its recv.
    size_t tx_slot = pow2_at_least(TPACKET2_HDRLEN + 64 + mtu_ + 14 + (gso_ ? kOuter + kVnet : 0));
    rx_ = make_req(cfg.rx_ring_bytes, gso_ ? std::max(tx_slot, kGsoRxSlot) : tx_slot);
    tx_ = make_req(cfg.tx_ring_bytes, tx_slot);
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
    if (cfg.qdisc_bypass && (setsockopt(fd_.get(), SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0 ||
                             (gso_ && setsockopt(gso_fd_.get(), SOL_PACKET, PACKET_QDISC_BYPASS, &one,
                                                 sizeof one) != 0))) {
      *why = std::string("PACKET_QDISC_BYPASS: ") + strerror(errno);
      return -FI_EIO;
    }
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    // GSO mode receives IPv4 packets too: every protocol, sorted by the filter.
    sll.sll_protocol = htons(gso_ ? ETH_P_ALL : cfg.ethertype);
    sll.sll_ifindex = ifindex;
    if (bind(fd_.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      *why = std::string("bind to ") + cfg.iface + ": " + strerror(errno);
      return -FI_EIO;
    }
    if (gso_) {
      // The GSO socket sends only (protocol 0: it receives nothing).
      sll.sll_protocol = 0;
      if (bind(gso_fd_.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
        *why = std::string("bind to ") + cfg.iface + ": " + strerror(errno);
        return -FI_EIO;
      }
    }
    return 0;
  }

  // GSO mode's set-up, before the rings exist: virtio-net headers on the
  // ring socket (both rings), packets too large for a receive slot kept
  // whole in the socket's queue (PACKET_COPY_THRESH, the slot then marked
  // TP_STATUS_COPY in its place in the order), a receive buffer for them,
  // the filter for both kinds, and a second socket that sends the GSO
  // packets (a socket with a transmit ring sends only from the ring).
  int open_gso(const WireConfig& cfg, uint32_t want_be, std::string* why) {
    int one = 1;
    if (setsockopt(fd_.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
        setsockopt(fd_.get(), SOL_PACKET, PACKET_COPY_THRESH, &one, sizeof one) != 0) {
      *why = std::string("FI_PMETH_GSO: PACKET_VNET_HDR: ") + strerror(errno);
      return -FI_EIO;
    }
    gso_fd_.reset(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
    if (!gso_fd_ || setsockopt(gso_fd_.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) {
      *why = std::string("FI_PMETH_GSO: second packet socket: ") + strerror(errno);
      return -FI_EIO;
    }
    // A packet is charged to the send buffer until it is freed (over veth:
    // until the receiver has read it): room for what a window puts in
    // flight, where CAP_NET_ADMIN allows more than the system's default.
    int sb = 4 << 20;
    if (setsockopt(gso_fd_.get(), SOL_SOCKET, SO_SNDBUFFORCE, &sb, sizeof sb) != 0)
      setsockopt(gso_fd_.get(), SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
    // The queue holds the large packets (the ring only marks their place):
    // as much as the ring, where the kernel allows (the receive window
    // counts it, rx_capacity()).
    int rb = int(std::min<size_t>(cfg.rx_ring_bytes, 1u << 30));
    if (setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUFFORCE, &rb, sizeof rb) != 0)
      setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &rb, sizeof rb);
    socklen_t l = sizeof rb;
    if (getsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &rb, &l) == 0) rcvbuf_ = size_t(rb);
    // Offsets from the (outer) Ethernet header: a pmeth frame for us, or
    // one IPv4 packet without options, to our MAC, from 0.0.0.0 to
    // kGsoGroup, UDP to our port, carrying a pmeth frame for us. No IP
    // socket sends that: from 0.0.0.0 (a host without an address) only to
    // a broadcast or group MAC, to our MAC only from an address, so an
    // ordinary socket's datagram to the port is not taken.
    uint16_t et = cfg.ethertype;
    uint32_t group = uint32_t(kGsoGroup[0]) << 24 | uint32_t(kGsoGroup[1]) << 16 | uint32_t(kGsoGroup[2]) << 8 |
                     kGsoGroup[3];
    uint32_t mac_hi = uint32_t(mac_[0]) << 24 | uint32_t(mac_[1]) << 16 | uint32_t(mac_[2]) << 8 | mac_[3];
    uint32_t mac_lo = uint32_t(mac_[4]) << 8 | mac_[5];
    // Jumps are relative: instruction 23 takes the packet, 24 refuses it.
    sock_filter code[] = {
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 12},                // 0
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 2, et},               // 1: a frame: to 2, else to 4
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, 22},                // 2
        {BPF_JMP | BPF_JEQ | BPF_K, 19, 20, want_be},        // 3
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 19, ETH_P_IP},        // 4
        {BPF_LD | BPF_B | BPF_ABS, 0, 0, 14},                // 5
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 17, 0x45},            // 6
        {BPF_LD | BPF_B | BPF_ABS, 0, 0, 23},                // 7
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 15, IPPROTO_UDP},     // 8
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, 26},                // 9: IPv4 source
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 13, 0},               // 10
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, 30},                // 11: IPv4 destination
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 11, group},           // 12
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, 0},                 // 13: destination MAC
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 9, mac_hi},           // 14
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 4},                 // 15
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 7, mac_lo},           // 16
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, 36},                // 17: UDP destination port
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 5, et},               // 18
        {BPF_LD | BPF_H | BPF_ABS, 0, 0, kOuter + 12},       // 19: the first frame's type
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 3, et},               // 20
        {BPF_LD | BPF_W | BPF_ABS, 0, 0, kOuter + 22},       // 21: its endpoint
        {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, want_be},          // 22
        {BPF_RET | BPF_K, 0, 0, 0x40000},                    // 23
        {BPF_RET | BPF_K, 0, 0, 0},                          // 24
    };
    static_assert(sizeof code / sizeof code[0] == 25, "the jumps count on 25 instructions");
    sock_fprog prog{sizeof code / sizeof code[0], code};
    if (setsockopt(fd_.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
      *why = std::string("FI_PMETH_GSO: filter: ") + strerror(errno);
      return -FI_EIO;
    }
    gso_ = true;
    mtu_ -= kOuter;
    full_len_ = 14 + mtu_;
    size_t segs = std::min(kMaxSegs, kMaxGsoPayload / full_len_);
    run_cap_ = segs * full_len_;
    stage_.resize(kVnet + kOuter + run_cap_);
    spare_.resize(stage_.size());
    run_.reserve(2 * segs + 1);
    pieces_.reserve(segs);
    kept_.reserve(segs);
    copy_buf_.resize(kVnet + 0x40000);
    return 0;
  }

  int tx_burst(const Frame* f, int n) noexcept override {
    if (gso_) return tx_burst_gso(f, n);
    return ring_put(f, n);
  }

  int ring_put(const Frame* f, int n) noexcept {
    int done = 0;
    for (; done < n; done++) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(tx_base_ + size_t(tx_head_) * tx_.tp_frame_size);
      uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
      if (st != TP_STATUS_AVAILABLE && st != TP_STATUS_WRONG_FORMAT) break;
      const Frame& fr = f[done];
      if (fr.size() + kVnet > tx_.tp_frame_size - TPACKET2_HDRLEN) break;
      uint8_t* data = reinterpret_cast<uint8_t*>(h) + TPACKET2_HDRLEN - sizeof(sockaddr_ll);
      size_t vh = gso_ ? kVnet : 0;  // a zero virtio-net header: no offload
      if (vh) memset(data, 0, vh);
      memcpy(data + vh, fr.data, fr.len);
      if (fr.tail_len) memcpy(data + vh + fr.len, fr.tail, fr.tail_len);
      h->tp_len = uint32_t(vh + fr.size());
      __atomic_store_n(&h->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
      tx_head_ = (tx_head_ + 1) % tx_.tp_frame_nr;
      pending_++;
    }
    if (done < n && pending_) {
      kick();  // ring full: kick the kernel so slots come back
    }
    return done;
  }

  // A full frame opens a run; frames to the same endpoint (MAC and
  // endpoint id: the receiver's filter reads the first segment's only) join
  // it while they are full, the first shorter one ends it (a segment
  // shorter than the segment size can only be the last). Only frames whose
  // peer takes GSO packets (Frame::gso). Anything else goes to the ring,
  // after the run has gone, so that frames leave in the order given.
  int tx_burst_gso(const Frame* f, int n) noexcept {
    for (int i = 0; i < n; i++) {
      const Frame& fr = f[i];
      if (stage_bytes_) {
        const uint8_t* first = static_cast<const uint8_t*>(run_[1].iov_base);
        if (stage_bytes_ % full_len_ == 0 && fr.gso && fr.len >= kFrameIds && fr.size() <= full_len_ &&
            memcmp(fr.data, first, 6) == 0 && memcmp(fr.data + 22, first + 22, 4) == 0 &&
            stage_bytes_ + fr.size() <= run_cap_) {
          run_add(fr);  // a shorter frame ends the run (the rest no longer divides)
          continue;
        }
        if (!stage_out()) return i;
      }
      if (fr.gso && fr.len >= kFrameIds && fr.size() == full_len_ && gso_ok_) {
        run_add(fr);
        continue;
      }
      if (ring_put(&fr, 1) != 1) return i;
    }
    return n;
  }

  // A frame joins the run: its place (Frame::stays: the device keeps it
  // unchanged until tx_flush), or a copy in stage_; then its tail.
  void run_add(const Frame& fr) noexcept {
    if (run_.empty()) run_.push_back(iovec{stage_.data(), kVnet + kOuter});
    void* at = const_cast<uint8_t*>(fr.data);
    if (!fr.stays) {
      at = stage_.data() + kVnet + kOuter + stage_fill_;
      memcpy(at, fr.data, fr.len);
      stage_fill_ += fr.len;
    }
    run_.push_back(iovec{at, fr.len});
    if (fr.tail_len) run_.push_back(iovec{const_cast<uint8_t*>(fr.tail), fr.tail_len});
    pieces_.push_back(fr.tail_len ? 2 : 1);
    stage_bytes_ += fr.size();
  }

  void run_clear() noexcept {
    run_.clear();
    pieces_.clear();
    stage_bytes_ = stage_fill_ = 0;
  }

  // The run leaves: as one GSO packet (after the ring's frames), or frame
  // by frame through the ring (a run of one, a kernel that refused GSO, or
  // a full send buffer). False when the ring has no room: the rest stays,
  // copied into stage_ (nothing of the device's is kept past tx_flush).
  bool stage_out() noexcept {
    size_t segs = pieces_.size();
    if (segs > 1 && gso_ok_) {
      kick();
      uint8_t* p = stage_.data();
      VnetHdr vh{};
      vh.flags = kVnetNeedsCsum;
      vh.gso_type = kGsoUdpL4;
      vh.gso_size = uint16_t(full_len_);
      vh.hdr_len = uint16_t(kOuter);
      vh.csum_start = 14 + 20;
      vh.csum_offset = 6;
      memcpy(p, &vh, kVnet);
      uint8_t* e = p + kVnet;
      memcpy(e, run_[1].iov_base, 6);  // the frames' destination
      memcpy(e + 6, mac_, 6);
      put_be16(e + 12, ETH_P_IP);
      uint8_t* ip = e + 14;
      memset(ip, 0, 20);
      ip[0] = 0x45;
      put_be16(ip + 2, uint16_t(20 + 8 + stage_bytes_));
      put_be16(ip + 6, 0x4000);  // don't fragment
      ip[8] = 64;
      ip[9] = IPPROTO_UDP;
      memcpy(ip + 16, kGsoGroup, 4);
      uint32_t sum = 0;
      for (int i = 0; i < 20; i += 2) sum += be16(ip + i);
      put_be16(ip + 10, uint16_t(~fold(sum)));
      uint8_t* udp = ip + 20;
      put_be16(udp, ethertype_);
      put_be16(udp + 2, ethertype_);
      put_be16(udp + 4, uint16_t(8 + stage_bytes_));
      // The pseudo-header's sum (the source is zero), as checksum offload wants.
      put_be16(udp + 6, fold(be16(kGsoGroup) + be16(kGsoGroup + 2) + IPPROTO_UDP + 8 + uint32_t(stage_bytes_)));
      // The kernel gathers the frames where they are: one copy, its own.
      msghdr m{};
      m.msg_iov = run_.data();
      m.msg_iovlen = run_.size();
      if (sendmsg(gso_fd_.get(), &m, MSG_DONTWAIT) >= 0) {
        gso_sent_++;
        gso_frames_ += segs;
        run_clear();
        return true;
      }
      if (errno == EINVAL && !gso_sent_) {
        // A kernel without UDP GSO for packet sockets (before 6.2): frames
        // one by one from now on (the MTU stays as it was given out).
        gso_ok_ = false;
      } else {
        gso_busy_ += segs;  // the send buffer is full: these go frame by frame
      }
    }
    for (size_t j = 0, k = 1; j < pieces_.size(); k += pieces_[j++]) {
      Frame one{static_cast<const uint8_t*>(run_[k].iov_base), run_[k].iov_len};
      if (pieces_[j] == 2) {
        one.tail = static_cast<const uint8_t*>(run_[k + 1].iov_base);
        one.tail_len = run_[k + 1].iov_len;
      }
      if (ring_put(&one, 1) != 1) {
        run_keep(j, k);
        return false;
      }
    }
    run_clear();
    return true;
  }

  // The ring is full: the run's frames from the j-th (run_[k]) on stay,
  // in order, each copied whole into spare_, which then becomes stage_.
  void run_keep(size_t j, size_t k) noexcept {
    size_t off = kVnet + kOuter, nframes = pieces_.size() - j;
    kept_.clear();  // reserved: no allocation here
    for (; j < pieces_.size(); k += pieces_[j++]) {
      size_t at = off;
      for (size_t q = k; q < k + pieces_[j]; q++) {
        memcpy(spare_.data() + off, run_[q].iov_base, run_[q].iov_len);
        off += run_[q].iov_len;
      }
      kept_.push_back(iovec{spare_.data() + at, off - at});
    }
    run_clear();
    stage_.swap(spare_);
    run_.push_back(iovec{stage_.data(), kVnet + kOuter});
    run_.insert(run_.end(), kept_.begin(), kept_.end());
    pieces_.assign(nframes, 1);
    stage_fill_ = stage_bytes_ = off - kVnet - kOuter;
  }

  void kick() noexcept {
    if (!pending_) return;
    pending_ = 0;
    sendto(fd_.get(), nullptr, 0, MSG_DONTWAIT, nullptr, 0);
  }

  void tx_flush() noexcept override {
    if (stage_bytes_ && !stage_out()) {
      kick();  // the ring was full: the kernel takes what it holds, then again
      stage_out();
    }
    kick();
  }
  bool tx_held() const noexcept override { return stage_bytes_ != 0; }
  bool accepts_gso() const noexcept override { return gso_; }
  bool gathers() const noexcept override { return true; }

  int rx_burst(Frame* f, int max) noexcept override {
    if (gso_) return rx_burst_gso(f, max);
    int n = 0;
    uint32_t idx = rx_head_;
    while (n < max) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(idx) * rx_.tp_frame_size);
      uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
      if (!(st & TP_STATUS_USER)) break;
      if (st & TP_STATUS_LOSING) losing_ = true;
      f[n].data = reinterpret_cast<uint8_t*>(h) + h->tp_mac;
      f[n].len = h->tp_snaplen;
      f[n].rx_real_ns = slot_ns(h);
      n++;
      idx = (idx + 1) % rx_.tp_frame_nr;
    }
    rx_taken_ = n;
    return n;
  }

  // Slots in order; a packet of several segments may span bursts (its slot
  // is released once its last segment went), and one packet at most per
  // burst comes from the socket's queue (its buffer is reused by the next).
  int rx_burst_gso(Frame* f, int max) noexcept {
    int n = 0;
    uint32_t idx = rx_head_;
    uint32_t slots = 0;
    rx_more_ = false;
    while (n < max) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(idx) * rx_.tp_frame_size);
      if (!cur_left_) {
        // Never round the ring: slots taken in this burst stay ours until
        // rx_release.
        if (slots + 1 >= rx_.tp_frame_nr) {
          rx_more_ = true;
          break;
        }
        uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
        if (!(st & TP_STATUS_USER)) break;
        if (st & TP_STATUS_LOSING) losing_ = true;
        if ((st & TP_STATUS_COPY) && copy_used_) {
          rx_more_ = true;  // its buffer holds frames of this burst
          break;
        }
        cur_ns_ = slot_ns(h);
        open_packet(h, st);
        if (!cur_left_) {  // nothing usable in it
          slots++;
          idx = (idx + 1) % rx_.tp_frame_nr;
          continue;
        }
      }
      if (cur_copy_) copy_used_ = true;
      while (n < max && cur_left_) {
        size_t l = std::min(cur_seg_, cur_left_);
        f[n].data = cur_;
        f[n].len = l;
        f[n].rx_real_ns = cur_ns_;
        n++;
        cur_ += l;
        cur_left_ -= l;
      }
      if (cur_left_) break;
      slots++;
      idx = (idx + 1) % rx_.tp_frame_nr;
    }
    rx_taken_ = int(slots);
    if (cur_left_) rx_more_ = true;
    // Slots with nothing usable and no frame handed out: the caller does
    // not release after an empty burst, so they go back here (else the
    // next burst would open them again, and take a queued packet not theirs).
    if (n == 0 && slots) rx_release();
    return n;
  }

  // The frames of the packet in slot h: the frame itself, or the segments
  // of a UDP packet (checked here: lengths from the headers are bounded by
  // what arrived). Sets cur_, cur_left_ (0: none) and cur_seg_.
  void open_packet(tpacket2_hdr* h, uint32_t st) noexcept {
    cur_left_ = 0;
    cur_copy_ = false;
    const uint8_t* p;
    size_t len;
    VnetHdr vh;
    size_t wire_len = h->tp_len;
    if (st & TP_STATUS_COPY) {
      // The whole packet waits in the socket's queue, in this slot's turn.
      ssize_t r = recv(fd_.get(), copy_buf_.data(), copy_buf_.size(), MSG_DONTWAIT | MSG_TRUNC);
      // A pending socket error (the link went down: ENETDOWN) is reported
      // by the first call and cleared, before the queue is read: again.
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        r = recv(fd_.get(), copy_buf_.data(), copy_buf_.size(), MSG_DONTWAIT | MSG_TRUNC);
      if (r < ssize_t(kVnet)) {
        gso_rx_lost_++;
        return;
      }
      memcpy(&vh, copy_buf_.data(), kVnet);
      p = copy_buf_.data() + kVnet;
      len = std::min(size_t(r), copy_buf_.size()) - kVnet;
      wire_len = size_t(r) - kVnet;
      cur_copy_ = true;
    } else {
      p = reinterpret_cast<uint8_t*>(h) + h->tp_mac;
      len = h->tp_snaplen;
      if (h->tp_mac < kVnet) return;
      memcpy(&vh, p - kVnet, kVnet);
    }
    if (len < 14) return;
    uint16_t et = be16(p + 12);
    if (et == ethertype_) {
      cur_ = p;
      cur_left_ = cur_seg_ = len;
      return;
    }
    const uint8_t* ip = p + 14;
    if (et != ETH_P_IP || len < kOuter || ip[0] != 0x45 || ip[9] != IPPROTO_UDP || (be16(ip + 6) & 0x3fff) ||
        be16(ip + 12) || be16(ip + 14) || memcmp(ip + 16, kGsoGroup, 4) != 0 || memcmp(p, mac_, 6) != 0 ||
        be16(ip + 22) != ethertype_) {
      // Not IPv4 without options from 0.0.0.0 to kGsoGroup and our MAC, not
      // UDP to our port, or a fragment.
      bad_.hdr++;
      return;
    }
    size_t said = be16(ip + 2);  // IPv4 total length
    if (said < 28 || be16(ip + 24) != said - 20) {
      bad_.len++;  // shorter than its own headers, or IPv4 and UDP disagree
      return;
    }
    size_t body = said - 28;
    size_t seg = body;
    if (vh.gso_type != kGsoNone) {
      seg = vh.gso_size;
      if (seg < 64) {
        bad_.seg++;  // segments too small to be frames
        return;
      }
    }
    if (wire_len < kOuter + body) {
      bad_.over++;  // claims more than the packet had
      return;
    }
    size_t have = len - kOuter;  // what the slot or the queue holds
    if (have < body) {
      // Cut short (the queue was full): whole segments only; the rest is
      // lost and counted as the ring's drops.
      size_t keep = seg ? have / seg * seg : 0;
      uint64_t lost = seg ? (body - keep + seg - 1) / seg : 1;
      drops_ += lost;
      losing_ = true;
      body = keep;
    }
    if (!body) return;
    cur_ = p + kOuter;
    cur_left_ = body;
    cur_seg_ = seg ? seg : body;
  }

  void rx_release() noexcept override {
    copy_used_ = false;
    for (int i = 0; i < rx_taken_; i++) {
      auto* h = reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(rx_head_) * rx_.tp_frame_size);
      __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
      rx_head_ = (rx_head_ + 1) % rx_.tp_frame_nr;
    }
    rx_taken_ = 0;
    track_rx_head();
  }

  bool rx_more() const noexcept override { return rx_more_; }
  // Half the ring still waits beyond the next slot: a slot half a ring
  // ahead is ours. A ring too small to tell counts as crowded.
  bool rx_crowded() const noexcept override {
    uint32_t nr = rx_.tp_frame_nr, ahead = nr / 2;
    if (!ring_ || ahead <= uint32_t(rx_taken_) + 32) return true;
    auto* h = reinterpret_cast<const tpacket2_hdr*>(ring_ + size_t((rx_head_ + ahead) % nr) * rx_.tp_frame_size);
    return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER;
  }
  int fd() const noexcept override { return fd_.get(); }
  size_t mtu() const noexcept override { return mtu_; }
  size_t link_mtu() const noexcept override { return gso_ ? mtu_ + kOuter : mtu_; }
  // GSO mode: also what the socket's queue holds in full frames (each
  // packet is charged somewhat more than its bytes).
  size_t rx_capacity() const noexcept override {
    if (!gso_) return rx_.tp_frame_nr;
    return std::min<size_t>(rx_.tp_frame_nr, rcvbuf_ / (full_len_ + full_len_ / 4));
  }
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
  const char* kind() const noexcept override {
    return broker_conn_ ? "af_packet/broker" : gso_ ? "af_packet+gso" : "af_packet";
  }
  void append_counters(std::string& out) const override {
    if (!gso_) return;
    char b[400];
    int n = snprintf(b, sizeof b,
             " gso_packets=%llu gso_frames=%llu gso_tx_busy=%llu gso_rx_bad=%llu gso_bad_hdr=%llu gso_bad_len=%llu"
             " gso_bad_seg=%llu gso_bad_over=%llu gso_rx_lost=%llu%s",
             (unsigned long long)gso_sent_, (unsigned long long)gso_frames_, (unsigned long long)gso_busy_,
             (unsigned long long)(bad_.hdr + bad_.len + bad_.seg + bad_.over), (unsigned long long)bad_.hdr,
             (unsigned long long)bad_.len, (unsigned long long)bad_.seg, (unsigned long long)bad_.over,
             (unsigned long long)gso_rx_lost_, gso_ok_ ? "" : " gso_refused=1");
    out.append(b, size_t(std::clamp(n, 0, int(sizeof b) - 1)));
  }
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
  // When the kernel took the slot's packet (CLOCK_REALTIME, ns).
  static uint64_t slot_ns(const tpacket2_hdr* h) noexcept {
    return uint64_t(h->tp_sec) * 1000000000ull + h->tp_nsec;
  }

  void track_rx_head() {
    rx_flag_ = &reinterpret_cast<tpacket2_hdr*>(ring_ + size_t(rx_head_) * rx_.tp_frame_size)->tp_status;
    rx_mask_ = TP_STATUS_USER;
  }

  static tpacket_req make_req(size_t bytes, size_t slot) {
    size_t block = slot > (1u << 16) ? slot : (1u << 16);
    tpacket_req r{};
    size_t nblocks = (bytes + block - 1) / block;
    if (nblocks < 2) nblocks = 2;
    r.tp_block_size = unsigned(block);
    r.tp_block_nr = unsigned(nblocks);
    r.tp_frame_size = unsigned(slot);
    r.tp_frame_nr = unsigned(block / slot * nblocks);
    return r;
  }

  UniqueFd fd_;
  UniqueFd broker_conn_;  // open while the broker's socket is in use
  std::string iface_;
  size_t mtu_ = 1500;
  uint8_t mac_[6] = {0};
  tpacket_req rx_{}, tx_{};  // the rings; tp_frame_size is a slot's size
  uint8_t* ring_ = nullptr;
  size_t ring_len_ = 0;
  uint8_t* tx_base_ = nullptr;
  uint32_t rx_head_ = 0, tx_head_ = 0;
  int rx_taken_ = 0;
  int pending_ = 0;
  uint64_t drops_ = 0;
  uint16_t ethertype_ = 0;
  // GSO mode
  bool gso_ = false;
  bool gso_ok_ = true;  // false once the kernel refused a GSO packet
  UniqueFd gso_fd_;
  size_t full_len_ = 0;  // a full frame: 14 + mtu()
  size_t rcvbuf_ = 0;
  // The run: run_[0] the virtio-net and outer headers (stage_'s head),
  // then each frame where it is (Frame::stays) or copied into stage_.
  std::vector<uint8_t> stage_, spare_;
  std::vector<iovec> run_;
  std::vector<uint8_t> pieces_;  // per frame of the run: its iovecs in run_ (1, or 2 with a tail)
  std::vector<iovec> kept_;      // run_keep's frames on their way into stage_
  size_t run_cap_ = 0;          // a run's bytes at most
  size_t stage_bytes_ = 0;      // the run's frames (0: no run open)
  size_t stage_fill_ = 0;       // of which copied into stage_
  std::vector<uint8_t> copy_buf_;
  bool copy_used_ = false;  // frames of this burst point into copy_buf_
  bool rx_more_ = false;    // the last burst stopped with frames waiting
  const uint8_t* cur_ = nullptr;  // the next segment of the open packet
  size_t cur_left_ = 0, cur_seg_ = 0;
  bool cur_copy_ = false;
  uint64_t cur_ns_ = 0;
  uint64_t gso_sent_ = 0, gso_frames_ = 0, gso_busy_ = 0, gso_rx_lost_ = 0;
  // Packets open_packet refused, by reason (statistics; the attack test
  // expects each).
  struct {
    uint64_t hdr = 0, len = 0, seg = 0, over = 0;
  } bad_;
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
