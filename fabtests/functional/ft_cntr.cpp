// Completion counters: fi_cntr_open and the value/error calls, counters
// counting RMA at the initiator (FI_WRITE|FI_READ) and at the target
// (FI_REMOTE_WRITE, bound to the endpoint and to the memory region with
// fi_mr_bind), fi_cntr_wait thresholds and timeouts, and counters counting
// sends and receives.
#include <signal.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>

#include "ft_rma.h"
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kTarget = 0, kInit = 1;
constexpr uint32_t kReady = 0xC70001u, kDone = 0xC70002u, kStopped = 0xC70003u, kGo = 0xC70004u;

fid_cntr* open_cntr(Endpoint& ep, const char* what) {
    fi_cntr_attr attr{};
    attr.events = FI_CNTR_EVENTS_COMP;
    attr.wait_obj = FI_WAIT_UNSPEC;  // fi_cntr_wait is used
    fid_cntr* c = nullptr;
    int rc = fi_cntr_open(ep.domain, &attr, &c, nullptr);
    FT_CHECK(rc == 0 && c, "fi_cntr_open (%s): %d (%s)", what, rc, errstr(rc));
    ep.adopt(&c->fid);
    return c;
}

void bind_cntr(Endpoint& ep, fid_cntr* c, uint64_t flags, const char* what) {
    int rc = fi_ep_bind(ep.ep, &c->fid, flags);
    FT_CHECK(rc == 0, "fi_ep_bind(%s counter, %s): %d (%s)", what, flags_str(flags).c_str(), rc, errstr(rc));
}

// Last-resort bound for a fi_cntr_wait that ignores its timeout.
char g_stuck_msg[256];
void on_stuck(int) {
    ssize_t ignored = write(2, g_stuck_msg, strlen(g_stuck_msg));
    (void)ignored;
    _exit(1);
}

// fi_cntr_wait, killed (with a clear message) if it outlives its own timeout by 5 s.
int bounded_cntr_wait(fid_cntr* c, uint64_t threshold, int timeout_ms, const char* what) {
    std::snprintf(g_stuck_msg, sizeof g_stuck_msg,
                  "%s FAIL: %s: fi_cntr_wait(threshold %" PRIu64 ", timeout %d ms) did not return within its timeout + 5 s\n",
                  tag_prefix().c_str(), what, threshold, timeout_ms);
    signal(SIGALRM, on_stuck);
    alarm((unsigned)(timeout_ms / 1000 + 5));
    int rc = fi_cntr_wait(c, threshold, timeout_ms);
    alarm(0);
    return rc;
}

// fi_cntr_wait for a threshold that is never reached must return
// -FI_ETIMEDOUT within [0.8 t, t + 1 s].
void expect_wait_timeout(fid_cntr* c, int timeout_ms, const char* what) {
    const uint64_t v = fi_cntr_read(c);
    const double t0 = now_s();
    int rc = bounded_cntr_wait(c, v + 1000, timeout_ms, what);
    const double el = now_s() - t0;
    FT_CHECK(rc == -FI_ETIMEDOUT, "%s: fi_cntr_wait(value %" PRIu64 " + 1000, %d ms): expected -FI_ETIMEDOUT, got %d (%s)",
             what, v, timeout_ms, rc, errstr(rc));
    const double t = timeout_ms / 1000.0;
    FT_CHECK(el >= 0.8 * t && el <= t + 1.0, "%s: fi_cntr_wait(%d ms) timed out after %.3f s, outside [%.3f, %.3f]",
             what, timeout_ms, el, 0.8 * t, t + 1.0);
    FT_EQ(fi_cntr_read(c), v, (std::string(what) + ": value after the timed-out wait").c_str());
    info("%s: fi_cntr_wait with an unreachable threshold returned -FI_ETIMEDOUT after %.3f s (timeout %d ms)", what,
         el, timeout_ms);
}

