#include "eth_auth.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/packet.hpp"

namespace pm::eth {

namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

uint64_t siphash24(const AuthKey& key, const void* data, size_t len) noexcept {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  SipState s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull, key.k0 ^ 0x6c7967656e657261ull,
             key.k1 ^ 0x7465646279746573ull};
  size_t whole = len & ~size_t(7);
  for (size_t i = 0; i < whole; i += 8) s.absorb(get_le64(p + i));
  uint64_t last = uint64_t(len & 0xff) << 56;
  for (size_t i = 0; i < (len & 7); i++) last |= uint64_t(p[whole + i]) << (8 * i);
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; i++) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

namespace {

#if defined(__x86_64__)
// SipState's round in four lanes, with the rotations given by R: AVX2 has
// none (two shifts and an or, a dword shuffle by 32, a byte shuffle by 16);
// AVX-512VL has one instruction.
struct RotAvx2 {
  template <int B>
  __attribute__((target("avx2"))) static __m256i rotl(__m256i x) {
    if constexpr (B == 32) return _mm256_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1));
    if constexpr (B == 16) {
      const __m256i k = _mm256_setr_epi8(6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13,  //
                                         6, 7, 0, 1, 2, 3, 4, 5, 14, 15, 8, 9, 10, 11, 12, 13);
      return _mm256_shuffle_epi8(x, k);
    }
    return _mm256_or_si256(_mm256_slli_epi64(x, B), _mm256_srli_epi64(x, 64 - B));
  }
};
struct RotAvx512 {
  template <int B>
  __attribute__((target("avx2,avx512f,avx512vl"))) static __m256i rotl(__m256i x) {
    return _mm256_rol_epi64(x, B);
  }
};

// Word i of each message, lane k for msg[k].
__attribute__((target("avx2"))) inline __m256i word4(const uint8_t* const msg[4], size_t off) {
  return _mm256_setr_epi64x(int64_t(get_le64(msg[0] + off)), int64_t(get_le64(msg[1] + off)),
                            int64_t(get_le64(msg[2] + off)), int64_t(get_le64(msg[3] + off)));
}

// One body for both targets (the rotations differ, and an intrinsic may
// only be inlined into a function of its target, so no lambdas).
#define PM_SIP4_ROUND                                                                   \
  do {                                                                                  \
    v0 = _mm256_add_epi64(v0, v1), v1 = R::template rotl<13>(v1);                       \
    v1 = _mm256_xor_si256(v1, v0), v0 = R::template rotl<32>(v0);                       \
    v2 = _mm256_add_epi64(v2, v3), v3 = R::template rotl<16>(v3);                       \
    v3 = _mm256_xor_si256(v3, v2);                                                      \
    v0 = _mm256_add_epi64(v0, v3), v3 = R::template rotl<21>(v3);                       \
    v3 = _mm256_xor_si256(v3, v0);                                                      \
    v2 = _mm256_add_epi64(v2, v1), v1 = R::template rotl<17>(v1);                       \
    v1 = _mm256_xor_si256(v1, v2), v2 = R::template rotl<32>(v2);                       \
  } while (0)
#define PM_SIP4_ABSORB(m)                                                               \
  do {                                                                                  \
    __m256i m_ = (m);                                                                   \
    v3 = _mm256_xor_si256(v3, m_);                                                      \
    PM_SIP4_ROUND;                                                                      \
    PM_SIP4_ROUND;                                                                      \
    v0 = _mm256_xor_si256(v0, m_);                                                      \
  } while (0)
