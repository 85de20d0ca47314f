// AF_XDP backend: one UMEM shared by the receive and transmit directions
// (the first part of its frames sits in the fill ring, the rest on a free
// list for transmission), the four rings mapped into user space, and an XDP
// program (xdp_steer.bpf.c) that redirects only this endpoint's pmeth frames
// to the socket; every other frame goes on to the kernel.
//
// A frame larger than a chunk (an MTU over 3,822 bytes: jumbo frames) needs
// the kernel's multi-buffer AF_XDP (XDP_USE_SG, Linux 6.6): it then travels
// as several descriptors, cut and joined by xdp_frames.hpp. From MTU 3,000
// the program is loaded in its multi-buffer variant (native XDP on veth
// refuses the other above about 3.5 K).
//
// The program is attached through a BPF link, which belongs to this
// process's file descriptor: when the endpoint closes or the process dies,
// the kernel detaches the program (nothing is pinned, nothing can be left
// steering frames to a dead socket). One link per interface: a second
// endpoint on the same interface finds it taken (EBUSY) and, under
// FI_PMETH_WIRE=auto, uses AF_PACKET; the first endpoint's program passes
// the second one's frames (another endpoint id) to the kernel.
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/xsk.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "wire/iface_query.hpp"
#include "wire/wire.hpp"
#include "wire/xdp_frames.hpp"

#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)  // linux/if_xdp.h of Linux 6.6
#endif
#ifndef SO_PREFER_BUSY_POLL
#define SO_PREFER_BUSY_POLL 69
#endif
#ifndef SO_BUSY_POLL_BUDGET
#define SO_BUSY_POLL_BUDGET 70
#endif

// The compiled program (xdp_steer.bpf.o), embedded at build time.
extern "C" const unsigned char pm_xdp_steer_obj[];
extern "C" const size_t pm_xdp_steer_obj_len;

namespace pm::eth {
namespace {

constexpr uint32_t kChunk = XSK_UMEM__DEFAULT_FRAME_SIZE;  // 4096: one frame per chunk
constexpr uint32_t kRxHeadroom = 256;                      // XDP_PACKET_HEADROOM, before each received frame
// Descriptors one frame may take (the kernel builds a sent frame as one skb:
// its head and at most MAX_SKB_FRAGS = 17 fragments).
constexpr uint32_t kMaxPieces = 16;
constexpr int kMaxBurst = 64;  // the most frames one rx_burst() returns
using xdp::Desc;
using xdp::pieces;

uint32_t pow2_at_least(size_t v, uint32_t lo, uint32_t hi) {
  uint32_t p = lo;
  while (p < v && p < hi) p <<= 1;
  return p;
}

// libbpf prints to stderr by default; its messages belong in our log.
int libbpf_to_log(enum libbpf_print_level level, const char* fmt, va_list ap) {
  if (level == LIBBPF_DEBUG) return 0;
  char buf[512];
  vsnprintf(buf, sizeof buf, fmt, ap);
  size_t n = strlen(buf);
  if (n && buf[n - 1] == '\n') buf[n - 1] = 0;
  PM_DBG(FI_LOG_EP_CTRL, "libbpf: %s", buf);
  return 0;
}

std::string errstr(int e) { return strerror(e < 0 ? -e : e); }

const char* mode_name(XdpMode m) { return m == XdpMode::kSkb ? "skb" : "native"; }

class XdpWire final : public Wire {
 public:
  ~XdpWire() override {
    if (joiner_.dropped())
      PM_WARN(FI_LOG_EP_CTRL, "%s: %llu received frames dropped: longer than MTU %zu allows, or not in the UMEM",
              iface_.c_str(), (unsigned long long)joiner_.dropped(), mtu_);
    link_.reset();  // detach the program first: no frame is redirected to a closing socket
    if (xsk_) xsk_socket__delete(xsk_);
    if (umem_) xsk_umem__delete(umem_);
    if (area_ && area_ != MAP_FAILED) munmap(area_, area_len_);
  }

