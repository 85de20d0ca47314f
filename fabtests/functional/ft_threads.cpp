// FI_THREAD_SAFE: four threads per process share one endpoint and CQ and run
// tagged ping-pongs concurrently; every payload is verified.
#include <atomic>
#include <thread>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr int kServer = 0, kThreads = 4, kIters = 200;
constexpr uint64_t kReplyBit = 1ull << 40;

size_t size_for(int i) {
    static const size_t sizes[] = {8, 256, 4096, 65536, 0, 1000};
    return sizes[i % 6];
}
uint64_t tag_for(int t, int i) { return ((uint64_t)t << 32) | (uint64_t)i; }
uint32_t seed_for(int t, int i, bool reply) { return (uint32_t)(t * 100000 + i * 2 + (reply ? 1 : 0)); }

void worker(Endpoint& ep, fi_addr_t peer, int t) {
    for (int i = 0; i < kIters; ++i) {
        const size_t len = size_for(i + t);
        const uint64_t tag = tag_for(t, i);
        if (rank() == kServer) {
            auto r = post_recv(ep, 65536, true, tag);
            complete_recv(ep, *r, {.len = len, .seed = seed_for(t, i, false), .tag = tag});
            auto s = post_send(ep, peer, len, seed_for(t, i, true), true, tag | kReplyBit);
            complete_send(ep, *s);
        } else {
            auto r = post_recv(ep, 65536, true, tag | kReplyBit);
            auto s = post_send(ep, peer, len, seed_for(t, i, false), true, tag);
            complete_send(ep, *s);
            complete_recv(ep, *r, {.len = len, .seed = seed_for(t, i, true), .tag = tag | kReplyBit});
        }
    }
}

void case_tagged() {
    EpConfig cfg;
    cfg.thread_safe = true;
    Endpoint ep(cfg);
    FT_EQ(ep.info->domain_attr->threading, FI_THREAD_SAFE, "domain threading");
    auto addr = connect_all(ep);
    const fi_addr_t peer = addr[(size_t)(1 - rank())];
    barrier([&] { ep.progress(); });
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            try {
                worker(ep, peer, t);
            } catch (const Failure&) {
                ++failures;
            }
        });
    for (auto& th : threads) th.join();
    FT_CHECK(failures == 0, "%d of %d threads failed (see above)", failures.load(), kThreads);
    ep.expect_quiet(0.1, "after all threads finished");
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, {{"tagged", 2, case_tagged}}); }
