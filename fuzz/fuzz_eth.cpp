// libFuzzer harness: hostile Ethernet frames into a real pmeth endpoint.
//
// The victim is the provider as an application sees it: fi_prov_ini() of the
// pmeth objects linked into this program (libfabric never loads them), then
// getinfo / fabric / domain / endpoint / AV / CQ / MR through the fi_* calls,
// on the in-process loopback wire (FI_PMETH_BACKEND=loopback). The attacker
// is a second EthDevice on the same segment, a genuine peer whose frames pass
// through a tap: the harness makes it send core packets with hostile headers
// (it completes the handshake itself, so the frames carry the right job key,
// epochs, sequence numbers and checksum), mutates its next frame on the way,
// or injects frames of its own with the session fields optionally filled in.
// Progress is fi_cq_read on the victim's CQ.
//
// Input (fuzz_input.hpp reads it; zeros past the end):
//   variant byte (0: RDM, virtual addresses, provider keys; 1: RDM,
//   offsets, FI_SOURCE; 2: DGRAM), then records until the end, each a kind
//   byte and its fields (RDM: the session is open before the first record,
//   the victim having sent the peer an empty message):
//   core    the peer sends one packet: op, flags, reserved, msg_id (or the
//           id of a packet the victim sent), tag, cq_data, msg_len, offset,
//           payload length, payload
//   raw     a frame of the input's bytes, routed to the victim, with the
//           fields a fix-up byte selects taken from the live session
//   mutate  byte flips applied to the peer's next frame (optionally resealed)
//   app     the victim's application: post a receive (tagged, multi-receive,
//           peek / claim / discard, directed), cancel, send, RMA read or
//           write, fetching atomic towards the peer
//   poll    more progress rounds
//
// Oracles: ASan/UBSan, libFuzzer's malloc and RSS limits, and completions
// that claim more bytes than the receive buffer they name (abort).
//
// PM_FUZZ_WRITE_SEEDS=<dir>: writes the seed corpus into <dir> and exits.
// PM_FUZZ_VERBOSE=1: prints every record and completion (to check what an
// input reaches: `PM_FUZZ_VERBOSE=1 fuzz_eth <file>`).
#include <sys/stat.h>
#include <sys/uio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#include "core/packet.hpp"
#include "device.hpp"
#include "eth_device.hpp"
#include "eth_wire.hpp"
#include "fuzz_input.hpp"
#include "wire/wire.hpp"

extern "C" fi_provider* fi_prov_ini(void);

namespace {

using pm::PeerId;
using pm::PktHdr;
using pm::eth::EthDevice;
using pm::eth::EthName;
using pm::eth::Frame;
using pm::eth::FrameHdr;
using pm::eth::Wire;
using pm::fuzz::Reader;
using pm::fuzz::Writer;

constexpr const char* kSegment = "pmfuzz";
constexpr uint32_t kPeerEp = 0x5eed0001;
constexpr uint64_t kPeerHost = 2;
constexpr size_t kMaxFrame = 1514;
constexpr size_t kMrSize = 4096;
constexpr size_t kMaxAppLen = 70000;  // above the rendezvous threshold
constexpr int kSendTries = 64;        // progress rounds a peer send may wait (handshake, window)

[[noreturn]] void die(const char* what, int rc) {
  fprintf(stderr, "fuzz_eth: %s: %d (%s)\n", what, rc, fi_strerror(rc < 0 ? -rc : rc));
  abort();
}

// ---- the attacker's wire: records, mutates and injects ---------------------
// Session fields seen on the wire, for frames the harness forges.
struct SessionView {
  uint8_t victim_mac[6] = {};
  uint8_t peer_mac[6] = {};
  uint32_t victim_ep = 0;
  uint32_t victim_epoch = 0;
  uint32_t peer_epoch = 0;
  uint32_t job = 0;
  uint32_t next_seq = 1;  // after the last DATA the peer sent or we forged
};

struct Mutation {
  uint16_t at[4];
  uint8_t x[4];
  int n = 0;
  bool reseal = false;
};

// Recomputes the checksum of a frame after its bytes were changed (the one
// function to adapt when the frame's integrity check changes).
void seal(std::vector<uint8_t>& f) {
  using namespace pm::eth;
  if (f.size() < kEthHdr + kPmHdr) return;
  uint8_t* hp = f.data() + kEthHdr;
  FrameHdr h = decode_hdr(hp);
  h.csum = 0;
  encode_hdr(hp, h);
  size_t len = std::min<size_t>(h.len, f.size() - kEthHdr - kPmHdr);
  h.csum = frame_sum(hp, hp + kPmHdr, len);
  encode_hdr(hp, h);
}

class TapWire final : public Wire {
 public:
  TapWire(std::unique_ptr<Wire> inner, SessionView* view) : inner_(std::move(inner)), view_(view) {}

