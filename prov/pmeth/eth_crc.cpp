#include "eth_wire.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#include <nmmintrin.h>
#endif

namespace pm::eth {

namespace {
uint32_t crc32c_sw(uint32_t crc, const uint8_t* p, size_t len) {
  static uint32_t table[256];
  static bool init = false;
  if (!init) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      table[i] = c;
    }
    init = true;
  }
  crc = ~crc;
  while (len--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const uint8_t* p, size_t len) {
  uint64_t c = ~crc;
  while (len >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (len--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

// One way to ask the CPU (and the kernel, for the AVX state) for a feature.
bool cpu_has_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif
}  // namespace

// Four independent Fletcher-style lanes over 64-bit words (a += w; b += a),
// mixed at the end: each lane's b sum depends on word order, and four lanes
// run in parallel, several times faster than CRC32C's one dependent chain.
// Lane k takes the words at byte offsets 32i + 8k; the bytes after the last
// whole 32-byte block are folded into `tail`.
namespace {

// The definition: tail = len, then per byte rotate left by 8 and xor it in.
uint64_t fold_tail_bytes(const uint8_t* p, size_t i, size_t len) {
  uint64_t tail = len;
  for (size_t j = 0; i + j < len; j++) tail = (tail << 8 | (tail >> 56)) ^ p[i + j];
  return tail;
}

// The same value, 8 bytes at a time: after n bytes, seed has turned by 8n
// bits and byte j by 8(n-1-j) bits (mod 64), so the bytes from the end, in
// groups of 8, are big-endian words, and the first n mod 8 bytes a shorter
// big-endian number. The seed is the whole payload's length.
uint64_t fold_tail_seeded(const uint8_t* q, size_t n, uint64_t seed) {
  size_t r = n & 7;
  uint64_t x = 0;
  for (size_t k = r; k < n; k += 8) x ^= __builtin_bswap64(get_le64(q + k));
  uint64_t head = 0;
  for (size_t j = 0; j < r; j++) head = head << 8 | q[j];
  unsigned rot = unsigned(8 * n) & 63;
  return (rot ? (seed << rot | seed >> (64 - rot)) : seed) ^ x ^ head;
}

uint32_t mix_lanes(const uint64_t a[4], const uint64_t b[4], uint64_t tail) {
  uint64_t h = tail * 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < 4; k++) {
    h ^= a[k] + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= b[k] * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
  }
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return uint32_t(h ^ (h >> 32));
}

// The four lanes between blocks of 32 bytes: word k of each block is added
// to a[k], then a[k] to b[k].
struct Lanes {
  uint64_t a[4] = {1, 2, 3, 4};
  uint64_t b[4] = {0, 0, 0, 0};
};

// The definition, word by word (the reference the fast paths are tested
// against, and the path where they do not exist).
void blocks_portable(Lanes& l, const uint8_t* p, size_t nblk) {
  for (size_t i = 0; i < nblk; i++)
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, p + 32 * i + 8 * k, 8);
      l.a[k] += w;
      l.b[k] += l.a[k];
    }
}

#if defined(__x86_64__)
// The lanes in registers (the portable loop kept them in memory: a store
// and a reload per word, 12 % of a sender's CPU at MTU 9000). SSE2 is part
// of x86-64: lanes 0-1 and 2-3 in two registers each.
void blocks_sse2(Lanes& l, const uint8_t* p, size_t nblk) {
  __m128i a01 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(l.a));
  __m128i a23 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(l.a + 2));
  __m128i b01 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(l.b));
  __m128i b23 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(l.b + 2));
  for (size_t i = 0; i < 32 * nblk; i += 32) {
    a01 = _mm_add_epi64(a01, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
    a23 = _mm_add_epi64(a23, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    b01 = _mm_add_epi64(b01, a01);
    b23 = _mm_add_epi64(b23, a23);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(l.a), a01);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(l.a + 2), a23);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(l.b), b01);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(l.b + 2), b23);
}

__attribute__((target("avx2"))) void blocks_avx2(Lanes& l, const uint8_t* p, size_t nblk) {
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l.a));
  __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(l.b));
  for (size_t i = 0; i < 32 * nblk; i += 32) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, a);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(l.a), a);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(l.b), b);
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#endif

using BlocksFn = void (*)(Lanes&, const uint8_t*, size_t);

// The sum of a then b, as of their concatenation: the block that a's end
// and b's start share is put together in a buffer of 32 bytes.
uint32_t sum_with(BlocksFn blocks, const uint8_t* a, size_t alen, const uint8_t* b, size_t blen) {
  uint64_t total = alen + blen;
  Lanes l;
  size_t ablk = alen / 32, ar = alen % 32;
  blocks(l, a, ablk);
  if (ar) {
    uint8_t t[32];
    size_t take = std::min(32 - ar, blen);
    memcpy(t, a + 32 * ablk, ar);
    if (take) memcpy(t + ar, b, take);
    if (ar + take < 32) return mix_lanes(l.a, l.b, fold_tail_seeded(t, ar + take, total));
    blocks(l, t, 1);
    b += take;
    blen -= take;
  }
  size_t bblk = blen / 32;
  blocks(l, b, bblk);
  return mix_lanes(l.a, l.b, fold_tail_seeded(b + 32 * bblk, blen % 32, total));
}

BlocksFn best_blocks() {
#if defined(__x86_64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  static const BlocksFn f = cpu_has_avx2() ? blocks_avx2 : blocks_sse2;
  return f;
#else
  return blocks_portable;
#endif
}

}  // namespace

uint32_t payload_sum_portable(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  Lanes l;
  blocks_portable(l, p, len / 32);
  return mix_lanes(l.a, l.b, fold_tail_bytes(p, len & ~size_t(31), len));
}

bool payload_sum_by(int path, const void* data, size_t len, uint32_t* sum) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  switch (path) {
  case 0: *sum = payload_sum_portable(p, len); return true;
#if defined(__x86_64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  case 1: *sum = sum_with(blocks_sse2, p, len, nullptr, 0); return true;
  case 2:
    if (!cpu_has_avx2()) return false;
    *sum = sum_with(blocks_avx2, p, len, nullptr, 0);
    return true;
#endif
  default: return false;
  }
}

uint32_t payload_sum(const void* data, size_t len) {
  return sum_with(best_blocks(), static_cast<const uint8_t*>(data), len, nullptr, 0);
}

uint32_t payload_sum2(const void* a, size_t alen, const void* b, size_t blen) {
  return sum_with(best_blocks(), static_cast<const uint8_t*>(a), alen, static_cast<const uint8_t*>(b), blen);
}

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool hw = cpu_has_sse42();
  if (hw) return crc32c_hw(crc, p, len);
#endif
  return crc32c_sw(crc, p, len);
}

}  // namespace pm::eth
