// Atomics: every (datatype, op) of fi_atomic / fi_fetch_atomic /
// fi_compare_atomic checked against the spec's definition (fi_atomic(3)),
// the validity queries (fi_atomicvalid, fi_fetch_atomicvalid,
// fi_compare_atomicvalid, fi_query_atomic), concurrent increments from two
// initiators, and refusals (unknown key, range, access) that leave memory
// untouched.
//
// Rank 0 is the target; it keeps progressing its endpoint while it waits.
// A base atomic's default completion (transmit complete) does not say the
// target memory was updated, so the target waits (bounded) for the expected
// bytes; fetching atomics have run at the target when they complete.
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <memory>
#include <set>
#include <type_traits>

#include "ft_rma.h"

using namespace ft;

namespace {

constexpr int kTarget = 0, kInit = 1;
constexpr uint32_t kReady = 0xA70001u, kDone = 0xA70002u, kLanded = 0xA70003u;
constexpr size_t kElems = 4;

const fi_datatype kTypes[] = {FI_INT8,  FI_UINT8,  FI_INT16, FI_UINT16, FI_INT32,
                              FI_UINT32, FI_INT64, FI_UINT64, FI_FLOAT,  FI_DOUBLE};
const fi_op kOps[] = {FI_MIN,       FI_MAX,         FI_SUM,   FI_PROD,     FI_LOR,      FI_LAND,     FI_BOR,
                      FI_BAND,      FI_LXOR,        FI_BXOR,  FI_ATOMIC_READ, FI_ATOMIC_WRITE, FI_CSWAP,
                      FI_CSWAP_NE,  FI_CSWAP_LE,    FI_CSWAP_LT, FI_CSWAP_GE, FI_CSWAP_GT, FI_MSWAP};

enum class Kind : uint32_t { kBase, kFetch, kCompare };
const char* kind_name(Kind k) {
    return k == Kind::kBase ? "fi_atomic" : k == Kind::kFetch ? "fi_fetch_atomic" : "fi_compare_atomic";
}

bool is_float(fi_datatype dt) { return dt == FI_FLOAT || dt == FI_DOUBLE; }
bool is_bitwise(fi_op op) { return op == FI_BOR || op == FI_BAND || op == FI_BXOR || op == FI_MSWAP; }
bool is_compare(fi_op op) { return op >= FI_CSWAP && op <= FI_MSWAP; }

// Which combinations fi_atomic(3) defines: base atomics take MIN..BXOR and
// ATOMIC_WRITE; fetch atomics also ATOMIC_READ; compare atomics the CSWAP
// family and MSWAP. Bitwise operations (and MSWAP) exist for integers only.
// The test requires providers to support exactly these.
bool spec_valid(fi_datatype dt, fi_op op, Kind k) {
    if (is_float(dt) && is_bitwise(op)) return false;
    switch (k) {
        case Kind::kBase: return !is_compare(op) && op != FI_ATOMIC_READ;
        case Kind::kFetch: return !is_compare(op);
        case Kind::kCompare: return is_compare(op);
    }
    return false;
}

// Operands (cast to each datatype): chosen so that every base operation
// changes at least one element, compares go each way for signed and
// unsigned types, and no signed operation overflows.
constexpr int64_t kInit0[kElems] = {3, -10, 0, 7};
constexpr int64_t kOperand[kElems] = {9, 4, -5, 0};
constexpr int64_t kCompare[kElems] = {3, 20, 1, 5};

template <class T>
T apply_spec(fi_op op, T addr, T buf, T cmp) {
    switch (op) {
        case FI_MIN: return buf < addr ? buf : addr;
        case FI_MAX: return buf > addr ? buf : addr;
        case FI_SUM: return T(addr + buf);
        case FI_PROD: return T(addr * buf);
        case FI_LOR: return T(addr || buf);
        case FI_LAND: return T(addr && buf);
        case FI_LXOR: return T((addr && !buf) || (!addr && buf));
        case FI_ATOMIC_READ: return addr;
        case FI_ATOMIC_WRITE: return buf;
        case FI_CSWAP: return cmp == addr ? buf : addr;
        case FI_CSWAP_NE: return cmp != addr ? buf : addr;
        case FI_CSWAP_LE: return cmp <= addr ? buf : addr;
        case FI_CSWAP_LT: return cmp < addr ? buf : addr;
        case FI_CSWAP_GE: return cmp >= addr ? buf : addr;
        case FI_CSWAP_GT: return cmp > addr ? buf : addr;
        default: break;
    }
    if constexpr (std::is_integral_v<T>) {
        switch (op) {
            case FI_BOR: return T(addr | buf);
            case FI_BAND: return T(addr & buf);
            case FI_BXOR: return T(addr ^ buf);
            case FI_MSWAP: return T((buf & cmp) | (addr & ~cmp));
            default: break;
        }
    }
    FT_FAIL("no spec definition for op %s on this datatype", op_name(op));
}

// Calls f(T{}) with the C type of dt.
template <class F>
void with_type(fi_datatype dt, F&& f) {
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
        default: FT_FAIL("unexpected datatype %d", (int)dt);
    }
}

template <class T>
void fill_values(T* out, const int64_t* v) {
    for (size_t i = 0; i < kElems; ++i) out[i] = static_cast<T>(v[i]);
}