  int tx_burst(const Frame* f, int n) noexcept override {
    for (int i = 0; i < n; i++) {
      observe(f[i], true);
      if (recording) recorded.emplace_back(f[i].data, f[i].data + f[i].len);
      if (!mutation.n) {
        inner_->tx_burst(&f[i], 1);
        continue;
      }
      std::vector<uint8_t> c(f[i].data, f[i].data + f[i].len);
      for (int k = 0; k < mutation.n; k++) c[mutation.at[k] % c.size()] ^= mutation.x[k];
      if (mutation.reseal) seal(c);
      mutation.n = 0;
      inject(c);
    }
    return n;
  }
  void tx_flush() noexcept override { inner_->tx_flush(); }
  int rx_burst(Frame* f, int max) noexcept override {
    int n = inner_->rx_burst(f, max);
    for (int i = 0; i < n; i++) observe(f[i], false);
    return n;
  }
  void rx_release() noexcept override { inner_->rx_release(); }
  int fd() const noexcept override { return inner_->fd(); }
  size_t mtu() const noexcept override { return inner_->mtu(); }
  const uint8_t* mac() const noexcept override { return inner_->mac(); }
  const char* kind() const noexcept override { return "fuzz-tap"; }

  void inject(const std::vector<uint8_t>& f) {
    Frame fr{f.data(), f.size()};
    inner_->tx_burst(&fr, 1);
  }

  Mutation mutation;
  bool recording = false;
  std::vector<std::vector<uint8_t>> recorded;

 private:
  void observe(const Frame& f, bool from_peer) {
    using namespace pm::eth;
    if (f.len < kEthHdr + kPmHdr) return;
    FrameHdr h = decode_hdr(f.data + kEthHdr);
    if (from_peer) {
      view_->peer_epoch = h.src_epoch;
      if (h.dst_epoch) view_->victim_epoch = h.dst_epoch;
      if (h.type == kData && seq_le(view_->next_seq, h.seq)) view_->next_seq = h.seq + 1;
    } else if (h.src_epoch) {
      view_->victim_epoch = h.src_epoch;
    }
  }
  std::unique_ptr<Wire> inner_;
  SessionView* view_;
};

// Fills in the fields `fix` selects from the live session, then routes the
// frame to the victim (the loopback wire delivers by MAC and endpoint id).
enum Fix : uint8_t {
  kFixSource = 1 << 0,   // source MAC, EtherType and endpoint id of the peer
  kFixSession = 1 << 1,  // version, job key, both epochs
  kFixSeq = 1 << 2,      // the peer's next sequence number
  kFixLen = 1 << 3,      // payload length = what the frame carries
  kFixSum = 1 << 7,      // checksum, after everything else
  kFixAll = kFixSource | kFixSession | kFixSeq | kFixLen | kFixSum,
};

void forge(std::vector<uint8_t>& f, uint8_t fix, SessionView& v) {
  using namespace pm::eth;
  if (f.size() < kEthHdr + 12) f.resize(kEthHdr + 12, 0);  // up to the destination endpoint id
  memcpy(f.data(), v.victim_mac, 6);
  put32(f.data() + kEthHdr + 8, v.victim_ep);
  if (fix & kFixSource) {
    memcpy(f.data() + 6, v.peer_mac, 6);
    f[12] = uint8_t(kDefaultEtherType >> 8);
    f[13] = uint8_t(kDefaultEtherType);
  }
  if (f.size() < kEthHdr + kPmHdr) return;
  uint8_t* hp = f.data() + kEthHdr;
  FrameHdr h = decode_hdr(hp);
  if (fix & kFixSource) h.src_ep = kPeerEp;
  if (fix & kFixSession) {
    h.version = kWireVersion;
    h.job = v.job;
    h.src_epoch = v.peer_epoch;
    h.dst_epoch = v.victim_epoch;
  }
  if (fix & kFixSeq) h.seq = v.next_seq++;
  if (fix & kFixLen) h.len = uint16_t(f.size() - kEthHdr - kPmHdr);
  encode_hdr(hp, h);
  if (fix & kFixSum) seal(f);
}

// ---- the attacker's device: what the victim sent it -------------------------
class PeerSink final : public pm::PacketSink {
 public:
  bool on_packet(const pm::RxPacket& p) noexcept override {
    if (ids.size() == 16) ids.erase(ids.begin());
    ids.push_back(p.hdr->msg_id);
    return true;
  }
  std::vector<uint64_t> ids;  // msg_ids of the victim's latest packets (replies name them)
};

// ---- the victim: the provider through the fi_* API -------------------------
struct Variant {
  const char* what;
  fi_ep_type type;
  uint64_t caps;
  int mr_mode;
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_mr* mr = nullptr;
  uint64_t key = 0;
  uint64_t mr_addr = 0;  // what a peer names the region's first byte with
  alignas(64) uint8_t mem[kMrSize];
};

constexpr uint64_t kRdmCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_MULTI_RECV | FI_DIRECTED_RECV |
                              FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
Variant g_variants[] = {
    {"rdm", FI_EP_RDM, kRdmCaps, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED},
    {"rdm-source", FI_EP_RDM, kRdmCaps | FI_SOURCE, 0},
    {"dgram", FI_EP_DGRAM, FI_MSG | FI_TAGGED | FI_SEND | FI_RECV, 0},
};
constexpr size_t kVariants = sizeof g_variants / sizeof g_variants[0];
fi_provider* g_prov = nullptr;
bool g_verbose = false;
#define TRACE(...)                      \
  do {                                  \
    if (g_verbose) {                    \
      fprintf(stderr, "fuzz_eth: ");    \
      fprintf(stderr, __VA_ARGS__);     \
      fprintf(stderr, "\n");            \
    }                                   \
  } while (0)

void open_variant(Variant& v) {
  fi_info* hints = fi_allocinfo();
  hints->caps = v.caps;
  hints->ep_attr->type = v.type;
  hints->domain_attr->mr_mode = v.mr_mode;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->av_type = FI_AV_TABLE;
  int rc = g_prov->getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &v.info);
  fi_freeinfo(hints);
  if (rc) die("getinfo", rc);
  if ((rc = g_prov->fabric(v.info->fabric_attr, &v.fabric, nullptr))) die("fabric", rc);
  if ((rc = fi_domain(v.fabric, v.info, &v.domain, nullptr))) die("fi_domain", rc);
  if (v.type != FI_EP_RDM) return;
  if ((rc = fi_mr_reg(v.domain, v.mem, kMrSize, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 7, 0,
                      &v.mr, nullptr)))
    die("fi_mr_reg", rc);
  v.key = fi_mr_key(v.mr);
  v.mr_addr = (v.mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(v.mem) : 0;
}

// A posted receive or a send buffer of the victim, alive until the endpoint closes.
struct AppOp {
  fi_context ctx{};  // first: the completion's op_context points here
  std::vector<uint8_t> buf;
  bool recv = false;
  bool multi = false;
};

struct Session {
  Variant* v = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  SessionView view;
  std::unique_ptr<EthDevice> peer;
  TapWire* tap = nullptr;
  PeerSink sink;
  PeerId to_victim = pm::kNoPeer;
  fi_addr_t peer_addr = FI_ADDR_UNSPEC;
  std::deque<AppOp> ops;
  std::unordered_map<void*, AppOp*> by_ctx;
  uint64_t last_msg_id = 0, last_msg_len = 0, last_tag = 0;
  bool rdm() const { return v->type == FI_EP_RDM; }
};

// A successful receive completion lies inside the buffer of the receive it
// names (a claim names the peek's context: not checked).
void check_completion(Session& s, const fi_cq_tagged_entry& e) {
  auto it = s.by_ctx.find(e.op_context);
  if (it == s.by_ctx.end() || !(e.flags & FI_RECV) || !it->second->recv) return;
  const AppOp& op = *it->second;
  const uint8_t* lo = op.buf.data();
  const uint8_t* hi = lo + op.buf.size();
  const uint8_t* b = static_cast<const uint8_t*>(e.buf);
  bool ok = op.multi ? (!b || (b >= lo && e.len <= size_t(hi - b))) : e.len <= op.buf.size();
  if (!ok) {
    fprintf(stderr, "fuzz_eth: receive completion of %zu bytes at %p outside its %zu-byte buffer %p\n", e.len,
            e.buf, op.buf.size(), static_cast<const void*>(lo));
    abort();
  }
}

void progress(Session& s, int rounds) {
  for (int r = 0; r < rounds; r++) {
    fi_cq_tagged_entry e[16];
    for (int k = 0; k < 8; k++) {
      ssize_t n = fi_cq_read(s.cq, e, 16);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(s.cq, &err, 0);
        TRACE("  error completion flags 0x%llx len %zu err %d olen %zu", (unsigned long long)err.flags, err.len,
              err.err, err.olen);
        continue;
      }
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; i++) {
        TRACE("  completion flags 0x%llx len %zu tag 0x%llx data 0x%llx", (unsigned long long)e[i].flags,
              e[i].len, (unsigned long long)e[i].tag, (unsigned long long)e[i].data);
        check_completion(s, e[i]);
      }
    }
    s.peer->poll(s.sink, 64);
    s.peer->flush();
  }
}

