#include "base/log.hpp"

#include <cstdarg>
#include <cstdio>

namespace pm {

void log_line(fi_log_level level, fi_log_subsys subsys, const char* func, int line,
              const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fi_log(g_prov, level, subsys, func, line, "%s\n", buf);
}

} // namespace pm