  int open(const WireConfig& cfg, std::string* why) {
    IfaceFacts f;
    if (!query_iface(cfg.iface, &f, why)) return -FI_ENODEV;
    iface_ = cfg.iface;
    memcpy(mac_, f.mac, 6);
    mtu_ = f.mtu;
    // A received frame sits behind the kernel's headroom; one that does not
    // fit a chunk takes several (multi-buffer). A VLAN tag is allowed for.
    max_frame_ = uint32_t(mtu_) + 18;
    sg_ = max_frame_ > kChunk - kRxHeadroom;
    frags_prog_ = mtu_ >= 3000;
    if (sg_ && cfg.xdp_single_chunk) {
      *why = "MTU " + std::to_string(mtu_) + " of " + cfg.iface +
             " needs frames of several AF_XDP chunks, which in copy mode are slower than af_packet "
             "(FI_PMETH_WIRE=af_xdp uses them)";
      return -FI_EMSGSIZE;
    }
    if (sg_ && pieces(max_frame_, kChunk - kRxHeadroom) > kMaxPieces) {
      *why = "MTU " + std::to_string(mtu_) + " of " + cfg.iface + " needs more AF_XDP chunks per frame than " +
             std::to_string(kMaxPieces);
      return -FI_EMSGSIZE;
    }
    if (int rc = attach_program(cfg, f.ifindex, why)) return rc;
    if (int rc = make_socket(cfg, why)) return rc;
    return 0;
  }

  int tx_burst(const Frame* f, int n) noexcept override {
    reclaim();
    uint32_t want = 0;
    for (int i = 0; i < n; i++) want += pieces(f[i].len, kChunk);
    if (free_.size() < want && pending_) {
      kick();  // copy mode sends on the kick; the completions then come back
      reclaim();
    }
    // The frames whose pieces all have a chunk and a descriptor.
    uint32_t room = uint32_t(std::min<size_t>(free_.size(), xsk_prod_nb_free(&tx_, want)));
    uint32_t k = 0, descs = 0;
    for (; k < uint32_t(n); k++) {
      uint32_t p = pieces(f[k].len, kChunk);
      if ((p > 1 && !sg_) || p > kMaxPieces || descs + p > room) break;
      descs += p;
    }
    uint32_t idx;
    if (k == 0 || xsk_ring_prod__reserve(&tx_, descs, &idx) != descs) return 0;
    uint32_t at = 0;
    for (uint32_t i = 0; i < k; i++) {
      uint64_t addrs[kMaxPieces];
      Desc d[kMaxPieces];
      uint32_t p = pieces(f[i].len, kChunk);
      for (uint32_t j = 0; j < p; j++) {
        addrs[j] = free_.back();
        free_.pop_back();
      }
      xdp::cut_frame(area_, f[i], kChunk, addrs, d);
      for (uint32_t j = 0; j < p; j++) {
        xdp_desc* t = xsk_ring_prod__tx_desc(&tx_, idx + at++);
        t->addr = d[j].addr;
        t->len = d[j].len;
        t->options = d[j].options;
      }
    }
    xsk_ring_prod__submit(&tx_, descs);
    pending_ += descs;
    if (int(k) < n) tx_flush();
    return int(k);
  }

  void tx_flush() noexcept override {
    if (!pending_) return;
    kick();
  }

