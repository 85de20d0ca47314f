// The pmshm device end to end: two or three devices of one process (and
// forked children's) in a private directory under /dev/shm, sending to each
// other through the receive queues, bounce chunks, CMA and the wake FIFO;
// connect timeouts, liveness and region cleanup; and what other processes
// can do to it: exit right after sending, die while claiming a queue cell,
// truncate region files, scribble on headers, receive signals.
#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <rdma/fi_errno.h>

#include "base/clock.hpp"
#include "device.hpp"
#include "shm_device.hpp"
#include "shm_layout.hpp"
#include "shm_region.hpp"
#include "packet_recorder.hpp"

using pm::kNoPeer;
using pm::PeerId;
using pm::PktHdr;
using pm::shm::kCellInline;
using pm::shm::ShmDevice;
using pm::shm::ShmName;

namespace {

constexpr uint32_t kCells = 16;
constexpr uint32_t kChunks = 4;
constexpr uint32_t kChunkSize = 8192;
constexpr int kConnectTimeoutMs = 200;
constexpr int kClaimTimeoutMs = 100;
constexpr uint64_t kHost = 0x0123456789abcdefull;

// --- fixture: a private region directory, removed after every test ----------
// Each test (its own process) works in a fresh directory, removed by the
// fini also when an assertion fails. The directories live in one per-run
// directory that the runner process removes at the end, so even a test that
// crashed (no fini) leaves nothing behind.
constexpr const char* kRunDirEnv = "PMUT_SHM_RUN_DIR";
char g_dir[256];
std::unique_ptr<ShmDevice> g_a, g_b, g_c;

void remove_tree(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      std::string p = dir + "/" + e->d_name;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
      else unlink(p.c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

void setup() {
  const char* run = getenv(kRunDirEnv);
  snprintf(g_dir, sizeof g_dir, "%s/pmut_shm_XXXXXX", run && *run ? run : "/dev/shm");
  cr_assert_not_null(mkdtemp(g_dir), "mkdtemp %s: %s", g_dir, strerror(errno));
}

void teardown() {
  g_c.reset();
  g_b.reset();
  g_a.reset();
  remove_tree(g_dir);
}

pm::shm::DeviceConfig config(bool cma = true) {
  pm::shm::DeviceConfig cfg;
  cfg.region.dir = g_dir;
  cfg.region.cells = kCells;
  cfg.region.chunks = kChunks;
  cfg.region.chunk_size = kChunkSize;
  cfg.cma = cma ? pm::shm::CmaPolicy::kOn : pm::shm::CmaPolicy::kOff;
  cfg.connect_timeout_ms = kConnectTimeoutMs;
  cfg.claim_timeout_ms = kClaimTimeoutMs;
  return cfg;
}

std::unique_ptr<ShmDevice> open_dev(bool cma = true) {
  int err = 0;
  std::unique_ptr<ShmDevice> d = ShmDevice::open(config(cma), kHost, &err);
  cr_assert_not_null(d.get(), "ShmDevice::open: %d (%s)", err, fi_strerror(-err));
  return d;
}

ShmName name_of(const ShmDevice& d) {
  cr_assert_eq(d.name_len(), sizeof(ShmName));
  ShmName n;
  memcpy(&n, d.name(), sizeof n);
  return n;
}

PeerId resolve(ShmDevice& at, const ShmDevice& who) {
  PeerId id = at.resolve(who.name(), who.name_len());
  cr_assert_neq(id, kNoPeer);
  return id;
}

PeerId resolve(ShmDevice& at, const ShmName& who) {
  PeerId id = at.resolve(&who, sizeof who);
  cr_assert_neq(id, kNoPeer);
  return id;
}

std::string path_of(const ShmDevice& d) {
  ShmName n = name_of(d);
  return pm::shm::region_path(g_dir, n.uid, n.key);
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// --- packets ----------------------------------------------------------------
// Got and Recorder: packet_recorder.hpp

// A header the device must carry unchanged: never a whole single-packet eager
// message (msg_len != len), which the device may send in a compact form.
PktHdr make_hdr(uint64_t i, size_t len) {
  PktHdr h{};
  h.op = uint8_t(i % 3 == 0 ? pm::kPktEager : i % 3 == 1 ? pm::kPktData : pm::kPktRts);
  h.flags = uint8_t(i & 1 ? pm::kPktTagged : 0);
  h.reserved = 0;
  h.seg_len = uint32_t(len);
  h.msg_id = 0x1000 + i;
  h.tag = 0xfeed000000000000ull | i;
  h.cq_data = ~i;
  h.msg_len = len + 1000 + i;
  h.offset = i * 7;
  return h;
}

// A message scattered over several iov entries of uneven sizes, placed apart
// in memory; bytes() is the flat reference of the whole iov stream.
struct Scatter {
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<struct iovec> iov;

  Scatter(size_t total, uint64_t seed) {
    const size_t pattern[] = {1, 7, 100, 13, 2048, 3, 999};
    size_t left = total;
    for (size_t i = 0; left > 0; i++) {
      size_t n = pattern[i % 7];
      if (n > left) n = left;
      bufs.emplace_back(n);
      left -= n;
    }
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (auto& b : bufs) {
      for (auto& c : b) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c = uint8_t(x);
      }
      iov.push_back({b.data(), b.size()});
    }
  }
  std::vector<uint8_t> bytes(size_t off, size_t len) const {
    std::vector<uint8_t> all;
    for (const auto& b : bufs) all.insert(all.end(), b.begin(), b.end());
    return std::vector<uint8_t>(all.begin() + long(off), all.begin() + long(off + len));
  }
};

int send_msg(ShmDevice& from, PeerId to, uint64_t i, size_t off, size_t len) {
  Scatter s(off + len + 5, i);
  PktHdr h = make_hdr(i, len);
  return from.send(to, h, s.iov.data(), s.iov.size(), off, len);
}

// Checks a received packet against what send_msg(i, off, len) sent.
void check_pkt(const Got& g, PeerId peer, uint64_t i, size_t off, size_t len) {
  cr_assert_eq(g.peer, peer, "packet %llu from peer %u, want %u", (unsigned long long)i, g.peer, peer);
  PktHdr want = make_hdr(i, len);
  cr_assert_eq(memcmp(&g.hdr, &want, sizeof want), 0, "header of packet %llu differs (msg_id %llu)",
               (unsigned long long)i, (unsigned long long)g.hdr.msg_id);
  cr_assert_eq(g.data.size(), len, "packet %llu has %zu bytes, want %zu", (unsigned long long)i,
               g.data.size(), len);
  std::vector<uint8_t> ref = Scatter(off + len + 5, i).bytes(off, len);
  for (size_t b = 0; b < len; b++)
    if (g.data[b] != ref[b])
      cr_assert_fail("packet %llu byte %zu is 0x%02x, want 0x%02x", (unsigned long long)i, b, g.data[b],
                     ref[b]);
}

bool readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

// A well-formed name of an endpoint that does not exist (no region file).
ShmName ghost_name(uint64_t key) {
  return ShmName{pm::shm::kNameMagic, pm::shm::kVersion, 0, uint32_t(getuid()), uint32_t(getpid()), key,
                 kHost};
}

}  // namespace

// Runner process: the per-run directory, created before any test starts.
static char g_run_dir[64];
ReportHook(PRE_ALL)(struct criterion_test_set*) {
  snprintf(g_run_dir, sizeof g_run_dir, "/dev/shm/pmut_run_XXXXXX");
  if (mkdtemp(g_run_dir)) setenv(kRunDirEnv, g_run_dir, 1);
  else g_run_dir[0] = 0;
}
ReportHook(POST_ALL)(struct criterion_global_stats*) {
  if (g_run_dir[0]) remove_tree(g_run_dir);
}

TestSuite(shm, .init = setup, .fini = teardown);

// --- names and regions ------------------------------------------------------

Test(shm, name_identifies_this_endpoint) {
  g_a = open_dev();
  g_b = open_dev();
  ShmName a = name_of(*g_a), b = name_of(*g_b);
  cr_assert_eq(a.magic, pm::shm::kNameMagic);
  cr_assert_eq(a.version, pm::shm::kVersion);
  cr_assert_eq(a.uid, uint32_t(getuid()));
  cr_assert_eq(a.pid, uint32_t(getpid()));
  cr_assert_eq(a.host, kHost);
  cr_assert_neq(a.key, 0u);
  cr_assert_neq(a.key, b.key, "two endpoints got the same key");
  cr_assert(ShmDevice::valid_name(&a, sizeof a));

  char want[96];
  snprintf(want, sizeof want, "pmshm://%u/%016llx@0123456789abcdef", a.uid, (unsigned long long)a.key);
  std::string s = g_a->name_str(&a, sizeof a);
  cr_assert_str_eq(s.c_str(), want);
  s = g_b->name_str(&a, sizeof a);  // any device formats any name
  cr_assert_str_eq(s.c_str(), want);
  s = g_a->name_str(&a, sizeof a - 1);
  cr_assert_str_eq(s.c_str(), "");
  ShmName bad = a;
  bad.magic ^= 1;
  s = g_a->name_str(&bad, sizeof bad);
  cr_assert_str_eq(s.c_str(), "");

  cr_assert_eq(g_a->max_payload(), kChunkSize);
}

Test(shm, region_file_has_the_configured_layout) {
  g_a = open_dev();
  std::string p = path_of(*g_a);
  char base[64];
  snprintf(base, sizeof base, "/pmshm_%u_%016llx", unsigned(getuid()), (unsigned long long)name_of(*g_a).key);
  std::string want = std::string(g_dir) + base;
  cr_assert_str_eq(p.c_str(), want.c_str());
  struct stat st;
  cr_assert_eq(stat(p.c_str(), &st), 0, "no region file %s", p.c_str());
  cr_assert(S_ISREG(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, 0600u);
  // 4 KiB header, 16 cells of 256 B, 128 introduction slots of 128 B and
  // 4 chunk states of 64 B (together page aligned: 20 KiB), 4 chunks of 8 KiB.
  cr_assert_eq(size_t(st.st_size), size_t(4096 + 16 * 256 + 20480 + 4 * 8192));
  cr_assert_eq(stat((p + ".wake").c_str(), &st), 0);
  cr_assert(S_ISFIFO(st.st_mode));
}

Test(shm, resolve_is_stable_and_rejects_malformed_names) {
  g_a = open_dev();
  g_b = open_dev();
  g_c = open_dev();
  PeerId pb = resolve(*g_a, *g_b);
  PeerId pc = resolve(*g_a, *g_c);
  cr_assert_neq(pb, pc);
  cr_assert_eq(resolve(*g_a, *g_b), pb);
  cr_assert_eq(resolve(*g_a, *g_c), pc);
  ShmName copy = name_of(*g_b);
  cr_assert_eq(g_a->resolve(&copy, sizeof copy), pb);

  size_t len = 0;
  const void* n = g_a->peer_name(pb, &len);
  cr_assert_not_null(n);
  cr_assert_eq(len, sizeof(ShmName));
  cr_assert_eq(memcmp(n, g_b->name(), len), 0);
  cr_assert_null(g_a->peer_name(pc + 1000, &len));

  ShmName bad = name_of(*g_b);
  cr_assert_eq(g_a->resolve(&bad, sizeof bad - 1), kNoPeer);
  uint8_t longer[sizeof bad + 1] = {};
  memcpy(longer, &bad, sizeof bad);
  cr_assert_eq(g_a->resolve(longer, sizeof longer), kNoPeer);
  bad.magic = 0x12345678;
  cr_assert_eq(g_a->resolve(&bad, sizeof bad), kNoPeer);
  bad = name_of(*g_b);
  bad.version = pm::shm::kVersion + 1;
  cr_assert_eq(g_a->resolve(&bad, sizeof bad), kNoPeer);
  bad = name_of(*g_b);
  bad.key = 0;
  cr_assert_eq(g_a->resolve(&bad, sizeof bad), kNoPeer);
  // Rejections did not create peers.
  ShmName g = ghost_name(0x77);
  PeerId next = g_a->resolve(&g, sizeof g);
  cr_assert_eq(next, (pb > pc ? pb : pc) + 1);
}

// --- the queue --------------------------------------------------------------

Test(shm, inline_packets_arrive_in_order_with_their_bytes) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 0);  // empty

  const size_t lens[] = {0, 1, 8, 47, 100, kCellInline - 1, kCellInline, 2, 64, 150};
  const size_t offs[] = {0, 5, 1, 0, 2100, 9, 8, 7, 1000, 3};
  for (uint64_t i = 0; i < 10; i++)
    cr_assert_eq(send_msg(*g_a, to_b, i, offs[i], lens[i]), 0, "send %llu", (unsigned long long)i);

  // A small budget delivers the first ones only, the rest stays queued.
  cr_assert_eq(g_b->poll(r, 3), 3);
  cr_assert_eq(r.got.size(), 3u);
  cr_assert_eq(g_b->poll(r, 100), 7);
  cr_assert_eq(r.got.size(), 10u);
  for (uint64_t i = 0; i < 10; i++) check_pkt(r.got[i], from_a, i, offs[i], lens[i]);
  cr_assert_eq(g_b->poll(r, 100), 0);
  cr_assert_eq(g_a->poll(r, 100), 0);  // nothing went the other way
}

Test(shm, sender_first_seen_by_a_packet_gets_the_id_of_its_name) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 10), 0);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 10), 1);
  PeerId seen = r.got[0].peer;
  cr_assert_neq(seen, kNoPeer);
  // The name rebuilt from the sender's region equals the one it advertises.
  size_t len = 0;
  const void* n = g_b->peer_name(seen, &len);
  cr_assert_not_null(n);
  cr_assert_eq(len, sizeof(ShmName));
  cr_assert_eq(memcmp(n, g_a->name(), len), 0);
  cr_assert_eq(resolve(*g_b, *g_a), seen);
  check_pkt(r.got[0], seen, 1, 0, 10);
  // And replies go back over it.
  cr_assert_eq(send_msg(*g_b, seen, 2, 3, 20), 0);
  Recorder ra;
  cr_assert_eq(g_a->poll(ra, 10), 1);
  check_pkt(ra.got[0], to_b, 2, 3, 20);
}

