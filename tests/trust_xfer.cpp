// Sessions you can trust, end to end between two processes:
//  overload  a ping-pong of verified messages (8 B to 64 KiB + 3) goes on
//            while a helper process of rank 0 stops both ranks with SIGSTOP
//            for 10 s, and later rank 1 alone for 10 s; the session must go
//            on with no error (a live but slow peer is never declared dead).
//  flood     rank 0 sends 16 Ki messages of 4 KiB that rank 1 has not asked
//            for; rank 1's unexpected-message memory is capped (the test
//            sets FI_<PROV>_UNEXP_CAP_KB=4096): its RSS must stay bounded
//            while it progresses for 4 s, the sender must wait (STOP/GO), and
//            when rank 1 posts its receives every message arrives, in order,
//            byte for byte. The statistics must show the cap was reached and
//            never exceeded by more than one message.
//  inject    three ranks between two namespaces: 0 | 1, 2. While 0 and 1
//            ping-pong verified messages, rank 2 (no libfabric traffic) sits
//            on rank 1's interface with a raw socket, captures the pair's
//            frames and sends at rank 0: exact replays, replays with a byte
//            flipped, forged frames posing as rank 1 (sequence numbers ahead,
//            a HELLO with a new epoch) without the key, other jobs' frames
//            and random bytes. Every payload must still arrive exactly once,
//            no session may be reset, and rank 0's statistics must show the
//            forgeries dropped.
//  listen    two namespaces, GSO mode: while rank 0 sends rank 1 verified
//            64 KiB messages (their frames in UDP/IPv4 packets), UDP sockets
//            on rank 1's host bound to pmeth's port (one of them also joined,
//            on every interface, to the multicast group the packets are
//            addressed to) must get nothing, and that host's IP stack must
//            not have taken the packets as broadcast (its route counter
//            in_brd). Rank 0's statistics must show the frames went in GSO
//            packets. Anyone may bind such a socket: before, every packet
//            reached it. Then rank 0 sends rank 1 packets as pmeth's but
//            with frames of an unknown wire version inside: some addressed as
//            pmeth addresses them (taken: each counted as bad_version), more
//            as a UDP socket's datagram to the port could be (from an IP
//            address to the group or to an address, from 0.0.0.0 to the
//            group's MAC) or as wire version 2 sent them (0.0.0.0 to
//            0.0.0.0): refused before any frame check, so bad_version counts
//            exactly the first kind.
//  auth      run with FT_AUTH_KEY=<k0>,<k1> (the key given in fi_getinfo
//            hints): equal keys talk; different keys must not: rank 0's
//            send fails with an error completion and rank 1 gets nothing.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "ep_stats.hpp"
#include "ft_xfer.h"

using namespace ft;

namespace {

constexpr double kLong = 60;  // completions may wait out a 10 s stop

long rss_kb() {
    FILE* f = std::fopen("/proc/self/status", "r");
    FT_CHECK(f, "cannot read /proc/self/status");
    char line[256];
    long kb = -1;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    std::fclose(f);
    FT_CHECK(kb > 0, "no VmRSS in /proc/self/status");
    return kb;
}

unsigned long long stat_of(const std::string& text, const char* key) {
    std::smatch m;
    // The whole name: "bad_len" is not "gso_bad_len".
    std::regex re("(^|[^A-Za-z0-9_])" + std::string(key) + "=([0-9]+)");
    FT_CHECK(std::regex_search(text, m, re), "no %s in the statistics:\n%s", key, text.c_str());
    return std::stoull(m[2]);
}

// Stops `pids` at `at_s` (seconds from now) for `for_s`, in a child that
// does nothing else (no libfabric after fork: sleep, kill, exit).
pid_t stopper(std::vector<std::pair<double, std::vector<pid_t>>> plan, double for_s) {
    pid_t c = fork();
    FT_CHECK(c >= 0, "fork: %s", std::strerror(errno));
    if (c) return c;
    double t = 0;
    for (auto& [at, pids] : plan) {
        usleep(useconds_t((at - t) * 1e6));
        for (pid_t p : pids) kill(p, SIGSTOP);
        usleep(useconds_t(for_s * 1e6));
        for (pid_t p : pids) kill(p, SIGCONT);
        t = at + for_s;
    }
    _exit(0);
}

void case_overload() {
    auto ep = std::make_unique<Endpoint>();
    auto addr = connect_all(*ep);
    const size_t sizes[] = {8, 4096, 65536 + 3};
    const int n = 1800;  // ~10 ms apart: longer than the stops' plan
    pid_t child = 0;
    if (rank() == 0)
        child = stopper({{2.0, {getpid(), peer_pid(1)}}, {15.0, {peer_pid(1)}}}, 10.0);
    double t0 = now_s();
    for (int i = 0; i < n; ++i) {
        size_t len = sizes[i % 3];
        uint64_t tag = 0x5100 + (uint64_t)i;
        if (rank() == 0) {
            auto r = post_recv(*ep, len, true, tag, 0, addr[1]);
            auto s = post_send(*ep, addr[1], len, 100 + (uint32_t)i, true, tag);
            complete_send(*ep, *s, kLong);
            complete_recv(*ep, *r, {.len = len, .seed = 9000 + (uint32_t)i, .tag = tag}, kLong);
            double until = now_s() + 0.01;
            while (now_s() < until) ep->progress();
        } else {
            auto r = post_recv(*ep, len, true, tag, 0, addr[0]);
            complete_recv(*ep, *r, {.len = len, .seed = 100 + (uint32_t)i, .tag = tag}, kLong);
            auto s = post_send(*ep, addr[0], len, 9000 + (uint32_t)i, true, tag);
            complete_send(*ep, *s, kLong);
        }
    }
    if (rank() == 0) {
        int st = 0;
        FT_CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                 "the stopper process failed (status %d)", st);
    }
    barrier([&] { ep->progress(); });
    std::printf("rank %d: %d round trips verified in %.1f s across two 10 s SIGSTOPs, no error\n", rank(), n,
                now_s() - t0);
}