void open_session(Session& s, Variant& v) {
  s.v = &v;
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.size = 1024;
  int rc;
  if ((rc = fi_av_open(v.domain, &av_attr, &s.av, nullptr))) die("fi_av_open", rc);
  if ((rc = fi_cq_open(v.domain, &cq_attr, &s.cq, nullptr))) die("fi_cq_open", rc);
  if ((rc = fi_endpoint(v.domain, v.info, &s.ep, nullptr))) die("fi_endpoint", rc);
  if ((rc = fi_ep_bind(s.ep, &s.av->fid, 0))) die("fi_ep_bind av", rc);
  if ((rc = fi_ep_bind(s.ep, &s.cq->fid, FI_TRANSMIT | FI_RECV))) die("fi_ep_bind cq", rc);
  if ((rc = fi_enable(s.ep))) die("fi_enable", rc);
  uint8_t name[pm::eth::kNameLen];
  size_t len = sizeof name;
  EthName me;
  if ((rc = fi_getname(&s.ep->fid, name, &len)) || !pm::eth::decode_name(name, len, &me)) die("fi_getname", rc);
  s.view.victim_ep = me.ep_id;
  memcpy(s.view.victim_mac, me.mac[0], 6);

  pm::eth::WireConfig wc{kSegment, pm::eth::kDefaultEtherType, kPeerEp, 0, 0};
  std::string why;
  std::unique_ptr<Wire> inner = pm::eth::open_loop_wire(wc, &rc, &why);
  if (!inner) die("open_loop_wire", rc);
  memcpy(s.view.peer_mac, inner->mac(), 6);
  auto tap = std::make_unique<TapWire>(std::move(inner), &s.view);
  s.tap = tap.get();
  pm::eth::DeviceConfig dc;
  dc.host = kPeerHost;
  dc.reliable = v.type == FI_EP_RDM;
  dc.delayed_ack_us = 0;
  dc.rto_init_us = dc.rto_min_us = dc.rto_max_us = 1000000;  // no retransmission inside one input
  dc.retries = 2;
  s.view.job = dc.job;
  s.peer = EthDevice::open(dc, std::move(tap), kPeerEp);
  if (!s.peer) die("EthDevice::open", 0);
  s.to_victim = s.peer->resolve(name, len);
  if (s.to_victim == pm::kNoPeer) die("resolve", 0);
  if (fi_av_insert(s.av, s.peer->name(), 1, &s.peer_addr, 0, nullptr) != 1) die("fi_av_insert", 0);
  if (v.type != FI_EP_RDM) return;
  // The session: the victim sends the peer an empty message, which starts
  // the handshake (HELLO, HELLO_ACK); every record then finds it open and
  // the harness knows both epochs.
  if ((rc = int(fi_send(s.ep, nullptr, 0, nullptr, s.peer_addr, nullptr)))) die("fi_send", rc);
  for (int i = 0; i < kSendTries && s.sink.ids.empty(); i++) progress(s, 1);
  if (s.sink.ids.empty() || !s.view.victim_epoch || !s.view.peer_epoch) die("handshake", 0);
}

