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

uint32_t crc32c(uint32_t crc, const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool hw = have_sse42();
  if (hw) return crc32c_hw(crc, p, len);
#endif
  return crc32c_sw(crc, p, len);
}

}  // namespace pm::eth
