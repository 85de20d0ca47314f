// One rank of the emulated cluster (fabtests/scripts/cluster.sh starts N of
// them, one or more per network namespace, joined by one bridge).
//
//   cluster_xfer -p <prov> -r <rank> -n <N> -d <dir> [-t alltoall,incast,ring]
//                [-s bytes] [-i iterations] [-T seconds] [-H hold seconds]
//
// Ranks meet through files in <dir> (each writes its fi_getname address
// there and waits, bounded, for all N), insert every peer in a table AV
// and run the patterns, each between two barriers:
//   alltoall  every rank sends -i messages of -s bytes to every other rank
//   incast    ranks 1..N-1 each send 4 x -i messages to rank 0
//   ring      rank r sends -i messages to r+1 and receives -i from r-1
// Every receive is posted (tagged, with the sender's rank and message number
// as the tag) before the first barrier, every payload is verified byte for
// byte, and all completions are awaited with fi_cq_sread (the processes
// block, they do not spin: the machine may have far fewer cores than
// ranks). Each rank writes its time per pattern to <dir>; rank 0 prints
// "pattern <name> ranks <N> bytes <total> time_s <slowest rank>".
// Exit 0 only when every transfer of every pattern completed and verified
// before the deadline (-T, whole run).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "multiproc.hpp"

namespace {

std::string g_prov = "pmeth", g_patterns = "alltoall,incast,ring";
int g_rank = -1, g_n = 0, g_iters = 4;
double g_hold = 0;  // -H: seconds to keep the endpoint open at the end
bool g_quiet = false;  // the warm-up: no result line
size_t g_size = 65536;

double now() { return mp::now_s(); }
using mp::check_time;
using mp::die;
using mp::g_dir;
using mp::put_file;
using mp::wait_file;

void barrier(const std::string& phase) {
  put_file("bar." + phase + "." + std::to_string(g_rank), "", 0);
  for (int r = 0; r < g_n; r++) wait_file("bar." + phase + "." + std::to_string(r), ("barrier " + phase).c_str());
}

// ---- libfabric -------------------------------------------------------------

fid_fabric* g_fab;
fid_domain* g_dom;
fid_ep* g_ep;
fid_cq* g_cq;
fid_av* g_av;
std::vector<fi_addr_t> g_peers;
size_t g_tx_depth = 64;

void open_fabric() {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup(g_prov.c_str());
  fi_info* info = nullptr;
  FI_OK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info));
  fi_freeinfo(hints);
  if (info->domain_attr->mr_mode & FI_MR_LOCAL) die("the provider asks for FI_MR_LOCAL (not handled here)");
  g_tx_depth = std::max<size_t>(8, std::min<size_t>(info->tx_attr->size, 256));
  FI_OK(fi_fabric(info->fabric_attr, &g_fab, nullptr));
  FI_OK(fi_domain(g_fab, info, &g_dom, nullptr));
  fi_cq_attr cqa{};
  cqa.format = FI_CQ_FORMAT_TAGGED;
  cqa.wait_obj = FI_WAIT_UNSPEC;
  cqa.size = 4096;
  FI_OK(fi_cq_open(g_dom, &cqa, &g_cq, nullptr));
  fi_av_attr ava{};
  ava.type = FI_AV_TABLE;
  ava.count = size_t(g_n);
  FI_OK(fi_av_open(g_dom, &ava, &g_av, nullptr));
  FI_OK(fi_endpoint(g_dom, info, &g_ep, nullptr));
  FI_OK(fi_ep_bind(g_ep, &g_cq->fid, FI_TRANSMIT | FI_RECV));
  FI_OK(fi_ep_bind(g_ep, &g_av->fid, 0));
  FI_OK(fi_enable(g_ep));
  fi_freeinfo(info);

  char name[256];
  size_t len = sizeof name;
  FI_OK(fi_getname(&g_ep->fid, name, &len));
  put_file("addr." + std::to_string(g_rank), name, len);
  g_peers.resize(size_t(g_n));
  for (int r = 0; r < g_n; r++) {
    std::string a = wait_file("addr." + std::to_string(r), "waiting for the other ranks' addresses");
    if (fi_av_insert(g_av, a.data(), 1, &g_peers[size_t(r)], 0, nullptr) != 1) die("fi_av_insert of rank %d", r);
  }
}

