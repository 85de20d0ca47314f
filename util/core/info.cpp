// fi_getinfo for every provider of this tree: the provider supplies its
// templates; this file checks the hints against them, says at info level why
// a template does not fit, and shapes the returned fi_info after the hints.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <rdma/fi_errno.h>

#include "abi/api_version.hpp"
#include "abi/fid_box.hpp"
#include "base/log.hpp"
#include "base/netaddr.hpp"
#include "base/param.hpp"
#include "core/domain.hpp"
#include "core/addr_str.hpp"
#include "core/provider.hpp"

namespace pm {

ProviderDef* g_provdef = nullptr;

bool set_info_addr(void** field, size_t* field_len, const void* addr, size_t len) {
  free(*field);
  *field = nullptr;
  *field_len = 0;
  if (!addr || !len) return true;
  *field = malloc(len);
  if (!*field) return false;
  memcpy(*field, addr, len);
  *field_len = len;
  return true;
}
const fi_provider* g_prov = nullptr;

int fabric_open(fi_fabric_attr* attr, fid_fabric** out, void* ctx) noexcept;

namespace {

constexpr uint64_t kMrModeAccepted = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

std::string caps_str(uint64_t caps) {
  char buf[1024];
  fi_tostr_r(buf, sizeof buf, &caps, FI_TYPE_CAPS);
  return buf;
}

// FI_PROGRESS_AUTO is offered while the progress thread is enabled.
bool auto_available() {
  return g_params.get_bool("progress_thread") && g_params.get_int("progress_interval_us") > 0;
}

// Returns "" when the template satisfies the hints, else the reason.
std::string mismatch(const fi_info& t, const fi_info& h, uint32_t version) {
  if (h.ep_attr && h.ep_attr->type != FI_EP_UNSPEC && h.ep_attr->type != t.ep_attr->type)
    return "endpoint type " + std::string(fi_tostr(&h.ep_attr->type, FI_TYPE_EP_TYPE)) + " not supported";
  if (h.caps & ~t.caps) return "capabilities not supported: " + caps_str(h.caps & ~t.caps);
  if (t.mode & ~h.mode) return "application does not support the required mode bits";
  if (h.addr_format != FI_FORMAT_UNSPEC && h.addr_format != FI_ADDR_STR && h.addr_format != t.addr_format)
    return "address format " + std::string(fi_tostr(&h.addr_format, FI_TYPE_ADDR_FORMAT)) +
           " not supported (FI_FORMAT_UNSPEC: the binary name of docs/wire_protocol.md; FI_ADDR_STR)";
  if (h.fabric_attr && h.fabric_attr->name && strcmp(h.fabric_attr->name, t.fabric_attr->name))
    return "fabric name " + std::string(h.fabric_attr->name) + " not offered";
  if (const fi_domain_attr* d = h.domain_attr) {
    if (d->name && strcmp(d->name, t.domain_attr->name))
      return "domain name " + std::string(d->name) + " not offered";
    if ((d->control_progress == FI_PROGRESS_AUTO || d->data_progress == FI_PROGRESS_AUTO) && !auto_available())
      return "FI_PROGRESS_AUTO requested, but the progress thread is disabled (PROGRESS_THREAD=0 or "
             "PROGRESS_INTERVAL_US=0)";
    if (d->cq_data_size > t.domain_attr->cq_data_size) return "cq_data_size larger than 8 requested";
    if (d->caps & ~t.domain_attr->caps) return "domain capabilities not supported: " + caps_str(d->caps & ~t.domain_attr->caps);
    if (d->mr_mode != kMrUnspec && d->mr_mode != kMrBasic && d->mr_mode != kMrScalable &&
        version >= FI_VERSION(1, 5) && (t.domain_attr->mr_mode & ~d->mr_mode))
      return "application does not support the required mr_mode bits";
    if (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_MAP && d->av_type != FI_AV_TABLE)
      return "av_type not supported";
  }
  for (int dir = 0; dir < 2; dir++) {
    uint64_t hcaps = dir ? (h.rx_attr ? h.rx_attr->caps : 0) : (h.tx_attr ? h.tx_attr->caps : 0);
    uint64_t tcaps = dir ? t.rx_attr->caps : t.tx_attr->caps;
    if (hcaps & ~tcaps) return std::string(dir ? "rx" : "tx") + " capabilities not supported: " + caps_str(hcaps & ~tcaps);
  }
  if (const fi_tx_attr* x = h.tx_attr) {
    if (x->msg_order & ~t.tx_attr->msg_order) return "transmit message ordering not supported";
    if (x->comp_order & ~t.tx_attr->comp_order) return "transmit completion ordering not supported";
    if (x->inject_size > t.tx_attr->inject_size) return "inject_size larger than supported";
    if (x->iov_limit > t.tx_attr->iov_limit) return "tx iov_limit larger than supported";
    if (x->size > t.tx_attr->size) return "tx size larger than supported";
  }
  if (const fi_rx_attr* x = h.rx_attr) {
    if (x->msg_order & ~t.rx_attr->msg_order) return "receive message ordering not supported";
    if (x->comp_order & ~t.rx_attr->comp_order) return "receive completion ordering not supported";
    if (x->iov_limit > t.rx_attr->iov_limit) return "rx iov_limit larger than supported";
    if (x->total_buffered_recv) return "buffered receives not supported";
    if (x->size > t.rx_attr->size) return "rx size larger than supported";
  }
  if (const fi_ep_attr* e = h.ep_attr) {
    if (e->max_msg_size > t.ep_attr->max_msg_size) return "max_msg_size larger than supported";
    if (e->max_order_raw_size > t.ep_attr->max_order_raw_size ||
        e->max_order_war_size > t.ep_attr->max_order_war_size ||
        e->max_order_waw_size > t.ep_attr->max_order_waw_size)
      return "ordering size larger than supported";
    if (e->tx_ctx_cnt > 1 && e->tx_ctx_cnt != FI_SHARED_CONTEXT) return "scalable endpoints not supported";
    if (e->rx_ctx_cnt > 1 && e->rx_ctx_cnt != FI_SHARED_CONTEXT) return "scalable endpoints not supported";
    if (e->tx_ctx_cnt == FI_SHARED_CONTEXT || e->rx_ctx_cnt == FI_SHARED_CONTEXT) return "shared contexts not supported";
    if (e->protocol != FI_PROTO_UNSPEC && e->protocol != t.ep_attr->protocol) return "protocol not supported";
  }
  return "";
}

// A copy of an auth_key (the core frees fi_info members with free()).
void copy_key(uint8_t** dst, size_t* dst_size, const uint8_t* key, size_t size) {
  if (!key || !size) return;
  auto* k = static_cast<uint8_t*>(malloc(size));
  if (!k) return;
  memcpy(k, key, size);
  free(*dst);
  *dst = k;
  *dst_size = size;
}

// Shapes a copy of the template after the hints.
void apply_hints(fi_info& o, const fi_info& h, uint32_t version) {
  constexpr uint64_t kComm = FI_LOCAL_COMM | FI_REMOTE_COMM;
  if (h.caps) {
    // Hints naming a kind of communication get only that kind (pmeth then
    // leaves its shared-memory path out); hints naming neither get both.
    o.caps = h.caps | (h.caps & kComm ? 0 : o.caps & kComm);
    o.tx_attr->caps &= o.caps;
    o.rx_attr->caps &= o.caps;
  }
  o.mode = 0;
  if (const fi_domain_attr* d = h.domain_attr) {
    if (d->threading != FI_THREAD_UNSPEC) o.domain_attr->threading = d->threading;
    if (d->av_type != FI_AV_UNSPEC) o.domain_attr->av_type = d->av_type;
    if (d->resource_mgmt != FI_RM_UNSPEC) o.domain_attr->resource_mgmt = d->resource_mgmt;
    // The job's key, as given: it isolates (and, on pmeth, authenticates)
    // the job, so it travels on to fi_domain / fi_endpoint.
    copy_key(&o.domain_attr->auth_key, &o.domain_attr->auth_key_size, d->auth_key, d->auth_key_size);
    // Manual unless AUTO is asked for (the templates say FI_PROGRESS_MANUAL).
    if (d->control_progress != FI_PROGRESS_UNSPEC) o.domain_attr->control_progress = d->control_progress;
    if (d->data_progress != FI_PROGRESS_UNSPEC) o.domain_attr->data_progress = d->data_progress;
    if (version < FI_VERSION(1, 5) || d->mr_mode == kMrBasic || d->mr_mode == kMrScalable)
      o.domain_attr->mr_mode = d->mr_mode == kMrBasic ? kMrBasic : kMrScalable;
    else
      o.domain_attr->mr_mode = d->mr_mode & kMrModeAccepted;
  }
  if (h.ep_attr && o.ep_attr)
    copy_key(&o.ep_attr->auth_key, &o.ep_attr->auth_key_size, h.ep_attr->auth_key, h.ep_attr->auth_key_size);
  if (h.tx_attr) {
    o.tx_attr->op_flags = h.tx_attr->op_flags;
    if (h.tx_attr->size) o.tx_attr->size = h.tx_attr->size;
  }
  if (h.rx_attr) {
    o.rx_attr->op_flags = h.rx_attr->op_flags;
    if (h.rx_attr->size) o.rx_attr->size = h.rx_attr->size;
  }
  if (version < FI_VERSION(1, 5) && !h.domain_attr) o.domain_attr->mr_mode = kMrScalable;
}

// libfabric's utility providers (ofi_rxd, ofi_rxm) query core providers with
// this internal flag to layer on them. Ours implement RDM themselves; an
// "<ours>;ofi_rxd" entry would only be a slower copy listed before us.
constexpr uint64_t kCoreProvOnly = 1ULL << 59;

int pm_getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
               const fi_info* hints, fi_info** info) noexcept {
  return guard([&]() -> int {
    *info = nullptr;
    if (flags & kCoreProvOnly) {
      PM_INFO(FI_LOG_CORE, "not offered for layering under utility providers");
      return -FI_ENODATA;
    }
    std::string why;
    AddrRequest req;
    req.node = node;
    req.service = service;
    req.source = flags & FI_SOURCE;
    req.hints = hints;
    // String addresses (FI_ADDR_STR hints, or a string name as the node):
    // the providers see binary names only, in a copy of the hints.
    bool str = hints && hints->addr_format == FI_ADDR_STR;
    std::unique_ptr<fi_info, void (*)(fi_info*)> shadow(nullptr, fi_freeinfo);
    if (str || (node && !service && looks_like_uri(node, strlen(node)))) {
      shadow.reset(hints ? fi_dupinfo(hints) : fi_allocinfo());
      if (!shadow) return -FI_ENOMEM;
      shadow->addr_format = FI_FORMAT_UNSPEC;
      auto to_bin = [&](void** field, size_t* flen, const char* what) {
        if (!*field || !str) return true;
        std::string bin;
        if (!uri_to_name(static_cast<const char*>(*field), *flen, &bin, &why, field != &shadow->src_addr)) {
          PM_INFO(FI_LOG_CORE, "%s: hints' %s: %s", g_provdef->name(), what, why.c_str());
          return false;
        }
        return set_info_addr(field, flen, bin.data(), bin.size());
      };
      if (!to_bin(&shadow->src_addr, &shadow->src_addrlen, "src_addr") ||
          !to_bin(&shadow->dest_addr, &shadow->dest_addrlen, "dest_addr"))
        return -FI_ENODATA;
      if (node && !service && looks_like_uri(node, strlen(node))) {
        std::string bin;
        if (!uri_to_name(node, strlen(node), &bin, &why)) {
          PM_INFO(FI_LOG_CORE, "%s: node %s: %s", g_provdef->name(), node, why.c_str());
          return -FI_ENODATA;
        }
        // The named endpoint: the destination, or with FI_SOURCE the local one.
        if (!(req.source ? set_info_addr(&shadow->src_addr, &shadow->src_addrlen, bin.data(), bin.size())
                         : set_info_addr(&shadow->dest_addr, &shadow->dest_addrlen, bin.data(), bin.size())))
          return -FI_ENOMEM;
        req.node = nullptr;
      }
      req.hints = shadow.get();
    }
    // The hints as the providers see them (binary names).
    const fi_info* eff = hints && shadow ? shadow.get() : hints;
    if (!parse_service(service, &req.svc, &why)) {
      PM_INFO(FI_LOG_CORE, "%s: %s", g_provdef->name(), why.c_str());
      return -FI_ENODATA;
    }
    fi_info* tmpls = g_provdef->templates(&why);
    if (!tmpls) {
      PM_INFO(FI_LOG_CORE, "%s unavailable: %s", g_provdef->name(), why.c_str());
      return -FI_ENODATA;
    }
    fi_info* head = nullptr;
    fi_info** tail = &head;
    for (fi_info* t = tmpls; t; t = t->next) {
      if (eff) {
        std::string m = mismatch(*t, *eff, version);
        if (!m.empty()) {
          PM_INFO(FI_LOG_CORE, "domain %s does not fit the hints: %s", t->domain_attr->name, m.c_str());
          continue;
        }
      }
      fi_info* o = fi_dupinfo(t);
      if (!o) {
        fi_freeinfo(head);
        fi_freeinfo(tmpls);
        return -FI_ENOMEM;
      }
      o->next = nullptr;
      if (eff) apply_hints(*o, *eff, version);
      else if (version < FI_VERSION(1, 5)) o->domain_attr->mr_mode = kMrScalable;
      why.clear();
      if (!g_provdef->set_addrs(*o, req, &why)) {
        PM_INFO(FI_LOG_CORE, "domain %s: %s", t->domain_attr->name, why.c_str());
        fi_freeinfo(o);
        continue;
      }
      if (str) {
        o->addr_format = FI_ADDR_STR;
        for (auto f : {std::make_pair(&o->src_addr, &o->src_addrlen), std::make_pair(&o->dest_addr, &o->dest_addrlen)}) {
          if (!*f.first) continue;
          std::string u = name_to_uri(*f.first, *f.second);
          if (!set_info_addr(f.first, f.second, u.c_str(), u.size() + 1)) {
            fi_freeinfo(o);
            fi_freeinfo(head);
            fi_freeinfo(tmpls);
            return -FI_ENOMEM;
          }
        }
      }
      *tail = o;
      tail = &o->next;
    }
    fi_freeinfo(tmpls);
    if (!head) return -FI_ENODATA;
    *info = head;
    return 0;
  });
}

int pm_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) noexcept {
  return fabric_open(attr, fabric, context);
}

