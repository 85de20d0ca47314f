// FI_PMETH_WIRE: which backend an endpoint's rail gets, and the fallbacks
// of auto (each backend passed over is named with its reason).
#include <rdma/fi_errno.h>

#include "wire/wire.hpp"

namespace pm::eth {

const char* wire_kind_name(WireKind k) {
  switch (k) {
    case WireKind::kAuto: return "auto";
    case WireKind::kPacket: return "af_packet";
    case WireKind::kXdp: return "af_xdp";
    case WireKind::kVerbs: return "verbs";
    case WireKind::kLoop: return "loopback";
  }
  return "?";
}

bool parse_wire_kind(const std::string& s, WireKind* k) {
  for (WireKind c : {WireKind::kAuto, WireKind::kPacket, WireKind::kXdp, WireKind::kVerbs, WireKind::kLoop})
    if (s == wire_kind_name(c)) {
      *k = c;
      return true;
    }
  return false;
}

bool parse_xdp_mode(const std::string& s, XdpMode* m) {
  if (s == "auto") *m = XdpMode::kAuto;
  else if (s == "native" || s == "drv") *m = XdpMode::kNative;
  else if (s == "skb" || s == "generic") *m = XdpMode::kSkb;
  else return false;
  return true;
}

std::unique_ptr<Wire> open_wire(const WireConfig& cfg, WireKind k, int* err, std::string* why,
                                std::string* notes) {
  switch (k) {
    case WireKind::kPacket: return open_packet_wire(cfg, err, why);
    case WireKind::kXdp: return open_xdp_wire(cfg, err, why);
    case WireKind::kVerbs: return open_verbs_wire(cfg, err, why);
    case WireKind::kLoop: return open_loop_wire(cfg, err, why);
    case WireKind::kAuto: break;
  }
  auto note = [&](const char* what, const std::string& reason) {
    *notes += std::string(notes->empty() ? "" : "; ") + what + " not used: " + reason;
  };
  std::string reason;
  int e = 0;
  if (std::unique_ptr<Wire> w = open_verbs_wire(cfg, &e, &reason)) return w;
  note("verbs", reason);
  reason.clear();
  WireConfig xc = cfg;
  xc.xdp_single_chunk = !cfg.xdp_zerocopy;
  if (std::unique_ptr<Wire> w = open_xdp_wire(xc, &e, &reason)) return w;
  note("af_xdp", reason);
  return open_packet_wire(cfg, err, why);
}

}  // namespace pm::eth