template <class T>
std::string values_str(const T* v) {
    std::string s = "{";
    for (size_t i = 0; i < kElems; ++i) {
        char b[48];
        if constexpr (std::is_floating_point_v<T>) std::snprintf(b, sizeof b, "%g", (double)v[i]);
        else if constexpr (std::is_signed_v<T>) std::snprintf(b, sizeof b, "%lld", (long long)v[i]);
        else std::snprintf(b, sizeof b, "%llu", (unsigned long long)v[i]);
        s += (i ? ", " : "") + std::string(b);
    }
    return s + "}";
}

// Target memory: a registered 32-byte window (room for 4 elements of the
// widest type) in the middle of a guard-filled buffer; the element array
// sits at the window's start, the rest of the window is also guard.
struct AtomicTarget {
    static constexpr size_t kPre = 64, kWin = 32, kPost = 64;
    static constexpr uint32_t kSeed = 0xA7A7;
    alignas(64) uint8_t mem[kPre + kWin + kPost];
    AtomicTarget() { reset(); }
    uint8_t* win() { return mem + kPre; }
    void reset() { fill(mem, sizeof mem, kSeed); }
};

struct Step {
    uint32_t dt, op, kind, end;
};

void check_query(Endpoint& ep, fi_datatype dt, fi_op op, Kind k, bool* valid, size_t* count) {
    int rc = 0;
    size_t cnt = 0;
    switch (k) {
        case Kind::kBase: rc = fi_atomicvalid(ep.ep, dt, op, &cnt); break;
        case Kind::kFetch: rc = fi_fetch_atomicvalid(ep.ep, dt, op, &cnt); break;
        case Kind::kCompare: rc = fi_compare_atomicvalid(ep.ep, dt, op, &cnt); break;
    }
    char what[128];
    std::snprintf(what, sizeof what, "%svalid(%s, %s)", kind_name(k), datatype_name(dt), op_name(op));
    FT_CHECK(rc == 0 || rc == -FI_EOPNOTSUPP, "%s: expected 0 or -FI_EOPNOTSUPP, got %d (%s)", what, rc, errstr(rc));
    *valid = rc == 0;
    *count = cnt;
    fi_atomic_attr attr{};
    uint64_t qflags = k == Kind::kFetch ? FI_FETCH_ATOMIC : k == Kind::kCompare ? FI_COMPARE_ATOMIC : 0;
    int qrc = fi_query_atomic(ep.domain, dt, op, &attr, qflags);
    FT_CHECK(qrc == 0 || qrc == -FI_EOPNOTSUPP, "fi_query_atomic(%s, %s, %s): expected 0 or -FI_EOPNOTSUPP, got %d (%s)",
             datatype_name(dt), op_name(op), flags_str(qflags).c_str(), qrc, errstr(qrc));
    FT_CHECK((qrc == 0) == *valid, "fi_query_atomic(%s, %s, flags %s) returned %d but %s returned %d", datatype_name(dt),
             op_name(op), qflags ? flags_str(qflags).c_str() : "0", qrc, what, rc);
    const bool want = spec_valid(dt, op, k);
    FT_CHECK(*valid == want, "%s reports %s, but fi_atomic(3) %s", what, *valid ? "valid" : "invalid",
             want ? "defines it (the test requires every defined combination)" : "does not define it");
    if (*valid) {
        size_t sz = 0;
        with_type(dt, [&](auto v) { sz = sizeof v; });
        FT_EQ(attr.size, sz, (std::string("fi_query_atomic attr.size for ") + datatype_name(dt)).c_str());
        FT_CHECK(attr.count >= kElems, "fi_query_atomic(%s, %s) count %zu < %zu", datatype_name(dt), op_name(op),
                 attr.count, kElems);
        FT_CHECK(cnt >= kElems, "%s count %zu < %zu", what, cnt, kElems);
    }
}

template <class T>
void init_perform(Endpoint& ep, fi_addr_t dest, const RemoteMr& rm, fi_datatype dt, fi_op op, Kind k) {
    T operand[kElems], cmp[kElems], init[kElems];
    fill_values(operand, kOperand);
    fill_values(cmp, kCompare);
    fill_values(init, kInit0);
    // result array with guards on both sides
    constexpr uint32_t kResSeed = 0x4E5;
    alignas(16) uint8_t resmem[64 + sizeof(T) * kElems + 64];
    fill(resmem, sizeof resmem, kResSeed);
    T* res = reinterpret_cast<T*>(resmem + 64);
    char what[128];
    std::snprintf(what, sizeof what, "%s(%s, %s)", kind_name(k), datatype_name(dt), op_name(op));
    OpCtx ctx;
    // ATOMIC_READ ignores the source buffer: pass NULL as fi_atomic(3) allows
    const void* src = op == FI_ATOMIC_READ ? nullptr : operand;
    switch (k) {
        case Kind::kBase:
            ep.post(what, [&] { return fi_atomic(ep.ep, src, kElems, nullptr, dest, rm.at(0), rm.key, dt, op, &ctx.fctx); });
            break;
        case Kind::kFetch:
            ep.post(what, [&] {
                return fi_fetch_atomic(ep.ep, src, kElems, nullptr, res, nullptr, dest, rm.at(0), rm.key, dt, op,
                                       &ctx.fctx);
            });
            break;
        case Kind::kCompare:
            ep.post(what, [&] {
                return fi_compare_atomic(ep.ep, operand, kElems, nullptr, cmp, nullptr, res, nullptr, dest, rm.at(0),
                                         rm.key, dt, op, &ctx.fctx);
            });
            break;
    }
    Comp c = ep.expect_ok(&ctx, what);
    expect_flags(c, FI_ATOMIC | (k == Kind::kBase ? FI_WRITE : FI_READ), what);
    FT_CHECK(!(c.flags & (FI_RMA | FI_SEND | FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE)),
             "%s: completion flags %s carry foreign bits", what, flags_str(c.flags).c_str());
    if (k != Kind::kBase) {
        FT_CHECK(std::memcmp(res, init, sizeof init) == 0, "%s: fetched %s, expected the initial values %s", what,
                 values_str(res).c_str(), values_str(init).c_str());
        check(resmem, 64, kResSeed, (std::string(what) + ": bytes before the result buffer").c_str());
        check(resmem + 64 + sizeof init, 64, kResSeed, (std::string(what) + ": bytes after the result buffer").c_str(),
              64 + sizeof init);
    }
}

