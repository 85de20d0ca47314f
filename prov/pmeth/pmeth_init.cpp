// pmeth: the raw-Ethernet provider = the core + the Ethernet device (over a
// wire backend) + this fi_info and knob table. One domain per interface.
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

#include "base/host_id.hpp"
#include "base/log.hpp"
#include "base/param.hpp"
#include "base/unique_fd.hpp"
#include "core/info_template.hpp"
#include "core/provider.hpp"
#include "composite_device.hpp"
#include "eth_device.hpp"
#include "eth_iface.hpp"
#include "wire/wire.hpp"

namespace pm::eth {
namespace {

using T = ParamSpec::Type;
const ParamSpec kParams[] = {
    {"iface", T::kString,
     "comma-separated interfaces to use, one domain each, and with two to four of them also a trunk "
     "domain (a+b+...) whose endpoints stripe over all (empty: every up Ethernet interface except lo, "
     "docker*, virbr*, veth*)",
     ""},
    {"shm", T::kBool,
     "reach peers with the same host id through shared memory (PM/Composite; needs FI_LOCAL_COMM, "
     "which hints can leave out to turn it off too)",
     "1"},
    {"backend", T::kString, "wire backend: af_packet (mmap'ed TPACKET rings) or loopback (in-process, tests)",
     "af_packet"},
    {"ethertype", T::kInt, "EtherType of pmeth frames (0x88B5 = 34997, IEEE local experimental)", "34997"},
    {"window", T::kSize, "frames in flight per peer before the sender waits for acknowledgements", "128"},
    {"ack_every", T::kSize, "frames received before an acknowledgement is sent at once", "32"},
    {"delayed_ack_us", T::kInt,
     "longest wait for traffic back to carry an acknowledgement before one is sent alone", "50"},
    {"rto_init_us", T::kInt, "retransmission timeout before the round trip is measured", "2000"},
    {"rto_min_us", T::kInt, "lower bound of the retransmission timeout", "200"},
    {"rto_max_us", T::kInt, "upper bound of the retransmission timeout (and of its backoff)", "1000000"},
    {"retries", T::kInt,
     "retransmissions of a frame before the peer is declared unreachable; with manual progress a peer "
     "answers only while it calls into libfabric, so the default budget (about 35 s) outlasts long "
     "compute phases",
     "40"},
    {"drop_rate", T::kString, "fault injection: probability (0..1) that a received frame is dropped", "0"},
    {"checksum", T::kBool, "CRC32C over every frame (raw frames bypass the UDP/TCP checksums)", "1"},
    {"rx_ring_kb", T::kSize, "AF_PACKET receive ring size per endpoint, KiB", "4096"},
    {"tx_ring_kb", T::kSize, "AF_PACKET transmit ring size per endpoint, KiB", "1024"},
    {"host_id", T::kString, "override of the host id (hex) that names this machine in addresses (tests)", ""},
};

constexpr uint32_t kProvVersion = FI_VERSION(1, 0);

bool loopback_backend() { return g_params.get_string("backend") == "loopback"; }

uint64_t this_host() {
  std::string o = g_params.get_string("host_id");
  return o.empty() ? host_id() : strtoull(o.c_str(), nullptr, 16);
}

std::vector<std::string> split(const std::string& list, char sep) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= list.size();) {
    size_t c = list.find(sep, start);
    std::string e = list.substr(start, c == std::string::npos ? std::string::npos : c - start);
    if (!e.empty()) out.push_back(e);
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& v, char sep) {
  std::string s;
  for (const std::string& e : v) s += (s.empty() ? "" : std::string(1, sep)) + e;
  return s;
}

// The interfaces of a comma-separated list (empty: discovery); with the
// loopback backend, in-process segments of those names.
std::vector<Iface> describe_ifaces(const std::string& list) {
  std::vector<Iface> out;
  if (loopback_backend()) {
    for (const std::string& n : split(list.empty() ? "loop0" : list, ',')) {
      Iface i;
      i.name = i.nic.name = n;
      i.nic.mtu = 1500;
      i.nic.state = FI_LINK_UP;
      i.nic.address = "02:00:00:00:00:0" + std::to_string(out.size() % 10);
      out.push_back(i);
    }
    return out;
  }
  std::vector<std::string> skipped;
  out = find_ifaces(list, &skipped);
  for (const std::string& s : skipped) PM_INFO(FI_LOG_CORE, "interface %s", s.c_str());
  return out;
}

// The trunk's NIC: every rail's name and MAC joined by '+', the smallest
// MTU, the sum of the speeds.
Iface make_trunk(const std::vector<Iface>& rails) {
  Iface t;
  t.nic.mtu = SIZE_MAX;
  t.nic.state = FI_LINK_UP;
  for (const Iface& r : rails) {
    t.name += (t.name.empty() ? "" : "+") + r.name;
    t.nic.address += (t.nic.address.empty() ? "" : "+") + r.nic.address;
    t.nic.mtu = std::min(t.nic.mtu, r.nic.mtu);
    t.nic.speed += r.nic.speed;
    t.nic.driver = r.nic.driver;
  }
  t.nic.name = t.name;
  return t;
}

uint32_t job_key(const fi_info& info) {
  const fi_domain_attr* d = info.domain_attr;
  if (!d || !d->auth_key || !d->auth_key_size) return 0;
  return crc32c(0, d->auth_key, d->auth_key_size);
}

class PmEth final : public ProviderDef {
 public:
  const char* name() const override { return "pmeth"; }
  size_t name_len() const override { return kNameLen; }
  bool name_valid(const void* n, size_t len) const override {
    EthName e;
    return decode_name(n, len, &e);
  }
  std::string name_str(const void* n, size_t len) const override {
    EthName e;
    return decode_name(n, len, &e) ? EthDevice::format_name(e) : "(invalid pmeth address)";
  }

