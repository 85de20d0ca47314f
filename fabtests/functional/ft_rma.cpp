// RMA: fi_write/writev/writemsg and fi_read/readv/readmsg over the size
// ladder in both memory-registration modes, fi_writedata with remote CQ
// data, fi_inject_write, and refusals (unknown key, out-of-range address,
// missing access rights, closed region) that must fail with an error
// completion, leave the target's memory untouched, and leave the endpoints
// working.
//
// Rank 0 is the target: it registers memory and hands {address, key} to
// rank 1, the initiator, over the OOB channel. The target keeps progressing
// its endpoint while it waits (manual progress). Default completions of
// writes are transmit-complete, which says nothing about the target's
// memory, so the target waits (bounded) for written data to land, except
// after FI_DELIVERY_COMPLETE and remote-CQ-data completions, which
// guarantee it.
#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "ft_rma.h"
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kTarget = 0, kInit = 1;
constexpr uint32_t kReady = 0x3A0001u, kRefused = 0x3A0002u, kClosed = 0x3A0003u, kLanded = 0x3A0004u;
constexpr double kBound = 10.0;  // seconds for any refusal to show up
constexpr uint32_t kGuardSeed = 0x6A3D;

const std::vector<size_t>& rma_sizes() {
    static const std::vector<size_t> s = {1, 8, 4096, 65536, 1u << 20, 8u << 20};
    return s;
}

// What the initiator tells the target after each operation.
struct Done {
    uint32_t seed;
    uint32_t delivery_complete;  // the completion guarantees the data is in place
};

// Split [0, len) into 3 iovs over `buf` (some may be empty for tiny lengths).
std::vector<iovec> split3(uint8_t* buf, size_t len) {
    size_t a = len / 3, b = len / 3;
    return {{buf, a}, {buf + a, b}, {buf + a + b, len - a - b}};
}

// Target memory: [guard][data area of `max`][guard], all registered, all
// holding the guard pattern except where the current step writes.
struct TargetBuf {
    static constexpr size_t kGuard = 4096;
    std::vector<uint8_t> mem;
    explicit TargetBuf(size_t max) : mem(kGuard + max + kGuard) {}
    uint8_t* data() { return mem.data() + kGuard; }
    void reset() { fill(mem.data(), mem.size(), kGuardSeed); }
    // Everything outside [kGuard, kGuard+len) must still be guard pattern.
    void check_guards(size_t len, const char* what) {
        std::string w = std::string(what) + ": target bytes before the data";
        check(mem.data(), kGuard, kGuardSeed, w.c_str());
        w = std::string(what) + ": target bytes after the data";
        check(mem.data() + kGuard + len, mem.size() - kGuard - len, kGuardSeed, w.c_str(), kGuard + len);
    }
};

// ------------------------------------------------------------------ write
enum class WriteOp { kWrite, kWritev, kWritemsg };
const char* write_op_name(WriteOp op) {
    return op == WriteOp::kWrite ? "fi_write" : op == WriteOp::kWritev ? "fi_writev (3 iovs)"
                                                                        : "fi_writemsg (2 iovs, FI_DELIVERY_COMPLETE)";
}

void run_write(int mr_mode) {
    Endpoint ep(one_sided_config(mr_mode));
    auto addr = connect_all(ep);
    const size_t max = rma_sizes().back();
    const WriteOp ops[] = {WriteOp::kWrite, WriteOp::kWritev, WriteOp::kWritemsg};
    if (rank() == kTarget) {
        info("mr_mode granted: %s", mr_mode_str(ep.info->domain_attr->mr_mode).c_str());
        TargetBuf tb(max);
        tb.reset();
        Region r(ep, tb.mem.data(), tb.mem.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 0x1001);
        send_remote(kInit, r.remote());
        for (size_t size : rma_sizes())
            for (WriteOp op : ops) {
                char what[160];
                std::snprintf(what, sizeof what, "%s of %s", write_op_name(op), human_size(size).c_str());
                tb.reset();
                signal_peer(kInit, kReady);
                Done d = oob_get_progress<Done>(ep, kInit);
                if (d.delivery_complete)
                    check(tb.data(), size, d.seed, what);  // must already be there
                else
                    wait_landed(ep, tb.data(), size, d.seed, what);
                tb.check_guards(size, what);
                log("%s landed and verified", what);
            }
        ep.expect_quiet(0.1, "target CQ: writes without remote CQ data generate no target completion");
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        FT_CHECK(ep.info->tx_attr->iov_limit >= 3, "tx iov_limit %zu < 3", ep.info->tx_attr->iov_limit);
        std::vector<uint8_t> src(max);
        uint32_t seed = 500;
        for (size_t size : rma_sizes())
            for (WriteOp op : ops) {
                ++seed;
                char what[160];
                std::snprintf(what, sizeof what, "%s of %s", write_op_name(op), human_size(size).c_str());
                fill(src.data(), size, seed);
                wait_signal_progress(ep, kTarget, kReady);
                const uint64_t raddr = rm.at(TargetBuf::kGuard);
                OpCtx ctx;
                if (op == WriteOp::kWrite) {
                    ep.post(what, [&] {
                        return fi_write(ep.ep, src.data(), size, nullptr, addr[kTarget], raddr, rm.key, &ctx.fctx);
                    });
                } else if (op == WriteOp::kWritev) {
                    auto iov = split3(src.data(), size);
                    ep.post(what, [&] {
                        return fi_writev(ep.ep, iov.data(), nullptr, iov.size(), addr[kTarget], raddr, rm.key,
                                         &ctx.fctx);
                    });
                } else {
                    iovec iov[2] = {{src.data(), size / 2}, {src.data() + size / 2, size - size / 2}};
                    fi_rma_iov riov{raddr, size, rm.key};
                    fi_msg_rma m{};
                    m.msg_iov = iov;
                    m.iov_count = 2;
                    m.addr = addr[kTarget];
                    m.rma_iov = &riov;
                    m.rma_iov_count = 1;
                    m.context = &ctx.fctx;
                    ep.post(what, [&] { return fi_writemsg(ep.ep, &m, FI_COMPLETION | FI_DELIVERY_COMPLETE); });
                }
                Comp c = ep.expect_ok(&ctx, what);
                expect_flags(c, FI_RMA | FI_WRITE, what);
                FT_CHECK(!(c.flags & (FI_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV)),
                         "%s: completion flags %s carry a foreign direction", what, flags_str(c.flags).c_str());
                oob_put(kTarget, Done{seed, op == WriteOp::kWritemsg ? 1u : 0u});
            }
    }
    barrier([&] { ep.progress(); });
}