Test(shm, chunk_packets_carry_large_payloads_across_iovs) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  const size_t lens[] = {kCellInline + 1, 4096, kChunkSize - 1, kChunkSize};
  const size_t offs[] = {0, 1, 2050, 3};
  for (uint64_t i = 0; i < 4; i++) cr_assert_eq(send_msg(*g_a, to_b, i, offs[i], lens[i]), 0);
  // Larger than a chunk is refused outright.
  cr_assert_eq(send_msg(*g_a, to_b, 9, 0, kChunkSize + 1), -FI_EINVAL);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 4);
  for (uint64_t i = 0; i < 4; i++) check_pkt(r.got[i], from_a, i, offs[i], lens[i]);
}

Test(shm, inline_and_chunk_packets_keep_one_order) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  const size_t lens[] = {10, 5000, 0, kChunkSize, kCellInline, kCellInline + 1, 1};
  for (uint64_t i = 0; i < 7; i++) cr_assert_eq(send_msg(*g_a, to_b, i, i, lens[i]), 0);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 7);
  for (uint64_t i = 0; i < 7; i++) check_pkt(r.got[i], from_a, i, i, lens[i]);
}

Test(shm, only_payloads_beyond_the_cell_take_a_chunk) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t k = 0; k < kChunks; k++) cr_assert_eq(send_msg(*g_a, to_b, k, 0, 2000), 0);
  // Chunks exhausted: a payload that fits the cell still goes, one more byte waits.
  cr_assert_eq(send_msg(*g_a, to_b, 4, 2, kCellInline), 0);
  cr_assert_eq(send_msg(*g_a, to_b, 5, 0, kCellInline + 1), -FI_EAGAIN);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), int(kChunks) + 1);
  for (uint64_t k = 0; k < kChunks; k++) check_pkt(r.got[k], from_a, k, 0, 2000);
  check_pkt(r.got[kChunks], from_a, 4, 2, kCellInline);
}