  int rx_burst(Frame* f, int max) noexcept override {
    if (max > kMaxBurst) max = kMaxBurst;
    uint32_t idx = 0;
    uint32_t view = sg_ ? joiner_.view_for(max) : uint32_t(max);
    uint32_t n = xsk_ring_cons__peek(&rx_, view, &idx);
    if (n == 0 && busy_poll_) {
      // Drive the driver's NAPI from here (SO_PREFER_BUSY_POLL).
      recvfrom(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
      n = xsk_ring_cons__peek(&rx_, view, &idx);
    }
    rx_idx_ = idx;
    if (sg_) {
      // Frames of several descriptors are joined; the descriptors taken are
      // released by rx_release(), the others stay for the next call.
      uint32_t used = 0;
      int got = joiner_.join(area_, area_len_, [&](uint32_t i) -> const xdp_desc& {
        return *xsk_ring_cons__rx_desc(&rx_, idx + i);
      }, n, f, max, &used);
      if (used < n) xsk_ring_cons__cancel(&rx_, n - used);
      rx_taken_ = used;
      // Only dropped frames: nobody calls rx_release() after an empty
      // burst, so their chunks go back to the fill ring here.
      if (got == 0) rx_release();
      return got;
    }
    for (uint32_t i = 0; i < n; i++) {
      const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, idx + i);
      f[i].data = area_ + d->addr;
      f[i].len = d->len;
    }
    rx_taken_ = n;
    return int(n);
  }

