// Test helper: closes an fabtests Endpoint and returns what the provider
// logged meanwhile (its statistics at close, with FI_<PROV>_STATS=1 and
// FI_LOG_LEVEL=warn), captured from stderr and echoed into the test's log.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "ft_fabric.h"

inline std::string close_and_read_stats(std::unique_ptr<ft::Endpoint>& ep) {
    char path[] = "/tmp/pm_ep_stats_XXXXXX";
    int fd = mkstemp(path);
    FT_CHECK(fd >= 0, "mkstemp: %s", std::strerror(errno));
    unlink(path);
    std::fflush(stderr);
    int saved = dup(2);
    FT_CHECK(saved >= 0 && dup2(fd, 2) == 2, "redirecting stderr: %s", std::strerror(errno));
    ep.reset();
    std::fflush(stderr);
    dup2(saved, 2);
    ::close(saved);
    std::string text;
    char buf[4096];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, (size_t)n);
    ::close(fd);
    std::fputs(text.c_str(), stderr);  // kept in the test's log
    return text;
}
