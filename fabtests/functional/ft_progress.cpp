// Progress models (fi_domain(3) "Progress"): FI_PROGRESS_AUTO must be
// granted when asked for, and then really mean that operations complete, and
// that peers' operations needing this endpoint (RMA and atomic targets,
// rendezvous, acknowledgements) progress, while the application makes no
// libfabric call at all.
//
// Cases:
//   getinfo      hints asking FI_PROGRESS_AUTO get an entry reporting AUTO
//                (control and data); FI_PROGRESS_MANUAL gets MANUAL; UNSPEC
//                gets the provider's default, MANUAL; with the provider's
//                progress thread disabled (FI_<PROV>_PROGRESS_THREAD=0) AUTO
//                gets -FI_ENODATA and MANUAL still an entry
//   target_sleeps  2 ranks, AUTO. The target registers memory, posts a
//                receive for a rendezvous-size message and then sleeps
//                (sleep(), no libfabric call) for 5 s. Meanwhile the
//                initiator does small and 1 MiB writes and reads, a
//                non-fetching, a fetching and a compare atomic, and a 1 MiB
//                tagged send to it: every one must complete within 4 s.
//                Back from its sleep, before any libfabric call, the target
//                finds the written data, the atomics' results and the
//                received message in its memory; then the receive's
//                completion is in its CQ.
//   busy_lock    the same, but instead of sleeping the target spends the 5 s
//                in a tight loop of fi_cntr_add (each takes the domain lock,
//                none progresses): the progress thread must not be starved
//   idle_cpu     AUTO and then manual: with an endpoint open and connected and
//                nothing to do, a process that sleeps 2 s uses under 40 ms of
//                CPU (the progress thread sleeps on the devices' fds)
//   quiet_helper AUTO and then manual: while the application polls its CQ
//                (300 ms of fi_cq_read), the progress thread stays asleep: its
//                voluntary context switches (every thread named pm-progress,
//                from /proc/self/task) stay under 20, plus 4 for each time
//                the polling loop itself was away over 0.5 ms (descheduled on
//                a busy machine, maybe holding the domain lock), plus for
//                each millisecond away 2 (manual: a look per interval) or 25
//                (AUTO: the thread insists on the lock, napping 50 us between
//                tries). A thread that woke every interval (1 ms) to look
//                would switch about 300 times.
//   slow_poller  AUTO and then manual, progress interval 20 ms: an
//                application that calls fi_cq_read only every 3 ms (fewer
//                than 16 calls per interval, so its calls seldom read the
//                clock) is never served by the progress thread between its
//                calls: the endpoint statistics' helper_serves (its
//                statistics page) does not grow during 3 s of such calls,
//                but for each time two calls were a whole interval apart.
//                Then (if it did not step in at all) 300 ms with no call:
//                it does (helper_serves grows).
//   watch_on_tick AUTO and then manual: while the application polls its CQ,
//                the progress thread's watch timer (the process's timerfd)
//                is set by the polling calls as an absolute time on the
//                kernel's tick (a multiple of the coarse clock's resolution):
//                read from /proc/self/fdinfo after each 20 ms of polling (up
//                to 200 times), it shows TFD_TIMER_ABSTIME at least three
//                times, and every such setting's expiry lies on a tick
//                (within the time the read took, plus 20 us; a read that
//                took about a quarter of a tick is not counted). Set off the
//                tick, a push made the CPU's timer interrupt come earlier
//                than the tick's, which a virtual machine pays with an exit
//                to the host.
//   no_alloc     manual progress, live statistics on (the default): after one
//                exchange, 400 ms of fi_cq_read with nothing to read allocate
//                nothing (every malloc, calloc, realloc and memalign of the
//                process is counted), while the endpoint's statistics page
//                (pmstat.h) is published at least three times meanwhile. An
//                allocation there is what a signal handler that calls exit()
//                can interrupt (ft_exit in_call). Not in a sanitizer build,
//                whose allocator is its own.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pmfabric/pmstat.h"

#include "ft_rma.h"
#include "ft_xfer.h"

using namespace ft;

