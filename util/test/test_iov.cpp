// base/iov.hpp: totals, scatter/gather copies at every offset and length
// against a flat reference, and slicing.
#include <criterion/criterion.h>

#include <sys/uio.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/iov.hpp"

namespace {

// An iov array over one arena: segments of the given sizes separated by
// guard gaps, so a copy that writes past a segment end shows up.
constexpr uint8_t kGuard = 0xEE;
constexpr size_t kGap = 8;

struct Layout {
  std::vector<uint8_t> arena;
  std::vector<struct iovec> iov;
  std::vector<size_t> at;  // arena offset of each segment
  size_t total = 0;

  explicit Layout(std::vector<size_t> sizes) {
    size_t pos = kGap;
    for (size_t s : sizes) {
      at.push_back(pos);
      pos += s + kGap;
      total += s;
    }
    arena.assign(pos, kGuard);
    for (size_t i = 0; i < sizes.size(); i++)
      iov.push_back({arena.data() + at[i], sizes[i]});
  }
  size_t cnt() const { return iov.size(); }
  // The segments' bytes concatenated: what the array holds, as a flat buffer.
  std::vector<uint8_t> flat() const {
    std::vector<uint8_t> f;
    for (const auto& v : iov) {
      const uint8_t* p = static_cast<const uint8_t*>(v.iov_base);
      f.insert(f.end(), p, p + v.iov_len);
    }
    return f;
  }
  void fill_segments(uint8_t seed) {
    size_t k = 0;
    for (auto& v : iov)
      for (size_t j = 0; j < v.iov_len; j++) static_cast<uint8_t*>(v.iov_base)[j] = uint8_t(seed + 7 * k++);
  }
  // Every byte outside the segments still holds the guard.
  bool guards_intact() const {
    size_t seg = 0;
    for (size_t b = 0; b < arena.size(); b++) {
      while (seg < at.size() && b >= at[seg] + iov[seg].iov_len) seg++;
      bool inside = seg < at.size() && b >= at[seg];
      if (!inside && arena[b] != kGuard) return false;
    }
    return true;
  }
};

// Sizes with a zero-length entry, one-byte entries and uneven lengths.
const std::vector<size_t> kSizes = {3, 0, 17, 1, 64, 9, 0, 1};

constexpr size_t kSame = SIZE_MAX;
size_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < a.size(); i++)
    if (a[i] != b[i]) return i;
  return kSame;
}

size_t expect_n(size_t total, size_t off, size_t len) {
  if (off >= total) return 0;
  return len < total - off ? len : total - off;
}

}  // namespace

Test(iov, total) {
  cr_assert_eq(pm::iov_total(nullptr, 0), 0u);
  Layout l(kSizes);
  cr_assert_eq(l.total, 95u);
  cr_assert_eq(pm::iov_total(l.iov.data(), l.cnt()), 95u);
  cr_assert_eq(pm::iov_total(l.iov.data(), 3), 20u);
  cr_assert_eq(pm::iov_total(l.iov.data() + 1, 1), 0u);
  struct iovec big[2] = {{nullptr, size_t(1) << 40}, {nullptr, 5}};
  cr_assert_eq(pm::iov_total(big, 2), (size_t(1) << 40) + 5);
}

Test(iov, copy_to_every_offset_and_length_matches_flat_reference) {
  std::vector<uint8_t> src(128);
  for (size_t i = 0; i < src.size(); i++) src[i] = uint8_t(0x80 + i * 13);
  Layout l(kSizes);
  size_t checked = 0;
  for (size_t off = 0; off <= l.total + 2; off++) {
    for (size_t len = 0; len <= l.total + 2; len++) {
      l.fill_segments(uint8_t(off + len));
      std::vector<uint8_t> ref = l.flat();
      size_t want = expect_n(l.total, off, len);
      memcpy(ref.data() + (want ? off : 0), src.data(), want);
      size_t got = pm::iov_copy_to(l.iov.data(), l.cnt(), off, src.data(), len);
      if (got != want)
        cr_assert_fail("copy_to(off=%zu, len=%zu) returned %zu, want %zu", off, len, got, want);
      std::vector<uint8_t> flat = l.flat();
      if (size_t b = first_diff(flat, ref); b != kSame)
        cr_assert_fail("copy_to(off=%zu, len=%zu): byte %zu is 0x%02x, want 0x%02x", off, len, b, flat[b], ref[b]);
      if (!l.guards_intact()) cr_assert_fail("copy_to(off=%zu, len=%zu) wrote outside the segments", off, len);
      checked++;
    }
  }
  cr_assert_eq(checked, size_t(98 * 98));
}

