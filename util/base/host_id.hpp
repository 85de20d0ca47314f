#pragma once

#include <cstdint>

namespace pm {

// Identifies this machine (boot): FNV-1a of /proc/sys/kernel/random/boot_id,
// the same in every network and PID namespace of the host.
uint64_t host_id() noexcept;

} // namespace pm