void case_flood() {
    auto ep = std::make_unique<Endpoint>();
    auto addr = connect_all(*ep);
    const int n = 16384;
    const size_t len = 4096;
    const long cap_kb = 4096;
    if (rank() == 0) {
        std::deque<XferPtr> sends;
        for (int i = 0; i < n; ++i) {
            sends.push_back(post_send(*ep, addr[1], len, 700 + (uint32_t)i, true, 0x3000 + (uint64_t)i));
            // Reap completions as they come (the sends are held back by the
            // receiver's STOP while it has no room).
            ep->progress();
            while (sends.size() > 64) {
                auto c = ep->take_ctx(&sends.front()->ctx);
                if (!c) break;
                FT_CHECK(!c->is_err, "send %d failed: %s", i, describe(*c).c_str());
                sends.pop_front();
            }
        }
        for (auto& s : sends) complete_send(*ep, *s, kLong);
        barrier([&] { ep->progress(); });
    } else {
        long before = rss_kb();
        double until = now_s() + 4;
        while (now_s() < until) ep->progress();  // take what the cap allows
        long grown = rss_kb() - before;
        std::printf("rank 1: RSS grew by %ld KiB while %d x %zu B (%.0f MiB) were sent unasked, cap %ld KiB\n", grown,
                    n, len, n * len / 1048576.0, cap_kb);
        FT_CHECK(grown < cap_kb + 8192, "RSS grew by %ld KiB: the %ld KiB cap did not hold", grown, cap_kb);
        for (int i = 0; i < n; ++i) {
            uint64_t tag = 0x3000 + (uint64_t)i;
            auto r = post_recv(*ep, len, true, tag, 0, addr[0]);
            complete_recv(*ep, *r, {.len = len, .seed = 700 + (uint32_t)i, .tag = tag}, kLong);
        }
        ep->expect_quiet(0.3, "receiver CQ after the flood (a message delivered twice?)");
        barrier([&] { ep->progress(); });
    }
    std::string s = close_and_read_stats(ep);
    if (rank() == 1) {
        unsigned long long peak = stat_of(s, "unexp_peak"), stalls = stat_of(s, "unexp_stalls");
        FT_CHECK(stalls >= 1, "the cap was never reached (unexp_stalls=0): the test did not test it");
        FT_CHECK(peak <= (unsigned long long)cap_kb * 1024 + len + 1024,
                 "unexpected memory peaked at %llu B, over the cap", peak);
        std::printf("rank 1: all %d messages arrived in order, intact; unexpected bytes peaked at %llu (cap %ld), "
                    "the cap stopped the sender %llu time(s)\n", n, peak, cap_kb * 1024, stalls);
    }
}

// More than rank 0's receive ring holds (4 MiB of 2 KiB slots at MTU 1500).
constexpr int kFlood = 3000;

bool gso_mode() {  // pmeth's default
    const char* g = std::getenv("FI_PMETH_GSO");
    return !g || std::strcmp(g, "1") == 0;
}

