// The structured input of the fuzz harnesses: a byte stream read field by
// field (reads past the end give zeros, so every input is valid), and the
// writer that builds the seed corpus in the same format.
//
// A 64-bit field is a mode byte followed by its operand, so that a mutation
// of one byte moves the value between the regions where bugs live: small
// values, raw 64-bit values, just below 2^64 (sums that wrap), powers of
// two, and "a reference value plus or minus a little" (the harness passes
// the reference: the last message length for an offset, the registered key
// for an RMA key, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

namespace pm::fuzz {

enum ValueMode : uint8_t {
  kValU8 = 0,      // operand: 1 byte
  kValU16 = 1,     // 2 bytes, little-endian
  kValU32 = 2,     // 4 bytes
  kValU64 = 3,     // 8 bytes
  kValRefPlus = 4, // reference + 1 byte
  kValRefMinus = 5,// reference - 1 byte (wraps)
  kValTop = 6,     // UINT64_MAX - 1 byte: sums with it wrap
  kValPow2 = 7,    // 2^(byte % 64)
  kValModes = 8,
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ >= end_; }
  size_t left() const { return size_t(end_ - p_); }

  uint8_t u8() { return empty() ? 0 : *p_++; }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
  uint32_t u32() { return uint32_t(u16()) | (uint32_t(u16()) << 16); }
  uint64_t u64() { return uint64_t(u32()) | (uint64_t(u32()) << 32); }

  uint64_t value(uint64_t ref) {
    switch (u8() % kValModes) {
    case kValU8: return u8();
    case kValU16: return u16();
    case kValU32: return u32();
    case kValU64: return u64();
    case kValRefPlus: return ref + u8();
    case kValRefMinus: return ref - u8();
    case kValTop: return UINT64_MAX - u8();
    default: return uint64_t(1) << (u8() % 64);
    }
  }

  // `len` bytes: a 16-bit count of bytes taken from the input, the rest
  // repeats them (zeros if none), so a long payload costs a short input.
  std::vector<uint8_t> blob(size_t len) {
    size_t n = u16();
    n = std::min(n, std::min(len, left()));
    std::vector<uint8_t> b(len, 0);
    for (size_t i = 0; i < n; i++) b[i] = u8();
    for (size_t i = n; n && i < len; i++) b[i] = b[i % n];
    return b;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Builds inputs in the format Reader reads (seed corpus).
class Writer {
 public:
  Writer& u8(uint8_t v) {
    out.push_back(v);
    return *this;
  }
  Writer& u16(uint16_t v) { return u8(uint8_t(v)).u8(uint8_t(v >> 8)); }
  Writer& u32(uint32_t v) { return u16(uint16_t(v)).u16(uint16_t(v >> 16)); }
  Writer& u64(uint64_t v) { return u32(uint32_t(v)).u32(uint32_t(v >> 32)); }
  // A value in the shortest plain mode that holds it.
  Writer& value(uint64_t v) {
    if (v <= UINT8_MAX) return u8(kValU8).u8(uint8_t(v));
    if (v <= UINT16_MAX) return u8(kValU16).u16(uint16_t(v));
    if (v <= UINT32_MAX) return u8(kValU32).u32(uint32_t(v));
    return u8(kValU64).u64(v);
  }
  Writer& ref_plus(uint8_t d) { return u8(kValRefPlus).u8(d); }
  Writer& blob(const std::vector<uint8_t>& b) {
    u16(uint16_t(b.size()));
    out.insert(out.end(), b.begin(), b.end());
    return *this;
  }
  std::vector<uint8_t> out;
};

}  // namespace pm::fuzz