  size_t packet_size(const fi_info& info) const override {
    size_t mtu = info.nic && info.nic->link_attr ? info.nic->link_attr->mtu : 1500;
    return mtu > 2 * 48 + 64 ? mtu - 2 * 48 : 64;
  }

  fi_info* templates(std::string* why) override {
    if (!loopback_backend()) {
      UniqueFd probe(socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
      if (!probe) {
        *why = errno == EPERM ? "raw packet sockets need CAP_NET_RAW" : std::string("AF_PACKET: ") + strerror(errno);
        return nullptr;
      }
    }
    // Entries a+b+.. name trunks; other entries single interfaces, of which
    // two or more also make one trunk of the first kMaxRails.
    std::vector<std::string> singles, trunk_lists;
    for (const std::string& e : split(g_params.get_string("iface"), ','))
      (e.find('+') != std::string::npos ? trunk_lists : singles).push_back(e);
    bool named = !singles.empty() || !trunk_lists.empty();
    std::vector<Iface> ifaces;
    if (!named || !singles.empty()) ifaces = describe_ifaces(join(singles, ','));
    // Nearest NICs first (a stable order otherwise).
    std::vector<NicDesc> nics;
    for (const Iface& i : ifaces) nics.push_back(i.nic);
    std::vector<int> dist = nic_distances(nics);
    std::vector<size_t> order(ifaces.size());
    for (size_t k = 0; k < order.size(); k++) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return dist[a] < dist[b]; });
    std::vector<Iface> sorted;
    for (size_t k : order) sorted.push_back(ifaces[k]);
    ifaces.swap(sorted);
    // The automatic trunk reuses the interfaces just described.
    if (trunk_lists.empty() && ifaces.size() >= 2)
      ifaces.push_back(make_trunk({ifaces.begin(), ifaces.begin() + long(std::min(ifaces.size(), kMaxRails))}));
    for (const std::string& t : trunk_lists) {
      std::vector<std::string> names = split(t, '+');
      std::vector<Iface> rails = describe_ifaces(join(names, ','));
      if (rails.size() != names.size() || rails.size() > kMaxRails) {
        PM_INFO(FI_LOG_CORE, "trunk %s: needs 2 to %zu usable interfaces", t.c_str(), kMaxRails);
        continue;
      }
      ifaces.push_back(make_trunk(rails));
    }
    if (ifaces.empty()) {
      *why = "no usable Ethernet interface (set FI_PMETH_IFACE; FI_LOG_LEVEL=info lists the skipped ones)";
      return nullptr;
    }
    fi_info* head = nullptr;
    fi_info** tail = &head;
    for (const Iface& i : ifaces) {
      size_t payload = i.nic.mtu - 48 - 48;
      bool trunk = i.name.find('+') != std::string::npos;
      for (fi_ep_type t : {FI_EP_RDM, FI_EP_DGRAM}) {
        if (trunk && t == FI_EP_DGRAM) continue;
        TemplateDesc d;
        d.fabric_name = "pmeth";
        d.domain_name = i.name.c_str();
        d.prov_version = kProvVersion;
        d.ep_type = t;
        d.comm_caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
        d.tx_size = g_params.get_size("tx_size");
        d.rx_size = g_params.get_size("rx_size");
        if (t == FI_EP_DGRAM) {
          d.max_msg_size = payload;
          d.inject_size = payload;
          d.multi_recv = false;
          d.one_sided = false;
        }
        d.nic = make_nic(i.nic);
        fi_info* info = make_template(d);
        if (!info) {
          fi_freeinfo(head);
          *why = "out of memory";
          return nullptr;
        }
        *tail = info;
        tail = &info->next;
      }
    }
    return head;
  }