// ---------------------------------------------------- counting allocator
// Every allocation of the process (the program, libfabric, the provider)
// goes through these while g_counting is on; free() stays glibc's (the
// memory comes from glibc's allocator either way).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FT_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define FT_COUNT_ALLOCS 0
#endif
#endif
#ifndef FT_COUNT_ALLOCS
#define FT_COUNT_ALLOCS 1
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocs{0};
[[maybe_unused]] inline void count_alloc() {  // unused where FT_COUNT_ALLOCS is 0
    if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

#if FT_COUNT_ALLOCS
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
    count_alloc();
    return __libc_malloc(n);
}
void* calloc(size_t k, size_t n) {
    count_alloc();
    return __libc_calloc(k, n);
}
void* realloc(void* p, size_t n) {
    count_alloc();
    return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
    count_alloc();
    return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
    count_alloc();
    return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
    if (a < sizeof(void*) || (a & (a - 1))) return EINVAL;
    count_alloc();
    void* p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
}
#endif

namespace {

constexpr int kInit = 0, kTarget = 1;
constexpr uint32_t kAway = 0x9A0001u, kDone = 0x9A0002u;
constexpr size_t kBig = 1u << 20;
constexpr uint64_t kTag = 0x9A9A;
constexpr double kAwaySecs = 5.0;   // the target makes no progress call this long
constexpr double kBoundSecs = 4.0;  // every operation completes within this

// Target memory: a write area, a read area, a small write, a small read,
// three atomic words.
constexpr size_t kWriteOff = 0, kReadOff = kBig, kSmallWrOff = 2 * kBig, kSmallRdOff = 2 * kBig + 64,
                 kAtomOff = 2 * kBig + 128, kMemLen = 2 * kBig + 4096;
constexpr uint32_t kSeedWrite = 11, kSeedRead = 12, kSeedSmallWr = 13, kSeedSmallRd = 14, kSeedMsg = 15;
constexpr uint64_t kSum0 = 1000, kFetch0 = 2000, kCas0 = 3000;

std::string prov_var(const char* knob) {
    std::string p = g_opt.prov;
    for (char& ch : p) ch = (char)toupper((unsigned char)ch);
    return "FI_" + p + "_" + knob;
}

// ---------------------------------------------------------------- getinfo
int getinfo_progress(fi_progress want, fi_progress* ctrl, fi_progress* data) {
    EpConfig cfg;
    cfg.progress = want;
    fi_info* hints = make_hints(cfg);
    fi_info* info = nullptr;
    int rc = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc == 0) {
        FT_CHECK(info, "fi_getinfo returned 0 and no entry");
        *ctrl = info->domain_attr->control_progress;
        *data = info->domain_attr->data_progress;
        for (fi_info* i = info; i; i = i->next)
            FT_CHECK(i->domain_attr->control_progress == *ctrl && i->domain_attr->data_progress == *data,
                     "entries disagree on progress");
        fi_freeinfo(info);
    }
    return rc;
}

const char* prog_name(fi_progress p) {
    switch (p) {
    case FI_PROGRESS_AUTO: return "AUTO";
    case FI_PROGRESS_MANUAL: return "MANUAL";
    case FI_PROGRESS_UNSPEC: return "UNSPEC";
    default: return "?";
    }
}

void case_getinfo() {
    fi_progress c = FI_PROGRESS_UNSPEC, d = FI_PROGRESS_UNSPEC;
    int rc = getinfo_progress(FI_PROGRESS_AUTO, &c, &d);
    FT_CHECK(rc == 0, "fi_getinfo with FI_PROGRESS_AUTO hints: %d (%s)", rc, errstr(rc));
    FT_CHECK(c == FI_PROGRESS_AUTO && d == FI_PROGRESS_AUTO, "AUTO hints: granted control %s, data %s", prog_name(c),
             prog_name(d));
    rc = getinfo_progress(FI_PROGRESS_MANUAL, &c, &d);
    FT_CHECK(rc == 0 && c == FI_PROGRESS_MANUAL && d == FI_PROGRESS_MANUAL,
             "MANUAL hints: rc %d, control %s, data %s", rc, prog_name(c), prog_name(d));
    rc = getinfo_progress(FI_PROGRESS_UNSPEC, &c, &d);
    FT_CHECK(rc == 0 && c == FI_PROGRESS_MANUAL && d == FI_PROGRESS_MANUAL,
             "UNSPEC hints: rc %d, control %s, data %s (the default is MANUAL)", rc, prog_name(c), prog_name(d));
    // An endpoint really opens with AUTO.
    {
        EpConfig cfg;
        cfg.progress = FI_PROGRESS_AUTO;
        Endpoint ep(cfg);
        FT_EQ(ep.info->domain_attr->data_progress, FI_PROGRESS_AUTO, "data progress of the opened endpoint");
    }
    std::string var = prov_var("PROGRESS_THREAD");
    setenv(var.c_str(), "0", 1);
    rc = getinfo_progress(FI_PROGRESS_AUTO, &c, &d);
    FT_CHECK(rc == -FI_ENODATA, "%s=0: fi_getinfo with AUTO hints: expected -FI_ENODATA, got %d (%s)", var.c_str(), rc,
             errstr(rc));
    rc = getinfo_progress(FI_PROGRESS_MANUAL, &c, &d);
    FT_CHECK(rc == 0, "%s=0: fi_getinfo with MANUAL hints: %d (%s)", var.c_str(), rc, errstr(rc));
    unsetenv(var.c_str());
    info("AUTO granted as asked, MANUAL by default, AUTO refused with %s=0", var.c_str());
}