template <class T>
void target_expect(Endpoint& ep, AtomicTarget& t, fi_datatype dt, fi_op op, Kind k) {
    T init[kElems], operand[kElems], cmp[kElems], want[kElems];
    fill_values(init, kInit0);
    fill_values(operand, kOperand);
    fill_values(cmp, kCompare);
    for (size_t i = 0; i < kElems; ++i) want[i] = apply_spec<T>(op, init[i], operand[i], cmp[i]);
    char what[160];
    std::snprintf(what, sizeof what, "target after %s(%s, %s): init %s operand %s compare %s -> expected %s",
                  kind_name(k), datatype_name(dt), op_name(op), values_str(init).c_str(), values_str(operand).c_str(),
                  values_str(cmp).c_str(), values_str(want).c_str());
    // Base atomics only complete at transmit level: their effect must be
    // visible, which the operands guarantee (checked here).
    if (k == Kind::kBase)
        FT_CHECK(std::memcmp(want, init, sizeof init) != 0, "test design: %s leaves the array unchanged", what);
    uint8_t expected[sizeof t.mem];
    fill(expected, sizeof expected, AtomicTarget::kSeed);
    std::memcpy(expected + AtomicTarget::kPre, want, sizeof want);
    const double t0 = now_s();
    const double deadline = t0 + kWait;
    while (std::memcmp(t.mem, expected, sizeof expected) != 0) {
        if (now_s() > deadline) {
            T seen[kElems];
            std::memcpy(seen, t.win(), sizeof seen);
            size_t i = 0;
            while (t.mem[i] == expected[i]) ++i;
            FT_FAIL("%s; saw %s (first differing byte %zd relative to the array)", what, values_str(seen).c_str(),
                    (ssize_t)i - (ssize_t)AtomicTarget::kPre);
        }
        ep.progress();
    }
    log("%s: ok", what);
}

void case_ops() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        AtomicTarget t;
        Region r(ep, t.win(), AtomicTarget::kWin, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xA1);
        send_remote(kInit, r.remote());
        int n = 0;
        for (;;) {
            Step s = oob_get_progress<Step>(ep, kInit);
            if (s.end) break;
            const fi_datatype dt = (fi_datatype)s.dt;
            t.reset();
            with_type(dt, [&](auto v) {
                using T = decltype(v);
                T init[kElems];
                fill_values(init, kInit0);
                std::memcpy(t.win(), init, sizeof init);
            });
            signal_peer(kInit, kReady);
            wait_signal_progress(ep, kInit, kDone);
            with_type(dt, [&](auto v) { target_expect<decltype(v)>(ep, t, dt, (fi_op)s.op, (Kind)s.kind); });
            ++n;
        }
        info("target verified %d atomic operations", n);
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        int performed = 0, invalid = 0;
        for (fi_datatype dt : kTypes)
            for (fi_op op : kOps)
                for (Kind k : {Kind::kBase, Kind::kFetch, Kind::kCompare}) {
                    bool valid = false;
                    size_t count = 0;
                    check_query(ep, dt, op, k, &valid, &count);
                    if (!valid) {
                        ++invalid;
                        continue;
                    }
                    oob_put(kTarget, Step{(uint32_t)dt, (uint32_t)op, (uint32_t)k, 0});
                    wait_signal_progress(ep, kTarget, kReady);
                    with_type(dt, [&](auto v) { init_perform<decltype(v)>(ep, addr[kTarget], rm, dt, op, k); });
                    signal_peer(kTarget, kDone);
                    ++performed;
                }
        oob_put(kTarget, Step{0, 0, 0, 1});
        info("performed %d valid (datatype, op, kind) combinations; %d reported invalid as fi_atomic(3) requires",
             performed, invalid);
    }
    barrier([&] { ep.progress(); });
}