  std::unique_ptr<Device> open_device(Domain&, const fi_info& info, int* err) override {
    WireConfig wc;
    wc.ethertype = uint16_t(g_params.get_int("ethertype"));
    do {
      if (getrandom(&wc.ep_id, sizeof wc.ep_id, 0) != sizeof wc.ep_id) wc.ep_id = uint32_t(getpid());
    } while (wc.ep_id == 0);
    wc.rx_ring_bytes = g_params.get_size("rx_ring_kb") * 1024;
    wc.tx_ring_bytes = g_params.get_size("tx_ring_kb") * 1024;
    // One wire per rail: the domain name is an interface, or a trunk a+b+...
    std::vector<std::unique_ptr<Wire>> rails;
    std::string domain = info.domain_attr->name;
    for (size_t start = 0; start <= domain.size();) {
      size_t plus = domain.find('+', start);
      wc.iface = domain.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      std::string why;
      std::unique_ptr<Wire> wire =
          loopback_backend() ? open_loop_wire(wc, err, &why) : open_packet_wire(wc, err, &why);
      if (!wire) {
        PM_WARN(FI_LOG_EP_CTRL, "cannot open %s on %s: %s", g_params.get_string("backend").c_str(),
                wc.iface.c_str(), why.c_str());
        return nullptr;
      }
      rails.push_back(std::move(wire));
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    DeviceConfig dc;
    dc.ethertype = wc.ethertype;
    dc.job = job_key(info);
    dc.host = this_host();
    dc.reliable = info.ep_attr->type == FI_EP_RDM;
    dc.window = uint32_t(g_params.get_size("window"));
    dc.ack_every = uint32_t(std::max<size_t>(1, g_params.get_size("ack_every")));
    dc.delayed_ack_us = uint32_t(g_params.get_int("delayed_ack_us"));
    dc.rto_init_us = uint32_t(g_params.get_int("rto_init_us"));
    dc.rto_min_us = uint32_t(g_params.get_int("rto_min_us"));
    dc.rto_max_us = uint32_t(g_params.get_int("rto_max_us"));
    dc.retries = uint32_t(g_params.get_int("retries"));
    dc.drop_rate = atof(g_params.get_string("drop_rate").c_str());
    dc.checksum = g_params.get_bool("checksum");
    std::unique_ptr<EthDevice> eth = EthDevice::open(dc, std::move(rails), wc.ep_id, err);
    if (!eth) return nullptr;
    if (!dc.reliable || !(info.caps & FI_LOCAL_COMM) || !g_params.get_bool("shm")) return eth;
    shm::DeviceConfig sc = shm::DeviceConfig::defaults();
    sc.claim_timeout_ms = int(g_params.get_int("peer_timeout_ms"));
    std::unique_ptr<shm::ShmDevice> shm = shm::ShmDevice::open(sc, dc.host, err);
    if (!shm) {
      PM_WARN(FI_LOG_EP_CTRL, "no shared-memory path for same-host peers (%s); they go through Ethernet",
              fi_strerror(-*err));
      *err = 0;
      return eth;
    }
    return CompositeDevice::open(std::move(eth), std::move(shm), err);
  }
};

PmEth g_pmeth;
fi_provider g_fi_prov;

}  // namespace
}  // namespace pm::eth

extern "C" __attribute__((visibility("default"))) fi_provider* fi_prov_ini(void) {
  pm::init_fi_provider(&pm::eth::g_fi_prov, &pm::eth::g_pmeth, pm::eth::kProvVersion, pm::eth::kParams,
                       sizeof(pm::eth::kParams) / sizeof(pm::eth::kParams[0]));
  return &pm::eth::g_fi_prov;
}
