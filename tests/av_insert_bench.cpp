// fi_av_insert of N peers, per provider, in one process:
//   av_insert_bench [-n N] prov [prov...]
// Opens an RDM endpoint, takes its name from fi_getname and makes N distinct
// names from it (pmeth: the endpoint id, bytes 8..11; others: the port of
// a sockaddr_in, bytes 2..3; pmshm: the low half of the region key, bytes
// 16..19), inserts them in one fi_av_insert call into an
// FI_AV_TABLE and reports ns per peer, the process's resident memory
// before and after (KiB) and its mappings (lines of /proc/self/maps), then each provider's time ÷ the last one's (list
// tcp;ofi_rxm last). Exits 1 when an insert fails or inserts fewer.
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

long rss_kb() {
  long pages = 0, res = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
  if (f) fclose(f);
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

// Mappings of the process (lines of /proc/self/maps).
long maps_count() {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  long n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

#define CHECK(x, what)                                                      \
  do {                                                                      \
    int rc_ = (x);                                                          \
    if (rc_) {                                                              \
      fprintf(stderr, "%s: %s: %d (%s)\n", prov, what, rc_, fi_strerror(-rc_)); \
      return -1;                                                            \
    }                                                                       \
  } while (0)

double one(const char* prov, size_t n) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_TAGGED;
  hints->mode = FI_CONTEXT;
  hints->fabric_attr->prov_name = strdup(prov);
  fi_info* info = nullptr;
  CHECK(fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info), "fi_getinfo");
  fi_freeinfo(hints);
  fid_fabric* fab;
  fid_domain* dom;
  fid_av* av;
  fid_ep* ep;
  fid_cq* cq;
  CHECK(fi_fabric(info->fabric_attr, &fab, nullptr), "fi_fabric");
  CHECK(fi_domain(fab, info, &dom, nullptr), "fi_domain");
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  aa.count = n;
  CHECK(fi_av_open(dom, &aa, &av, nullptr), "fi_av_open");
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_TAGGED;
  CHECK(fi_cq_open(dom, &ca, &cq, nullptr), "fi_cq_open");
  CHECK(fi_endpoint(dom, info, &ep, nullptr), "fi_endpoint");
  CHECK(fi_ep_bind(ep, &av->fid, 0), "bind av");
  CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), "bind cq");
  CHECK(fi_enable(ep), "fi_enable");
  std::vector<uint8_t> name(256);
  size_t len = name.size();
  CHECK(fi_getname(&ep->fid, name.data(), &len), "fi_getname");
  name.resize(len);
  bool pmeth = !strcmp(prov, "pmeth"), pmshm = !strcmp(prov, "pmshm");
  std::vector<uint8_t> all(n * len);
  for (size_t i = 0; i < n; i++) {
    std::vector<uint8_t> v = name;
    if (pmeth || pmshm) {
      uint32_t id = 0x40000000u + uint32_t(i);
      memcpy(v.data() + (pmeth ? 8 : 16), &id, 4);
    } else {
      v[2] = uint8_t((20000 + i) >> 8);
      v[3] = uint8_t(20000 + i);
    }
    memcpy(all.data() + i * len, v.data(), len);
  }
  std::vector<fi_addr_t> out(n);
  long before = rss_kb(), maps_before = maps_count();
  double t0 = now_ns();
  int got = fi_av_insert(av, all.data(), n, out.data(), 0, nullptr);
  double t = now_ns() - t0;
  long after = rss_kb(), maps_after = maps_count();
  printf("prov=%s peers=%zu inserted=%d ns_per_peer=%.0f rss_before_kb=%ld rss_after_kb=%ld maps_before=%ld "
         "maps_after=%ld name_len=%zu\n",
         prov, n, got, t / double(n), before, after, maps_before, maps_after, len);
  fi_close(&ep->fid);
  fi_close(&cq->fid);
  fi_close(&av->fid);
  fi_close(&dom->fid);
  fi_close(&fab->fid);
  fi_freeinfo(info);
  return got == int(n) ? t / double(n) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 10000;
  std::vector<const char*> provs;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) n = strtoull(argv[++i], nullptr, 10);
    else provs.push_back(argv[i]);
  }
  std::vector<double> per;
  for (const char* p : provs) {
    double v = one(p, n);
    if (v < 0) return 1;
    per.push_back(v);
  }
  for (size_t i = 0; i + 1 < per.size(); i++) printf("ratio %s/%s = %.2f\n", provs[i], provs.back(), per[i] / per.back());
  return 0;
}