uint16_t be16_at(const std::vector<uint8_t>& b, size_t o) { return uint16_t(b[o] << 8 | b[o + 1]); }
void set_be16(std::vector<uint8_t>& b, size_t o, size_t v) {
    b[o] = uint8_t(v >> 8);
    b[o + 1] = uint8_t(v);
}

// With FI_PMETH_GSO=1: the UDP packets that carry pmeth frames (pmeth's
// GSO mode) as material too. Each captured one goes back at rank 0 whole
// (its segments replays), and with its outer headers forged: segment sizes
// that cut frames apart or are too small, IPv4 and UDP lengths that claim
// more or less than is there or disagree, a fragment, and random segments
// behind valid headers. Sent with a virtio-net header, so that the kernel
// takes packets larger than the MTU as GSO packets (veth passes them whole).
struct GsoForger {
    int fd = -1;
    int ifindex = 0;
    unsigned long long sent = 0, seen = 0;
    explicit GsoForger(int ifx) : ifindex(ifx) {
        fd = socket(AF_PACKET, SOCK_RAW, 0);
        FT_CHECK(fd >= 0, "raw socket: %s", std::strerror(errno));
        int one = 1;
        FT_CHECK(setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) == 0, "PACKET_VNET_HDR: %s",
                 std::strerror(errno));
        sockaddr_ll sll{};
        sll.sll_family = AF_PACKET;
        sll.sll_ifindex = ifx;
        FT_CHECK(bind(fd, (sockaddr*)&sll, sizeof sll) == 0, "bind: %s", std::strerror(errno));
    }
    ~GsoForger() { close(fd); }
    // pkt: Ethernet, IPv4, UDP, payload; gso 0: one packet as it is. The
    // IPv4 id marks it as ours (pmeth sends 0): the capture skips it.
    void send(const std::vector<uint8_t>& pkt, size_t gso) {
        std::vector<uint8_t> b(10 + pkt.size());
        std::vector<uint8_t> q = pkt;
        if (q.size() >= 20) set_be16(q, 18, kForgedId);
        if (gso && pkt.size() > 42 + gso) {
            b[0] = 1;                 // checksum needed (the kernel wants it for GSO)
            b[1] = 5;                 // UDP L4 segmentation
            uint16_t v[4] = {42, uint16_t(gso), 34, 6};  // hdr_len, gso_size, csum_start, csum_offset
            std::memcpy(b.data() + 2, v, sizeof v);
        }
        std::memcpy(b.data() + 10, q.data(), q.size());
        if (::send(fd, b.data(), b.size(), 0) == (ssize_t)b.size()) sent++;
    }
    static constexpr uint16_t kForgedId = 0x5a5a;
    // Packets that pass the victim's socket filter (IPv4, UDP to pmeth's
    // port, a pmeth frame for its endpoint inside) and that its wire must
    // refuse (fragments): `n` of them at once, more than its receive ring
    // holds, while it does not poll.
    void flood(const uint8_t* vmac, uint32_t ep_id, int n) {
        std::vector<uint8_t> g(42 + 100, 0);
        std::memcpy(g.data(), vmac, 6);
        g[6] = 0x02;                                        // a local MAC
        g[12] = 0x08;
        g[14] = 0x45;
        set_be16(g, 16, g.size() - 14);
        set_be16(g, 20, 0x2001);                            // more fragments, offset 8
        g[22] = 64;
        g[23] = 17;
        set_be16(g, 36, 0x88B5);
        set_be16(g, 38, g.size() - 34);
        std::memcpy(g.data() + 42, vmac, 6);                // the frame inside
        g[42 + 12] = 0x88;
        g[42 + 13] = 0xB5;
        for (int b = 0; b < 4; b++) g[42 + 22 + b] = uint8_t(ep_id >> (8 * b));
        for (int i = 0; i < n; i++) send(g, 0);
    }
    void forge(const std::vector<uint8_t>& captured, const uint8_t* vmac, uint32_t (*rnd)(void*), void* st) {
        seen++;
        std::vector<uint8_t> g = captured;
        std::memcpy(g.data(), vmac, 6);
        size_t body = g.size() - 42;
        const size_t seg = 1472;  // MTU 1500 - 28: the sender's segment size
        send(g, seg);                                       // whole: every segment a replay
        send(g, 1000);                                      // segments that cut frames apart
        if (body > 2 * 1472) {
            auto small = g;
            small.resize(42 + 2000);
            set_be16(small, 16, 2000 + 28);
            set_be16(small, 38, 2000 + 8);
            send(small, 40);                                // segments too small to be frames
        }
        auto claim = g;
        claim.resize(std::min<size_t>(g.size(), 1400));
        send(claim, 0);                                     // IPv4 and UDP claim more than came
        auto less = claim;
        set_be16(less, 16, 100);
        set_be16(less, 38, 80);
        send(less, 0);                                      // ... or less
        auto disagree = claim;
        set_be16(disagree, 38, be16_at(disagree, 38) - 7);
        send(disagree, 0);                                  // UDP and IPv4 lengths disagree
        auto tiny = claim;
        set_be16(tiny, 16, 20);
        send(tiny, 0);                                      // shorter than its own headers
        auto frag = claim;
        set_be16(frag, 20, 0x2000);
        send(frag, 0);                                      // a fragment
        auto junk = g;
        for (size_t i = 42; i < junk.size(); i++) junk[i] = uint8_t(rnd(st));
        send(junk, seg);                                    // valid headers, random segments
        auto relen = g;                                     // a segment size from the random
        send(relen, 64 + rnd(st) % 1500);
    }
};