// ------------------------------------------------------------------ basic
void case_basic() {
    Endpoint ep;
    fid_cntr* c = open_cntr(ep, "basic");
    FT_EQ(fi_cntr_read(c), 0, "fi_cntr_read of a new counter");
    FT_EQ(fi_cntr_readerr(c), 0, "fi_cntr_readerr of a new counter");
    FT_CALL(fi_cntr_add(c, 5));
    FT_EQ(fi_cntr_read(c), 5, "value after fi_cntr_add(5)");
    FT_CALL(fi_cntr_add(c, 0));
    FT_EQ(fi_cntr_read(c), 5, "value after fi_cntr_add(0)");
    FT_CALL(fi_cntr_set(c, 42));
    FT_EQ(fi_cntr_read(c), 42, "value after fi_cntr_set(42)");
    FT_CALL(fi_cntr_add(c, 1));
    FT_EQ(fi_cntr_read(c), 43, "value after fi_cntr_add(1)");
    FT_CALL(fi_cntr_set(c, 1ull << 40));
    FT_CALL(fi_cntr_add(c, 3));
    FT_EQ(fi_cntr_read(c), (1ull << 40) + 3, "64-bit value");
    FT_EQ(fi_cntr_readerr(c), 0, "error count untouched by add/set");
    FT_CALL(fi_cntr_adderr(c, 2));
    FT_EQ(fi_cntr_readerr(c), 2, "error count after fi_cntr_adderr(2)");
    FT_CALL(fi_cntr_adderr(c, 3));
    FT_EQ(fi_cntr_readerr(c), 5, "error count after fi_cntr_adderr(3)");
    FT_CALL(fi_cntr_seterr(c, 7));
    FT_EQ(fi_cntr_readerr(c), 7, "error count after fi_cntr_seterr(7)");
    FT_CALL(fi_cntr_seterr(c, 0));
    FT_EQ(fi_cntr_readerr(c), 0, "error count after fi_cntr_seterr(0)");
    FT_EQ(fi_cntr_read(c), (1ull << 40) + 3, "value untouched by adderr/seterr");
    FT_CALL(fi_cntr_set(c, 10));
    const double t0 = now_s();
    FT_CALL(bounded_cntr_wait(c, 10, 1000, "threshold reached"));
    FT_CALL(bounded_cntr_wait(c, 3, 1000, "threshold passed"));
    FT_CHECK(now_s() - t0 < 0.5, "fi_cntr_wait on reached thresholds took %.3f s", now_s() - t0);
    // a second counter is independent
    fid_cntr* d = open_cntr(ep, "second");
    FT_CALL(fi_cntr_add(d, 1));
    FT_EQ(fi_cntr_read(d), 1, "second counter");
    FT_EQ(fi_cntr_read(c), 10, "first counter unaffected by the second");
}

