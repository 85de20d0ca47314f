// pmfabric benchmarks: result line, BenchCq, windowed stream loop.
#include "ft_bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ft_xfer.h"

namespace ft {

void print_result(const std::string& prov, const std::string& test, size_t size, long iters, double lat_us,
                  double bw_MBps, double mrate_Mps) {
    std::printf("prov=%s test=%s size=%zu iters=%ld lat_us=%.3f bw_MBps=%.2f mrate_Mps=%.4f\n", prov.c_str(),
                test.c_str(), size, iters, lat_us, bw_MBps, mrate_Mps);
    std::fflush(stdout);
}

RoundTrips::RoundTrips(long iters) {
    const char* e = getenv("FT_PP_SPREAD");
    on_ = e && std::strcmp(e, "1") == 0;
    if (on_) {
        t_.assign((size_t)iters + 1, 1.0);  // its pages touched now, not in the timed loop
        t_.clear();
    }
}

void RoundTrips::report(const char* what) const {
    if (!on_ || t_.size() < 2) return;
    std::vector<double> d;
    d.reserve(t_.size() - 1);
    for (size_t i = 1; i < t_.size(); ++i) d.push_back((t_[i] - t_[i - 1]) * 0.5e6);
    const double n = (double)d.size();
    const double mean = (t_.back() - t_.front()) * 0.5e6 / n;
    std::sort(d.begin(), d.end());
    auto pct = [&](double p) { return d[std::min(d.size() - 1, (size_t)(p * n))]; };
    const double med = pct(0.5);
    std::fprintf(stderr, "spread %s: half_round_trips=%zu p50_us=%.3f p90_us=%.3f p99_us=%.3f p999_us=%.3f mean_us=%.3f\n",
                 what, d.size(), med, pct(0.9), pct(0.99), pct(0.999), mean);
    // Where the mean's excess over the median comes from: per band of
    // half round trips (us), how many, and what they add to the mean.
    std::fprintf(stderr, "spread %s: bands (us: count, adds to the mean in us):", what);
    const double edges[] = {5, 7, 10, 15, 20, 30, 60, 1e9};
    double lo = 0;
    size_t i = 0;
    for (double e : edges) {
        size_t c = 0;
        double add = 0;
        for (; i < d.size() && d[i] < e; ++i, ++c) add += d[i] - med;  // (sorted: d[i] >= lo)
        std::fprintf(stderr, " %g-%g: %zu, %.3f;", lo, e, c, add / n);
        lo = e;
    }
    std::fprintf(stderr, "\n");
}

long bench_iters(long normal, long short_iters) {
    if (g_opt.iters > 0) return g_opt.iters;
    return g_opt.short_mode ? short_iters : normal;
}

std::vector<size_t> bench_sizes(const std::vector<size_t>& defaults) {
    if (g_opt.size > 0) return {g_opt.size};
    return defaults;
}

// ------------------------------------------------------------------ BenchCq
bool BenchCq::take(void* ctx) {
    auto it = std::find(done_.begin(), done_.end(), ctx);
    if (it == done_.end()) return false;
    *it = done_.back();
    done_.pop_back();
    return true;
}

void BenchCq::poll() {
    fi_cq_tagged_entry e[16];
    ssize_t n = sread_ ? fi_cq_sread(ep_.cq, e, 16, nullptr, 100) : fi_cq_read(ep_.cq, e, 16);
    if (n > 0) {
        for (ssize_t i = 0; i < n; ++i) done_.push_back(e[i].op_context);
        return;
    }
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(ep_.cq, &err, 0);
        FT_FAIL("benchmark: error completion err=%d (%s) ctx=%p", err.err, errstr(err.err), err.op_context);
    }
    FT_FAIL("fi_cq_read: %zd (%s)", n, errstr(n));
}

void BenchCq::wait(void* ctx, const char* what, double timeout_s) {
    double deadline = -1;
    for (unsigned spins = 0; !take(ctx); ++spins) {
        poll();
        if (spins % 4096 == 4095) {
            double t = now_s();
            if (deadline < 0) deadline = t + timeout_s;
            FT_CHECK(t < deadline, "%s: no completion within %.0fs", what, timeout_s);
        }
    }
}

void BenchCq::wait_all(const std::vector<OpCtx>& ctxs, size_t n, const char* what) {
    for (size_t i = 0; i < n; ++i) wait((void*)&ctxs[i].fctx, what);
}