  void rx_release() noexcept override {
    if (!rx_taken_) return;
    uint32_t fidx;
    // The fill ring holds every receive chunk, so it has room for these.
    uint32_t got = xsk_ring_prod__reserve(&fill_, rx_taken_, &fidx);
    for (uint32_t i = 0; i < rx_taken_; i++) {
      auto* d = const_cast<xdp_desc*>(xsk_ring_cons__rx_desc(&rx_, rx_idx_ + i));
      if (i < got) *xsk_ring_prod__fill_addr(&fill_, fidx + i) = d->addr & ~uint64_t(kChunk - 1);
      // rx_maybe() reads this slot's length: 0 until the kernel fills it again.
      __atomic_store_n(&d->len, 0u, __ATOMIC_RELAXED);
    }
    xsk_ring_cons__release(&rx_, rx_taken_);
    if (got) xsk_ring_prod__submit(&fill_, got);
    rx_taken_ = 0;
    track_rx_head();
    if (xsk_ring_prod__needs_wakeup(&fill_))
      recvfrom(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
  }

  int fd() const noexcept override { return xsk_socket__fd(xsk_); }
  size_t mtu() const noexcept override { return mtu_; }
  size_t rx_capacity() const noexcept override { return rx_frames_; }
  // The socket's counters (not reset by reading): frames dropped because the
  // RX ring was full or the fill ring had no chunk, or for other reasons.
  uint64_t rx_dropped() noexcept override {
    xdp_statistics st{};
    socklen_t l = sizeof st;
    if (getsockopt(xsk_socket__fd(xsk_), SOL_XDP, XDP_STATISTICS, &st, &l) != 0) return drops_;
    uint64_t d = st.rx_dropped + st.rx_ring_full + st.rx_fill_ring_empty_descs;
    if (d > drops_) losing_ = true;
    drops_ = d;
    return d;
  }
  const uint8_t* mac() const noexcept override { return mac_; }
  const char* kind() const noexcept override { return kind_.c_str(); }
  bool link_up() noexcept override { return iface_link_up(xsk_socket__fd(xsk_), iface_); }

 private:
  int attach_program(const WireConfig& cfg, int ifindex, std::string* why) {
    static std::mutex print_mu;
    std::lock_guard<std::mutex> g(print_mu);
    libbpf_print_fn_t old = libbpf_set_print(libbpf_to_log);
    int rc = load_and_attach(cfg, ifindex, why);
    libbpf_set_print(old);
    return rc;
  }

  int load_and_attach(const WireConfig& cfg, int ifindex, std::string* why) {
    LIBBPF_OPTS(bpf_object_open_opts, oo, .object_name = "pmeth_steer");
    bpf_object* obj = bpf_object__open_mem(pm_xdp_steer_obj, pm_xdp_steer_obj_len, &oo);
    if (!obj) {
      *why = "cannot open the XDP program: " + errstr(errno);
      return -FI_EIO;
    }
    struct ObjCloser {
      bpf_object* o;
      ~ObjCloser() { bpf_object__close(o); }
    } closer{obj};
    // From MTU 3000 the multi-buffer variant (native XDP on veth needs it
    // above about 3.5 K; loaded only then: kernels before 5.18 refuse it).
    bpf_program* prog = bpf_object__find_program_by_name(obj, frags_prog_ ? "pmeth_steer_mb" : "pmeth_steer");
    bpf_program* other = bpf_object__find_program_by_name(obj, frags_prog_ ? "pmeth_steer" : "pmeth_steer_mb");
    bpf_map* cfg_map = bpf_object__find_map_by_name(obj, "pm_cfg");
    bpf_map* xsks = bpf_object__find_map_by_name(obj, "pm_xsks");
    if (!prog || !other || !cfg_map || !xsks) {
      *why = "the embedded XDP object lacks pmeth_steer, pmeth_steer_mb, pm_cfg or pm_xsks";
      return -FI_EIO;
    }
    bpf_program__set_autoload(other, false);
    if (int e = bpf_object__load(obj)) {
      bool perm = e == -EPERM || e == -EACCES;
      *why = perm ? std::string("loading the XDP program needs CAP_BPF and CAP_NET_ADMIN")
                  : std::string("cannot load the XDP program") + (frags_prog_ ? " (its multi-buffer variant: Linux 5.18)" : "") + ": " +
                        errstr(e);
      return perm ? -FI_EPERM : -FI_EIO;
    }
    if (cfg.xdp_queue >= bpf_map__max_entries(xsks)) {
      *why = "queue " + std::to_string(cfg.xdp_queue) + " is beyond the program's socket map";
      return -FI_EINVAL;
    }
    struct {
      uint32_t ethertype, ep_id;
    } c{uint32_t(__builtin_bswap16(cfg.ethertype)), cfg.ep_id};
    uint32_t zero = 0;
    if (bpf_map_update_elem(bpf_map__fd(cfg_map), &zero, &c, 0) != 0) {
      *why = "cannot configure the XDP program: " + errstr(errno);
      return -FI_EIO;
    }
    // Native first under auto; SKB (generic) works on every interface.
    XdpMode tries[2] = {cfg.xdp_mode == XdpMode::kSkb ? XdpMode::kSkb : XdpMode::kNative, XdpMode::kSkb};
    int ntries = cfg.xdp_mode == XdpMode::kAuto ? 2 : 1;
    std::string fails;
    for (int t = 0; t < ntries; t++) {
      LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = tries[t] == XdpMode::kSkb ? XDP_FLAGS_SKB_MODE
                                                                                  : XDP_FLAGS_DRV_MODE);
      int fd = bpf_link_create(bpf_program__fd(prog), ifindex, BPF_XDP, &lo);
      if (fd >= 0) {
        link_.reset(fd);
        mode_ = tries[t];
        break;
      }
      int e = errno;
      if (e == EBUSY || e == EEXIST) {
        *why = "an XDP program is already attached to " + cfg.iface +
               " (another pmeth endpoint's, or another application's): one AF_XDP endpoint per interface";
        return -FI_EBUSY;
      }
      if (e == EPERM || e == EACCES) {
        *why = "attaching an XDP program needs CAP_NET_ADMIN";
        return -FI_EPERM;
      }
      fails += std::string(fails.empty() ? "" : "; ") + mode_name(tries[t]) + " mode: " + strerror(e);
    }
    if (!link_) {
      *why = "cannot attach the XDP program to " + cfg.iface + " (" + fails + ")";
      return -FI_EIO;
    }
    xsks_map_.reset(dup(bpf_map__fd(xsks)));
    if (!xsks_map_) {
      *why = std::string("dup: ") + strerror(errno);
      return -FI_EIO;
    }
    return 0;
  }

