// ft_exit: a process that calls exit() with its libfabric objects open and
// traffic in flight must end cleanly. libfabric unloads the provider DSO
// from its destructor (fi_fini); a progress thread of the provider that
// still ran then would execute unmapped code (SIGSEGV). Each case runs its
// two-rank scenario -n times (default 50) in fresh processes, two runs at a
// time, and fails if in any run a rank dies by a signal, exits non-zero or
// hangs (each run is bounded by -T, at most 15 s; all of them by 150 s).
//
// Cases:
//   traffic       default progress: fabric, domain, AV, CQ, endpoint open, a
//                 rendezvous-size and small tagged sends in flight both ways,
//                 a receive posted; then exit(0) after 0-3 ms, nothing closed
//   traffic_auto  the same with FI_PROGRESS_AUTO (the progress thread owns
//                 progress; it is busy with the transfers when exit() comes)
//   in_call       FI_PROGRESS_AUTO; after a completed exchange, exit(0) from a
//                 signal handler that interrupts the main thread inside
//                 fi_cq_read, where it may hold the provider's domain lock
//                 for good: stopping the progress thread must not wait for it
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "ft_fabric.h"

using namespace ft;

namespace {

constexpr size_t kBig = 1u << 20;
constexpr uint64_t kTag = 0xE417;

std::mt19937 rng_for_rank() { return std::mt19937((unsigned)getpid() * 2654435761u); }

// Opens everything (never closed: the objects leak on purpose), connects to
// the other rank and starts transfers both ways; returns when at least one
// completion arrived, so that traffic really flows.
Endpoint& start_traffic(fi_progress progress, fi_addr_t* peer) {
    EpConfig cfg;
    cfg.progress = progress;
    auto* ep = new Endpoint(cfg);
    FT_CHECK(progress == FI_PROGRESS_UNSPEC || ep->info->domain_attr->data_progress == progress,
             "fi_getinfo granted data progress %d, asked %d", (int)ep->info->domain_attr->data_progress,
             (int)progress);
    auto addr = connect_all(*ep);
    *peer = addr[1 - rank()];
    // Never freed: the transfers may still use them while exit() runs.
    auto& big_in = *new std::vector<uint8_t>(kBig);
    auto& big_out = *new std::vector<uint8_t>(kBig);
    auto& small = *new std::vector<uint8_t>(64);
    auto& rctx = *new OpCtx;
    auto& sctx = *new OpCtx;
    auto* small_ctx = new OpCtx[8];
    ep->post("fi_trecv", [&] {
        return fi_trecv(ep->ep, big_in.data(), kBig, nullptr, FI_ADDR_UNSPEC, kTag, 0, &rctx.fctx);
    });
    ep->post("fi_tsend big", [&] { return fi_tsend(ep->ep, big_out.data(), kBig, nullptr, *peer, kTag, &sctx.fctx); });
    for (int i = 0; i < 8; ++i)
        ep->post("fi_tsend small", [&] {
            return fi_tsend(ep->ep, small.data(), small.size(), nullptr, *peer, kTag + 1, &small_ctx[i].fctx);
        });
    ep->wait_any("a first completion");
    return *ep;
}

[[noreturn]] void exit_soon() {
    auto rng = rng_for_rank();
    usleep(std::uniform_int_distribution<int>(0, 3000)(rng));
    std::fflush(stdout);
    std::fflush(stderr);
    std::exit(0);
}

void case_traffic(fi_progress progress) {
    fi_addr_t peer;
    start_traffic(progress, &peer);
    barrier();  // both ranks have traffic in flight
    exit_soon();
}

extern "C" void exit_from_handler(int) { std::exit(0); }

void case_in_call() {
    // Traffic first, all of it completed (receives posted for every
    // message): what follows must not allocate memory, since exit() from a
    // signal handler that interrupted malloc would hang in the C library
    // whatever the provider does. For that, live statistics are off: with
    // them on, fi_cq_read builds their text every 100 ms (malloc), and
    // exit() from a signal that came in there waited for the arena lock in
    // libfabric's destructor for good (seen about once in 300 runs; every
    // few runs with a publication on each call). This case is about the
    // provider's own lock.
    set_prov_var("LIVE_STATS", "0");
    EpConfig cfg;
    cfg.progress = FI_PROGRESS_AUTO;
    auto* ep = new Endpoint(cfg);
    auto addr = connect_all(*ep);
    fi_addr_t peer = addr[1 - rank()];
    auto& big_in = *new std::vector<uint8_t>(kBig);
    auto& big_out = *new std::vector<uint8_t>(kBig);
    auto* small = new uint8_t[16][64];
    auto* ctx = new OpCtx[18];
    ep->post("fi_trecv", [&] { return fi_trecv(ep->ep, big_in.data(), kBig, nullptr, FI_ADDR_UNSPEC, kTag, 0, &ctx[0].fctx); });
    for (int i = 0; i < 8; ++i)
        ep->post("fi_trecv small", [&] {
            return fi_trecv(ep->ep, small[i], 64, nullptr, FI_ADDR_UNSPEC, kTag + 1, 0, &ctx[1 + i].fctx);
        });
    barrier([&] { ep->progress(); });
    ep->post("fi_tsend big", [&] { return fi_tsend(ep->ep, big_out.data(), kBig, nullptr, peer, kTag, &ctx[9].fctx); });
    for (int i = 0; i < 8; ++i)
        ep->post("fi_tsend small", [&] {
            return fi_tsend(ep->ep, small[8 + i], 64, nullptr, peer, kTag + 1, &ctx[10 + i].fctx);
        });
    for (int i = 0; i < 18; ++i) ep->expect_ok(&ctx[i], "transfer before the exit");
    barrier([&] { ep->progress(); });
    struct sigaction sa {};
    sa.sa_handler = exit_from_handler;
    sigemptyset(&sa.sa_mask);
    FT_CHECK(sigaction(SIGUSR1, &sa, nullptr) == 0, "sigaction: %s", strerror(errno));
    pthread_t main_thread = pthread_self();
    // The shooter: after 1-10 ms, interrupt the main thread (busy in
    // fi_cq_read below, so often holding the domain lock) with the signal
    // whose handler calls exit(0). The progress thread (automatic
    // progress) then finds the lock taken for good.
    std::thread([main_thread] {
        auto rng = rng_for_rank();
        usleep(std::uniform_int_distribution<int>(1000, 10000)(rng));
        pthread_kill(main_thread, SIGUSR1);
    }).detach();
    fi_cq_tagged_entry e[8];
    double deadline = now_s() + 5;
    while (now_s() < deadline) (void)fi_cq_read(ep->cq, e, 8);
    FT_FAIL("the signal that calls exit() never came");
}

}  // namespace