// A whole single-packet eager message may travel in the compact cell format:
// larger inline payloads, and the receiver sees op, flags, tag, cq_data and
// lengths as sent.
Test(shm, single_packet_eager_messages_keep_tag_data_and_length) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  // Take every chunk first: none of these may need one.
  for (uint64_t k = 0; k < kChunks; k++) cr_assert_eq(send_msg(*g_a, to_b, 3 * k, 0, 3000), 0);
  const size_t lens[] = {0, 1, kCellInline, kCellInline + 1, pm::shm::kCompactInline};
  const uint8_t flags[] = {0, pm::kPktTagged, pm::kPktCqData, pm::kPktTagged | pm::kPktCqData, pm::kPktTagged};
  for (size_t k = 0; k < 5; k++) {
    Scatter sc(lens[k] + 9, 500 + k);
    PktHdr h{};
    h.op = pm::kPktEager;
    h.flags = flags[k];
    h.seg_len = uint32_t(lens[k]);
    h.msg_id = 0x77 + k;
    h.tag = 0xabcdef0000000000ull + k;
    h.cq_data = 0x1111111111111111ull * (k + 1);
    h.msg_len = lens[k];
    h.offset = 0;
    cr_assert_eq(g_a->send(to_b, h, sc.iov.data(), sc.iov.size(), 9, lens[k]), 0, "eager of %zu bytes",
                 lens[k]);
  }
  // A whole message one byte over the compact size needs a chunk again.
  {
    Scatter sc(300, 1);
    PktHdr h{};
    h.op = pm::kPktEager;
    h.msg_len = h.seg_len = pm::shm::kCompactInline + 1;
    cr_assert_eq(g_a->send(to_b, h, sc.iov.data(), sc.iov.size(), 0, pm::shm::kCompactInline + 1), -FI_EAGAIN);
  }
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), int(kChunks) + 5);
  for (uint64_t k = 0; k < kChunks; k++) check_pkt(r.got[k], from_a, 3 * k, 0, 3000);
  for (size_t k = 0; k < 5; k++) {
    const Got& g = r.got[kChunks + k];
    cr_assert_eq(g.peer, from_a);
    cr_assert_eq(g.hdr.op, pm::kPktEager);
    cr_assert_eq(g.hdr.flags, flags[k]);
    cr_assert_eq(g.hdr.tag, 0xabcdef0000000000ull + k);
    cr_assert_eq(g.hdr.cq_data, 0x1111111111111111ull * (k + 1));
    cr_assert_eq(g.hdr.msg_len, lens[k]);
    cr_assert_eq(g.hdr.seg_len, lens[k]);
    cr_assert_eq(g.hdr.offset, 0u);
    cr_assert_eq(g.data.size(), lens[k]);
    std::vector<uint8_t> ref = Scatter(lens[k] + 9, 500 + k).bytes(9, lens[k]);
    cr_assert(g.data == ref, "payload of the %zu-byte eager message differs", lens[k]);
  }
}

Test(shm, full_queue_returns_eagain_until_the_receiver_polls) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  uint64_t i = 0;
  for (; i < kCells; i++) cr_assert_eq(send_msg(*g_a, to_b, i, 0, 32), 0, "send %llu", (unsigned long long)i);
  cr_assert_eq(send_msg(*g_a, to_b, 100, 0, 32), -FI_EAGAIN);
  cr_assert_eq(send_msg(*g_a, to_b, 101, 0, 32), -FI_EAGAIN);
  // A chunk packet is refused too, and gives its chunk back.
  for (int k = 0; k < 2 * int(kChunks); k++) cr_assert_eq(send_msg(*g_a, to_b, 102, 0, 4000), -FI_EAGAIN);

  Recorder r;
  cr_assert_eq(g_b->poll(r, 1), 1);
  cr_assert_eq(send_msg(*g_a, to_b, i++, 0, 32), 0);  // one cell free again
  cr_assert_eq(send_msg(*g_a, to_b, 103, 0, 32), -FI_EAGAIN);
  cr_assert_eq(g_b->poll(r, 100), int(kCells));
  cr_assert_eq(r.got.size(), size_t(kCells) + 1);
  for (uint64_t k = 0; k < i; k++) check_pkt(r.got[k], from_a, k, 0, 32);

  // Every chunk is still free: as many chunk packets as chunks go through.
  r.got.clear();
  for (uint64_t k = 0; k < kChunks; k++) cr_assert_eq(send_msg(*g_a, to_b, 200 + k, 1, 4000), 0);
  cr_assert_eq(g_b->poll(r, 100), int(kChunks));
  for (uint64_t k = 0; k < kChunks; k++) check_pkt(r.got[k], from_a, 200 + k, 1, 4000);
}

Test(shm, queue_wraps_around_many_times) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  uint64_t sent = 0, seen = 0;
  Recorder r;
  // Uneven batches so head and tail meet at every cell position.
  for (int round = 0; round < 40; round++) {
    int batch = 1 + (round * 5) % int(kCells);
    for (int k = 0; k < batch; k++, sent++) cr_assert_eq(send_msg(*g_a, to_b, sent, 0, sent % 150), 0);
    cr_assert_eq(g_b->poll(r, 1000), batch);
    for (; seen < sent; seen++) check_pkt(r.got[seen], from_a, seen, 0, seen % 150);
  }
  cr_assert_gt(sent, uint64_t(10 * kCells));
}

Test(shm, chunks_are_recycled_after_the_receiver_consumed_them) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  uint64_t i = 0;
  Recorder r;
  for (int round = 0; round < 6; round++) {
    uint64_t first = i;
    for (uint32_t k = 0; k < kChunks; k++, i++)
      cr_assert_eq(send_msg(*g_a, to_b, i, i % 11, 1000 + 1000 * k), 0, "round %d chunk %u", round, k);
    // All chunks busy: chunk packets wait, inline ones still go.
    cr_assert_eq(send_msg(*g_a, to_b, 999, 0, 1000), -FI_EAGAIN);
    cr_assert_eq(send_msg(*g_a, to_b, i, 0, 50), 0);
    i++;
    r.got.clear();
    cr_assert_eq(g_b->poll(r, 100), int(kChunks) + 1);
    for (uint32_t k = 0; k < kChunks; k++)
      check_pkt(r.got[k], from_a, first + k, (first + k) % 11, 1000 + 1000 * k);
    check_pkt(r.got[kChunks], from_a, first + kChunks, 0, 50);
  }
  // 24 chunk packets went through 4 chunks.
  cr_assert_eq(i, uint64_t(6 * (kChunks + 1)));
}

Test(shm, partial_consumption_frees_exactly_the_consumed_chunks) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  for (uint64_t k = 0; k < kChunks; k++) cr_assert_eq(send_msg(*g_a, to_b, k, 0, 3000), 0);
  cr_assert_eq(send_msg(*g_a, to_b, 50, 0, 3000), -FI_EAGAIN);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 1), 1);
  cr_assert_eq(send_msg(*g_a, to_b, 4, 0, 3000), 0);   // the one freed chunk
  cr_assert_eq(send_msg(*g_a, to_b, 51, 0, 3000), -FI_EAGAIN);
  cr_assert_eq(g_b->poll(r, 100), 4);
  for (uint64_t k = 0; k < 5; k++) check_pkt(r.got[k], from_a, k, 0, 3000);
}

Test(shm, two_senders_into_one_queue_keep_per_sender_order) {
  g_a = open_dev();
  g_b = open_dev();
  g_c = open_dev();
  PeerId a_to_b = resolve(*g_a, *g_b);
  PeerId c_to_b = resolve(*g_c, *g_b);
  for (uint64_t k = 0; k < 6; k++) {
    cr_assert_eq(send_msg(*g_a, a_to_b, k, 0, k % 2 ? 3000 : 40), 0);
    cr_assert_eq(send_msg(*g_c, c_to_b, 100 + k, 1, k % 3 ? 60 : 2000), 0);
  }
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 12);
  PeerId from_a = resolve(*g_b, *g_a), from_c = resolve(*g_b, *g_c);
  cr_assert_neq(from_a, from_c);
  uint64_t na = 0, nc = 0;
  for (const Got& g : r.got) {
    if (g.peer == from_a) {
      check_pkt(g, from_a, na, 0, na % 2 ? 3000 : 40);
      na++;
    } else {
      check_pkt(g, from_c, 100 + nc, 1, nc % 3 ? 60 : 2000);
      nc++;
    }
  }
  cr_assert_eq(na, 6u);
  cr_assert_eq(nc, 6u);
}

// --- connecting to endpoints that are not there -------------------------------

