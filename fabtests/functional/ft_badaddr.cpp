// Bad addresses and dead peers must give errors in bounded time, never a
// hang, and the survivor keeps working with its other peers.
#include <signal.h>
#include <unistd.h>

#include <cctype>

#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr double kBound = 10.0;  // seconds allowed for any error to show up
constexpr uint32_t kReady = 0xBAD001u, kPosted = 0xBAD002u, kGo = 0xBAD003u;

// rank `from` sends one verified message to rank `to` (both call this).
void healthy_exchange(Endpoint& ep, const std::vector<fi_addr_t>& addr, int from, int to, size_t len,
                      uint32_t seed) {
    if (rank() == to) {
        auto r = post_recv(ep, len, true, 0x600D);
        signal_peer(from, kReady);
        complete_recv(ep, *r, {.len = len, .seed = seed, .tag = 0x600D});
    } else if (rank() == from) {
        wait_signal_progress(ep, to, kReady);
        auto s = post_send(ep, addr[(size_t)to], len, seed, true, 0x600D);
        complete_send(ep, *s);
    }
}

// A closed endpoint's name: rank 1 opens two endpoints, hands out the name
// of the second and closes it; sends to it fail, the first keeps working.
void case_closed_ep() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == 1) {
        Endpoint doomed;
        oob_send_bytes(0, doomed.name());
        doomed.close();
        signal_peer(0, kPosted);
    } else {
        auto name = oob_recv_bytes(1);
        wait_signal(1, kPosted);
        for (size_t len : {(size_t)64, (size_t)1 << 20})
            info("send of %s to a closed endpoint: %s", human_size(len).c_str(),
                 send_to_name_expect_failure(ep, name, len, kBound).c_str());
    }
    healthy_exchange(ep, addr, 0, 1, 65536, 5);
    healthy_exchange(ep, addr, 1, 0, 100, 6);
    barrier([&] { ep.progress(); });
}

// Our own name with its unique part altered (decimal digits rotated for
// string addresses, trailing bytes flipped for binary ones).
std::vector<uint8_t> mangle(std::vector<uint8_t> name, uint32_t addr_format) {
    if (addr_format == FI_ADDR_STR) {
        size_t end = name.size();
        while (end > 0 && !std::isdigit(name[end - 1])) --end;
        FT_CHECK(end > 0, "string address '%.*s' has no digits to alter", (int)name.size(), (const char*)name.data());
        for (size_t i = end; i > 0 && std::isdigit(name[i - 1]); --i)
            name[i - 1] = (uint8_t)('0' + (name[i - 1] - '0' + 7) % 10);
    } else {
        size_t n = name.size() < 8 ? name.size() : 8;
        for (size_t i = 0; i < n; ++i) name[name.size() - 1 - i] ^= 0x5A;
    }
    return name;
}

void case_bogus_name() {
    Endpoint ep;
    auto addr = connect_all(ep);
    if (rank() == 0) {
        auto bogus = mangle(ep.name(), ep.info->addr_format);
        for (size_t len : {(size_t)64, (size_t)1 << 20})
            info("send of %s to a non-existent name: %s", human_size(len).c_str(),
                 send_to_name_expect_failure(ep, bogus, len, kBound).c_str());
    }
    healthy_exchange(ep, addr, 0, 1, 1u << 20, 7);
    barrier([&] { ep.progress(); });
}

// Rank 0 survives, rank 1 dies with sends pending to it, rank 2 stays healthy.
void run_dead_peer(bool sigkill) {
    constexpr int kSurvivor = 0, kVictim = 1, kHealthy = 2;
    Endpoint ep;
    auto addr = connect_all(ep);
    healthy_exchange(ep, addr, kSurvivor, kVictim, 8, 1);  // connections are set up
    healthy_exchange(ep, addr, kSurvivor, kHealthy, 8, 2);
    if (rank() == kVictim) {
        wait_signal(kSurvivor, kPosted);  // no progress: nothing is received
        if (sigkill) kill(getpid(), SIGKILL);
        _exit(0);  // no close, no cleanup
    }
    if (rank() == kSurvivor) {
        const std::vector<size_t> sizes = {8u << 20, 1u << 20, 64, 64};
        std::vector<XferPtr> pending;
        for (size_t i = 0; i < sizes.size(); ++i)
            pending.push_back(post_send(ep, addr[kVictim], sizes[i], 10u + (uint32_t)i, true, 0xDEAD));
        signal_peer(kVictim, kPosted);
        wait_peer_gone(kVictim, kBound, [&] { ep.progress(); });
        const double t0 = now_s();
        for (auto& x : pending) {
            double left = kBound - (now_s() - t0);
            Comp c = ep.wait_ctx(&x->ctx, (x->what + " to a peer that died").c_str(), left > 0 ? left : 0);
            info("%s to dead peer: %s", x->what.c_str(), describe(c).c_str());
            // the victim never posted a receive, so the 8 MiB send cannot have
            // been delivered; smaller ones may have been buffered before death
            if (x->len == sizes[0])
                FT_CHECK(c.is_err && c.err > 0, "%s: expected an error completion, saw %s", x->what.c_str(),
                         describe(c).c_str());
        }
        info("new send to the dead peer: %s", send_expect_failure(ep, addr[kVictim], 4096, kBound).c_str());
        signal_peer(kHealthy, kGo);
    }
    if (rank() == kHealthy) wait_signal_progress(ep, kSurvivor, kGo, 3 * kBound);
    healthy_exchange(ep, addr, kSurvivor, kHealthy, 1u << 20, 3);
    healthy_exchange(ep, addr, kHealthy, kSurvivor, 4096, 4);
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv,
                    {
                        {"closed_ep", 2, case_closed_ep},
                        {"bogus_name", 2, case_bogus_name},
                        {"dead_peer_exit", 3, [] { run_dead_peer(false); }},
                        {"dead_peer_kill", 3, [] { run_dead_peer(true); }, 1u << 1},
                    });
}
