// What both harnesses share: the victim (a provider linked into the program,
// opened through its fi_prov_ini() and the fi_* calls, as an application
// does), the application's side of an input (receives, sends, RMA, cancel),
// the core packets a peer sends, and the seed conversations built from them.
// Each harness adds its peer (a device of the same kind), how raw bytes
// reach the victim, and progress.
#pragma once

#include <sys/uio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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
#include "fuzz_input.hpp"

namespace pm::fuzz {

// The harness's name in messages; PM_FUZZ_VERBOSE=1 traces every record.
inline const char* g_name = "fuzz";
inline bool g_verbose = false;

#define PM_FUZZ_TRACE(...)                          \
  do {                                              \
    if (::pm::fuzz::g_verbose) {                    \
      fprintf(stderr, "%s: ", ::pm::fuzz::g_name);  \
      fprintf(stderr, __VA_ARGS__);                 \
      fprintf(stderr, "\n");                        \
    }                                               \
  } while (0)

[[noreturn]] inline void die(const char* what, int rc) {
  fprintf(stderr, "%s: %s: %d (%s)\n", g_name, what, rc, fi_strerror(rc < 0 ? -rc : rc));
  abort();
}

// Record kinds of an input (after its variant byte). kRecRaw and kRecMutate
// mean what the harness's medium allows (frames, queue cells).
enum RecordKind : uint8_t { kRecCore, kRecRaw, kRecMutate, kRecApp, kRecPoll, kRecKinds };
enum AppAction : uint8_t {
  kAppRecv,    // fi_recvmsg / fi_trecvmsg, flags from the input
  kAppSend,    // fi_sendmsg / fi_tsendmsg to the peer
  kAppRead,    // fi_read from the peer
  kAppWrite,   // fi_write to the peer
  kAppAtomic,  // fi_fetch_atomic (u64 sum) on the peer
  kAppCancel,  // fi_cancel of an earlier operation
  kAppActions,
};
constexpr size_t kMrSize = 4096;
constexpr size_t kMaxAppLen = 70000;  // above the rendezvous threshold

// One way to open the provider: endpoint type, capabilities, MR mode; a
// fabric, a domain and a registered region that live for the whole run.
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

constexpr uint64_t kRdmCaps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_READ |
                              FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV;

// libfabric's parameter table exists once libfabric initialised: a getinfo
// that matches nothing, with no external provider to load.
inline void init_libfabric() {
  setenv("FI_PROVIDER_PATH", "/nonexistent", 1);
  fi_info* hints = fi_allocinfo();
  hints->fabric_attr->prov_name = strdup("pmfuzz-none");
  fi_info* none = nullptr;
  if (fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &none) == 0) fi_freeinfo(none);
  fi_freeinfo(hints);
  g_verbose = getenv("PM_FUZZ_VERBOSE") != nullptr;
}

inline void open_variant(fi_provider* prov, Variant& v) {
  fi_info* hints = fi_allocinfo();
  hints->caps = v.caps;
  hints->ep_attr->type = v.type;
  hints->domain_attr->mr_mode = v.mr_mode;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->av_type = FI_AV_TABLE;
  int rc = prov->getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &v.info);
  fi_freeinfo(hints);
  if (rc) die("getinfo", rc);
  if ((rc = prov->fabric(v.info->fabric_attr, &v.fabric, nullptr))) die("fabric", rc);
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