// ----------------------------------------------------------------- events
// Initiator: one counter bound FI_WRITE|FI_READ. Target: one counter bound
// to the endpoint with FI_REMOTE_WRITE and one bound to the region with
// fi_mr_bind(FI_REMOTE_WRITE). N writes and M reads; every count is exact.
void case_events() {
    constexpr int kWrites = 100, kReads = 40;
    constexpr size_t kLen = 4096;
    fid_cntr* ops = nullptr;    // initiator
    fid_cntr* rwrite = nullptr; // target, bound to the endpoint
    EpConfig cfg = one_sided_config(kMrVirt, FI_RMA_EVENT);
    cfg.before_enable = [&](Endpoint& e) {
        if (rank() == kInit) {
            ops = open_cntr(e, "initiator");
            bind_cntr(e, ops, FI_WRITE | FI_READ, "initiator");
        } else {
            rwrite = open_cntr(e, "target endpoint");
            bind_cntr(e, rwrite, FI_REMOTE_WRITE, "target endpoint");
        }
    };
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        fid_cntr* mrc = open_cntr(ep, "target region");
        // blocks 0..N-1 are written, blocks N..N+M-1 read
        std::vector<uint8_t> mem((kWrites + kReads) * kLen);
        fill(mem.data(), mem.size(), 0xE0);
        Region r(ep, mem.data(), mem.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 0xE1);
        int rc = fi_mr_bind(r.mr(), &mrc->fid, FI_REMOTE_WRITE);
        FT_CHECK(rc == 0, "fi_mr_bind(region, counter, FI_REMOTE_WRITE): %d (%s)", rc, errstr(rc));
        send_remote(kInit, r.remote());
        // fi_cntr_wait drives progress: nothing else runs here until the
        // counter reaches N
        const double t0 = now_s();
        rc = bounded_cntr_wait(rwrite, kWrites, 10000, "target FI_REMOTE_WRITE counter");
        FT_CHECK(rc == 0, "target fi_cntr_wait(FI_REMOTE_WRITE counter, %d, 10 s): %d (%s) after %.3f s, value %" PRIu64,
                 kWrites, rc, errstr(rc), now_s() - t0, fi_cntr_read(rwrite));
        wait_signal_progress(ep, kInit, kDone);  // the initiator saw all its completions (reads included)
        FT_EQ(fi_cntr_read(rwrite), kWrites, "target endpoint FI_REMOTE_WRITE counter (reads must not count)");
        FT_EQ(fi_cntr_read(mrc), kWrites, "target region counter bound with fi_mr_bind(FI_REMOTE_WRITE)");
        FT_EQ(fi_cntr_readerr(rwrite), 0, "target endpoint counter errors");
        FT_EQ(fi_cntr_readerr(mrc), 0, "target region counter errors");
        for (int i = 0; i < kWrites; ++i)
            check(mem.data() + (size_t)i * kLen, kLen, 0xE100u + (uint32_t)i, "written block");
        check(mem.data() + kWrites * kLen, kReads * kLen, 0xE0, "blocks that were only read", kWrites * kLen);
        info("target: FI_REMOTE_WRITE counters (endpoint and region) = %d after %d writes and %d reads", kWrites,
             kWrites, kReads);
        signal_peer(kInit, kReady);
        r.close();  // before the counter bound to it is closed with the endpoint
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(kWrites * kLen), dst(kReads * kLen);
        for (int i = 0; i < kWrites; ++i) fill(src.data() + (size_t)i * kLen, kLen, 0xE100u + (uint32_t)i);
        std::vector<OpCtx> ctx(kWrites + kReads);
        for (int i = 0; i < kWrites; ++i)
            ep.post("fi_write", [&] {
                return fi_write(ep.ep, src.data() + (size_t)i * kLen, kLen, nullptr, addr[kTarget],
                                rm.at((size_t)i * kLen), rm.key, &ctx[(size_t)i].fctx);
            });
        for (int i = 0; i < kReads; ++i)
            ep.post("fi_read", [&] {
                return fi_read(ep.ep, dst.data() + (size_t)i * kLen, kLen, nullptr, addr[kTarget],
                               rm.at((size_t)(kWrites + i) * kLen), rm.key, &ctx[(size_t)(kWrites + i)].fctx);
            });
        const double t0 = now_s();
        int rc = bounded_cntr_wait(ops, kWrites + kReads, 10000, "initiator FI_WRITE|FI_READ counter");
        FT_CHECK(rc == 0, "initiator fi_cntr_wait(FI_WRITE|FI_READ counter, %d, 10 s): %d (%s) after %.3f s, value %" PRIu64,
                 kWrites + kReads, rc, errstr(rc), now_s() - t0, fi_cntr_read(ops));
        info("initiator: fi_cntr_wait(%d) returned 0 after %.3f s", kWrites + kReads, now_s() - t0);
        FT_EQ(fi_cntr_read(ops), kWrites + kReads, "initiator FI_WRITE|FI_READ counter");
        FT_EQ(fi_cntr_readerr(ops), 0, "initiator counter errors");
        // the CQ has one completion for each, too
        for (int i = 0; i < kWrites + kReads; ++i)
            expect_flags(ep.expect_ok(&ctx[(size_t)i], "RMA completion"), FI_RMA | (i < kWrites ? FI_WRITE : FI_READ),
                         "RMA completion");
        FT_EQ(fi_cntr_read(ops), kWrites + kReads, "initiator counter after draining the CQ");
        check(dst.data(), kReads * kLen, 0xE0, "data read", kWrites * kLen);
        signal_peer(kTarget, kDone);
        wait_signal_progress(ep, kTarget, kReady);
    }
    barrier([&] { ep.progress(); });
}

