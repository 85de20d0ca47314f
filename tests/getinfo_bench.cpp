// fi_getinfo cost per call, per provider, in one process:
//   getinfo_bench [-n calls] prov [prov...]
// For each provider (hints->fabric_attr->prov_name, RDM), the first call
// (which pays the provider's one-time work) and the median and mean of the
// next `calls`, then the ratio of every provider's median to the last one's
// (list tcp last to get "x tcp"). Exits 1 if a provider returned no entry.
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) / 1e3;
}

// One fi_getinfo call for provider `prov`: its duration in microseconds,
// or a negative value when it failed.
double one_call(const char* prov, int* entries) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->fabric_attr->prov_name = strdup(prov);
  fi_info* info = nullptr;
  double t0 = now_us();
  int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info);
  double t1 = now_us();
  *entries = 0;
  for (fi_info* i = info; i; i = i->next) (*entries)++;
  fi_freeinfo(info);
  fi_freeinfo(hints);
  if (rc) {
    fprintf(stderr, "fi_getinfo(%s): %d (%s)\n", prov, rc, fi_strerror(-rc));
    return -1;
  }
  return t1 - t0;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 200;
  std::vector<const char*> provs;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) calls = atoi(argv[++i]);
    else provs.push_back(argv[i]);
  }
  if (provs.empty() || calls < 1) {
    fprintf(stderr, "usage: getinfo_bench [-n calls] prov [prov...]\n");
    return 2;
  }
  // libfabric loads every provider on its first fi_getinfo: not counted.
  {
    fi_info* info = nullptr;
    if (fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, nullptr, &info) == 0) fi_freeinfo(info);
  }
  std::vector<double> medians;
  int status = 0;
  for (const char* p : provs) {
    int entries = 0;
    double first = one_call(p, &entries);
    if (first < 0) {
      status = 1;
      medians.push_back(0);
      continue;
    }
    std::vector<double> t;
    for (int k = 0; k < calls; k++) {
      double d = one_call(p, &entries);
      if (d < 0) {
        status = 1;
        break;
      }
      t.push_back(d);
    }
    if (t.empty()) {
      medians.push_back(0);
      continue;
    }
    std::sort(t.begin(), t.end());
    double sum = 0;
    for (double d : t) sum += d;
    double med = t[t.size() / 2];
    medians.push_back(med);
    printf("prov=%s entries=%d first_us=%.1f median_us=%.1f mean_us=%.1f max_us=%.1f calls=%zu\n", p, entries,
           first, med, sum / double(t.size()), t.back(), t.size());
  }
  if (provs.size() > 1 && medians.back() > 0)
    for (size_t i = 0; i + 1 < provs.size(); i++)
      printf("ratio %s/%s = %.2f\n", provs[i], provs.back(), medians[i] / medians.back());
  return status;
}