// --------------------------------------------------------- target away
enum class Away { kSleep, kBusyLock };

void check_target_memory(const uint8_t* mem, const std::vector<uint8_t>& msg, uint64_t fetched_total) {
    check(mem + kWriteOff, kBig, kSeedWrite, "1 MiB fi_write data at the target");
    check(mem + kSmallWrOff, 64, kSeedSmallWr, "64-byte fi_write data at the target");
    const uint64_t* w = reinterpret_cast<const uint64_t*>(mem + kAtomOff);
    FT_EQ(w[0], kSum0 + 5, "word updated by fi_atomic(FI_SUM, 5)");
    FT_EQ(w[1], kFetch0 + 7, "word updated by fi_fetch_atomic(FI_SUM, 7)");
    FT_EQ(w[2], 0xCA5ull, "word swapped by fi_compare_atomic(FI_CSWAP)");
    check(msg.data(), kBig, kSeedMsg, "1 MiB rendezvous message in the posted receive");
    (void)fetched_total;
}

void run_target(Endpoint& ep, Away how) {
    auto* mem = static_cast<uint8_t*>(aligned_alloc(4096, kMemLen));
    memset(mem, 0, kMemLen);
    fill(mem + kReadOff, kBig, kSeedRead);
    fill(mem + kSmallRdOff, 64, kSeedSmallRd);
    uint64_t* w = reinterpret_cast<uint64_t*>(mem + kAtomOff);
    w[0] = kSum0;
    w[1] = kFetch0;
    w[2] = kCas0;
    Region r(ep, mem, kMemLen, FI_REMOTE_READ | FI_REMOTE_WRITE, 0x9A);
    std::vector<uint8_t> msg(kBig);
    OpCtx rctx;
    ep.post("fi_trecv 1 MiB", [&] {
        return fi_trecv(ep.ep, msg.data(), kBig, nullptr, FI_ADDR_UNSPEC, kTag, 0, &rctx.fctx);
    });
    fid_cntr* cntr = nullptr;
    if (how == Away::kBusyLock) {
        fi_cntr_attr attr{};
        attr.events = FI_CNTR_EVENTS_COMP;
        FT_CALL(fi_cntr_open(ep.domain, &attr, &cntr, nullptr));
        ep.adopt(&cntr->fid);
    }
    send_remote(kInit, r.remote());
    signal_peer(kInit, kAway);
    // From here until the check, no libfabric call that progresses.
    const double t0 = now_s();
    long adds = 0;
    if (how == Away::kSleep) {
        double left;
        while ((left = kAwaySecs - (now_s() - t0)) > 0) usleep((useconds_t)(left * 1e6));
    } else {
        while (now_s() - t0 < kAwaySecs) {
            for (int i = 0; i < 64; ++i) (void)fi_cntr_add(cntr, 1);
            adds += 64;
        }
    }
    check_target_memory(mem, msg, 0);
    if (how == Away::kBusyLock) info("target: %ld fi_cntr_add calls in %.1f s", adds, kAwaySecs);
    // The receive completed while the application was away: its entry is there.
    Comp c = ep.expect_ok(&rctx, "the 1 MiB receive", 1.0);
    FT_EQ(c.len, kBig, "length of the received message");
    wait_signal_progress(ep, kInit, kDone);
    barrier([&] { ep.progress(); });
    r.close();
    free(mem);
}