// Rank 2's work in case_inject: a raw socket on the interface it shares
// with rank 1; frames of EtherType 0x88B5 it sees (rank 1's going out, rank
// 0's coming in) are the material; what it sends goes to rank 0.
void inject_for(double secs, const std::vector<uint8_t>& victim_name) {
    const char* ifc = std::getenv("FI_PMETH_IFACE");
    FT_CHECK(ifc && *ifc, "no FI_PMETH_IFACE for the injector");
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    FT_CHECK(fd >= 0, "raw socket: %s (needs CAP_NET_RAW)", std::strerror(errno));
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = (int)if_nametoindex(ifc);
    FT_CHECK(sll.sll_ifindex > 0 && bind(fd, (sockaddr*)&sll, sizeof sll) == 0, "bind to %s: %s", ifc,
             std::strerror(errno));
    // The victim's MAC (rail 0 of its name, offset 40) addresses what we send.
    const uint8_t* vmac = victim_name.data() + 40;
    uint32_t rnd = 12345;
    auto next = [&] { return rnd = rnd * 1103515245u + 12345u; };
    unsigned long long seen = 0, sent = 0;
    std::vector<uint8_t> f(70000);
    std::unique_ptr<GsoForger> gso;
    if (gso_mode()) {
        gso = std::make_unique<GsoForger>(sll.sll_ifindex);
        // Rank 0 does not poll for a moment after the barrier (case_inject).
        uint32_t ep_id = 0;
        for (int b = 0; b < 4; b++) ep_id |= uint32_t(victim_name[8 + (size_t)b]) << (8 * b);
        gso->flood(vmac, ep_id, kFlood);
        std::printf("rank 2: flooded rank 0 with %d refusable packets\n", kFlood);
    }
    auto gen = [](void* st) { return (*static_cast<decltype(next)*>(st))(); };
    double end = now_s() + secs;
    while (now_s() < end) {
        pollfd pfd{fd, POLLIN, 0};
        if (poll(&pfd, 1, 10) <= 0) continue;
        sockaddr_ll from{};
        socklen_t fl = sizeof from;
        ssize_t n = recvfrom(fd, f.data(), f.size(), MSG_DONTWAIT, (sockaddr*)&from, &fl);
        if (gso && n > 42 + 14 + 56 && f[12] == 0x08 && f[13] == 0 && f[23] == 17 && f[36] == 0x88 && f[37] == 0xB5 &&
            std::memcmp(f.data(), vmac, 6) == 0 && be16_at(f, 18) != GsoForger::kForgedId) {
            // rank 1's pmeth packet to rank 0
            gso->forge(std::vector<uint8_t>(f.begin(), f.begin() + n), vmac, +gen, &next);
            continue;
        }
        if (n < 14 + 56 || f[12] != 0x88 || f[13] != 0xB5) continue;
        seen++;
        std::vector<std::vector<uint8_t>> out;
        std::vector<uint8_t> g(f.begin(), f.begin() + n);
        std::memcpy(g.data(), vmac, 6);  // whatever it was, now at rank 0
        out.push_back(g);                                   // an exact replay
        auto flip = g;
        flip[14 + 56 + (next() % (size_t)(n - 14 - 56 > 0 ? n - 14 - 56 : 1))] ^= 0x40;
        out.push_back(flip);                                // altered in flight
        auto ahead = g;
        uint32_t seq = ahead[14 + 24] | ahead[14 + 25] << 8 | ahead[14 + 26] << 16 | (uint32_t)ahead[14 + 27] << 24;
        seq += 1 + next() % 8;
        for (int b = 0; b < 4; b++) ahead[14 + 24 + b] = uint8_t(seq >> (8 * b));
        out.push_back(ahead);                               // hijack: sequence ahead
        auto hello = g;
        hello[14 + 1] = 4;                                  // HELLO
        for (int b = 0; b < 4; b++) hello[14 + 16 + b] = uint8_t(next());  // a "new epoch"
        out.push_back(hello);
        auto foreign = g;
        foreign[14 + 4] ^= 0x5a;                            // another job
        out.push_back(foreign);
        std::vector<uint8_t> junk((size_t)(60 + next() % 1400));
        for (auto& b : junk) b = uint8_t(next());
        std::memcpy(junk.data(), vmac, 6);
        junk[12] = 0x88;
        junk[13] = 0xB5;
        junk[14] = 2;                                       // right version, random rest
        out.push_back(junk);
        for (auto& o : out) {
            sockaddr_ll to{};
            to.sll_family = AF_PACKET;
            to.sll_ifindex = sll.sll_ifindex;
            to.sll_halen = 6;
            std::memcpy(to.sll_addr, vmac, 6);
            if (sendto(fd, o.data(), o.size(), 0, (sockaddr*)&to, sizeof to) == (ssize_t)o.size()) sent++;
        }
    }
    close(fd);
    std::printf("rank 2: saw %llu pmeth frames, sent %llu hostile ones at rank 0\n", seen, sent);
    FT_CHECK(seen > 100 && sent > 100, "the injector saw %llu frames and sent %llu: it did not test anything", seen,
             sent);
    if (gso) {
        std::printf("rank 2: saw %llu pmeth UDP packets, sent %llu hostile ones at rank 0\n", gso->seen, gso->sent);
        FT_CHECK(gso->seen > 20 && gso->sent > 100, "the injector saw %llu UDP packets and sent %llu", gso->seen,
                 gso->sent);
    }
}

