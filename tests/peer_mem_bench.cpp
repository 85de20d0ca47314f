// What one RDM endpoint holds for N peers, at the libfabric level, after one
// real message to each (docs/scale.md). One hub process and K helper
// processes, each helper with E endpoints of its own (one fabric, domain, AV
// and CQ per helper), N = the helpers' endpoints in all. They meet through
// files in <dir> (fi_getname addresses), as tests/cluster_xfer.cpp does;
// tests/peer_mem_bench.sh starts them and checks every exit status.
//
//   peer_mem_bench hub    -d dir -n N -k K [-p prov] [-s bytes] [-T s] [-B KiB] [-G maps]
//   peer_mem_bench helper -d dir -k index -b first -e E [-p prov] [-s bytes] [-T s]
//
// The hub opens its endpoint and writes hub.addr, reads every helper's
// addr.<k> (E names), then measures its resident memory (/proc/self/statm)
// and its mappings (lines of /proc/self/maps):
//   a  before the AV insert (everything the program itself needs is
//      allocated and touched by then),
//   b  after one fi_av_insert of the N names into an FI_AV_TABLE,
//   c  after one message (-s bytes, untagged) to each peer and one from each,
//      all completed, every payload checked byte for byte (the sender's
//      index is in its first 4 bytes; each index exactly once),
//   d  after 2 s idle blocked in fi_cq_sread (the CPU time of that idle
//      time, progress thread included, is reported too),
// then polls fi_cq_read for 1 s with nothing to read and reports the calls
// made and the process CPU time they took. The result is one line of
// key=value pairs. -B fails the run (exit 1) when (c - a) or (d - a) per peer
// exceeds that many KiB; -G when the mappings grew by more than that many.
//
// A helper opens E endpoints, writes addr.<k>, inserts hub.addr, posts one
// receive per endpoint, waits for the file "go.<k>", sends one message from each
// endpoint to the hub, waits for all its completions, checks the hub's
// payloads, writes ok.<k>, then stays open (blocked in fi_cq_sread) until
// the file "done", so the hub's idle figures see N live peers.
//
// Every wait is bounded by -T (whole run, default 300 s); any failure exits
// 1 with a message on stderr.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include "multiproc.hpp"

namespace {

std::string g_role, g_prov = "pmeth";
size_t g_size = 64;

using mp::check_time;
using mp::die;
using mp::g_dir;
using mp::now_s;

// ---- measurements ----------------------------------------------------------

long rss_kib() {
  long pages = 0, res = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f) die("cannot open /proc/self/statm");
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = -1;
  fclose(f);
  if (res < 0) die("cannot parse /proc/self/statm");
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

long maps_count() {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) die("cannot open /proc/self/maps");
  long n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

double cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // every thread: the provider's too
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

struct Snapshot {
  long rss, maps;
};
Snapshot snap() { return {rss_kib(), maps_count()}; }

// ---- files -----------------------------------------------------------------

using mp::put_file;

bool have_file(const std::string& name) { return access((g_dir + "/" + name).c_str(), F_OK) == 0; }

std::string wait_file(const std::string& name, const char* what) { return mp::wait_file(name, what, 5); }

// ---- payloads --------------------------------------------------------------

enum Dir : uint8_t { kToHub = 1, kFromHub = 2 };

// The message between the hub and peer `peer` in direction `dir`; its first
// four bytes are the peer's index (little-endian).
uint8_t byte_at(uint32_t peer, Dir dir, size_t j) {
  if (j < 4) return uint8_t(peer >> (8 * j));
  return uint8_t(peer * 131u + (peer >> 8) * 17u + j * 13u + (j >> 4) + dir * 101u);
}

void fill(uint8_t* p, uint32_t peer, Dir dir) {
  for (size_t j = 0; j < g_size; j++) p[j] = byte_at(peer, dir, j);
}

bool matches(const uint8_t* p, uint32_t peer, Dir dir, size_t* at) {
  for (size_t j = 0; j < g_size; j++)
    if (p[j] != byte_at(peer, dir, j)) {
      *at = j;
      return false;
    }
  return true;
}

// ---- libfabric -------------------------------------------------------------

struct Fabric {
  fi_info* info = nullptr;
  fid_fabric* fab = nullptr;
  fid_domain* dom = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
};

struct Op {
  fi_context2 ctx;  // first: the completion's op_context points here
  bool send;
  uint32_t ep;      // helper: its endpoint; hub: the peer sent to
  uint8_t* buf;
};

Fabric open_fabric(size_t av_count) {
  Fabric f;
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup(g_prov.c_str());
  FI_OK(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &f.info));
  fi_freeinfo(hints);
  if (f.info->domain_attr->mr_mode & FI_MR_LOCAL) die("the provider asks for FI_MR_LOCAL (not handled here)");
  FI_OK(fi_fabric(f.info->fabric_attr, &f.fab, nullptr));
  FI_OK(fi_domain(f.fab, f.info, &f.dom, nullptr));
  fi_cq_attr cqa{};
  cqa.format = FI_CQ_FORMAT_MSG;
  cqa.wait_obj = FI_WAIT_UNSPEC;
  cqa.size = 4096;
  FI_OK(fi_cq_open(f.dom, &cqa, &f.cq, nullptr));
  fi_av_attr ava{};
  ava.type = FI_AV_TABLE;
  ava.count = av_count;
  FI_OK(fi_av_open(f.dom, &ava, &f.av, nullptr));
  return f;
}