Test(iov, copy_from_every_offset_and_length_matches_flat_reference) {
  Layout l(kSizes);
  l.fill_segments(0x31);
  const std::vector<uint8_t> ref = l.flat();
  const std::vector<uint8_t> before = l.arena;
  std::vector<uint8_t> dst(l.total + 16);
  size_t checked = 0;
  for (size_t off = 0; off <= l.total + 2; off++) {
    for (size_t len = 0; len <= l.total + 2; len++) {
      memset(dst.data(), 0x5A, dst.size());
      size_t want = expect_n(l.total, off, len);
      size_t got = pm::iov_copy_from(l.iov.data(), l.cnt(), off, dst.data(), len);
      if (got != want)
        cr_assert_fail("copy_from(off=%zu, len=%zu) returned %zu, want %zu", off, len, got, want);
      for (size_t b = 0; b < want; b++)
        if (dst[b] != ref[off + b])
          cr_assert_fail("copy_from(off=%zu, len=%zu): byte %zu is 0x%02x, want 0x%02x", off, len, b, dst[b],
                   ref[off + b]);
      for (size_t b = want; b < dst.size(); b++)
        if (dst[b] != 0x5A) cr_assert_fail("copy_from(off=%zu, len=%zu) wrote past %zu bytes", off, len, want);
      checked++;
    }
  }
  cr_assert_eq(checked, size_t(98 * 98));
  cr_assert(l.arena == before, "copy_from modified its source");
}

Test(iov, copy_to_then_copy_from_round_trip_in_pieces) {
  // A message written piecewise (as segments arrive) and read back piecewise.
  Layout l({5, 11, 2, 40, 7});
  std::vector<uint8_t> msg(l.total);
  for (size_t i = 0; i < msg.size(); i++) msg[i] = uint8_t(i * 31 + 1);
  const size_t pieces[] = {4, 9, 1, 30, 21};
  size_t off = 0;
  for (size_t p : pieces) {
    cr_assert_eq(pm::iov_copy_to(l.iov.data(), l.cnt(), off, msg.data() + off, p), p);
    off += p;
  }
  cr_assert_eq(off, l.total);
  cr_assert(l.flat() == msg);
  std::vector<uint8_t> back(l.total, 0);
  off = 0;
  for (size_t p : {size_t(13), size_t(13), size_t(13), size_t(13), size_t(13)}) {
    size_t n = pm::iov_copy_from(l.iov.data(), l.cnt(), off, back.data() + off, p);
    cr_assert_eq(n, expect_n(l.total, off, p));
    off += n;
  }
  cr_assert_eq(off, l.total);
  cr_assert(back == msg);
  cr_assert(l.guards_intact());
}

Test(iov, slice_every_offset_length_and_limit) {
  Layout l(kSizes);
  // Segment start offsets within the message, for the independent reference.
  std::vector<size_t> start;
  size_t s = 0;
  for (const auto& v : l.iov) {
    start.push_back(s);
    s += v.iov_len;
  }
  struct iovec out[16];
  size_t nonempty = 0;
  for (size_t off = 0; off <= l.total + 1; off++) {
    for (size_t len = 0; len <= l.total + 1; len++) {
      // Reference: the non-empty intersections of each segment with [off, off+len).
      std::vector<struct iovec> ref;
      for (size_t i = 0; i < l.cnt(); i++) {
        size_t a = start[i] > off ? start[i] : off;
        size_t e1 = start[i] + l.iov[i].iov_len, e2 = off + len;
        size_t b = e1 < e2 ? e1 : e2;
        if (a < b) ref.push_back({static_cast<uint8_t*>(l.iov[i].iov_base) + (a - start[i]), b - a});
      }
      for (size_t max_out = 0; max_out <= ref.size() + 1; max_out++) {
        memset(out, 0xAB, sizeof out);
        size_t k = pm::iov_slice(l.iov.data(), l.cnt(), off, len, out, max_out);
        size_t want = ref.size() < max_out ? ref.size() : max_out;
        if (k != want)
          cr_assert_fail("slice(off=%zu, len=%zu, max=%zu) gave %zu entries, want %zu", off, len, max_out, k, want);
        for (size_t j = 0; j < k; j++) {
          if (out[j].iov_base != ref[j].iov_base)
            cr_assert_fail("slice(off=%zu, len=%zu) entry %zu starts at %p, want %p", off, len, j, out[j].iov_base,
                     ref[j].iov_base);
          if (out[j].iov_len != ref[j].iov_len)
            cr_assert_fail("slice(off=%zu, len=%zu) entry %zu is %zu bytes, want %zu", off, len, j, out[j].iov_len,
                     ref[j].iov_len);
        }
        // Entries past the returned count are untouched.
        const uint8_t* raw = reinterpret_cast<const uint8_t*>(out + k);
        for (size_t b = 0; b < (16 - k) * sizeof(struct iovec); b++)
          if (raw[b] != 0xAB) cr_assert_fail("slice(off=%zu, len=%zu) wrote past entry %zu", off, len, k);
        nonempty += k > 0;
      }
    }
  }
  cr_assert_gt(nonempty, 1000u);  // the loops really exercised slicing
}

