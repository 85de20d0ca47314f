// verbs raw-packet backend: an IBV_QPT_RAW_PACKET queue pair of the
// rdma-core device that drives the interface (mlx5-class NICs), a flow rule
// that steers frames of the pmeth EtherType addressed to the interface's MAC
// to it, and the rings of verbs_core (which this file connects to
// libibverbs through VerbsOps).
//
// NOT RUN: no machine of this project has such a device. This file is built
// and linked in CI; verbs_core is unit-tested against a fake; what happens on
// a real NIC is untested (docs/fi_pmeth.7.md says so).
#include <infiniband/verbs.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <rdma/fi_errno.h>

#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "wire/iface_query.hpp"
#include "wire/verbs_core.hpp"
#include "wire/wire.hpp"

namespace pm::eth {
namespace {

using namespace verbs;

// The rdma-core device whose port 1 is the network interface iface, found
// through sysfs (/sys/class/infiniband/<dev>/device/net/<iface>).
bool drives(ibv_device* d, const std::string& iface) {
  const char* name = ibv_get_device_name(d);
  if (!name) return false;
  std::string p = std::string("/sys/class/infiniband/") + name + "/device/net/" + iface;
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

class VerbsWire final : public Wire {
 public:
  ~VerbsWire() override {
    rings_.reset();
    if (flow_) ibv_destroy_flow(flow_);
    if (qp_) ibv_destroy_qp(qp_);
    if (scq_) ibv_destroy_cq(scq_);
    if (rcq_) ibv_destroy_cq(rcq_);
    if (chan_) ibv_destroy_comp_channel(chan_);
    if (mr_) ibv_dereg_mr(mr_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
    free(buf_);
  }

  int open(const WireConfig& cfg, std::string* why) {
    IfaceFacts f;
    if (!query_iface(cfg.iface, &f, why)) return -FI_ENODEV;
    iface_ = cfg.iface;
    mtu_ = f.mtu;
    memcpy(mac_, f.mac, 6);
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) {
      if (list) ibv_free_device_list(list);
      *why = "no rdma-core device";
      return -FI_ENODEV;
    }
    for (int i = 0; i < n && !ctx_; i++)
      if (drives(list[i], cfg.iface)) ctx_ = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!ctx_) {
      *why = "no rdma-core device drives " + cfg.iface;
      return -FI_ENODEV;
    }
    RingConfig rc;
    rc.slot_bytes = uint32_t((mtu_ + 14 + 63) & ~size_t(63));
    rc.rx_slots = uint32_t(std::max<size_t>(64, cfg.rx_ring_bytes / rc.slot_bytes));
    rc.tx_slots = uint32_t(std::max<size_t>(64, cfg.tx_ring_bytes / rc.slot_bytes));
    size_t len = size_t(rc.rx_slots + rc.tx_slots) * rc.slot_bytes;
    if (posix_memalign(reinterpret_cast<void**>(&buf_), 4096, len) != 0) {
      buf_ = nullptr;
      *why = "out of memory";
      return -FI_ENOMEM;
    }
    pd_ = ibv_alloc_pd(ctx_);
    mr_ = pd_ ? ibv_reg_mr(pd_, buf_, len, int(IBV_ACCESS_LOCAL_WRITE)) : nullptr;
    chan_ = ibv_create_comp_channel(ctx_);
    rcq_ = chan_ ? ibv_create_cq(ctx_, int(rc.rx_slots), nullptr, chan_, 0) : nullptr;
    scq_ = ibv_create_cq(ctx_, int(rc.tx_slots), nullptr, nullptr, 0);
    if (!pd_ || !mr_ || !chan_ || !rcq_ || !scq_) {
      *why = std::string("verbs resources on ") + ibv_get_device_name(ctx_->device) + ": " + strerror(errno);
      return -FI_ENOMEM;
    }
    fcntl(chan_->fd, F_SETFL, fcntl(chan_->fd, F_GETFL) | O_NONBLOCK);
    ibv_qp_init_attr qa{};
    qa.qp_type = IBV_QPT_RAW_PACKET;
    qa.send_cq = scq_;
    qa.recv_cq = rcq_;
    qa.cap.max_send_wr = rc.tx_slots;
    qa.cap.max_recv_wr = rc.rx_slots;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = 64;
    qp_ = ibv_create_qp(pd_, &qa);
    if (!qp_) {
      int e = errno;
      *why = std::string("raw-packet QP: ") + strerror(e) + (e == EPERM ? " (needs CAP_NET_RAW)" : "");
      return e == EPERM ? -FI_EPERM : -FI_ENODEV;
    }
    rc.max_inline = qa.cap.max_inline_data;
    uint8_t port = 1;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port;
    int e = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PORT);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    if (!e) e = ibv_modify_qp(qp_, &a, IBV_QP_STATE);
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    if (!e) e = ibv_modify_qp(qp_, &a, IBV_QP_STATE);
    if (e) {
      *why = std::string("raw-packet QP to RTS: ") + strerror(e);
      return -FI_EIO;
    }
    // The flow rule: our MAC and the pmeth EtherType (the endpoint id is
    // checked by the device; flow steering does not reach into the payload).
    EthFlowRule r = make_flow_rule(mac_, cfg.ethertype, port);
    struct FlowReq {
      ibv_flow_attr attr;
      ibv_flow_spec_eth eth;  // the specs follow the attribute with no gap
    } fr{};
    static_assert(offsetof(FlowReq, eth) == sizeof(ibv_flow_attr));
    fr.attr.type = IBV_FLOW_ATTR_NORMAL;
    fr.attr.size = sizeof fr;
    fr.attr.priority = r.priority;
    fr.attr.num_of_specs = 1;
    fr.attr.port = r.port;
    fr.eth.type = IBV_FLOW_SPEC_ETH;
    fr.eth.size = sizeof fr.eth;
    memcpy(fr.eth.val.dst_mac, r.dst_mac, 6);
    memcpy(fr.eth.mask.dst_mac, r.dst_mac_mask, 6);
    fr.eth.val.ether_type = r.ether_type_be;
    fr.eth.mask.ether_type = r.ether_type_mask;
    flow_ = ibv_create_flow(qp_, &fr.attr);
    if (!flow_) {
      *why = std::string("flow steering rule: ") + strerror(errno);
      return -FI_EIO;
    }
    VerbsOps ops{this, post_send, post_recv, poll_send, poll_recv, arm_recv};
    rings_ = std::make_unique<Rings>(rc, ops, buf_, mr_->lkey);
    if (int pe = rings_->start()) {
      *why = std::string("posting receive buffers: ") + strerror(pe);
      return -FI_EIO;
    }
    PM_INFO(FI_LOG_EP_CTRL, "%s: verbs raw-packet QP on %s, %u+%u buffers of %u bytes", iface_.c_str(),
            ibv_get_device_name(ctx_->device), rc.rx_slots, rc.tx_slots, rc.slot_bytes);
    return 0;
  }

