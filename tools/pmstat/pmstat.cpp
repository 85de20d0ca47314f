// pmstat: lists the live pmfabric endpoints of this machine and prints their
// counters, from the pages they publish (include/pmfabric/pmstat.h,
// docs/pmstat.1.md). The pages are read with pread, never mapped (a file
// truncated under us cannot fault), and validated like anything from
// another process: magic, version, size, owner, counts bounded, strings
// terminated here.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pmfabric/pmstat.h"

namespace {

struct Entry {
  std::string file;
  bool valid = false;
  std::string why;  // when not valid
  bool stale = false;
  uid_t owner = 0;
  std::unique_ptr<pmstat_page> page;
};

uint64_t real_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// One consistent copy of the page in path, or the reason there is none.
Entry load(const std::string& dir, const std::string& name) {
  Entry e;
  e.file = dir + "/" + name;
  int fd = open(e.file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    e.why = strerror(errno);
    return e;
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    e.why = "not a regular file";
    return e;
  }
  e.owner = st.st_uid;
  e.page.reset(new pmstat_page);
  pmstat_page& p = *e.page;
  bool got = false;
  for (int attempt = 0; attempt < 100 && !got; attempt++) {
    uint64_t seq1 = 0, seq2 = 0;
    ssize_t n = pread(fd, &p, sizeof p, 0);
    if (n < ssize_t(offsetof(pmstat_page, counters))) {
      e.why = "truncated (" + std::to_string(n < 0 ? 0 : n) + " bytes)";
      break;
    }
    if (p.magic != PMSTAT_MAGIC) {
      e.why = "bad magic";
      break;
    }
    if (p.version != PMSTAT_VERSION || p.size != sizeof p) {
      e.why = "layout version " + std::to_string(p.version) + " size " + std::to_string(p.size) + " (pmstat reads " +
              std::to_string(PMSTAT_VERSION) + "/" + std::to_string(sizeof p) + ")";
      break;
    }
    if (n != ssize_t(sizeof p)) {
      e.why = "truncated (" + std::to_string(n) + " bytes)";
      break;
    }
    seq1 = p.seq;
    if (pread(fd, &seq2, sizeof seq2, offsetof(pmstat_page, seq)) != ssize_t(sizeof seq2)) {
      e.why = "truncated";
      break;
    }
    if (seq1 == seq2 && !(seq1 & 1)) got = true;
    else usleep(1000);
  }
  // Its process holds a shared lock on it for its life (pmstat.h); the pid
  // cannot tell from another PID namespace.
  const bool orphaned = pmstat_page_orphaned(fd) == 1;
  close(fd);
  if (!got) {
    if (e.why.empty()) e.why = "never consistent (being rewritten)";
    return e;
  }
  if (p.uid != uint32_t(e.owner)) {
    e.why = "says uid " + std::to_string(p.uid) + " but belongs to uid " + std::to_string(e.owner);
    return e;
  }
  // Bound and terminate everything.
  p.provider[sizeof p.provider - 1] = 0;
  p.address[sizeof p.address - 1] = 0;
  p.wire[sizeof p.wire - 1] = 0;
  p.ncounters = std::min<uint32_t>(p.ncounters, PMSTAT_MAX_COUNTERS);
  p.npeers = std::min<uint32_t>(p.npeers, PMSTAT_MAX_PEERS);
  for (uint32_t i = 0; i < p.ncounters; i++) p.counters[i].name[PMSTAT_NAME_LEN - 1] = 0;
  for (uint32_t i = 0; i < p.npeers; i++) {
    pmstat_peer& q = p.peers[i];
    q.address[sizeof q.address - 1] = 0;
    q.nfields = std::min<uint32_t>(q.nfields, PMSTAT_MAX_PEER_FIELDS);
    for (uint32_t k = 0; k < q.nfields; k++) q.fields[k].name[PMSTAT_NAME_LEN - 1] = 0;
  }
  e.valid = true;
  e.stale = orphaned;
  return e;
}

std::vector<Entry> scan(const std::string& dir) {
  std::vector<Entry> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (dirent* de = readdir(d)) {
    std::string n = de->d_name;
    if (n.compare(0, strlen(PMSTAT_PREFIX), PMSTAT_PREFIX) == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) out.push_back(load(dir, n));
  return out;
}

void print_list(const std::vector<Entry>& es) {
  printf("%-8s %-6s %-7s %9s %8s %-18s %s\n", "PID", "PROV", "STATE", "AGE_S", "UPDATES", "WIRE", "ADDRESS");
  uint64_t now = real_ns();
  for (const Entry& e : es) {
    if (!e.valid) {
      printf("%-8s %-6s %-7s %9s %8s %-18s %s (%s)\n", "-", "-", "invalid", "-", "-", "-", e.file.c_str(),
             e.why.c_str());
      continue;
    }
    const pmstat_page& p = *e.page;
    double age = p.start_ns && now > p.start_ns ? double(now - p.start_ns) / 1e9 : 0;
    printf("%-8d %-6s %-7s %9.1f %8llu %-18s %s\n", p.pid, p.provider, e.stale ? "stale" : "live", age,
           (unsigned long long)p.updates, p.wire[0] ? p.wire : "-", p.address);
  }
}

void print_counters(const Entry& e, bool peers) {
  const pmstat_page& p = *e.page;
  double since = p.update_ns ? double(real_ns() - p.update_ns) / 1e9 : 0;
  printf("endpoint %s pid %d %s%s (updated %.1f s ago)\n", p.address, p.pid, p.provider,
         e.stale ? " STALE (process gone)" : "", since);
  for (uint32_t i = 0; i < p.ncounters; i++)
    printf("  %-40s %llu\n", p.counters[i].name, (unsigned long long)p.counters[i].value);
  if (!peers) return;
  printf("  peers: %u shown of %u\n", p.npeers, p.peers_total);
  for (uint32_t i = 0; i < p.npeers; i++) {
    const pmstat_peer& q = p.peers[i];
    printf("  peer %s:", q.address);
    for (uint32_t k = 0; k < q.nfields; k++) printf(" %s=%llu", q.fields[k].name, (unsigned long long)q.fields[k].value);
    printf("\n");
  }
}

int usage() {
  fprintf(stderr,
          "usage: pmstat [-c] [-P] [-p pid] [-i seconds [-n count]] [-d dir] [--clean]\n"
          "  (none)   list the endpoints: pid, provider, live/stale, age, wire, address\n"
          "  -c       print every endpoint's counters (-p: only that process's)\n"
          "  -P       with -c: also the per-peer counters\n"
          "  -i s     repeat every s seconds (-n: that many times)\n"
          "  -d dir   read pages from dir (default " PMSTAT_DIR ")\n"
          "  --clean  remove the pages of processes that are gone (where permitted)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = PMSTAT_DIR;
  bool counters = false, peers = false, clean = false;
  long pid = 0, count = 1;
  double interval = 0;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "-c") counters = true;
    else if (a == "-P") counters = peers = true;
    else if (a == "-p" && i + 1 < argc) pid = strtol(argv[++i], nullptr, 10), counters = true;
    else if (a == "-i" && i + 1 < argc) interval = atof(argv[++i]), count = count == 1 ? -1 : count;
    else if (a == "-n" && i + 1 < argc) count = strtol(argv[++i], nullptr, 10);
    else if (a == "-d" && i + 1 < argc) dir = argv[++i];
    else if (a == "--clean") clean = true;
    else return usage();
  }
  if (clean) {
    int removed = 0, failed = 0;
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (const Entry& e : scan(dir))
      if (e.valid && e.stale) {
        // Checked again under the lock (the process may have been slow, not gone).
        int r = dfd < 0 ? -1 : pmstat_remove_orphaned(dfd, e.file.substr(e.file.rfind('/') + 1).c_str(), -1, 0);
        if (r == 1) removed++;
        else if (r < 0) failed++;
      }
    if (dfd >= 0) close(dfd);
    printf("pmstat: removed %d stale page(s)%s\n", removed, failed ? " (some not permitted)" : "");
    return failed ? 1 : 0;
  }
  for (long round = 0; count < 0 || round < count; round++) {
    if (round) {
      usleep(useconds_t(interval * 1e6));
      printf("\n");
    }
    std::vector<Entry> es = scan(dir);
    if (!counters) {
      print_list(es);
    } else {
      bool found = false;
      for (const Entry& e : es) {
        if (!e.valid) {
          if (!pid) printf("invalid page %s: %s\n", e.file.c_str(), e.why.c_str());
          continue;
        }
        if (pid && e.page->pid != pid) continue;
        found = true;
        print_counters(e, peers);
      }
      if (pid && !found) {
        fprintf(stderr, "pmstat: no endpoint of pid %ld\n", pid);
        return 1;
      }
    }
    fflush(stdout);
  }
  return 0;
}
