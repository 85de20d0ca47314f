// Network trunking, run by run_in_netns.sh with PM_NETNS_RAILS=n: each rank
// gets FI_PMETH_IFACE=a+b+.. (FT_IFACE), so its only domain is the trunk and
// its endpoint drives n veth rails.
//  stripe     large and small tagged messages both ways, verified byte for
//             byte; then every rail must have carried a fair share of the
//             sender's frames (endpoint statistics, FI_PMETH_STATS=1).
//  link_down  a stream of 1 MiB messages; rank 0 takes the last rail's link
//             down in the middle (ip link set .. down) and back up later.
//             Every message arrives once, intact and in order; the
//             statistics show the rail went down.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <regex>
#include <string>

#include "ep_stats.hpp"
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr uint32_t kReady = 0x7A0001u;

std::vector<std::string> my_rails() {
    const char* v = std::getenv("FI_PMETH_IFACE");
    FT_CHECK(v && std::strchr(v, '+'), "FI_PMETH_IFACE=%s is not a trunk (run with PM_NETNS_RAILS >= 2)",
             v ? v : "(unset)");
    std::vector<std::string> out;
    std::string s = v;
    for (size_t start = 0;;) {
        size_t p = s.find('+', start);
        out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
        if (p == std::string::npos) break;
        start = p + 1;
    }
    return out;
}

struct RailStats {
    std::string state;
    unsigned long long tx_frames, rx_frames, downs;
};

std::vector<RailStats> rail_stats(const std::string& text, size_t n) {
    std::vector<RailStats> out;
    for (size_t i = 0; i < n; ++i) {
        std::smatch m;
        std::regex re(" rail" + std::to_string(i) +
                      ": (up|down) tx_frames=([0-9]+) tx_bytes=[0-9]+ rx_frames=([0-9]+) rx_bytes=[0-9]+ "
                      "downs=([0-9]+)");
        FT_CHECK(std::regex_search(text, m, re), "no statistics of rail %zu in:\n%s", i, text.c_str());
        out.push_back({m[1], std::stoull(m[2]), std::stoull(m[3]), std::stoull(m[4])});
    }
    return out;
}

// count messages of `size` from rank 0 to rank 1, verified; `between(i)`
// runs at rank 0 before message i is sent.
template <class F>
void stream(Endpoint& ep, const std::vector<fi_addr_t>& addr, int count, size_t size, uint32_t seed0,
            F between) {
    if (rank() == 1) {
        for (int i = 0; i < count; ++i) {
            uint64_t tag = 0x77000 + (uint64_t)i;
            auto r = post_recv(ep, size, true, tag, 0, addr[0]);
            signal_peer(0, kReady);
            complete_recv(ep, *r, {.len = size, .seed = seed0 + (uint32_t)i, .tag = tag}, 60);
        }
        ep.expect_quiet(0.3, "receiver CQ after the stream (a message delivered twice?)");
    } else {
        for (int i = 0; i < count; ++i) {
            between(i);
            wait_signal_progress(ep, 1, kReady);
            auto s = post_send(ep, addr[1], size, seed0 + (uint32_t)i, true, 0x77000 + (uint64_t)i);
            complete_send(ep, *s, 60);
        }
    }
}

void case_stripe() {
    auto ep = std::make_unique<Endpoint>();
    auto addr = connect_all(*ep);
    size_t n = my_rails().size();
    stream(*ep, addr, 12, (1u << 20) + 7, 1000, [](int) {});
    stream(*ep, addr, 20, 8, 2000, [](int) {});
    stream(*ep, addr, 8, 65536 + 5, 3000, [](int) {});
    barrier([&] { ep->progress(); });
    std::string s = close_and_read_stats(ep);
    if (rank() == 0) {
        std::vector<RailStats> rs = rail_stats(s, n);
        unsigned long long total = 0;
        for (const RailStats& r : rs) total += r.tx_frames;
        for (size_t i = 0; i < n; ++i) {
            FT_CHECK(rs[i].tx_frames * n * 2 >= total,
                     "rail %zu carried %llu of %llu frames: less than half its share", i, rs[i].tx_frames, total);
            log("rail %zu: %llu of %llu frames", i, rs[i].tx_frames, total);
        }
        std::printf("striped over %zu rails: ", n);
        for (const RailStats& r : rs) std::printf("%llu ", r.tx_frames);
        std::printf("frames\n");
    }
}

void set_link(const std::string& dev, const char* state) {
    std::string cmd = "ip link set " + dev + " " + state;
    int rc = std::system(cmd.c_str());
    FT_CHECK(rc == 0, "'%s' failed (%d)", cmd.c_str(), rc);
    std::printf("rank 0: %s\n", cmd.c_str());
    std::fflush(stdout);
}

void case_link_down() {
    auto ep = std::make_unique<Endpoint>();
    auto addr = connect_all(*ep);
    std::vector<std::string> rails = my_rails();
    const std::string victim = rails.back();
    bool down = false;
    double down_at = 0;
    stream(*ep, addr, 40, (1u << 20) + 3, 5000, [&](int i) {
        if (i == 10) {
            set_link(victim, "down");
            down = true;
            down_at = now_s();
        } else if (i == 25) {
            // A real outage: at least half a second, traffic going on.
            while (now_s() - down_at < 0.5) ep->progress();
            set_link(victim, "up");
            down = false;
        }
    });
    if (down) set_link(victim, "up");
    barrier([&] { ep->progress(); });
    std::string s = close_and_read_stats(ep);
    std::vector<RailStats> rs = rail_stats(s, rails.size());
    FT_CHECK(rs.back().downs >= 1, "rank %d: rail %zu (%s) never seen down:\n%s", rank(), rails.size() - 1,
             victim.c_str(), s.c_str());
    FT_CHECK(rs.back().state == "up", "rank %d: rail %zu not taken back after its link came up:\n%s", rank(),
             rails.size() - 1, s.c_str());
    std::printf("rank %d: the last rail went down %llu time(s); every message arrived once, intact\n", rank(),
                rs.back().downs);
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv, {{"stripe", 2, case_stripe}, {"link_down", 2, case_link_down}});
}