#define PM_SIP4_BODY                                                                    \
  __m256i v0 = _mm256_set1_epi64x(int64_t(key.k0 ^ 0x736f6d6570736575ull));          \
  __m256i v1 = _mm256_set1_epi64x(int64_t(key.k1 ^ 0x646f72616e646f6dull));          \
  __m256i v2 = _mm256_set1_epi64x(int64_t(key.k0 ^ 0x6c7967656e657261ull));          \
  __m256i v3 = _mm256_set1_epi64x(int64_t(key.k1 ^ 0x7465646279746573ull));          \
  size_t whole = len & ~size_t(7);                                                      \
  for (size_t i = 0; i < whole; i += 8) PM_SIP4_ABSORB(word4(msg, i));                  \
  uint64_t last[4];                                                                     \
  for (int k = 0; k < 4; k++) {                                                         \
    last[k] = uint64_t(len & 0xff) << 56;                                               \
    for (size_t i = 0; i < (len & 7); i++) last[k] |= uint64_t(msg[k][whole + i]) << (8 * i); \
  }                                                                                     \
  PM_SIP4_ABSORB(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(last)));           \
  v2 = _mm256_xor_si256(v2, _mm256_set1_epi64x(0xff));                                  \
  for (int i = 0; i < 4; i++) PM_SIP4_ROUND;                                            \
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),                                  \
                      _mm256_xor_si256(_mm256_xor_si256(v0, v1), _mm256_xor_si256(v2, v3)))

// The same steps as siphash24, message word i of msg[k] in lane k; the
// last word as siphash24 makes it (the remaining bytes, the length's low
// byte on top).
template <class R>
__attribute__((target("avx2"))) void sip4_avx2(const AuthKey& key, const uint8_t* const msg[4], size_t len,
                                             uint64_t out[4]) {
  PM_SIP4_BODY;
}
template <class R>
__attribute__((target("avx2,avx512f,avx512vl"))) void sip4_avx512(const AuthKey& key, const uint8_t* const msg[4],
                                                                  size_t len, uint64_t out[4]) {
  PM_SIP4_BODY;
}
#undef PM_SIP4_BODY
#undef PM_SIP4_ABSORB
#undef PM_SIP4_ROUND

bool has_avx2();
bool has_avx512vl() {
  __builtin_cpu_init();
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");  // it uses both
}
#endif

}  // namespace

void siphash24_x4(const AuthKey& key, const uint8_t* const msg[4], size_t len, uint64_t out[4], int path) noexcept {
#if defined(__x86_64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  static const int best = has_avx512vl() ? 2 : has_avx2() ? 1 : 0;
  int use = path < 0 ? best : std::min(path, best);
  if (use == 2) return sip4_avx512<RotAvx512>(key, msg, len, out);
  if (use == 1) return sip4_avx2<RotAvx2>(key, msg, len, out);
#endif
  (void)path;
  for (int k = 0; k < 4; k++) out[k] = siphash24(key, msg[k], len);
}

AuthKey derive_key(const void* secret, size_t len) noexcept {
  // Two PRF outputs of the secret under fixed, distinct derivation keys.
  const AuthKey d0{0x706d6574682d6b30ull, 0x6a6f622d6b657930ull};  // "pmeth-k0" "job-key0"
  const AuthKey d1{0x706d6574682d6b31ull, 0x6a6f622d6b657931ull};
  return AuthKey{siphash24(d0, secret, len), siphash24(d1, secret, len)};
}

uint32_t job_id(const AuthKey& key) noexcept {
  static const char kLabel[] = "pmeth job id";
  uint64_t h = siphash24(key, kLabel, sizeof kLabel - 1);
  uint32_t id = uint32_t(h ^ (h >> 32));
  return id ? id : 1;
}

PayloadKey payload_key(const AuthKey& key) {
  static const char kL0[] = "pmeth payload key 0", kL1[] = "pmeth payload key 1";
  const AuthKey pk{siphash24(key, kL0, sizeof kL0 - 1), siphash24(key, kL1, sizeof kL1 - 1)};
  PayloadKey k;
  k.w.resize(kNhMaxPayload / 4 + 4);
  for (size_t i = 0; i < k.w.size(); i += 2) {
    uint8_t ctr[8];
    put_le64(ctr, i / 2);
    uint64_t v = siphash24(pk, ctr, sizeof ctr);
    k.w[i] = uint32_t(v);
    k.w[i + 1] = uint32_t(v >> 32);
  }
  return k;
}

