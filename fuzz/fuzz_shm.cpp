// libFuzzer harness: hostile queue cells into a real pmshm endpoint.
//
// The victim is the provider as an application sees it (fi_prov_ini() of
// the pmshm objects linked into this program; fuzz_app.hpp), with its
// regions in a private directory /dev/shm/pmfuzz_<pid> (removed at exit, or
// by the next run if this one crashed). The attacker is a second
// ShmDevice of the same process, a genuine peer with its own region: the
// harness makes it send core packets with hostile headers (genuine cells,
// compact or full, inline or through a bounce chunk), or writes cells of
// the input's bytes into the victim's queue itself, claiming and
// publishing a position as a sender does, optionally pointing at a bounce
// chunk of the peer's region it filled. A cell can also be published while
// the peer's region header says something else than when the victim mapped
// it (a field of it changed for as long as the victim handles the cell, the
// way a hostile peer would), since the victim reads that header live.
// Single copy (CMA) is off: here the "peer" is this process, and a victim
// told to copy to or from peer addresses would write into the harness.
//
// Input: as fuzz_eth (fuzz_app.hpp): a variant byte (0: RDM, virtual
// addresses, provider keys; 1: RDM, offsets, FI_SOURCE), then records:
//   core   the peer sends one packet (ShmDevice::send)
//   raw    a cell: fix-ups, source key, format, op, flags, length, body;
//          a bounce chunk's index and contents; a region header field and
//          the value it has while the victim polls
//   mutate (unused by this harness: a progress round)
//   app    the victim application's action
//   poll   progress rounds
//
// PM_FUZZ_WRITE_SEEDS=<dir>: writes the seed corpus into <dir> and exits.
// PM_FUZZ_VERBOSE=1: prints every record and completion.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/packet.hpp"
#include "device.hpp"
#include "fuzz_app.hpp"
#include "fuzz_input.hpp"
#include "shm_device.hpp"
#include "shm_layout.hpp"
#include "shm_region.hpp"

extern "C" fi_provider* fi_prov_ini(void);

namespace {

using pm::PeerId;
using pm::PktHdr;
using pm::shm::Cell;
using pm::shm::Region;
using pm::shm::RegionHdr;
using pm::shm::ShmDevice;
using pm::shm::ShmName;
using namespace pm::fuzz;

constexpr uint32_t kCells = 64;
constexpr uint32_t kChunks = 4;
constexpr uint32_t kChunkSize = 8192;
char g_dir[64];

Variant g_variants[] = {
    {"rdm", FI_EP_RDM, kRdmCaps, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED},
    {"rdm-source", FI_EP_RDM, kRdmCaps | FI_SOURCE, 0},
};
constexpr size_t kVariants = sizeof g_variants / sizeof g_variants[0];

class PeerSink final : public pm::PacketSink {
 public:
  explicit PeerSink(CoreRefs* refs) : refs_(refs) {}
  bool on_packet(const pm::RxPacket& p) noexcept override {
    refs_->saw(p.hdr->msg_id);
    return true;
  }