// ---------------------------------------------------------- remote_atomic
// Which counter counts which one-sided operation (fi_endpoint(3), fi_mr(3)):
//  initiator FI_WRITE: RMA writes and base atomics; FI_READ: RMA reads,
//    fetch and compare atomics;
//  target endpoint FI_REMOTE_WRITE: RMA writes and base atomics;
//    FI_REMOTE_READ: RMA reads, fetch and compare atomics;
//  target region fi_mr_bind(FI_REMOTE_WRITE): every RMA write or atomic that
//    modifies the region (not FI_ATOMIC_READ).
void case_remote_atomic() {
    constexpr int kW = 3, kR = 2, kBase = 4, kFetch = 5, kCmp = 2, kARead = 3;
    constexpr int kOps = kW + kR + kBase + kFetch + kCmp + kARead;
    fid_cntr *wr = nullptr, *rd = nullptr;  // initiator: FI_WRITE, FI_READ; target: FI_REMOTE_WRITE, FI_REMOTE_READ
    EpConfig cfg = one_sided_config(kMrVirt, FI_RMA_EVENT);
    cfg.before_enable = [&](Endpoint& e) {
        const bool init = rank() == kInit;
        wr = open_cntr(e, init ? "FI_WRITE" : "FI_REMOTE_WRITE");
        rd = open_cntr(e, init ? "FI_READ" : "FI_REMOTE_READ");
        bind_cntr(e, wr, init ? FI_WRITE : FI_REMOTE_WRITE, init ? "FI_WRITE" : "FI_REMOTE_WRITE");
        bind_cntr(e, rd, init ? FI_READ : FI_REMOTE_READ, init ? "FI_READ" : "FI_REMOTE_READ");
    };
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        fid_cntr* mrc = open_cntr(ep, "region");
        alignas(64) uint64_t mem[64] = {};
        Region r(ep, mem, sizeof mem, FI_REMOTE_WRITE | FI_REMOTE_READ, 0xA5);
        int rc = fi_mr_bind(r.mr(), &mrc->fid, FI_REMOTE_WRITE);
        FT_CHECK(rc == 0, "fi_mr_bind(region, counter, FI_REMOTE_WRITE): %d (%s)", rc, errstr(rc));
        send_remote(kInit, r.remote());
        wait_signal_progress(ep, kInit, kDone);  // all of the initiator's operations completed
        const uint64_t want_rw = kW + kBase, want_rr = kR + kFetch + kCmp + kARead,
                       want_mr = kW + kBase + kFetch + kCmp;
        // base atomics and writes may complete at the initiator before the target counted them
        FT_CALL(bounded_cntr_wait(wr, want_rw, 10000, "target endpoint FI_REMOTE_WRITE counter"));
        FT_CALL(bounded_cntr_wait(rd, want_rr, 10000, "target endpoint FI_REMOTE_READ counter"));
        const double t0 = now_s();
        while (fi_cntr_read(mrc) < want_mr && now_s() - t0 < kWait) ep.progress();
        const uint64_t got_rw = fi_cntr_read(wr), got_rr = fi_cntr_read(rd), got_mr = fi_cntr_read(mrc);
        info("target counters after %d writes, %d reads, %d base, %d fetch (SUM), %d compare (CSWAP, all swapping), %d "
             "fetch ATOMIC_READ: endpoint FI_REMOTE_WRITE %" PRIu64 " (want %" PRIu64 "), endpoint FI_REMOTE_READ %" PRIu64
             " (want %" PRIu64 "), region FI_REMOTE_WRITE %" PRIu64 " (want %" PRIu64 ")",
             kW, kR, kBase, kFetch, kCmp, kARead, got_rw, want_rw, got_rr, want_rr, got_mr, want_mr);
        FT_EQ(got_rr, want_rr, "target endpoint FI_REMOTE_READ counter (RMA reads, fetch and compare atomics)");
        FT_EQ(got_mr, want_mr, "target region FI_REMOTE_WRITE counter (writes and atomics that modify the region)");
        FT_EQ(got_rw, want_rw, "target endpoint FI_REMOTE_WRITE counter (RMA writes and base atomics only)");
        signal_peer(kInit, kReady);
        r.close();
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<OpCtx> ctx(kOps);
        size_t n = 0;
        uint64_t buf[64] = {}, res[64] = {};
        const uint64_t one = 1;
        for (int i = 0; i < kW; ++i, ++n)
            ep.post("fi_write", [&] {
                return fi_write(ep.ep, &buf[n], 8, nullptr, addr[kTarget], rm.at(8 * n), rm.key, &ctx[n].fctx);
            });
        for (int i = 0; i < kR; ++i, ++n)
            ep.post("fi_read", [&] {
                return fi_read(ep.ep, &buf[n], 8, nullptr, addr[kTarget], rm.at(8 * n), rm.key, &ctx[n].fctx);
            });
        for (int i = 0; i < kBase; ++i, ++n)
            ep.post("fi_atomic", [&] {
                return fi_atomic(ep.ep, &one, 1, nullptr, addr[kTarget], rm.at(8 * n), rm.key, FI_UINT64, FI_SUM,
                                 &ctx[n].fctx);
            });
        for (int i = 0; i < kFetch; ++i, ++n)
            ep.post("fi_fetch_atomic", [&] {
                return fi_fetch_atomic(ep.ep, &one, 1, nullptr, &res[n], nullptr, addr[kTarget], rm.at(8 * n), rm.key,
                                       FI_UINT64, FI_SUM, &ctx[n].fctx);
            });
        const uint64_t zero = 0;  // the words start at 0: every CSWAP swaps
        for (int i = 0; i < kCmp; ++i, ++n)
            ep.post("fi_compare_atomic", [&] {
                return fi_compare_atomic(ep.ep, &one, 1, nullptr, &zero, nullptr, &res[n], nullptr, addr[kTarget],
                                         rm.at(8 * n), rm.key, FI_UINT64, FI_CSWAP, &ctx[n].fctx);
            });
        for (int i = 0; i < kARead; ++i, ++n)
            ep.post("fi_fetch_atomic(ATOMIC_READ)", [&] {
                return fi_fetch_atomic(ep.ep, nullptr, 1, nullptr, &res[n], nullptr, addr[kTarget], rm.at(8 * n), rm.key,
                                       FI_UINT64, FI_ATOMIC_READ, &ctx[n].fctx);
            });
        for (size_t i = 0; i < n; ++i) ep.expect_ok(&ctx[i], "one-sided operation");
        for (size_t i = kW + kR + kBase; i < (size_t)(kW + kR + kBase + kFetch + kCmp); ++i)
            FT_EQ(res[i], 0, "value fetched from a fresh word");
        FT_EQ(fi_cntr_read(wr), kW + kBase, "initiator FI_WRITE counter (RMA writes and base atomics)");
        FT_EQ(fi_cntr_read(rd), kR + kFetch + kCmp + kARead, "initiator FI_READ counter (reads, fetch and compare atomics)");
        signal_peer(kTarget, kDone);
        wait_signal_progress(ep, kTarget, kReady);
    }
    barrier([&] { ep.progress(); });
}