void case_inject() {
    auto ep = std::make_unique<Endpoint>();
    auto names = exchange_names(*ep);
    std::vector<fi_addr_t> addr(3, FI_ADDR_NOTAVAIL);
    if (rank() < 2) {
        int other = 1 - rank();
        addr[(size_t)other] = ep->insert(names[(size_t)other]);
    }
    const size_t sizes[] = {8, 4096, 65536 + 3};
    const int n = 1500;
    if (rank() == 2) {
        barrier([&] { ep->progress(); });
        inject_for(5.0, names[0]);
        barrier([&] { ep->progress(); });
        return;
    }
    barrier([&] { ep->progress(); });
    // GSO mode: rank 2 floods rank 0's ring with packets its wire refuses;
    // rank 0 lets them fill it before polling again (a wire that went round
    // a ring of refused slots would never come back).
    if (rank() == 0 && gso_mode()) usleep(300000);
    for (int i = 0; i < n; ++i) {
        size_t len = sizes[i % 3];
        uint64_t tag = 0x6100 + (uint64_t)i;
        int other = 1 - rank();
        if (rank() == 0) {
            auto r = post_recv(*ep, len, true, tag, 0, addr[1]);
            auto s = post_send(*ep, addr[1], len, 300 + (uint32_t)i, true, tag);
            complete_send(*ep, *s, kLong);
            complete_recv(*ep, *r, {.len = len, .seed = 5000 + (uint32_t)i, .tag = tag}, kLong);
            double until = now_s() + 0.003;
            while (now_s() < until) ep->progress();
        } else {
            auto r = post_recv(*ep, len, true, tag, 0, addr[(size_t)other]);
            complete_recv(*ep, *r, {.len = len, .seed = 300 + (uint32_t)i, .tag = tag}, kLong);
            auto s = post_send(*ep, addr[(size_t)other], len, 5000 + (uint32_t)i, true, tag);
            complete_send(*ep, *s, kLong);
        }
    }
    ep->expect_quiet(0.3, "after the exchange (a message delivered twice?)");
    barrier([&] { ep->progress(); });
    std::string s = close_and_read_stats(ep);
    if (rank() == 0) {
        unsigned long long mac = stat_of(s, "bad_mac"), job = stat_of(s, "bad_job"), resets = stat_of(s, "resets");
        FT_CHECK(mac > 0 && job > 0, "rank 0 saw no forged frames (bad_mac=%llu bad_job=%llu)", mac, job);
        FT_CHECK(resets == 0, "a forged frame reset the session (resets=%llu)", resets);
        if (gso_mode()) {
            // Every check of the wire's (open_packet) refused some: each
            // kind of forgery reaches it (GsoForger).
            unsigned long long bad = stat_of(s, "gso_rx_bad"), dups = stat_of(s, "dups");
            unsigned long long hdr = stat_of(s, "gso_bad_hdr"), len = stat_of(s, "gso_bad_len"),
                               seg = stat_of(s, "gso_bad_seg"), over = stat_of(s, "gso_bad_over");
            FT_CHECK(hdr > 0 && len > 0 && seg > 0 && over > 0,
                     "rank 0's wire did not refuse every kind of forged UDP packet (gso_rx_bad=%llu: header %llu, "
                     "lengths %llu, segment size %llu, more than arrived %llu)", bad, hdr, len, seg, over);
            std::printf("rank 0: wire refused %llu forged UDP packets (header %llu, lengths %llu, segment size %llu, "
                        "more than arrived %llu); duplicates dropped %llu\n", bad, hdr, len, seg, over, dups);
        }
        std::printf("rank 0: %d round trips verified; dropped bad_mac=%llu bad_job=%llu bad_len=%llu "
                    "bad_version=%llu, sessions reset: 0\n", n, mac, job, stat_of(s, "bad_len"),
                    stat_of(s, "bad_version"));
    }
}

