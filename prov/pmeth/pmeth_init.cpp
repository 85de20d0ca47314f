// pmeth: the raw-Ethernet provider = the core + the Ethernet device (over a
// wire backend) + this fi_info and knob table. One domain per interface.
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <rdma/fi_errno.h>
#include <rdma/providers/fi_prov.h>

#include "base/clock.hpp"
#include "base/host_id.hpp"
#include "base/log.hpp"
#include "base/param.hpp"
#include "base/unique_fd.hpp"
#include "core/info_template.hpp"
#include "core/provider.hpp"
#include "composite_device.hpp"
#include "eth_addr.hpp"
#include "eth_device.hpp"
#include "eth_iface.hpp"
#include "broker/broker_client.hpp"
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
     "reach peers with the same host id through shared memory (PM/Composite; an endpoint whose caps "
     "name FI_REMOTE_COMM without FI_LOCAL_COMM does not either)",
     "1"},
    {"backend", T::kString,
     "loopback: the in-process wire of the unit tests; anything else: the wire FI_PMETH_WIRE names", "af_packet"},
    {"wire", T::kString,
     "wire backend: af_packet (mmap'ed TPACKET rings, CAP_NET_RAW), af_xdp (AF_XDP socket and an XDP program, "
     "also CAP_NET_ADMIN and CAP_BPF; one AF_XDP endpoint per interface), verbs (raw-packet QP of an "
     "rdma-core device), or auto: verbs where a raw-packet device is present, else af_xdp where it works, "
     "else af_packet (each one passed over is named at FI_LOG_LEVEL=info)",
     "af_packet"},
    {"xdp_mode", T::kString,
     "af_xdp: how the XDP program is attached: native (in the driver), skb (generic, any interface) or "
     "auto (native, else skb)",
     "auto"},
    {"qdisc_bypass", T::kBool,
     "af_packet: frames skip the interface's queueing discipline (PACKET_QDISC_BYPASS): less kernel work "
     "per frame, but no traffic shaping (tc) applies to them, and sockets from the pmethd broker then "
     "send nothing (its egress check runs after the qdisc; ignored for them)",
     "0"},
    {"gso", T::kBool,
     "af_packet: a run of full frames to one peer leaves as one UDP/IPv4 packet that the kernel or the NIC "
     "cuts into one frame per segment (generic segmentation offload), and such packets are taken apart "
     "on receipt: one system call and one kernel pass per run instead of per frame. Frames then carry 42 "
     "bytes of IPv4/UDP headers (source 0.0.0.0, destination 239.255.136.181, which IP stacks refuse; ports the EtherType), so the payload per frame is that "
     "much smaller. Needs Linux 6.2 or later (UDP segmentation for packet sockets; refused by an older "
     "kernel, frames then go one by one); not for sockets from the pmethd broker, nor where a packet of "
     "64 KiB holds fewer than two frames (lo)",
     "1"},
    {"xdp_queue", T::kInt, "af_xdp: the receive queue of the interface the socket binds to", "0"},
    {"xdp_zerocopy", T::kBool, "af_xdp: require zero-copy (the driver's support); otherwise the kernel picks",
     "0"},
    {"busy_poll_us", T::kInt,
     "af_xdp: SO_BUSY_POLL/SO_PREFER_BUSY_POLL on the socket, and an empty receive poll drives the "
     "driver's NAPI (a recvfrom); 0: off",
     "0"},
    {"ethertype", T::kInt, "EtherType of pmeth frames (0x88B5 = 34997, IEEE local experimental)", "34997"},
    {"window", T::kSize, "frames in flight per peer before the sender waits for acknowledgements", "128"},
    {"bundle", T::kBool,
     "small packets sent to one peer before the provider kicks the wire (FI_MORE, or sends queued "
     "behind a full window) share one frame (the seed's network burst)",
     "1"},
    {"wire_rndv_threshold", T::kSize,
     "messages to peers reached over Ethernet above this many bytes use rendezvous (RTS, CTS, then the "
     "data); at most 1048576, the limit of an eager message. Over the wire a rendezvous saves no copy and "
     "costs a round trip; it spares the receiver buffering an unexpected message whole (unexp_cap_kb "
     "bounds that memory: from a quarter of it the receiver asks such senders for rendezvous, at the cap "
     "they wait). rndv_threshold applies to peers reached through shared memory",
     "262144"},
    {"ack_every", T::kSize, "frames received before an acknowledgement is sent at once (at most half of window)", "64"},
    {"delayed_ack_us", T::kInt,
     "longest wait for traffic back to carry an acknowledgement before one is sent alone", "50"},
    {"echo_hold", T::kBool,
     "frames say how long their sender held the frame whose timestamp they echo (from the kernel's "
     "receive time), and round-trip samples take it out and end at the echo's kernel arrival: descheduled "
     "peers do not inflate round trips; the RTO adds the peer's recent maximum hold",
     "1"},
    {"tail_recovery", T::kBool,
     "after a retransmission timeout, the frames sent after the resent one are resent as soon as its "
     "acknowledgement comes back, unless that shows the timeout was spurious (0: one frame per timeout)",
     "1"},
    {"rto_init_us", T::kInt, "retransmission timeout before the round trip is measured", "2000"},
    {"rto_min_us", T::kInt, "lower bound of the retransmission timeout", "200"},
    {"rto_max_us", T::kInt, "upper bound of the retransmission timeout (and of its backoff)", "1000000"},
    {"retries", T::kInt,
     "retransmissions of a frame (with exponential backoff up to rto_max_us) before the peer may be "
     "declared unreachable; it is declared so only when, in addition, nothing was heard from it for "
     "dead_ms",
     "40"},
    {"dead_ms", T::kInt,
     "a peer is declared unreachable only after this long without any frame from it while frames or "
     "probes to it go unanswered (a slow or stopped peer that answers later is never declared dead "
     "before); an unreachable peer that is heard again gets a new session",
     "60000"},
    {"auth", T::kBool,
     "authenticate every frame with a keyed MAC (SipHash-2-4) under the job's key, derived from "
     "auth_key (hints, domain or endpoint attributes), else FI_PMETH_JOB_SECRET, else the launcher's "
     "per-job secret (Open MPI's OMPI_MCA_orte_precondition_transports), else a well-known default key "
     "(isolates jobs, protects nothing: info-level log). Frames without a valid MAC are dropped before "
     "any state exists for their sender",
     "1"},
    {"payload_mac", T::kBool,
     "with auth and a key other than the default one: the MAC also covers each frame's payload through "
     "a keyed hash (NH, 2^-64 collisions), not only through the frame sum, which someone who sees a frame "
     "can keep while altering its payload (the checksum then covers the header only). Costs two "
     "multiplies per 8 bytes on both sides; must be the same on every peer",
     "1"},
    {"job_secret", T::kString,
     "the job's secret when no auth_key is given: every process of the job must have the same", ""},
    {"drop_rate", T::kString, "fault injection: probability (0..1) that a received frame is dropped", "0"},
    {"checksum", T::kBool, "CRC32C over every frame (raw frames bypass the UDP/TCP checksums)", "1"},
    {"rx_ring_kb", T::kSize, "AF_PACKET receive ring size per endpoint, KiB", "4096"},
    {"tx_ring_kb", T::kSize, "AF_PACKET transmit ring size per endpoint, KiB", "1024"},
    {"host_id", T::kString, "override of the host id (hex) that names this machine in addresses (tests)", ""},
    {"iface_cache_ms", T::kInt,
     "how long fi_getinfo reuses its scan of the interfaces, in ms (0: scan on every call); a change of "
     "FI_PMETH_IFACE, _BACKEND, _WIRE, _TX_SIZE or _RX_SIZE rescans at once",
     "1000"},
    {"broker", T::kString,
     "without CAP_NET_RAW: the pmethd broker to ask for raw sockets (a Unix socket path, or @name for an "
     "abstract one; empty: none). It gives AF_PACKET sockets only (pmethd(8))",
     "/run/pmethd.sock"},
    {"resolve_ms", T::kInt,
     "fi_getinfo with a node: how long to wait for the kernel to resolve the peer's IPv4 address to its MAC "
     "(ARP) when the neighbour table has no entry",
     "1000"},
};