// ----------------------------------------------------------- wait_timeout
// fi_cntr_wait with a threshold that is never reached returns -FI_ETIMEDOUT
// within [0.8 t, t + 1 s] (measured): on an idle counter, and on the
// initiator's FI_WRITE counter and the target's FI_REMOTE_WRITE counter
// after RMA traffic; the values stay put.
void case_wait_timeout() {
    constexpr int kWrites = 10;
    constexpr size_t kLen = 4096;
    fid_cntr* c = nullptr;
    EpConfig cfg = one_sided_config(kMrVirt, FI_RMA_EVENT);
    cfg.before_enable = [&](Endpoint& e) {
        c = open_cntr(e, rank() == kInit ? "initiator" : "target");
        bind_cntr(e, c, rank() == kInit ? FI_WRITE : FI_REMOTE_WRITE, rank() == kInit ? "initiator" : "target");
    };
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    fid_cntr* idle = open_cntr(ep, "idle");
    for (int ms : {0, 300}) expect_wait_timeout(idle, ms, "idle counter");
    if (rank() == kTarget) {
        std::vector<uint8_t> mem(kWrites * kLen);
        Region r(ep, mem.data(), mem.size(), FI_REMOTE_WRITE, 0xF1);
        send_remote(kInit, r.remote());
        FT_CALL(bounded_cntr_wait(c, kWrites, 10000, "target FI_REMOTE_WRITE counter"));
        FT_EQ(fi_cntr_read(c), kWrites, "target FI_REMOTE_WRITE counter");
        expect_wait_timeout(c, 300, "target FI_REMOTE_WRITE counter after the writes");
        signal_peer(kInit, kDone);
        wait_signal_progress(ep, kInit, kDone);
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> src(kLen, 0x5C);
        std::vector<OpCtx> ctx(kWrites);
        for (int i = 0; i < kWrites; ++i)
            ep.post("fi_write", [&] {
                return fi_write(ep.ep, src.data(), kLen, nullptr, addr[kTarget], rm.at((size_t)i * kLen), rm.key,
                                &ctx[(size_t)i].fctx);
            });
        FT_CALL(bounded_cntr_wait(c, kWrites, 10000, "initiator FI_WRITE counter"));
        FT_EQ(fi_cntr_read(c), kWrites, "initiator FI_WRITE counter");
        expect_wait_timeout(c, 300, "initiator FI_WRITE counter after the writes");
        wait_signal_progress(ep, kTarget, kDone);
        signal_peer(kTarget, kDone);
    }
    barrier([&] { ep.progress(); });
}