void close_session(Session& s) {
  progress(s, 4);  // the peer acknowledges what the victim sent: its close does not wait
  int rc;
  if ((rc = fi_close(&s.ep->fid))) die("fi_close ep", rc);
  if ((rc = fi_close(&s.av->fid))) die("fi_close av", rc);
  if ((rc = fi_close(&s.cq->fid))) die("fi_close cq", rc);
  s.peer.reset();
}

// ---- records ----------------------------------------------------------------
enum RecordKind : uint8_t { kRecCore, kRecRaw, kRecMutate, kRecApp, kRecPoll, kRecKinds };

int peer_send(Session& s, const PktHdr& h, const std::vector<uint8_t>& payload) {
  iovec iov{const_cast<uint8_t*>(payload.data()), payload.size()};
  for (int i = 0; i < kSendTries; i++) {
    int rc = s.peer->send(s.to_victim, h, &iov, 1, 0, payload.size());
    s.peer->flush();
    if (rc != -FI_EAGAIN) return rc;
    progress(s, 1);
  }
  return -FI_EAGAIN;
}

void core_record(Session& s, Reader& in) {
  PktHdr h{};
  h.op = in.u8() % 16;  // 1..11 are ops; the rest must be dropped
  h.flags = in.u8();
  h.reserved = in.u16();
  bool target = h.op == pm::kPktWrite || h.op == pm::kPktRead || h.op == pm::kPktAtomic;
  uint8_t id = in.u8();
  if ((id & 0x80) && !s.sink.ids.empty()) h.msg_id = s.sink.ids[(id & 0x7f) % s.sink.ids.size()];
  else h.msg_id = in.value(s.last_msg_id);
  h.tag = in.value(target ? s.v->key : s.last_tag);
  h.cq_data = in.u8();
  h.msg_len = in.value(s.last_msg_len);
  h.offset = in.value(target ? s.v->mr_addr : s.last_msg_len);
  size_t plen = in.u16() % (s.peer->max_payload() + 1);
  h.seg_len = uint32_t(plen);
  std::vector<uint8_t> payload = in.blob(plen);
  int rc = peer_send(s, h, payload);
  TRACE("core op %u flags 0x%x msg_id 0x%llx tag 0x%llx msg_len 0x%llx offset 0x%llx plen %zu: %d", h.op, h.flags,
        (unsigned long long)h.msg_id, (unsigned long long)h.tag, (unsigned long long)h.msg_len,
        (unsigned long long)h.offset, plen, rc);
  s.last_msg_id = h.msg_id;
  s.last_msg_len = h.msg_len;
}

void raw_record(Session& s, Reader& in) {
  uint8_t fix = in.u8();
  std::vector<uint8_t> f = in.blob(in.u16() % (kMaxFrame + 1));
  forge(f, fix, s.view);
  TRACE("raw frame of %zu bytes, fix 0x%x", f.size(), fix);
  s.tap->inject(f);
}

void mutate_record(Session& s, Reader& in) {
  Mutation& m = s.tap->mutation;
  uint8_t b = in.u8();
  m.n = 1 + b % 4;
  m.reseal = b & 0x80;
  for (int k = 0; k < m.n; k++) {
    m.at[k] = in.u16();
    m.x[k] = in.u8() | 1;
  }
}

