// ft_pingpong: half round-trip latency, tagged (-m tagged, default) or
// untagged (-m msg) messages, one size (-S) or the default ladder; or
// (-m atomic) 8-byte fi_fetch_atomic(UINT64, FI_SUM) round trips against a
// counter the server registered, reported the same way (lat_us = half the
// round trip, comparable with the tagged ping-pong's lat_us).
// How completions are waited for: -m tagged/msg spin on fi_cq_read; -m sread
// blocks in fi_cq_sread (tagged); -m cntr binds a send and a receive
// counter (the CQ with FI_SELECTIVE_COMPLETION, so it stays empty) and
// blocks in fi_cntr_wait; -m cntr_read spins on fi_cntr_read instead (what
// upstream fabtests' fi_rdm_cntr_pingpong does by default).
// FT_PP_SPREAD=1: the tagged/msg round trips' spread too (ft_bench.h).
//   ft_pingpong -p <prov> [-m tagged|msg|sread|cntr|cntr_read|atomic] [-S size] [-n iters] [-c cpu0,cpu1] [-v] [--short]
#include <algorithm>

#include "ft_bench.h"
#include "ft_rma.h"
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kClient = 1;
constexpr uint64_t kTag = 0x9090;

bool g_tagged = true;

ssize_t post_recv_op(Endpoint& ep, void* buf, size_t len, OpCtx& ctx) {
    return g_tagged ? fi_trecv(ep.ep, buf, len, nullptr, FI_ADDR_UNSPEC, kTag, 0, &ctx.fctx)
                    : fi_recv(ep.ep, buf, len, nullptr, FI_ADDR_UNSPEC, &ctx.fctx);
}
ssize_t post_send_op(Endpoint& ep, const void* buf, size_t len, fi_addr_t dest, OpCtx& ctx) {
    return g_tagged ? fi_tsend(ep.ep, buf, len, nullptr, dest, kTag, &ctx.fctx)
                    : fi_send(ep.ep, buf, len, nullptr, dest, &ctx.fctx);
}

void pingpong(Endpoint& ep, BenchCq& cq, const std::vector<fi_addr_t>& addr, size_t size, long iters) {
    const long warm = std::max(2L, iters / 10);
    const long total = warm + iters;
    const bool verify = verify_mode();
    std::vector<uint8_t> sbuf = make_buf(size), rbuf = make_buf(size);
    OpCtx sctx, rctx;
    auto ping_seed = [](long i) { return (uint32_t)(2 * i); };
    auto pong_seed = [](long i) { return (uint32_t)(2 * i + 1); };
    const int me = rank();
    fill(sbuf.data(), size, me == kClient ? ping_seed(0) : pong_seed(0));
    if (me == kServer) {
        cq.post("recv", [&] { return post_recv_op(ep, rbuf.data(), size, rctx); });
        barrier([&] { cq.poll(); });
        for (long i = 0; i < total; ++i) {
            cq.wait(&rctx, "ping receive");
            if (verify || i == total - 1) check(rbuf.data(), size, ping_seed(verify ? i : 0), "ping payload");
            if (i + 1 < total) cq.post("recv", [&] { return post_recv_op(ep, rbuf.data(), size, rctx); });
            if (verify) fill(sbuf.data(), size, pong_seed(i));
            cq.post("send", [&] { return post_send_op(ep, sbuf.data(), size, addr[kClient], sctx); });
            cq.wait(&sctx, "pong send");
        }
        return;
    }
    barrier([&] { cq.poll(); });
    double t0 = 0;
    RoundTrips rt(iters);
    for (long i = 0; i < total; ++i) {
        if (i == warm) t0 = now_s();
        if (i >= warm) rt.mark();
        if (verify) fill(sbuf.data(), size, ping_seed(i));
        cq.post("recv", [&] { return post_recv_op(ep, rbuf.data(), size, rctx); });
        cq.post("send", [&] { return post_send_op(ep, sbuf.data(), size, addr[kServer], sctx); });
        cq.wait(&sctx, "ping send");
        cq.wait(&rctx, "pong receive");
        if (verify || i == total - 1) check(rbuf.data(), size, pong_seed(verify ? i : 0), "pong payload");
    }
    double secs = now_s() - t0;
    rt.mark();
    rt.report(g_tagged ? "pingpong_tagged" : "pingpong_msg");
    double lat_us = secs / (2.0 * (double)iters) * 1e6;
    print_result(g_opt.prov, g_tagged ? "pingpong_tagged" : "pingpong_msg", size, iters, lat_us,
                 (double)size / lat_us, 1.0 / lat_us);
}