  int make_socket(const WireConfig& cfg, std::string* why) {
    rx_frames_ = pow2_at_least(cfg.rx_ring_bytes / kChunk, 64, 1u << 16);
    tx_frames_ = pow2_at_least(cfg.tx_ring_bytes / kChunk, 64, 1u << 16);
    area_len_ = size_t(rx_frames_ + tx_frames_) * kChunk;
    area_ = static_cast<uint8_t*>(
        mmap(nullptr, area_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    if (area_ == MAP_FAILED) {
      area_ = nullptr;
      *why = "cannot map the UMEM: " + errstr(errno);
      return -FI_ENOMEM;
    }
    xsk_umem_config uc{};
    uc.fill_size = rx_frames_;
    uc.comp_size = tx_frames_;
    uc.frame_size = kChunk;
    uc.frame_headroom = 0;
    uc.flags = 0;
    if (int e = xsk_umem__create(&umem_, area_, area_len_, &fill_, &comp_, &uc)) {
      umem_ = nullptr;
      *why = "cannot register the UMEM: " + errstr(e) +
             (e == -ENOBUFS || e == -ENOMEM || e == -EPERM ? " (RLIMIT_MEMLOCK? CAP_IPC_LOCK?)" : "");
      return e == -EPERM ? -FI_EPERM : -FI_ENOMEM;
    }
    xsk_socket_config sc{};
    sc.rx_size = rx_frames_;
    sc.tx_size = tx_frames_;
    sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;  // our own program, attached above
    sc.xdp_flags = 0;
    sc.bind_flags = XDP_USE_NEED_WAKEUP | (cfg.xdp_zerocopy ? XDP_ZEROCOPY : 0) | (sg_ ? XDP_USE_SG : 0);
    if (int e = xsk_socket__create(&xsk_, iface_.c_str(), cfg.xdp_queue, umem_, &rx_, &tx_, &sc)) {
      xsk_ = nullptr;
      *why = "cannot bind an AF_XDP socket to " + iface_ + " queue " + std::to_string(cfg.xdp_queue) + ": " +
             errstr(e) +
             (e == -EPERM ? " (AF_XDP sockets need CAP_NET_RAW)"
              : e == -EBUSY ? " (another AF_XDP socket holds the queue)"
              : e == -EOPNOTSUPP && cfg.xdp_zerocopy
                  ? std::string(" (the driver has no zero-copy AF_XDP") + (sg_ ? " with multi-buffer frames)" : ")")
              : (e == -EINVAL || e == -EOPNOTSUPP) && sg_
                  ? " (MTU " + std::to_string(mtu_) + " needs multi-buffer AF_XDP: Linux 6.6)"
                  : std::string());
      return e == -EPERM ? -FI_EPERM : e == -EBUSY ? -FI_EBUSY : -FI_EIO;
    }
    int fd = xsk_socket__fd(xsk_);
    xdp_options opt{};
    socklen_t ol = sizeof opt;
    zerocopy_ = getsockopt(fd, SOL_XDP, XDP_OPTIONS, &opt, &ol) == 0 && (opt.flags & XDP_OPTIONS_ZEROCOPY);
    if (cfg.busy_poll_us) {
      int one = 1, us = int(cfg.busy_poll_us), budget = 64;
      busy_poll_ = setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &one, sizeof one) == 0 &&
                   setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us) == 0 &&
                   setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof budget) == 0;
      if (!busy_poll_)
        PM_INFO(FI_LOG_EP_CTRL, "%s: no busy polling on the AF_XDP socket (%s)", iface_.c_str(), strerror(errno));
    }
    // Every receive chunk into the fill ring; the transmit chunks free.
    uint32_t idx;
    if (xsk_ring_prod__reserve(&fill_, rx_frames_, &idx) != rx_frames_) {
      *why = "the fill ring is smaller than the receive chunks";
      return -FI_EIO;
    }
    for (uint32_t i = 0; i < rx_frames_; i++) *xsk_ring_prod__fill_addr(&fill_, idx + i) = uint64_t(i) * kChunk;
    xsk_ring_prod__submit(&fill_, rx_frames_);
    free_.reserve(tx_frames_);
    for (uint32_t i = 0; i < tx_frames_; i++) free_.push_back(uint64_t(rx_frames_ + i) * kChunk);
    // Frames come to this socket only from here on.
    if (bpf_map_update_elem(xsks_map_.get(), &cfg.xdp_queue, &fd, 0) != 0) {
      *why = "cannot enter the socket in the XDP program's map: " + errstr(errno);
      return -FI_EIO;
    }
    if (sg_) joiner_.init(max_frame_, xdp::RxJoiner::kMaxPieces, kMaxBurst);
    track_rx_head();
    kind_ = std::string("af_xdp/") + mode_name(mode_) + (zerocopy_ ? "/zc" : "/copy") + (sg_ ? "/mb" : "");
    PM_INFO(FI_LOG_EP_CTRL, "%s: AF_XDP socket on queue %u, XDP program in %s mode, %s, %u+%u chunks%s%s",
            iface_.c_str(), cfg.xdp_queue, mode_name(mode_), zerocopy_ ? "zero-copy" : "copy mode", rx_frames_,
            tx_frames_, sg_ ? ", frames of several chunks" : "", busy_poll_ ? ", busy polling" : "");
    return 0;
  }

