// pmshm: the shared-memory provider = the core + the shm device + this
// fi_info and knob table.
#include <unistd.h>

#include <cstring>

#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

#include "base/host_id.hpp"
#include "base/log.hpp"
#include "base/param.hpp"
#include "core/provider.hpp"
#include "core/tag_matcher.hpp"
#include "shm_device.hpp"

namespace pm::shm {
namespace {

using T = ParamSpec::Type;
const ParamSpec kParams[] = {
    {"dir", T::kString, "directory (a tmpfs) that holds the endpoint regions, files pmshm_<uid>_<key>", "/dev/shm"},
    {"disable_cma", T::kBool,
     "never use cross-memory attach (process_vm_readv, one copy for large messages; blocked by "
     "seccomp or without CAP_SYS_PTRACE in many containers) and always use the bounce-buffer path",
     "0"},
    {"queue_cells", T::kSize, "receive queue cells of 256 bytes per endpoint (a power of two)", "1024"},
    {"chunk_size", T::kSize, "bytes per bounce buffer (largest packet)", "32768"},
    {"chunk_count", T::kSize, "bounce buffers per endpoint", "32"},
    {"rndv_threshold", T::kSize,
     "messages above this many bytes use rendezvous (single copy by CMA, or copies on request)", "16384"},
    {"tx_size", T::kSize, "outstanding sends per endpoint", "256"},
    {"rx_size", T::kSize, "outstanding posted receives per endpoint", "1024"},
    {"spin_us", T::kInt, "microseconds a blocking read polls before it sleeps", "50"},
    {"peer_timeout_ms", T::kInt, "how often a peer with outstanding operations is checked for life", "1000"},
    {"connect_timeout_ms", T::kInt, "how long a peer's region may be missing before sends to it fail", "2000"},
    {"stats", T::kBool, "print per-endpoint statistics at close (FI_LOG_LEVEL=warn)", "0"},
};

constexpr uint32_t kProvVersion = FI_VERSION(1, 0);

class PmShm final : public ProviderDef {
 public:
  const char* name() const override { return "pmshm"; }
  size_t name_len() const override { return sizeof(ShmName); }
  bool name_valid(const void* n, size_t len) const override { return ShmDevice::valid_name(n, len); }
  std::string name_str(const void* n, size_t len) const override {
    if (!ShmDevice::valid_name(n, len)) return "(invalid pmshm address)";
    ShmName s;
    memcpy(&s, n, sizeof s);
    return ShmDevice::format_name(s);
  }

  fi_info* templates(std::string* why) override {
    fi_info* i = fi_allocinfo();
    if (!i) {
      *why = "out of memory";
      return nullptr;
    }
    constexpr uint64_t kTx = FI_MSG | FI_TAGGED | FI_SEND;
    constexpr uint64_t kRx = FI_MSG | FI_TAGGED | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV | FI_MULTI_RECV;
    i->caps = kTx | kRx | FI_LOCAL_COMM;
    i->mode = 0;
    i->addr_format = FI_FORMAT_UNSPEC;
    i->tx_attr->caps = kTx;
    i->tx_attr->msg_order = FI_ORDER_SAS;
    i->tx_attr->comp_order = FI_ORDER_NONE;
    i->tx_attr->inject_size = 4096;
    i->tx_attr->size = tx_size();
    i->tx_attr->iov_limit = kMaxIov;
    i->rx_attr->caps = kRx;
    i->rx_attr->msg_order = FI_ORDER_SAS;
    i->rx_attr->comp_order = FI_ORDER_NONE;
    i->rx_attr->size = rx_size();
    i->rx_attr->iov_limit = kMaxIov;
    i->ep_attr->type = FI_EP_RDM;
    i->ep_attr->protocol = FI_PROTO_UNSPEC;
    i->ep_attr->protocol_version = 1;
    i->ep_attr->max_msg_size = SIZE_MAX;
    i->ep_attr->mem_tag_format = 0xAAAAAAAAAAAAAAAAull;  // all 64 bits usable
    i->ep_attr->tx_ctx_cnt = 1;
    i->ep_attr->rx_ctx_cnt = 1;
    fi_domain_attr* d = i->domain_attr;
    d->name = strdup("pmshm");
    d->threading = FI_THREAD_SAFE;
    d->control_progress = FI_PROGRESS_MANUAL;
    d->data_progress = FI_PROGRESS_MANUAL;
    d->resource_mgmt = FI_RM_ENABLED;
    d->av_type = FI_AV_UNSPEC;
    d->mr_mode = 0;
    d->mr_key_size = sizeof(uint64_t);
    d->cq_data_size = sizeof(uint64_t);
    d->cq_cnt = 1024;
    d->ep_cnt = 1024;
    d->tx_ctx_cnt = 1024;
    d->rx_ctx_cnt = 1024;
    d->max_ep_tx_ctx = 1;
    d->max_ep_rx_ctx = 1;
    d->mr_cnt = 65536;
    d->caps = FI_LOCAL_COMM;
    i->fabric_attr->name = strdup("pmshm");
    i->fabric_attr->prov_version = kProvVersion;
    if (!d->name || !i->fabric_attr->name) {
      fi_freeinfo(i);
      *why = "out of memory";
      return nullptr;
    }
    return i;
  }

  std::unique_ptr<Device> open_device(Domain&, const fi_info&, int* err) override {
    DeviceConfig cfg;
    cfg.region.dir = g_params.get_string("dir");
    size_t cells = g_params.get_size("queue_cells");
    if (cells < 16 || (cells & (cells - 1))) {
      PM_WARN(FI_LOG_EP_CTRL, "FI_PMSHM_QUEUE_CELLS=%zu is not a power of two >= 16", cells);
      *err = -FI_EINVAL;
      return nullptr;
    }
    cfg.region.cells = uint32_t(cells);
    cfg.region.chunks = uint32_t(std::max<size_t>(g_params.get_size("chunk_count"), 2));
    cfg.region.chunk_size = uint32_t(std::max<size_t>(g_params.get_size("chunk_size"), 4096));
    cfg.cma = !g_params.get_bool("disable_cma");
    cfg.connect_timeout_ms = int(g_params.get_int("connect_timeout_ms"));
    return ShmDevice::open(cfg, host_id(), err);
  }

  size_t rndv_threshold() const override { return g_params.get_size("rndv_threshold"); }
  size_t tx_size() const override { return g_params.get_size("tx_size"); }
  size_t rx_size() const override { return g_params.get_size("rx_size"); }
  int spin_us() const override { return int(g_params.get_int("spin_us")); }
  int peer_timeout_ms() const override { return int(g_params.get_int("peer_timeout_ms")); }
  bool print_stats() const override { return g_params.get_bool("stats"); }
};

PmShm g_pmshm;
fi_provider g_fi_prov;

}  // namespace
}  // namespace pm::shm

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  pm::init_fi_provider(&pm::shm::g_fi_prov, &pm::shm::g_pmshm, pm::shm::kProvVersion);
  pm::g_params.define(&pm::shm::g_fi_prov, pm::shm::kParams,
                      sizeof(pm::shm::kParams) / sizeof(pm::shm::kParams[0]));
  return &pm::shm::g_fi_prov;
}