fid_ep* open_ep(Fabric& f) {
  fid_ep* ep = nullptr;
  FI_OK(fi_endpoint(f.dom, f.info, &ep, nullptr));
  FI_OK(fi_ep_bind(ep, &f.cq->fid, FI_TRANSMIT | FI_RECV));
  FI_OK(fi_ep_bind(ep, &f.av->fid, 0));
  FI_OK(fi_enable(ep));
  return ep;
}

std::string ep_name(fid_ep* ep) {
  char name[256];
  size_t len = sizeof name;
  FI_OK(fi_getname(&ep->fid, name, &len));
  return std::string(name, len);
}

void close_fabric(Fabric& f) {
  fi_close(&f.av->fid);
  fi_close(&f.cq->fid);
  fi_close(&f.dom->fid);
  fi_close(&f.fab->fid);
  fi_freeinfo(f.info);
}

// Reads completions: blocking for up to `ms` (0: fi_cq_read once). Returns
// how many were handed to `on`.
template <typename F>
ssize_t reap(Fabric& f, int ms, const char* what, F&& on) {
  fi_cq_msg_entry e[64];
  ssize_t n = ms ? fi_cq_sread(f.cq, e, 64, nullptr, ms) : fi_cq_read(f.cq, e, 64);
  if (n == -FI_EAGAIN) return 0;
  if (n == -FI_EAVAIL) {
    fi_cq_err_entry err{};
    fi_cq_readerr(f.cq, &err, 0);
    die("%s: completion error %d (%s), prov_errno %d", what, err.err, fi_strerror(err.err), err.prov_errno);
  }
  if (n < 0) die("%s: reading the CQ: %zd (%s)", what, n, fi_strerror(int(-n)));
  for (ssize_t k = 0; k < n; k++) on(*static_cast<Op*>(e[k].op_context), e[k]);
  return n;
}

// ---- helper ----------------------------------------------------------------