  // Transmit chunks the kernel is done with go back on the free list.
  void reclaim() noexcept {
    uint32_t idx;
    uint32_t n = xsk_ring_cons__peek(&comp_, tx_frames_, &idx);
    if (!n) return;
    for (uint32_t i = 0; i < n; i++) free_.push_back(*xsk_ring_cons__comp_addr(&comp_, idx + i));
    xsk_ring_cons__release(&comp_, n);
  }

  // In copy mode each sendto() sends a bounded batch (32 frames) and says
  // EAGAIN when more are queued: repeat, bounded by what was queued.
  void kick() noexcept {
    uint32_t queued = pending_;
    pending_ = 0;
    if (!xsk_ring_prod__needs_wakeup(&tx_)) return;
    int fd = xsk_socket__fd(xsk_);
    for (uint32_t round = 0; round <= queued / 16 + 1; round++) {
      if (sendto(fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) break;
      if (errno != EAGAIN && errno != EBUSY && errno != ENOBUFS) break;
      reclaim();  // a full completion ring stops the kernel
    }
  }

  void track_rx_head() {
    rx_flag_ = &xsk_ring_cons__rx_desc(&rx_, rx_.cached_cons)->len;
    rx_mask_ = ~0u;
  }

  std::string iface_, kind_ = "af_xdp";
  size_t mtu_ = 1500;
  uint32_t max_frame_ = 0;  // the longest frame received (MTU, Ethernet header, a VLAN tag)
  bool sg_ = false;         // frames may take several chunks (multi-buffer)
  bool frags_prog_ = false; // the program's multi-buffer variant (xdp.frags)
  xdp::RxJoiner joiner_;
  uint64_t drops_ = 0;  // rx_dropped(): the socket's last count
  uint8_t mac_[6] = {0};
  UniqueFd link_, xsks_map_;
  XdpMode mode_ = XdpMode::kNative;
  bool zerocopy_ = false, busy_poll_ = false;
  uint8_t* area_ = nullptr;
  size_t area_len_ = 0;
  uint32_t rx_frames_ = 0, tx_frames_ = 0;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fill_{}, tx_{};
  xsk_ring_cons comp_{}, rx_{};
  std::vector<uint64_t> free_;
  uint32_t rx_idx_ = 0, rx_taken_ = 0, pending_ = 0;
};

}  // namespace

bool xdp_wire_built() { return true; }

std::unique_ptr<Wire> open_xdp_wire(const WireConfig& cfg, int* err, std::string* why) {
  auto w = std::make_unique<XdpWire>();
  if (int rc = w->open(cfg, why)) {
    *err = rc;
    return nullptr;
  }
  return w;
}

}  // namespace pm::eth