enum AppAction : uint8_t {
  kAppRecv,       // fi_recvmsg / fi_trecvmsg, flags from the input
  kAppSend,       // fi_sendmsg / fi_tsendmsg to the peer
  kAppRead,       // fi_read from the peer
  kAppWrite,      // fi_write to the peer
  kAppAtomic,     // fi_fetch_atomic (u64 sum) on the peer
  kAppCancel,     // fi_cancel of an earlier operation
  kAppActions,
};

AppOp& new_op(Session& s, size_t len, bool recv) {
  AppOp& op = s.ops.emplace_back();
  op.buf.assign(len, 0xa5);
  op.recv = recv;
  s.by_ctx[&op.ctx] = &op;
  return op;
}

void app_record(Session& s, Reader& in) {
  uint8_t a = in.u8() % kAppActions;
  uint8_t fl = in.u8();
  size_t len = size_t(in.value(0) % (kMaxAppLen + 1));
  uint64_t tag = in.value(s.last_tag);
  bool tagged = fl & 1;
  bool directed = fl & 2;
  ssize_t rc = 0;
  switch (a) {
  case kAppRecv: {
    uint64_t flags = ((fl & 4) ? FI_MULTI_RECV : 0) | ((fl & 8) ? FI_PEEK : 0) | ((fl & 16) ? FI_CLAIM : 0) |
                     ((fl & 32) ? FI_DISCARD : 0) | ((fl & 64) ? FI_COMPLETION : 0);
    // A peek reports the message's length, not what a buffer took: not checked.
    AppOp* op = &new_op(s, len, !(flags & FI_PEEK));
    op->multi = flags & FI_MULTI_RECV;
    void* ctx = &op->ctx;
    if ((flags & FI_CLAIM) && !(flags & FI_PEEK) && s.ops.size() > 1)
      ctx = &s.ops[in.u8() % (s.ops.size() - 1)].ctx;  // claims name the context of a peek
    iovec iov{op->buf.data(), op->buf.size()};
    fi_addr_t src = directed ? s.peer_addr : FI_ADDR_UNSPEC;
    if (tagged) {
      fi_msg_tagged m{&iov, nullptr, 1, src, tag, in.value(0), ctx, 0};
      rc = fi_trecvmsg(s.ep, &m, flags);
    } else {
      fi_msg m{&iov, nullptr, 1, src, ctx, 0};
      if (op->multi) {
        size_t min = in.u16();
        fi_setopt(&s.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min);
      }
      rc = fi_recvmsg(s.ep, &m, flags);
    }
    s.last_tag = tag;
    break;
  }
  case kAppSend: {
    AppOp& op = new_op(s, len, false);
    iovec iov{op.buf.data(), op.buf.size()};
    uint64_t flags = (fl & 4) ? FI_REMOTE_CQ_DATA : 0;
    if (tagged) {
      fi_msg_tagged m{&iov, nullptr, 1, s.peer_addr, tag, 0, &op.ctx, 0x42};
      rc = fi_tsendmsg(s.ep, &m, flags);
    } else {
      fi_msg m{&iov, nullptr, 1, s.peer_addr, &op.ctx, 0x42};
      rc = fi_sendmsg(s.ep, &m, flags);
    }
    break;
  }
  case kAppRead:
  case kAppWrite: {
    AppOp& op = new_op(s, len, false);
    uint64_t addr = in.value(0), key = in.value(0);
    if (a == kAppRead) rc = fi_read(s.ep, op.buf.data(), len, nullptr, s.peer_addr, addr, key, &op.ctx);
    else rc = fi_write(s.ep, op.buf.data(), len, nullptr, s.peer_addr, addr, key, &op.ctx);
    break;
  }
  case kAppAtomic: {
    size_t count = 1 + len % 4;
    AppOp& op = new_op(s, 2 * count * sizeof(uint64_t), false);
    uint64_t addr = in.value(0), key = in.value(0);
    rc = fi_fetch_atomic(s.ep, op.buf.data(), count, nullptr, op.buf.data() + count * sizeof(uint64_t), nullptr,
                    s.peer_addr, addr, key, FI_UINT64, FI_SUM, &op.ctx);
    break;
  }
  default:
    if (!s.ops.empty()) rc = fi_cancel(&s.ep->fid, &s.ops[len % s.ops.size()].ctx);
    break;
  }
  TRACE("app action %u flags 0x%x len %zu tag 0x%llx: %zd", a, fl, len, (unsigned long long)tag, rc);
}

void run_input(Variant& v, Reader& in) {
  Session s;
  open_session(s, v);
  while (!in.empty()) {
    switch (in.u8() % kRecKinds) {
    case kRecCore: core_record(s, in); break;
    case kRecRaw: raw_record(s, in); break;
    case kRecMutate: mutate_record(s, in); break;
    case kRecApp: app_record(s, in); break;
    default: progress(s, 1 + in.u8() % 8); break;
    }
    progress(s, 1);
  }
  close_session(s);
}

// ---- seed corpus ------------------------------------------------------------
// Genuine conversations in the input format: what a well-behaved peer sends
// for each protocol path, so that mutations start from deep states.
struct Seed {
  std::string name;
  Writer w;
};

