#include "eth_auth.hpp"

#include <cstring>

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

}  // namespace pm::eth