 private:
  CoreRefs* refs_;
};

struct Session {
  Victim victim;
  CoreRefs refs;
  PeerSink sink{&refs};
  std::unique_ptr<ShmDevice> peer;
  PeerId to_victim = pm::kNoPeer;
  ShmName victim_name{}, peer_name{};
  Region victim_region;  // the victim's queue, mapped as a sender maps it
  Region peer_region;    // the peer's own region, a second mapping
};

void progress(Session& s, int rounds) {
  for (int r = 0; r < rounds; r++) {
    s.victim.drain();
    s.peer->poll(s.sink, 64);
  }
}

void open_session(Session& s, Variant& v) {
  std::vector<uint8_t> name;
  s.victim.open(v, &name);
  if (name.size() != sizeof(ShmName)) die("victim name", int(name.size()));
  memcpy(&s.victim_name, name.data(), sizeof s.victim_name);
  pm::shm::DeviceConfig dc{pm::shm::RegionConfig{g_dir, kCells, kChunks, kChunkSize}, pm::shm::CmaPolicy::kOff,
                           200};
  int rc = 0;
  s.peer = ShmDevice::open(dc, s.victim_name.host, &rc);
  if (!s.peer) die("ShmDevice::open", rc);
  memcpy(&s.peer_name, s.peer->name(), sizeof s.peer_name);
  s.to_victim = s.peer->resolve(&s.victim_name, sizeof s.victim_name);
  if (s.to_victim == pm::kNoPeer) die("resolve", 0);
  s.victim.insert_peer(s.peer->name());
  if ((rc = s.victim_region.open(g_dir, s.victim_name.uid, s.victim_name.key))) die("map victim region", rc);
  if ((rc = s.peer_region.open(g_dir, s.peer_name.uid, s.peer_name.key))) die("map peer region", rc);
}

void close_session(Session& s) {
  progress(s, 2);
  s.victim_region = Region();
  s.peer_region = Region();
  s.victim.close();
  s.peer.reset();
}

// ---- records ----------------------------------------------------------------
void core_record(Session& s, Reader& in) {
  std::vector<uint8_t> payload;
  PktHdr h = read_core(in, s.refs, s.victim, s.peer->max_payload(), &payload);
  iovec iov{payload.data(), payload.size()};
  int rc = -FI_EAGAIN;
  for (int i = 0; i < 8 && rc == -FI_EAGAIN; i++) {  // a full queue drains as the victim polls
    rc = s.peer->send(s.to_victim, h, &iov, 1, 0, payload.size());
    if (rc == -FI_EAGAIN) progress(s, 1);
  }
  PM_FUZZ_TRACE("core op %u flags 0x%x msg_id 0x%llx tag 0x%llx msg_len 0x%llx offset 0x%llx plen %zu: %d", h.op,
                h.flags, (unsigned long long)h.msg_id, (unsigned long long)h.tag, (unsigned long long)h.msg_len,
                (unsigned long long)h.offset, payload.size(), rc);
}

enum CellFix : uint8_t {
  kFixKey = 1 << 0,    // src_key = the peer's region key, no introduction (else both from the input)
  kFixChunk = 1 << 1,  // full format: a bounce chunk of the peer, index and contents from the input
  kFixPoke = 1 << 2,   // a field of the peer's region header differs while the victim polls
};

// Region header fields the victim reads from a peer's region after mapping it.
struct HdrField {
  const char* name;
  size_t off;
  size_t size;
};
#define PM_INFO_FIELD(f, n) {#f, offsetof(RegionHdr, info) + offsetof(pm::shm::RegionInfo, f), n}
const HdrField kFields[] = {
    PM_INFO_FIELD(cells, 4),      PM_INFO_FIELD(chunks, 4),      PM_INFO_FIELD(chunk_size, 4),
    PM_INFO_FIELD(cells_off, 8),  PM_INFO_FIELD(states_off, 8),  PM_INFO_FIELD(chunks_off, 8),
    PM_INFO_FIELD(alias_len, 4),  PM_INFO_FIELD(intros_off, 8),  PM_INFO_FIELD(intros, 4),
    PM_INFO_FIELD(owner_pid, 4),  PM_INFO_FIELD(size, 8),
    {"tail", offsetof(RegionHdr, tail), 8},  {"head", offsetof(RegionHdr, head), 8},
};
#undef PM_INFO_FIELD
constexpr size_t kNumFields = sizeof kFields / sizeof kFields[0];

uint64_t get_field(const Region& r, const HdrField& f) {
  uint64_t v = 0;
  memcpy(&v, r.base() + f.off, f.size);
  return v;
}
void set_field(const Region& r, const HdrField& f, uint64_t v) { memcpy(r.base() + f.off, &v, f.size); }

void raw_record(Session& s, Reader& in) {
  uint8_t fix = in.u8();
  uint64_t key = (fix & kFixKey) ? s.peer_name.key : in.u64();
  uint8_t intro = (fix & kFixKey) ? 0 : in.u8();  // the victim knows the peer from its AV
  uint8_t fmt = in.u8(), op = in.u8(), flags = in.u8();
  uint32_t len = uint32_t(in.value(pm::shm::kCompactInline));
  std::vector<uint8_t> body = in.blob(pm::shm::kCellSize - offsetof(Cell, compact));
  if ((fix & kFixChunk) && fmt == pm::shm::kFmtFull) {
    uint32_t ch = in.u8() % kChunks;
    memcpy(body.data(), &ch, sizeof ch);  // FullBody::chunk
    std::vector<uint8_t> data = in.blob(kChunkSize);
    memcpy(s.peer_region.chunk(ch), data.data(), data.size());
    s.peer_region.states()[ch].rx_key = s.victim_name.key;  // busy, naming the receiver
    s.peer_region.states()[ch].busy.store(1, std::memory_order_release);
  }
  const HdrField* poke = nullptr;
  uint64_t saved = 0, poked = 0;
  if (fix & kFixPoke) {
    poke = &kFields[in.u8() % kNumFields];
    saved = get_field(s.peer_region, *poke);
    poked = in.value(saved);
  }
  // Claim a position and publish the cell, as ShmDevice::send does: the
  // cell's seq from "a lap behind" to "claimed by this pid for pos", tail
  // past pos, the cell filled, seq = published(pos).
  RegionHdr* rh = s.victim_region.hdr();
  Cell* cells = s.victim_region.cells();
  uint64_t ncells = s.victim_region.cell_count();
  Cell* c = nullptr;
  uint64_t pos = 0;
  for (int tries = 0; tries < 64 && !c; tries++) {
    pos = rh->tail.load(std::memory_order_acquire);
    if (pos - rh->head.load(std::memory_order_acquire) >= ncells) break;
    Cell* cand = &cells[pos & (ncells - 1)];
    uint64_t v = cand->seq.load(std::memory_order_acquire);
    int32_t lap = pm::shm::seq_lap(v, pos);
    if (lap < 0 && cand->seq.compare_exchange_strong(v, pm::shm::seq_claimed(pos, uint32_t(getpid()))))
      c = cand;
    else if (lap == 0)
      rh->tail.compare_exchange_strong(pos, pos + 1);
  }
  if (!c) {
    PM_FUZZ_TRACE("raw cell: victim queue full");
    return;
  }
  uint64_t t = pos;
  rh->tail.compare_exchange_strong(t, pos + 1);
  c->src_key = key;
  c->fmt = fmt;
  c->op = op;
  c->flags = flags;
  c->intro = intro;
  c->len = len;
  memcpy(reinterpret_cast<uint8_t*>(c) + offsetof(Cell, compact), body.data(), body.size());
  if (poke) set_field(s.peer_region, *poke, poked);
  c->seq.store(pm::shm::seq_published(pos), std::memory_order_release);
  PM_FUZZ_TRACE("raw cell fix 0x%x fmt %u op %u len %u, peer header %s = 0x%llx", fix, fmt, op, len,
                poke ? poke->name : "as is", (unsigned long long)poked);
  if (poke) {
    s.victim.drain();
    set_field(s.peer_region, *poke, saved);
  }
}

void run_input(Variant& v, Reader& in) {
  Session s;
  open_session(s, v);
  while (!in.empty()) {
    switch (in.u8() % kRecKinds) {
    case kRecCore: core_record(s, in); break;
    case kRecRaw: raw_record(s, in); break;
    case kRecApp: s.victim.app_record(in); break;
    case kRecPoll: progress(s, 1 + in.u8() % 8); break;
    default: break;
    }
    progress(s, 1);
  }
  close_session(s);
}

// ---- seed corpus ------------------------------------------------------------
Writer& cell(Writer& w, uint8_t fix, uint8_t fmt, uint8_t op, uint8_t flags, uint32_t len,
             const std::vector<uint8_t>& body) {
  return w.u8(kRecRaw).u8(fix).u8(fmt).u8(op).u8(flags).value(len).blob(body);
}

std::vector<Seed> shm_seeds() {
  std::vector<Seed> out = core_seeds(1396);  // as for Ethernet: one input means the same to both
  auto add = [&](const char* name, uint8_t variant) -> Writer& {
    out.push_back(Seed{name, Writer()});
    return out.back().w.u8(variant);
  };
  // A compact cell: tag, cq_data, then the data.
  std::vector<uint8_t> compact(16 + 40, 0);
  compact[0] = 0x44;
  for (size_t i = 16; i < compact.size(); i++) compact[i] = uint8_t(i);
  // A full cell: chunk (inline), reserved, core header (eager, msg_len 40), data.
  std::vector<uint8_t> full(8 + 48 + 40, 0);
  uint32_t inl = pm::shm::kInline;
  memcpy(full.data(), &inl, 4);
  full[8] = pm::kPktEager;
  full[8 + 4] = 40;   // seg_len
  full[8 + 32] = 40;  // msg_len
  {
    Writer& w = add("cell_compact", 0);
    app(w, kAppRecv, 1, 64, 0x44).value(0);
    cell(w, kFixKey, pm::shm::kFmtCompact, pm::kPktEager, pm::kPktTagged, 40, compact);
  }
  {
    Writer& w = add("cell_full_inline", 0);
    cell(w, kFixKey, pm::shm::kFmtFull, pm::kPktEager, 0, 40, full);
    app(w, kAppRecv, 0, 64, 0);
  }
  {
    Writer& w = add("cell_full_chunk", 0);
    std::vector<uint8_t> f = full;
    f[8 + 4] = f[8 + 32] = 0;
    f[8 + 5] = f[8 + 33] = 0x10;  // seg_len and msg_len 4096
    w.u8(kRecRaw).u8(kFixKey | kFixChunk).u8(pm::shm::kFmtFull).u8(pm::kPktEager).u8(0).value(4096).blob(f);
    w.u8(1).blob({9, 8, 7});  // chunk 1, its contents
    app(w, kAppRecv, 0, 4096, 0);
  }
  {
    Writer& w = add("cell_unknown_sender", 0);
    w.u8(kRecRaw).u8(0).u64(0x1234567812345678ull).u8(1).u8(pm::shm::kFmtCompact).u8(pm::kPktEager).u8(0).value(8).blob(
        compact);
  }
  // Header fields as they are (reference + 0) while the victim handles a
  // cell, after it mapped and checked the region.
  for (uint8_t f = 0; f < kNumFields; f++) {
    out.push_back(Seed{std::string("cell_chunk_poke_") + kFields[f].name, Writer()});
    Writer& w = out.back().w.u8(0);
    core(w, pm::kPktEager, 0, 1, 0, 8, 0, 8);  // the victim maps the peer's region (and checks it) now
    std::vector<uint8_t> fb = full;
    w.u8(kRecRaw).u8(kFixKey | kFixChunk | kFixPoke).u8(pm::shm::kFmtFull).u8(pm::kPktEager).u8(0).value(40).blob(
        fb);
    w.u8(2).blob({1, 2, 3}).u8(f).ref_plus(0);
    app(w, kAppSend, 0, 64, 0);  // the victim sends to the peer, reading the peer's header too
  }
  return out;
}

void write_seeds(const char* dir) {
  mkdir(dir, 0755);
  std::vector<Seed> all = shm_seeds();
  for (const Seed& s : all) {
    std::string path = std::string(dir) + "/" + s.name;
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(s.w.out.data(), 1, s.w.out.size(), f) != s.w.out.size() || fclose(f) != 0) {
      fprintf(stderr, "fuzz_shm: cannot write %s\n", path.c_str());
      exit(1);
    }
  }
  fprintf(stderr, "fuzz_shm: %zu seeds written to %s\n", all.size(), dir);
}