int run_helper(int index, uint32_t first, size_t n_eps) {
  double t0 = now_s();
  Fabric f = open_fabric(1);
  std::vector<fid_ep*> eps(n_eps);
  std::string names;
  for (size_t i = 0; i < n_eps; i++) {
    eps[i] = open_ep(f);
    std::string name = ep_name(eps[i]);
    if (i && name.size() != names.size() / i) die("endpoint names of different lengths");
    names += name;
  }
  std::string file;
  uint32_t hdr[2] = {uint32_t(n_eps), uint32_t(n_eps ? names.size() / n_eps : 0)};
  file.append(reinterpret_cast<const char*>(hdr), sizeof hdr);
  file += names;
  put_file("addr." + std::to_string(index), file.data(), file.size());
  double t_open = now_s() - t0;

  std::string hub = wait_file("hub.addr", "waiting for hub.addr");
  fi_addr_t hub_addr = FI_ADDR_UNSPEC;
  if (fi_av_insert(f.av, hub.data(), 1, &hub_addr, 0, nullptr) != 1) die("fi_av_insert of the hub");

  std::vector<uint8_t> mem(2 * n_eps * g_size);
  std::vector<Op> ops(2 * n_eps);
  for (size_t i = 0; i < n_eps; i++) {
    Op& r = ops[2 * i];
    r.send = false;
    r.ep = uint32_t(i);
    r.buf = &mem[2 * i * g_size];
    memset(r.buf, 0, g_size);
    for (;;) {
      ssize_t rc = fi_recv(eps[i], r.buf, g_size, nullptr, hub_addr, &r.ctx);
      if (rc == 0) break;
      if (rc != -FI_EAGAIN) die("fi_recv on endpoint %zu: %zd (%s)", i, rc, fi_strerror(int(-rc)));
      check_time("posting receives");
    }
    Op& s = ops[2 * i + 1];
    s.send = true;
    s.ep = uint32_t(i);
    s.buf = &mem[(2 * i + 1) * g_size];
    fill(s.buf, first + uint32_t(i), kToHub);
  }
  wait_file("go." + std::to_string(index), "waiting for go");
  size_t pending = 2 * n_eps, got = 0;
  auto on = [&](Op& op, const fi_cq_msg_entry& e) {
    pending--;
    if (op.send) return;
    size_t at = 0;
    if (e.len != g_size) die("endpoint %u: received %zu bytes, expected %zu", op.ep, size_t(e.len), g_size);
    if (!matches(op.buf, first + op.ep, kFromHub, &at))
      die("endpoint %u (peer %u): the hub's message differs at byte %zu", op.ep, first + op.ep, at);
    got++;
  };
  for (size_t i = 0; i < n_eps; i++) {
    Op& s = ops[2 * i + 1];
    for (;;) {
      ssize_t rc = fi_send(eps[i], s.buf, g_size, nullptr, hub_addr, &s.ctx);
      if (rc == 0) break;
      if (rc != -FI_EAGAIN) die("fi_send from endpoint %zu: %zd (%s)", i, rc, fi_strerror(int(-rc)));
      reap(f, 0, "sending", on);
      check_time("sending to the hub");
    }
  }
  while (pending) {
    reap(f, 100, "completing", on);
    check_time("completing the exchange with the hub");
  }
  if (got != n_eps) die("%zu of %zu messages from the hub", got, n_eps);
  put_file("ok." + std::to_string(index), "", 0);
  // Stay a live peer (blocked, not spinning) until the hub is done.
  while (!have_file("done")) {
    reap(f, 100, "idle", [](Op&, const fi_cq_msg_entry&) { die("unexpected completion while idle"); });
    check_time("waiting for done");
  }
  double t1 = now_s();
  for (fid_ep* ep : eps) FI_OK(fi_close(&ep->fid));
  close_fabric(f);
  printf("helper %d endpoints=%zu open_s=%.3f close_s=%.3f\n", index, n_eps, t_open, now_s() - t1);
  return 0;
}

// ---- hub -------------------------------------------------------------------

