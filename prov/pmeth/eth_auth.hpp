// Frame authentication for pmeth: SipHash-2-4 (a keyed 64-bit MAC, Aumasson
// and Bernstein, 2012) over each frame's addresses and pmeth header. The
// 128-bit key is derived from the job's secret (auth_key, or the
// FI_PMETH_JOB_SECRET knob, or a launcher's per-job secret); the key never
// travels, and the job id in the header is a one-way function of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pm::eth {

struct AuthKey {
  uint64_t k0 = 0, k1 = 0;
};

uint64_t siphash24(const AuthKey& key, const void* data, size_t len) noexcept;

// The job's key from its secret bytes (any length; empty gives the
// well-known default key, which isolates jobs but protects nothing).
AuthKey derive_key(const void* secret, size_t len) noexcept;
// The 32-bit job id every frame carries: a cheap first filter, derived
// from the key so that it reveals nothing of it.
uint32_t job_id(const AuthKey& key) noexcept;

}  // namespace pm::eth