Test(shm, missing_region_is_eagain_until_the_connect_timeout_then_unreachable) {
  g_a = open_dev();
  ShmName ghost = ghost_name(0x5eed5eed5eed5eedull);
  PeerId p = g_a->resolve(&ghost, sizeof ghost);
  cr_assert_neq(p, kNoPeer);
  uint64_t start = pm::now_ns();
  uint64_t deadline = start + 2000ull * 1000000;
  int rc, eagains = 0;
  while ((rc = send_msg(*g_a, p, 1, 0, 16)) == -FI_EAGAIN && pm::now_ns() < deadline) {
    eagains++;
    usleep(5000);
  }
  uint64_t elapsed_ms = (pm::now_ns() - start) / 1000000;
  cr_assert_eq(rc, -FI_EHOSTUNREACH, "send gave %d (%s) after %llu ms", rc, fi_strerror(-rc),
               (unsigned long long)elapsed_ms);
  cr_assert_geq(elapsed_ms, uint64_t(kConnectTimeoutMs), "gave up after %llu ms",
                (unsigned long long)elapsed_ms);
  cr_assert_lt(elapsed_ms, 1500u);
  cr_assert_gt(eagains, 5);
  // Unreachable for good, also for chunk packets, liveness and CMA.
  cr_assert_eq(send_msg(*g_a, p, 2, 0, 16), -FI_EHOSTUNREACH);
  cr_assert_eq(send_msg(*g_a, p, 3, 0, 5000), -FI_EHOSTUNREACH);
  cr_assert_not(g_a->peer_alive(p));
  cr_assert_not(g_a->can_read_remote(p));
}

Test(shm, peer_alive_is_true_within_the_connect_timeout_of_a_missing_region) {
  g_a = open_dev();
  ShmName ghost = ghost_name(0xabcdef12345ull);
  PeerId p = g_a->resolve(&ghost, sizeof ghost);
  cr_assert(g_a->peer_alive(p));
  usleep((kConnectTimeoutMs + 50) * 1000);
  cr_assert_not(g_a->peer_alive(p));
  cr_assert_not(g_a->peer_alive(p + 100));  // unknown id
}

Test(shm, region_appearing_within_the_timeout_connects) {
  g_a = open_dev();
  g_b = open_dev();
  // B's name is resolved before B exists; simulate by hiding its region.
  std::string p = path_of(*g_b), hidden = p + ".hidden";
  cr_assert_eq(rename(p.c_str(), hidden.c_str()), 0);
  PeerId to_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 16), -FI_EAGAIN);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 16), -FI_EAGAIN);
  cr_assert_eq(rename(hidden.c_str(), p.c_str()), 0);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 16), 0);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 10), 1);
  check_pkt(r.got[0], resolve(*g_b, *g_a), 1, 0, 16);
}

// --- single copy --------------------------------------------------------------

Test(shm, read_remote_copies_from_the_peer_process_by_cma) {
  {
    // Skip only where the kernel forbids CMA outright (seccomp, ptrace scope).
    uint64_t s = 42, d = 0;
    struct iovec l = {&d, sizeof d}, rr = {&s, sizeof s};
    if (process_vm_readv(getpid(), &l, 1, &rr, 1, 0) != ssize_t(sizeof d))
      cr_skip_test("process_vm_readv is not permitted here: %s", strerror(errno));
  }
  g_a = open_dev();
  g_b = open_dev();
  PeerId a_in_b = resolve(*g_b, *g_a);
  cr_assert(g_b->can_read_remote(a_in_b));
  cr_assert(g_b->can_read_remote(a_in_b));  // cached answer

  // "Remote" memory of A (same process): three pieces with offsets.
  Scatter src(20000, 77);
  std::vector<uint8_t> flat = src.bytes(0, 20000);
  struct iovec remote[3] = {{flat.data() + 3, 5000}, {flat.data() + 9000, 1}, {flat.data() + 12000, 7999}};
  std::vector<uint8_t> l1(4096, 0), l2(9000, 0);
  struct iovec local[2] = {{l1.data(), l1.size()}, {l2.data(), l2.size()}};
  ssize_t n = g_b->read_remote(a_in_b, local, 2, remote, 3);
  cr_assert_eq(n, ssize_t(5000 + 1 + 7999));
  std::vector<uint8_t> want;
  want.insert(want.end(), flat.begin() + 3, flat.begin() + 5003);
  want.push_back(flat[9000]);
  want.insert(want.end(), flat.begin() + 12000, flat.begin() + 19999);
  std::vector<uint8_t> got(l1);
  got.insert(got.end(), l2.begin(), l2.end());
  cr_assert_eq(memcmp(got.data(), want.data(), want.size()), 0, "CMA bytes differ");
  cr_assert_eq(got[want.size()], 0, "CMA wrote past the data");

  // A bad remote address is an error, not a crash.
  struct iovec bad = {reinterpret_cast<void*>(8), 16};
  cr_assert_lt(g_b->read_remote(a_in_b, local, 1, &bad, 1), 0);
  std::string st = g_b->stats();
  cr_assert(st.find("cma_reads=1 cma_bytes=13000") != std::string::npos, "%s", st.c_str());
}

Test(shm, cma_disabled_means_no_single_copy) {
  g_a = open_dev();
  g_b = open_dev(false);
  PeerId a_in_b = resolve(*g_b, *g_a);
  cr_assert_not(g_b->can_read_remote(a_in_b));
  cr_assert_not(g_b->can_read_remote(a_in_b + 50));
}

// --- liveness and cleanup -----------------------------------------------------

Test(shm, destroyed_device_removes_its_region_and_is_seen_dead) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId a_in_b = resolve(*g_b, *g_a);
  PeerId b_in_a = resolve(*g_a, *g_b);
  cr_assert_eq(send_msg(*g_b, a_in_b, 1, 0, 8), 0);  // maps A's region in B
  cr_assert(g_b->peer_alive(a_in_b));
  cr_assert(g_a->peer_alive(b_in_a));
  std::string pa = path_of(*g_a);
  cr_assert(exists(pa));
  cr_assert(exists(pa + ".wake"));

  g_a.reset();
  cr_assert_not(exists(pa), "region %s still there after the device closed", pa.c_str());
  cr_assert_not(exists(pa + ".wake"));
  cr_assert_not(g_b->peer_alive(a_in_b));
  cr_assert_not(g_b->peer_alive(a_in_b));
  // Once seen dead, sends fail at once, inline or not.
  cr_assert_eq(send_msg(*g_b, a_in_b, 2, 0, 8), -FI_ECONNRESET);
  cr_assert_eq(send_msg(*g_b, a_in_b, 3, 0, 3000), -FI_ECONNRESET);
  cr_assert_not(g_b->can_read_remote(a_in_b));
  // B itself is untouched.
  cr_assert(exists(path_of(*g_b)));
}

// --- another process ----------------------------------------------------------

namespace {
struct ChildInfo {
  ShmName name;
  uint64_t buf_addr;  // a buffer in the child holding pattern(i) = i * 3 + 1
};
constexpr size_t kChildBuf = 10000;

// The child: opens its device, says who it is, sends three packets to the
// parent, then waits for the word and exits without any cleanup (as if killed).
[[noreturn]] void child_main(int info_fd, int go_fd, ShmName parent) {
  static uint8_t buf[kChildBuf];
  for (size_t i = 0; i < kChildBuf; i++) buf[i] = uint8_t(i * 3 + 1);
  int err = 0;
  std::unique_ptr<ShmDevice> d = ShmDevice::open(config(), kHost, &err);
  if (!d) _exit(2);
  ChildInfo ci{};
  memcpy(&ci.name, d->name(), sizeof ci.name);
  ci.buf_addr = reinterpret_cast<uint64_t>(buf);
  PeerId to_parent = d->resolve(&parent, sizeof parent);
  for (uint64_t i = 0; i < 3; i++)
    if (send_msg(*d, to_parent, 40 + i, i, i == 1 ? 5000 : 100) != 0) _exit(3);
  if (write(info_fd, &ci, sizeof ci) != ssize_t(sizeof ci)) _exit(4);
  char c;
  if (read(go_fd, &c, 1) != 1) _exit(5);
  _exit(0);  // no destructors, no atexit: the region file stays behind
}
}  // namespace

