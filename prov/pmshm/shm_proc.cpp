#include "shm_proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/unique_fd.hpp"
#include "shm_layout.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace pm::shm {

bool lock_held(const std::string& path) noexcept {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return false;
  if (flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;  // released when fd closes
  return errno == EWOULDBLOCK;
}

int flock_owner_pid(int fd) noexcept {
  struct stat st;
  if (fstat(fd, &st) != 0) return 0;
  FILE* f = fopen("/proc/locks", "re");
  if (!f) return 0;
  // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; waiters show "->".
  char line[256];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    char kind[16], mode[16], access[16];
    int pid = 0;
    unsigned maj = 0, min = 0;
    unsigned long ino = 0;
    if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%lu", kind, mode, access, &pid, &maj, &min, &ino) != 7)
      continue;
    if (strcmp(kind, "FLOCK") != 0 || strcmp(access, "WRITE") != 0) continue;
    if (ino != st.st_ino || maj != major(st.st_dev) || min != minor(st.st_dev)) continue;
    found = pid > 0 ? pid : 0;
    break;
  }
  fclose(f);
  return found;
}

int open_pidfd(int pid) noexcept {
  if (pid <= 0) return -1;
  return int(syscall(SYS_pidfd_open, pid_t(pid), 0));
}

bool pidfd_alive(int pidfd) noexcept {
  struct pollfd p = {pidfd, POLLIN, 0};
  return pidfd >= 0 && ::poll(&p, 1, 0) == 0;
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
