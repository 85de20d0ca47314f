// Provider resource cleanup: after endpoints close normally, the number of
// /dev/shm/<prefix>* files equals the number before the run. While the
// endpoints are open there must be more (so the prefix is the right one and
// this test can fail). Prefix: -m <prefix>, default "pmshm_" ("*" counts
// every file). Run serially: other tests' files would skew the counts.
#include <dirent.h>

#include <cstring>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr uint32_t kReady = 0xC1EA01u;

std::string prefix() { return g_opt.mode.empty() ? "pmshm_" : g_opt.mode; }

int count_files() {
    DIR* d = opendir("/dev/shm");
    FT_CHECK(d, "cannot open /dev/shm");
    int n = 0;
    const std::string p = prefix();
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        if (p == "*" || std::strncmp(e->d_name, p.c_str(), p.size()) == 0) ++n;
    }
    closedir(d);
    return n;
}

int g_before = 0;

void case_close() {
    {
        Endpoint ep;
        auto addr = connect_all(ep);
        const int peer = 1 - rank();
        for (int dir = 0; dir < 2; ++dir) {
            size_t len = dir ? 4096 : (1u << 20);
            if (rank() == dir) {
                auto r = post_recv(ep, len, true, 0xC1);
                signal_peer(peer, kReady);
                complete_recv(ep, *r, {.len = len, .seed = 11u + (uint32_t)dir, .tag = 0xC1});
            } else {
                wait_signal_progress(ep, peer, kReady);
                auto s = post_send(ep, addr[(size_t)peer], len, 11u + (uint32_t)dir, true, 0xC1);
                complete_send(ep, *s);
            }
        }
        barrier([&] { ep.progress(); });
        if (rank() == 0) {
            int during = count_files();
            FT_CHECK(during > g_before, "with 2 endpoints open there are %d /dev/shm/%s* files, as many as "
                     "before (%d): wrong prefix, or the provider uses none", during, prefix().c_str(), g_before);
            log("/dev/shm/%s* files: before %d, while open %d", prefix().c_str(), g_before, during);
        }
        barrier([&] { ep.progress(); });
    }  // endpoints close here
    barrier();
}

}  // namespace

int main(int argc, char** argv) {
    parse_options(argc, argv);
    const Case c{"close", 2, case_close};
    if (g_opt.list) {
        std::printf("%s\n", c.name.c_str());
        return 0;
    }
    set_identity("", c.name, -1);
    int after = -1;
    bool ok = false;
    try {
        g_before = count_files();
        ok = run_case(c);  // forks, runs, reaps both ranks
        after = count_files();
        FT_CHECK(after == g_before, "/dev/shm/%s* files: %d before the run, %d after it (leak)",
                 prefix().c_str(), g_before, after);
    } catch (const Failure&) {
        ok = false;
    }
    std::printf("%s %s (prov %s, /dev/shm/%s*: before %d after %d)\n", ok ? "PASS" : "FAIL", c.name.c_str(),
                g_opt.prov.c_str(), prefix().c_str(), g_before, after);
    return ok ? 0 : 1;
}
