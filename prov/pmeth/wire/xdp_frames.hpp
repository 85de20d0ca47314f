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
  // max_len: the longest frame taken; piece_room: what one received
  // descriptor can hold; max_frames: the most frames one join() returns.
  void init(uint32_t max_len, uint32_t piece_room, int max_frames) {
    max_len_ = max_len;
    max_pieces_ = pieces(max_len, piece_room);
    slots_.assign(size_t(max_len) * size_t(max_frames), 0);
    max_frames_ = max_frames;
  }
  // Descriptors a call should look at to find max whole frames.
  uint32_t view_for(int max) const { return uint32_t(max) * max_pieces_; }

  // Joins the descriptors at(0) .. at(n-1) (the receive ring's view, oldest
  // first; at(i) returns a const Desc& or a type with addr, len and options)
  // into at most max frames in f. A frame of one descriptor points into the
  // UMEM (base, base_len bytes); one of several is copied into a slot of this
  // joiner, valid until the next call. *used: the descriptors taken (to be
  // released). A frame whose last piece is not in the view stays for the
  // next call, unless it already has more pieces than a frame of max_len can
  // have: then it is dropped, and its pieces still to come with it.
  template <class At>
  int join(const uint8_t* base, size_t base_len, At&& at, uint32_t n, Frame* f, int max, uint32_t* used) {
    if (max > max_frames_) max = max_frames_;
    uint32_t i = 0;
    int out = 0;
    // The rest of a frame dropped in an earlier call.
    while (skipping_ && i < n) skipping_ = (at(i++).options & kPktContd) != 0;
    while (out < max && i < n) {
      // Where this frame ends, if it ends in the view.
      uint32_t end = i;
      bool whole = false;
      while (end < n && end - i < max_pieces_) {
        if (!(at(end++).options & kPktContd)) {
          whole = true;
          break;
        }
      }
      if (!whole) {
        if (end - i < max_pieces_) break;  // its last piece is yet to come
        // More pieces than a frame can have: dropped, with what follows.
        dropped_++;
        skipping_ = true;
        i = end;
        while (skipping_ && i < n) skipping_ = (at(i++).options & kPktContd) != 0;
        continue;
      }
      size_t len = 0;
      bool ok = true;
      for (uint32_t j = i; j < end; j++) {
        const auto& d = at(j);
        if (d.addr > base_len || d.len > base_len - d.addr) ok = false;
        len += d.len;
      }
      if (!ok || len > max_len_ || len == 0) {
        dropped_++;
      } else if (end - i == 1) {
        const auto& d = at(i);
        f[out++] = Frame{base + d.addr, d.len};
      } else {
        uint8_t* slot = slots_.data() + size_t(out) * max_len_;
        size_t off = 0;
        for (uint32_t j = i; j < end; j++) {
          const auto& d = at(j);
          memcpy(slot + off, base + d.addr, d.len);
          off += d.len;
        }
        f[out++] = Frame{slot, len};
      }
      i = end;
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
