// Logging over libfabric's fi_log, so FI_LOG_LEVEL / FI_LOG_SUBSYS work.
// Every DSO links its own copy of util, so the provider pointer is per DSO.
#pragma once

#include <rdma/fabric.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

namespace pm {

// The provider this copy of the core serves; set once in fi_prov_ini.
extern const fi_provider* g_prov;

// Formats one line (the newline is added here) and hands it to fi_log.
void log_line(fi_log_level level, fi_log_subsys subsys, const char* func, int line,
              const char* fmt, ...) __attribute__((format(printf, 5, 6)));

} // namespace pm

#define PM_LOG(level, subsys, ...)                                              \
  do {                                                                          \
    if (::pm::g_prov && fi_log_enabled(::pm::g_prov, level, subsys))            \
      ::pm::log_line(level, subsys, __func__, __LINE__, __VA_ARGS__);           \
  } while (0)

#define PM_WARN(subsys, ...) PM_LOG(FI_LOG_WARN, subsys, __VA_ARGS__)
#define PM_INFO(subsys, ...) PM_LOG(FI_LOG_INFO, subsys, __VA_ARGS__)
#ifdef NDEBUG
#define PM_DBG(subsys, ...) do {} while (0)
#else
#define PM_DBG(subsys, ...) PM_LOG(FI_LOG_DEBUG, subsys, __VA_ARGS__)
#endif
