// Multi-buffer AF_XDP frames (prov/pmeth/wire/xdp_frames.hpp): frames cut
// into chunk-sized pieces for sending, and received pieces joined into whole
// frames, with what a broken or hostile ring could hand over (frames longer
// than the MTU allows, endless "continued" chains, descriptors outside the
// UMEM). No AF_XDP socket needed.
#include <criterion/criterion.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "wire/xdp_frames.hpp"

using namespace pm::eth;
using namespace pm::eth::xdp;

namespace {

constexpr uint32_t kChunk = 4096;
constexpr uint32_t kRoom = 3840;  // a received piece: a chunk behind 256 bytes of headroom
constexpr uint32_t kMaxLen = 9018;
constexpr uint32_t kPieces = 3;  // what a frame of kMaxLen takes in pieces of kRoom

// A UMEM of chunks and a receive ring's view of descriptors into it.
struct Umem {
  std::vector<uint8_t> area = std::vector<uint8_t>(64 * kChunk, 0xee);
  std::vector<Desc> ring;
  uint32_t next = 0;  // the next chunk to use

  // A received frame: its bytes into fresh chunks (behind the headroom),
  // pieces of at most room bytes.
  void receive(const std::vector<uint8_t>& f, uint32_t room = kRoom) {
    size_t off = 0;
    do {
      uint32_t l = uint32_t(std::min<size_t>(room, f.size() - off));
      uint64_t addr = uint64_t(next++ % 64) * kChunk + 256;
      memcpy(area.data() + addr, f.data() + off, l);
      off += l;
      ring.push_back(Desc{addr, l, off < f.size() ? kPktContd : 0});
    } while (off < f.size());
  }
  // The ring's descriptors from `from` on (at most `view` of them).
  int join(RxJoiner& j, Frame* f, int max, uint32_t* used, uint32_t from = 0, uint32_t view = UINT32_MAX) {
    return j.join(area.data(), area.size(), [&](uint32_t i) -> const Desc& { return ring[from + i]; },
                  std::min(uint32_t(ring.size() - from), view), f, max, used);
  }
};

std::vector<uint8_t> pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = uint8_t(seed + i * 7 + (i >> 8));
  return v;
}

void assert_frame(const Frame& f, const std::vector<uint8_t>& want) {
  cr_assert_eq(f.len, want.size(), "frame of %zu bytes, expected %zu", f.len, want.size());
  cr_assert(memcmp(f.data, want.data(), want.size()) == 0, "the frame's bytes differ");
}

}  // namespace

Test(xdp_frames, a_frame_is_cut_into_chunks_marked_continued_but_the_last) {
  std::vector<uint8_t> area(8 * kChunk, 0);
  auto f = pattern(9014, 3);
  uint64_t addrs[3] = {5 * kChunk, 2 * kChunk, 7 * kChunk};
  Desc d[3];
  cr_assert_eq(pieces(f.size(), kChunk), 3u);
  cr_assert_eq(cut_frame(area.data(), Frame{f.data(), f.size()}, kChunk, addrs, d), 3u);
  uint32_t lens[3] = {4096, 4096, 822};
  uint32_t opts[3] = {kPktContd, kPktContd, 0};
  size_t off = 0;
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(d[i].addr, addrs[i]);
    cr_assert_eq(d[i].len, lens[i]);
    cr_assert_eq(d[i].options, opts[i]);
    cr_assert(memcmp(area.data() + addrs[i], f.data() + off, lens[i]) == 0);
    off += lens[i];
  }
  // A frame that fits one chunk is one piece, not continued.
  auto s = pattern(kChunk, 9);
  cr_assert_eq(cut_frame(area.data(), Frame{s.data(), s.size()}, kChunk, addrs, d), 1u);
  cr_assert_eq(d[0].len, kChunk);
  cr_assert_eq(d[0].options, 0u);
  cr_assert_eq(pieces(kChunk + 1, kChunk), 2u);
  cr_assert_eq(pieces(1, kChunk), 1u);
}