// ------------------------------------------------------------------- read
enum class ReadOp { kRead, kReadv, kReadmsg };
const char* read_op_name(ReadOp op) {
    return op == ReadOp::kRead ? "fi_read" : op == ReadOp::kReadv ? "fi_readv (3 iovs)" : "fi_readmsg (2 iovs)";
}

void run_read(int mr_mode) {
    Endpoint ep(one_sided_config(mr_mode));
    auto addr = connect_all(ep);
    const size_t max = rma_sizes().back();
    const ReadOp ops[] = {ReadOp::kRead, ReadOp::kReadv, ReadOp::kReadmsg};
    if (rank() == kTarget) {
        info("mr_mode granted: %s", mr_mode_str(ep.info->domain_attr->mr_mode).c_str());
        TargetBuf tb(max);
        tb.reset();
        Region r(ep, tb.mem.data(), tb.mem.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 0x2002);
        send_remote(kInit, r.remote());
        uint32_t seed = 700;
        for (size_t size : rma_sizes())
            for (ReadOp op : ops) {
                ++seed;
                char what[160];
                std::snprintf(what, sizeof what, "%s of %s", read_op_name(op), human_size(size).c_str());
                tb.reset();
                fill(tb.data(), size, seed);
                oob_put(kInit, seed);
                wait_signal_progress(ep, kInit, kReady);
                check(tb.data(), size, seed, (std::string(what) + ": target data after the read").c_str());
                tb.check_guards(size, what);
            }
        ep.expect_quiet(0.1, "target CQ: reads generate no target completion");
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        constexpr size_t kLocalGuard = 256;
        constexpr uint32_t kLocalSeed = 0x10CA1;
        std::vector<uint8_t> dst(kLocalGuard + max + kLocalGuard);
        for (size_t size : rma_sizes())
            for (ReadOp op : ops) {
                char what[160];
                std::snprintf(what, sizeof what, "%s of %s", read_op_name(op), human_size(size).c_str());
                fill(dst.data(), dst.size(), kLocalSeed);
                uint8_t* buf = dst.data() + kLocalGuard;
                const uint32_t seed = oob_get_progress<uint32_t>(ep, kTarget);
                const uint64_t raddr = rm.at(TargetBuf::kGuard);
                OpCtx ctx;
                if (op == ReadOp::kRead) {
                    ep.post(what, [&] {
                        return fi_read(ep.ep, buf, size, nullptr, addr[kTarget], raddr, rm.key, &ctx.fctx);
                    });
                } else if (op == ReadOp::kReadv) {
                    auto iov = split3(buf, size);
                    ep.post(what, [&] {
                        return fi_readv(ep.ep, iov.data(), nullptr, iov.size(), addr[kTarget], raddr, rm.key,
                                        &ctx.fctx);
                    });
                } else {
                    iovec iov[2] = {{buf, size / 2}, {buf + size / 2, size - size / 2}};
                    fi_rma_iov riov{raddr, size, rm.key};
                    fi_msg_rma m{};
                    m.msg_iov = iov;
                    m.iov_count = 2;
                    m.addr = addr[kTarget];
                    m.rma_iov = &riov;
                    m.rma_iov_count = 1;
                    m.context = &ctx.fctx;
                    ep.post(what, [&] { return fi_readmsg(ep.ep, &m, FI_COMPLETION); });
                }
                Comp c = ep.expect_ok(&ctx, what);
                expect_flags(c, FI_RMA | FI_READ, what);
                FT_CHECK(!(c.flags & (FI_WRITE | FI_REMOTE_READ | FI_SEND | FI_RECV)),
                         "%s: completion flags %s carry a foreign direction", what, flags_str(c.flags).c_str());
                // a read completion means the data is in the local buffer
                check(buf, size, seed, what);
                check(dst.data(), kLocalGuard, kLocalSeed, (std::string(what) + ": local bytes before").c_str());
                check(buf + size, kLocalGuard, kLocalSeed, (std::string(what) + ": local bytes after").c_str(),
                      kLocalGuard + size);
                signal_peer(kTarget, kReady);
            }
    }
    barrier([&] { ep.progress(); });
}