void run_initiator(Endpoint& ep, fi_addr_t target) {
    RemoteMr rm = recv_remote(ep, kTarget);
    std::vector<uint8_t> wbig(kBig), rbig(kBig), msg(kBig);
    uint8_t wsmall[64], rsmall[64];
    fill(wbig.data(), kBig, kSeedWrite);
    fill(wsmall, 64, kSeedSmallWr);
    fill(msg.data(), kBig, kSeedMsg);
    const uint64_t five = 5, seven = 7, cas_new = 0xCA5, cas_cmp = kCas0;
    uint64_t fetched = 0, cas_old = 0;
    OpCtx ctx[8];
    const char* what[8] = {"fi_write 64 B",   "fi_write 1 MiB",          "fi_read 64 B",
                           "fi_read 1 MiB",   "fi_atomic(FI_SUM)",       "fi_fetch_atomic(FI_SUM)",
                           "fi_compare_atomic(FI_CSWAP)", "fi_tsend 1 MiB (rendezvous)"};
    wait_signal_progress(ep, kTarget, kAway);
    const double t0 = now_s();
    ep.post(what[0], [&] { return fi_write(ep.ep, wsmall, 64, nullptr, target, rm.at(kSmallWrOff), rm.key, &ctx[0].fctx); });
    ep.post(what[1], [&] { return fi_write(ep.ep, wbig.data(), kBig, nullptr, target, rm.at(kWriteOff), rm.key, &ctx[1].fctx); });
    ep.post(what[2], [&] { return fi_read(ep.ep, rsmall, 64, nullptr, target, rm.at(kSmallRdOff), rm.key, &ctx[2].fctx); });
    ep.post(what[3], [&] { return fi_read(ep.ep, rbig.data(), kBig, nullptr, target, rm.at(kReadOff), rm.key, &ctx[3].fctx); });
    ep.post(what[4], [&] {
        return fi_atomic(ep.ep, &five, 1, nullptr, target, rm.at(kAtomOff), rm.key, FI_UINT64, FI_SUM, &ctx[4].fctx);
    });
    ep.post(what[5], [&] {
        return fi_fetch_atomic(ep.ep, &seven, 1, nullptr, &fetched, nullptr, target, rm.at(kAtomOff + 8), rm.key,
                               FI_UINT64, FI_SUM, &ctx[5].fctx);
    });
    ep.post(what[6], [&] {
        return fi_compare_atomic(ep.ep, &cas_new, 1, nullptr, &cas_cmp, nullptr, &cas_old, nullptr, target,
                                 rm.at(kAtomOff + 16), rm.key, FI_UINT64, FI_CSWAP, &ctx[6].fctx);
    });
    ep.post(what[7], [&] { return fi_tsend(ep.ep, msg.data(), kBig, nullptr, target, kTag, &ctx[7].fctx); });
    double last = 0;
    for (int i = 0; i < 8; ++i) {
        double left = kBoundSecs - (now_s() - t0);
        Comp c = ep.wait_ctx(&ctx[i], what[i], left > 0.01 ? left : 0.01);
        FT_CHECK(!c.is_err, "%s to a target that makes no libfabric call: %s", what[i], describe(c).c_str());
        last = std::max(last, now_s() - t0);
    }
    check(rsmall, 64, kSeedSmallRd, "64 bytes read");
    check(rbig.data(), kBig, kSeedRead, "1 MiB read");
    FT_EQ(fetched, kFetch0, "value returned by fi_fetch_atomic");
    FT_EQ(cas_old, kCas0, "value returned by fi_compare_atomic");
    info("8 operations on a target away from libfabric all completed in %.3f s (bound %.1f s, target away %.1f s)",
         last, kBoundSecs, kAwaySecs);
    signal_peer(kTarget, kDone);
    barrier([&] { ep.progress(); });
}

void case_target_away(Away how) {
    EpConfig cfg = one_sided_config(kMrVirt);
    cfg.progress = FI_PROGRESS_AUTO;
    Endpoint ep(cfg);
    FT_EQ(ep.info->domain_attr->data_progress, FI_PROGRESS_AUTO, "granted data progress");
    auto addr = connect_all(ep);
    if (rank() == kTarget) run_target(ep, how);
    else run_initiator(ep, addr[kTarget]);
}

