// The C ABI skin: a libfabric fid_* struct as the first member of a
// standard-layout box with a back-pointer to the C++ object, ENOSYS stubs
// for unsupported slots, and a guard so no exception crosses the ABI.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

namespace pm {

template <class Fid, class Obj>
struct FidBox {
  Fid fid;
  Obj* self;
};

// Recovers the C++ object from any fid pointer of a box of this kind.
template <class Obj, class Fid>
inline Obj* self_of(Fid* f) noexcept {
  static_assert(std::is_standard_layout_v<FidBox<Fid, Obj>>);
  using Box = FidBox<Fid, Obj>;
  static_assert(offsetof(Box, fid) == 0);
  return reinterpret_cast<FidBox<Fid, Obj>*>(f)->self;
}

template <class Obj, class Fid>
inline Obj* self_of_fid(fid_t f) noexcept {
  return reinterpret_cast<FidBox<Fid, Obj>*>(f)->self;
}

// An ENOSYS stub for any ops-table slot: PM_ENOSYS(fi_ops_rma, write).
template <class F> struct Enosys;
template <class R, class... A>
struct Enosys<R (*)(A...)> {
  static R fn(A...) noexcept { return static_cast<R>(-FI_ENOSYS); }
};
#define PM_ENOSYS(ops, member) (::pm::Enosys<decltype(ops::member)>::fn)

// Runs f, turning any escaping exception into a libfabric status.
template <class F>
inline auto guard(F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return static_cast<decltype(f())>(-FI_ENOMEM);
  } catch (...) {
    return static_cast<decltype(f())>(-FI_EOTHER);
  }
}

// `.size` of an ops table, taken from its type, never typed by hand.
template <class Ops>
constexpr size_t ops_size() { return sizeof(Ops); }

} // namespace pm