Test(shm, another_process_sends_is_read_by_cma_and_is_detected_dead) {
  g_b = open_dev();
  const ShmName parent = name_of(*g_b);
  int info[2], go[2];
  cr_assert_eq(pipe(info), 0);
  cr_assert_eq(pipe(go), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(info[0]);
    close(go[1]);
    child_main(info[1], go[0], parent);
  }
  close(info[1]);
  close(go[0]);
  ChildInfo ci{};
  ssize_t got = read(info[0], &ci, sizeof ci);
  close(info[0]);
  if (got != ssize_t(sizeof ci)) {
    close(go[1]);
    int st = 0;
    waitpid(pid, &st, 0);
    cr_assert_fail("child failed before reporting (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  cr_assert_eq(ci.name.pid, uint32_t(pid));

  // Its packets, first seen as a sender.
  Recorder r;
  cr_assert_eq(g_b->poll(r, 10), 3);
  PeerId child = resolve(*g_b, ci.name);
  for (uint64_t i = 0; i < 3; i++) check_pkt(r.got[i], child, 40 + i, i, i == 1 ? 5000 : 100);
  cr_assert(g_b->peer_alive(child));

  // Single copy out of its memory.
  {
    uint64_t s = 42, d = 0;
    struct iovec l = {&d, sizeof d}, rr = {&s, sizeof s};
    bool cma_ok = process_vm_readv(getpid(), &l, 1, &rr, 1, 0) == ssize_t(sizeof d);
    if (cma_ok) {
      cr_assert(g_b->can_read_remote(child));
      std::vector<uint8_t> dst(3000, 0);
      struct iovec lo = {dst.data(), dst.size()};
      struct iovec re = {reinterpret_cast<void*>(ci.buf_addr + 123), 3000};
      cr_assert_eq(g_b->read_remote(child, &lo, 1, &re, 1), ssize_t(3000));
      for (size_t i = 0; i < 3000; i++)
        if (dst[i] != uint8_t((i + 123) * 3 + 1)) cr_assert_fail("CMA byte %zu differs", i);
    }
  }

  // Killed without cleanup: its files stay until someone sees it dead.
  std::string path = pm::shm::region_path(g_dir, ci.name.uid, ci.name.key);
  cr_assert_eq(write(go[1], "x", 1), 1);
  close(go[1]);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  cr_assert(exists(path), "the child's region should outlive it");
  cr_assert_not(g_b->peer_alive(child));
  cr_assert_not(exists(path), "a dead peer's region is removed once it is seen dead");
  cr_assert_not(exists(path + ".wake"));
  cr_assert_eq(send_msg(*g_b, child, 9, 0, 10), -FI_ECONNRESET);
}

Test(shm, open_removes_stale_regions_but_not_live_ones) {
  g_a = open_dev();
  // A region file of a dead endpoint: right name, not locked.
  std::string stale = pm::shm::region_path(g_dir, getuid(), 0xdeaddeaddeaddeadull);
  int fd = ::open(stale.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, 8192), 0);
  close(fd);
  cr_assert_eq(mkfifo((stale + ".wake").c_str(), 0600), 0);
  // Files that only look similar stay.
  std::string other = std::string(g_dir) + "/pmshm_notours";
  fd = ::open(other.c_str(), O_RDWR | O_CREAT, 0600);
  cr_assert_geq(fd, 0);
  close(fd);

  g_b = open_dev();
  cr_assert_not(exists(stale), "stale region not removed");
  cr_assert_not(exists(stale + ".wake"));
  cr_assert(exists(path_of(*g_a)), "a live region was removed");
  cr_assert(exists(other));
}

// --- blocking waits -----------------------------------------------------------

Test(shm, armed_receiver_is_woken_through_its_fifo) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  int fd = g_b->wait_fd();
  cr_assert_geq(fd, 0);
  cr_assert_not(readable(fd));

  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 8), 0);  // not armed: no wake
  cr_assert_not(readable(fd));
  g_b->arm_wait(true);
  cr_assert_eq(send_msg(*g_a, to_b, 2, 0, 8), 0);
  cr_assert(readable(fd), "armed receiver not woken");
  g_b->drain_wait();
  cr_assert_not(readable(fd));
  g_b->arm_wait(false);
  cr_assert_eq(send_msg(*g_a, to_b, 3, 0, 8), 0);
  cr_assert_not(readable(fd));
  Recorder r;
  cr_assert_eq(g_b->poll(r, 10), 3);
  std::string st = g_a->stats();
  cr_assert(st.find("wakes=1 ") != std::string::npos, "%s", st.c_str());
}

Test(shm, stats_count_what_happened) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  for (uint64_t k = 0; k < kChunks; k++) cr_assert_eq(send_msg(*g_a, to_b, k, 0, 1000), 0);
  cr_assert_eq(send_msg(*g_a, to_b, 9, 0, 1000), -FI_EAGAIN);  // no chunk
  for (uint64_t k = kChunks; k < kCells; k++) cr_assert_eq(send_msg(*g_a, to_b, k, 0, 10), 0);
  cr_assert_eq(send_msg(*g_a, to_b, 9, 0, 10), -FI_EAGAIN);    // queue full
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), int(kCells));
  std::string sa = g_a->stats(), sb = g_b->stats();
  cr_assert(sa.find("tx_pkts=16 inline=12 chunk=4 rx_pkts=0") != std::string::npos, "%s", sa.c_str());
  cr_assert(sa.find("queue_full=1 no_chunk=1 wakes=0 dropped=0") != std::string::npos, "%s", sa.c_str());
  cr_assert(sb.find("tx_pkts=0 inline=0 chunk=0 rx_pkts=16") != std::string::npos, "%s", sb.c_str());
  std::string self = g_a->name_str(g_a->name(), g_a->name_len());
  cr_assert_eq(sa.rfind(self + " ", 0), 0u, "%s", sa.c_str());
}

// --- forked helpers -------------------------------------------------------------

namespace {
// A forked child running body(in, out): it reads what the parent put() on
// `in` and writes what the parent get()s on `out`, then _exits with body's
// result (no destructors, no atexit: nothing of the parent's runs there).
// Every wait on it is bounded.
struct Child {
  pid_t pid = -1;
  int to_child = -1, from_child = -1;

  template <class F>
  static Child start(F body) {
    int down[2], up[2];
    cr_assert_eq(pipe(down), 0);
    cr_assert_eq(pipe(up), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
      close(down[1]);
      close(up[0]);
      _exit(body(down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    return Child{pid, down[1], up[0]};
  }
  template <class T>
  void put(const T& v) {
    cr_assert_eq(write(to_child, &v, sizeof v), ssize_t(sizeof v));
  }
  template <class T>
  T get() {
    T v{};
    struct pollfd p = {from_child, POLLIN, 0};
    cr_assert_eq(::poll(&p, 1, 10000), 1, "child %d said nothing for 10 s", int(pid));
    cr_assert_eq(read(from_child, &v, sizeof v), ssize_t(sizeof v), "child %d exited early", int(pid));
    return v;
  }
  // Waits (bounded) for the child to end; its wait status.
  int wait() {
    for (int i = 0; i < 1000; i++) {
      int st = 0;
      pid_t r = waitpid(pid, &st, WNOHANG);
      if (r == pid) {
        close(to_child);
        close(from_child);
        return st;
      }
      usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    cr_assert_fail("child %d did not end within 10 s", int(pid));
    return -1;
  }
  void expect_exit0() {
    int st = wait();
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x (signal %d)", st,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
};

template <class T>
bool child_put(int fd, const T& v) {
  return write(fd, &v, sizeof v) == ssize_t(sizeof v);
}
template <class T>
bool child_get(int fd, T* v) {
  struct pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, 10000) == 1 && read(fd, v, sizeof *v) == ssize_t(sizeof *v);
}

// Polls until `want` packets arrived or `ms` passed; the number delivered.
int poll_until(ShmDevice& d, Recorder& r, size_t want, int ms) {
  uint64_t end = pm::now_ns() + uint64_t(ms) * 1000000;
  int n = 0;
  while (r.got.size() < want && pm::now_ns() < end) {
    n += d.poll(r, 100);
    usleep(1000);
  }
  return n;
}

uint64_t stat_of(const ShmDevice& d, const char* what) {
  std::string s = d.stats();
  std::string key = std::string(" ") + what + "=";
  size_t at = s.find(key);
  cr_assert_neq(at, std::string::npos, "no %s in %s", what, s.c_str());
  return strtoull(s.c_str() + at + key.size(), nullptr, 10);
}

// A pid that belonged to a process which is gone (a reaped child).
pid_t dead_pid() {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) _exit(0);
  cr_assert_eq(waitpid(pid, nullptr, 0), pid);
  return pid;
}

// Rewrites the plain part of a region's header in place.
void patch_header(const std::string& path, void (*f)(pm::shm::RegionInfo&)) {
  int fd = ::open(path.c_str(), O_RDWR);
  cr_assert_geq(fd, 0);
  pm::shm::RegionInfo h;
  cr_assert_eq(pread(fd, &h, sizeof h, 0), ssize_t(sizeof h));
  f(h);
  cr_assert_eq(pwrite(fd, &h, sizeof h, 0), ssize_t(sizeof h));
  close(fd);
}
}  // namespace

// --- senders that are gone by the time the receiver polls ---------------------------

// A sender that closed right after sending: its inline packets and its chunk
// packets (its region is kept while they wait) reach the receiver, which
// names it exactly as it named itself. Then its files go.
Test(shm, a_sender_gone_before_the_first_poll_is_named_and_delivered) {
  g_b = open_dev();
  g_a = open_dev();
  const ShmName a = name_of(*g_a);
  const std::string pa = path_of(*g_a);
  PeerId to_b = resolve(*g_a, *g_b);
  const size_t lens[] = {10, 3000, 150, kChunkSize};
  for (uint64_t i = 0; i < 4; i++) cr_assert_eq(send_msg(*g_a, to_b, i, i, lens[i]), 0);
  g_a.reset();
  cr_assert(exists(pa), "the sender's region went while the receiver still needs its chunks");

  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 4);
  PeerId from_a = r.got[0].peer;
  size_t len = 0;
  const void* n = g_b->peer_name(from_a, &len);
  cr_assert_not_null(n);
  cr_assert_eq(len, sizeof a);
  cr_assert_eq(memcmp(n, &a, sizeof a), 0, "the receiver names the sender differently than it did itself");
  for (uint64_t i = 0; i < 4; i++) check_pkt(r.got[i], from_a, i, i, lens[i]);
  cr_assert_eq(stat_of(*g_b, "dropped"), 0u);
  cr_assert_not(g_b->peer_alive(from_a));
  cr_assert_not(exists(pa), "a dead sender's region stays after its chunks were consumed");
  cr_assert_not(exists(pa + ".wake"));
}

// Its region removed before the receiver polls (exit with cleanup, or a
// stale-region sweep): inline packets need nothing of it.
Test(shm, inline_packets_need_nothing_of_the_senders_region) {
  g_b = open_dev();
  g_a = open_dev();
  const ShmName a = name_of(*g_a);
  PeerId to_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 100), 0);
  PktHdr h{};
  h.op = pm::kPktEager;
  h.flags = pm::kPktTagged;
  h.tag = 0x77;
  h.msg_len = h.seg_len = 20;
  Scatter sc(20, 5);
  cr_assert_eq(g_a->send(to_b, h, sc.iov.data(), sc.iov.size(), 0, 20), 0);  // compact
  std::string pa = path_of(*g_a);
  g_a.reset();
  cr_assert_not(exists(pa));
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 2);
  PeerId from_a = resolve(*g_b, a);
  check_pkt(r.got[0], from_a, 1, 0, 100);
  cr_assert_eq(r.got[1].peer, from_a);
  cr_assert_eq(r.got[1].hdr.tag, 0x77u);
  cr_assert(r.got[1].data == sc.bytes(0, 20));
}