// -------------------------------------------------------------- writedata
// fi_writedata, fi_writemsg with FI_REMOTE_CQ_DATA and fi_inject_writedata
// deliver one target completion FI_REMOTE_WRITE|FI_RMA|FI_REMOTE_CQ_DATA
// with a NULL op_context, carrying the data; when it is seen, the written
// bytes are in place.
void case_writedata() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    struct Step {
        const char* op;
        size_t len;
    };
    const std::vector<Step> steps = {{"fi_writedata", 8},          {"fi_writedata", 65536},
                                     {"fi_writedata", 1u << 20},   {"fi_writemsg+FI_REMOTE_CQ_DATA", 4096},
                                     {"fi_writemsg+FI_REMOTE_CQ_DATA", 1u << 20},
                                     {"fi_inject_writedata", 8},   {"fi_inject_writedata", 64}};
    const size_t max = 1u << 20;
    if (rank() == kTarget) {
        TargetBuf tb(max);
        Region r(ep, tb.mem.data(), tb.mem.size(), FI_REMOTE_WRITE, 0x3003);
        send_remote(kInit, r.remote());
        uint32_t seed = 900;
        for (const Step& st : steps) {
            ++seed;
            const uint64_t data = 0xDA7A000000000000ull | ((uint64_t)seed << 20) | st.len;
            char what[160];
            std::snprintf(what, sizeof what, "%s of %s at the target", st.op, human_size(st.len).c_str());
            tb.reset();
            signal_peer(kInit, kReady);
            Comp c = ep.wait_any(what);
            FT_CHECK(!c.is_err, "%s: expected a remote-write completion, saw %s", what, describe(c).c_str());
            expect_flags(c, FI_REMOTE_WRITE | FI_RMA | FI_REMOTE_CQ_DATA, what);
            FT_CHECK(!(c.flags & (FI_RECV | FI_MSG | FI_TAGGED | FI_WRITE | FI_READ)),
                     "%s: completion flags %s are not those of a remote write", what, flags_str(c.flags).c_str());
            FT_EQ(c.data, data, (std::string(what) + ": remote CQ data").c_str());
            FT_CHECK(c.ctx == nullptr, "%s: op_context must be NULL for a remote write's completion, saw %p", what,
                     c.ctx);
            check(tb.data(), st.len, seed, what);  // target completion: data is in place
            tb.check_guards(st.len, what);
            wait_signal_progress(ep, kInit, kLanded);
        }
        ep.expect_quiet(0.1, "target CQ: exactly one completion per remote write with CQ data");
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(max);
        uint32_t seed = 900;
        for (const Step& st : steps) {
            ++seed;
            const uint64_t data = 0xDA7A000000000000ull | ((uint64_t)seed << 20) | st.len;
            fill(src.data(), st.len, seed);
            wait_signal_progress(ep, kTarget, kReady);
            OpCtx ctx;
            const uint64_t raddr = rm.at(TargetBuf::kGuard);
            if (std::strcmp(st.op, "fi_inject_writedata") == 0) {
                ep.post(st.op, [&] {
                    return fi_inject_writedata(ep.ep, src.data(), st.len, data, addr[kTarget], raddr, rm.key);
                });
                std::memset(src.data(), 0xEE, st.len);  // the buffer is ours again
                signal_peer(kTarget, kLanded);
                continue;
            }
            if (std::strcmp(st.op, "fi_writedata") == 0) {
                ep.post(st.op, [&] {
                    return fi_writedata(ep.ep, src.data(), st.len, nullptr, data, addr[kTarget], raddr, rm.key,
                                        &ctx.fctx);
                });
            } else {
                iovec iov{src.data(), st.len};
                fi_rma_iov riov{raddr, st.len, rm.key};
                fi_msg_rma m{};
                m.msg_iov = &iov;
                m.iov_count = 1;
                m.addr = addr[kTarget];
                m.rma_iov = &riov;
                m.rma_iov_count = 1;
                m.context = &ctx.fctx;
                m.data = data;
                ep.post(st.op, [&] { return fi_writemsg(ep.ep, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA); });
            }
            Comp c = ep.expect_ok(&ctx, st.op);
            expect_flags(c, FI_RMA | FI_WRITE, st.op);
            signal_peer(kTarget, kLanded);
        }
        ep.expect_quiet(0.2, "initiator CQ: one completion per fi_writedata/fi_writemsg, none for injects");
    }
    barrier([&] { ep.progress(); });
}

// ------------------------------------------------------------ inject_write
// fi_inject_write up to inject_size lands; the source buffer is reusable at
// once (clobbered right after the call); no completion at the initiator.
// Then a burst of kInjectBurst writes of inject_size from one buffer,
// refilled before and clobbered after each call, to consecutive slots.
// Where 5 % of the frames are dropped one by one (the nogso loss and the
// gsodrop suites), all 256 arrive at the first try with probability
// 0.95^256 (about 2e-6): some are resent, and a resend must carry what the
// buffer held at the call.
constexpr size_t kInjectBurst = 256;
uint32_t burst_seed(size_t k) { return 7000u + (uint32_t)k; }
void case_inject_write() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    const size_t inj = ep.info->tx_attr->inject_size;
    FT_CHECK(inj >= 8, "inject_size %zu < 8", inj);
    const std::vector<size_t> sizes = {1, 8, 64, inj};
    if (rank() == kTarget) {
        TargetBuf tb(inj);
        Region r(ep, tb.mem.data(), tb.mem.size(), FI_REMOTE_WRITE, 0x4004);
        send_remote(kInit, r.remote());
        for (size_t size : sizes) {
            const uint32_t seed = 1200u + (uint32_t)size;
            char what[96];
            std::snprintf(what, sizeof what, "fi_inject_write of %s", human_size(size).c_str());
            tb.reset();
            signal_peer(kInit, kReady);
            wait_signal_progress(ep, kInit, kLanded);
            wait_landed(ep, tb.data(), size, seed, what);
            tb.check_guards(size, what);
            log("%s landed", what);
        }
        // The burst: each write to its own slot, verified byte for byte.
        TargetBuf burst(kInjectBurst * inj);
        Region br(ep, burst.mem.data(), burst.mem.size(), FI_REMOTE_WRITE, 0x4005);
        burst.reset();
        send_remote(kInit, br.remote());
        wait_signal_progress(ep, kInit, kLanded);
        for (size_t k = 0; k < kInjectBurst; ++k) {
            char what[96];
            std::snprintf(what, sizeof what, "burst fi_inject_write %zu of %zu", k + 1, kInjectBurst);
            wait_landed(ep, burst.data() + k * inj, inj, burst_seed(k), what);
        }
        burst.check_guards(kInjectBurst * inj, "burst of fi_inject_write");
        log("burst of %zu fi_inject_write of %s landed", kInjectBurst, human_size(inj).c_str());
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(inj);
        for (size_t size : sizes) {
            const uint32_t seed = 1200u + (uint32_t)size;
            fill(src.data(), size, seed);
            wait_signal_progress(ep, kTarget, kReady);
            ep.post("fi_inject_write", [&] {
                return fi_inject_write(ep.ep, src.data(), size, addr[kTarget], rm.at(TargetBuf::kGuard), rm.key);
            });
            std::memset(src.data(), 0xEE, size);  // the buffer is ours again
            signal_peer(kTarget, kLanded);
        }
        // The burst (see above): one buffer, refilled for each write.
        RemoteMr brm = recv_remote(ep, kTarget);
        for (size_t k = 0; k < kInjectBurst; ++k) {
            fill(src.data(), inj, burst_seed(k));
            ep.post("burst fi_inject_write", [&] {
                return fi_inject_write(ep.ep, src.data(), inj, addr[kTarget], brm.at(TargetBuf::kGuard + k * inj),
                                       brm.key);
            });
            std::memset(src.data(), 0xEE, inj);
        }
        signal_peer(kTarget, kLanded);
        ep.expect_quiet(0.3, "initiator CQ after fi_inject_write (injects complete silently)");
    }
    barrier([&] { ep.progress(); });
}