// --------------------------------------------------------------- idle_cpu
// Connects the two ranks and makes one exchange of 64 bytes each way
// (verified), so that the peers know each other; both ranks then at a
// barrier.
void exchange_once(Endpoint& ep, uint32_t seed, uint64_t tag) {
    auto addr = connect_all(ep);
    auto rx = post_recv(ep, 64, true, tag);
    barrier([&] { ep.progress(); });
    auto tx = post_send(ep, addr[1 - rank()], 64, seed, true, tag);
    complete_send(ep, *tx);
    RecvExpect e;
    e.len = 64;
    e.seed = seed;
    complete_recv(ep, *rx, e);
    barrier([&] { ep.progress(); });
}

// Runs body(ep, model) on an endpoint of each progress model, AUTO then
// manual, each connected by exchange_once; the ranks meet at a barrier after
// each.
template <class Body>
void each_progress_model(uint32_t seed, uint64_t tag, Body body) {
    for (fi_progress p : {FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL}) {
        EpConfig cfg;
        cfg.progress = p;
        Endpoint ep(cfg);
        exchange_once(ep, seed, tag);
        body(ep, p);
        barrier([&] { ep.progress(); });
    }
}

// Polls the endpoint's CQ, which must stay empty, for `s` seconds with
// fi_cq_read: the calls made, and how often (and how long in all) the loop
// itself was away for over 0.5 ms between two calls.
struct EmptyPoll {
    uint64_t calls = 0;
    long away = 0;
    double away_s = 0;
};
EmptyPoll poll_empty(Endpoint& ep, double s) {
    fi_cq_tagged_entry raw[8];
    ssize_t unexpected = 0;
    EmptyPoll r;
    double t0 = now_s(), prev = t0;
    for (double t = t0; t - t0 < s; t = now_s()) {
        if (t - prev > 0.0005) ++r.away, r.away_s += t - prev;
        prev = t;
        ssize_t n = fi_cq_read(ep.cq, raw, 8);
        if (n != -FI_EAGAIN) unexpected = n;
        r.calls++;
    }
    FT_CHECK(unexpected == 0, "fi_cq_read with nothing to read returned %zd (%s), not -FI_EAGAIN", unexpected,
             errstr(unexpected));
    return r;
}

double cpu_s() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

void case_idle_cpu() {
    each_progress_model(3, 0x1D1E, [](Endpoint&, fi_progress p) {
        usleep(20000);  // the progress thread notices the application is away
        const double c0 = cpu_s(), t0 = now_s();
        usleep(2000000);
        const double used = cpu_s() - c0, el = now_s() - t0;
        info("%s progress: %.1f ms of CPU during %.2f s away from libfabric", prog_name(p), used * 1e3, el);
        FT_CHECK(used < 0.040, "%s progress: an idle process used %.1f ms of CPU in %.2f s (bound 40 ms)",
                 prog_name(p), used * 1e3, el);
    });
}

// ----------------------------------------------------------- quiet_helper
// The voluntary context switches so far of this process's progress threads
// (-1: none found). Yields (the lock insisted on) count as involuntary.
long helper_switches() {
    DIR* d = opendir("/proc/self/task");
    FT_CHECK(d, "opendir /proc/self/task: %s", strerror(errno));
    long sum = -1;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::string dir = std::string("/proc/self/task/") + e->d_name;
        char comm[32] = {};
        FILE* f = fopen((dir + "/comm").c_str(), "r");
        if (!f) continue;
        bool ours = fgets(comm, sizeof comm, f) && strncmp(comm, "pm-progress", 11) == 0;
        fclose(f);
        if (!ours || !(f = fopen((dir + "/status").c_str(), "r"))) continue;
        char line[128];
        long v;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1) sum = (sum < 0 ? 0 : sum) + v;
        fclose(f);
    }
    closedir(d);
    return sum;
}