// The victim endpoint of one input, with its AV (holding the peer) and CQ.
class Victim {
 public:
  void open(Variant& v, std::vector<uint8_t>* name) {
    v_ = &v;
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = 1024;
    int rc;
    if ((rc = fi_av_open(v.domain, &av_attr, &av_, nullptr))) die("fi_av_open", rc);
    if ((rc = fi_cq_open(v.domain, &cq_attr, &cq_, nullptr))) die("fi_cq_open", rc);
    if ((rc = fi_endpoint(v.domain, v.info, &ep_, nullptr))) die("fi_endpoint", rc);
    if ((rc = fi_ep_bind(ep_, &av_->fid, 0))) die("fi_ep_bind av", rc);
    if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV))) die("fi_ep_bind cq", rc);
    if ((rc = fi_enable(ep_))) die("fi_enable", rc);
    name->resize(FI_NAME_MAX);
    size_t len = name->size();
    if ((rc = fi_getname(&ep_->fid, name->data(), &len))) die("fi_getname", rc);
    name->resize(len);
  }
  void insert_peer(const void* name) {
    if (fi_av_insert(av_, name, 1, &peer_addr_, 0, nullptr) != 1) die("fi_av_insert", 0);
  }
  void close() {
    int rc;
    if ((rc = fi_close(&ep_->fid))) die("fi_close ep", rc);
    if ((rc = fi_close(&av_->fid))) die("fi_close av", rc);
    if ((rc = fi_close(&cq_->fid))) die("fi_close cq", rc);
  }
  fid_ep* ep() const { return ep_; }
  fi_addr_t peer_addr() const { return peer_addr_; }
  const Variant& variant() const { return *v_; }
  uint64_t last_tag() const { return last_tag_; }

  // fi_cq_read (which runs the provider's progress) until it is empty or
  // after 8 batches; checks every completion.
  void drain() {
    fi_cq_tagged_entry e[16];
    for (int k = 0; k < 8; k++) {
      ssize_t n = fi_cq_read(cq_, e, 16);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(cq_, &err, 0);
        PM_FUZZ_TRACE("  error completion flags 0x%llx len %zu err %d olen %zu", (unsigned long long)err.flags,
                      err.len, err.err, err.olen);
        continue;
      }
      if (n <= 0) break;
      for (ssize_t i = 0; i < n; i++) {
        PM_FUZZ_TRACE("  completion flags 0x%llx len %zu tag 0x%llx data 0x%llx", (unsigned long long)e[i].flags,
                      e[i].len, (unsigned long long)e[i].tag, (unsigned long long)e[i].data);
        check(e[i]);
      }
    }
  }

  // One application action: kind, flags, length, tag, then what the kind needs.
  void app_record(Reader& in) {
    uint8_t a = in.u8() % kAppActions;
    uint8_t fl = in.u8();
    size_t len = size_t(in.value(0) % (kMaxAppLen + 1));
    uint64_t tag = in.value(last_tag_);
    bool tagged = fl & 1;
    bool directed = fl & 2;
    ssize_t rc = 0;
    switch (a) {
    case kAppRecv: {
      uint64_t flags = ((fl & 4) ? FI_MULTI_RECV : 0) | ((fl & 8) ? FI_PEEK : 0) | ((fl & 16) ? FI_CLAIM : 0) |
                       ((fl & 32) ? FI_DISCARD : 0) | ((fl & 64) ? FI_COMPLETION : 0);
      // A peek reports the message's length, not what a buffer took: not checked.
      AppOp* op = &new_op(len, !(flags & FI_PEEK));
      op->multi = flags & FI_MULTI_RECV;
      void* ctx = &op->ctx;
      if ((flags & FI_CLAIM) && !(flags & FI_PEEK) && ops_.size() > 1)
        ctx = &ops_[in.u8() % (ops_.size() - 1)].ctx;  // claims name the context of a peek
      iovec iov{op->buf.data(), op->buf.size()};
      fi_addr_t src = directed ? peer_addr_ : FI_ADDR_UNSPEC;
      if (tagged) {
        fi_msg_tagged m{&iov, nullptr, 1, src, tag, in.value(0), ctx, 0};
        rc = fi_trecvmsg(ep_, &m, flags);
      } else {
        fi_msg m{&iov, nullptr, 1, src, ctx, 0};
        if (op->multi) {
          size_t min = in.u16();
          fi_setopt(&ep_->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min);
        }
        rc = fi_recvmsg(ep_, &m, flags);
      }
      last_tag_ = tag;
      break;
    }
    case kAppSend: {
      AppOp& op = new_op(len, false);
      iovec iov{op.buf.data(), op.buf.size()};
      uint64_t flags = (fl & 4) ? FI_REMOTE_CQ_DATA : 0;
      if (tagged) {
        fi_msg_tagged m{&iov, nullptr, 1, peer_addr_, tag, 0, &op.ctx, 0x42};
        rc = fi_tsendmsg(ep_, &m, flags);
      } else {
        fi_msg m{&iov, nullptr, 1, peer_addr_, &op.ctx, 0x42};
        rc = fi_sendmsg(ep_, &m, flags);
      }
      break;
    }
    case kAppRead:
    case kAppWrite: {
      AppOp& op = new_op(len, false);
      uint64_t addr = in.value(0), key = in.value(0);
      if (a == kAppRead) rc = fi_read(ep_, op.buf.data(), len, nullptr, peer_addr_, addr, key, &op.ctx);
      else rc = fi_write(ep_, op.buf.data(), len, nullptr, peer_addr_, addr, key, &op.ctx);
      break;
    }
    case kAppAtomic: {
      size_t count = 1 + len % 4;
      AppOp& op = new_op(2 * count * sizeof(uint64_t), false);
      uint64_t addr = in.value(0), key = in.value(0);
      rc = fi_fetch_atomic(ep_, op.buf.data(), count, nullptr, op.buf.data() + count * sizeof(uint64_t), nullptr,
                           peer_addr_, addr, key, FI_UINT64, FI_SUM, &op.ctx);
      break;
    }
    default:
      if (!ops_.empty()) rc = fi_cancel(&ep_->fid, &ops_[len % ops_.size()].ctx);
      break;
    }
    PM_FUZZ_TRACE("app action %u flags 0x%x len %zu tag 0x%llx: %zd", a, fl, len, (unsigned long long)tag, rc);
  }

 private:
  AppOp& new_op(size_t len, bool recv) {
    AppOp& op = ops_.emplace_back();
    op.buf.assign(len, 0xa5);
    op.recv = recv;
    by_ctx_[&op.ctx] = &op;
    return op;
  }
  // A successful receive completion lies inside the buffer of the receive it
  // names (a claim names the peek's context: not checked).
  void check(const fi_cq_tagged_entry& e) {
    auto it = by_ctx_.find(e.op_context);
    if (it == by_ctx_.end() || !(e.flags & FI_RECV) || !it->second->recv) return;
    const AppOp& op = *it->second;
    const uint8_t* lo = op.buf.data();
    const uint8_t* hi = lo + op.buf.size();
    const uint8_t* b = static_cast<const uint8_t*>(e.buf);
    bool ok = op.multi ? (!b || (b >= lo && e.len <= size_t(hi - b))) : e.len <= op.buf.size();
    if (!ok) {
      fprintf(stderr, "%s: receive completion of %zu bytes at %p outside its %zu-byte buffer %p\n", g_name, e.len,
              e.buf, op.buf.size(), static_cast<const void*>(lo));
      abort();
    }
  }

  Variant* v_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  fi_addr_t peer_addr_ = FI_ADDR_UNSPEC;
  std::deque<AppOp> ops_;
  std::unordered_map<void*, AppOp*> by_ctx_;
  uint64_t last_tag_ = 0;
};

