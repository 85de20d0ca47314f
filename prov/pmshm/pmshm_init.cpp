// pmshm: the shared-memory provider = the core + the shm device + this
// fi_info and knob table.
#include <unistd.h>

#include <cstring>

#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

#include "base/host_id.hpp"
#include "base/log.hpp"
#include "base/netaddr.hpp"
#include "base/param.hpp"
#include "core/info_template.hpp"
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
    {"cma", T::kString,
     "when rendezvous messages use CMA single copy: auto (measured as they go: per size class (64K-256K, "
     "256K-1M, 1M-4M, 4M+) the receiver times epochs, runs of messages that all take one path (at least "
     "8 and 1 ms busy, or 256; a window of messages decided at once is one epoch, timed until its last "
     "completes; idle time is not counted); after one uncounted epoch of each path (8 messages or 4 MiB) it "
     "alternates until each has 2 (1 at a gap of 2x or more), then takes the faster of single copy and "
     "the two-copy bounce pipeline and tries the other for about a 17th of the busy time; "
     "FI_LOG_LEVEL=info shows the figures), on (whenever permitted), off",
     "auto"},
    {"queue_cells", T::kSize, "receive queue cells of 256 bytes per endpoint (a power of two)", "1024"},
    {"chunk_size", T::kSize, "bytes per bounce buffer (largest packet)", "32768"},
    {"chunk_count", T::kSize, "bounce buffers per endpoint", "32"},
    {"connect_timeout_ms", T::kInt, "how long a peer's region may be missing before sends to it fail", "2000"},
};

constexpr uint32_t kProvVersion = FI_VERSION(1, 0);

// Whether a node names this host: "localhost", this host's name, or a name
// or address that resolves to an address of this host (any interface of
// this network namespace, or loopback). pmshm reaches nothing else.
bool node_is_this_host(const char* node, std::string* why) {
  if (!strcmp(node, "localhost")) return true;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0 && !strcmp(node, host)) return true;
  std::vector<IpAddr> addrs;
  if (!resolve_node(node, &addrs, why)) return false;
  std::vector<IfAddr> locals = local_addrs();
  for (const IpAddr& a : addrs)
    if (is_local(a, locals)) return true;
  *why = std::string("node \"") + node + "\" (" + addrs[0].str() +
         ") is not this host; pmshm reaches endpoints on this host only";
  return false;
}

// A name as fi_getinfo returns it: the endpoint of service `svc` on this
// host (0: none given; as src_addr it means "any name").
ShmName service_name(uint32_t svc) {
  return ShmName{kNameMagic, kVersion, 0, uint32_t(getuid()), 0, svc, host_id()};
}

// A src_addr the application passes back (hints->src_addr, or an fi_info
// given to fi_endpoint): a pmshm name of this host and user.
bool src_name(const void* addr, size_t len, ShmName* out) {
  if (!addr || len != sizeof(ShmName)) return false;
  memcpy(out, addr, sizeof *out);
  return out->magic == kNameMagic && out->version == kVersion && out->host == host_id() &&
         out->uid == getuid();
}

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

  bool set_addrs(fi_info& info, const AddrRequest& req, std::string* why) override {
    if (req.node && !node_is_this_host(req.node, why)) return false;
    ShmName src = service_name(0), dest;
    if (req.source) src = service_name(req.svc);
    if (req.hints && req.hints->src_addr && !req.source) {
      if (!src_name(req.hints->src_addr, req.hints->src_addrlen, &src)) {
        *why = "hints->src_addr is not a pmshm address of this host and user";
        return false;
      }
    }
    if (!set_info_addr(&info.src_addr, &info.src_addrlen, &src, sizeof src)) return false;
    const void* d = nullptr;
    if (req.dest()) {
      dest = service_name(req.svc);
      d = &dest;
    } else if (req.hints && req.hints->dest_addr) {
      if (!ShmDevice::valid_name(req.hints->dest_addr, req.hints->dest_addrlen)) {
        *why = "hints->dest_addr is not a pmshm address";
        return false;
      }
      d = req.hints->dest_addr;
    }
    return !d || set_info_addr(&info.dest_addr, &info.dest_addrlen, d, sizeof(ShmName));
  }

  size_t packet_size(const fi_info&) const override { return std::max<size_t>(g_params.get_size("chunk_size"), 4096); }

  fi_info* templates(std::string* why) override {
    TemplateDesc d;
    d.fabric_name = "pmshm";
    d.domain_name = "pmshm";
    d.prov_version = kProvVersion;
    d.comm_caps = FI_LOCAL_COMM;
    d.tx_size = g_params.get_size("tx_size");
    d.rx_size = g_params.get_size("rx_size");
    fi_info* i = make_template(d);
    if (!i) *why = "out of memory";
    return i;
  }

  std::unique_ptr<Device> open_device(Domain&, const fi_info& info, int* err) override {
    if (info.ep_attr->type != FI_EP_RDM) {
      *err = -FI_EINVAL;
      return nullptr;
    }
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
    cfg.region.chunk_size = uint32_t(packet_size(info));
    std::string policy = g_params.get_string("cma");
    cfg.cma = g_params.get_bool("disable_cma") || policy == "off" ? CmaPolicy::kOff
              : policy == "on"                                   ? CmaPolicy::kOn
                                                                 : CmaPolicy::kAuto;
    cfg.cma_fault = parse_cma_fault(g_params.get_string("cma_fault"));
    cfg.connect_timeout_ms = int(g_params.get_int("connect_timeout_ms"));
    // A queue cell claimed this long and still unpublished: is its claimant alive?
    cfg.claim_timeout_ms = int(g_params.get_int("peer_timeout_ms"));
    // An fi_info from fi_getinfo(FI_SOURCE, service s) names the endpoint
    // of service s: it takes that name unless another endpoint holds it.
    ShmName src;
    uint64_t key = 0;
    if (src_name(info.src_addr, info.src_addrlen, &src) && is_service_key(src.key) && !(src.key >> 32))
      key = src.key;
    std::unique_ptr<ShmDevice> dev = ShmDevice::open(cfg, host_id(), err, key);
    if (!dev && *err == -FI_EADDRINUSE) {
      PM_INFO(FI_LOG_EP_CTRL, "service %llu is held by another endpoint on this host; this one gets a "
              "name of its own", (unsigned long long)key);
      *err = 0;
      dev = ShmDevice::open(cfg, host_id(), err);
    }
    return dev;
  }

};

PmShm g_pmshm;
fi_provider g_fi_prov;

}  // namespace
}  // namespace pm::shm

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  pm::init_fi_provider(&pm::shm::g_fi_prov, &pm::shm::g_pmshm, pm::shm::kProvVersion, pm::shm::kParams,
                       sizeof(pm::shm::kParams) / sizeof(pm::shm::kParams[0]));
  return &pm::shm::g_fi_prov;
}