  int tx_burst(const Frame* f, int n) noexcept override { return rings_->tx_burst(f, n); }
  void tx_flush() noexcept override { rings_->tx_flush(); }
  int rx_burst(Frame* f, int max) noexcept override { return rings_->rx_burst(f, max); }
  void rx_release() noexcept override { rings_->rx_release(); }
  int fd() const noexcept override { return chan_->fd; }
  size_t mtu() const noexcept override { return mtu_; }
  size_t rx_capacity() const noexcept override { return rings_->config().rx_slots; }
  const uint8_t* mac() const noexcept override { return mac_; }
  const char* kind() const noexcept override { return "verbs"; }
  bool link_up() noexcept override {
    ibv_port_attr pa{};
    return ibv_query_port(ctx_, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
  }

 private:
  static int post_send(void* c, const SendWr* w, int n) {
    auto* self = static_cast<VerbsWire*>(c);
    ibv_sge sge[64];
    ibv_send_wr wr[64];
    if (n > 64) return EINVAL;
    for (int i = 0; i < n; i++) {
      sge[i] = ibv_sge{w[i].sge.addr, w[i].sge.length, w[i].sge.lkey};
      wr[i] = ibv_send_wr{};
      wr[i].wr_id = w[i].wr_id;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
      wr[i].opcode = IBV_WR_SEND;
      wr[i].send_flags = (w[i].signaled ? IBV_SEND_SIGNALED : 0) | (w[i].inline_data ? IBV_SEND_INLINE : 0);
      wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(self->qp_, wr, &bad);
  }
  static int post_recv(void* c, const RecvWr* w, int n) {
    auto* self = static_cast<VerbsWire*>(c);
    ibv_sge sge[64];
    ibv_recv_wr wr[64];
    if (n > 64) return EINVAL;
    for (int i = 0; i < n; i++) {
      sge[i] = ibv_sge{w[i].sge.addr, w[i].sge.length, w[i].sge.lkey};
      wr[i] = ibv_recv_wr{};
      wr[i].wr_id = w[i].wr_id;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
      wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(self->qp_, wr, &bad);
  }
  static int poll(ibv_cq* cq, Completion* out, int max) {
    ibv_wc wc[32];
    int got = 0;
    while (got < max) {
      int n = ibv_poll_cq(cq, std::min(max - got, 32), wc);
      if (n < 0) return got ? got : n;
      for (int i = 0; i < n; i++) out[got + i] = Completion{wc[i].wr_id, wc[i].byte_len, int(wc[i].status)};
      got += n;
      if (n < 32) break;
    }
    return got;
  }
  static int poll_send(void* c, Completion* out, int max) { return poll(static_cast<VerbsWire*>(c)->scq_, out, max); }
  static int poll_recv(void* c, Completion* out, int max) { return poll(static_cast<VerbsWire*>(c)->rcq_, out, max); }
  static int arm_recv(void* c) {
    auto* self = static_cast<VerbsWire*>(c);
    ibv_cq* cq;
    void* cq_ctx;
    unsigned got = 0;
    while (ibv_get_cq_event(self->chan_, &cq, &cq_ctx) == 0) got++;  // the fd is non-blocking
    if (got) ibv_ack_cq_events(self->rcq_, got);
    return ibv_req_notify_cq(self->rcq_, 0);
  }

  std::string iface_;
  size_t mtu_ = 1500;
  uint8_t mac_[6] = {0};
  uint8_t* buf_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_comp_channel* chan_ = nullptr;
  ibv_cq *rcq_ = nullptr, *scq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_flow* flow_ = nullptr;
  std::unique_ptr<Rings> rings_;
};

}  // namespace

bool verbs_wire_built() { return true; }

bool verbs_raw_device_present(std::string* why) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  bool found = false;
  for (int i = 0; list && i < n && !found; i++) {
    ibv_context* c = ibv_open_device(list[i]);
    if (!c) continue;
    ibv_port_attr pa{};
    found = ibv_query_port(c, 1, &pa) == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    ibv_close_device(c);
  }
  if (list) ibv_free_device_list(list);
  if (!found)
    *why = n == 0 ? "no rdma-core device on this machine (raw-packet QPs need an mlx5-class NIC)"
                  : std::to_string(n) + " rdma-core device(s), none with an Ethernet port";
  return found;
}

std::unique_ptr<Wire> open_verbs_wire(const WireConfig& cfg, int* err, std::string* why) {
  auto w = std::make_unique<VerbsWire>();
  if (int rc = w->open(cfg, why)) {
    *err = rc;
    return nullptr;
  }
  return w;
}

}  // namespace pm::eth