// The core packet of a kRecCore record, its 64-bit fields relative to the
// conversation so far (see Reader::value); `ids` are the msg_ids of the
// victim's latest packets, which a reply names.
struct CoreRefs {
  uint64_t last_msg_id = 0, last_msg_len = 0;
  std::vector<uint64_t> ids;
  void saw(uint64_t victim_msg_id) {
    if (ids.size() == 16) ids.erase(ids.begin());
    ids.push_back(victim_msg_id);
  }
};

inline PktHdr read_core(Reader& in, CoreRefs& r, const Victim& v, size_t max_payload, std::vector<uint8_t>* payload) {
  PktHdr h{};
  h.op = in.u8() % 16;  // 1..11 are ops; the rest must be dropped
  h.flags = in.u8();
  h.reserved = in.u16();
  bool target = h.op == kPktWrite || h.op == kPktRead || h.op == kPktAtomic;
  uint8_t id = in.u8();
  if ((id & 0x80) && !r.ids.empty()) h.msg_id = r.ids[r.ids.size() - 1 - (id & 0x7f) % r.ids.size()];
  else h.msg_id = in.value(r.last_msg_id);
  h.tag = in.value(target ? v.variant().key : v.last_tag());
  h.cq_data = in.u8();
  h.msg_len = in.value(r.last_msg_len);
  h.offset = in.value(target ? v.variant().mr_addr : r.last_msg_len);
  size_t plen = in.u16() % (max_payload + 1);
  h.seg_len = uint32_t(plen);
  *payload = in.blob(plen);
  r.last_msg_id = h.msg_id;
  r.last_msg_len = h.msg_len;
  return h;
}

// ---- seeds ------------------------------------------------------------------
struct Seed {
  std::string name;
  Writer w;
};

inline Writer& core(Writer& w, uint8_t op, uint8_t flags, uint64_t msg_id, uint64_t tag, uint64_t msg_len,
                    uint64_t offset, uint16_t plen) {
  w.u8(kRecCore).u8(op).u8(flags).u16(0).u8(0).value(msg_id).value(tag).u8(0).value(msg_len).value(offset);
  std::vector<uint8_t> pat(std::min<size_t>(plen, 16));
  for (size_t i = 0; i < pat.size(); i++) pat[i] = uint8_t(0x30 + i);
  return w.u16(plen).blob(pat);
}
// A reply to the victim's latest packet (`back` packets before the latest).
inline Writer& reply(Writer& w, uint8_t op, uint8_t flags, uint8_t back, uint64_t tag, uint64_t msg_len,
                     uint64_t offset, uint16_t plen) {
  w.u8(kRecCore).u8(op).u8(flags).u16(0).u8(uint8_t(0x80 | back)).value(tag).u8(0).value(msg_len).value(offset);
  return w.u16(plen).blob(std::vector<uint8_t>(std::min<size_t>(plen, 8), 0x5a));
}
// Target-side RMA: tag = the registered key (reference + 0), offset = the
// region's address (reference + off).
inline Writer& rma(Writer& w, uint8_t op, uint8_t flags, uint16_t reserved, uint64_t msg_len, uint8_t off,
                   uint16_t plen, const std::vector<uint8_t>& payload) {
  w.u8(kRecCore).u8(op).u8(flags).u16(reserved).u8(0).value(1).ref_plus(0).u8(0).value(msg_len).ref_plus(off);
  return w.u16(plen).blob(payload);
}
inline Writer& app(Writer& w, uint8_t action, uint8_t flags, uint64_t len, uint64_t tag) {
  return w.u8(kRecApp).u8(action).u8(flags).value(len).value(tag);
}
inline Writer& poll(Writer& w, uint8_t rounds) { return w.u8(kRecPoll).u8(rounds); }

// Conversations every provider carries, `seg` bytes per packet: what a
// well-behaved peer sends on each protocol path, and boundary values (2^64-1
// as an offset or length with nothing to copy) one mutation away from
// trouble. Variant 0 is RDM with virtual addresses, 1 RDM with offsets and
// FI_SOURCE.
std::vector<Seed> core_seeds(uint16_t seg);

}  // namespace pm::fuzz
