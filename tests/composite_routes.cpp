// PM/Composite across hosts and namespaces: three ranks, run by
// run_in_netns.sh with FT_HOSTID=7,7,9 — rank 0 in one network namespace,
// ranks 1 and 2 in the other; ranks 0 and 1 share a host id, rank 2 has its
// own. Rank 0 exchanges tagged messages of every kind of size (eager,
// segmented, rendezvous) with both, verified byte for byte; then each rank
// reads its own endpoint statistics (FI_PMETH_STATS=1, logged at close) and
// checks which device carried its traffic: 0<->1 shared memory, 0<->2 Ethernet.
//
// comm_caps (two ranks on one host, on lo): FI_LOCAL_COMM and FI_REMOTE_COMM
// are secondary capabilities (fi_getinfo(3)), so an endpoint opened with an
// fi_info that names neither still reaches a same-host peer through shared
// memory; one that names FI_REMOTE_COMM alone goes through Ethernet.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <regex>

#include "ep_stats.hpp"
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr uint32_t kReady = 0xC0A1u;
const size_t kSizes[] = {0, 8, 1000, 4096, 65536 + 3, 1u << 20, (4u << 20) + 7};

// Tagged messages both ways between rank 0 and `partner`.
void exchange(Endpoint& ep, const std::vector<fi_addr_t>& addr, int partner, uint32_t seed) {
    int me = rank();
    for (size_t size : kSizes) {
        for (int dir = 0; dir < 2; ++dir, ++seed) {
            int receiver = dir == 0 ? 0 : partner;
            int sender = dir == 0 ? partner : 0;
            uint64_t tag = 0x1000 + seed;
            if (me == receiver) {
                auto r = post_recv(ep, size, true, tag, 0, addr[(size_t)sender]);
                signal_peer(sender, kReady);
                complete_recv(ep, *r, {.len = size, .seed = seed, .tag = tag});
            } else {
                wait_signal(receiver, kReady);
                auto s = post_send(ep, addr[(size_t)receiver], size, seed, true, tag);
                complete_send(ep, *s);
            }
        }
    }
}

unsigned long long field(const std::string& text, const char* name) {
    std::smatch m;
    std::regex re(std::string(" ") + name + "=([0-9]+)");
    FT_CHECK(std::regex_search(text, m, re), "statistics without %s:\n%s", name, text.c_str());
    return std::stoull(m[1]);
}

void case_routes() {
    FT_CHECK(nranks() == 3, "needs 3 ranks");
    auto ep = std::make_unique<Endpoint>();
    auto addr = connect_all(*ep);
    if (rank() == 0 || rank() == 1) exchange(*ep, addr, 1, 100);
    barrier();
    if (rank() == 0 || rank() == 2) exchange(*ep, addr, 2, 500);
    barrier();
    std::string s = close_and_read_stats(ep);
    FT_CHECK(s.find("statistics: composite:") != std::string::npos,
             "no composite statistics (FI_PMETH_STATS=1 and FI_LOG_LEVEL=warn needed):\n%s", s.c_str());
    const char* want[] = {"composite: 1 peers through shared memory, 1 through Ethernet",
                          "composite: 1 peers through shared memory, 0 through Ethernet",
                          "composite: 0 peers through shared memory, 1 through Ethernet"};
    FT_CHECK(s.find(want[rank()]) != std::string::npos, "rank %d: expected \"%s\" in:\n%s", rank(),
             want[rank()], s.c_str());
    size_t eth_at = s.find("statistics:  eth: ");
    FT_CHECK(eth_at != std::string::npos, "no Ethernet statistics:\n%s", s.c_str());
    std::string shm = s.substr(0, eth_at), eth = s.substr(eth_at);
    unsigned long long shm_tx = field(shm, "tx_pkts"), shm_rx = field(shm, "rx_pkts");
    bool eth_peer = eth.find("statistics:   peer ") != std::string::npos;
    if (rank() == 2) {
        FT_CHECK(shm_tx == 0 && shm_rx == 0, "rank 2 used shared memory: tx %llu rx %llu", shm_tx, shm_rx);
    } else {
        FT_CHECK(shm_tx > 0 && shm_rx > 0, "rank %d: no shared-memory traffic: tx %llu rx %llu", rank(),
                 shm_tx, shm_rx);
    }
    if (rank() == 1) {
        FT_CHECK(!eth_peer, "rank 1 has an Ethernet peer:\n%s", eth.c_str());
    } else {
        FT_CHECK(eth_peer && field(eth, "tx_frames") > 0 && field(eth, "rx_frames") > 0,
                 "rank %d: no Ethernet traffic:\n%s", rank(), eth.c_str());
    }
    std::printf("rank %d: routes as expected (shm tx_pkts=%llu, Ethernet peer: %s)\n", rank(), shm_tx,
                eth_peer ? "yes" : "no");
}

