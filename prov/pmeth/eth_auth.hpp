// Frame authentication for pmeth: SipHash-2-4 (a keyed 64-bit MAC, Aumasson
// and Bernstein, 2012) over each frame's addresses and pmeth header. The
// 128-bit key is derived from the job's secret (auth_key, or the
// FI_PMETH_JOB_SECRET knob, or a launcher's per-job secret); the key never
// travels, and the job id in the header is a one-way function of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pm::eth {

struct AuthKey {
  uint64_t k0 = 0, k1 = 0;
};

uint64_t siphash24(const AuthKey& key, const void* data, size_t len) noexcept;
// siphash24 of four messages of one length at once: out[i] for msg[i], in
// the four 64-bit lanes of a vector register: AVX-512VL where the CPU has
// it (one instruction per rotation; a frame's 60-byte MAC input in 14 ns
// instead of 26 on a Xeon of 2.6 GHz), else AVX2 (17 ns), else one message
// after the other. `path` caps the choice (0 one by one, 1 AVX2, 2
// AVX-512VL; -1 the best), for tests.
void siphash24_x4(const AuthKey& key, const uint8_t* const msg[4], size_t len, uint64_t out[4],
                  int path = -1) noexcept;

// The job's key from its secret bytes (any length; empty gives the
// well-known default key, which isolates jobs but protects nothing).
AuthKey derive_key(const void* secret, size_t len) noexcept;
// The 32-bit job id every frame carries: a cheap first filter, derived
// from the key so that it reveals nothing of it.
uint32_t job_id(const AuthKey& key) noexcept;

// The payload's part of the MAC where the job has a secret (not the
// default key): NH (Black, Halevi, Krawczyk, Krovetz and Rogaway, "UMAC",
// 1999) of the payload zero-padded to 32 bytes, taken twice, under key
// words k and under k shifted by four words (the Toeplitz construction):
// two different payloads of one length give the same pair with probability
// at most 2^-64 over the key. The pair never travels: the frame's MAC is
// SipHash over the header and it (a PRF of the hash), so that the payload
// is authenticated, not only checked by the frame sum (which anyone can keep
// unchanged while altering the payload).
constexpr size_t kNhMaxPayload = 65536;  // a frame's payload length is 16 bits
struct PayloadKey {
  std::vector<uint32_t> w;  // kNhMaxPayload / 4 + 4 words
};
struct PayloadHash {
  uint64_t h0 = 0, h1 = 0;
  bool operator==(const PayloadHash& o) const { return h0 == o.h0 && h1 == o.h1; }
};
// The NH key words from the job's key (SipHash as a PRF in counter mode,
// under a key derived with its own label).
PayloadKey payload_key(const AuthKey& key);
// The hash of a then b as one payload (alen + blen <= kNhMaxPayload).
PayloadHash payload_hash(const PayloadKey& k, const void* a, size_t alen, const void* b = nullptr,
                         size_t blen = 0) noexcept;
// The same, word by word without vector instructions (the definition; tests).
PayloadHash payload_hash_portable(const PayloadKey& k, const void* data, size_t len) noexcept;

}  // namespace pm::eth