Writer& core(Writer& w, uint8_t op, uint8_t flags, uint64_t msg_id, uint64_t tag, uint64_t msg_len,
             uint64_t offset, uint16_t plen) {
  w.u8(kRecCore).u8(op).u8(flags).u16(0).u8(0).value(msg_id).value(tag).u8(0).value(msg_len).value(offset);
  std::vector<uint8_t> pat(std::min<size_t>(plen, 16));
  for (size_t i = 0; i < pat.size(); i++) pat[i] = uint8_t(0x30 + i);
  return w.u16(plen).blob(pat);
}
// A reply to the victim's latest packet (`back` packets ago).
Writer& reply(Writer& w, uint8_t op, uint8_t flags, uint8_t back, uint64_t tag, uint64_t msg_len, uint64_t offset,
              uint16_t plen) {
  w.u8(kRecCore).u8(op).u8(flags).u16(0).u8(uint8_t(0x80 | back)).value(tag).u8(0).value(msg_len).value(offset);
  return w.u16(plen).blob(std::vector<uint8_t>(std::min<size_t>(plen, 8), 0x5a));
}
// Target-side RMA: tag = the registered key (reference + 0), offset = the
// region's address (reference + off).
Writer& rma(Writer& w, uint8_t op, uint8_t flags, uint16_t reserved, uint64_t msg_len, uint8_t off, uint16_t plen,
            const std::vector<uint8_t>& payload) {
  w.u8(kRecCore).u8(op).u8(flags).u16(reserved).u8(0).value(1).ref_plus(0).u8(0).value(msg_len).ref_plus(off);
  return w.u16(plen).blob(payload);
}
Writer& app(Writer& w, uint8_t action, uint8_t flags, uint64_t len, uint64_t tag) {
  return w.u8(kRecApp).u8(action).u8(flags).value(len).value(tag);
}
Writer& poll(Writer& w, uint8_t rounds) { return w.u8(kRecPoll).u8(rounds); }