// ----------------------------------------------------------------- errors
// Operations that fail count as errors, not successes: refused RMA (unknown
// key) bump the initiator counter's error value, and a change of the error
// value unblocks fi_cntr_wait (fi_cntr(3)) early, without claiming success.
// The target's progress thread is off: it would answer the bad write as soon
// as it arrives (the target makes no progress call for longer than an
// interval), and the refusal could then be counted before the initiator is
// inside fi_cntr_wait, which only sees changes made while it waits.
void case_errors() {
    constexpr size_t kLen = 256;
    fid_cntr* c = nullptr;
    if (rank() == kTarget) set_prov_var("PROGRESS_THREAD", "0");
    EpConfig cfg = one_sided_config(kMrVirt);
    cfg.before_enable = [&](Endpoint& e) {
        if (rank() == kInit) {
            c = open_cntr(e, "initiator");
            bind_cntr(e, c, FI_WRITE | FI_READ, "initiator");
        }
    };
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        std::vector<uint8_t> mem(kLen);
        Region r(ep, mem.data(), mem.size(), FI_REMOTE_WRITE | FI_REMOTE_READ, 0xE7);
        send_remote(kInit, r.remote());
        wait_signal_progress(ep, kInit, kReady);  // the valid writes are done
        signal_peer(kInit, kStopped);             // no progress from here ...
        wait_signal(kInit, kGo);                  // ... until the bad write is posted
        // and the initiator is inside fi_cntr_wait before the refusal comes
        // back (not much longer: pmeth declares a peer silent for
        // FI_PMETH_DEAD_MS, 2 s in these suites, dead)
        sleep_ms(500);
        wait_signal_progress(ep, kInit, kDone);
    } else {
        RemoteMr rm = recv_remote(ep, kTarget);
        std::vector<uint8_t> buf(kLen, 0x11);
        OpCtx ok[2], bad[2];
        for (OpCtx& x : ok)
            ep.post("fi_write", [&] {
                return fi_write(ep.ep, buf.data(), kLen, nullptr, addr[kTarget], rm.at(0), rm.key, &x.fctx);
            });
        FT_CALL(bounded_cntr_wait(c, 2, 10000, "two valid writes"));
        FT_EQ(fi_cntr_read(c), 2, "counter after two valid writes");
        FT_EQ(fi_cntr_readerr(c), 0, "errors after two valid writes");
        signal_peer(kTarget, kReady);
        wait_signal(kTarget, kStopped);
        ep.post("fi_write with an unknown key", [&] {
            return fi_write(ep.ep, buf.data(), kLen, nullptr, addr[kTarget], rm.at(0), ~rm.key, &bad[0].fctx);
        });
        signal_peer(kTarget, kGo);
        // The refusal comes after the target's 500 ms sleep: counted already,
        // this rank stalled longer than that, and the wait cannot see it.
        const uint64_t err_before = fi_cntr_readerr(c);
        const double t0 = now_s();
        int rc = bounded_cntr_wait(c, 3, 5000, "threshold 3 while a refused write is pending");
        const double el = now_s() - t0;
        info("fi_cntr_wait(3, 5 s) with a refused write pending returned %d (%s) after %.3f s", rc, errstr(rc), el);
        FT_CHECK(rc != 0, "fi_cntr_wait(3) returned 0: the counter is %" PRIu64 " and its error count %" PRIu64
                          " (was the write with an unknown key counted as a success?)",
                 fi_cntr_read(c), fi_cntr_readerr(c));
        if (err_before == 0)
            FT_CHECK(rc != -FI_ETIMEDOUT && el < 4.5,
                     "the error count changed during fi_cntr_wait but it did not return early (rc %d after %.3f s)", rc,
                     el);
        else
            info("the refusal was counted before fi_cntr_wait began (this rank stalled over 0.5 s): its early return "
                 "is not checked this time");
        FT_EQ(fi_cntr_readerr(c), 1, "errors after a refused write");
        FT_EQ(fi_cntr_read(c), 2, "successes after a refused write");
        ep.post("fi_read with an unknown key", [&] {
            return fi_read(ep.ep, buf.data(), kLen, nullptr, addr[kTarget], rm.at(0), ~rm.key, &bad[1].fctx);
        });
        expect_refused(ep, &bad[1], "fi_read with an unknown key");
        FT_EQ(fi_cntr_readerr(c), 2, "errors after a refused read");
        FT_EQ(fi_cntr_read(c), 2, "successes after a refused read");
        for (OpCtx& x : ok) ep.expect_ok(&x, "valid write");
        expect_refused(ep, &bad[0], "fi_write with an unknown key");
        signal_peer(kTarget, kDone);
    }
    barrier([&] { ep.progress(); });
}

