#include "core/endpoint.hpp"

#include <algorithm>
#include <cstring>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "base/log.hpp"
#include "core/addr_str.hpp"
#include "core/av.hpp"
#include "core/cntr.hpp"
#include "core/domain.hpp"
#include "core/fabric.hpp"
#include "base/param.hpp"
#include "core/provider.hpp"

namespace pm {

extern const fi_ops_ep kEpOps;
extern const fi_ops kEpFiOps;
extern const fi_ops_cm kEpCmOps;
extern const fi_ops_msg kEpMsgOps;
extern const fi_ops_tagged kEpTaggedOps;
extern const fi_ops_rma kEpRmaOps;
extern const fi_ops_atomic kEpAtomicOps;
extern const fi_ops_collective kEpCollOps;

Endpoint::Endpoint(Domain& dom, const fi_info& info, std::unique_ptr<Device> dev, void* context)
    : dom_(dom), info_(fi_dupinfo(&info)), dev_(std::move(dev)) {
  box_.self = this;
  box_.fid.fid.fclass = FI_CLASS_EP;
  box_.fid.fid.context = context;
  box_.fid.fid.ops = const_cast<fi_ops*>(&kEpFiOps);
  box_.fid.ops = const_cast<fi_ops_ep*>(&kEpOps);
  box_.fid.cm = const_cast<fi_ops_cm*>(&kEpCmOps);
  box_.fid.msg = const_cast<fi_ops_msg*>(&kEpMsgOps);
  box_.fid.tagged = const_cast<fi_ops_tagged*>(&kEpTaggedOps);
  box_.fid.rma = const_cast<fi_ops_rma*>(&kEpRmaOps);
  box_.fid.atomic = const_cast<fi_ops_atomic*>(&kEpAtomicOps);
  box_.fid.collective = const_cast<fi_ops_collective*>(&kEpCollOps);

    tx_op_flags_ = info.tx_attr ? info.tx_attr->op_flags : 0;
  rx_op_flags_ = info.rx_attr ? info.rx_attr->op_flags : 0;
  inject_size_ = info.tx_attr ? info.tx_attr->inject_size : 0;
  // Eager messages are bounded by the protocol (a receiver refuses an eager
  // header claiming more): the threshold and the inject size stay below it.
  rndv_threshold_ = std::min<size_t>(g_params.get_size("rndv_threshold"), kMaxEagerMsg);
  help_min_ = g_params.get_size("cma_share_min");
  inject_size_ = std::min<size_t>(inject_size_, kMaxEagerMsg);
  unexp_cap_ = std::max<size_t>(g_params.get_size("unexp_cap_kb"), 1) * 1024;
  unexp_soft_ = unexp_cap_ / 4;
  peer_timeout_ns_ = uint64_t(g_params.get_int("peer_timeout_ms")) * 1000000ull;
  close_timeout_ns_ = uint64_t(std::max<int64_t>(g_params.get_int("close_timeout_ms"), 0)) * 1000000ull;
  source_err_ = (info.caps & FI_SOURCE_ERR) && (info.caps & FI_SOURCE);
  if (info.ep_attr && info.ep_attr->type == FI_EP_DGRAM) {
    dgram_ = true;
    rndv_threshold_ = SIZE_MAX;
  }

  limits_.max_payload = dev_->max_payload();
  limits_.max_msg = info.ep_attr && info.ep_attr->max_msg_size ? info.ep_attr->max_msg_size : UINT64_MAX;
  limits_.eager_max = kMaxEagerMsg;
  limits_.dgram = dgram_;

  size_t ntx = info.tx_attr && info.tx_attr->size ? info.tx_attr->size : g_params.get_size("tx_size");
  tx_ops_ = std::vector<TxOp>(ntx);
  for (size_t i = ntx; i-- > 0;) {
    tx_ops_[i].index = uint32_t(i);
    tx_free_.push_back(&tx_ops_[i]);
  }
  rx_size_ = info.rx_attr && info.rx_attr->size ? info.rx_attr->size : g_params.get_size("rx_size");
  dom_.add_ep(this);
}

Endpoint::~Endpoint() {
  fi_freeinfo(info_);
}

int Endpoint::bind(struct fid* bfid, uint64_t flags) {
  switch (bfid->fclass) {
  case FI_CLASS_AV: {
    Av* av = self_of_fid<Av, fid_av>(bfid);
    if (av_) return -FI_EINVAL;
    if (&av->domain() != &dom_) return -FI_EINVAL;
    av_ = av;
    av->refs++;
    return 0;
  }
  case FI_CLASS_CQ: {
    Cq* cq = self_of_fid<Cq, fid_cq>(bfid);
    if (&cq->domain() != &dom_) return -FI_EINVAL;  // its lock would not guard us
    if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) return -FI_EBADFLAGS;
    if (flags & FI_TRANSMIT) {
      if (tx_cq_) return -FI_EINVAL;
      tx_cq_ = cq;
      selective_tx_ = flags & FI_SELECTIVE_COMPLETION;
      cq->bind_ep(this);
    }
    if (flags & FI_RECV) {
      if (rx_cq_) return -FI_EINVAL;
      rx_cq_ = cq;
      selective_rx_ = flags & FI_SELECTIVE_COMPLETION;
      cq->bind_ep(this);
    }
    return 0;
  }
  case FI_CLASS_CNTR: {
    Cntr* c = self_of_fid<Cntr, fid_cntr>(bfid);
    if (&c->domain() != &dom_) return -FI_EINVAL;
    constexpr uint64_t kAll = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (!(flags & kAll) || (flags & ~kAll)) return -FI_EBADFLAGS;
    for (auto [bit, slot] : {std::pair{FI_SEND, &send_cntr_}, {FI_RECV, &recv_cntr_}, {FI_READ, &read_cntr_},
                             {FI_WRITE, &write_cntr_}, {FI_REMOTE_READ, &rread_cntr_},
                             {FI_REMOTE_WRITE, &rwrite_cntr_}})
      if (flags & bit) {
        if (*slot) (*slot)->refs--;
        *slot = c;
        c->refs++;
      }
    return 0;
  }
  case FI_CLASS_EQ:
    return 0;  // RDM endpoints generate no connection events
  default:
    return -FI_ENOSYS;
  }
}