// ------------------------------------------------------------------- stream
namespace {
constexpr int kServer = 0, kClient = 1;
constexpr uint64_t kDataTag = 0xB0, kAckTag = 0xACC;

uint32_t seed_of(long win, int j) { return (uint32_t)(win * 7919 + j); }

void stream_one(Endpoint& ep, BenchCq& cq, const std::vector<fi_addr_t>& addr, const std::string& test, StreamOp op,
                size_t size, int window, long iters) {
    const long warm = std::max(1L, iters / 10);
    const long total = warm + iters;
    std::vector<std::vector<uint8_t>> bufs((size_t)window, make_buf(size));
    std::vector<OpCtx> ctx((size_t)window);
    OpCtx ack_ctx;
    uint8_t ack = 0;
    const bool verify = verify_mode();
    for (int j = 0; j < window; ++j) fill(bufs[(size_t)j].data(), size, seed_of(0, j));
    if (rank() == kServer) {
        auto post_window = [&] {
            for (int j = 0; j < window; ++j)
                cq.post("fi_trecv", [&] {
                    return fi_trecv(ep.ep, bufs[(size_t)j].data(), size, nullptr, FI_ADDR_UNSPEC, kDataTag, 0,
                                    &ctx[(size_t)j].fctx);
                });
        };
        post_window();
        barrier([&] { cq.poll(); });
        for (long w = 0; w < total; ++w) {
            cq.wait_all(ctx, (size_t)window, "stream receive");
            // every window in verify mode, and always the last one
            if (verify || w == total - 1)
                for (int j = 0; j < window; ++j)
                    check(bufs[(size_t)j].data(), size, verify ? seed_of(w, j) : seed_of(0, j), "stream payload");
            if (w + 1 < total) post_window();
            cq.post("ack fi_tsend", [&] {
                return fi_tsend(ep.ep, &ack, 1, nullptr, addr[kClient], kAckTag, &ack_ctx.fctx);
            });
            cq.wait(&ack_ctx, "ack send");
        }
        return;
    }
    barrier([&] { cq.poll(); });
    double t0 = 0;
    for (long w = 0; w < total; ++w) {
        if (w == warm) t0 = now_s();
        if (verify)
            for (int j = 0; j < window; ++j) fill(bufs[(size_t)j].data(), size, seed_of(w, j));
        cq.post("ack fi_trecv", [&] {
            return fi_trecv(ep.ep, &ack, 1, nullptr, FI_ADDR_UNSPEC, kAckTag, 0, &ack_ctx.fctx);
        });
        for (int j = 0; j < window; ++j) {
            void* b = bufs[(size_t)j].data();
            if (op == StreamOp::kTInject)
                cq.post("fi_tinject", [&] { return fi_tinject(ep.ep, b, size, addr[kServer], kDataTag); });
            else if (op == StreamOp::kTSendMore)
                cq.post("fi_tsendmsg", [&] {
                    struct iovec iov = {b, size};
                    struct fi_msg_tagged m = {};
                    m.msg_iov = &iov;
                    m.iov_count = 1;
                    m.addr = addr[kServer];
                    m.tag = kDataTag;
                    m.context = &ctx[(size_t)j].fctx;
                    return fi_tsendmsg(ep.ep, &m, j + 1 < window ? FI_MORE | FI_COMPLETION : FI_COMPLETION);
                });
            else
                cq.post("fi_tsend", [&] {
                    return fi_tsend(ep.ep, b, size, nullptr, addr[kServer], kDataTag, &ctx[(size_t)j].fctx);
                });
        }
        if (op != StreamOp::kTInject) cq.wait_all(ctx, (size_t)window, "stream send");
        cq.wait(&ack_ctx, "window ack");
    }
    double secs = now_s() - t0;
    double msgs = (double)iters * window;
    print_result(g_opt.prov, test, size, iters * window, secs / msgs * 1e6, (double)size * msgs / secs / 1e6,
                 msgs / secs / 1e6);
}
}  // namespace

void run_stream_bench(const std::string& test, StreamOp op, const std::vector<size_t>& sizes, int window,
                      long iters, long short_iters) {
    const int W = g_opt.window > 0 ? g_opt.window : window;
    const std::string name = test;
    const std::vector<size_t> sz = bench_sizes(sizes);
    const long n = bench_iters(iters, short_iters);
    Case c{name, 2, [=] {
               Endpoint ep;
               auto addr = connect_all(ep);
               BenchCq cq(ep);
               for (size_t s : sz) {
                   if (op == StreamOp::kTInject)
                       FT_CHECK(s <= ep.info->tx_attr->inject_size, "size %zu exceeds inject_size %zu", s,
                                ep.info->tx_attr->inject_size);
                   stream_one(ep, cq, addr, name, op, s, W, n);
               }
               barrier([&] { cq.poll(); });
           }};
    std::exit(run_case(c) ? 0 : 1);
}

}  // namespace ft