// ---------------------------------------------------------- concurrent
// Ranks 1 and 2 each issue 2000 fi_atomic(+1) and 500 fi_fetch_atomic(+1)
// (interleaved; the window of outstanding operations is twice tx_attr->size,
// so posting meets -FI_EAGAIN and retries) on one uint64 at rank 0: the
// result is exactly 5000 and all 1000 fetched values are distinct.
void case_concurrent() {
    constexpr int kAdds = 2000, kFetches = 500;
    constexpr uint64_t kTotal = 2ull * (kAdds + kFetches);
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        alignas(64) uint64_t mem[3] = {0x6A6A6A6A6A6A6A6Aull, 0, 0x6A6A6A6A6A6A6A6Aull};
        Region r(ep, &mem[1], sizeof(uint64_t), FI_REMOTE_READ | FI_REMOTE_WRITE, 0xC0);
        send_remote(1, r.remote());
        send_remote(2, r.remote());
        barrier([&] { ep.progress(); });  // the initiators start together
        wait_signal_progress(ep, 1, kDone);
        wait_signal_progress(ep, 2, kDone);
        const uint64_t want = kTotal;
        wait_bytes(ep, &mem[1], &want, sizeof want, "the shared counter after 5000 increments");
        const double t0 = now_s();
        while (now_s() - t0 < 0.2) ep.progress();
        FT_EQ(mem[1], kTotal, "the shared counter 200 ms later");
        FT_EQ(mem[0], 0x6A6A6A6A6A6A6A6Aull, "the word before the counter");
        FT_EQ(mem[2], 0x6A6A6A6A6A6A6A6Aull, "the word after the counter");
        std::set<uint64_t> seen;
        for (int p : {1, 2}) {
            auto bytes = oob_recv_bytes(p);
            FT_EQ(bytes.size(), kFetches * sizeof(uint64_t), "size of a fetched-value list");
            for (size_t i = 0; i < kFetches; ++i) {
                uint64_t v;
                std::memcpy(&v, bytes.data() + i * sizeof v, sizeof v);
                FT_CHECK(v < kTotal, "rank %d fetched %" PRIu64 ", not below %" PRIu64, p, v, kTotal);
                FT_CHECK(seen.insert(v).second, "fetched value %" PRIu64 " was seen twice (rank %d)", v, p);
            }
        }
        info("counter = %" PRIu64 ", %zu distinct fetched values", mem[1], seen.size());
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        barrier([&] { ep.progress(); });  // both initiators start together
        struct Slot {
            OpCtx ctx;
            bool busy = false;
            bool fetch = false;
            int fetch_index = -1;
        };
        const int kWindow = (int)std::min<size_t>(2 * std::max<size_t>(ep.info->tx_attr->size, 8), 1024);
        std::vector<Slot> slots((size_t)kWindow);
        std::vector<uint64_t> fetched(kFetches, ~0ull);
        const uint64_t one = 1;
        int issued_adds = 0, issued_fetches = 0, outstanding = 0, eagain = 0;
        auto reap = [&](const Comp& c) {
            Slot* s = nullptr;
            for (auto& sl : slots)
                if (sl.busy && c.ctx == &sl.ctx.fctx) s = &sl;
            FT_CHECK(s != nullptr, "completion for an unknown context: %s", describe(c).c_str());
            FT_CHECK(!c.is_err, "concurrent atomic failed: %s", describe(c).c_str());
            expect_flags(c, FI_ATOMIC | (s->fetch ? FI_READ : FI_WRITE), "concurrent atomic");
            s->busy = false;
            --outstanding;
        };
        const double deadline = now_s() + 30;
        while (issued_adds < kAdds || issued_fetches < kFetches) {
            Slot* s = nullptr;
            for (auto& sl : slots)
                if (!sl.busy) s = &sl;
            if (!s) {
                reap(ep.wait_any("a concurrent atomic's completion"));
                continue;
            }
            // one fetch after every 4 adds
            const bool fetch = issued_fetches < kFetches && (issued_adds >= kAdds || (issued_adds + issued_fetches) % 5 == 4);
            ssize_t rc;
            if (fetch)
                rc = fi_fetch_atomic(ep.ep, &one, 1, nullptr, &fetched[(size_t)issued_fetches], nullptr, addr[kTarget],
                                     rm.at(0), rm.key, FI_UINT64, FI_SUM, &s->ctx.fctx);
            else
                rc = fi_atomic(ep.ep, &one, 1, nullptr, addr[kTarget], rm.at(0), rm.key, FI_UINT64, FI_SUM, &s->ctx.fctx);
            if (rc == -FI_EAGAIN) {
                ++eagain;
                if (ep.progress() == 0) sched_yield();
                for (auto& sl : slots)
                    if (sl.busy)
                        if (auto c = ep.take_ctx(&sl.ctx.fctx)) reap(*c);
                FT_CHECK(now_s() < deadline, "atomics still -FI_EAGAIN after 30 s");
                continue;
            }
            FT_CHECK(rc == 0, "%s: %zd (%s)", fetch ? "fi_fetch_atomic" : "fi_atomic", rc, errstr(rc));
            s->busy = true;
            s->fetch = fetch;
            ++outstanding;
            if (fetch) ++issued_fetches;
            else ++issued_adds;
        }
        while (outstanding > 0) reap(ep.wait_any("the last concurrent atomics"));
        info("issued %d fi_atomic and %d fi_fetch_atomic (+1 each), window %d, %d x -FI_EAGAIN", issued_adds,
             issued_fetches, kWindow, eagain);
        signal_peer(kTarget, kDone);
        std::vector<uint8_t> bytes(kFetches * sizeof(uint64_t));
        std::memcpy(bytes.data(), fetched.data(), bytes.size());
        oob_send_bytes(kTarget, bytes);
    }
    barrier([&] { ep.progress(); });
}

// --------------------------------------------------------------- refuse
struct Attempt {
    const char* what;
    Kind kind;
    fi_op op;
    size_t count;
    int region;      // 0: read-write, 1: read-only, 2: write-only
    int64_t off;     // target address relative to the region's start
    bool bad_key;    // use a key the target never handed out
};