// ------------------------------------------------------------ inject_flag
// fi_writemsg and fi_atomicmsg with the FI_INJECT operation flag: the source
// is the caller's again when the call returns, and the operation completes
// once with its context (only fi_inject_write / fi_inject_atomic write no
// completion, fi_rma(3), fi_atomic(3)). The target checks every byte.
void case_inject_flag() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    const size_t inj = ep.info->tx_attr->inject_size;
    FT_CHECK(inj >= 8, "inject_size %zu < 8", inj);
    enum Kind { kWritemsg, kAtomicmsg, kInjectAtomic };
    struct Step {
        Kind kind;
        size_t len;  // bytes (writes) or the operand (atomics)
        const char* what;
    };
    const std::vector<Step> steps = {{kWritemsg, 8, "fi_writemsg(FI_INJECT) of 8 B"},
                                     {kWritemsg, inj, "fi_writemsg(FI_INJECT) of inject_size"},
                                     {kAtomicmsg, 5, "fi_atomicmsg(FI_INJECT, SUM, UINT64)"},
                                     {kInjectAtomic, 7, "fi_inject_atomic(SUM, UINT64)"}};
    const uint64_t base = 1000;
    if (rank() == kTarget) {
        TargetBuf tb(inj);
        Region r(ep, tb.mem.data(), tb.mem.size(), FI_REMOTE_WRITE, 0x4104);
        send_remote(kInit, r.remote());
        uint32_t seed = 1300;
        uint64_t want = base;
        for (const Step& st : steps) {
            ++seed;
            tb.reset();
            if (st.kind != kWritemsg) std::memcpy(tb.data(), &want, sizeof want);
            signal_peer(kInit, kReady);
            wait_signal_progress(ep, kInit, kLanded);
            if (st.kind == kWritemsg) {
                wait_landed(ep, tb.data(), st.len, seed, st.what);
                tb.check_guards(st.len, st.what);
            } else {
                uint64_t expect = want + st.len;
                wait_bytes(ep, tb.data(), &expect, sizeof expect, st.what);
                tb.check_guards(sizeof expect, st.what);
                want = expect;
            }
        }
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(inj);
        uint32_t seed = 1300;
        for (const Step& st : steps) {
            ++seed;
            wait_signal_progress(ep, kTarget, kReady);
            OpCtx ctx;
            const uint64_t raddr = rm.at(TargetBuf::kGuard);
            if (st.kind == kWritemsg) {
                fill(src.data(), st.len, seed);
                iovec iov{src.data(), st.len};
                fi_rma_iov riov{raddr, st.len, rm.key};
                fi_msg_rma m{};
                m.msg_iov = &iov;
                m.iov_count = 1;
                m.addr = addr[kTarget];
                m.rma_iov = &riov;
                m.rma_iov_count = 1;
                m.context = &ctx.fctx;
                ep.post(st.what, [&] { return fi_writemsg(ep.ep, &m, FI_INJECT); });
            } else {
                uint64_t operand = st.len;
                std::memcpy(src.data(), &operand, sizeof operand);
                fi_ioc ioc{src.data(), 1};
                fi_rma_ioc rioc{raddr, 1, rm.key};
                fi_msg_atomic m{};
                m.msg_iov = &ioc;
                m.iov_count = 1;
                m.addr = addr[kTarget];
                m.rma_iov = &rioc;
                m.rma_iov_count = 1;
                m.datatype = FI_UINT64;
                m.op = FI_SUM;
                m.context = &ctx.fctx;
                ep.post(st.what, [&] {
                    return st.kind == kAtomicmsg
                               ? fi_atomicmsg(ep.ep, &m, FI_INJECT)
                               : fi_inject_atomic(ep.ep, src.data(), 1, addr[kTarget], raddr, rm.key, FI_UINT64,
                                                  FI_SUM);
                });
            }
            std::memset(src.data(), 0xEE, src.size());  // the buffer is ours again
            if (st.kind != kInjectAtomic) {
                Comp c = ep.expect_ok(&ctx, st.what);
                expect_flags(c, (st.kind == kWritemsg ? FI_RMA : FI_ATOMIC) | FI_WRITE, st.what);
            }
            std::string quiet = std::string(st.what) + ": no further completion";
            ep.expect_quiet(0.05, quiet.c_str());
            signal_peer(kTarget, kLanded);
        }
        ep.expect_quiet(0.2, "initiator CQ after fi_inject_atomic");
    }
    barrier([&] { ep.progress(); });
}