int run_hub(size_t n, int helpers, double max_kib_per_peer, long max_new_maps) {
  // Everything the program needs, allocated and touched before (a).
  std::vector<uint8_t> mem(2 * n * g_size, 0);
  std::vector<Op> ops(2 * n);
  std::vector<fi_addr_t> peers(n, FI_ADDR_NOTAVAIL);
  std::vector<uint8_t> seen(n, 0);

  Fabric f = open_fabric(n);
  fid_ep* ep = open_ep(f);
  std::string me = ep_name(ep);
  size_t tx_depth = std::max<size_t>(1, std::min<size_t>(f.info->tx_attr->size, 256));
  size_t rx_depth = std::max<size_t>(1, std::min<size_t>(f.info->rx_attr->size, 1024));
  put_file("hub.addr", me.data(), me.size());

  std::string all;
  size_t name_len = 0;
  std::vector<size_t> start(size_t(helpers) + 1, 0);  // helper k's peers: [start[k], start[k + 1])
  for (int k = 0; k < helpers; k++) {
    std::string a = wait_file("addr." + std::to_string(k), "waiting for the helpers' addresses");
    uint32_t hdr[2];
    if (a.size() < sizeof hdr) die("addr.%d: too short", k);
    memcpy(hdr, a.data(), sizeof hdr);
    if (size_t(hdr[0]) * hdr[1] != a.size() - sizeof hdr || (name_len && hdr[1] != name_len))
      die("addr.%d: malformed", k);
    name_len = hdr[1];
    all.append(a, sizeof hdr, std::string::npos);
    start[size_t(k) + 1] = start[size_t(k)] + hdr[0];
  }
  if (!name_len || all.size() != n * name_len) die("the helpers have %zu endpoints, not %zu", all.size() / std::max<size_t>(name_len, 1), n);
  {
    std::set<std::string> distinct;
    for (size_t i = 0; i < n; i++) distinct.insert(all.substr(i * name_len, name_len));
    if (distinct.size() != n) die("%zu of the %zu endpoint names are equal to another (rerun)", n - distinct.size(), n);
  }

  Snapshot a = snap();
  double t0 = now_s();
  int ins = fi_av_insert(f.av, all.data(), n, peers.data(), 0, nullptr);
  double t_insert = now_s() - t0;
  if (ins != int(n)) die("fi_av_insert: %d of %zu", ins, n);
  Snapshot b = snap();

  // One message each way per peer.
  size_t posted = 0, recvd = 0, sent_done = 0, sends_out = 0;
  auto on = [&](Op& op, const fi_cq_msg_entry& e) {
    if (op.send) {
      sends_out--;
      sent_done++;
      return;
    }
    if (e.len != g_size) die("received %zu bytes, expected %zu", size_t(e.len), g_size);
    uint32_t peer = uint32_t(op.buf[0]) | uint32_t(op.buf[1]) << 8 | uint32_t(op.buf[2]) << 16 |
                    uint32_t(op.buf[3]) << 24;
    size_t at = 0;
    if (peer >= n) die("a message names peer %u of %zu", peer, n);
    if (seen[peer]) die("a second message from peer %u", peer);
    if (!matches(op.buf, peer, kToHub, &at)) die("the message from peer %u differs at byte %zu", peer, at);
    seen[peer] = 1;
    recvd++;
  };
  for (size_t i = 0; i < n; i++) {
    Op& r = ops[2 * i];
    r.send = false;
    r.buf = &mem[2 * i * g_size];
    Op& s = ops[2 * i + 1];
    s.send = true;
    s.ep = uint32_t(i);
    s.buf = &mem[(2 * i + 1) * g_size];
    fill(s.buf, uint32_t(i), kFromHub);
  }
  auto post_recvs = [&] {
    // At most rx_depth receives outstanding; each buffer is used once.
    while (posted < n && posted - recvd < rx_depth) {
      Op& r = ops[2 * posted];
      ssize_t rc = fi_recv(ep, r.buf, g_size, nullptr, FI_ADDR_UNSPEC, &r.ctx);
      if (rc == -FI_EAGAIN) return;
      if (rc) die("fi_recv: %zd (%s)", rc, fi_strerror(int(-rc)));
      posted++;
    }
  };
  // In waves, one helper's endpoints each: helper k starts ("go.<k>") once
  // the messages of helpers 0..k-1 have all arrived, so that at most E new
  // peers' handshakes and messages are on their way to the hub at once, not
  // N (an incast of 10,000 new peers overflows any receive ring, and the
  // retransmissions that follow are not what is measured here).
  post_recvs();
  double t1 = now_s();
  for (int k = 0; k < helpers; k++) {
    while (recvd < start[size_t(k)]) {
      reap(f, 1, "waiting for a wave", on);
      post_recvs();
      check_time("waiting for the previous helpers' messages");
    }
    put_file("go." + std::to_string(k), "", 0);
    for (size_t i = start[size_t(k)]; i < start[size_t(k) + 1]; i++) {
      Op& s = ops[2 * i + 1];
      for (;;) {
        if (sends_out < tx_depth) {
          ssize_t rc = fi_send(ep, s.buf, g_size, nullptr, peers[i], &s.ctx);
          if (rc == 0) break;
          if (rc != -FI_EAGAIN) die("fi_send to peer %zu: %zd (%s)", i, rc, fi_strerror(int(-rc)));
        }
        reap(f, 0, "sending", on);
        post_recvs();
        check_time("sending to the peers");
      }
      sends_out++;
    }
  }
  while (sent_done < n || recvd < n) {
    reap(f, 100, "completing", on);
    post_recvs();
    check_time("completing the exchange");
  }
  double t_exchange = now_s() - t1;
  for (size_t i = 0; i < n; i++)
    if (!seen[i]) die("no message from peer %zu", i);
  Snapshot c = snap();

  for (int k = 0; k < helpers; k++) wait_file("ok." + std::to_string(k), "waiting for the helpers' checks");
  // Idle, blocked: the provider's own threads and timers only.
  double cpu0 = cpu_s(), w0 = now_s();
  while (now_s() - w0 < 2.0) reap(f, 100, "idle", [](Op&, const fi_cq_msg_entry&) { die("unexpected completion"); });
  double idle_block_cpu = cpu_s() - cpu0, idle_block_wall = now_s() - w0;
  Snapshot d = snap();
  // Idle, polling: fi_cq_read in a loop for one second.
  long polls = 0;
  cpu0 = cpu_s();
  w0 = now_s();
  while (now_s() - w0 < 1.0) {
    for (int i = 0; i < 64; i++, polls++)
      reap(f, 0, "idle poll", [](Op&, const fi_cq_msg_entry&) { die("unexpected completion"); });
  }
  double poll_cpu = cpu_s() - cpu0, poll_wall = now_s() - w0;
  put_file("done", "", 0);

  auto per_peer = [&](long kib) { return double(kib) * 1024.0 / double(n); };
  printf("prov=%s peers=%zu helpers=%d name_len=%zu msg_bytes=%zu insert_ns_per_peer=%.0f exchange_s=%.3f "
         "rss_kib_a=%ld rss_kib_b=%ld rss_kib_c=%ld rss_kib_d=%ld maps_a=%ld maps_b=%ld maps_c=%ld maps_d=%ld "
         "insert_bytes_per_peer=%.0f message_bytes_per_peer=%.0f idle_bytes_per_peer=%.0f "
         "idle_block_cpu_ms_per_s=%.2f idle_poll_calls_per_s=%.0f idle_poll_cpu_ms_per_s=%.1f idle_poll_ns_per_call=%.0f\n",
         g_prov.c_str(), n, helpers, name_len, g_size, t_insert * 1e9 / double(n), t_exchange, a.rss, b.rss, c.rss,
         d.rss, a.maps, b.maps, c.maps, d.maps, per_peer(b.rss - a.rss), per_peer(c.rss - a.rss),
         per_peer(d.rss - a.rss), idle_block_cpu * 1e3 / idle_block_wall, double(polls) / poll_wall,
         poll_cpu * 1e3 / poll_wall, poll_cpu * 1e9 / double(polls));
  fflush(stdout);

  FI_OK(fi_close(&ep->fid));  // the provider's statistics, if asked for, go to stderr here
  close_fabric(f);

  int rc = 0;
  for (Snapshot s : {c, d}) {
    if (max_kib_per_peer > 0 && per_peer(s.rss - a.rss) > max_kib_per_peer * 1024.0) {
      fprintf(stderr, "peer_mem_bench hub: FAIL: %.0f bytes per peer, bound %.0f KiB\n", per_peer(s.rss - a.rss),
              max_kib_per_peer);
      rc = 1;
    }
    if (max_new_maps >= 0 && s.maps - a.maps > max_new_maps) {
      fprintf(stderr, "peer_mem_bench hub: FAIL: %ld new mappings, bound %ld\n", s.maps - a.maps, max_new_maps);
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "hub") && strcmp(argv[1], "helper"))) {
    fprintf(stderr,
            "usage: peer_mem_bench hub -d dir -n N -k helpers [-p prov] [-s bytes] [-T s] [-B KiB] [-G maps]\n"
            "       peer_mem_bench helper -d dir -k index -b first -e endpoints [-p prov] [-s bytes] [-T s]\n");
    return 2;
  }
  g_role = argv[1];
  mp::g_who = "peer_mem_bench " + g_role;
  double timeout = 300, max_kib = 0;
  long max_maps = -1, n = 0, k = -1, first = -1, eps = 0;
  optind = 2;
  for (int c; (c = getopt(argc, argv, "d:n:k:b:e:p:s:T:B:G:")) != -1;) {
    switch (c) {
      case 'd': g_dir = optarg; break;
      case 'n': n = atol(optarg); break;
      case 'k': k = atol(optarg); break;
      case 'b': first = atol(optarg); break;
      case 'e': eps = atol(optarg); break;
      case 'p': g_prov = optarg; break;
      case 's': g_size = strtoul(optarg, nullptr, 0); break;
      case 'T': timeout = atof(optarg); break;
      case 'B': max_kib = atof(optarg); break;
      case 'G': max_maps = atol(optarg); break;
      default: return 2;
    }
  }
  mp::g_deadline = now_s() + timeout;
  if (g_dir.empty() || g_size < 4) die("-d is required and -s at least 4");
  if (g_role == "hub") {
    if (n < 1 || k < 1) die("hub: -n and -k are required");
    return run_hub(size_t(n), int(k), max_kib, max_maps);
  }
  if (k < 0 || first < 0 || eps < 1) die("helper: -k, -b and -e are required");
  g_role += " " + std::to_string(k);
  mp::g_who = "peer_mem_bench " + g_role;
  return run_helper(int(k), uint32_t(first), size_t(eps));
}