namespace {

// One 32-byte block of words m[0..7] (little-endian) under key words
// kw[0..11]: the pairs (m[2t] + kw[2t]) (m[2t+1] + kw[2t+1]) to h0 and
// (m[2t] + kw[2t+4]) (m[2t+1] + kw[2t+5]) to h1, each sum mod 2^32, the
// products and totals mod 2^64.
void nh_block_portable(PayloadHash& h, const uint8_t* p, const uint32_t* kw) {
  for (int t = 0; t < 4; t++) {
    uint32_t m0, m1;
    memcpy(&m0, p + 8 * t, 4);
    memcpy(&m1, p + 8 * t + 4, 4);
    h.h0 += uint64_t(uint32_t(m0 + kw[2 * t])) * uint32_t(m1 + kw[2 * t + 1]);
    h.h1 += uint64_t(uint32_t(m0 + kw[2 * t + 4])) * uint32_t(m1 + kw[2 * t + 5]);
  }
}

void nh_blocks_portable(PayloadHash& h, const uint8_t* p, const uint32_t* kw, size_t nblk) {
  for (size_t i = 0; i < nblk; i++) nh_block_portable(h, p + 32 * i, kw + 8 * i);
}

#if defined(__x86_64__)
// Four pairs per block in the four 64-bit lanes: the sums of words, then
// each lane's low word times its high word.
__attribute__((target("avx2"))) void nh_blocks_avx2(PayloadHash& h, const uint8_t* p, const uint32_t* kw,
                                                    size_t nblk) {
  __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
  for (size_t i = 0; i < nblk; i++) {
    __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
    __m256i x = _mm256_add_epi32(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kw + 8 * i)));
    __m256i y = _mm256_add_epi32(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kw + 8 * i + 4)));
    a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(x, _mm256_srli_epi64(x, 32)));
    a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(y, _mm256_srli_epi64(y, 32)));
  }
  alignas(32) uint64_t l0[4], l1[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l0), a0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(l1), a1);
  h.h0 += l0[0] + l0[1] + l0[2] + l0[3];
  h.h1 += l1[0] + l1[1] + l1[2] + l1[3];
}

bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#endif

using NhBlocks = void (*)(PayloadHash&, const uint8_t*, const uint32_t*, size_t);

// a then b as one payload, zero-padded: whole blocks where they lie, the
// block that straddles the cut and the last partial one copied.
PayloadHash nh_with(NhBlocks blocks, const uint32_t* kw, const uint8_t* a, size_t alen, const uint8_t* b,
                    size_t blen) {
  PayloadHash h;
  size_t na = alen / 32;
  blocks(h, a, kw, na);
  size_t word = na * 8, ra = alen - na * 32;
  uint8_t t[32];
  if (ra) {
    size_t take = blen < 32 - ra ? blen : 32 - ra;
    memcpy(t, a + na * 32, ra);
    if (take) memcpy(t + ra, b, take);
    memset(t + ra + take, 0, 32 - ra - take);
    nh_block_portable(h, t, kw + word);
    word += 8;
    b += take;
    blen -= take;
  }
  size_t nb = blen / 32;
  blocks(h, b, kw + word, nb);
  word += nb * 8;
  if (size_t rb = blen - nb * 32) {
    memcpy(t, b + nb * 32, rb);
    memset(t + rb, 0, 32 - rb);
    nh_block_portable(h, t, kw + word);
  }
  return h;
}

}  // namespace

// A frame's payload length is 16 bits: no caller can ask for more.
static_assert(kNhMaxPayload > 0xffff, "the key must cover every payload a header can claim");

PayloadHash payload_hash(const PayloadKey& k, const void* a, size_t alen, const void* b, size_t blen) noexcept {
  if (alen + blen > kNhMaxPayload || k.w.size() < kNhMaxPayload / 4 + 4) return {};  // callers bound the length
  NhBlocks blocks = nh_blocks_portable;
#if defined(__x86_64__)
  static const bool avx2 = has_avx2();
  if (avx2) blocks = nh_blocks_avx2;
#endif
  return nh_with(blocks, k.w.data(), static_cast<const uint8_t*>(a), alen, static_cast<const uint8_t*>(b),
                 b ? blen : 0);
}

PayloadHash payload_hash_portable(const PayloadKey& k, const void* data, size_t len) noexcept {
  if (len > kNhMaxPayload || k.w.size() < kNhMaxPayload / 4 + 4) return {};
  return nh_with(nh_blocks_portable, k.w.data(), static_cast<const uint8_t*>(data), len, nullptr, 0);
}

}  // namespace pm::eth