// Introduction slots taken by writers that died are reclaimed once the
// receiver passed everything they could have sent; a sender that finds none
// free is still named (from its region).
Test(shm, introduction_slots_of_dead_writers_are_reclaimed) {
  g_b = open_dev();
  const ShmName b = name_of(*g_b);
  pm::shm::Region view;
  cr_assert_eq(view.open(g_dir, b.uid, b.key), 0);
  const uint64_t dead = pm::shm::intro_state(uint32_t(dead_pid()), pm::shm::kIntroWriting);
  for (uint32_t i = 0; i < view.intro_count(); i++) view.intros()[i].state.store(dead);

  g_a = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 3000), 0);
  cr_assert_eq(stat_of(*g_a, "intro_full"), 1u);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 1);
  check_pkt(r.got[0], resolve(*g_b, *g_a), 1, 0, 3000);
  for (uint32_t i = 0; i < view.intro_count(); i++)
    cr_assert_eq(view.intros()[i].state.load(), 0u, "slot %u not reclaimed", i);

  // Free again: the next sender introduces itself, and its slot is freed.
  g_c = open_dev();
  PeerId c_to_b = resolve(*g_c, *g_b);
  cr_assert_eq(send_msg(*g_c, c_to_b, 2, 0, 30), 0);
  cr_assert_eq(stat_of(*g_c, "intro_full"), 0u);
  uint32_t used = 0;
  for (uint32_t i = 0; i < view.intro_count(); i++) used += view.intros()[i].state.load() != 0;
  cr_assert_eq(used, 1u);
  cr_assert_eq(g_b->poll(r, 100), 1);
  check_pkt(r.got[1], resolve(*g_b, *g_c), 2, 0, 30);
  for (uint32_t i = 0; i < view.intro_count(); i++) cr_assert_eq(view.intros()[i].state.load(), 0u);
}

// A dead sender whose packets are still queued stays alive to the core
// until they are delivered (the end of a message whose send completed).
Test(shm, a_dead_senders_queued_packets_come_before_it_is_reported_dead) {
  g_b = open_dev();
  const ShmName b = name_of(*g_b);
  Child c = Child::start([&](int in, int out) {
    std::unique_ptr<ShmDevice> d = open_dev();
    PeerId to = d->resolve(&b, sizeof b);
    for (uint64_t i = 0; i < 3; i++)
      if (send_msg(*d, to, 60 + i, 0, 4000) != 0) return 2;
    return child_put(out, name_of(*d)) ? 0 : 3;  // then gone without cleanup
  });
  ShmName child = c.get<ShmName>();
  c.expect_exit0();
  PeerId from = resolve(*g_b, child);
  cr_assert(g_b->peer_alive(from), "reported dead with its packets still queued");
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 3);
  for (uint64_t i = 0; i < 3; i++) check_pkt(r.got[i], from, 60 + i, 0, 4000);
  cr_assert_not(g_b->peer_alive(from));
  cr_assert_not(exists(pm::shm::region_path(g_dir, child.uid, child.key)));
}

// --- a sender that dies between claiming a cell and publishing it -----------------

namespace {
// In a child: claims the next position of `to`'s queue the way a sender
// does (its pid stamped in the cell), scribbles part of the cell, and stops
// before publishing it, as if killed while copying. Optionally dies before
// moving the tail past it too. The position, or UINT64_MAX.
uint64_t claim_without_publishing(const ShmName& to, uint64_t src_key, bool move_tail) {
  pm::shm::Region r;
  if (r.open(g_dir, to.uid, to.key) != 0) return UINT64_MAX;
  pm::shm::RegionHdr* h = r.hdr();
  uint64_t pos = h->tail.load();
  pm::shm::Cell* c = &r.cells()[pos & (r.cell_count() - 1)];
  uint64_t v = c->seq.load();
  if (pm::shm::seq_lap(v, pos) >= 0) return UINT64_MAX;
  if (!c->seq.compare_exchange_strong(v, pm::shm::seq_claimed(pos, uint32_t(getpid())))) return UINT64_MAX;
  if (move_tail && !h->tail.compare_exchange_strong(pos, pos + 1)) return UINT64_MAX;
  c->src_key = src_key;
  c->len = 77;
  return pos;
}

void dead_claimant_case(bool moved_tail) {
  g_b = open_dev();
  g_a = open_dev();
  const ShmName b = name_of(*g_b);
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  Recorder r;
  for (uint64_t i = 0; i < 2; i++) cr_assert_eq(send_msg(*g_a, to_b, i, 0, 40), 0);
  cr_assert_eq(g_b->poll(r, 100), 2);

  Child c = Child::start([&](int in, int out) {
    std::unique_ptr<ShmDevice> d = open_dev();  // a real sender: it has a region
    uint64_t pos = claim_without_publishing(b, name_of(*d).key, moved_tail);
    if (!child_put(out, pos)) return 2;
    pause();  // killed here
    return 3;
  });
  cr_assert_eq(c.get<uint64_t>(), 2u);
  // A live sender queues behind the claimed cell.
  for (uint64_t i = 2; i < 6; i++) cr_assert_eq(send_msg(*g_a, to_b, i, 0, i % 2 ? 40 : 3000), 0);
  cr_assert_eq(g_b->poll(r, 100), 0, "a packet passed the unpublished cell");
  kill(c.pid, SIGKILL);
  int st = c.wait();
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  uint64_t t0 = pm::now_ns();
  poll_until(*g_b, r, 6, 3000);
  cr_assert_eq(r.got.size(), 6u, "the queue stayed stuck behind the dead claimant's cell");
  cr_assert_geq(pm::now_ns() - t0, uint64_t(kClaimTimeoutMs / 2) * 1000000, "skipped too early");
  for (uint64_t i = 0; i < 6; i++) check_pkt(r.got[i], from_a, i, 0, i >= 2 && i % 2 == 0 ? 3000 : 40);
  cr_assert_eq(stat_of(*g_b, "skipped"), 1u);
  cr_assert_eq(stat_of(*g_b, "dropped"), 0u);
  // The skipped cell is reused normally, lap after lap.
  uint64_t i = 6;
  for (int round = 0; round < 5; round++) {
    for (uint32_t k = 0; k < kCells; k++, i++) cr_assert_eq(send_msg(*g_a, to_b, i, 0, 20 + k), 0);
    cr_assert_eq(g_b->poll(r, 1000), int(kCells));
  }
  for (uint64_t k = 6; k < i; k++) check_pkt(r.got[k], from_a, k, 0, 20 + (k - 6) % kCells);
}
}  // namespace