void case_quiet_helper() {
    each_progress_model(7, 0x9E1, [](Endpoint& ep, fi_progress p) {
        poll_empty(ep, 0.05);  // a thread that stepped in meanwhile goes back to watching
        const long s0 = helper_switches();
        FT_CHECK(s0 >= 0, "no progress thread (a thread named pm-progress) in this process");
        const EmptyPoll r = poll_empty(ep, 0.3);
        const long n = helper_switches() - s0;
        const long per_ms = p == FI_PROGRESS_AUTO ? 25 : 2;
        const long bound = 20 + 4 * r.away + long(per_ms * r.away_s * 1e3);
        info("%s progress: the progress thread switched %ld times in 300 ms of polling (loop away %ld times, "
             "%.1f ms)", prog_name(p), n, r.away, r.away_s * 1e3);
        FT_CHECK(n <= bound, "%s progress: the progress thread switched %ld times while the application polled "
                 "(bound %ld: 20, 4 for each of the %ld times the loop was away over 0.5 ms, %ld per ms away of "
                 "%.1f)", prog_name(p), n, bound, r.away, per_ms, r.away_s * 1e3);
    });
}

// ------------------------------------------------------------ slow_poller
// A consistent copy of a statistics page (pmstat.h: seq even and the same
// before and after the copy; the endpoint, or its progress thread, may be
// writing it). False if it is not a page or stays inconsistent.
bool read_page(int fd, pmstat_page* page) {
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t after = 0;
        if (pread(fd, page, sizeof *page, 0) != (ssize_t)sizeof *page || page->magic != PMSTAT_MAGIC) return false;
        if (pread(fd, &after, sizeof after, offsetof(pmstat_page, seq)) != (ssize_t)sizeof after) return false;
        if (page->seq % 2 == 0 && after == page->seq) return true;
        usleep(100);
    }
    return false;
}

// Calls f(page) for each of this process's statistics pages in PMSTAT_DIR
// (one per endpoint) that reads consistently.
template <class F>
void for_each_page(F f) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s%u-%d-", PMSTAT_PREFIX, (unsigned)getuid(), (int)getpid());
    DIR* d = opendir(PMSTAT_DIR);
    FT_CHECK(d, "opendir %s: %s", PMSTAT_DIR, strerror(errno));
    while (dirent* e = readdir(d)) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        std::string path = std::string(PMSTAT_DIR) + "/" + e->d_name;
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        pmstat_page page;
        if (read_page(fd, &page)) f(page);
        close(fd);
    }
    closedir(d);
}

// A counter of this process's statistics page (its only endpoint's):
// `name` as the page names it ("endpoint.helper_serves").
uint64_t page_counter(const char* name) {
    int found = 0;
    uint64_t v = 0;
    for_each_page([&](const pmstat_page& page) {
        for (uint32_t i = 0; i < page.ncounters && i < PMSTAT_MAX_COUNTERS; i++)
            if (strncmp(page.counters[i].name, name, PMSTAT_NAME_LEN) == 0) {
                v = page.counters[i].value;
                found++;
            }
    });
    FT_CHECK(found == 1, "%d statistics pages of this process in %s have %s (one expected)", found, PMSTAT_DIR,
             name);
    return v;
}

// Calls fi_cq_read (nothing to read) for `s` seconds, one call every
// `every` seconds (0: back to back). Counts in *away the times the thread
// could have seen no call for over `gap` seconds: from just before a call
// (it counts calls as they begin) to the end of the next one, across
// loops (*last: the last call's start, 0 before the first).
void calls_for(Endpoint& ep, double s, double every, double gap, double* last, long* away) {
    fi_cq_tagged_entry raw[8];
    const double t0 = now_s();
    for (double t = t0; t - t0 < s;) {
        const double before = now_s();
        ssize_t n = fi_cq_read(ep.cq, raw, 8);
        FT_CHECK(n == -FI_EAGAIN, "fi_cq_read with nothing to read returned %zd (%s)", n, errstr(n));
        const double called = now_s();
        if (*last > 0 && called - *last > gap) ++*away;
        *last = before;
        while ((t = now_s()) - called < every) {
        }
    }
}

