// libFuzzer harness: hostile Ethernet frames into a real pmeth endpoint.
//
// The victim is the provider as an application sees it: fi_prov_ini() of the
// pmeth objects linked into this program (libfabric never loads them), then
// getinfo / fabric / domain / endpoint / AV / CQ / MR through the fi_* calls,
// on the in-process loopback wire (FI_PMETH_BACKEND=loopback). The attacker
// is a second EthDevice on the same segment, a genuine peer whose frames pass
// through a tap: the harness makes it send core packets with hostile headers
// (a real device in a real session with the job's key, so the frames carry
// the right job id, epochs, sequence numbers, checksum and MAC), mutates its next frame on the way,
// or injects frames of its own with the session fields optionally filled in.
// Progress is fi_cq_read on the victim's CQ. The victim's side, the core
// packets and the seeds are shared with fuzz_shm (fuzz_app.hpp).
//
// Input (fuzz_input.hpp, fuzz_app.hpp; zeros past the end):
//   variant byte (0: RDM, virtual addresses, provider keys; 1: RDM,
//   offsets, FI_SOURCE; 2: DGRAM), then records until the end, each a kind
//   byte and its fields (RDM: the session is open before the first record,
//   the victim having sent the peer an empty message):
//   core    the peer sends one packet: op, flags, reserved, msg_id (or the
//           id of a packet the victim sent), tag, cq_data, msg_len, offset,
//           payload length, payload
//   raw     a frame of the input's bytes, routed to the victim, with the
//           fields a fix-up byte selects taken from the live session (and
//           signed with the job's key: an attacker who has it)
//   mutate  byte flips applied to the peer's next frame (optionally resealed)
//   app     the victim's application: post a receive (tagged, multi-receive,
//           peek / claim / discard, directed), cancel, send, RMA read or
//           write, fetching atomic towards the peer
//   poll    more progress rounds
//
// Oracles: ASan/UBSan, libFuzzer's malloc and RSS limits, and completions
// that claim more bytes than the receive buffer they name (abort).
//
// PM_FUZZ_WRITE_SEEDS=<dir>: writes the seed corpus into <dir> and exits.
// PM_FUZZ_VERBOSE=1: prints every record and completion (to check what an
// input reaches: `PM_FUZZ_VERBOSE=1 fuzz_eth <file>`).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/packet.hpp"
#include "device.hpp"
#include "eth_auth.hpp"
#include "eth_device.hpp"
#include "eth_wire.hpp"
#include "fuzz_app.hpp"
#include "fuzz_input.hpp"
#include "wire/wire.hpp"

extern "C" fi_provider* fi_prov_ini(void);