// -------------------------------------------------------------- send_recv
// Counters bound FI_SEND and FI_RECV count messages (tsend, tinject and a
// rendezvous-sized send); a counter bound for one direction ignores the other.
void case_send_recv() {
    const std::vector<size_t> sizes = {0, 8, 4096, 65536, 1u << 20, 8, 200};
    constexpr int kInjects = 5;
    const int total = (int)sizes.size() + kInjects;
    fid_cntr* sc = nullptr;
    fid_cntr* rc_ = nullptr;
    EpConfig cfg;
    cfg.before_enable = [&](Endpoint& e) {
        sc = open_cntr(e, "send");
        rc_ = open_cntr(e, "recv");
        bind_cntr(e, sc, FI_SEND, "send");
        bind_cntr(e, rc_, FI_RECV, "recv");
    };
    Endpoint ep(cfg);
    auto addr = connect_all(ep);
    if (rank() == kTarget) {
        std::vector<XferPtr> rx;
        for (size_t i = 0; i < sizes.size(); ++i) rx.push_back(post_recv(ep, 1u << 20, true, 0x50 + i));
        std::vector<XferPtr> irx;
        for (int i = 0; i < kInjects; ++i) irx.push_back(post_recv(ep, 64, true, 0x90 + (uint64_t)i));
        FT_EQ(fi_cntr_read(rc_), 0, "receive counter before anything arrived");
        signal_peer(kInit, kReady);
        const double t0 = now_s();
        int w = bounded_cntr_wait(rc_, (uint64_t)total, 10000, "FI_RECV counter");
        FT_CHECK(w == 0, "fi_cntr_wait(FI_RECV counter, %d, 10 s): %d (%s) after %.3f s, value %" PRIu64, total, w,
                 errstr(w), now_s() - t0, fi_cntr_read(rc_));
        FT_EQ(fi_cntr_read(rc_), total, "FI_RECV counter");
        FT_EQ(fi_cntr_readerr(rc_), 0, "FI_RECV counter errors");
        for (size_t i = 0; i < sizes.size(); ++i)
            complete_recv(ep, *rx[i], {.len = sizes[i], .seed = 77u + (uint32_t)i, .tag = 0x50 + i});
        for (int i = 0; i < kInjects; ++i)
            complete_recv(ep, *irx[(size_t)i], {.len = 16, .seed = 99u + (uint32_t)i, .tag = 0x90 + (uint64_t)i});
        FT_EQ(fi_cntr_read(sc), 0, "FI_SEND counter of the side that only received");
        info("receiver: FI_RECV counter = %d, FI_SEND counter = 0", total);
        wait_signal_progress(ep, kInit, kDone);
    } else {
        wait_signal(kTarget, kReady);
        std::vector<XferPtr> tx;
        for (size_t i = 0; i < sizes.size(); ++i)
            tx.push_back(post_send(ep, addr[kTarget], sizes[i], 77u + (uint32_t)i, true, 0x50 + i));
        for (int i = 0; i < kInjects; ++i) {
            std::vector<uint8_t> b(16);
            fill(b.data(), b.size(), 99u + (uint32_t)i);
            ep.post("fi_tinject", [&] { return fi_tinject(ep.ep, b.data(), b.size(), addr[kTarget], 0x90 + (uint64_t)i); });
        }
        const double t0 = now_s();
        int w = bounded_cntr_wait(sc, (uint64_t)total, 10000, "FI_SEND counter");
        FT_CHECK(w == 0, "fi_cntr_wait(FI_SEND counter, %d, 10 s): %d (%s) after %.3f s, value %" PRIu64, total, w,
                 errstr(w), now_s() - t0, fi_cntr_read(sc));
        FT_EQ(fi_cntr_read(sc), total, "FI_SEND counter (sends and injects)");
        FT_EQ(fi_cntr_readerr(sc), 0, "FI_SEND counter errors");
        for (auto& s : tx) complete_send(ep, *s);
        FT_EQ(fi_cntr_read(rc_), 0, "FI_RECV counter of the side that only sent");
        info("sender: FI_SEND counter = %d (%zu sends + %d injects), FI_RECV counter = 0", total, sizes.size(), kInjects);
        signal_peer(kTarget, kDone);
    }
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"basic", 1, case_basic},
                        {"events", 2, case_events},
                        {"remote_atomic", 2, case_remote_atomic},
                        {"wait_timeout", 2, case_wait_timeout},
                        {"errors", 2, case_errors},
                        {"send_recv", 2, case_send_recv},
                    });
}