// The kernel's count of received packets routed as broadcast, all cpus
// (/proc/net/stat/rt_cache, hexadecimal columns); -1 where it cannot be read.
long long in_brd_count() {
    FILE* f = std::fopen("/proc/net/stat/rt_cache", "r");
    if (!f) return -1;
    char line[1024];
    int col = -1;
    long long sum = 0;
    if (std::fgets(line, sizeof line, f)) {
        int i = 0;
        for (char* t = std::strtok(line, " \t\n"); t; t = std::strtok(nullptr, " \t\n"), i++)
            if (std::strcmp(t, "in_brd") == 0) col = i;
    }
    while (col >= 0 && std::fgets(line, sizeof line, f)) {
        int i = 0;
        for (char* t = std::strtok(line, " \t\n"); t; t = std::strtok(nullptr, " \t\n"), i++)
            if (i == col) sum += std::strtoll(t, nullptr, 16);
    }
    std::fclose(f);
    return col >= 0 ? sum : -1;
}

// A UDP socket on `port`, any address; with `group`, also joined to that
// group on every interface but lo.
int udp_listener(uint16_t port, const char* group) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    FT_CHECK(fd >= 0, "socket: %s", std::strerror(errno));
    int one = 1;
    FT_CHECK(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0, "SO_REUSEADDR: %s",
             std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    FT_CHECK(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "bind to UDP port %u: %s", port,
             std::strerror(errno));
    if (!group) return fd;
    int joined = 0;
    if (struct if_nameindex* ifs = if_nameindex()) {
        for (auto* i = ifs; i->if_index; i++) {
            if (std::strcmp(i->if_name, "lo") == 0) continue;
            ip_mreqn m{};
            inet_pton(AF_INET, group, &m.imr_multiaddr);
            m.imr_ifindex = int(i->if_index);
            FT_CHECK(setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &m, sizeof m) == 0, "joining %s on %s: %s",
                     group, i->if_name, std::strerror(errno));
            joined++;
        }
        if_freenameindex(ifs);
    }
    FT_CHECK(joined > 0, "no interface to join %s on", group);
    return fd;
}

size_t drain_datagrams(int fd) {
    std::vector<uint8_t> b(70000);
    size_t n = 0;
    while (recv(fd, b.data(), b.size(), MSG_DONTWAIT) >= 0) n++;
    return n;
}