// ------------------------------------------------------------------ order
// The ordering fi_getinfo advertises for one-sided operations (RAW, WAW,
// ATOMIC_RAW/WAW/RAR), exercised without waiting between operations: two
// writes then a read of the same bytes return the second write's data; an
// atomic update followed by an atomic read sees the update; fetching
// atomics run in the order posted.
void case_order() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    const std::vector<size_t> sizes = {64, 70000, 1u << 20};
    const size_t max = 1u << 20;
    constexpr int kPairs = 64;
    if (rank() == kTarget) {
        std::vector<uint8_t> mem(max + 64);
        Region r(ep, mem.data(), mem.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 0x4204);
        send_remote(kInit, r.remote());
        uint32_t seed = 1400;
        for (size_t len : sizes) {
            seed += 2;
            fill(mem.data(), mem.size(), kGuardSeed);
            signal_peer(kInit, kReady);
            wait_signal_progress(ep, kInit, kLanded);
            wait_landed(ep, mem.data(), len, seed, "target bytes after write, write, read");
        }
        uint64_t zero = 0;
        std::memcpy(mem.data() + max, &zero, sizeof zero);
        signal_peer(kInit, kReady);
        wait_signal_progress(ep, kInit, kLanded);
        uint64_t want = 2 * kPairs;
        wait_bytes(ep, mem.data() + max, &want, sizeof want, "the counter after the atomics");
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> a(max), b(max), got(max);
        uint32_t seed = 1400;
        for (size_t len : sizes) {
            seed += 2;
            fill(a.data(), len, seed - 1);
            fill(b.data(), len, seed);
            std::memset(got.data(), 0, len);
            wait_signal_progress(ep, kTarget, kReady);
            OpCtx cw1, cw2, cr;
            ep.post("fi_write (first)", [&] {
                return fi_write(ep.ep, a.data(), len, nullptr, addr[kTarget], rm.at(0), rm.key, &cw1.fctx);
            });
            ep.post("fi_write (second)", [&] {
                return fi_write(ep.ep, b.data(), len, nullptr, addr[kTarget], rm.at(0), rm.key, &cw2.fctx);
            });
            ep.post("fi_read", [&] {
                return fi_read(ep.ep, got.data(), len, nullptr, addr[kTarget], rm.at(0), rm.key, &cr.fctx);
            });
            ep.expect_ok(&cw1, "first fi_write");
            ep.expect_ok(&cw2, "second fi_write");
            ep.expect_ok(&cr, "fi_read after the writes");
            char what[96];
            std::snprintf(what, sizeof what, "fi_read of %s after two writes (RAW, WAW)", human_size(len).c_str());
            check(got.data(), len, seed, what);
            signal_peer(kTarget, kLanded);
        }
        wait_signal_progress(ep, kTarget, kReady);
        const uint64_t caddr = rm.at(max);
        uint64_t one = 1, dummy = 0;
        std::vector<uint64_t> seen(kPairs, ~0ull), fetched(kPairs, ~0ull);
        std::vector<OpCtx> add(kPairs), rd(kPairs), fa(kPairs);
        for (int i = 0; i < kPairs; ++i) {
            ep.post("fi_atomic(SUM)", [&] {
                return fi_atomic(ep.ep, &one, 1, nullptr, addr[kTarget], caddr, rm.key, FI_UINT64, FI_SUM,
                                 &add[(size_t)i].fctx);
            });
            ep.post("fi_fetch_atomic(ATOMIC_READ)", [&] {
                return fi_fetch_atomic(ep.ep, &dummy, 1, nullptr, &seen[(size_t)i], nullptr, addr[kTarget], caddr,
                                       rm.key, FI_UINT64, FI_ATOMIC_READ, &rd[(size_t)i].fctx);
            });
        }
        for (int i = 0; i < kPairs; ++i) {
            ep.post("fi_fetch_atomic(SUM)", [&] {
                return fi_fetch_atomic(ep.ep, &one, 1, nullptr, &fetched[(size_t)i], nullptr, addr[kTarget], caddr,
                                       rm.key, FI_UINT64, FI_SUM, &fa[(size_t)i].fctx);
            });
        }
        for (int i = 0; i < kPairs; ++i) {
            ep.expect_ok(&add[(size_t)i], "fi_atomic(SUM)");
            ep.expect_ok(&rd[(size_t)i], "fi_fetch_atomic(ATOMIC_READ)");
            ep.expect_ok(&fa[(size_t)i], "fi_fetch_atomic(SUM)");
        }
        for (int i = 0; i < kPairs; ++i) {
            FT_EQ(seen[(size_t)i], i + 1, "atomic read after the i-th atomic add (ATOMIC_RAW)");
            FT_EQ(fetched[(size_t)i], kPairs + i, "old value of the i-th fetching add (ATOMIC_RAR)");
        }
        signal_peer(kTarget, kLanded);
    }
    barrier([&] { ep.progress(); });
}

// --------------------------------------------------------------- refusals
// Target memory for the refusal cases: a registered region of kRegion bytes
// with unregistered guard memory around it (large enough that an access
// wrongly performed would still land inside our buffer).
struct GuardedRegion {
    static constexpr size_t kPre = 65536, kRegion = 65536, kPost = (1u << 20) + 65536;
    std::vector<uint8_t> mem;
    uint32_t seed;
    explicit GuardedRegion(uint32_t s) : mem(kPre + kRegion + kPost), seed(s) { fill(mem.data(), mem.size(), seed); }
    uint8_t* region() { return mem.data() + kPre; }
    void check_unchanged(const char* what) {
        size_t bad = first_mismatch(mem.data(), mem.size(), seed);
        if (bad == SIZE_MAX) return;
        const char* where = bad < kPre ? "guard before the region" : bad < kPre + kRegion ? "the region" : "guard after the region";
        FT_FAIL("%s: target memory changed at byte %zd relative to the region start (%s): expected 0x%02x, saw 0x%02x",
                what, (ssize_t)bad - (ssize_t)kPre, where, pattern_byte(seed, bad), mem[bad]);
    }
};

struct Attempt {
    std::string what;
    bool write;
    size_t len;
    uint64_t raddr;
    uint64_t key;
};

// Initiator: every attempt must be accepted for posting and then fail with
// an error completion within kBound.
void attempt_refused(Endpoint& ep, fi_addr_t dest, const Attempt& a) {
    // Kept alive: a provider that wrongly keeps using the buffer after the
    // error must not scribble on freed memory.
    static std::vector<std::unique_ptr<std::vector<uint8_t>>> keep;
    keep.push_back(std::make_unique<std::vector<uint8_t>>(a.len ? a.len : 1));
    uint8_t* buf = keep.back()->data();
    fill(buf, a.len, 0xBAD);
    static std::vector<std::unique_ptr<OpCtx>> ctxs;
    ctxs.push_back(std::make_unique<OpCtx>());
    OpCtx* ctx = ctxs.back().get();
    ssize_t rc = post_or_refuse(ep, a.what.c_str(), [&] {
        return a.write ? fi_write(ep.ep, buf, a.len, nullptr, dest, a.raddr, a.key, &ctx->fctx)
                       : fi_read(ep.ep, buf, a.len, nullptr, dest, a.raddr, a.key, &ctx->fctx);
    });
    FT_CHECK(rc == 0, "%s: the initiator cannot know the target's keys; expected the post to succeed and the "
                      "operation to complete with an error, but the call returned %zd (%s)",
             a.what.c_str(), rc, errstr(rc));
    Comp c = expect_refused(ep, &ctx->fctx, a.what.c_str(), kBound);
    expect_flags(c, FI_RMA | (a.write ? FI_WRITE : FI_READ), a.what.c_str());
}

