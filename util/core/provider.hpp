// What a provider adds to the shared core: its name, its fi_info templates
// and its device. Everything else (objects, semantics, progress) is core.
#pragma once

#include <memory>
#include <string>

#include <rdma/fabric.h>
#include <rdma/providers/fi_prov.h>

#include "base/param.hpp"
#include "device.hpp"

namespace pm {

class Domain;

// What fi_getinfo's node, service and flags ask for, for one call.
struct AddrRequest {
  const char* node = nullptr;     // a host name or address; nullptr: none
  const char* service = nullptr;  // as given
  uint32_t svc = 0;               // the service as a number (0: none)
  bool source = false;            // FI_SOURCE: node/service name the local address
  const fi_info* hints = nullptr; // src_addr / dest_addr the application passes
  // node or service name a destination
  bool dest() const { return !source && (node || svc); }
};

class ProviderDef {
 public:
  virtual ~ProviderDef() = default;
  virtual const char* name() const = 0;
  // The provider's fi_info templates, one per domain it offers; nullptr
  // (with *why set) when nothing is usable on this machine.
  virtual fi_info* templates(std::string* why) = 0;
  // Opens the device an endpoint of `info` runs on; nullptr, *err set, on failure.
  virtual std::unique_ptr<Device> open_device(Domain& dom, const fi_info& info, int* err) = 0;
  // The largest packet a device of this fi_info carries (bounds atomics).
  virtual size_t packet_size(const fi_info& info) const = 0;
  // Whether bytes are a well-formed name of this provider, and a readable form.
  virtual size_t name_len() const = 0;
  virtual bool name_valid(const void* name, size_t len) const = 0;
  virtual std::string name_str(const void* name, size_t len) const = 0;
  // Addresses of one returned fi_info (already shaped after the hints):
  // sets its src_addr (always) and, when the request names a destination
  // or the hints carry one, its dest_addr. false, with *why, when this
  // domain cannot serve the request (the entry is then left out).
  virtual bool set_addrs(fi_info& info, const AddrRequest& req, std::string* why) { return true; }
};

// Gives an fi_info address field a malloc'ed copy of `len` bytes (the core
// frees them with free()); false when out of memory.
bool set_info_addr(void** field, size_t* field_len, const void* addr, size_t len);

extern ProviderDef* g_provdef;

// Fills `prov` (name, versions, getinfo/fabric/cleanup) and registers the
// core's knobs and then the provider's (`specs`) under the provider's prefix.
void init_fi_provider(fi_provider* prov, ProviderDef* def, uint32_t version, const ParamSpec* specs,
                      size_t nspecs);

} // namespace pm