// Removes a region directory (flat: region files and their FIFOs).
void remove_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  for (const std::string& n : names) unlink(n.c_str());
  rmdir(dir.c_str());
}

void remove_own_dir() { remove_dir(g_dir); }

// The directories of harness processes that died without their atexit (a
// crash ends the process): /dev/shm/pmfuzz_<pid> of pids no longer alive.
void remove_stale_dirs() {
  std::vector<std::string> stale;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      int pid = 0;
      if (sscanf(e->d_name, "pmfuzz_%d", &pid) == 1 && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
        stale.push_back(std::string("/dev/shm/") + e->d_name);
    }
    closedir(d);
  }
  for (const std::string& s : stale) remove_dir(s);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_name = "fuzz_shm";
  remove_stale_dirs();
  snprintf(g_dir, sizeof g_dir, "/dev/shm/pmfuzz_%d", int(getpid()));
  remove_dir(g_dir);
  if (mkdir(g_dir, 0700) != 0) die("mkdir /dev/shm/pmfuzz_<pid>", -errno);
  atexit(remove_own_dir);
  setenv("FI_PMSHM_DIR", g_dir, 1);
  setenv("FI_PMSHM_DISABLE_CMA", "1", 1);        // the peer is this process: see above
  setenv("FI_PMSHM_PROGRESS_THREAD", "0", 1);    // progress only in fi_cq_read: deterministic
  setenv("FI_PMSHM_QUEUE_CELLS", "64", 1);
  setenv("FI_PMSHM_CHUNK_COUNT", "4", 1);
  setenv("FI_PMSHM_CHUNK_SIZE", "8192", 1);
  setenv("FI_PMSHM_CONNECT_TIMEOUT_MS", "200", 1);
  setenv("FI_PMSHM_CLOSE_TIMEOUT_MS", "5", 1);   // fi_close's drain: the peer is not polled inside it
  init_libfabric();
  fi_provider* prov = fi_prov_ini();
  for (Variant& v : g_variants) open_variant(prov, v);
  if (const char* dir = getenv("PM_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  run_input(g_variants[in.u8() % kVariants], in);
  return 0;
}
