#include "shm_proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/unique_fd.hpp"
#include "shm_layout.hpp"

namespace pm::shm {

bool lock_held(const std::string& path) noexcept {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return false;
  if (flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;  // released when fd closes
  return errno == EWOULDBLOCK;
}

bool claimant_alive(const std::string& dir, uint32_t uid, uint32_t pid) noexcept {
  if (pid == 0) return false;
  if (pid == uint32_t(getpid())) return true;
  DIR* d = opendir(dir.c_str());
  if (!d) return true;
  char prefix[32];
  int plen = snprintf(prefix, sizeof prefix, "pmshm_%u_", uid);
  bool found = false, locked = false;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix, size_t(plen)) != 0 || strlen(e->d_name) != size_t(plen) + 16) continue;
    std::string path = dir + "/" + e->d_name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) continue;
    RegionInfo h;
    if (pread(fd.get(), &h, sizeof h, 0) != ssize_t(sizeof h)) continue;
    if (h.magic != kRegionMagic || h.owner_pid != pid) continue;
    found = true;
    if (flock(fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      locked = true;
      break;
    }
  }
  closedir(d);
  if (locked) return true;
  if (found) return false;  // its regions are all unlocked: it died
  // No region names it (removed already): the pid itself, if it is ours.
  return kill(pid_t(pid), 0) == 0 || errno != ESRCH;
}

}  // namespace pm::shm
