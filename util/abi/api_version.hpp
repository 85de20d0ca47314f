// Which libfabric API version the providers report, and the constants the
// 2.0 headers deprecate. One source tree builds against libfabric 1.17 ...
// 2.x headers. A DSO runs in the libfabric it was built against and in any
// newer one (the core keeps the older fi_info ABI for it); loaded by an older
// one, it refuses to register and says so on stderr (abi/symver.h lets it get
// that far).
#pragma once

#include <cstdint>

#include <rdma/fabric.h>

namespace pm {

// The newest libfabric API this tree is built and tested against (CI runs
// libfabric 2.6's fi_info and fi_pingpong against the DSOs built for 1.17,
// and builds the DSOs against 2.6's headers). Raise it after testing a newer
// release.
inline constexpr uint32_t kApiVersionMax = FI_VERSION(2, 6);

// The API of the headers this DSO is compiled with.
inline constexpr uint32_t kApiVersionBuilt = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

// fi_provider.fi_version for a core whose fi_version() is `running`: the API
// of the libfabric that loaded the DSO, so that applications asking that
// core's own API (fi_info, fi_pingpong, MPICH pass FI_VERSION of their
// headers) are offered the provider; capped at kApiVersionMax.
constexpr uint32_t api_version_for(uint32_t running) {
  return running < kApiVersionMax ? running : kApiVersionMax;
}

// api_version_for(fi_version()), with a warning when the running core is
// newer than kApiVersionMax (applications asking for its newer API do not see
// the provider). A core older than the headers is refused: a line on stderr,
// and 0, which the core rejects (it ignores providers below API 1.3).
// Calls only fi_version() and fi_log, which fi_prov_ini may call: fi_version
// returns a constant and takes no lock (the core holds its init lock
// meanwhile; fi_getinfo would deadlock on it).
uint32_t provider_api_version();

// Applications asking for an API below 1.5 pass the memory registration modes
// of that API, and the 1.x templates use FI_ORDER_NONE. libfabric 2.0
// deprecates these names (a compiler warning at every use) without changing
// their values, which are part of the ABI.
#if FI_MAJOR_VERSION >= 2
inline constexpr int kMrUnspec = 0;
inline constexpr int kMrBasic = 1 << 0;
inline constexpr int kMrScalable = 1 << 1;
inline constexpr uint64_t kOrderNone = 0;
#else
inline constexpr int kMrUnspec = FI_MR_UNSPEC;
inline constexpr int kMrBasic = FI_MR_BASIC;
inline constexpr int kMrScalable = FI_MR_SCALABLE;
inline constexpr uint64_t kOrderNone = FI_ORDER_NONE;
#endif

}  // namespace pm