int Endpoint::enable() {
  if (!av_) {
    PM_WARN(FI_LOG_EP_CTRL, "fi_enable: no address vector bound");
    return -FI_ENOAV;
  }
  if (!tx_cq_ && !rx_cq_ && !send_cntr_ && !recv_cntr_ && !read_cntr_ && !write_cntr_) {
    PM_WARN(FI_LOG_EP_CTRL, "fi_enable: no completion queue bound");
    return -FI_ENOCQ;
  }
  enabled_ = true;
  if (g_params.get_bool("live_stats") && !live_) {
    live_ = LiveStats::create(g_prov ? g_prov->name : nullptr);
    // Room for the text with PMSTAT_MAX_PEERS peer lines and four rails
    // (about 25 KiB), so that the publications from fi_cq_read allocate
    // nothing (a signal handler that calls exit() may interrupt them).
    if (live_) live_text_.reserve(40960);
    if (live_) publish_live();
  }
  return 0;
}

void Endpoint::append_endpoint_stats(std::string& out) const {
  char buf[320];  // 114 characters of text and 8 values of at most 20 digits
  int n = snprintf(buf, sizeof buf,
           "endpoint: bad_packets=%llu unexp_bytes=%zu unexp_peak=%zu unexp_cap=%zu unexp_stalls=%llu "
           "shared_copies=%llu rndv_hints=%llu helper_serves=%llu",
           (unsigned long long)bad_packets_, unexp_bytes_, unexp_peak_, unexp_cap_,
           (unsigned long long)unexp_stalls_, (unsigned long long)helped_, (unsigned long long)rndv_hints_,
           (unsigned long long)dom_.helper_serves());
  out.append(buf, size_t(std::clamp(n, 0, int(sizeof buf) - 1)));
}

void Endpoint::publish_live() {
  live_text_.clear();  // keeps its capacity
  append_endpoint_stats(live_text_);
  live_text_ += '\n';
  dev_->append_stats(live_text_, PMSTAT_MAX_PEERS);
  live_->publish(live_text_);
}