void case_refuse() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    constexpr size_t kPre = 4096, kWin = 4 * sizeof(uint64_t), kPost = 4096;
    constexpr uint32_t kSeed[3] = {0xA7E, 0xA7F, 0xA80};
    if (rank() == kTarget) {
        std::vector<uint8_t> mem[3];
        for (int i = 0; i < 3; ++i) {
            mem[i].resize(kPre + kWin + kPost);
            fill(mem[i].data(), mem[i].size(), kSeed[i]);
        }
        Region rrw(ep, mem[0].data() + kPre, kWin, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xB1);
        Region rro(ep, mem[1].data() + kPre, kWin, FI_REMOTE_READ, 0xB2);
        Region rwo(ep, mem[2].data() + kPre, kWin, FI_REMOTE_WRITE, 0xB3);
        send_remote(kInit, rrw.remote());
        send_remote(kInit, rro.remote());
        send_remote(kInit, rwo.remote());
        wait_signal_progress(ep, kInit, kDone);
        const char* names[3] = {"read-write", "read-only", "write-only"};
        for (int i = 0; i < 3; ++i) {
            std::string w = std::string(names[i]) + " region (and the memory around it) after refused atomics";
            size_t bad = first_mismatch(mem[i].data(), mem[i].size(), kSeed[i]);
            FT_CHECK(bad == SIZE_MAX, "%s: byte %zd relative to the region's start changed (0x%02x -> 0x%02x)",
                     w.c_str(), (ssize_t)bad - (ssize_t)kPre, pattern_byte(kSeed[i], bad), mem[i][bad]);
        }
        // then one valid fetch-and-add works on the same endpoints
        uint64_t before;
        std::memcpy(&before, mem[0].data() + kPre, sizeof before);
        const uint64_t want = before + 5;
        signal_peer(kInit, kReady);
        wait_signal_progress(ep, kInit, kLanded);
        wait_bytes(ep, mem[0].data() + kPre, &want, sizeof want, "valid fi_fetch_atomic after the refusals");
        check(mem[0].data(), kPre, kSeed[0], "bytes before the read-write region");
        check(mem[0].data() + kPre + 8, mem[0].size() - kPre - 8, kSeed[0], "bytes after the updated element", kPre + 8);
        info("a valid fi_fetch_atomic after the refusals worked; the endpoint keeps working");
    } else {
        RemoteMr rm[3];
        for (auto& r : rm) r = recv_remote(ep, kTarget);
        const std::vector<Attempt> attempts = {
            {"fi_atomic SUM with an unknown key", Kind::kBase, FI_SUM, 1, 0, 0, true},
            {"fi_fetch_atomic SUM with an unknown key", Kind::kFetch, FI_SUM, 1, 0, 8, true},
            {"fi_compare_atomic CSWAP with an unknown key", Kind::kCompare, FI_CSWAP, 1, 0, 0, true},
            {"fi_atomic SUM of 2 elements starting at the last one", Kind::kBase, FI_SUM, 2, 0, (int64_t)kWin - 8, false},
            {"fi_fetch_atomic SUM of 4 elements starting at the second", Kind::kFetch, FI_SUM, 4, 0, 8, false},
            {"fi_atomic SUM 1 KiB past the region", Kind::kBase, FI_SUM, 1, 0, (int64_t)kWin + 1024, false},
            {"fi_compare_atomic CSWAP 64 B before the region", Kind::kCompare, FI_CSWAP, 1, 0, -64, false},
            {"fi_atomic SUM into a read-only region", Kind::kBase, FI_SUM, 1, 1, 0, false},
            {"fi_fetch_atomic SUM on a read-only region (needs write)", Kind::kFetch, FI_SUM, 1, 1, 0, false},
            {"fi_compare_atomic CSWAP on a read-only region", Kind::kCompare, FI_CSWAP, 1, 1, 8, false},
            {"fi_fetch_atomic SUM on a write-only region (needs read)", Kind::kFetch, FI_SUM, 1, 2, 0, false},
            {"fi_fetch_atomic ATOMIC_READ on a write-only region", Kind::kFetch, FI_ATOMIC_READ, 1, 2, 8, false},
        };
        for (const Attempt& a : attempts) {
            const RemoteMr& r = rm[a.region];
            const uint64_t raddr = r.base + (uint64_t)a.off;
            const uint64_t key = a.bad_key ? ~r.key : r.key;
            // Operands such that a wrongly performed operation changes memory:
            // CSWAP compares against what the target holds there.
            uint64_t operand[4] = {0x1111, 0x2222, 0x3333, 0x4444};
            uint64_t cmp[4];
            for (size_t i = 0; i < 4; ++i)
                fill(&cmp[i], sizeof cmp[i], kSeed[a.region], (size_t)((int64_t)kPre + a.off) + 8 * i);
            uint64_t res[4] = {};
            OpCtx ctx;
            ssize_t rc = post_or_refuse(ep, a.what, [&] {
                switch (a.kind) {
                    case Kind::kBase:
                        return fi_atomic(ep.ep, operand, a.count, nullptr, addr[kTarget], raddr, key, FI_UINT64, a.op,
                                         &ctx.fctx);
                    case Kind::kFetch:
                        return fi_fetch_atomic(ep.ep, operand, a.count, nullptr, res, nullptr, addr[kTarget], raddr,
                                               key, FI_UINT64, a.op, &ctx.fctx);
                    default:
                        return fi_compare_atomic(ep.ep, operand, a.count, nullptr, cmp, nullptr, res, nullptr,
                                                 addr[kTarget], raddr, key, FI_UINT64, a.op, &ctx.fctx);
                }
            });
            FT_CHECK(rc == 0, "%s: expected the post to succeed and an error completion, got %zd (%s)", a.what, rc,
                     errstr(rc));
            Comp c = expect_refused(ep, &ctx.fctx, a.what);
            expect_flags(c, FI_ATOMIC, a.what);
        }
        signal_peer(kTarget, kDone);
        wait_signal_progress(ep, kTarget, kReady);  // the target has checked its memory
        uint64_t before;
        fill(&before, sizeof before, kSeed[0], kPre);
        uint64_t five = 5, old = 0;
        OpCtx ctx;
        ep.post("valid fi_fetch_atomic", [&] {
            return fi_fetch_atomic(ep.ep, &five, 1, nullptr, &old, nullptr, addr[kTarget], rm[0].at(0), rm[0].key,
                                   FI_UINT64, FI_SUM, &ctx.fctx);
        });
        ep.expect_ok(&ctx, "valid fi_fetch_atomic after the refusals");
        FT_EQ(old, before, "value fetched by the valid fi_fetch_atomic");
        signal_peer(kTarget, kLanded);
    }
    barrier([&] { ep.progress(); });
}

