#include "core/atomic_ops.hpp"

#include <cstring>
#include <type_traits>

namespace pm {
namespace {

bool is_compare(fi_op op) {
  switch (op) {
  case FI_CSWAP: case FI_CSWAP_NE: case FI_CSWAP_LE: case FI_CSWAP_LT:
  case FI_CSWAP_GE: case FI_CSWAP_GT: case FI_MSWAP:
    return true;
  default:
    return false;
  }
}

bool is_bitwise(fi_op op) { return op == FI_BOR || op == FI_BAND || op == FI_BXOR || op == FI_MSWAP; }

// Integer SUM and PROD wrap around (two's complement), whatever operands a
// peer sends: computed in an unsigned type at least as wide as unsigned int,
// so that neither signed overflow nor promotion to int can occur.
template <class T>
T wrap_sum(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return T(W(a) + W(b));
  } else {
    return T(a + b);
  }
}
template <class T>
T wrap_prod(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return T(W(a) * W(b));
  } else {
    return T(a * b);
  }
}

template <class T>
bool apply_one(fi_op op, T& d, T s, T c) {
  switch (op) {
  case FI_MIN: if (s < d) d = s; return true;
  case FI_MAX: if (s > d) d = s; return true;
  case FI_SUM: d = wrap_sum(d, s); return true;
  case FI_PROD: d = wrap_prod(d, s); return true;
  case FI_LOR: d = T((d != T(0)) || (s != T(0))); return true;
  case FI_LAND: d = T((d != T(0)) && (s != T(0))); return true;
  case FI_LXOR: d = T((d != T(0)) != (s != T(0))); return true;
  case FI_ATOMIC_READ: return true;
  case FI_ATOMIC_WRITE: d = s; return true;
  case FI_CSWAP: if (c == d) d = s; return true;
  case FI_CSWAP_NE: if (c != d) d = s; return true;
  case FI_CSWAP_LE: if (c <= d) d = s; return true;
  case FI_CSWAP_LT: if (c < d) d = s; return true;
  case FI_CSWAP_GE: if (c >= d) d = s; return true;
  case FI_CSWAP_GT: if (c > d) d = s; return true;
  default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
    case FI_BOR: d = T(d | s); return true;
    case FI_BAND: d = T(d & s); return true;
    case FI_BXOR: d = T(d ^ s); return true;
    case FI_MSWAP: d = T((s & c) | (d & ~c)); return true;
    default: break;
    }
  }
  return false;
}

template <class T>
bool apply(fi_op op, void* dst, const void* src, const void* cmp, void* old, size_t n) {
  if constexpr (!std::is_integral_v<T>) {
    if (is_bitwise(op)) return false;
  }
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  auto* c = static_cast<const char*>(cmp);
  for (size_t i = 0; i < n; i++) {
    T dv, sv{}, cv{};
    memcpy(&dv, d + i * sizeof(T), sizeof(T));
    if (s) memcpy(&sv, s + i * sizeof(T), sizeof(T));
    if (c) memcpy(&cv, c + i * sizeof(T), sizeof(T));
    if (old) memcpy(static_cast<char*>(old) + i * sizeof(T), &dv, sizeof(T));
    if (!apply_one<T>(op, dv, sv, cv)) return false;
    memcpy(d + i * sizeof(T), &dv, sizeof(T));
  }
  return true;
}

template <class F>
auto dispatch(fi_datatype dt, F&& f) {
  switch (dt) {
  case FI_INT8: return f(int8_t{});
  case FI_UINT8: return f(uint8_t{});
  case FI_INT16: return f(int16_t{});
  case FI_UINT16: return f(uint16_t{});
  case FI_INT32: return f(int32_t{});
  case FI_UINT32: return f(uint32_t{});
  case FI_INT64: return f(int64_t{});
  case FI_UINT64: return f(uint64_t{});
  case FI_FLOAT: return f(float{});
  case FI_DOUBLE: return f(double{});
  default: return f(nullptr);
  }
}

}  // namespace

size_t atomic_size(fi_datatype dt) {
  return dispatch(dt, [](auto v) -> size_t {
    if constexpr (std::is_same_v<decltype(v), std::nullptr_t>) return 0;
    else return sizeof(v);
  });
}

bool atomic_valid(fi_datatype dt, fi_op op, AtomicKind kind) {
  if (!atomic_size(dt)) return false;
  bool cmp = is_compare(op);
  if (kind == AtomicKind::kCompare) {
    if (!cmp) return false;
  } else if (cmp) {
    return false;
  } else if (op == FI_ATOMIC_READ && kind != AtomicKind::kFetch) {
    return false;
  } else if (op > FI_ATOMIC_WRITE) {
    return false;
  }
  bool fp = dt == FI_FLOAT || dt == FI_DOUBLE;
  return !(fp && is_bitwise(op));
}

bool atomic_apply(fi_datatype dt, fi_op op, void* dst, const void* operand, const void* compare,
                  void* old, size_t count) {
  return dispatch(dt, [&](auto v) -> bool {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, std::nullptr_t>) return false;
    else return apply<T>(op, dst, operand, compare, old, count);
  });
}

}  // namespace pm
