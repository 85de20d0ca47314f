// ft_floor: what the machine allows at best, no libfabric involved.
//  * test=cacheline_pingpong: two processes bounce a value through one cache
//    line each of a MAP_SHARED|MAP_ANONYMOUS mapping (half round trip);
//  * test=memcpy: single-thread memcpy bandwidth at -S bytes (default 1 MiB).
//   ft_floor [-n iters] [-S size] [-c cpu0,cpu1] [-v] [--short]
#include <sys/mman.h>

#include <cstring>

#include "ft_bench.h"
#include "ft_proc.h"

using namespace ft;

namespace {

struct alignas(64) Line {
    uint64_t v;
    char pad[56];
};
Line* g_lines = nullptr;  // [0]: ping (client writes), [1]: pong (server writes)

void spin_until(const Line& l, uint64_t want, const char* what) {
    unsigned spins = 0;
    double deadline = -1;
    while (__atomic_load_n(&l.v, __ATOMIC_ACQUIRE) != want) {
        __builtin_ia32_pause();
        if (++spins % (1u << 20) == 0) {
            double t = now_s();
            if (deadline < 0) deadline = t + kOobTimeout;
            FT_CHECK(t < deadline, "%s: value %llu never arrived", what, (unsigned long long)want);
        }
    }
}

void cacheline_pingpong(long iters) {
    const long warm = iters / 10 + 1;
    barrier();
    double t0 = 0;
    for (long i = 1; i <= warm + iters; ++i) {
        if (rank() == 1) {
            if (i == warm + 1) t0 = now_s();
            __atomic_store_n(&g_lines[0].v, (uint64_t)i, __ATOMIC_RELEASE);
            spin_until(g_lines[1], (uint64_t)i, "pong");
        } else {
            spin_until(g_lines[0], (uint64_t)i, "ping");
            __atomic_store_n(&g_lines[1].v, (uint64_t)i, __ATOMIC_RELEASE);
        }
    }
    if (rank() == 1) {
        double lat_us = (now_s() - t0) / (2.0 * (double)iters) * 1e6;
        print_result("floor", "cacheline_pingpong", 64, iters, lat_us, 64.0 / lat_us, 1.0 / lat_us);
    }
}

void memcpy_bw(size_t size, long iters) {
    std::vector<uint8_t> src(size), dst(size);
    fill(src.data(), size, 1234);
    std::memcpy(dst.data(), src.data(), size);  // fault pages in
    double t0 = now_s();
    for (long i = 0; i < iters; ++i) {
        std::memcpy(dst.data(), src.data(), size);
        __asm__ __volatile__("" ::"r"(dst.data()) : "memory");
    }
    double secs = now_s() - t0;
    check(dst.data(), size, 1234, "memcpy destination");
    print_result("floor", "memcpy", size, iters, secs / (double)iters * 1e6, (double)size * (double)iters / secs / 1e6,
                 (double)iters / secs / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
    parse_options(argc, argv);
    set_identity("", "floor", -1);
    void* m = mmap(nullptr, 2 * sizeof(Line), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        std::perror("mmap");
        return 1;
    }
    g_lines = static_cast<Line*>(m);
    g_lines[0].v = g_lines[1].v = 0;
    const long pp_iters = bench_iters(1000000, 1000);
    const size_t size = g_opt.size ? g_opt.size : (1u << 20);
    const long mc_iters = g_opt.iters > 0 ? g_opt.iters : (g_opt.short_mode ? 20 : 5000);
    Case c{"floor", 2, [&] {
               cacheline_pingpong(pp_iters);
               barrier();
               if (rank() == 0) memcpy_bw(size, mc_iters);
           }};
    bool ok = run_case(c);
    munmap(m, 2 * sizeof(Line));
    return ok ? 0 : 1;
}