// Target: keep progressing until the initiator is through its attempts,
// check memory, then take one valid write into `good` (the endpoints keep
// working) and check again.
void target_after_refusals(Endpoint& ep, GuardedRegion& g, const char* what) {
    wait_signal_progress(ep, kInit, kRefused);
    g.check_unchanged(what);
}

void valid_write_after(Endpoint& ep, const std::vector<fi_addr_t>& addr, GuardedRegion* g) {
    constexpr size_t kLen = 65536;
    constexpr uint32_t kSeed = 0x600D;
    if (rank() == kTarget) {
        std::vector<uint8_t> good(kLen);
        Region r(ep, good.data(), good.size(), FI_REMOTE_WRITE, 0x60D);
        send_remote(kInit, r.remote());
        wait_signal_progress(ep, kInit, kLanded);
        wait_landed(ep, good.data(), kLen, kSeed, "valid fi_write after the refusals");
        if (g) g->check_unchanged("after the valid write that followed the refusals");
        info("a valid 64 KiB fi_write after the refusals landed; the endpoint keeps working");
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(kLen);
        fill(src.data(), kLen, kSeed);
        OpCtx ctx;
        ep.post("valid fi_write after refusals", [&] {
            return fi_write(ep.ep, src.data(), kLen, nullptr, addr[kTarget], rm.at(0), rm.key, &ctx.fctx);
        });
        expect_flags(ep.expect_ok(&ctx, "valid fi_write after refusals"), FI_RMA | FI_WRITE, "valid fi_write");
        signal_peer(kTarget, kLanded);
    }
}

// Unknown keys, addresses inside the region.
void case_refuse_key() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        GuardedRegion g(0x4E1);
        Region r(ep, g.region(), GuardedRegion::kRegion, FI_REMOTE_WRITE | FI_REMOTE_READ, 0x5005);
        send_remote(kInit, r.remote());
        target_after_refusals(ep, g, "refused accesses with unknown keys");
        valid_write_after(ep, addr, &g);
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        const uint64_t bad1 = ~rm.key, bad2 = rm.key ^ 0x5A5A5A5A00000001ull;
        const size_t R = GuardedRegion::kRegion;
        for (const Attempt& a : std::vector<Attempt>{
                 {"fi_write of 8 B with an unknown key", true, 8, rm.at(0), bad1},
                 {"fi_write of 64 KiB (the whole region) with an unknown key", true, R, rm.at(0), bad2},
                 {"fi_read of 8 B with an unknown key", false, 8, rm.at(64), bad1},
                 {"fi_read of 64 KiB with an unknown key", false, R, rm.at(0), bad2}})
            attempt_refused(ep, addr[kTarget], a);
        signal_peer(kTarget, kRefused);
        valid_write_after(ep, addr, nullptr);
    }
    barrier([&] { ep.progress(); });
}

// Addresses partly or wholly outside the region, with the right key.
void run_refuse_range(int mr_mode) {
    Endpoint ep(one_sided_config(mr_mode));
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        info("mr_mode granted: %s", mr_mode_str(ep.info->domain_attr->mr_mode).c_str());
        GuardedRegion g(0x4E2);
        Region r(ep, g.region(), GuardedRegion::kRegion, FI_REMOTE_WRITE | FI_REMOTE_READ, 0x6006);
        send_remote(kInit, r.remote());
        target_after_refusals(ep, g, "refused out-of-range accesses");
        valid_write_after(ep, addr, &g);
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        const size_t R = GuardedRegion::kRegion;
        const uint64_t k = rm.key;
        for (const Attempt& a : std::vector<Attempt>{
                 {"fi_write of 16 B starting 8 B before the region's end", true, 16, rm.at(R - 8), k},
                 {"fi_write of 1 MiB starting at the region's start (region is 64 KiB)", true, 1u << 20, rm.at(0), k},
                 {"fi_write of 1 B just past the region's end", true, 1, rm.at(R), k},
                 {"fi_write of 8 B 4 KiB past the region's end", true, 8, rm.at(R + 4096), k},
                 {"fi_write of 8 B 4 KiB before the region's start", true, 8, rm.base - 4096, k},
                 {"fi_write of 64 B straddling the region's start", true, 64, rm.base - 32, k},
                 {"fi_read of 16 B starting 8 B before the region's end", false, 16, rm.at(R - 8), k},
                 {"fi_read of 8 B 4 KiB past the region's end", false, 8, rm.at(R + 4096), k},
                 {"fi_read of 128 KiB starting at the region's start", false, 2 * R, rm.at(0), k}})
            attempt_refused(ep, addr[kTarget], a);
        signal_peer(kTarget, kRefused);
        valid_write_after(ep, addr, nullptr);
    }
    barrier([&] { ep.progress(); });
}