Test(xdp_frames, pieces_are_joined_and_single_pieces_stay_in_the_umem) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  std::vector<std::vector<uint8_t>> sent = {pattern(60, 1), pattern(9014, 2), pattern(kRoom, 3),
                                            pattern(kRoom + 1, 4), pattern(1514, 5)};
  for (auto& f : sent) u.receive(f);
  cr_assert_eq(u.ring.size(), 1u + 3 + 1 + 2 + 1);
  Frame f[8];
  uint32_t used = 0;
  int n = u.join(j, f, 8, &used);
  cr_assert_eq(n, 5);
  cr_assert_eq(used, u.ring.size());
  for (int i = 0; i < n; i++) assert_frame(f[i], sent[i]);
  // One-piece frames are not copied: they point at their descriptor's bytes.
  cr_assert_eq(f[0].data, u.area.data() + u.ring[0].addr);
  cr_assert_eq(f[2].data, u.area.data() + u.ring[4].addr);
  cr_assert_eq(f[4].data, u.area.data() + u.ring[7].addr);
  cr_assert_eq(j.dropped(), 0u);
}

// Every length from 1 to the longest frame, cut for sending and joined as
// received: the same bytes come out.
Test(xdp_frames, every_length_survives_cutting_and_joining) {
  RxJoiner j;
  j.init(kMaxLen, kPieces, 4);
  std::vector<uint8_t> tx(8 * kChunk);
  std::vector<size_t> lens;
  for (size_t len = 1; len < kMaxLen; len += (len < 300 ? 1 : 37)) lens.push_back(len);
  for (size_t len : {size_t(kRoom), size_t(kRoom) + 1, size_t(kChunk), size_t(kChunk) + 1, size_t(kMaxLen)})
    lens.push_back(len);
  for (size_t len : lens) {
    auto f = pattern(len, uint8_t(len));
    uint64_t addrs[4] = {3 * kChunk, 0, 6 * kChunk, kChunk};
    Desc d[4];
    uint32_t p = cut_frame(tx.data(), Frame{f.data(), f.size()}, kChunk, addrs, d);
    // Reassemble what was sent the way the receive side does.
    std::vector<uint8_t> wire;
    for (uint32_t i = 0; i < p; i++) wire.insert(wire.end(), tx.data() + d[i].addr, tx.data() + d[i].addr + d[i].len);
    Umem u;
    u.receive(wire);
    Frame out[4];
    uint32_t used = 0;
    cr_assert_eq(u.join(j, out, 4, &used), 1, "length %zu", len);
    cr_assert_eq(used, u.ring.size());
    assert_frame(out[0], f);
  }
}

Test(xdp_frames, a_frame_whose_last_piece_is_not_in_view_waits) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  auto a = pattern(100, 1), b = pattern(9014, 2);
  u.receive(a);
  u.receive(b);
  Desc last = u.ring.back();
  u.ring.pop_back();  // b's last piece has not come yet
  Frame f[8];
  uint32_t used = 0;
  cr_assert_eq(u.join(j, f, 8, &used), 1);
  cr_assert_eq(used, 1u, "b's first pieces are left for the next call");
  assert_frame(f[0], a);
  u.ring.push_back(last);
  cr_assert_eq(u.join(j, f, 8, &used, 1), 1);
  cr_assert_eq(used, 3u);
  assert_frame(f[0], b);
  cr_assert_eq(j.dropped(), 0u);
}

Test(xdp_frames, at_most_max_frames_are_taken) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  for (int i = 0; i < 5; i++) u.receive(pattern(5000, uint8_t(i)));
  Frame f[8];
  uint32_t used = 0;
  cr_assert_eq(u.join(j, f, 3, &used), 3);
  cr_assert_eq(used, 6u);
  cr_assert_eq(u.join(j, f, 8, &used, 6), 2);
  cr_assert_eq(used, 4u);
  assert_frame(f[1], pattern(5000, 4));
  // More than the joiner was made for: capped at its slots.
  RxJoiner two;
  two.init(kMaxLen, kPieces, 2);
  cr_assert_eq(u.join(two, f, 8, &used), 2);
  cr_assert_eq(used, 4u);
}

Test(xdp_frames, a_frame_longer_than_the_mtu_allows_is_dropped_whole) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  auto ok1 = pattern(200, 1), ok2 = pattern(9018, 3);
  u.receive(ok1);
  u.receive(pattern(kMaxLen + 1, 2));  // three pieces, one byte too long
  u.receive(ok2);
  Frame f[8];
  uint32_t used = 0;
  cr_assert_eq(u.join(j, f, 8, &used), 2);
  cr_assert_eq(used, u.ring.size());
  assert_frame(f[0], ok1);
  assert_frame(f[1], ok2);
  cr_assert_eq(j.dropped(), 1u);
}

