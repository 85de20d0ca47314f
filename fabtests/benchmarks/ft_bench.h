// pmfabric benchmarks: shared pieces (result line, iteration counts, a
// low-overhead completion waiter, the windowed streaming loop).
#pragma once

#include <string>
#include <vector>

#include "ft_fabric.h"

namespace ft {

// One machine-readable line:
// prov=<p> test=<t> size=<n> iters=<i> lat_us=<..> bw_MBps=<..> mrate_Mps=<..>
void print_result(const std::string& prov, const std::string& test, size_t size, long iters, double lat_us,
                  double bw_MBps, double mrate_Mps);

// -n if given, else `normal` (or `short_iters` with --short).
long bench_iters(long normal, long short_iters);

// With FT_PP_SPREAD=1 a ping-pong also records every timed round trip and
// prints their spread to stderr (half round trips: median, 90th, 99th and
// 99.9th percentiles, mean; then, per band of durations, how many and what
// they add to the mean), to tell a slower common path from a longer tail.
class RoundTrips {
public:
    explicit RoundTrips(long iters);
    void mark() {  // once per round trip, at its start (and once after the last)
        if (on_) t_.push_back(now_s());
    }
    void report(const char* what) const;
private:
    bool on_ = false;
    std::vector<double> t_;
};

// -S if given, else the defaults.
std::vector<size_t> bench_sizes(const std::vector<size_t>& defaults);
inline bool verify_mode() { return g_opt.verbose; }  // -v verifies every payload

// Completion waiter for benchmarks: reads the CQ directly and remembers
// completed contexts, so waits for specific operations cost little.
class BenchCq {
public:
    // sread: block in fi_cq_sread (the CQ needs a wait object) instead of
    // spinning on fi_cq_read.
    explicit BenchCq(Endpoint& ep, bool sread = false) : ep_(ep), sread_(sread) {}
    void wait(void* ctx, const char* what, double timeout_s = kWait);
    void wait_all(const std::vector<OpCtx>& ctxs, size_t n, const char* what);
    void poll();
    // Retry while -FI_EAGAIN, polling the CQ in between; bounded.
    template <class F>
    void post(const char* what, F&& f) {
        double deadline = -1;
        for (unsigned spins = 0;; ++spins) {
            ssize_t rc = f();
            if (rc == 0) return;
            FT_CHECK(rc == -FI_EAGAIN, "%s: %zd (%s)", what, rc, errstr(rc));
            poll();
            if (spins % 1024 == 0) {
                double t = now_s();
                if (deadline < 0) deadline = t + kWait;
                FT_CHECK(t < deadline, "%s: -FI_EAGAIN for %.0fs", what, kWait);
            }
        }
    }

private:
    bool take(void* ctx);
    Endpoint& ep_;
    bool sread_;
    std::vector<void*> done_;
};

// kTSendMore: fi_tsendmsg with FI_MORE on every send of a window but the last.
enum class StreamOp { kTSend, kTInject, kTSendMore };

// Windowed one-way stream, client (rank 1) -> server (rank 0): per window the
// client posts `window` messages and waits for their completions (none for
// inject), the server has the window's receives pre-posted and acks each
// window after re-posting. Prints one result line (from the client).
void run_stream_bench(const std::string& test, StreamOp op, const std::vector<size_t>& sizes, int window,
                      long iters, long short_iters);

}  // namespace ft
