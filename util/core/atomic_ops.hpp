// The arithmetic of libfabric atomics, independent of any transport: which
// (datatype, op) pairs exist, their element size, and executing one on
// target memory (the caller serialises: the domain lock).
#pragma once

#include <cstddef>
#include <cstdint>

#include <rdma/fi_atomic.h>

namespace pm {

enum class AtomicKind { kWrite, kFetch, kCompare };

// Element size of a supported datatype, 0 if unsupported.
size_t atomic_size(fi_datatype dt);
// Whether this op is valid for the datatype and kind.
bool atomic_valid(fi_datatype dt, fi_op op, AtomicKind kind);
// dst[i] = op(dst[i], operand[i] (, compare[i])); old values to `old` when
// non-null. Returns false for an invalid combination (nothing written).
bool atomic_apply(fi_datatype dt, fi_op op, void* dst, const void* operand, const void* compare,
                  void* old, size_t count);

} // namespace pm
