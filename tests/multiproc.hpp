// What the tests' multi-process programs (cluster_xfer, peer_mem_bench)
// share: a failure that names the process and exits 1, one deadline for
// every wait, and a rendezvous through files in a directory (written to a
// temporary name, then renamed, so a reader never sees half a file).
#pragma once

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <rdma/fi_errno.h>

namespace mp {

inline std::string g_who;      // prefix of failure messages, e.g. "cluster_xfer rank 3"
inline std::string g_dir;      // the rendezvous directory
inline double g_deadline = 0;  // now_s() past which every wait fails

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

[[noreturn]] inline void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: FAIL: ", g_who.c_str());
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

inline void check_time(const char* what) {
  if (now_s() > g_deadline) die("deadline passed while %s", what);
}

inline void put_file(const std::string& name, const void* data, size_t len) {
  std::string tmp = g_dir + "/." + name + ".tmp", path = g_dir + "/" + name;
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = fd >= 0 && write(fd, data, len) == ssize_t(len);
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) die("cannot write %s", path.c_str());
}

// The file's contents once it exists, polling every `poll_ms`.
inline std::string wait_file(const std::string& name, const char* what, int poll_ms = 2) {
  std::string path = g_dir + "/" + name;
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) return std::string(std::istreambuf_iterator<char>(in), {});
    check_time(what);
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

}  // namespace mp

#define FI_OK(call)                                                       \
  do {                                                                    \
    int rc_ = (call);                                                     \
    if (rc_) mp::die("%s: %d (%s)", #call, rc_, fi_strerror(-rc_));       \
  } while (0)