// The client's fi_fetch_atomic(+1) returns the previous count: i for the
// i-th operation (checked every time with -v, else the last). The server
// only progresses (manual progress) until the client's "done" message.
void atomic_pingpong(Endpoint& ep, BenchCq& cq, const std::vector<fi_addr_t>& addr, long iters) {
    const long warm = std::max(2L, iters / 10);
    const long total = warm + iters;
    const bool verify = verify_mode();
    constexpr uint64_t kDoneTag = 0xD0E;
    uint8_t byte = 0;
    OpCtx ctl;
    if (rank() == kServer) {
        alignas(64) uint64_t counter[8] = {};
        Region r(ep, &counter[0], sizeof(uint64_t), FI_REMOTE_READ | FI_REMOTE_WRITE, 0xA7);
        send_remote(kClient, r.remote());
        cq.post("done fi_trecv", [&] {
            return fi_trecv(ep.ep, &byte, 1, nullptr, FI_ADDR_UNSPEC, kDoneTag, 0, &ctl.fctx);
        });
        barrier([&] { cq.poll(); });
        cq.wait(&ctl, "client's done message", g_opt.timeout_s);  // spinning on the CQ is our progress
        FT_EQ(counter[0], (uint64_t)total, "server counter after the fetch-atomic round trips");
        barrier([&] { cq.poll(); });
        return;
    }
    RemoteMr rm = recv_remote(ep, kServer);
    const uint64_t one = 1;
    uint64_t old = 0;
    OpCtx ctx;
    barrier([&] { cq.poll(); });
    double t0 = 0;
    for (long i = 0; i < total; ++i) {
        if (i == warm) t0 = now_s();
        cq.post("fi_fetch_atomic", [&] {
            return fi_fetch_atomic(ep.ep, &one, 1, nullptr, &old, nullptr, addr[kServer], rm.at(0), rm.key, FI_UINT64,
                                   FI_SUM, &ctx.fctx);
        });
        cq.wait(&ctx, "fi_fetch_atomic");
        if (verify || i == total - 1) FT_EQ(old, (uint64_t)i, "value fetched by fi_fetch_atomic");
    }
    double secs = now_s() - t0;
    double lat_us = secs / (2.0 * (double)iters) * 1e6;
    print_result(g_opt.prov, "pingpong_atomic", sizeof(uint64_t), iters, lat_us, sizeof(uint64_t) / lat_us,
                 1.0 / lat_us);
    cq.post("done fi_tsend", [&] { return fi_tsend(ep.ep, &byte, 1, nullptr, addr[kServer], kDoneTag, &ctl.fctx); });
    cq.wait(&ctl, "done send");
    barrier([&] { cq.poll(); });
}

// Counters instead of completion entries: the send and receive counters
// reach i + 1 at the i-th round trip.
struct Cntrs {
    fid_cntr* tx = nullptr;
    fid_cntr* rx = nullptr;
};

void cntr_wait(fid_cntr* c, uint64_t threshold, bool spin, const char* what) {
    if (!spin) {
        int rc = fi_cntr_wait(c, threshold, 10000);
        FT_CHECK(rc == 0, "%s: fi_cntr_wait(%llu, 10 s): %d (%s)", what, (unsigned long long)threshold, rc, errstr(rc));
        return;
    }
    double deadline = -1;
    for (unsigned spins = 0; fi_cntr_read(c) < threshold; ++spins) {
        if (spins % 4096 == 4095) {
            double t = now_s();
            if (deadline < 0) deadline = t + kWait;
            FT_CHECK(t < deadline, "%s: counter below %llu after %.0fs", what, (unsigned long long)threshold, kWait);
            FT_CHECK(fi_cntr_readerr(c) == 0, "%s: the counter counted an error", what);
        }
    }
}

