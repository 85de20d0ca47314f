#include "abi/api_version.hpp"

#include <cstdio>

#include "base/log.hpp"

namespace pm {

uint32_t provider_api_version() {
  uint32_t running = fi_version();
  if (running < kApiVersionBuilt) {
    // Loud whatever FI_LOG_LEVEL says: without it the provider would just be
    // missing from fi_info. The core ignores a provider reporting API 0.0.
    fprintf(stderr,
            "%s: built against libfabric %u.%u headers, cannot run in libfabric %u.%u (this process's); "
            "build it against the oldest libfabric it is to be loaded into\n",
            g_prov && g_prov->name ? g_prov->name : "pmfabric provider", FI_MAJOR(kApiVersionBuilt),
            FI_MINOR(kApiVersionBuilt), FI_MAJOR(running), FI_MINOR(running));
    return 0;
  }
  uint32_t reported = api_version_for(running);
  if (running > kApiVersionMax)
    PM_WARN(FI_LOG_CORE,
            "libfabric %u.%u is newer than the newest API this provider is tested with (%u.%u): it "
            "reports %u.%u, so applications asking for API %u.%u do not see it",
            FI_MAJOR(running), FI_MINOR(running), FI_MAJOR(kApiVersionMax), FI_MINOR(kApiVersionMax),
            FI_MAJOR(reported), FI_MINOR(reported), FI_MAJOR(running), FI_MINOR(running));
  return reported;
}

}  // namespace pm