constexpr uint32_t kProvVersion = FI_VERSION(1, 0);

bool loopback_backend() { return g_params.get_string("backend") == "loopback"; }

// GSO mode's outer headers take this much of each frame (packet_wire.cpp):
// what fi_info offers per frame is smaller by as much.
size_t gso_headers() { return g_params.get_bool("gso") ? kGsoOuter : 0; }

// FI_PMETH_WIRE, or loopback under FI_PMETH_BACKEND=loopback.
bool wire_kind(WireKind* k, std::string* why) {
  if (loopback_backend()) {
    *k = WireKind::kLoop;
    return true;
  }
  std::string s = g_params.get_string("wire");
  if (parse_wire_kind(s, k) && *k != WireKind::kLoop) return true;
  *why = "FI_PMETH_WIRE=" + s + " is not one of auto, af_packet, af_xdp, verbs";
  return false;
}

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
// loopback backend, in-process segments of those names. Why an interface
// was left out goes to *notes (logged at info level).
std::vector<Iface> describe_ifaces(const std::string& list, std::vector<std::string>* notes) {
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
  for (const std::string& s : skipped) notes->push_back("interface " + s);
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

// The job's key: from auth_key (endpoint attributes first, then the
// domain's), else the job_secret knob, else a launcher's per-job secret,
// else the default key. `where` says which, for the log.
AuthKey job_auth_key(const fi_info& info, const char** where) {
  if (info.ep_attr && info.ep_attr->auth_key && info.ep_attr->auth_key_size) {
    *where = "the endpoint's auth_key";
    return derive_key(info.ep_attr->auth_key, info.ep_attr->auth_key_size);
  }
  if (info.domain_attr && info.domain_attr->auth_key && info.domain_attr->auth_key_size) {
    *where = "the domain's auth_key";
    return derive_key(info.domain_attr->auth_key, info.domain_attr->auth_key_size);
  }
  std::string secret = g_params.get_string("job_secret");
  if (!secret.empty()) {
    *where = "FI_PMETH_JOB_SECRET";
    return derive_key(secret.data(), secret.size());
  }
  if (const char* ompi = getenv("OMPI_MCA_orte_precondition_transports")) {
    *where = "the Open MPI job's secret";
    return derive_key(ompi, strlen(ompi));
  }
  *where = "the default key (no auth_key or job secret: jobs are kept apart, but not against an attacker)";
  return derive_key(nullptr, 0);
}

// A name as src_addr carries it: as a peer's name, but the endpoint id may be
// 0 ("any": the endpoint draws one).
bool decode_src(const void* addr, size_t len, EthName* n) {
  if (!addr || len != kNameLen) return false;
  uint8_t b[kNameLen];
  memcpy(b, addr, kNameLen);
  uint32_t id = get32(b + 8);
  if (id == 0) put32(b + 8, 1);
  if (!decode_name(b, kNameLen, n)) return false;
  n->ep_id = id;
  return true;
}

// This domain's own name without an endpoint id: its rails' MACs (from the
// fi_info's NIC) and this host.
EthName domain_name(const fi_info& info, std::vector<std::string>* rails) {
  *rails = split(info.domain_attr->name, '+');
  EthName n;
  n.host = this_host();
  n.rails = uint8_t(std::min(rails->size(), kMaxRails));
  if (info.nic && info.nic->link_attr && info.nic->link_attr->address) {
    std::vector<std::string> macs = split(info.nic->link_attr->address, '+');
    for (size_t r = 0; r < macs.size() && r < n.rails; r++) parse_mac(macs[r], n.mac[r]);
  }
  return n;
}

// FI_SOURCE with a node: the node must name this domain: one of its
// interfaces (by name, MAC, or an IP address assigned to it).
bool node_on_domain(const char* node, const std::vector<std::string>& rails, const EthName& self,
                    std::string* why) {
  uint8_t mac[6];
  for (size_t r = 0; r < rails.size(); r++)
    if (rails[r] == node || (parse_mac(node, mac) && r < self.rails && !memcmp(mac, self.mac[r], 6)))
      return true;
  std::vector<IpAddr> addrs;
  if (!resolve_node(node, &addrs, why)) return false;
  std::vector<IfAddr> locals = local_addrs();
  for (const IpAddr& a : addrs)
    for (const std::string& r : rails) {
      if (r == "lo" && is_local(a, {})) return true;
      for (const IfAddr& l : locals)
        if (l.iface == r && l.addr == a) return true;
    }
  *why = std::string("node \"") + node + "\" (" + addrs[0].str() + ") is not an address of " + join(rails, '+');
  return false;
}

// A destination node: this host (a local address: the peer is reached on
// this domain's own MAC, or through shared memory) or a neighbour on the
// first rail's subnets (its MAC from the neighbour table). false with *why.
bool resolve_dest(const char* node, const std::vector<std::string>& rails, bool* local, uint8_t mac[6],
                  std::string* why) {
  *local = false;
  if (!node) {
    *local = true;
    return true;
  }
  std::vector<IpAddr> addrs;
  if (!resolve_node(node, &addrs, why)) return false;
  std::vector<IfAddr> locals = loopback_backend() ? std::vector<IfAddr>{} : local_addrs();
  for (const IpAddr& a : addrs)
    if (is_local(a, locals)) {
      *local = true;
      return true;
    }
  std::string nets;
  for (const IpAddr& a : addrs)
    for (const IfAddr& l : locals) {
      if (l.iface != rails[0]) continue;
      if (in_subnet(a, l)) return neighbour_mac(rails[0], a, int(g_params.get_int("resolve_ms")), mac, why);
      if (a.family == l.addr.family) nets += " " + l.addr.str() + "/" + std::to_string(l.prefix);
    }
  *why = std::string("node \"") + node + "\" (" + addrs[0].str() + ") is neither this host nor on a subnet of " +
         rails[0] + (nets.empty() ? std::string(" (it has no IP address)") : " (" + nets.substr(1) + ")") +
         "; pmeth frames are not routed";
  return false;
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

  // docs/fi_pmeth.7.md, "Addressing by node and service".
  bool set_addrs(fi_info& info, const AddrRequest& req, std::string* why) override {
    std::vector<std::string> rails;
    EthName self = domain_name(info, &rails);
    EthName src = self;
    if (req.source) {
      if (req.node && !node_on_domain(req.node, rails, self, why)) return false;
      src.ep_id = req.svc;
    } else if (req.hints && req.hints->src_addr) {
      if (!decode_src(req.hints->src_addr, req.hints->src_addrlen, &src) || memcmp(src.mac[0], self.mac[0], 6)) {
        *why = "hints->src_addr is not a pmeth address of " + std::string(info.domain_attr->name);
        return false;
      }
    }
    uint8_t bytes[kNameLen];
    encode_name(bytes, src);
    if (!set_info_addr(&info.src_addr, &info.src_addrlen, bytes, kNameLen)) return false;
    if (req.dest()) {
      EthName d;  // host 0: not known from an IP address (the handshake tells)
      d.ep_id = req.svc;
      bool local = false;
      if (!resolve_dest(req.node, rails, &local, d.mac[0], why)) return false;
      if (local) {
        memcpy(d.mac[0], self.mac[0], 6);
        // On this host: with the composite device, the endpoint of this
        // service has a well-known shared-memory region, reached that way.
        // Not with FI_PMETH_HOST_ID: one machine then stands in for several
        // hosts, and an address of it does not tell which one.
        if (req.svc && info.ep_attr->type == FI_EP_RDM && (info.caps & FI_LOCAL_COMM) && g_params.get_bool("shm") &&
            g_params.get_string("host_id").empty()) {
          d.host = self.host;
          d.has_shm = true;
          d.shm_uid = getuid();
          d.shm_key = shm::pmeth_service_key(d.host, req.svc);
        }
      }
      encode_name(bytes, d);
      return set_info_addr(&info.dest_addr, &info.dest_addrlen, bytes, kNameLen);
    }
    if (req.hints && req.hints->dest_addr) {
      EthName d;
      if (!decode_name(req.hints->dest_addr, req.hints->dest_addrlen, &d)) {
        *why = "hints->dest_addr is not a pmeth address";
        return false;
      }
      return set_info_addr(&info.dest_addr, &info.dest_addrlen, req.hints->dest_addr, kNameLen);
    }
    return true;
  }

  size_t packet_size(const fi_info& info) const override {
    size_t mtu = (info.nic && info.nic->link_attr ? info.nic->link_attr->mtu : 1500) - gso_headers();
    // A frame's pmeth header and the core header's longest encoding: what
    // the device's max_payload() leaves (an atomic's count, ep_rma.cpp).
    constexpr size_t hdrs = kPmHdr + kCoreHdr;
    return mtu > hdrs + 64 ? mtu - hdrs : 64;
  }

  // The interface scan is cached: fi_getinfo is called often (MPI
  // start-up, every fabtests case), and reading sysfs and hwloc each time
  // costs. The cache lasts iface_cache_ms, and any change of the knobs the
  // templates depend on rescans at once. Its info-level notes (why an
  // interface was left out) are logged on every call.
  fi_info* templates(std::string* why) override {
    WireKind kind;
    if (!wire_kind(&kind, why)) return nullptr;
    std::string allowed;  // interfaces the broker lets this user have (empty: no broker in use)
    if (kind != WireKind::kLoop) {
      std::string no = packet_socket_unavailable();
      if (!no.empty()) {
        std::string path = g_params.get_string("broker"), bno;
        std::vector<std::string> ok;
        if (path.empty()) {
          *why = no + " (and FI_PMETH_BROKER is empty: no pmethd broker to ask)";
          return nullptr;
        }
        if (broker_list(path, &ok, &bno) != 0) {
          *why = no + "; " + bno;
          return nullptr;
        }
        if (kind == WireKind::kXdp || kind == WireKind::kVerbs) {
          *why = no + ", and the pmethd broker gives AF_PACKET sockets only (FI_PMETH_WIRE=" +
                 g_params.get_string("wire") + ")";
          return nullptr;
        }
        allowed = join(ok, ',');
        PM_INFO(FI_LOG_CORE, "%s: the pmethd broker at %s gives this user raw sockets on %s", no.c_str(),
                path.c_str(), allowed.c_str());
      }
    }
    if (kind == WireKind::kVerbs || kind == WireKind::kAuto) {
      std::string none;
      if (!verbs_raw_device_present(&none)) {
        if (kind == WireKind::kVerbs) {
          *why = "FI_PMETH_WIRE=verbs: " + none;
          return nullptr;
        }
        PM_INFO(FI_LOG_CORE, "no verbs raw-packet wire: %s", none.c_str());
      }
    }
    std::string key = g_params.get_string("iface") + '\n' + g_params.get_string("backend") + '\n' +
                      g_params.get_string("wire") + '\n' + allowed + '\n' +
                      std::to_string(g_params.get_size("tx_size")) + '\n' +
                      std::to_string(g_params.get_size("rx_size"));
    uint64_t ttl = uint64_t(std::max(0LL, g_params.get_int("iface_cache_ms"))) * 1000000ull;
    std::lock_guard<std::mutex> g(cache_mu_);
    uint64_t now = now_ns();
    if (!cache_built_ || key != cache_key_ || now - cache_time_ >= ttl) {
      fi_freeinfo(cache_);
      cache_notes_.clear();
      cache_why_.clear();
      cache_ = build_templates(allowed, &cache_why_, &cache_notes_);
      cache_key_ = key;
      cache_time_ = now;
      cache_built_ = true;
    }
    for (const std::string& n : cache_notes_) PM_INFO(FI_LOG_CORE, "%s", n.c_str());
    if (!cache_) {
      *why = cache_why_;
      return nullptr;
    }
    fi_info* head = nullptr;
    fi_info** tail = &head;
    for (const fi_info* t = cache_; t; t = t->next) {
      fi_info* c = fi_dupinfo(t);
      if (!c) {
        fi_freeinfo(head);
        *why = "out of memory";
        return nullptr;
      }
      c->next = nullptr;
      *tail = c;
      tail = &c->next;
    }
    return head;
  }

  // allowed: the interfaces the broker gives this user (empty: any).
  fi_info* build_templates(const std::string& allowed, std::string* why, std::vector<std::string>* notes) {
    // Entries a+b+.. name trunks; other entries single interfaces, of which
    // two or more also make one trunk of the first kMaxRails.
    std::vector<std::string> singles, trunk_lists;
    for (const std::string& e : split(g_params.get_string("iface"), ','))
      (e.find('+') != std::string::npos ? trunk_lists : singles).push_back(e);
    bool named = !singles.empty() || !trunk_lists.empty();
    std::vector<std::string> permitted = split(allowed, ',');
    auto refused = [&](const std::string& name) {
      if (allowed.empty() || std::find(permitted.begin(), permitted.end(), name) != permitted.end()) return false;
      notes->push_back(name + ": the pmethd broker does not give this user sockets on it");
      return true;
    };
    std::vector<Iface> ifaces;
    if (!named || !singles.empty()) ifaces = describe_ifaces(join(singles, ','), notes);
    std::erase_if(ifaces, [&](const Iface& i) { return refused(i.name); });
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
      if (std::any_of(names.begin(), names.end(), refused)) continue;
      std::vector<Iface> rails = describe_ifaces(join(names, ','), notes);
      if (rails.size() != names.size() || rails.size() > kMaxRails) {
        notes->push_back("trunk " + t + ": needs 2 to " + std::to_string(kMaxRails) + " usable interfaces");
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
      size_t payload = i.nic.mtu - kPmHdr - kCoreHdr - gso_headers();  // the device's max_payload()
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
    // An fi_info from fi_getinfo(FI_SOURCE, service s) names the endpoint of
    // id s: it takes that id on every rail unless another endpoint holds it.
    std::string domain = info.domain_attr->name;
    EthName src;
    std::vector<UniqueFd> claims;
    if (decode_src(info.src_addr, info.src_addrlen, &src) && is_service_id(src.ep_id)) {
      for (const std::string& r : split(domain, '+')) {
        claims.push_back(claim_service_id(r, src.ep_id));
        if (claims.back()) continue;
        PM_INFO(FI_LOG_EP_CTRL, "service %u is held by another endpoint on %s; this one gets an id of its own",
                src.ep_id, r.c_str());
        claims.clear();
        break;
      }
    }
    if (!claims.empty()) {
      wc.ep_id = src.ep_id;
    } else {
      do {
        if (getrandom(&wc.ep_id, sizeof wc.ep_id, 0) != sizeof wc.ep_id) wc.ep_id = uint32_t(getpid()) << 16;
      } while (wc.ep_id <= kMaxServiceId);
    }
    wc.rx_ring_bytes = g_params.get_size("rx_ring_kb") * 1024;
    wc.tx_ring_bytes = g_params.get_size("tx_ring_kb") * 1024;
    wc.broker = g_params.get_string("broker");
    WireKind kind;
    std::string bad;
    if (!wire_kind(&kind, &bad) || !parse_xdp_mode(g_params.get_string("xdp_mode"), &wc.xdp_mode)) {
      PM_WARN(FI_LOG_EP_CTRL, "%s", bad.empty() ? "FI_PMETH_XDP_MODE is not one of auto, native, skb" : bad.c_str());
      *err = -FI_EINVAL;
      return nullptr;
    }
    wc.xdp_queue = uint32_t(std::max<int64_t>(g_params.get_int("xdp_queue"), 0));
    wc.xdp_zerocopy = g_params.get_bool("xdp_zerocopy");
    wc.busy_poll_us = unsigned(std::max<int64_t>(g_params.get_int("busy_poll_us"), 0));
    wc.qdisc_bypass = g_params.get_bool("qdisc_bypass");
    // Not the loopback wire's test mode of it (wire/loop_wire.hpp).
    wc.gso = g_params.get_bool("gso") && kind != WireKind::kLoop;
    // One wire per rail: the domain name is an interface, or a trunk a+b+...
    std::vector<std::unique_ptr<Wire>> rails;
    for (size_t start = 0; start <= domain.size();) {
      size_t plus = domain.find('+', start);
      wc.iface = domain.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      std::string why, notes;
      std::unique_ptr<Wire> wire = open_wire(wc, kind, err, &why, &notes);
      if (!wire) {
        PM_WARN(FI_LOG_EP_CTRL, "cannot open %s on %s: %s", wire_kind_name(kind), wc.iface.c_str(), why.c_str());
        return nullptr;
      }
      if (!notes.empty())
        PM_INFO(FI_LOG_EP_CTRL, "%s: wire %s (%s)", wc.iface.c_str(), wire->kind(), notes.c_str());
      rails.push_back(std::move(wire));
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    DeviceConfig dc;
    dc.ethertype = wc.ethertype;
    const char* key_from = "";
    dc.key = job_auth_key(info, &key_from);
    dc.job = job_id(dc.key);
    dc.auth = g_params.get_bool("auth");
    {
      AuthKey d = derive_key(nullptr, 0);
      dc.payload_mac = dc.auth && g_params.get_bool("payload_mac") && (dc.key.k0 != d.k0 || dc.key.k1 != d.k1);
    }
    dc.dead_ms = uint32_t(std::max<int64_t>(g_params.get_int("dead_ms"), 0));
    PM_INFO(FI_LOG_EP_CTRL, "frames %s; key from %s", dc.auth ? (dc.payload_mac ? "authenticated, payloads included"
                                                                             : "authenticated (payloads through the frame sum only)")
                                                               : "NOT authenticated", key_from);
    dc.host = this_host();
    dc.reliable = info.ep_attr->type == FI_EP_RDM;
    dc.window = uint32_t(g_params.get_size("window"));
    // At most half the window: a sender that fills its window before the
    // receiver's ACK is due would wait for the delayed ACK every window.
    dc.ack_every = uint32_t(std::clamp<size_t>(g_params.get_size("ack_every"), 1, std::max<size_t>(1, dc.window / 2)));
    dc.delayed_ack_us = uint32_t(g_params.get_int("delayed_ack_us"));
    dc.rto_init_us = uint32_t(g_params.get_int("rto_init_us"));
    dc.rto_min_us = uint32_t(g_params.get_int("rto_min_us"));
    dc.rto_max_us = uint32_t(g_params.get_int("rto_max_us"));
    dc.retries = uint32_t(g_params.get_int("retries"));
    dc.drop_rate = atof(g_params.get_string("drop_rate").c_str());
    dc.checksum = g_params.get_bool("checksum");
    dc.rndv_threshold = g_params.get_size("wire_rndv_threshold");
    dc.bundle = g_params.get_bool("bundle");
    dc.echo_hold = g_params.get_bool("echo_hold");
    dc.tail_recovery = g_params.get_bool("tail_recovery");
    std::unique_ptr<EthDevice> eth = EthDevice::open(dc, std::move(rails), wc.ep_id, err);
    if (!eth) return nullptr;
    eth->keep_claims(std::move(claims));
    // FI_LOCAL_COMM / FI_REMOTE_COMM are secondary capabilities: caps that
    // name neither still get the best path to every peer. Only an info that
    // names remote communication without local turns shared memory off.
    bool remote_only = (info.caps & FI_REMOTE_COMM) && !(info.caps & FI_LOCAL_COMM);
    if (!dc.reliable || remote_only || !g_params.get_bool("shm")) return eth;
    shm::DeviceConfig sc = shm::DeviceConfig::defaults();
    sc.claim_timeout_ms = int(g_params.get_int("peer_timeout_ms"));
    sc.cma_fault = shm::parse_cma_fault(g_params.get_string("cma_fault"));
    // A well-known endpoint has a well-known region, so that a client that
    // knows only this host and the service reaches it (set_addrs).
    uint64_t key = is_service_id(wc.ep_id) ? shm::pmeth_service_key(dc.host, wc.ep_id) : 0;
    std::unique_ptr<shm::ShmDevice> shm = shm::ShmDevice::open(sc, dc.host, err, key);
    if (!shm && *err == -FI_EADDRINUSE) {
      PM_INFO(FI_LOG_EP_CTRL, "the shared-memory region of service %u is held by another endpoint (in another "
              "network namespace); same-host peers reach this one only by its full name", wc.ep_id);
      shm = shm::ShmDevice::open(sc, dc.host, err);
    }
    if (!shm) {
      PM_WARN(FI_LOG_EP_CTRL, "no shared-memory path for same-host peers (%s); they go through Ethernet",
              fi_strerror(-*err));
      *err = 0;
      return eth;
    }
    return CompositeDevice::open(std::move(eth), std::move(shm), err);
  }

 private:
  std::mutex cache_mu_;
  bool cache_built_ = false;
  fi_info* cache_ = nullptr;  // the templates, or nullptr with cache_why_
  std::string cache_why_, cache_key_;
  std::vector<std::string> cache_notes_;
  uint64_t cache_time_ = 0;
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