// ---- transfers -------------------------------------------------------------

uint8_t pattern_byte(int src, int dst, int msg, size_t i) {
  return uint8_t(src * 131 + dst * 31 + msg * 7 + int(i) * 13 + int(i >> 8));
}
uint64_t make_tag(int src, int msg) { return (uint64_t(uint32_t(src)) << 32) | uint32_t(msg); }

struct Recv {
  int src, msg;
  std::vector<uint8_t> buf;
  fi_context ctx;
};
struct Send {
  int dst, msg;
  std::vector<uint8_t> buf;
  fi_context ctx;
};

size_t g_pending = 0, g_sends_out = 0;

// Blocks in fi_cq_sread until one completion (bounded by the deadline);
// with once, returns after one bounded wait (1 ms) even without one.
void reap_one(const char* what, bool once = false) {
  for (;;) {
    fi_cq_tagged_entry e[16];
    ssize_t n = fi_cq_sread(g_cq, e, 16, nullptr, once ? 1 : 100);
    if (n > 0) {
      g_pending -= size_t(n);
      for (ssize_t k = 0; k < n; k++)
        if (e[k].flags & FI_SEND) g_sends_out--;
      return;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(g_cq, &err, 0);
      die("%s: completion error %d (%s), prov_errno %d", what, err.err, fi_strerror(err.err), err.prov_errno);
    }
    if (n != -FI_EAGAIN) die("%s: fi_cq_sread: %zd (%s)", what, n, fi_strerror(int(-n)));
    check_time(what);
    if (once) return;
  }
}

struct Counts {
  int sends = 0, recvs = 0;
};

// One pattern: `to` and `from` list (peer, message) pairs.
double run_pattern(const std::string& name, const std::vector<std::pair<int, int>>& to,
                   const std::vector<std::pair<int, int>>& from) {
  std::vector<Recv> recvs(from.size());
  for (size_t k = 0; k < from.size(); k++) {
    Recv& r = recvs[k];
    r.src = from[k].first;
    r.msg = from[k].second;
    r.buf.assign(g_size, 0);
    for (;;) {
      ssize_t rc = fi_trecv(g_ep, r.buf.data(), g_size, nullptr, g_peers[size_t(r.src)], make_tag(r.src, r.msg), 0,
                            &r.ctx);
      if (rc == 0) break;
      if (rc != -FI_EAGAIN) die("fi_trecv: %zd", rc);
      check_time("posting receives");
    }
    g_pending++;
  }
  std::vector<Send> sends(to.size());
  for (size_t k = 0; k < to.size(); k++) {
    Send& s = sends[k];
    s.dst = to[k].first;
    s.msg = to[k].second;
    s.buf.resize(g_size);
    for (size_t i = 0; i < g_size; i++) s.buf[i] = pattern_byte(g_rank, s.dst, s.msg, i);
  }
  barrier((g_quiet ? "warm" + name : name) + ".start");
  double t0 = now();
  for (Send& s : sends) {
    while (g_sends_out >= g_tx_depth) reap_one("sending");
    for (;;) {
      ssize_t rc = fi_tsend(g_ep, s.buf.data(), g_size, nullptr, g_peers[size_t(s.dst)], make_tag(g_rank, s.msg),
                            &s.ctx);
      if (rc == 0) break;
      if (rc != -FI_EAGAIN) die("fi_tsend to %d: %zd", s.dst, rc);
      reap_one("sending (EAGAIN)", true);  // progress (e.g. a connection forming), then again
    }
    g_pending++;
    g_sends_out++;
  }
  while (g_pending) reap_one(("completing " + name).c_str());
  double t = now() - t0;
  for (const Recv& r : recvs)
    for (size_t i = 0; i < g_size; i++)
      if (r.buf[i] != pattern_byte(r.src, g_rank, r.msg, i))
        die("%s: message %d from rank %d differs at byte %zu", name.c_str(), r.msg, r.src, i);
  std::string ts = std::to_string(t), tag = g_quiet ? "warm" + name : name;
  put_file("time." + tag + "." + std::to_string(g_rank), ts.data(), ts.size());
  barrier(tag + ".end");
  if (g_rank == 0 && !g_quiet) {
    double worst = 0;
    size_t bytes = 0;
    for (int r = 0; r < g_n; r++)
      worst = std::max(worst, atof(wait_file("time." + name + "." + std::to_string(r), "times").c_str()));
    if (name == "alltoall") bytes = size_t(g_n) * size_t(g_n - 1) * size_t(g_iters) * g_size;
    else if (name == "incast") bytes = size_t(g_n - 1) * size_t(4 * g_iters) * g_size;
    else bytes = size_t(g_n) * size_t(g_iters) * g_size;
    printf("pattern %s ranks %d size %zu bytes %zu time_s %.6f\n", name.c_str(), g_n, g_size, bytes, worst);
    fflush(stdout);
  }
  return t;
}

