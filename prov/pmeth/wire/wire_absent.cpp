// The backends this build was configured without (CMake says which): they
// refuse with -FI_ENOSYS and say so.
#include <rdma/fi_errno.h>

#include "wire/wire.hpp"

namespace pm::eth {

#ifndef PM_HAVE_XDP
bool xdp_wire_built() { return false; }
std::unique_ptr<Wire> open_xdp_wire(const WireConfig&, int* err, std::string* why) {
  *err = -FI_ENOSYS;
  *why = "this build has no AF_XDP backend (libxdp-dev, libbpf-dev or clang were missing)";
  return nullptr;
}
#endif

#ifndef PM_HAVE_VERBS
bool verbs_wire_built() { return false; }
std::unique_ptr<Wire> open_verbs_wire(const WireConfig&, int* err, std::string* why) {
  *err = -FI_ENOSYS;
  *why = "this build has no verbs backend (libibverbs-dev was missing)";
  return nullptr;
}
bool verbs_raw_device_present(std::string* why) {
  *why = "this build has no verbs backend (libibverbs-dev was missing)";
  return false;
}
#endif

}  // namespace pm::eth