Test(shm, a_claimant_killed_before_publishing_is_skipped) { dead_claimant_case(true); }

Test(shm, a_claimant_killed_before_moving_the_tail_is_skipped) { dead_claimant_case(false); }

// A live claimant, however slow (here stopped), is never skipped: its cell
// is waited for, then delivered in order.
Test(shm, a_stopped_claimant_is_waited_for) {
  g_b = open_dev();
  g_a = open_dev();
  const ShmName b = name_of(*g_b);
  PeerId to_b = resolve(*g_a, *g_b);
  Child c = Child::start([&](int in, int out) {
    std::unique_ptr<ShmDevice> d = open_dev();
    ShmName me = name_of(*d);
    uint64_t pos = claim_without_publishing(b, me.key, true);
    if (!child_put(out, me) || !child_put(out, pos)) return 2;
    raise(SIGSTOP);
    // Resumed: fill the cell properly and publish it.
    pm::shm::Region r;
    if (r.open(g_dir, b.uid, b.key) != 0) return 3;
    pm::shm::Cell* cell = &r.cells()[pos & (r.cell_count() - 1)];
    cell->intro = 0;
    cell->fmt = pm::shm::kFmtCompact;
    cell->op = pm::kPktEager;
    cell->flags = 0;
    cell->len = 5;
    cell->compact.tag = 0x5709;
    cell->compact.cq_data = 0;
    memcpy(cell->compact.data, "late!", 5);
    cell->seq.store(pm::shm::seq_published(pos));
    char go;
    return child_get(in, &go) ? 0 : 4;  // its region stays until the parent is done
  });
  ShmName child = c.get<ShmName>();
  cr_assert_eq(c.get<uint64_t>(), 0u);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 40), 0);
  Recorder r;
  poll_until(*g_b, r, 1, 4 * kClaimTimeoutMs);
  cr_assert_eq(r.got.size(), 0u, "a stopped claimant's cell was skipped");
  cr_assert_eq(stat_of(*g_b, "skipped"), 0u);
  // Stopped by now (a SIGCONT before its SIGSTOP would leave it stopped).
  int st = 0;
  cr_assert_eq(waitpid(c.pid, &st, WUNTRACED), c.pid);
  cr_assert(WIFSTOPPED(st), "the claimant did not stop (status %#x)", st);
  kill(c.pid, SIGCONT);
  poll_until(*g_b, r, 2, 5000);
  cr_assert_eq(r.got.size(), 2u);
  cr_assert_eq(r.got[0].peer, resolve(*g_b, child));
  cr_assert_eq(r.got[0].hdr.tag, 0x5709u);
  cr_assert(r.got[0].data == std::vector<uint8_t>({'l', 'a', 't', 'e', '!'}));
  check_pkt(r.got[1], resolve(*g_b, *g_a), 1, 0, 40);
  c.put('x');
  c.expect_exit0();
}

// --- region files truncated or scribbled on by another process ---------------------

namespace {
void truncate_from_another_process(const std::string& path, off_t size) {
  Child c = Child::start([&](int, int) { return truncate(path.c_str(), size) == 0 ? 0 : 2; });
  c.expect_exit0();
  struct stat st;
  cr_assert_eq(stat(path.c_str(), &st), 0);
  cr_assert_eq(st.st_size, size);
}
}  // namespace

// The receiver's file shrinks under everyone: no SIGBUS; its senders fail
// it with an error, and the receiver itself reports every peer's session
// reset and refuses to go on.
Test(shm, a_truncated_receiver_region_fails_cleanly_on_both_sides) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  Recorder r;
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 40), 0);
  cr_assert_eq(g_b->poll(r, 100), 1);
  truncate_from_another_process(path_of(*g_b), 4096);  // only the header is left

  cr_assert_eq(send_msg(*g_a, to_b, 2, 0, 40), -FI_ECONNRESET);
  cr_assert_eq(send_msg(*g_a, to_b, 3, 0, 3000), -FI_ECONNRESET);
  cr_assert_not(g_a->peer_alive(to_b));

  cr_assert_eq(g_b->poll(r, 100), 0);
  cr_assert_eq(r.got.size(), 1u);
  cr_assert_eq(r.resets.size(), 1u, "the owner reported %zu session resets", r.resets.size());
  cr_assert_eq(r.resets[0], from_a);
  cr_assert_eq(g_b->poll(r, 100), 0);
  cr_assert_eq(r.resets.size(), 1u, "reported twice");
  cr_assert_not(g_b->peer_alive(from_a));
  cr_assert_eq(send_msg(*g_b, from_a, 4, 0, 40), -FI_EIO);
  cr_assert_eq(stat_of(*g_b, "broken"), 1u);
  // A sender unaware of it so far fails too (its region is refused: too small).
  g_c = open_dev();
  cr_assert_eq(send_msg(*g_c, resolve(*g_c, *g_b), 5, 0, 40), -FI_EHOSTUNREACH);
}

// The sender's file shrinks: the receiver drops its chunk packet (instead
// of delivering zeros or dying) and resets the session; the sender cannot
// use its chunks any more.
Test(shm, a_truncated_sender_region_fails_its_chunk_packets) {
  g_a = open_dev();
  g_b = open_dev();
  PeerId to_b = resolve(*g_a, *g_b);
  PeerId from_a = resolve(*g_b, *g_a);
  cr_assert_eq(send_msg(*g_a, to_b, 1, 0, 3000), 0);  // a chunk
  cr_assert_eq(send_msg(*g_a, to_b, 2, 0, 100), 0);   // inline
  truncate_from_another_process(path_of(*g_a), 4096);

  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 2);
  cr_assert_eq(r.got.size(), 1u);
  check_pkt(r.got[0], from_a, 2, 0, 100);
  cr_assert_eq(stat_of(*g_b, "dropped"), 1u);
  cr_assert_eq(r.resets.size(), 1u);
  cr_assert_eq(r.resets[0], from_a);
  cr_assert_not(g_b->peer_alive(from_a));

  cr_assert_eq(send_msg(*g_a, to_b, 3, 0, 3000), -FI_EIO);
  Recorder ra;
  cr_assert_eq(g_a->poll(ra, 100), 0);
  cr_assert_eq(ra.resets.size(), 1u);
  cr_assert_eq(stat_of(*g_a, "broken"), 1u);
}