int Endpoint::close() {
  // Drain (bounded by close_timeout_ms): what is queued leaves, what
  // arrived is acknowledged, and the device waits until the peers have
  // acknowledged everything it sent, so the last message of an exchange is
  // delivered and reported as sent on both sides.
  uint64_t deadline = now_ns() + close_timeout_ns_;
  while (now_ns() < deadline) {
    progress();
    if (active_peers_.empty() && ctrl_.empty() && streams_.empty() && dev_->close_drained() &&
        !help_pending())
      break;
  }
  live_.reset();  // the page goes before the endpoint
  std::string().swap(live_text_);
  if (g_params.get_bool("stats")) {
    std::string own;
    append_endpoint_stats(own);
    PM_WARN(FI_LOG_EP_CTRL, "%s", own.c_str());
    // One log call per line: libfabric's log buffer (1 KiB) cuts a longer
    // message, and a device with many peers has one line per peer. A line
    // longer than 800 bytes (several rails) goes on at a space, in another.
    std::string s = dev_->stats();
    for (size_t at = 0; at < s.size();) {
      size_t nl = std::min(s.find('\n', at), s.size());
      size_t end = nl;
      if (end - at > 800) {
        size_t sp = s.rfind(' ', at + 800);
        end = sp != std::string::npos && sp > at ? sp : at + 800;
      }
      PM_WARN(FI_LOG_EP_CTRL, "statistics: %.*s", int(end - at), s.data() + at);
      at = end == nl ? nl + 1 : end;
    }
  }
  for (Cntr* c : {send_cntr_, recv_cntr_, read_cntr_, write_cntr_, rread_cntr_, rwrite_cntr_})
    if (c) c->refs--;
  if (tx_cq_) tx_cq_->unbind_ep(this);
  if (rx_cq_ && rx_cq_ != tx_cq_) rx_cq_->unbind_ep(this);
  if (av_) av_->refs--;
  dom_.remove_ep(this);
  for (bool t : {true, false})
    while (Unexp* u = matcher_.unexpected(t).pop_front()) {
      for (auto& [k, a] : assemblies_)
        if (a.unexp == u) a.unexp = nullptr;
      delete u;
    }
  // Discarded messages still arriving are in no list: their assembly owns them.
  for (auto& [k, a] : assemblies_) delete a.unexp;
  assemblies_.clear();
  return 0;
}

// The binary name, or with FI_ADDR_STR its string (NUL included).
int Endpoint::getname(void* addr, size_t* len) {
  if (!len) return -FI_EINVAL;
  bool str = info_->addr_format == FI_ADDR_STR;
  std::string u = str ? name_to_uri(dev_->name(), dev_->name_len()) : std::string();
  size_t need = str ? u.size() + 1 : dev_->name_len();
  if (*len < need || !addr) {
    *len = need;
    return -FI_ETOOSMALL;
  }
  memcpy(addr, str ? static_cast<const void*>(u.c_str()) : dev_->name(), need);
  *len = need;
  return 0;
}

int Endpoint::getopt(int level, int optname, void* optval, size_t* optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname == FI_OPT_MIN_MULTI_RECV) {
    if (!optval || !optlen || *optlen < sizeof(size_t)) return -FI_EINVAL;
    *static_cast<size_t*>(optval) = min_multi_recv_;
    *optlen = sizeof(size_t);
    return 0;
  }
  return -FI_ENOPROTOOPT;
}

int Endpoint::setopt(int level, int optname, const void* optval, size_t optlen) {
  if (level != FI_OPT_ENDPOINT) return -FI_ENOPROTOOPT;
  if (optname == FI_OPT_MIN_MULTI_RECV) {
    if (!optval || optlen < sizeof(size_t)) return -FI_EINVAL;
    min_multi_recv_ = *static_cast<const size_t*>(optval);
    return 0;
  }
  return -FI_ENOPROTOOPT;
}

PeerState& Endpoint::peer_state(PeerId peer) {
  while (peer >= peers_.size()) peers_.push_back(std::make_unique<PeerState>());
  return *peers_[peer];
}

PeerId Endpoint::peer_of(fi_addr_t addr) {
  if (!av_) return kNoPeer;
  if (addr_cache_gen_ != av_->generation()) {
    addr_peer_cache_.clear();
    addr_cache_gen_ = av_->generation();
  }
  if (addr < addr_peer_cache_.size() && addr_peer_cache_[addr]) return PeerId(addr_peer_cache_[addr] - 1);
  const std::string* name = av_->name_of(addr);
  if (!name) return kNoPeer;
  PeerId p = dev_->resolve(name->data(), name->size());
  if (p == kNoPeer) return kNoPeer;
  if (addr < (1u << 20)) {
    if (addr >= addr_peer_cache_.size()) addr_peer_cache_.resize(size_t(addr) + 64, 0);
    addr_peer_cache_[addr] = fi_addr_t(p) + 1;
  }
  return p;
}

fi_addr_t Endpoint::addr_of(PeerId peer) {
  if (!av_) return FI_ADDR_NOTAVAIL;
  PeerState& ps = peer_state(peer);
  if (ps.addr_gen == av_->generation()) return ps.addr;
  size_t len = 0;
  const void* name = dev_->peer_name(peer, &len);
  ps.addr = name ? av_->addr_of(name, len) : FI_ADDR_NOTAVAIL;
  ps.addr_gen = av_->generation();
  return ps.addr;
}

std::string Endpoint::peer_str(PeerId peer) const {
  size_t l = 0;
  const void* n = dev_->peer_name(peer, &l);
  return n ? dev_->name_str(n, l) : "unknown peer";
}

void Endpoint::write_cq(Cq* cq, const Completion& c) {
  if (cq) cq->push(c);
}