// --------------------------------------------------------------- variants
// The iovec and msg forms of the three atomic families, with the operands,
// compares and results split over several fi_ioc entries, plus
// fi_inject_atomic, on 4 UINT64 elements reset to {10, 20, 30, 40} each step.
struct VStep {
    const char* what;
    uint64_t want[kElems];   // target afterwards
    bool fetches;            // results must equal the initial values
};
const VStep kVSteps[] = {
    {"fi_atomicv(SUM) with operands in 2 iocs", {11, 22, 33, 44}, false},
    {"fi_atomicmsg(SUM) with operands in 2 iocs", {15, 25, 35, 45}, false},
    {"fi_inject_atomic(SUM) of 4 elements", {11, 21, 31, 41}, false},
    {"fi_fetch_atomicv(SUM) with results in 1+3 iocs", {110, 120, 130, 140}, true},
    {"fi_fetch_atomicmsg(ATOMIC_READ) with results in 2 iocs", {10, 20, 30, 40}, true},
    {"fi_compare_atomicv(CSWAP) with compares and results in 2 iocs", {7, 20, 7, 40}, true},
    {"fi_compare_atomicmsg(MSWAP) with operands, masks and results in 2 iocs", {15, 0xF4, 30, 0xFF}, true},
};
constexpr uint64_t kVInit[kElems] = {10, 20, 30, 40};