namespace {

using pm::PeerId;
using pm::PktHdr;
using pm::eth::EthDevice;
using pm::eth::EthName;
using pm::eth::Frame;
using pm::eth::FrameHdr;
using pm::eth::Wire;
using namespace pm::fuzz;

constexpr const char* kSegment = "pmfuzz";
constexpr const char* kJobSecret = "pmfuzz-job";
constexpr uint32_t kPeerEp = 0x5eed0001;
constexpr uint64_t kPeerHost = 2;
constexpr size_t kMaxFrame = 1514;
// A payload every packet carries on the 1500-byte loopback wire (the
// largest under the longest core header was 1396 up to wire version 3; kept,
// so that the stored inputs, whose lengths are taken modulo this + 1, and
// pmshm's harness, which shares them, mean what they meant).
constexpr uint16_t kMaxPayload = 1396;
static_assert(kMaxPayload <= 1500 - pm::eth::kPmHdr - pm::eth::kCoreHdr);
constexpr int kSendTries = 64;  // progress rounds a peer send may wait (handshake, window)

// ---- the attacker's wire: records, mutates and injects ---------------------
// Session fields seen on the wire, for frames the harness forges.
struct SessionView {
  uint8_t victim_mac[6] = {};
  uint8_t peer_mac[6] = {};
  uint32_t victim_ep = 0;
  uint32_t victim_epoch = 0;
  uint32_t peer_epoch = 0;
  uint32_t job = 0;
  pm::eth::AuthKey key;   // the job's: frames the harness changes are signed anew
  pm::eth::PayloadKey pkey;  // its payload hash's (both sides have FI_PMETH_PAYLOAD_MAC=1)
  uint32_t next_seq = 1;  // after the last DATA the peer sent or we forged
};

struct Mutation {
  uint16_t at[4];
  uint8_t x[4];
  int n = 0;
  bool reseal = false;
};

// Recomputes the checksum and the MAC of a frame after its bytes were
// changed, as the sending device does (the one function to adapt when the
// frame's integrity checks change).
void seal(std::vector<uint8_t>& f, const SessionView& v) {
  using namespace pm::eth;
  if (f.size() < kEthHdr + kPmHdr) return;
  uint8_t* hp = f.data() + kEthHdr;
  FrameHdr h = decode_hdr(hp);
  h.csum = 0;
  h.mac = 0;
  encode_hdr(hp, h);
  size_t len = std::min<size_t>(h.len, f.size() - kEthHdr - kPmHdr);
  PayloadHash ph = payload_hash(v.pkey, hp + kPmHdr, len);
  h.csum = crc32c(0, hp, kPmHdr);  // the payload MAC's checksum: the header's
  encode_hdr(hp, h);
  uint8_t m[12 + kMacOff + 16];
  memcpy(m, f.data(), 12);
  memcpy(m + 12, hp, kMacOff);
  put64(m + 12 + kMacOff, ph.h0);
  put64(m + 12 + kMacOff + 8, ph.h1);
  put64(hp + kMacOff, siphash24(v.key, m, sizeof m));
}

class TapWire final : public Wire {
 public:
  TapWire(std::unique_ptr<Wire> inner, SessionView* view) : inner_(std::move(inner)), view_(view) {}

  int tx_burst(const Frame* f, int n) noexcept override {
    for (int i = 0; i < n; i++) {
      observe(f[i], true);
      if (recording) recorded.emplace_back(f[i].data, f[i].data + f[i].len);
      if (!mutation.n) {
        inner_->tx_burst(&f[i], 1);
        continue;
      }
      std::vector<uint8_t> c(f[i].data, f[i].data + f[i].len);
      for (int k = 0; k < mutation.n; k++) c[mutation.at[k] % c.size()] ^= mutation.x[k];
      if (mutation.reseal) seal(c, *view_);
      mutation.n = 0;
      inject(c);
    }
    return n;
  }
  void tx_flush() noexcept override { inner_->tx_flush(); }
  int rx_burst(Frame* f, int max) noexcept override {
    int n = inner_->rx_burst(f, max);
    for (int i = 0; i < n; i++) observe(f[i], false);
    return n;
  }
  void rx_release() noexcept override { inner_->rx_release(); }
  int fd() const noexcept override { return inner_->fd(); }
  size_t mtu() const noexcept override { return inner_->mtu(); }
  const uint8_t* mac() const noexcept override { return inner_->mac(); }
  const char* kind() const noexcept override { return "fuzz-tap"; }

  void inject(const std::vector<uint8_t>& f) {
    Frame fr{f.data(), f.size()};
    inner_->tx_burst(&fr, 1);
  }

  Mutation mutation;
  bool recording = false;
  std::vector<std::vector<uint8_t>> recorded;