// Writes to a region registered FI_REMOTE_READ only, reads from one
// registered FI_REMOTE_WRITE only; the permitted directions work.
void case_refuse_access() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    constexpr size_t kLen = 4096;
    if (rank() == kTarget) {
        GuardedRegion ro_mem(0x4E3), wo_mem(0x4E4);
        Region ro(ep, ro_mem.region(), GuardedRegion::kRegion, FI_REMOTE_READ, 0x7007);
        Region wo(ep, wo_mem.region(), GuardedRegion::kRegion, FI_REMOTE_WRITE, 0x7008);
        send_remote(kInit, ro.remote());
        send_remote(kInit, wo.remote());
        wait_signal_progress(ep, kInit, kRefused);
        ro_mem.check_unchanged("read-only region after refused writes and a permitted read");
        // the permitted write into the write-only region
        wait_landed(ep, wo_mem.region(), kLen, 0xA11, "permitted fi_write into the write-only region");
        fill(wo_mem.region(), kLen, wo_mem.seed, GuardedRegion::kPre);  // restore, then compare it all
        wo_mem.check_unchanged("write-only region after the refused read");
        valid_write_after(ep, addr, &ro_mem);
    } else {
        RemoteMr ro = recv_remote(ep, kTarget);
        RemoteMr wo = recv_remote(ep, kTarget);
        for (const Attempt& a : std::vector<Attempt>{
                 {"fi_write of 8 B into a region registered FI_REMOTE_READ only", true, 8, ro.at(0), ro.key},
                 {"fi_write of 64 KiB into a region registered FI_REMOTE_READ only", true, 65536, ro.at(0), ro.key},
                 {"fi_read of 8 B from a region registered FI_REMOTE_WRITE only", false, 8, wo.at(0), wo.key},
                 {"fi_read of 64 KiB from a region registered FI_REMOTE_WRITE only", false, 65536, wo.at(0), wo.key}})
            attempt_refused(ep, addr[kTarget], a);
        // the permitted directions
        std::vector<uint8_t> buf(kLen);
        OpCtx rctx, wctx;
        ep.post("permitted fi_read", [&] {
            return fi_read(ep.ep, buf.data(), kLen, nullptr, addr[kTarget], ro.at(0), ro.key, &rctx.fctx);
        });
        ep.expect_ok(&rctx, "permitted fi_read from the read-only region");
        check(buf.data(), kLen, 0x4E3, "permitted fi_read from the read-only region", GuardedRegion::kPre);
        fill(buf.data(), kLen, 0xA11);
        ep.post("permitted fi_write", [&] {
            return fi_write(ep.ep, buf.data(), kLen, nullptr, addr[kTarget], wo.at(0), wo.key, &wctx.fctx);
        });
        ep.expect_ok(&wctx, "permitted fi_write into the write-only region");
        signal_peer(kTarget, kRefused);
        valid_write_after(ep, addr, nullptr);
    }
    barrier([&] { ep.progress(); });
}

// A key whose region the target closed: first a write through it works,
// then the target closes it and tells the initiator, whose next write and
// read must fail.
void case_refuse_closed() {
    Endpoint ep(one_sided_config(kMrVirt));
    auto addr = connect_all(ep);
    constexpr size_t kLen = 4096;
    if (rank() == kTarget) {
        GuardedRegion g(0x4E5);
        auto r = std::make_unique<Region>(ep, g.region(), GuardedRegion::kRegion, FI_REMOTE_WRITE | FI_REMOTE_READ,
                                          0x8008);
        send_remote(kInit, r->remote());
        wait_signal_progress(ep, kInit, kLanded);
        wait_landed(ep, g.region(), kLen, 0xC105, "fi_write before the region was closed");
        fill(g.region(), kLen, g.seed, GuardedRegion::kPre);  // back to the guard pattern
        g.check_unchanged("before closing the region");
        r->close();
        info("target closed the region");
        signal_peer(kInit, kClosed);
        target_after_refusals(ep, g, "refused accesses through a closed region's key");
        valid_write_after(ep, addr, &g);
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(kLen);
        fill(src.data(), kLen, 0xC105);
        OpCtx ctx;
        ep.post("fi_write before close", [&] {
            return fi_write(ep.ep, src.data(), kLen, nullptr, addr[kTarget], rm.at(0), rm.key, &ctx.fctx);
        });
        ep.expect_ok(&ctx, "fi_write before the target closed the region");
        signal_peer(kTarget, kLanded);
        wait_signal_progress(ep, kTarget, kClosed);
        for (const Attempt& a : std::vector<Attempt>{
                 {"fi_write of 8 B through a closed region's key", true, 8, rm.at(0), rm.key},
                 {"fi_write of 64 KiB through a closed region's key", true, 65536, rm.at(0), rm.key},
                 {"fi_read of 4 KiB through a closed region's key", false, kLen, rm.at(0), rm.key}})
            attempt_refused(ep, addr[kTarget], a);
        signal_peer(kTarget, kRefused);
        valid_write_after(ep, addr, nullptr);
    }
    barrier([&] { ep.progress(); });
}

// ------------------------------------------------------------------- regv
// A region registered with fi_mr_regv from three buffers with unregistered
// 4 KiB gaps between them is "a single memory region" (fi_mr(3)).
//  - mr_mode 0: its offsets run through the three buffers back to back, so
//    an access may span a buffer boundary; the gaps are never touched.
//  - FI_MR_VIRT_ADDR: each buffer is reached at its own address; an access
//    running from a buffer into the gap after it is refused.
struct RegvMem {
    static constexpr size_t kBuf = 4096, kGap = 4096, kN = 3;
    std::vector<uint8_t> mem = std::vector<uint8_t>(kN * kBuf + (kN - 1) * kGap + kGap);
    uint8_t* buf(size_t i) { return mem.data() + i * (kBuf + kGap); }
};

// An access at region offset `off` of `len` bytes, in the layout of RegvMem:
// for each buffer, which of its bytes it covers.
struct Piece {
    size_t buf, at, len, stream_off;
};
std::vector<Piece> pieces(size_t off, size_t len) {
    std::vector<Piece> out;
    size_t done = 0;
    while (done < len) {
        size_t o = off + done, b = o / RegvMem::kBuf, at = o % RegvMem::kBuf;
        size_t n = std::min(RegvMem::kBuf - at, len - done);
        out.push_back({b, at, n, done});
        done += n;
    }
    return out;
}