int main(int argc, char** argv) {
    const std::vector<Case> cases = {
        {"traffic", 2, [] { case_traffic(FI_PROGRESS_UNSPEC); }},
        {"traffic_auto", 2, [] { case_traffic(FI_PROGRESS_AUTO); }},
        {"in_call", 2, case_in_call},
    };
    parse_options(argc, argv);
    if (g_opt.list) {
        for (const auto& c : cases) std::printf("%s\n", c.name.c_str());
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    g_opt.timeout_s = std::min(g_opt.timeout_s, 15.0);
    const long runs = g_opt.iters > 0 ? g_opt.iters : 50;
    constexpr int kWorkers = 2;     // run pairs side by side: most of a run is waiting
    constexpr double kBound = 150;  // seconds for all the runs of a case
    int ran = 0, failed = 0;
    for (const auto& c : cases) {
        if (!g_opt.test.empty() && g_opt.test != c.name) continue;
        ++ran;
        set_identity("", c.name, -1);
        double t0 = now_s();
        // Each worker process supervises its share of the runs, one after
        // the other, and stops at its first failure.
        pid_t workers[kWorkers];
        int nworkers = 0;
        for (int w = 0; w < kWorkers && w < runs; ++w) {
            long mine = runs / kWorkers + (w < runs % kWorkers ? 1 : 0);
            pid_t pid = fork();
            if (pid == 0) {
                for (long i = 0; i < mine; ++i) {
                    bool ok = false;
                    try {
                        ok = run_case(c);
                    } catch (const Failure&) {
                    }
                    if (!ok) {
                        std::fprintf(stderr, "[%s] worker %d: run %ld of %ld failed\n", c.name.c_str(), w, i + 1, mine);
                        _exit(1);
                    }
                    if (now_s() - t0 > kBound) {
                        std::fprintf(stderr, "[%s] worker %d: %ld runs took more than %.0f s\n", c.name.c_str(), w,
                                     i + 1, kBound);
                        _exit(1);
                    }
                }
                _exit(0);
            }
            FT_CHECK(pid > 0, "fork: %s", strerror(errno));
            workers[nworkers++] = pid;
        }
        bool ok = true;
        for (int w = 0; w < nworkers; ++w) {
            int st = 0;
            while (waitpid(workers[w], &st, 0) < 0 && errno == EINTR) {
            }
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) ok = false;
        }
        std::printf("%s %s (prov %s): %ld runs in %.1f s\n", ok ? "PASS" : "FAIL", c.name.c_str(),
                    g_opt.prov.c_str(), runs, now_s() - t0);
        std::fflush(stdout);
        if (!ok) ++failed;
    }
    if (ran == 0) {
        std::fprintf(stderr, "no case named '%s' (use -l)\n", g_opt.test.c_str());
        return 2;
    }
    return failed ? 1 : 0;
}