// A chain of "continued" pieces longer than any frame: dropped as soon as it
// has more pieces than a frame can have, and its rest, arriving later, too.
Test(xdp_frames, an_endless_chain_is_dropped_across_calls) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  for (int i = 0; i < 5; i++) u.ring.push_back(Desc{uint64_t(i) * kChunk + 256, 16, kPktContd});
  Frame f[8];
  uint32_t used = 0;
  cr_assert_eq(u.join(j, f, 8, &used), 0);
  cr_assert_eq(used, 5u, "the chain is taken (and released), not left to block the ring");
  cr_assert_eq(j.dropped(), 1u);
  // Its rest, then a good frame.
  size_t from = u.ring.size();
  u.ring.push_back(Desc{6 * kChunk + 256, 16, kPktContd});
  u.ring.push_back(Desc{7 * kChunk + 256, 16, 0});
  auto good = pattern(300, 8);
  u.receive(good);
  cr_assert_eq(u.join(j, f, 8, &used, uint32_t(from)), 1);
  cr_assert_eq(used, 3u);
  assert_frame(f[0], good);
  cr_assert_eq(j.dropped(), 1u);
}

// A dropped chain whose rest fills a whole view, then ends in a third.
Test(xdp_frames, a_dropped_chain_is_skipped_over_several_views) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  for (int i = 0; i < 10; i++) u.ring.push_back(Desc{uint64_t(i) * kChunk + 256, 100, kPktContd});
  u.ring.push_back(Desc{10 * kChunk + 256, 100, 0});
  auto good = pattern(5000, 2);
  u.receive(good);
  Frame f[8];
  uint32_t used = 0, at = 0;
  // Views of 4, 4, then the rest: nothing comes out until the good frame.
  for (uint32_t view : {4u, 4u}) {
    cr_assert_eq(u.join(j, f, 8, &used, at, view), 0);
    cr_assert_eq(used, view, "every piece of the view is taken");
    at += used;
  }
  cr_assert_eq(u.join(j, f, 8, &used, at), 1);
  cr_assert_eq(at + used, u.ring.size());
  assert_frame(f[0], good);
  cr_assert_eq(j.dropped(), 1u);
}

// Pieces smaller than a chunk's room (zero-copy drivers' buffers) are joined
// as long as the frame has no more pieces than the kernel makes.
Test(xdp_frames, small_pieces_are_joined_up_to_the_kernels_bound) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, RxJoiner::kMaxPieces, 4);
  auto a = pattern(9014, 5), b = pattern(600, 6);
  u.receive(a, 2048);  // 5 pieces
  u.receive(b, 32);    // 19 pieces: more than any frame has
  auto c = pattern(1500, 7);
  u.receive(c, 100);   // 15 pieces
  Frame f[4];
  uint32_t used = 0;
  cr_assert_eq(u.join(j, f, 4, &used), 2);
  cr_assert_eq(used, u.ring.size());
  assert_frame(f[0], a);
  assert_frame(f[1], c);
  cr_assert_eq(j.dropped(), 1u);
}

Test(xdp_frames, a_piece_outside_the_umem_drops_its_frame) {
  Umem u;
  RxJoiner j;
  j.init(kMaxLen, kPieces, 8);
  uint64_t end = u.area.size();
  u.ring.push_back(Desc{end - 10, 20, 0});                  // runs past the end
  u.ring.push_back(Desc{256, 100, kPktContd});              // a good first piece,
  u.ring.push_back(Desc{~uint64_t(0) - 5, 100, 0});         // a second far outside
  u.ring.push_back(Desc{end + kChunk, 0, 0});               // empty, outside
  u.ring.push_back(Desc{kChunk + 256, 0, 0});               // empty, inside
  u.ring.push_back(Desc{end, 1, 0});                        // one byte just past the end
  u.ring.push_back(Desc{end - 20, 1, kPktContd});           // a good piece, then
  u.ring.push_back(Desc{end - 19, 20, 0});                  // one a byte too long
  auto good = pattern(1000, 4);
  u.receive(good);
  std::vector<uint8_t> tail(u.area.end() - 20, u.area.end());
  u.ring.push_back(Desc{end - 20, 20, 0});                  // the last 20 bytes: inside
  Frame f[8];
  uint32_t used = 0;
  cr_assert_eq(u.join(j, f, 8, &used), 2);
  cr_assert_eq(used, u.ring.size());
  assert_frame(f[0], good);
  assert_frame(f[1], tail);
  cr_assert_eq(j.dropped(), 6u);
}