void case_listen() {
    FT_CHECK(gso_mode(), "run with pmeth's GSO mode (FI_PMETH_GSO unset or 1)");
    const char* et = std::getenv("FI_PMETH_ETHERTYPE");
    uint16_t port = uint16_t(et ? std::strtoul(et, nullptr, 0) : 0x88b5);
    // The group PacketWire's GSO packets are addressed to (kGsoGroup).
    const char* group = "239.255.136.181";
    const uint8_t group_ip[4] = {239, 255, 0x88, 0xb5};
    int any = -1, member = -1;
    long long brd0 = -1;
    if (rank() == 1) {
        any = udp_listener(port, nullptr);
        member = udp_listener(port, group);
        brd0 = in_brd_count();
    }
    auto ep = std::make_unique<Endpoint>();
    auto names = exchange_names(*ep);
    auto addr = connect_all(*ep);
    const int n = 128;
    const size_t len = 65536;
    for (int i = 0; i < n; ++i) {
        uint64_t tag = 0x7100 + (uint64_t)i;
        if (rank() == 0) {
            auto s = post_send(*ep, addr[1], len, 800 + (uint32_t)i, true, tag);
            complete_send(*ep, *s, kLong);
        } else {
            auto r = post_recv(*ep, len, true, tag, 0, addr[0]);
            complete_recv(*ep, *r, {.len = len, .seed = 800 + (uint32_t)i, .tag = tag}, kLong);
        }
    }
    barrier([&] { ep->progress(); });
    long long brd1 = -1;
    if (rank() == 1) {
        brd1 = in_brd_count();
        size_t got_any = drain_datagrams(any), got_member = drain_datagrams(member);
        close(any);
        close(member);
        FT_CHECK(got_any == 0 && got_member == 0,
                 "UDP sockets on the receiver's host got pmeth's frames: %zu datagrams on port %u, %zu as members "
                 "of %s", got_any, port, got_member, group);
    }
    barrier([&] { ep->progress(); });
    // Frames of another wire version for rank 1's endpoint, in UDP packets
    // from 0.0.0.0 (kZeroSrc) and from an IP address, to the group and to
    // a unicast address (kIpSrc each).
    const int kZeroSrc = 30, kIpSrc = 50, kRefused = 4 * kIpSrc;
    if (rank() == 0) {
        const char* ifc = std::getenv("FI_PMETH_IFACE");
        FT_CHECK(ifc && *ifc, "no FI_PMETH_IFACE for rank 0");
        GsoForger out((int)if_nametoindex(ifc));
        const uint8_t* vmac = names[1].data() + 40;
        std::vector<uint8_t> g(42 + 100, 0);
        std::memcpy(g.data(), vmac, 6);
        g[6] = 0x02;  // a local MAC
        g[12] = 0x08;
        g[14] = 0x45;
        set_be16(g, 16, g.size() - 14);
        set_be16(g, 20, 0x4000);  // don't fragment
        g[22] = 64;
        g[23] = 17;
        std::memcpy(g.data() + 30, group_ip, 4);
        set_be16(g, 34, port);
        set_be16(g, 36, port);
        set_be16(g, 38, g.size() - 34);
        std::memcpy(g.data() + 42, vmac, 6);  // the frame inside
        g[42 + 12] = uint8_t(port >> 8);
        g[42 + 13] = uint8_t(port);
        g[42 + 14] = 0xEE;  // no wire version of pmeth's
        std::memcpy(g.data() + 42 + 22, names[1].data() + 8, 4);  // its endpoint id
        // With a valid IPv4 header checksum, as a socket's datagram has.
        auto send_n = [&](std::vector<uint8_t> q, int count) {
            set_be16(q, 24, 0);
            uint32_t sum = 0;
            for (size_t i = 14; i < 34; i += 2) sum += be16_at(q, i);
            while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
            set_be16(q, 24, ~sum & 0xffff);
            for (int i = 0; i < count; i++) out.send(q, 0);
        };
        send_n(g, kZeroSrc);                      // the form pmeth sends: taken
        const uint8_t from[4] = {192, 0, 2, 9}, to[4] = {192, 0, 2, 2}, zero[4] = {0, 0, 0, 0};
        const uint8_t group_mac[6] = {0x01, 0x00, 0x5e, 0x7f, 0x88, 0xb5};
        auto q = g;
        std::memcpy(q.data() + 26, from, 4);
        send_n(q, kIpSrc);                        // from an address, to the group
        std::memcpy(q.data() + 30, to, 4);
        send_n(q, kIpSrc);                        // from an address, to an address
        q = g;
        std::memcpy(q.data() + 30, zero, 4);
        send_n(q, kIpSrc);                        // 0.0.0.0 to 0.0.0.0 (wire version 2's form)
        q = g;
        std::memcpy(q.data(), group_mac, 6);
        send_n(q, kIpSrc);                        // to the group's MAC (a host without an address)
        FT_CHECK(out.sent == (unsigned long long)(kZeroSrc + kRefused), "only %llu of %d packets went out",
                 out.sent, kZeroSrc + kRefused);
    }
    barrier([&] { ep->progress(); });
    double until = now_s() + 0.3;
    while (now_s() < until) ep->progress();
    std::string s = close_and_read_stats(ep);
    if (rank() == 0) {
        unsigned long long pk = stat_of(s, "gso_packets"), fr = stat_of(s, "gso_frames");
        FT_CHECK(pk >= (unsigned long long)n, "only %llu GSO packets for %d messages of %zu B: the test did not test "
                 "the GSO mode", pk, n, len);
        std::printf("rank 0: %d x %zu B sent, %llu frames in %llu GSO packets\n", n, len, fr, pk);
        oob_put(1, pk);
        return;
    }
    auto pk = oob_get<unsigned long long>(0);
    unsigned long long bv = stat_of(s, "bad_version");
    FT_CHECK(bv == (unsigned long long)kZeroSrc,
             "rank 1 took %llu frames of another wire version: %d came as pmeth sends them, %d otherwise (from an "
             "IP address, to 0.0.0.0, to a group's MAC: none must be taken)", bv, kZeroSrc, kRefused);
    if (brd0 >= 0 && brd1 >= 0) {
        // The counter is the whole machine's: allow other broadcasts.
        FT_CHECK((unsigned long long)(brd1 - brd0) < pk / 4,
                 "the receiver's IP stack routed %lld packets as broadcast during %llu GSO packets", brd1 - brd0, pk);
    } else {
        std::printf("rank 1: /proc/net/stat/rt_cache has no in_brd; the route check is left out\n");
    }
    std::printf("rank 1: %d messages verified; UDP listeners on port %u got nothing (also as members of %s); "
                "broadcast routes made meanwhile: %lld (of %llu GSO packets); of the forged packets, the %d as pmeth "
                "sends them reached the frame checks (bad_version=%llu), the %d otherwise addressed did not\n", n,
                port, group, brd0 >= 0 && brd1 >= 0 ? brd1 - brd0 : -1, pk, kZeroSrc, bv, kRefused);
}