Test(iov, slice_spanning_three_segments_reads_the_same_bytes) {
  Layout l({10, 10, 10, 10});
  l.fill_segments(3);
  const std::vector<uint8_t> ref = l.flat();
  struct iovec out[4];
  size_t k = pm::iov_slice(l.iov.data(), l.cnt(), 7, 18, out, 4);
  cr_assert_eq(k, 3u);
  cr_assert_eq(out[0].iov_len, 3u);
  cr_assert_eq(out[1].iov_len, 10u);
  cr_assert_eq(out[2].iov_len, 5u);
  cr_assert_eq(out[0].iov_base, static_cast<uint8_t*>(l.iov[0].iov_base) + 7);
  cr_assert_eq(out[2].iov_base, l.iov[2].iov_base);
  // Gathering the slice equals the flat sub-range.
  uint8_t got[18];
  cr_assert_eq(pm::iov_copy_from(out, k, 0, got, sizeof got), 18u);
  cr_assert_eq(memcmp(got, ref.data() + 7, 18), 0);
  // A slice of the slice.
  struct iovec out2[4];
  size_t k2 = pm::iov_slice(out, k, 4, 10, out2, 4);
  cr_assert_eq(k2, 2u);
  cr_assert_eq(out2[0].iov_base, static_cast<uint8_t*>(l.iov[1].iov_base) + 1);
  cr_assert_eq(out2[0].iov_len, 9u);
  cr_assert_eq(out2[1].iov_base, l.iov[2].iov_base);
  cr_assert_eq(out2[1].iov_len, 1u);
}

// iov_at and iov_contiguous against the layout, at every offset and length
// (empty segments skipped; a range over two segments or past the end has
// no single address).
Test(iov, at_and_contiguous_every_offset_and_length) {
  Layout l({5, 0, 11, 2, 40});
  size_t seg_of[58], off_in[58], k = 0;
  for (size_t i = 0; i < l.cnt(); i++)
    for (size_t j = 0; j < l.iov[i].iov_len; j++, k++) {
      seg_of[k] = i;
      off_in[k] = j;
    }
  cr_assert_eq(k, l.total);
  for (size_t off = 0; off <= l.total + 2; off++) {
    size_t avail = 12345;
    const void* p = pm::iov_at(l.iov.data(), l.cnt(), off, &avail);
    if (off >= l.total) {
      cr_assert_null(p, "offset %zu", off);
      cr_assert_null(pm::iov_contiguous(l.iov.data(), l.cnt(), off, 1));
      continue;
    }
    const struct iovec& v = l.iov[seg_of[off]];
    cr_assert_eq(p, static_cast<uint8_t*>(v.iov_base) + off_in[off], "offset %zu", off);
    cr_assert_eq(avail, v.iov_len - off_in[off], "offset %zu", off);
    for (size_t len = 1; off + len <= l.total + 1; len++) {
      const void* c = pm::iov_contiguous(l.iov.data(), l.cnt(), off, len);
      if (len <= avail) cr_assert_eq(c, p, "offset %zu length %zu", off, len);
      else cr_assert_null(c, "offset %zu length %zu", off, len);
    }
  }
}