void run(const std::string& name) {
  std::vector<std::pair<int, int>> to, from;
  if (name == "alltoall") {
    for (int m = 0; m < g_iters; m++)
      for (int k = 1; k < g_n; k++) {
        to.push_back({(g_rank + k) % g_n, m});
        from.push_back({(g_rank - k + g_n) % g_n, m});
      }
  } else if (name == "incast") {
    for (int m = 0; m < 4 * g_iters; m++) {
      if (g_rank == 0)
        for (int s = 1; s < g_n; s++) from.push_back({s, m});
      else
        to.push_back({0, m});
    }
  } else if (name == "ring") {
    for (int m = 0; m < g_iters; m++) {
      to.push_back({(g_rank + 1) % g_n, m});
      from.push_back({(g_rank - 1 + g_n) % g_n, m});
    }
  } else {
    die("unknown pattern %s", name.c_str());
  }
  run_pattern(name, to, from);
}

}  // namespace

int main(int argc, char** argv) {
  double timeout = 120;
  for (int c; (c = getopt(argc, argv, "p:r:n:d:t:s:i:T:H:")) != -1;) {
    switch (c) {
      case 'p': g_prov = optarg; break;
      case 'r': g_rank = atoi(optarg); break;
      case 'n': g_n = atoi(optarg); break;
      case 'd': g_dir = optarg; break;
      case 't': g_patterns = optarg; break;
      case 's': g_size = strtoul(optarg, nullptr, 0); break;
      case 'i': g_iters = atoi(optarg); break;
      case 'T': timeout = atof(optarg); break;
      case 'H': g_hold = atof(optarg); break;
      default: return 2;
    }
  }
  mp::g_who = "cluster_xfer rank " + std::to_string(g_rank);
  if (g_rank < 0 || g_n < 2 || g_rank >= g_n || g_dir.empty() || g_size == 0 || g_iters < 1) {
    fprintf(stderr, "usage: cluster_xfer -p prov -r rank -n N -d dir [-t patterns] [-s bytes] [-i iters] [-T s]\n");
    return 2;
  }
  mp::g_deadline = now() + timeout;
  open_fabric();
  barrier("open");
  // Warm-up, not timed: one small message between every pair, so that
  // connections (tcp;ofi_rxm) and sessions (pmeth) exist before the clocks run.
  {
    size_t size = g_size;
    int iters = g_iters;
    g_size = 64;
    g_iters = 1;
    g_quiet = true;
    run("alltoall");
    g_size = size;
    g_iters = iters;
    g_quiet = false;
  }
  std::stringstream ps(g_patterns);
  for (std::string p; std::getline(ps, p, ',');)
    if (!p.empty()) run(p);
  barrier("done");
  if (g_hold > 0) {
    // Keep the endpoint open (and progressing) for a reader of its live
    // statistics: "held.<rank>" in <dir> says it is time to look.
    put_file("held." + std::to_string(g_rank), "", 0);
    double until = now() + g_hold;
    while (now() < until) {
      fi_cq_tagged_entry e;
      fi_cq_sread(g_cq, &e, 1, nullptr, 50);
    }
  }
  fi_close(&g_ep->fid);
  fi_close(&g_av->fid);
  fi_close(&g_cq->fid);
  fi_close(&g_dom->fid);
  fi_close(&g_fab->fid);
  return 0;
}
