#include "eth_wire.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
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

bool have_sse42() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
}
#endif
}  // namespace

// Four independent Fletcher-style lanes over 64-bit words (a += w; b += a),
// mixed at the end: each lane's b sum depends on word order, and four lanes
// run in parallel, several times faster than CRC32C's one dependent chain.
uint32_t payload_sum(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t a[4] = {1, 2, 3, 4}, b[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 32 <= len; i += 32)
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * k, 8);
      a[k] += w;
      b[k] += a[k];
    }
  uint64_t tail = len;
  for (size_t j = 0; i + j < len; j++) tail = (tail << 8 | (tail >> 56)) ^ p[i + j];
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

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool hw = have_sse42();
  if (hw) return crc32c_hw(crc, p, len);
#endif
  return crc32c_sw(crc, p, len);
}

}  // namespace pm::eth