void run_regv(int mr_mode) {
    Endpoint ep(one_sided_config(mr_mode));
    auto addr = connect_all(ep);
    const bool virt = ep.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
    constexpr uint32_t kMemSeed = 0x2E6;
    FT_CHECK(ep.info->domain_attr->mr_iov_limit >= RegvMem::kN, "domain mr_iov_limit %zu < %zu",
             ep.info->domain_attr->mr_iov_limit, RegvMem::kN);
    struct Access {
        const char* what;
        bool write;
        size_t off, len;  // offset mode: region offsets; virt mode: offsets in buffer `off / kBuf`
    };
    const std::vector<Access> accesses =
        virt ? std::vector<Access>{{"fi_write into the second buffer at its own address", true, 4096 + 100, 1000},
                                   {"fi_write filling the third buffer at its own address", true, 8192, 4096},
                                   {"fi_read from the first buffer at its own address", false, 16, 4000},
                                   {"fi_read from the third buffer at its own address", false, 8192 + 4000, 96}}
             : std::vector<Access>{{"fi_write spanning the first and second buffers", true, 4064, 64},
                                   {"fi_write spanning all three buffers", true, 4000, 4096 + 200},
                                   {"fi_write filling the third buffer", true, 8192, 4096},
                                   {"fi_read spanning the second and third buffers", false, 8000, 400},
                                   {"fi_read of the whole region", false, 0, 3 * 4096}};
    if (rank() == kTarget) {
        RegvMem m;
        fill(m.mem.data(), m.mem.size(), kMemSeed);
        iovec iov[RegvMem::kN];
        for (size_t i = 0; i < RegvMem::kN; ++i) iov[i] = {m.buf(i), RegvMem::kBuf};
        fid_mr* mr = nullptr;
        int rc = fi_mr_regv(ep.domain, iov, RegvMem::kN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0x9E6, 0, &mr, nullptr);
        FT_CHECK(rc == 0, "fi_mr_regv of 3 buffers: %d (%s)", rc, errstr(rc));
        // virt: the initiator gets each buffer's address; offset: base 0
        oob_put(kInit, fi_mr_key(mr));
        for (size_t i = 0; i < RegvMem::kN; ++i) oob_put<uint64_t>(kInit, virt ? (uint64_t)(uintptr_t)m.buf(i) : 0);
        std::vector<uint8_t> expect = m.mem;
        uint32_t seed = 3000;
        for (const Access& a : accesses) {
            ++seed;
            wait_signal_progress(ep, kInit, kLanded);
            if (a.write) {
                // compute where the bytes belong and wait for them
                std::vector<uint8_t> src(a.len);
                fill(src.data(), a.len, seed);
                if (virt) {
                    std::memcpy(expect.data() + (a.off / RegvMem::kBuf) * (RegvMem::kBuf + RegvMem::kGap) +
                                    a.off % RegvMem::kBuf,
                                src.data(), a.len);
                } else {
                    for (const Piece& p : pieces(a.off, a.len))
                        std::memcpy(expect.data() + p.buf * (RegvMem::kBuf + RegvMem::kGap) + p.at,
                                    src.data() + p.stream_off, p.len);
                }
                wait_bytes(ep, m.mem.data(), expect.data(), m.mem.size(), a.what);
            } else {
                FT_CHECK(m.mem == expect, "%s: a read changed the target memory", a.what);
            }
            log("%s: ok", a.what);
            signal_peer(kInit, kReady);
        }
        if (virt) {  // an access from the first buffer into the gap after it
            wait_signal_progress(ep, kInit, kRefused);
            FT_CHECK(m.mem == expect, "a refused access running into the gap changed the target memory");
        }
        FT_CALL(fi_close(&mr->fid));
    } else {
        const uint64_t key = oob_get_progress<uint64_t>(ep, kTarget);
        uint64_t base[RegvMem::kN];
        for (auto& b : base) b = oob_get_progress<uint64_t>(ep, kTarget);
        auto raddr = [&](size_t off) {
            return virt ? base[off / RegvMem::kBuf] + off % RegvMem::kBuf : (uint64_t)off;
        };
        uint32_t seed = 3000;
        for (const Access& a : accesses) {
            ++seed;
            std::vector<uint8_t> buf(a.len);
            OpCtx ctx;
            if (a.write) {
                fill(buf.data(), a.len, seed);
                ep.post(a.what, [&] {
                    return fi_write(ep.ep, buf.data(), a.len, nullptr, addr[kTarget], raddr(a.off), key, &ctx.fctx);
                });
            } else {
                ep.post(a.what, [&] {
                    return fi_read(ep.ep, buf.data(), a.len, nullptr, addr[kTarget], raddr(a.off), key, &ctx.fctx);
                });
            }
            Comp c = ep.wait_ctx(&ctx, a.what);
            FT_CHECK(!c.is_err, "%s (%s, region of 3 x 4 KiB from fi_mr_regv): %s", a.what,
                     virt ? "FI_MR_VIRT_ADDR" : "offsets", describe(c).c_str());
            if (!a.write) {
                // the target's memory only ever held kMemSeed or earlier writes:
                // reads run after all writes in `accesses`, so rebuild the picture
                // from the same writes
                std::vector<uint8_t> expect(RegvMem::kN * RegvMem::kBuf);
                for (size_t i = 0; i < RegvMem::kN; ++i)
                    fill(expect.data() + i * RegvMem::kBuf, RegvMem::kBuf, kMemSeed, i * (RegvMem::kBuf + RegvMem::kGap));
                uint32_t s2 = 3000;
                for (const Access& w : accesses) {
                    ++s2;
                    if (&w == &a) break;
                    if (!w.write) continue;
                    std::vector<uint8_t> src(w.len);
                    fill(src.data(), w.len, s2);
                    std::memcpy(expect.data() + w.off, src.data(), w.len);  // offsets are back to back
                }
                FT_CHECK(std::memcmp(buf.data(), expect.data() + a.off, a.len) == 0, "%s: read data differs from %s",
                         a.what, "what the target holds");
            }
            signal_peer(kTarget, kLanded);
            wait_signal_progress(ep, kTarget, kReady);
        }
        if (virt) {
            attempt_refused(ep, addr[kTarget],
                            {"fi_write from the end of the first buffer into the unregistered gap", true, 64,
                             base[0] + RegvMem::kBuf - 32, key});
            signal_peer(kTarget, kRefused);
        }
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"write_virt", 2, [] { run_write(kMrVirt); }},
                        {"write_offset", 2, [] { run_write(kMrOffset); }},
                        {"read_virt", 2, [] { run_read(kMrVirt); }},
                        {"read_offset", 2, [] { run_read(kMrOffset); }},
                        {"writedata", 2, case_writedata},
                        {"inject_write", 2, case_inject_write},
                        {"inject_flag", 2, case_inject_flag},
                        {"order", 2, case_order},
                        {"refuse_key", 2, case_refuse_key},
                        {"refuse_range", 2, [] { run_refuse_range(kMrVirt); }},
                        {"refuse_range_offset", 2, [] { run_refuse_range(kMrOffset); }},
                        {"refuse_access", 2, case_refuse_access},
                        {"refuse_closed", 2, case_refuse_closed},
                        {"regv_offset", 2, [] { run_regv(kMrOffset); }},
                        {"regv_virt", 2, [] { run_regv(kMrVirt); }},
                    });
}