std::vector<Seed> seeds() {
  using namespace pm;
  std::vector<Seed> out;
  auto add = [&](const char* name, uint8_t variant) -> Writer& {
    out.push_back(Seed{name, Writer()});
    return out.back().w.u8(variant);
  };
  const uint16_t kSeg = 1404;  // max payload on the 1500-byte loopback wire
  {
    Writer& w = add("eager_unexpected_then_trecv", 0);
    core(w, kPktEager, kPktTagged, 1, 0x77, 100, 0, 100);
    app(w, kAppRecv, 1, 4096, 0x77).value(0);
  }
  {
    Writer& w = add("trecv_then_eager_cqdata", 0);
    app(w, kAppRecv, 1, 4096, 0x77).value(0);
    core(w, kPktEager, kPktTagged | kPktCqData, 2, 0x77, 64, 0, 64);
  }
  {
    Writer& w = add("segmented_unexpected", 0);
    core(w, kPktEager, 0, 3, 0, 3000, 0, kSeg);
    core(w, kPktData, 0, 3, 0, 3000, kSeg, kSeg);
    core(w, kPktData, 0, 3, 0, 3000, 2 * kSeg, 3000 - 2 * kSeg);
    app(w, kAppRecv, 0, 4096, 0);
  }
  {
    // Segments at the edges: one ending exactly at msg_len, one starting
    // there (offset = the reference, msg_len, plus 0: dropped), the rest.
    Writer& w = add("segmented_unexpected_edges", 0);
    core(w, kPktEager, 0, 8, 0, 3000, 0, 1000);
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).u8(pm::fuzz::kValRefMinus)
        .u8(200).u16(200).blob({1, 2, 3});
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).ref_plus(0).u16(300).blob(
        {4, 5, 6});
    core(w, kPktData, 0, 8, 0, 3000, 1000, kSeg);
    core(w, kPktData, 0, 8, 0, 3000, 1000 + kSeg, 1800 - kSeg);
    app(w, kAppRecv, 0, 4096, 0);
  }
  // Boundary values a peer may put in 64-bit fields: 2^64 - 1 as an offset
  // or a length, with nothing to copy (so each is dropped or refused).
  {
    Writer& w = add("data_offset_top_empty", 0);
    core(w, kPktEager, 0, 9, 0, 3000, 0, 1000);
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).u8(pm::fuzz::kValTop)
        .u8(0).u16(0).blob({});
  }
  {
    Writer& w = add("posted_data_offset_top_empty", 0);
    app(w, kAppRecv, 0, 4096, 0);
    core(w, kPktEager, 0, 9, 0, 3000, 0, 1000);
    w.u8(kRecCore).u8(kPktData).u8(0).u16(0).u8(0).ref_plus(0).value(0).u8(0).value(3000).u8(pm::fuzz::kValTop)
        .u8(0).u16(0).blob({});
  }
  {
    Writer& w = add("rma_addr_top", 0);
    std::vector<uint8_t> p(8, 0);
    w.u8(kRecCore).u8(kPktWrite).u8(0).u16(0).u8(0).value(1).ref_plus(0).u8(0).value(0).u8(pm::fuzz::kValTop).u8(0)
        .u16(8).blob(p);
    w.u8(kRecCore).u8(kPktRead).u8(0).u16(0).u8(0).value(2).ref_plus(0).u8(0).u8(pm::fuzz::kValTop).u8(0)
        .ref_plus(0).u16(0).blob({});
  }
  {
    Writer& w = add("rma_write_segment_offset_top", 0);
    std::vector<uint8_t> p(8, 0xff);
    rma(w, kPktWrite, 0, 0, 64, 0, 8, p);
  }
  {
    Writer& w = add("segmented_posted", 0);
    app(w, kAppRecv, 0, 4096, 0);
    core(w, kPktEager, 0, 4, 0, 3000, 0, kSeg);
    core(w, kPktData, 0, 4, 0, 3000, kSeg, kSeg);
    core(w, kPktData, 0, 4, 0, 3000, 2 * kSeg, 3000 - 2 * kSeg);
  }
  {
    Writer& w = add("segmented_truncated", 0);
    app(w, kAppRecv, 0, 1000, 0);
    core(w, kPktEager, 0, 5, 0, 2000, 0, kSeg);
    core(w, kPktData, 0, 5, 0, 2000, kSeg, 2000 - kSeg);
  }
  {
    Writer& w = add("rts_posted", 0);
    app(w, kAppRecv, 1, 70000, 9).value(0);
    core(w, kPktRts, kPktTagged, 6, 9, 70000, 0, 0);
    core(w, kPktData, kPktTagged, 6, 9, 70000, 0, kSeg);
    core(w, kPktData, kPktTagged, 6, 9, 70000, kSeg, kSeg);
  }
  {
    Writer& w = add("rts_unexpected_then_trecv", 0);
    core(w, kPktRts, kPktTagged, 7, 9, 20000, 0, 0);
    app(w, kAppRecv, 1, 20000, 9).value(0);
    core(w, kPktData, kPktTagged, 7, 9, 20000, 0, kSeg);
  }
  {
    Writer& w = add("multi_recv", 0);
    app(w, kAppRecv, 4, 8192, 0).u16(1024);
    for (uint64_t i = 0; i < 4; i++) core(w, kPktEager, 0, 10 + i, 0, 700, 0, 700);
    core(w, kPktEager, 0, 20, 0, 2000, 0, kSeg);
    core(w, kPktData, 0, 20, 0, 2000, kSeg, 2000 - kSeg);
  }
  {
    Writer& w = add("peek_claim", 0);
    core(w, kPktEager, kPktTagged, 30, 5, 40, 0, 40);
    app(w, kAppRecv, 1 | 8 | 16, 64, 5).value(0);   // peek + claim
    app(w, kAppRecv, 1 | 16, 64, 5).value(0).u8(0); // claim it
  }
  {
    Writer& w = add("peek_discard_partial", 0);
    core(w, kPktEager, kPktTagged, 31, 5, 3000, 0, kSeg);
    app(w, kAppRecv, 1 | 8 | 32, 64, 5).value(0);
    core(w, kPktData, kPktTagged, 31, 5, 3000, kSeg, kSeg);
    core(w, kPktData, kPktTagged, 31, 5, 3000, 2 * kSeg, 3000 - 2 * kSeg);
  }
  {
    Writer& w = add("cancel_recv", 0);
    app(w, kAppRecv, 1, 100, 3).value(0);
    app(w, kAppCancel, 0, 0, 0);
    core(w, kPktEager, kPktTagged, 32, 3, 10, 0, 10);
  }
  {
    Writer& w = add("rma_write", 0);
    std::vector<uint8_t> p(8 + 64, 0x11);
    memset(p.data(), 0, 8);
    rma(w, kPktWrite, kPktCqData, 0, 64, 16, 72, p);
  }
  {
    Writer& w = add("rma_write_segmented", 0);
    std::vector<uint8_t> p(8 + 100, 0x22);
    memset(p.data(), 0, 8);
    rma(w, kPktWrite, 0, 0, 200, 0, 108, p);
    p[0] = 100;
    rma(w, kPktWrite, 0, 0, 200, 0, 108, p);
  }
  {
    Writer& w = add("rma_read", 0);
    rma(w, kPktRead, 0, 0, 3000, 8, 0, {});
    poll(w, 8);
  }
  {
    Writer& w = add("atomic_fetch_sum", 0);
    std::vector<uint8_t> p(16, 1);
    rma(w, kPktAtomic, kPktFetch, uint16_t(FI_SUM | (FI_UINT64 << 8)), 2, 64, 16, p);
  }
  {
    Writer& w = add("atomic_cswap", 0);
    std::vector<uint8_t> p(16, 0);
    rma(w, kPktAtomic, kPktFetch | kPktCompare, uint16_t(FI_CSWAP | (FI_UINT64 << 8)), 1, 128, 16, p);
  }
  {
    Writer& w = add("rma_offset_mode", 1);
    std::vector<uint8_t> p(8 + 32, 0x33);
    memset(p.data(), 0, 8);
    rma(w, kPktWrite, 0, 0, 32, 100, 40, p);
    rma(w, kPktRead, 0, 0, 32, 100, 0, {});
  }
  {
    Writer& w = add("source_directed", 1);
    app(w, kAppRecv, 1 | 2, 256, 4).value(0);
    core(w, kPktEager, kPktTagged, 40, 4, 200, 0, 200);
  }
  {
    Writer& w = add("send_eager_to_peer", 0);
    app(w, kAppSend, 1, 100, 8);
    poll(w, 4);
  }
  {
    Writer& w = add("send_rndv_cts_ack", 0);
    app(w, kAppSend, 1, 40000, 8);
    poll(w, 2);
    reply(w, kPktCts, 0, 0, 0, 40000, 0, 0);  // CTS for the RTS
    poll(w, 8);
  }
  {
    Writer& w = add("send_rndv_fin", 0);
    app(w, kAppSend, 0, 30000, 0);
    poll(w, 2);
    reply(w, kPktFin, 0, 0, 0, 0, 0, 0);
  }
  {
    Writer& w = add("read_from_peer", 0);
    app(w, kAppRead, 0, 100, 0).value(0x1000).value(5);
    poll(w, 2);
    reply(w, kPktReadResp, 0, 0, 0, 100, 0, 100);
  }
  {
    Writer& w = add("write_to_peer_ack", 0);
    app(w, kAppWrite, 0, 100, 0).value(0x1000).value(5);
    poll(w, 2);
    reply(w, kPktRmaAck, 0, 0, 0, 0, 0, 0);
  }
  {
    Writer& w = add("atomic_to_peer_resp", 0);
    app(w, kAppAtomic, 0, 1, 0).value(0x1000).value(5);
    poll(w, 2);
    reply(w, kPktAtomicResp, 0, 0, 0, 16, 0, 16);
  }
  {
    Writer& w = add("dgram_eager", 2);
    app(w, kAppRecv, 1, 2048, 6).value(0);
    core(w, kPktEager, kPktTagged, 50, 6, 500, 0, 500);
    core(w, kPktEager, 0, 51, 0, 10, 0, 10);
  }
  {
    Writer& w = add("mutated_frame", 0);
    core(w, kPktEager, 0, 60, 0, 10, 0, 10);
    w.u8(kRecMutate).u8(0x80).u16(14 + 48 + 32).u8(0x01);  // flip msg_len, reseal
    core(w, kPktEager, 0, 61, 0, 10, 0, 10);
  }
  return out;
}