void case_variants() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        AtomicTarget t;
        Region r(ep, t.win(), AtomicTarget::kWin, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xA2);
        send_remote(kInit, r.remote());
        for (const VStep& st : kVSteps) {
            t.reset();
            std::memcpy(t.win(), kVInit, sizeof kVInit);
            signal_peer(kInit, kReady);
            wait_signal_progress(ep, kInit, kDone);
            uint8_t expected[sizeof t.mem];
            fill(expected, sizeof expected, AtomicTarget::kSeed);
            std::memcpy(expected + AtomicTarget::kPre, st.want, sizeof st.want);
            wait_bytes(ep, t.mem, expected, sizeof expected, st.what);
            log("%s: ok", st.what);
        }
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        fi_rma_ioc rioc{rm.at(0), kElems, rm.key};
        for (const VStep& st : kVSteps) {
            wait_signal_progress(ep, kTarget, kReady);
            const std::string w = st.what;
            uint64_t op[kElems] = {}, cmp[kElems] = {}, res[kElems + 1];
            std::fill(std::begin(res), std::end(res), 0xDEADBEEFull);  // res[4]: guard
            OpCtx ctx;
            fi_msg_atomic m{};
            m.addr = addr[kTarget];
            m.rma_iov = &rioc;
            m.rma_iov_count = 1;
            m.datatype = FI_UINT64;
            m.context = &ctx.fctx;
            bool completes = true;
            if (w.rfind("fi_atomicv", 0) == 0) {
                uint64_t o[kElems] = {1, 2, 3, 4};
                std::memcpy(op, o, sizeof o);
                fi_ioc ioc[2] = {{op, 2}, {op + 2, 2}};
                ep.post(st.what, [&] {
                    return fi_atomicv(ep.ep, ioc, nullptr, 2, addr[kTarget], rm.at(0), rm.key, FI_UINT64, FI_SUM,
                                      &ctx.fctx);
                });
            } else if (w.rfind("fi_atomicmsg", 0) == 0) {
                std::fill(std::begin(op), std::end(op), 5);
                fi_ioc ioc[2] = {{op, 1}, {op + 1, 3}};
                m.msg_iov = ioc;
                m.iov_count = 2;
                m.op = FI_SUM;
                ep.post(st.what, [&] { return fi_atomicmsg(ep.ep, &m, FI_COMPLETION); });
            } else if (w.rfind("fi_inject_atomic", 0) == 0) {
                std::fill(std::begin(op), std::end(op), 1);
                ep.post(st.what, [&] {
                    return fi_inject_atomic(ep.ep, op, kElems, addr[kTarget], rm.at(0), rm.key, FI_UINT64, FI_SUM);
                });
                std::fill(std::begin(op), std::end(op), 0xEE);  // the buffer is ours again
                completes = false;
            } else if (w.rfind("fi_fetch_atomicv", 0) == 0) {
                std::fill(std::begin(op), std::end(op), 100);
                fi_ioc ioc[2] = {{op, 2}, {op + 2, 2}};
                fi_ioc rioc2[2] = {{res, 1}, {res + 1, 3}};
                ep.post(st.what, [&] {
                    return fi_fetch_atomicv(ep.ep, ioc, nullptr, 2, rioc2, nullptr, 2, addr[kTarget], rm.at(0), rm.key,
                                            FI_UINT64, FI_SUM, &ctx.fctx);
                });
            } else if (w.rfind("fi_fetch_atomicmsg", 0) == 0) {
                fi_ioc ioc{nullptr, kElems};  // ATOMIC_READ: no operands
                fi_ioc rioc2[2] = {{res, 3}, {res + 3, 1}};
                m.msg_iov = &ioc;
                m.iov_count = 1;
                m.op = FI_ATOMIC_READ;
                ep.post(st.what, [&] { return fi_fetch_atomicmsg(ep.ep, &m, rioc2, nullptr, 2, FI_COMPLETION); });
            } else if (w.rfind("fi_compare_atomicv", 0) == 0) {
                std::fill(std::begin(op), std::end(op), 7);
                const uint64_t c[kElems] = {10, 0, 30, 0};
                std::memcpy(cmp, c, sizeof c);
                fi_ioc ioc[2] = {{op, 2}, {op + 2, 2}};
                fi_ioc cioc[2] = {{cmp, 2}, {cmp + 2, 2}};
                fi_ioc rioc2[2] = {{res, 2}, {res + 2, 2}};
                ep.post(st.what, [&] {
                    return fi_compare_atomicv(ep.ep, ioc, nullptr, 2, cioc, nullptr, 2, rioc2, nullptr, 2,
                                              addr[kTarget], rm.at(0), rm.key, FI_UINT64, FI_CSWAP, &ctx.fctx);
                });
            } else {
                std::fill(std::begin(op), std::end(op), 0xFF);
                const uint64_t c[kElems] = {0xF, 0xF0, 0, ~0ull};
                std::memcpy(cmp, c, sizeof c);
                fi_ioc ioc[2] = {{op, 3}, {op + 3, 1}};
                fi_ioc cioc[2] = {{cmp, 1}, {cmp + 1, 3}};
                fi_ioc rioc2[2] = {{res, 2}, {res + 2, 2}};
                m.msg_iov = ioc;
                m.iov_count = 2;
                m.op = FI_MSWAP;
                ep.post(st.what,
                        [&] { return fi_compare_atomicmsg(ep.ep, &m, cioc, nullptr, 2, rioc2, nullptr, 2, FI_COMPLETION); });
            }
            if (completes) {
                Comp c = ep.expect_ok(&ctx, st.what);
                expect_flags(c, FI_ATOMIC | (st.fetches ? FI_READ : FI_WRITE), st.what);
            }
            if (st.fetches)
                FT_CHECK(std::memcmp(res, kVInit, sizeof kVInit) == 0, "%s: fetched %s, expected %s", st.what,
                         values_str(res).c_str(), values_str(kVInit).c_str());
            FT_EQ(res[kElems], 0xDEADBEEFull, (w + ": word after the results").c_str());
            signal_peer(kTarget, kDone);
        }
        ep.expect_quiet(0.2, "initiator CQ after the variants (fi_inject_atomic completes silently)");
    }
    barrier([&] { ep.progress(); });
}