void Endpoint::progress() {
  dev_->poll(*this, 64);
  if (!ctrl_.empty()) flush_ctrl();
  if (!pending_reads_.empty()) {
    auto reads = std::move(pending_reads_);
    pending_reads_.clear();
    for (auto& [peer, h] : reads) start_read_resp(peer, h);
  }
  if (!pending_atomics_.empty() && !tx_free_.empty()) {
    auto atomics = std::move(pending_atomics_);
    pending_atomics_.clear();
    for (auto& a : atomics) {
      RxPacket raw{a.peer, &a.hdr, a.payload.data(), a.payload.size()};
      CheckedPacket pk;
      limits_.max_payload = dev_->rx_max_payload(a.peer);
      limits_.reply_payload = dev_->max_payload(a.peer);
      if (!check_packet(raw, limits_, &pk)) on_atomic(pk);  // checked before; a copy of it
    }
  }
  // Not while a packet is being refused (it asks again on every offer): with
  // a cap hardly larger than one message, asking and releasing would take
  // turns on every progress call.
  if (rndv_release_due() && !rndv_recent_) release_rndv();
  rndv_recent_ = false;
  if (!active_peers_.empty()) progress_tx();
  if (!streams_.empty()) progress_streams();
  if (!acking_.empty()) progress_acks();
  dev_->flush();
  // Every 64th call (and the helper's, after tick()): the timers, and the
  // statistics page's clock (read on every call, it was about a tenth of
  // an empty call's time).
  if ((++poll_count_ & 63) == 0) {
    check_timers();
    if (live_ && live_->due()) publish_live();
  }
}

// The one way in for received packets: the validation boundary, then the
// handler of the op. Returns false when the packet must wait (no room).
bool Endpoint::on_packet(const RxPacket& pkt) noexcept {
  CheckedPacket pk;
  limits_.max_payload = dev_->rx_max_payload(pkt.peer);  // per peer (composite: its device's)
  // Only an atomic's check uses the bound of the reply (0: max_payload).
  // The devices hand up a header of their own memory, not the peer's.
  limits_.reply_payload = pkt.hdr && pkt.hdr->op == kPktAtomic ? dev_->max_payload(pkt.peer) : 0;
  if (const char* why = check_packet(pkt, limits_, &pk)) {
    drop(pkt.peer, why);
    return true;
  }
  const PktHdr& h = pk.hdr();
  try {
    switch (h.op) {
    case kPktEager: return on_eager(pk);
    case kPktData: return on_data(pk);
    case kPktRts: return on_rts(pk);
    case kPktCts: on_cts(pk); return true;
    case kPktFin: on_fin(pk); return true;
    case kPktHelp: on_help(pk); return true;
    case kPktHelped: on_helped(pk); return true;
    case kPktRndvHint: {
      PeerState& ps = peer_state(pk.peer());
      if (ps.rndv_asked != (h.tag != 0) && rndv_hints_taken_++ < 16)  // logged, not flooded
        PM_INFO(FI_LOG_EP_DATA, "%s %s", peer_str(pk.peer()).c_str(),
                h.tag ? "holds many unexpected messages: messages to it above the rendezvous threshold go by "
                        "rendezvous"
                      : "has room for unexpected messages again: messages to it go eagerly as before");
      ps.rndv_asked = h.tag != 0;
      return true;
    }
    case kPktWrite:
    case kPktRead:
      if (h.flags & kPktCma) return on_rma_cma(pk);
      return h.op == kPktWrite ? on_write(pk) : on_read(pk);
    case kPktAtomic: return on_atomic(pk);
    default: on_rma_reply(pk); return true;  // kPktReadResp, kPktAtomicResp, kPktRmaAck
    }
  } catch (const std::bad_alloc&) {
    // Sizes are bounded by the checks and the cap, so this is the system
    // running out: the packet waits and is offered again.
    PM_WARN(FI_LOG_EP_DATA, "out of memory handling a packet of %zu bytes; retried later", pk.len());
    return false;
  }
}

// The device reset the session with `peer` (it restarted, or was given up
// and came back): what was under way with it belongs to the old session.
void Endpoint::on_peer_reset(PeerId peer) noexcept {
  if (peer == kNoPeer) return;
  PM_INFO(FI_LOG_EP_DATA, "session with %s reset: its outstanding operations fail", peer_str(peer).c_str());
  try {
    fail_peer_ops(peer, FI_ECONNRESET);
  } catch (...) {
  }
}

void Endpoint::drop(PeerId peer, const char* why) {
  if (bad_packets_++ < 16)  // logged, not flooded: the count is in the statistics
    PM_WARN(FI_LOG_EP_DATA, "dropping a malformed packet from %s: %s",
            peer == kNoPeer ? "an unknown peer" : peer_str(peer).c_str(), why);
}

} // namespace pm