void case_slow_poller() {
    // An interval of 20 ms (read when the domain starts its thread): a loop
    // away that long is rare, and a call every 3 ms is 16 calls in 48 ms,
    // more than the two intervals the calls push the thread's timer ahead.
    set_prov_var("PROGRESS_INTERVAL_US", "20000");
    each_progress_model(11, 0x510, [](Endpoint& ep, fi_progress p) {
        const char* kServes = "endpoint.helper_serves";
        const double gap = 0.02;
        double last = 0;
        long away = 0;
        // Quick calls for 1.2 s: a thread that stepped in before (during the
        // set-up's waits) is back to watching (it sleeps 1 s at most while
        // serving with nothing to do), and the page is published (every
        // 100 ms) with the count as it is while the application calls.
        calls_for(ep, 1.2, 0, gap, &last, &away);  // (its gaps count: s0 may be 100 ms old)
        const uint64_t s0 = page_counter(kServes);
        // 3 s: a thread that stepped in between such calls would do so
        // about once a second (it then serves until it wakes, at most 1 s).
        calls_for(ep, 3.0, 0.003, gap, &last, &away);
        calls_for(ep, 0.25, 0, gap, &last, &away);
        const uint64_t s1 = page_counter(kServes);
        info("%s progress: a call every 3 ms for 3 s (interval 20 ms): the progress thread stepped in %" PRIu64
             " times (allowed %ld: the calls over 20 ms apart)", prog_name(p), s1 - s0, away);
        FT_CHECK(s1 - s0 <= (uint64_t)away, "%s progress: the progress thread stepped in %" PRIu64
                 " times while the application called fi_cq_read every 3 ms (interval 20 ms; allowed %ld)",
                 prog_name(p), s1 - s0, away);
        // The count can grow (the test can fail): the thread, watching since
        // the quick calls unless it stepped in above, steps in during 300 ms
        // without a call (20-60 ms on a quiet machine; each of its wake-ups
        // waits for a CPU when ctest runs busy pollers beside it).
        if (s1 != s0) {
            info("%s progress: it stepped in (allowed): not checking that it steps in", prog_name(p));
            return;
        }
        usleep(300000);
        calls_for(ep, 0.25, 0, gap, &last, &away);
        const uint64_t s2 = page_counter(kServes);
        FT_CHECK(s2 > s1, "%s progress: the progress thread did not step in during 300 ms without a call "
                 "(helper_serves %" PRIu64 ")", prog_name(p), s2);
    });
}

// --------------------------------------------------------------- no_alloc
// The number of publications of this process's statistics pages (the sum
// over its pages in PMSTAT_DIR; one per endpoint).
uint64_t page_updates() {
    uint64_t sum = 0;
    int pages = 0;
    for_each_page([&](const pmstat_page& page) {
        sum += page.updates;
        pages++;
    });
    FT_CHECK(pages > 0, "no statistics page of this process in %s (live statistics are on by default)", PMSTAT_DIR);
    return sum;
}

// ---------------------------------------------------------- watch_on_tick
struct TimerfdState {
    bool abs = false;      // settime flags: TFD_TIMER_ABSTIME
    uint64_t left_ns = 0;  // it_value: time to expiry (0: disarmed)
    uint64_t t0 = 0, t1 = 0;  // CLOCK_MONOTONIC before and after the read
};

uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// The fds of this process's timerfds (its progress threads' watch timers).
std::vector<int> timerfd_fds() {
    std::vector<int> out;
    DIR* d = opendir("/proc/self/fd");
    FT_CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        char link[64] = {};
        std::string path = std::string("/proc/self/fd/") + e->d_name;
        if (readlink(path.c_str(), link, sizeof link - 1) > 0 && strcmp(link, "anon_inode:[timerfd]") == 0)
            out.push_back(atoi(e->d_name));
    }
    closedir(d);
    return out;
}

// One timerfd's setting, from /proc/self/fdinfo (opened before the clock is
// read, so that the read alone lies between t0 and t1).
bool read_timerfd(int fd, TimerfdState* t) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return false;
    t->t0 = mono_ns();
    ssize_t n = read(f, buf, sizeof buf - 1);
    t->t1 = mono_ns();
    close(f);
    if (n <= 0) return false;
    buf[n] = 0;
    unsigned flags = 0;
    long long sec = 0, nsec = 0;
    const char* fl = strstr(buf, "settime flags:");
    const char* iv = strstr(buf, "it_value:");
    if (!fl || !iv || sscanf(fl, "settime flags: %o", &flags) != 1 ||
        sscanf(iv, "it_value: (%lld, %lld)", &sec, &nsec) != 2)
        return false;
    t->abs = flags & 1;
    t->left_ns = uint64_t(sec * 1000000000LL + nsec);
    return true;
}

