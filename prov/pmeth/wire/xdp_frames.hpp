// AF_XDP frames larger than one UMEM chunk (multi-buffer, XDP_USE_SG,
// Linux 6.6): such a frame travels as several descriptors, each but the last
// marked "continued" (XDP_PKT_CONTD). The two halves that need no libxdp live
// here, so that the unit test (util/test/test_xdp_frames.cpp) runs them on
// any machine:
//   - cut_frame: a frame to send, cut into chunk-sized pieces in the UMEM;
//   - RxJoiner: received descriptors joined into whole frames, bounded: a
//     frame longer than the wire's MTU allows, or a descriptor outside the
//     UMEM, is dropped whole and counted, never copied past a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "wire/wire.hpp"

namespace pm::eth::xdp {

// XDP_PKT_CONTD of linux/if_xdp.h: more descriptors of this frame follow.
constexpr uint32_t kPktContd = 1u << 0;

struct Desc {
  uint64_t addr;  // offset into the UMEM
  uint32_t len;
  uint32_t options;
};

// The pieces a frame of len bytes takes in chunks of chunk bytes.
inline uint32_t pieces(size_t len, uint32_t chunk) { return len <= chunk ? 1 : uint32_t((len + chunk - 1) / chunk); }

// Copies the frame into the chunks at addrs[0..pieces) of the UMEM at base
// and writes one descriptor per piece into out; returns the pieces.
inline uint32_t cut_frame(uint8_t* base, const Frame& fr, uint32_t chunk, const uint64_t* addrs, Desc* out) {
  uint32_t n = pieces(fr.len, chunk);
  size_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t l = uint32_t(fr.len - off < chunk ? fr.len - off : chunk);
    memcpy(base + addrs[i], fr.data + off, l);
    out[i] = Desc{addrs[i], l, i + 1 < n ? kPktContd : 0};
    off += l;
  }
  return n;
}

class RxJoiner {
 public:
  // The most pieces a received frame may have (the kernel's bound: an skb's
  // head and MAX_SKB_FRAGS = 17 fragments; in copy mode a frame has
  // ceil(length / piece room) of them, in zero-copy as many as the driver's
  // buffers make).
  static constexpr uint32_t kMaxPieces = 18;

  // max_len: the longest frame taken; max_pieces (≤ kMaxPieces): the most
  // pieces of one frame; max_frames: the most frames one join() returns.
  void init(uint32_t max_len, uint32_t max_pieces, int max_frames) {
    max_len_ = max_len;
    max_pieces_ = max_pieces < 1 ? 1 : max_pieces > kMaxPieces ? kMaxPieces : max_pieces;
    slots_.assign(size_t(max_len) * size_t(max_frames), 0);
    max_frames_ = max_frames;
  }
  // Descriptors a call should look at to find max whole frames.
  uint32_t view_for(int max) const { return uint32_t(max) * max_pieces_; }

  // Joins the descriptors at(0) .. at(n-1) (the receive ring's view, oldest
  // first; at(i) returns something with addr, len and options, each read
  // once) into at most max frames in f. A frame of one descriptor points
  // into the UMEM (base, base_len bytes); one of several is copied into a
  // slot of this joiner, valid until the next call. *used: the descriptors
  // taken (to be released, also those of dropped frames: *used may be
  // above 0 when no frame comes out). A frame whose last piece is not in the
  // view stays for the next call, unless it already has more pieces than a
  // frame may have: then it is dropped, and its pieces still to come with it.
  template <class At>
  int join(const uint8_t* base, size_t base_len, At&& at, uint32_t n, Frame* f, int max, uint32_t* used) {
    if (max > max_frames_) max = max_frames_;
    uint32_t i = 0;
    int out = 0;
    Desc d[kMaxPieces];
    while (i < n) {
      // The rest of a dropped frame (from this call or an earlier one).
      if (skipping_) {
        skipping_ = (at(i++).options & kPktContd) != 0;
        continue;
      }
      if (out == max) break;
      // This frame's pieces, copied once out of the ring.
      uint32_t k = 0;
      bool whole = false;
      while (i + k < n && k < max_pieces_) {
        const auto& r = at(i + k);
        d[k] = Desc{r.addr, r.len, r.options};
        if (!(d[k++].options & kPktContd)) {
          whole = true;
          break;
        }
      }
      if (!whole) {
        if (k < max_pieces_) break;  // its last piece is yet to come
        // More pieces than a frame may have: dropped, with what follows.
        dropped_++;
        skipping_ = true;
        i += k;
        continue;
      }
      i += k;
      size_t len = 0;
      bool ok = true;
      for (uint32_t j = 0; j < k; j++) {
        if (d[j].addr > base_len || d[j].len > base_len - d[j].addr) ok = false;
        len += d[j].len;
      }
      if (!ok || len > max_len_ || len == 0) {
        dropped_++;
      } else if (k == 1) {
        f[out++] = Frame{base + d[0].addr, d[0].len};
      } else {
        uint8_t* slot = slots_.data() + size_t(out) * max_len_;
        size_t off = 0;
        for (uint32_t j = 0; j < k; j++) {
          memcpy(slot + off, base + d[j].addr, d[j].len);
          off += d[j].len;
        }
        f[out++] = Frame{slot, len};
      }
    }
    *used = i;
    return out;
  }

  // Frames dropped: too long, or a descriptor outside the UMEM.
  uint64_t dropped() const { return dropped_; }

 private:
  std::vector<uint8_t> slots_;
  uint32_t max_len_ = 0, max_pieces_ = 1;
  int max_frames_ = 0;
  bool skipping_ = false;
  uint64_t dropped_ = 0;
};

}  // namespace pm::eth::xdp