 private:
  void observe(const Frame& f, bool from_peer) {
    using namespace pm::eth;
    if (f.len < kEthHdr + kPmHdr) return;
    FrameHdr h = decode_hdr(f.data + kEthHdr);
    if (from_peer) {
      view_->peer_epoch = h.src_epoch;
      if (h.dst_epoch) view_->victim_epoch = h.dst_epoch;
      if (h.type == kData && seq_le(view_->next_seq, h.seq)) view_->next_seq = h.seq + 1;
    } else if (h.src_epoch) {
      view_->victim_epoch = h.src_epoch;
    }
  }
  std::unique_ptr<Wire> inner_;
  SessionView* view_;
};

// Fills in the fields `fix` selects from the live session, then routes the
// frame to the victim (the loopback wire delivers by MAC and endpoint id).
enum Fix : uint8_t {
  kFixSource = 1 << 0,   // source MAC, EtherType and endpoint id of the peer
  kFixSession = 1 << 1,  // version, job key, both epochs
  kFixSeq = 1 << 2,      // the peer's next sequence number
  kFixLen = 1 << 3,      // payload length = what the frame carries
  kFixSum = 1 << 7,      // checksum and MAC, after everything else
  kFixAll = kFixSource | kFixSession | kFixSeq | kFixLen | kFixSum,
};

void forge(std::vector<uint8_t>& f, uint8_t fix, SessionView& v) {
  using namespace pm::eth;
  if (f.size() < kEthHdr + 12) f.resize(kEthHdr + 12, 0);  // up to the destination endpoint id
  memcpy(f.data(), v.victim_mac, 6);
  put32(f.data() + kEthHdr + 8, v.victim_ep);
  if (fix & kFixSource) {
    memcpy(f.data() + 6, v.peer_mac, 6);
    f[12] = uint8_t(kDefaultEtherType >> 8);
    f[13] = uint8_t(kDefaultEtherType);
  }
  if (f.size() < kEthHdr + kPmHdr) return;
  uint8_t* hp = f.data() + kEthHdr;
  FrameHdr h = decode_hdr(hp);
  if (fix & kFixSource) h.src_ep = kPeerEp;
  if (fix & kFixSession) {
    h.version = kWireVersion;
    h.job = v.job;
    h.src_epoch = v.peer_epoch;
    h.dst_epoch = v.victim_epoch;
  }
  if (fix & kFixSeq) h.seq = v.next_seq++;
  if (fix & kFixLen) h.len = uint16_t(f.size() - kEthHdr - kPmHdr);
  encode_hdr(hp, h);
  if (fix & kFixSum) seal(f, v);
}

// ---- the attacker's device: what the victim sent it -------------------------
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

Variant g_variants[] = {
    {"rdm", FI_EP_RDM, kRdmCaps, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED},
    {"rdm-source", FI_EP_RDM, kRdmCaps | FI_SOURCE, 0},
    {"dgram", FI_EP_DGRAM, FI_MSG | FI_TAGGED | FI_SEND | FI_RECV, 0},
};
constexpr size_t kVariants = sizeof g_variants / sizeof g_variants[0];

struct Session {
  Victim victim;
  SessionView view;
  CoreRefs refs;
  PeerSink sink{&refs};
  std::unique_ptr<EthDevice> peer;
  TapWire* tap = nullptr;
  PeerId to_victim = pm::kNoPeer;
};

void progress(Session& s, int rounds) {
  for (int r = 0; r < rounds; r++) {
    s.victim.drain();
    s.peer->poll(s.sink, 64);
    s.peer->flush();
  }
}

void open_session(Session& s, Variant& v) {
  std::vector<uint8_t> name;
  s.victim.open(v, &name);
  EthName me;
  if (!pm::eth::decode_name(name.data(), name.size(), &me)) die("victim name", 0);
  s.view.victim_ep = me.ep_id;
  memcpy(s.view.victim_mac, me.mac[0], 6);

  int rc = 0;
  pm::eth::WireConfig wc{kSegment, pm::eth::kDefaultEtherType, kPeerEp, 0, 0};
  std::string why;
  std::unique_ptr<Wire> inner = pm::eth::open_loop_wire(wc, &rc, &why);
  if (!inner) die("open_loop_wire", rc);
  memcpy(s.view.peer_mac, inner->mac(), 6);
  auto tap = std::make_unique<TapWire>(std::move(inner), &s.view);
  s.tap = tap.get();
  pm::eth::DeviceConfig dc;
  dc.host = kPeerHost;
  dc.reliable = v.type == FI_EP_RDM;
  dc.delayed_ack_us = 0;
  dc.rto_init_us = dc.rto_min_us = dc.rto_max_us = 1000000;  // no retransmission inside one input
  dc.retries = 2;
  dc.auth = true;
  dc.key = pm::eth::derive_key(kJobSecret, strlen(kJobSecret));  // the victim's: FI_PMETH_JOB_SECRET
  dc.job = pm::eth::job_id(dc.key);
  s.view.job = dc.job;
  dc.payload_mac = true;
  s.view.key = dc.key;
  s.view.pkey = pm::eth::payload_key(dc.key);
  s.peer = EthDevice::open(dc, std::move(tap), kPeerEp);
  if (!s.peer) die("EthDevice::open", 0);
  s.to_victim = s.peer->resolve(name.data(), name.size());
  if (s.to_victim == pm::kNoPeer) die("resolve", 0);
  s.victim.insert_peer(s.peer->name());
  if (v.type != FI_EP_RDM) return;
  // The session: the victim sends the peer an empty message, which starts
  // the handshake (HELLO, HELLO_ACK); every record then finds it open and
  // the harness knows both epochs.
  if ((rc = int(fi_send(s.victim.ep(), nullptr, 0, nullptr, s.victim.peer_addr(), nullptr)))) die("fi_send", rc);
  for (int i = 0; i < kSendTries && s.refs.ids.empty(); i++) progress(s, 1);
  if (s.refs.ids.empty() || !s.view.victim_epoch || !s.view.peer_epoch) die("handshake", 0);
}

void close_session(Session& s) {
  progress(s, 4);  // the peer acknowledges what the victim sent: its close does not wait
  s.victim.close();
  s.peer.reset();
}

// ---- records ----------------------------------------------------------------
int peer_send(Session& s, const PktHdr& h, const std::vector<uint8_t>& payload) {
  iovec iov{const_cast<uint8_t*>(payload.data()), payload.size()};
  for (int i = 0; i < kSendTries; i++) {
    int rc = s.peer->send(s.to_victim, h, &iov, 1, 0, payload.size());
    s.peer->flush();
    if (rc != -FI_EAGAIN) return rc;
    progress(s, 1);
  }
  return -FI_EAGAIN;
}

void core_record(Session& s, Reader& in) {
  std::vector<uint8_t> payload;
  PktHdr h = read_core(in, s.refs, s.victim, s.peer->max_payload(), &payload);
  int rc = peer_send(s, h, payload);
  PM_FUZZ_TRACE("core op %u flags 0x%x msg_id 0x%llx tag 0x%llx msg_len 0x%llx offset 0x%llx plen %zu: %d", h.op,
                h.flags, (unsigned long long)h.msg_id, (unsigned long long)h.tag, (unsigned long long)h.msg_len,
                (unsigned long long)h.offset, payload.size(), rc);
}

void raw_record(Session& s, Reader& in) {
  uint8_t fix = in.u8();
  std::vector<uint8_t> f = in.blob(in.u16() % (kMaxFrame + 1));
  forge(f, fix, s.view);
  PM_FUZZ_TRACE("raw frame of %zu bytes, fix 0x%x", f.size(), fix);
  s.tap->inject(f);
}

void mutate_record(Session& s, Reader& in) {
  Mutation& m = s.tap->mutation;
  uint8_t b = in.u8();
  m.n = 1 + b % 4;
  m.reseal = b & 0x80;
  for (int k = 0; k < m.n; k++) {
    m.at[k] = in.u16();
    m.x[k] = in.u8() | 1;
  }
}

void run_input(Variant& v, Reader& in) {
  Session s;
  open_session(s, v);
  while (!in.empty()) {
    switch (in.u8() % kRecKinds) {
    case kRecCore: core_record(s, in); break;
    case kRecRaw: raw_record(s, in); break;
    case kRecMutate: mutate_record(s, in); break;
    case kRecApp: s.victim.app_record(in); break;
    default: progress(s, 1 + in.u8() % 8); break;
    }
    progress(s, 1);
  }
  close_session(s);
}

// ---- seed corpus ------------------------------------------------------------
std::vector<Seed> eth_seeds() {
  std::vector<Seed> out = core_seeds(kMaxPayload);
  auto add = [&](const char* name, uint8_t variant) -> Writer& {
    out.push_back(Seed{name, Writer()});
    return out.back().w.u8(variant);
  };
  {
    Writer& w = add("dgram_eager", 2);
    app(w, kAppRecv, 1, 2048, 6).value(0);
    core(w, pm::kPktEager, pm::kPktTagged, 50, 6, 500, 0, 500);
    core(w, pm::kPktEager, 0, 51, 0, 10, 0, 10);
  }
  {
    Writer& w = add("mutated_frame", 0);
    core(w, pm::kPktEager, 0, 60, 0, 10, 0, 10);
    w.u8(kRecMutate).u8(0x80).u16(uint16_t(pm::eth::kEthHdr + pm::eth::kPmHdr + 19)).u8(0x01);  // msg_len, resealed
    core(w, pm::kPktEager, 0, 61, 0, 10, 0, 10);
  }
  return out;
}

// The frames of a genuine exchange, replayed as raw records (the harness
// fills in the session fields on replay).
Seed recorded_seed(Variant& v) {
  Seed seed{"raw_recorded_segmented", Writer()};
  Session s;
  open_session(s, v);
  s.tap->recording = true;
  Writer tmp;
  core(tmp, pm::kPktEager, pm::kPktTagged, 70, 0x99, 2500, 0, kMaxPayload);
  core(tmp, pm::kPktData, pm::kPktTagged, 70, 0x99, 2500, kMaxPayload, 2500 - kMaxPayload);
  Reader in(tmp.out.data(), tmp.out.size());
  while (!in.empty()) {
    in.u8();
    core_record(s, in);
  }
  progress(s, 2);
  s.tap->recording = false;
  seed.w.u8(0);
  for (std::vector<uint8_t> f : s.tap->recorded) {
    FrameHdr h = pm::eth::decode_hdr(f.data() + pm::eth::kEthHdr);
    if (h.type != pm::eth::kData) continue;  // the handshake is the harness's
    // What differs from run to run is filled in on replay: zeros here.
    memset(f.data(), 0, 6);
    h.dst_ep = h.src_epoch = h.dst_epoch = h.seq = h.ack = h.ts = h.ts_echo = h.csum = 0;
    h.mac = 0;
    pm::eth::encode_hdr(f.data() + pm::eth::kEthHdr, h);
    seed.w.u8(kRecRaw).u8(kFixAll).u16(uint16_t(f.size())).blob(f);
  }
  app(seed.w, kAppRecv, 1, 4096, 0x99).value(0);
  close_session(s);
  return seed;
}

void write_seeds(const char* dir) {
  mkdir(dir, 0755);
  std::vector<Seed> all = eth_seeds();
  all.push_back(recorded_seed(g_variants[0]));
  for (const Seed& s : all) {
    std::string path = std::string(dir) + "/" + s.name;
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(s.w.out.data(), 1, s.w.out.size(), f) != s.w.out.size() || fclose(f) != 0) {
      fprintf(stderr, "fuzz_eth: cannot write %s\n", path.c_str());
      exit(1);
    }
  }
  fprintf(stderr, "fuzz_eth: %zu seeds written to %s\n", all.size(), dir);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_name = "fuzz_eth";
  setenv("FI_PMETH_BACKEND", "loopback", 1);
  setenv("FI_PMETH_IFACE", kSegment, 1);
  setenv("FI_PMETH_SHM", "0", 1);               // Ethernet only: pmshm has its own harness
  setenv("FI_PMETH_PROGRESS_THREAD", "0", 1);   // progress only in fi_cq_read: deterministic
  setenv("FI_PMETH_HOST_ID", "1", 1);
  setenv("FI_PMETH_RETRIES", "2", 1);
  setenv("FI_PMETH_RTO_INIT_US", "1000000", 1);
  // fi_close drains until the peer acknowledged everything; the peer is not
  // polled inside it, and a hostile one may never acknowledge: a short bound.
  setenv("FI_PMETH_CLOSE_TIMEOUT_MS", "5", 1);
  setenv("FI_PMETH_AUTH", "1", 1);               // frames signed under the job's key
  setenv("FI_PMETH_JOB_SECRET", kJobSecret, 1);  // the peer derives the same key
  unsetenv("OMPI_MCA_orte_precondition_transports");
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