void case_auth() {
    const char* keys = std::getenv("FT_AUTH_KEY");
    FT_CHECK(keys && std::strchr(keys, ','), "run with FT_AUTH_KEY=<k0>,<k1>");
    std::string k(keys);
    size_t comma = k.find(',');
    bool same = k.substr(0, comma) == k.substr(comma + 1);
    auto ep = std::make_unique<Endpoint>();
    // The key asked for in the hints is the one fi_getinfo returns.
    std::string mine = rank() == 0 ? k.substr(0, comma) : k.substr(comma + 1);
    FT_CHECK(ep->info->domain_attr->auth_key_size == mine.size() &&
                 std::memcmp(ep->info->domain_attr->auth_key, mine.data(), mine.size()) == 0,
             "fi_getinfo did not return the auth_key given in the hints");
    auto addr = connect_all(*ep);
    if (same) {
        if (rank() == 0) {
            auto s = post_send(*ep, addr[1], 1000, 42, true, 0x99);
            complete_send(*ep, *s, kLong);
        } else {
            auto r = post_recv(*ep, 1000, true, 0x99, 0, addr[0]);
            complete_recv(*ep, *r, {.len = 1000, .seed = 42, .tag = 0x99}, kLong);
        }
        barrier([&] { ep->progress(); });
        std::printf("rank %d: same key: the message went through\n", rank());
        return;
    }
    if (rank() == 0) {
        std::string what = send_expect_failure(*ep, addr[1], 1000, kLong);
        std::printf("rank 0: other key: %s\n", what.c_str());
        barrier([&] { ep->progress(); });
    } else {
        auto r = post_recv(*ep, 1000, true, 0xBAD, 0, FI_ADDR_UNSPEC);
        barrier([&] { ep->progress(); });
        ep->expect_quiet(0.2, "a receiver whose sender has another key");
        std::printf("rank 1: other key: nothing arrived\n");
    }
    std::string s = close_and_read_stats(ep);
    if (rank() == 1) {
        FT_CHECK(stat_of(s, "bad_job") + stat_of(s, "bad_mac") >= 1,
                 "rank 1 never saw the other job's frames (were they sent?)");
    }
}

}  // namespace

int main(int argc, char** argv) {
    return run_main(argc, argv, {{"overload", 2, case_overload}, {"flood", 2, case_flood},
                                 {"inject", 3, case_inject}, {"auth", 2, case_auth},
                                 {"listen", 2, case_listen}});
}