void cntr_pingpong(Endpoint& ep, const Cntrs& cn, const std::vector<fi_addr_t>& addr, size_t size, long iters,
                   bool spin) {
    const long warm = std::max(2L, iters / 10);
    const long total = warm + iters;
    const bool verify = verify_mode();
    std::vector<uint8_t> sbuf = make_buf(size), rbuf = make_buf(size);
    auto ping_seed = [](long i) { return (uint32_t)(2 * i); };
    auto pong_seed = [](long i) { return (uint32_t)(2 * i + 1); };
    const int me = rank();
    // Counter values carry over between sizes.
    const uint64_t tx0 = fi_cntr_read(cn.tx), rx0 = fi_cntr_read(cn.rx);
    auto recv = [&] {
        ep.post("fi_trecv", [&] { return fi_trecv(ep.ep, rbuf.data(), size, nullptr, FI_ADDR_UNSPEC, kTag, 0, nullptr); });
    };
    auto send = [&](fi_addr_t to) {
        ep.post("fi_tsend", [&] { return fi_tsend(ep.ep, sbuf.data(), size, nullptr, to, kTag, nullptr); });
    };
    fill(sbuf.data(), size, me == kClient ? ping_seed(0) : pong_seed(0));
    if (me == kServer) {
        recv();
        barrier([&] { (void)fi_cntr_read(cn.rx); });
        for (long i = 0; i < total; ++i) {
            cntr_wait(cn.rx, rx0 + (uint64_t)i + 1, spin, "ping receive");
            if (verify || i == total - 1) check(rbuf.data(), size, ping_seed(verify ? i : 0), "ping payload");
            if (i + 1 < total) recv();
            if (verify) fill(sbuf.data(), size, pong_seed(i));
            send(addr[kClient]);
            cntr_wait(cn.tx, tx0 + (uint64_t)i + 1, spin, "pong send");
        }
        return;
    }
    barrier([&] { (void)fi_cntr_read(cn.rx); });
    double t0 = 0;
    for (long i = 0; i < total; ++i) {
        if (i == warm) t0 = now_s();
        if (verify) fill(sbuf.data(), size, ping_seed(i));
        recv();
        send(addr[kServer]);
        cntr_wait(cn.tx, tx0 + (uint64_t)i + 1, spin, "ping send");
        cntr_wait(cn.rx, rx0 + (uint64_t)i + 1, spin, "pong receive");
        if (verify || i == total - 1) check(rbuf.data(), size, pong_seed(verify ? i : 0), "pong payload");
    }
    double secs = now_s() - t0;
    double lat_us = secs / (2.0 * (double)iters) * 1e6;
    print_result(g_opt.prov, spin ? "pingpong_cntr_read" : "pingpong_cntr", size, iters, lat_us,
                 (double)size / lat_us, 1.0 / lat_us);
}

}  // namespace

int main(int argc, char** argv) {
    parse_options(argc, argv);
    const std::string mode = g_opt.mode.empty() ? "tagged" : g_opt.mode;
    if (mode != "tagged" && mode != "msg" && mode != "sread" && mode != "cntr" && mode != "cntr_read" &&
        mode != "atomic") {
        std::fprintf(stderr, "ft_pingpong: -m must be tagged, msg, sread, cntr, cntr_read or atomic\n");
        return 2;
    }
    g_tagged = mode != "msg";
    set_identity("", "pingpong_" + mode, -1);
    if (mode == "atomic") {
        if (g_opt.size && g_opt.size != sizeof(uint64_t)) {
            std::fprintf(stderr, "ft_pingpong: -m atomic works on one uint64 (-S 8)\n");
            return 2;
        }
        Case c{"pingpong_atomic", 2, [&] {
                   Endpoint ep(one_sided_config(kMrVirt));
                   auto addr = connect_all(ep);
                   BenchCq cq(ep);
                   atomic_pingpong(ep, cq, addr, bench_iters(20000, 10));
               }};
        return run_case(c) ? 0 : 1;
    }
    const auto sizes = bench_sizes({8, 64, 512, 4096, 65536, 1u << 20});
    if (mode == "cntr" || mode == "cntr_read") {
        Case c{"pingpong_" + mode, 2, [&] {
                   EpConfig cfg;
                   cfg.cq_bind_flags = FI_SELECTIVE_COMPLETION;
                   Cntrs cn;
                   cfg.before_enable = [&](Endpoint& e) {
                       fi_cntr_attr attr{};
                       attr.events = FI_CNTR_EVENTS_COMP;
                       attr.wait_obj = mode == "cntr" ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
                       for (auto [c, flag] : {std::pair{&cn.tx, FI_SEND}, {&cn.rx, FI_RECV}}) {
                           FT_CALL(fi_cntr_open(e.domain, &attr, c, nullptr));
                           e.adopt(&(*c)->fid);
                           FT_CALL(fi_ep_bind(e.ep, &(*c)->fid, flag));
                       }
                   };
                   Endpoint ep(cfg);
                   auto addr = connect_all(ep);
                   for (size_t s : sizes) {
                       long normal = s <= 4096 ? 20000 : (s <= 65536 ? 5000 : 500);
                       cntr_pingpong(ep, cn, addr, s, bench_iters(normal, 10), mode == "cntr_read");
                   }
                   barrier([&] { (void)fi_cntr_read(cn.rx); });
               }};
        return run_case(c) ? 0 : 1;
    }
    Case c{"pingpong_" + mode, 2, [&] {
               EpConfig cfg;
               if (mode == "sread") cfg.cq_wait = FI_WAIT_UNSPEC;
               Endpoint ep(cfg);
               auto addr = connect_all(ep);
               BenchCq cq(ep, mode == "sread");
               for (size_t s : sizes) {
                   long normal = s <= 4096 ? 20000 : (s <= 65536 ? 5000 : 500);
                   pingpong(ep, cq, addr, s, bench_iters(normal, 10));
               }
               barrier([&] { cq.poll(); });
           }};
    return run_case(c) ? 0 : 1;
}