// fi_fini, before libfabric unloads this DSO: no progress thread may run
// its code after that.
void pm_cleanup() noexcept { stop_all_helpers(); }

}  // namespace

namespace {
using T = ParamSpec::Type;
// The core's knobs; every provider lists them under its own prefix.
const ParamSpec kCoreParams[] = {
    {"rndv_threshold", T::kSize,
     "messages above this many bytes use rendezvous: the receiver pulls them once matched (single "
     "copy where the device can), so an unexpected large message costs it a header (a path on which a "
     "rendezvous saves no copy may have a threshold of its own)",
     "16384"},
    {"cma_share_min", T::kSize,
     "a rendezvous of at least this many bytes done by single copy (CMA) is shared: the receiver reads "
     "the first half while the sender writes the second into the receive, so two cpus copy at once "
     "(the sender does its part in its progress, so the receive waits for it; a sender that cannot write "
     "answers so, and the receiver reads the rest itself); 0: the receiver copies it all",
     "262144"},
    {"cma_fault", T::kString,
     "fault injection, for tests: read (or write) makes every single-copy (CMA) data copy this process "
     "would do by reading (or writing) the peer's memory fail with EPERM, as a kernel that refuses it "
     "would; the peer checks still run, so the fallbacks are what is tested (a refused write reaches the "
     "receiver as FI_EIO; large RMA by CMA has no fallback and completes with FI_EIO); empty: none",
     ""},
    {"unexp_cap_kb", T::kSize,
     "memory an endpoint keeps for unexpected messages, KiB: from a quarter of it, a sender whose "
     "eager messages above rndv_threshold arrive unexpected is asked to send them by rendezvous; at the "
     "cap the endpoint stops taking such messages and their senders wait (STOP/GO) until receives are "
     "posted; nothing is dropped",
     "262144"},
    {"tx_size", T::kSize, "outstanding sends per endpoint", "256"},
    {"rx_size", T::kSize, "outstanding posted receives per endpoint", "1024"},
    {"spin_us", T::kInt, "microseconds a blocking read polls before it sleeps on the devices' fds", "50"},
    {"peer_timeout_ms", T::kInt,
     "operations waiting this long on a peer make the provider check that the peer is alive", "1000"},
    {"progress_thread", T::kBool,
     "a progress thread per domain. With FI_PROGRESS_AUTO it guarantees progress (completions, and "
     "the acknowledgements, rendezvous and RMA/atomic targets peers wait for) without libfabric calls, "
     "within progress_interval_us; with manual progress it steps in only after the application made no "
     "progress call for a whole interval and only with a try-lock (keeps peers answered during long "
     "compute phases). It sleeps on the devices' fds when idle. 0: no thread, and FI_PROGRESS_AUTO is "
     "not offered",
     "1"},
    {"progress_interval_us", T::kInt,
     "the progress thread's period: an application that makes no progress call for this long gets "
     "progress from the thread (within one to two intervals; up to a kernel tick more with an interval "
     "under two ticks); also the worst-case delay of FI_PROGRESS_AUTO progress for work that "
     "waits for room (arrivals wake the thread at once). 0: no thread",
     "1000"},
    {"close_timeout_ms", T::kInt,
     "fi_close of an endpoint waits at most this long for its peers to acknowledge what it sent (and "
     "acknowledges what it received), so the last message of an exchange is not lost",
     "5000"},
    {"progress_cpu", T::kInt, "CPU the progress thread is pinned to (-1: not pinned, it inherits the affinity "
     "of the thread that opened the first endpoint)", "-1"},
    {"stats", T::kBool, "print per-endpoint (and per-peer) statistics at close, at FI_LOG_LEVEL=warn", "0"},
    {"live_stats", T::kBool,
     "publish each endpoint's statistics while it runs, for pmstat(1): a 0600 page in /dev/shm "
     "(pmstat-<uid>-<pid>-<n>, layout in pmfabric/pmstat.h) updated from progress calls at most every "
     "100 ms, removed at close",
     "1"},
};
}  // namespace

void init_fi_provider(fi_provider* prov, ProviderDef* def, uint32_t version, const ParamSpec* specs,
                      size_t nspecs) {
  g_provdef = def;
  g_prov = prov;
  prov->version = version;
  prov->name = def->name();  // before the knobs (their names derive from it) and any log line
  prov->fi_version = provider_api_version();
  prov->getinfo = pm_getinfo;
  prov->fabric = pm_fabric;
  prov->cleanup = pm_cleanup;
  g_params.define(prov, kCoreParams, sizeof kCoreParams / sizeof kCoreParams[0]);
  g_params.define(prov, specs, nspecs);
}

}  // namespace pm