void case_watch_on_tick() {
    timespec res{};
    FT_CHECK(clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0, "clock_getres: %s", strerror(errno));
    uint64_t tick = uint64_t(res.tv_sec) * 1000000000ull + uint64_t(res.tv_nsec);
    if (tick < 100000 || tick > 20000000) {
        info("the coarse clock's resolution (%" PRIu64 " ns) is not a plausible tick: pushes are not rounded, "
             "only their being absolute is checked", tick);
        tick = 0;
    }
    each_progress_model(9, 0x71C, [tick](Endpoint& ep, fi_progress p) {
        const std::vector<int> fds = timerfd_fds();
        FT_CHECK(!fds.empty(), "no timerfd in this process (the progress thread's watch)");
        // Up to 200 looks, until 3 absolute settings were seen: on a loaded
        // machine the application is descheduled now and then, the thread
        // steps in, and its own (relative) setting stands until the next
        // push, up to an interval later.
        constexpr uint64_t kSlack = 20000;
        int abs_seen = 0, looks = 0;
        for (int i = 0; i < 200 && abs_seen < 3; i++) {
            poll_empty(ep, 0.02);  // the calls push the watch (once per interval)
            for (int fd : fds) {
                TimerfdState t;
                if (!read_timerfd(fd, &t)) continue;
                looks++;
                if (!t.abs) {
                    info("%s progress: timerfd %d set relative (%" PRIu64 " ns left)", prog_name(p), fd, t.left_ns);
                    continue;
                }
                if (!t.left_ns) {
                    info("%s progress: timerfd %d expired", prog_name(p), fd);
                    continue;
                }
                // A read that took too long tells nothing.
                if (tick && t.t1 - t.t0 + 2 * kSlack >= tick / 4) continue;
                abs_seen++;
                if (!tick) continue;
                // The expiry lies in [t0 + left, t1 + left]: a multiple of the tick there (within the slack).
                const uint64_t lo = t.t0 + t.left_ns, hi = t.t1 + t.left_ns;
                const uint64_t m = (hi + kSlack) / tick * tick;
                info("%s progress: watch expires %" PRIu64 "..%" PRIu64 " ns, the tick %" PRIu64
                     " ns, the multiple of it at or below the end %" PRIu64, prog_name(p), lo, hi, tick, m);
                FT_CHECK(m + kSlack >= lo, "%s progress: the watch timer expires at %" PRIu64 "..%" PRIu64
                         " ns, not on the kernel's tick (%" PRIu64 " ns; the multiple below %" PRIu64 ")",
                         prog_name(p), lo, hi, tick, m);
            }
        }
        FT_CHECK(looks > 0, "%s progress: no timerfd could be read from /proc/self/fdinfo", prog_name(p));
        FT_CHECK(abs_seen >= 3, "%s progress: the watch timer was set to an absolute time %d times in %d looks "
                 "while the application polled (3 expected)", prog_name(p), abs_seen, looks);
    });
}

void case_no_alloc() {
    FT_CHECK(FT_COUNT_ALLOCS, "no_alloc: not in a sanitizer build (its allocator replaces malloc)");
    Endpoint ep;
    exchange_once(ep, 5, 0xA110);
    const uint64_t u0 = page_updates();
    g_allocs.store(0);
    g_counting.store(true);
    const uint64_t calls = poll_empty(ep, 0.4).calls;
    g_counting.store(false);
    const uint64_t allocs = g_allocs.load(), u1 = page_updates();
    info("%" PRIu64 " fi_cq_read calls in 0.4 s: %" PRIu64 " allocations, %" PRIu64 " publications of the statistics page",
         calls, allocs, u1 - u0);
    FT_CHECK(u1 - u0 >= 3, "the statistics page was published %" PRIu64 " times in 0.4 s (every 100 ms expected)",
             u1 - u0);
    FT_CHECK(allocs == 0, "%" PRIu64 " allocations in %" PRIu64 " fi_cq_read calls with nothing to read", allocs,
             calls);
    barrier([&] { ep.progress(); });
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"getinfo", 1, case_getinfo},
                        {"target_sleeps", 2, [] { case_target_away(Away::kSleep); }},
                        {"busy_lock", 2, [] { case_target_away(Away::kBusyLock); }},
                        {"idle_cpu", 2, case_idle_cpu},
                        {"quiet_helper", 2, case_quiet_helper},
                        {"slow_poller", 2, case_slow_poller},
                        {"watch_on_tick", 2, case_watch_on_tick},
                        {"no_alloc", 2, case_no_alloc},
                    });
}