void case_comm_caps() {
    struct Variant {
        const char* what;
        uint64_t clear;
        bool shm;
    };
    const Variant variants[] = {{"caps naming neither comm bit", FI_LOCAL_COMM | FI_REMOTE_COMM, true},
                                {"caps with FI_REMOTE_COMM only", FI_LOCAL_COMM, false},
                                {"caps with both comm bits", 0, true}};
    uint32_t seed = 900;
    for (const Variant& v : variants) {
        EpConfig cfg;
        cfg.clear_caps = v.clear;
        auto ep = std::make_unique<Endpoint>(cfg);
        const uint64_t comm = FI_LOCAL_COMM | FI_REMOTE_COMM;
        FT_CHECK((ep->info->caps & comm) == (comm & ~v.clear), "%s: endpoint opened with caps %s", v.what,
                 flags_str(ep->info->caps).c_str());
        auto addr = connect_all(*ep);
        for (size_t size : {(size_t)8, (size_t)65536 + 3}) {
            for (int dir = 0; dir < 2; ++dir, ++seed) {
                int receiver = dir, sender = 1 - dir;
                if (rank() == receiver) {
                    auto r = post_recv(*ep, size, true, seed);
                    signal_peer(sender, kReady);
                    complete_recv(*ep, *r, {.len = size, .seed = seed, .tag = seed});
                } else {
                    wait_signal(receiver, kReady);
                    auto s = post_send(*ep, addr[(size_t)receiver], size, seed, true, seed);
                    complete_send(*ep, *s);
                }
            }
        }
        barrier([&] { ep->progress(); });
        std::string s = close_and_read_stats(ep);
        if (v.shm) {
            FT_CHECK(s.find("composite: 1 peers through shared memory, 0 through Ethernet") != std::string::npos,
                     "%s: the same-host peer is not reached through shared memory:\n%s", v.what, s.c_str());
            size_t eth_at = s.find("statistics:  eth: ");
            FT_CHECK(eth_at != std::string::npos, "no Ethernet statistics:\n%s", s.c_str());
            std::string shm = s.substr(0, eth_at);
            FT_CHECK(field(shm, "tx_pkts") > 0 && field(shm, "rx_pkts") > 0, "%s: no shared-memory traffic:\n%s",
                     v.what, s.c_str());
        } else {
            FT_CHECK(s.find("composite:") == std::string::npos, "%s: composite device opened:\n%s", v.what,
                     s.c_str());
            FT_CHECK(s.find("statistics:   peer ") != std::string::npos && field(s, "tx_frames") > 0,
                     "%s: no Ethernet traffic:\n%s", v.what, s.c_str());
        }
        std::printf("rank %d: %s: %s\n", rank(), v.what, v.shm ? "shared memory" : "Ethernet");
        barrier();
    }
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv, {{"routes", 3, case_routes}, {"comm_caps", 2, case_comm_caps}});
}