// Headers whose parts do not add up are refused (a sender would otherwise
// write past the mapping); the owner keeps using the layout it made.
Test(shm, regions_whose_header_does_not_add_up_are_refused) {
  g_b = open_dev();
  g_a = open_dev();
  PeerId a_to_b = resolve(*g_a, *g_b);
  cr_assert_eq(send_msg(*g_a, a_to_b, 1, 0, 40), 0);  // A maps B while it is sound
  const std::string pb = path_of(*g_b);
  using Info = pm::shm::RegionInfo;
  void (*const breakers[])(Info&) = {
      [](Info& h) { h.cells_off = h.size; },
      [](Info& h) { h.cells_off = h.size - 64; },
      [](Info& h) { h.cells = 24; },
      [](Info& h) { h.cells = 1u << 30; },
      [](Info& h) { h.cell_size = 128; },
      [](Info& h) { h.intros_off = h.cells_off + 64; },
      [](Info& h) { h.states_off = h.intros_off; },
      [](Info& h) { h.states_off = UINT64_MAX - 63; },
      [](Info& h) { h.chunks_off = h.states_off + 64; },
      [](Info& h) { h.chunk_size += 1; },
      [](Info& h) { h.chunks = 0xffff; },
      [](Info& h) { h.chunks_off = UINT64_MAX & ~uint64_t(4095); },
      [](Info& h) { h.size += 4096; },
      [](Info& h) { h.alias_len = 65; },
      [](Info& h) { h.hdr_size = 64; },
      [](Info& h) { h.cells_off = 64; },
  };
  Info good;
  {
    int fd = ::open(pb.c_str(), O_RDONLY);
    cr_assert_eq(pread(fd, &good, sizeof good, 0), ssize_t(sizeof good));
    close(fd);
  }
  int k = 0;
  for (auto* f : breakers) {
    patch_header(pb, f);
    std::unique_ptr<ShmDevice> d = open_dev();
    int rc = send_msg(*d, resolve(*d, *g_b), 10, 0, 40);
    cr_assert_eq(rc, -FI_EHOSTUNREACH, "header change %d: send gave %d", k, rc);
    patch_header(pb, [](Info& h) {});
    int fd = ::open(pb.c_str(), O_WRONLY);
    cr_assert_eq(pwrite(fd, &good, sizeof good, 0), ssize_t(sizeof good));
    close(fd);
    k++;
  }
  // Scribbled on while mapped: the owner and its earlier peers use their
  // own validated copies of the layout.
  patch_header(pb, [](Info& h) { h.cells_off = 1u << 30; h.chunks_off = 0; });
  cr_assert_eq(send_msg(*g_a, a_to_b, 2, 3, 3000), 0);
  Recorder r;
  cr_assert_eq(g_b->poll(r, 100), 2);
  check_pkt(r.got[0], resolve(*g_b, *g_a), 1, 0, 40);
  check_pkt(r.got[1], resolve(*g_b, *g_a), 2, 3, 3000);
}

// --- single copy reaches the region's owner, and only it ---------------------------

namespace {
bool cma_permitted() {
  uint64_t s = 42, d = 0;
  struct iovec l = {&d, sizeof d}, r = {&s, sizeof s};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == ssize_t(sizeof d);
}
char g_cma_buf[4096];
}  // namespace

// A header can name any pid (here: a forked copy of this process, with the
// same addresses but other bytes). Single copy goes to the process that
// holds the region's owner lock, as the kernel reports it, never to that pid.
Test(shm, cma_reaches_the_lock_holder_not_the_pid_a_header_names) {
  if (!cma_permitted()) cr_skip_test("process_vm_readv is not permitted here");
  g_a = open_dev();
  memset(g_cma_buf, 'P', sizeof g_cma_buf);
  Child victim = Child::start([&](int in, int out) {
    memset(g_cma_buf, 'V', sizeof g_cma_buf);
    char c;
    return child_put(out, 'r') && child_get(in, &c) ? 0 : 2;
  });
  cr_assert_eq(victim.get<char>(), 'r');
  // The name and the header now both claim the victim owns A's region.
  ShmName forged = name_of(*g_a);
  forged.pid = uint32_t(victim.pid);
  patch_header(path_of(*g_a), [](pm::shm::RegionInfo& h) {});
  {
    int fd = ::open(path_of(*g_a).c_str(), O_RDWR);
    pm::shm::RegionInfo h;
    cr_assert_eq(pread(fd, &h, sizeof h, 0), ssize_t(sizeof h));
    h.owner_pid = uint32_t(victim.pid);
    cr_assert_eq(pwrite(fd, &h, sizeof h, 0), ssize_t(sizeof h));
    close(fd);
  }
  g_b = open_dev();
  PeerId p = resolve(*g_b, forged);
  cr_assert(g_b->can_read_remote(p));
  char got[64] = {};
  struct iovec l = {got, sizeof got}, r = {g_cma_buf + 100, sizeof got};
  cr_assert_eq(g_b->read_remote(p, &l, 1, &r, 1), ssize_t(sizeof got));
  for (char ch : got) cr_assert_eq(ch, 'P', "single copy read the victim's memory");
  victim.put('x');
  victim.expect_exit0();
}

// The owner dies after single copy was set up: its pid is not read (nor
// written) again, whoever holds it now.
Test(shm, cma_to_an_owner_that_died_fails) {
  if (!cma_permitted()) cr_skip_test("process_vm_readv is not permitted here");
  g_b = open_dev();
  Child c = Child::start([&](int in, int out) {
    std::unique_ptr<ShmDevice> d = open_dev();
    memset(g_cma_buf, 'C', sizeof g_cma_buf);
    char x;
    return child_put(out, name_of(*d)) && child_get(in, &x) ? 0 : 2;
  });
  ShmName child = c.get<ShmName>();
  PeerId p = resolve(*g_b, child);
  cr_assert(g_b->can_read_remote(p));
  char got[16] = {};
  struct iovec l = {got, sizeof got}, r = {g_cma_buf, sizeof got};
  cr_assert_eq(g_b->read_remote(p, &l, 1, &r, 1), ssize_t(sizeof got));
  cr_assert_eq(got[0], 'C');
  kill(c.pid, SIGKILL);
  c.wait();
  cr_assert_eq(g_b->read_remote(p, &l, 1, &r, 1), -FI_ECONNRESET);
  cr_assert_eq(g_b->write_remote(p, &l, 1, &r, 1), -FI_ECONNRESET);
}

// --- signals --------------------------------------------------------------------

namespace {
// In a child that has not used pmshm yet (so pmshm installs its handlers
// there, lazily, over what `prepare` set up): opens a device, lets
// `provoke` send it a signal, then must still own a working region: the
// parent sends it a packet and gets one back.
template <class P, class F>
void survives_signal(P prepare, F provoke) {
  Child c = Child::start([&](int in, int out) {
    if (!prepare()) return 2;
    std::unique_ptr<ShmDevice> d = open_dev();
    if (!provoke()) return 3;
    ShmName me = name_of(*d);
    if (!exists(pm::shm::region_path(g_dir, me.uid, me.key))) return 4;
    if (!child_put(out, me)) return 5;
    Recorder r;
    for (int i = 0; i < 5000 && r.got.empty(); i++, usleep(1000)) d->poll(r, 10);
    if (r.got.size() != 1 || r.got[0].data.size() != 33) return 6;
    return send_msg(*d, r.got[0].peer, 8, 0, 44) == 0 ? 0 : 7;
  });
  ShmName child = c.get<ShmName>();
  cr_assert(exists(pm::shm::region_path(g_dir, child.uid, child.key)));
  g_a = open_dev();
  PeerId to = resolve(*g_a, child);
  cr_assert_eq(send_msg(*g_a, to, 7, 0, 33), 0);
  c.expect_exit0();
  Recorder r;
  cr_assert_eq(g_a->poll(r, 10), 1);
  check_pkt(r.got[0], to, 8, 0, 44);
}

int g_sigint_seen;
}  // namespace

// nohup: SIGHUP ignored before the first region stays ignored.
Test(shm, an_ignored_sighup_leaves_the_region_alone) {
  survives_signal([] { return signal(SIGHUP, SIG_IGN) != SIG_ERR; }, [] { return raise(SIGHUP) == 0; });
}

// An application handler that keeps its process running: pmshm calls it and
// unlinks nothing.
Test(shm, an_application_sigint_handler_runs_and_the_region_stays) {
  survives_signal(
      [] {
        g_sigint_seen = 0;
        struct sigaction sa {};
        sa.sa_handler = [](int) { g_sigint_seen++; };
        sigemptyset(&sa.sa_mask);
        return sigaction(SIGINT, &sa, nullptr) == 0;
      },
      [] {
        struct sigaction cur {};
        sigaction(SIGINT, nullptr, &cur);
        bool pmshm_in_front = (cur.sa_flags & SA_SIGINFO) != 0;  // the test means something
        return pmshm_in_front && raise(SIGINT) == 0 && raise(SIGINT) == 0 && g_sigint_seen == 2;
      });
}

// The default action: the region goes, and the process dies of the signal.
Test(shm, a_default_sigterm_removes_the_region_and_kills) {
  Child c = Child::start([&](int in, int out) {
    signal(SIGTERM, SIG_DFL);
    std::unique_ptr<ShmDevice> d = open_dev();
    if (!child_put(out, name_of(*d))) return 2;
    raise(SIGTERM);
    return 3;
  });
  ShmName child = c.get<ShmName>();
  int st = c.wait();
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status 0x%x", st);
  cr_assert_not(exists(pm::shm::region_path(g_dir, child.uid, child.key)));
}

// A forked child that exits normally does not take its parent's region.
Test(shm, a_forked_child_exiting_leaves_the_parents_region) {
  g_a = open_dev();
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) exit(0);  // atexit handlers run in the child
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(exists(path_of(*g_a)), "the child's exit removed the parent's region");
}