// The frames of a genuine exchange, replayed as raw records (the harness
// fills in the session fields on replay).
Seed recorded_seed(Variant& v) {
  Seed seed{"raw_recorded_segmented", Writer()};
  Session s;
  open_session(s, v);
  s.tap->recording = true;
  Writer tmp;
  tmp.u8(0);
  core(tmp, pm::kPktEager, pm::kPktTagged, 70, 0x99, 2500, 0, 1404);
  core(tmp, pm::kPktData, pm::kPktTagged, 70, 0x99, 2500, 1404, 2500 - 1404);
  Reader in(tmp.out.data() + 1, tmp.out.size() - 1);
  while (!in.empty()) {
    in.u8();
    core_record(s, in);
  }
  progress(s, 2);
  s.tap->recording = false;
  seed.w.u8(0);
  for (const auto& f : s.tap->recorded) {
    FrameHdr h = pm::eth::decode_hdr(f.data() + pm::eth::kEthHdr);
    if (h.type != pm::eth::kData) continue;  // the handshake is the harness's
    seed.w.u8(kRecRaw).u8(kFixAll).u16(uint16_t(f.size())).blob(f);
  }
  app(seed.w, kAppRecv, 1, 4096, 0x99).value(0);
  close_session(s);
  return seed;
}

void write_seeds(const char* dir) {
  mkdir(dir, 0755);
  std::vector<Seed> all = seeds();
  all.push_back(recorded_seed(g_variants[0]));
  for (const Seed& s : all) {
    std::string path = std::string(dir) + "/" + s.name;
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(s.w.out.data(), 1, s.w.out.size(), f) != s.w.out.size() || fclose(f) != 0) {
      fprintf(stderr, "fuzz_eth: cannot write %s\n", path.c_str());
      exit(1);
    }
  }
  fprintf(stderr, "fuzz_eth: %zu seeds written to %s\n", all.size(), dir);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("FI_PMETH_BACKEND", "loopback", 1);
  setenv("FI_PMETH_IFACE", kSegment, 1);
  setenv("FI_PMETH_SHM", "0", 1);               // Ethernet only: the composite has its own harness
  setenv("FI_PMETH_PROGRESS_THREAD", "0", 1);   // progress only in fi_cq_read: deterministic
  setenv("FI_PMETH_HOST_ID", "1", 1);
  setenv("FI_PMETH_RETRIES", "2", 1);
  setenv("FI_PMETH_RTO_INIT_US", "1000000", 1);
  setenv("FI_PROVIDER_PATH", "/nonexistent", 1);  // libfabric loads no external provider
  // libfabric's parameter table exists once it initialised; nothing matches.
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("pmfuzz-none");
  fi_info* none = nullptr;
  if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &none) == 0) fi_freeinfo(none);
  fi_freeinfo(hints);
  g_verbose = getenv("PM_FUZZ_VERBOSE") != nullptr;
  g_prov = fi_prov_ini();
  for (Variant& v : g_variants) open_variant(v);
  if (const char* dir = getenv("PM_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  run_input(g_variants[in.u8() % kVariants], in);
  return 0;
}