// ------------------------------------------------------------ busy_target
// A target whose transmit queue is full of its own pending work still
// serves one-sided requests. Rank 0 posts rendezvous-sized sends to rank 2
// until -FI_EAGAIN (rank 2 does not receive yet); rank 1 then issues fetch
// and compare atomics and an RMA read to rank 0. With resource management
// enabled (FI_RM_ENABLED, fi_domain(3): a target endpoint short of resources
// means "retried") they must all succeed once rank 2 drains the sends,
// never complete with an error.
void case_busy_target() {
    constexpr int kFetches = 16;
    constexpr size_t kBig = 1u << 20;
    constexpr uint32_t kIssued = 0xB5B6u, kDrained = 0xB5B7u;
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    FT_CHECK(ep.info->domain_attr->resource_mgmt == FI_RM_ENABLED || ep.info->domain_attr->resource_mgmt == FI_RM_UNSPEC,
             "resource_mgmt %d", (int)ep.info->domain_attr->resource_mgmt);
    if (rank() == 0) {
        alignas(64) uint64_t mem[4] = {0, 0, 0x0123456789ABCDEFull, 0};
        Region r(ep, mem, sizeof mem, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xD1);
        {  // one message first, so that the connection to rank 2 exists
            uint8_t hello = 1;
            OpCtx c;
            ep.post("hello fi_tsend", [&] { return fi_tsend(ep.ep, &hello, 1, nullptr, addr[2], 0xB17, &c.fctx); });
            ep.expect_ok(&c, "hello send");
            wait_signal_progress(ep, 2, kIssued);
        }
        std::vector<uint8_t> big(kBig);
        std::vector<std::unique_ptr<OpCtx>> sends;
        // post until the transmit queue stays full (-FI_EAGAIN for 0.5 s of progress)
        double full_since = -1;
        while (full_since < 0 || now_s() - full_since < 0.5) {
            auto c = std::make_unique<OpCtx>();
            ssize_t rc = fi_tsend(ep.ep, big.data(), kBig, nullptr, addr[2], 0xB16, &c->fctx);
            if (rc == -FI_EAGAIN) {
                if (full_since < 0) full_since = now_s();
                ep.progress();
                continue;
            }
            FT_CHECK(rc == 0, "fi_tsend to the slow receiver: %zd (%s)", rc, errstr(rc));
            full_since = -1;
            sends.push_back(std::move(c));
            FT_CHECK(sends.size() < 100000, "fi_tsend never returned -FI_EAGAIN");
        }
        FT_CHECK(ep.stash_size() == 0, "a send to the rank that does not receive completed early");
        FT_CHECK(!sends.empty(), "the target's transmit queue accepted no send at all");
        info("target: %zu sends of 1 MiB pending to a rank that does not receive yet", sends.size());
        send_remote(1, r.remote());
        oob_put<uint64_t>(2, sends.size());
        wait_signal_progress(ep, 1, kDone);
        for (auto& c : sends) ep.expect_ok(c.get(), "send to the slow receiver");
        FT_EQ(mem[0], (uint64_t)kFetches, "counter after the fetch atomics");
        FT_EQ(mem[1], 0xC0FFEEull, "word swapped in by fi_compare_atomic");
    } else if (rank() == 1) {
        RemoteMr rm = recv_remote(ep, 0);
        const uint64_t one = 1, zero = 0, coffee = 0xC0FFEE;
        std::vector<uint64_t> res(kFetches + 1, ~0ull);
        std::vector<OpCtx> ctx(kFetches + 2);
        uint64_t rd = 0;
        for (int i = 0; i < kFetches; ++i)
            ep.post("fi_fetch_atomic", [&] {
                return fi_fetch_atomic(ep.ep, &one, 1, nullptr, &res[(size_t)i], nullptr, addr[0], rm.at(0), rm.key,
                                       FI_UINT64, FI_SUM, &ctx[(size_t)i].fctx);
            });
        ep.post("fi_compare_atomic", [&] {
            return fi_compare_atomic(ep.ep, &coffee, 1, nullptr, &zero, nullptr, &res[kFetches], nullptr, addr[0],
                                     rm.at(8), rm.key, FI_UINT64, FI_CSWAP, &ctx[kFetches].fctx);
        });
        ep.post("fi_read", [&] {
            return fi_read(ep.ep, &rd, sizeof rd, nullptr, addr[0], rm.at(16), rm.key, &ctx[kFetches + 1].fctx);
        });
        sleep_ms(300);  // the requests reach the busy target
        signal_peer(2, kIssued);
        std::set<uint64_t> seen;
        for (int i = 0; i < kFetches; ++i) {
            Comp c = ep.wait_ctx(&ctx[(size_t)i], "fi_fetch_atomic to a busy target");
            FT_CHECK(!c.is_err, "fi_fetch_atomic to a target whose transmit queue is busy completed with an error "
                                "(FI_RM_ENABLED: the target must retry): %s",
                     describe(c).c_str());
            FT_CHECK(res[(size_t)i] < kFetches && seen.insert(res[(size_t)i]).second, "fetched %" PRIu64,
                     res[(size_t)i]);
        }
        Comp c = ep.wait_ctx(&ctx[kFetches], "fi_compare_atomic to a busy target");
        FT_CHECK(!c.is_err, "fi_compare_atomic to a busy target: %s", describe(c).c_str());
        FT_EQ(res[kFetches], 0, "value fetched by fi_compare_atomic");
        c = ep.wait_ctx(&ctx[kFetches + 1], "fi_read from a busy target");
        FT_CHECK(!c.is_err, "fi_read from a busy target: %s", describe(c).c_str());
        FT_EQ(rd, 0x0123456789ABCDEFull, "value read from the busy target");
        info("%d fetch atomics, a compare atomic and a read to a busy target all succeeded", kFetches);
        wait_signal_progress(ep, 2, kDrained);
        signal_peer(0, kDone);
    } else {
        uint8_t hello = 0;
        OpCtx hc;
        ep.post("hello fi_trecv", [&] {
            return fi_trecv(ep.ep, &hello, 1, nullptr, FI_ADDR_UNSPEC, 0xB17, 0, &hc.fctx);
        });
        ep.expect_ok(&hc, "hello receive");
        signal_peer(0, kIssued);
        const uint64_t n = oob_get<uint64_t>(0);  // no progress: the target's sends stay pending
        wait_signal(1, kIssued);
        std::vector<uint8_t> big(kBig);
        for (uint64_t i = 0; i < n; ++i) {
            OpCtx c;
            ep.post("fi_trecv", [&] {
                return fi_trecv(ep.ep, big.data(), kBig, nullptr, FI_ADDR_UNSPEC, 0xB16, 0, &c.fctx);
            });
            Comp x = ep.wait_ctx(&c, "receive from the busy target");
            FT_CHECK(!x.is_err, "receive from the busy target: %s", describe(x).c_str());
        }
        signal_peer(1, kDrained);
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"ops", 2, case_ops},
                        {"variants", 2, case_variants},
                        {"concurrent", 3, case_concurrent},
                        {"refuse", 2, case_refuse},
                        {"busy_target", 3, case_busy_target},
                    });
}
